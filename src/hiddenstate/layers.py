"""Sequence layers :class:`RNN`, :class:`GRU` and :class:`LSTM`: unroll, stack, both directions, exact BPTT.

The layers follow ``torch.nn.RNN/GRU/LSTM``: same constructor names, same parameter names and
layouts (``weight_ih_l{k}`` (G*H, I_k), ``weight_hh_l{k}`` (G*H, H), ``bias_ih_l{k}``,
``bias_hh_l{k}``, ``..._reverse`` for the backward direction), same shapes in and out:

==========  ==========================================================================
input       ``x`` (T, N, I), or (N, T, I) with ``batch_first=True``, or unbatched (T, I)
h0          (L*D, N, H) (unbatched: (L*D, H)); LSTM: a pair ``(h0, c0)``; None means zeros
            (or the learned initial state when ``learn_h0=True``)
output      (T, N, D*H): the last layer's state at every step, directions concatenated
h_n         (L*D, N, H): every layer's and direction's final state; LSTM: ``(h_n, c_n)``
==========  ==========================================================================

Extras over torch: ``lengths`` (N,) for ragged batches without packing (padding never changes
``h_n``; the backward direction starts at each row's last valid step), a ``reset`` mask (T, N)
that restarts chosen rows from their initial state mid-sequence with no gradient across the
boundary, a learned initial state, and :meth:`backward` with gradients for every parameter,
the input and the initial state.

Equivalent reference loop for one layer and direction (``GRU`` shown)::

    h = h0
    for t in range(T):
        h = cell(x[t], h)        # hiddenstate.GRUCell with the same weights
        output[t] = h

The engine (validation, unrolling over layers and directions, BPTT) is
:class:`hiddenstate.recurrent.RecurrentLayer`; the math of each step is its cell kind's
(:mod:`hiddenstate.cells`), named by the class attribute ``kind``.

Speed (see ``benchmarks/bench_layers.py``): per layer and direction the input projection of all
T steps is one matrix multiply, each step does one product of the (N, H) state with all gates'
recurrent weights (a batched (G, H, H) matmul that writes the gates gate-major; a second
(N, H) x (H, H) product for the Cho-form GRU), and the weight gradients are one product after
the time loop.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.cells import gru, lstm, rnn
from hiddenstate.ragged import reverse_padded
from hiddenstate.recurrent import DirectionalState, RecurrentLayer
from hiddenstate.validation import boolean

__all__ = ["GRU", "LSTM", "RNN", "DirectionalState", "reverse_padded"]


class RNN(RecurrentLayer):
    """Multi-layer Elman RNN ``h_t = act(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)`` (Elman 1990).

    Parameters
    ----------
    input_size : int
        I, features of each input vector.
    hidden_size : int
        H, hidden units per layer and direction.
    num_layers : int, default 1
        L, stacked layers; layer k > 0 reads layer k-1's output (D*H features).
    nonlinearity : {"tanh", "relu", "sigmoid"}, default "tanh"
        ``"sigmoid"``: Elman's (1990) logistic units in [0, 1] (an extension; torch has tanh and relu).
    bias : bool, default True
    batch_first : bool, default False
        Input and output as (N, T, features) instead of (T, N, features).
    bidirectional : bool, default False
        D = 2: a second direction reads each sequence backwards (within its length).
    dropout : float in [0, 1), default 0
        Dropout on every layer's output except the last, in ``forward(training=True)`` only.
    weight_drop : float in [0, 1), default 0
        DropConnect (Wan et al. 2013) on the recurrent weights ``weight_hh_l*``, in
        ``forward(training=True)`` only: each entry is zeroed with this probability and the
        rest scaled by ``1 / (1 - weight_drop)``, one mask per forward call, the same for every
        time step and sequence (the weight-dropped LSTM of Merity, Keskar & Socher 2018,
        "Regularizing and optimizing LSTM language models", Sec. 2). It regularizes the
        recurrent connection, which ``dropout`` leaves alone; ``backward`` returns the gradient
        with respect to the unmasked weights.
    learn_h0 : bool, default False
        Add a trainable initial state ``params["h0"]`` (L*D, H), broadcast over the batch.
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
        Initial weights U(-1/sqrt(H), 1/sqrt(H)) (as PyTorch) and default dropout masks.

    Examples
    --------
    >>> rnn = RNN(10, 20, 2, rng=np.random.default_rng(0))
    >>> out, h_n = rnn(np.ones((5, 3, 10)))
    >>> out.shape, h_n.shape
    ((5, 3, 20), (2, 3, 20))
    """

    kind = rnn.KIND

    def __init__(self, input_size, hidden_size, num_layers=1, *, nonlinearity="tanh", bias=True, batch_first=False,
                 bidirectional=False, dropout=0.0, weight_drop=0.0, learn_h0=False, dtype=np.float64, rng=None):
        if nonlinearity not in rnn.NONLINEARITIES:
            raise ValueError(f"nonlinearity must be one of {rnn.NONLINEARITIES}; got {nonlinearity!r}.")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias=bias, batch_first=batch_first,
                         bidirectional=bidirectional, dropout=dropout, weight_drop=weight_drop, learn_h0=learn_h0,
                         dtype=dtype, rng=rng)


class GRU(RecurrentLayer):
    """Multi-layer gated recurrent unit (Cho et al. 2014); see :class:`hiddenstate.GRUCell` for the equations.

    Parameters are those of :class:`RNN` (no ``nonlinearity``) plus

    reset_after : bool, default False
        False: the paper's candidate ``tanh(W_in x + b_in + W_hn (r * h) + b_hn)`` (the seeds'
        form; Keras ``reset_after=False``). True: ``tanh(W_in x + b_in + r * (W_hn h + b_hn))``,
        identical to ``torch.nn.GRU``.

    Parameter rows are in gate order r, z, n: ``weight_ih_l0`` (3H, I), ``weight_hh_l0`` (3H, H).
    """

    kind = gru.KIND

    def __init__(self, input_size, hidden_size, num_layers=1, *, bias=True, batch_first=False, reset_after=False,
                 bidirectional=False, dropout=0.0, weight_drop=0.0, learn_h0=False, dtype=np.float64, rng=None):
        self.reset_after = boolean("reset_after", reset_after)
        super().__init__(input_size, hidden_size, num_layers, bias=bias, batch_first=batch_first,
                         bidirectional=bidirectional, dropout=dropout, weight_drop=weight_drop, learn_h0=learn_h0,
                         dtype=dtype, rng=rng)


class LSTM(RecurrentLayer):
    """Multi-layer LSTM (Hochreiter & Schmidhuber 1997); see :class:`hiddenstate.LSTMCell` for the equations.

    Parameters are those of :class:`RNN` (no ``nonlinearity``). The state is a pair: ``h0`` is
    ``(h0, c0)`` and the result ``(output, (h_n, c_n))``; with ``learn_h0=True`` both ``h0`` and
    ``c0`` are parameters. Parameter rows are in gate order i, f, g, o (4H rows).
    """

    kind = lstm.KIND
