"""Sequence layers :class:`RNN`, :class:`GRU`, :class:`LSTM`, :class:`MinGRU`, :class:`MinLSTM`: unroll, stack, both directions, exact BPTT.

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
:class:`hiddenstate.classic.recurrent.RecurrentLayer`; the math of each step is its cell kind's
(:mod:`hiddenstate.classic.cells`), named by the class attribute ``kind``.

Speed (see ``benchmarks/bench_layers.py``): per layer and direction the input projection of all
T steps is one matrix multiply, each step does one product of the (N, H) state with all gates'
recurrent weights (a batched (G, H, H) matmul that writes the gates gate-major; a second
(N, H) x (H, H) product for the Cho-form GRU), and the weight gradients are one product after
the time loop.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.classic.cells import gru, lstm, mingru, minlstm, rnn
from hiddenstate.classic.prepared import DirectionalState
from hiddenstate.classic.recurrent import RecurrentLayer
from hiddenstate.core.ragged import reverse_padded
from hiddenstate.core.validation import boolean, choice

__all__ = ["BY_KIND", "GRU", "LSTM", "RNN", "DirectionalState", "reverse_padded"]


class RNN(RecurrentLayer):
    """Multi-layer Elman RNN ``h_t = act(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)`` (Elman 1990).

    Equivalent to ``torch.nn.RNN`` with the same weights (for tanh and relu). Every layer ``k``
    and direction runs ``h_t = act(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)`` over its input
    ``x_t`` (for k > 0 the previous layer's output at step t).

    Parameters
    ----------
    input_size : int
        I, features of each input vector (layer 0 reads I_0 = I features, layer k > 0 reads
        I_k = D*H: the previous layer's output, directions concatenated).
    hidden_size : int
        H, hidden units per layer and direction.
    num_layers : int, default 1
        L, stacked layers; layer k > 0 reads layer k-1's output (D*H features).
    nonlinearity : {"tanh", "relu", "sigmoid"}, default "tanh"
        ``act``. ``"sigmoid"``: Elman's (1990) logistic units in [0, 1] (an extension; torch has
        tanh and relu).
    bias : bool, default True
        Whether the biases ``bias_ih_l{k}`` and ``bias_hh_l{k}`` (H,) exist.
    batch_first : bool, default False
        Input and output as (N, T, features) instead of (T, N, features); states are
        (L*D, N, H) either way.
    bidirectional : bool, default False
        D = 2: a second direction reads each sequence backwards (within its length), with its
        own parameters (suffix ``_reverse``).
    dropout : float in [0, 1), default 0
        Inverted dropout on every layer's output except the last (scaled by
        ``1 / (1 - dropout)``), in ``forward(training=True)`` only; no effect when L = 1.
    weight_drop : float in [0, 1), default 0
        DropConnect (Wan et al. 2013) on the recurrent weights ``weight_hh_l*``, in
        ``forward(training=True)`` only: each entry is zeroed with this probability and the
        rest scaled by ``1 / (1 - weight_drop)``, one mask per forward call, the same for every
        time step and sequence (the weight-dropped LSTM of Merity, Keskar & Socher 2018,
        "Regularizing and optimizing LSTM language models", Sec. 2). It regularizes the
        recurrent connection, which ``dropout`` leaves alone; ``backward`` returns the gradient
        with respect to the unmasked weights.
    learn_h0 : bool, default False
        Add a trainable initial state ``params["h0"]`` (L*D, H), initialised to zeros and
        broadcast over the batch whenever ``h0`` is None.
    dtype : {float64, float32}, default float64
        Dtype of the parameters and of every result; inputs are cast to it.
    rng : numpy.random.Generator, optional
        Draws the initial weights and biases from U(-1/sqrt(H), 1/sqrt(H)) (as PyTorch) and,
        by default, the dropout and DropConnect masks. None: a fresh unseeded generator.

    Attributes
    ----------
    params : dict of str to ndarray
        The parameters by torch's names, for every layer ``k`` in ``0 .. L-1`` and (when
        bidirectional) with the suffix ``_reverse`` for the backward direction:
        ``weight_ih_l{k}`` (H, I_k), ``weight_hh_l{k}`` (H, H), and with ``bias``
        ``bias_ih_l{k}`` (H,), ``bias_hh_l{k}`` (H,) (G = 1); with ``learn_h0`` ``h0``
        (L*D, H). ``state_dict()`` copies them, ``backward`` returns gradients with the same
        keys.
    kind : CellKind
        ``hiddenstate.classic.cells.KINDS["rnn"]`` (a class attribute): the gate blocks, kernels and
        step Jacobian of this layer.
    num_directions : int
        D, 2 if ``bidirectional`` else 1.
    nonlinearity : str
        The activation.
    input_size, hidden_size, num_layers, bias, batch_first, bidirectional, dropout, weight_drop, learn_h0, dtype
        The validated constructor arguments (``dtype`` as a ``numpy.dtype``).

    Raises
    ------
    TypeError
        A size that is not an integer, a flag that is not a bool, a dtype other than
        float32/float64, an ``rng`` that is not a ``numpy.random.Generator``.
    ValueError
        A size that is not positive; ``dropout`` or ``weight_drop`` outside [0, 1) or not a
        number; ``nonlinearity`` not one of the three.

    Notes
    -----
    Inputs and outputs of ``output, h_n = layer(x, h0)`` (see :meth:`forward`):

    ==========  ====================================================================
    ``x``       (T, N, I), (N, T, I) with ``batch_first=True``, or unbatched (T, I)
    ``h0``      (L*D, N, H) (unbatched: (L*D, H)); None: zeros (or the learned ``h0``)
    ``output``  (T, N, D*H) (batch_first: (N, T, D*H); unbatched: (T, D*H)): the
                last layer's state at every step, directions concatenated
    ``h_n``     (L*D, N, H) (unbatched: (L*D, H)): every layer's and direction's
                final state, layer ``k`` and direction ``d`` at index ``k * D + d``
    ==========  ====================================================================

    The extras over torch (``lengths``, ``reset``, ``training``) are described on :meth:`forward`.

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
        if not isinstance(nonlinearity, str) or nonlinearity not in rnn.NONLINEARITIES:  # an array has no truth value
            raise ValueError(f"nonlinearity must be one of {rnn.NONLINEARITIES}; got {nonlinearity!r}.")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias=bias, batch_first=batch_first,
                         bidirectional=bidirectional, dropout=dropout, weight_drop=weight_drop, learn_h0=learn_h0,
                         dtype=dtype, rng=rng)


class GRU(RecurrentLayer):
    """Multi-layer gated recurrent unit (Cho et al. 2014), PyTorch parameter layout.

    Every layer and direction runs, with gates in row order r, z, n
    (Cho et al. 2014, Eqs. 5-8)::

        r_t = sigmoid(W_ir x_t + b_ir + W_hr h_{t-1} + b_hr)
        z_t = sigmoid(W_iz x_t + b_iz + W_hz h_{t-1} + b_hz)
        n_t = tanh(W_in x_t + b_in + W_hn (r_t * h_{t-1}) + b_hn)     reset_after=False
        n_t = tanh(W_in x_t + b_in + r_t * (W_hn h_{t-1} + b_hn))     reset_after=True
        h_t = z_t * h_{t-1} + (1 - z_t) * n_t

    With ``reset_after=True`` equivalent to ``torch.nn.GRU`` with the same weights.

    Parameters
    ----------
    input_size : int
        I, features of each input vector (layer 0 reads I_0 = I features, layer k > 0 reads
        I_k = D*H: the previous layer's output, directions concatenated).
    hidden_size : int
        H, hidden units per layer and direction.
    num_layers : int, default 1
        L, stacked layers; layer k > 0 reads layer k-1's output (D*H features).
    bias : bool, default True
        Whether the biases ``bias_ih_l{k}`` and ``bias_hh_l{k}`` (3H,) exist.
    batch_first : bool, default False
        Input and output as (N, T, features) instead of (T, N, features); states are
        (L*D, N, H) either way.
    reset_after : bool, default False
        False: the paper's candidate ``tanh(W_in x + b_in + W_hn (r * h) + b_hn)`` (Cho et al.
        2014, Eq. 8; the form of :func:`hiddenstate.classic.textbook.gru_step`; Keras
        ``reset_after=False``). True: ``tanh(W_in x + b_in + r * (W_hn h + b_hn))``, identical to
        ``torch.nn.GRU`` and cuDNN.
    bidirectional : bool, default False
        D = 2: a second direction reads each sequence backwards (within its length), with its
        own parameters (suffix ``_reverse``).
    dropout : float in [0, 1), default 0
        Inverted dropout on every layer's output except the last (scaled by
        ``1 / (1 - dropout)``), in ``forward(training=True)`` only; no effect when L = 1.
    weight_drop : float in [0, 1), default 0
        DropConnect (Wan et al. 2013) on the recurrent weights ``weight_hh_l*``, in
        ``forward(training=True)`` only: each entry is zeroed with this probability and the
        rest scaled by ``1 / (1 - weight_drop)``, one mask per forward call, the same for every
        time step and sequence (the weight-dropped LSTM of Merity, Keskar & Socher 2018,
        "Regularizing and optimizing LSTM language models", Sec. 2). It regularizes the
        recurrent connection, which ``dropout`` leaves alone; ``backward`` returns the gradient
        with respect to the unmasked weights.
    learn_h0 : bool, default False
        Add a trainable initial state ``params["h0"]`` (L*D, H), initialised to zeros and
        broadcast over the batch whenever ``h0`` is None.
    dtype : {float64, float32}, default float64
        Dtype of the parameters and of every result; inputs are cast to it.
    rng : numpy.random.Generator, optional
        Draws the initial weights and biases from U(-1/sqrt(H), 1/sqrt(H)) (as PyTorch) and,
        by default, the dropout and DropConnect masks. None: a fresh unseeded generator.

    Attributes
    ----------
    params : dict of str to ndarray
        The parameters by torch's names, for every layer ``k`` in ``0 .. L-1`` and (when
        bidirectional) with the suffix ``_reverse`` for the backward direction:
        ``weight_ih_l{k}`` (3H, I_k), ``weight_hh_l{k}`` (3H, H), and with ``bias``
        ``bias_ih_l{k}`` (3H,), ``bias_hh_l{k}`` (3H,), row blocks in gate order r, z, n
        (``W_ir``, ``W_iz``, ``W_in`` stacked); with ``learn_h0`` ``h0`` (L*D, H).
        ``state_dict()`` copies them, ``backward`` returns gradients with the same keys.
    kind : CellKind
        ``hiddenstate.classic.cells.KINDS["gru"]`` (a class attribute): the gate blocks, kernels and
        step Jacobian of this layer.
    num_directions : int
        D, 2 if ``bidirectional`` else 1.
    reset_after : bool
        The form of the candidate.
    input_size, hidden_size, num_layers, bias, batch_first, bidirectional, dropout, weight_drop, learn_h0, dtype
        The validated constructor arguments (``dtype`` as a ``numpy.dtype``).

    Raises
    ------
    TypeError
        A size that is not an integer, a flag (``reset_after`` included) that is not a bool, a
        dtype other than float32/float64, an ``rng`` that is not a ``numpy.random.Generator``.
    ValueError
        A size that is not positive; ``dropout`` or ``weight_drop`` outside [0, 1) or not a
        number.

    Notes
    -----
    Inputs and outputs of ``output, h_n = layer(x, h0)`` (see :meth:`forward`):

    ==========  ====================================================================
    ``x``       (T, N, I), (N, T, I) with ``batch_first=True``, or unbatched (T, I)
    ``h0``      (L*D, N, H) (unbatched: (L*D, H)); None: zeros (or the learned ``h0``)
    ``output``  (T, N, D*H) (batch_first: (N, T, D*H); unbatched: (T, D*H)): the
                last layer's state at every step, directions concatenated
    ``h_n``     (L*D, N, H) (unbatched: (L*D, H)): every layer's and direction's
                final state, layer ``k`` and direction ``d`` at index ``k * D + d``
    ==========  ====================================================================

    The extras over torch (``lengths``, ``reset``, ``training``) are described on :meth:`forward`.
    One step of one layer is :class:`hiddenstate.GRUCell` with the same weights.

    Examples
    --------
    >>> gru = GRU(10, 20, bidirectional=True, rng=np.random.default_rng(0))
    >>> out, h_n = gru(np.ones((5, 3, 10)))
    >>> out.shape, h_n.shape
    ((5, 3, 40), (2, 3, 20))
    """

    kind = gru.KIND

    def __init__(self, input_size, hidden_size, num_layers=1, *, bias=True, batch_first=False, reset_after=False,
                 bidirectional=False, dropout=0.0, weight_drop=0.0, learn_h0=False, dtype=np.float64, rng=None):
        self.reset_after = boolean("reset_after", reset_after)
        super().__init__(input_size, hidden_size, num_layers, bias=bias, batch_first=batch_first,
                         bidirectional=bidirectional, dropout=dropout, weight_drop=weight_drop, learn_h0=learn_h0,
                         dtype=dtype, rng=rng)


class LSTM(RecurrentLayer):
    """Multi-layer LSTM (Hochreiter & Schmidhuber 1997; forget gate of Gers et al. 2000), PyTorch layout.

    Every layer and direction runs, with gates in row order i, f, g, o::

        i_t = sigmoid(W_ii x_t + b_ii + W_hi h_{t-1} + b_hi)
        f_t = sigmoid(W_if x_t + b_if + W_hf h_{t-1} + b_hf)
        g_t = tanh(W_ig x_t + b_ig + W_hg h_{t-1} + b_hg)
        o_t = sigmoid(W_io x_t + b_io + W_ho h_{t-1} + b_ho)
        c_t = f_t * c_{t-1} + i_t * g_t
        h_t = o_t * tanh(c_t)

    Equivalent to ``torch.nn.LSTM`` with the same weights. The state is a pair ``(h, c)``.

    Parameters
    ----------
    input_size : int
        I, features of each input vector (layer 0 reads I_0 = I features, layer k > 0 reads
        I_k = D*H: the previous layer's output, directions concatenated).
    hidden_size : int
        H, hidden units per layer and direction.
    num_layers : int, default 1
        L, stacked layers; layer k > 0 reads layer k-1's output (D*H features).
    bias : bool, default True
        Whether the biases ``bias_ih_l{k}`` and ``bias_hh_l{k}`` (4H,) exist.
    batch_first : bool, default False
        Input and output as (N, T, features) instead of (T, N, features); states are
        (L*D, N, H) either way.
    bidirectional : bool, default False
        D = 2: a second direction reads each sequence backwards (within its length), with its
        own parameters (suffix ``_reverse``).
    dropout : float in [0, 1), default 0
        Inverted dropout on every layer's output except the last (scaled by
        ``1 / (1 - dropout)``), in ``forward(training=True)`` only; no effect when L = 1.
    weight_drop : float in [0, 1), default 0
        DropConnect (Wan et al. 2013) on the recurrent weights ``weight_hh_l*``, in
        ``forward(training=True)`` only: each entry is zeroed with this probability and the
        rest scaled by ``1 / (1 - weight_drop)``, one mask per forward call, the same for every
        time step and sequence (the weight-dropped LSTM of Merity, Keskar & Socher 2018,
        "Regularizing and optimizing LSTM language models", Sec. 2). It regularizes the
        recurrent connection, which ``dropout`` leaves alone; ``backward`` returns the gradient
        with respect to the unmasked weights.
    learn_h0 : bool, default False
        Add a trainable initial state ``params["h0"]`` and ``params["c0"]``, each (L*D, H),
        initialised to zeros and broadcast over the batch for whichever part of the state is
        not given (``h0=None`` or ``(h0, None)``).
    dtype : {float64, float32}, default float64
        Dtype of the parameters and of every result; inputs are cast to it.
    rng : numpy.random.Generator, optional
        Draws the initial weights and biases from U(-1/sqrt(H), 1/sqrt(H)) (as PyTorch) and,
        by default, the dropout and DropConnect masks. None: a fresh unseeded generator.

    Attributes
    ----------
    params : dict of str to ndarray
        The parameters by torch's names, for every layer ``k`` in ``0 .. L-1`` and (when
        bidirectional) with the suffix ``_reverse`` for the backward direction:
        ``weight_ih_l{k}`` (4H, I_k), ``weight_hh_l{k}`` (4H, H), and with ``bias``
        ``bias_ih_l{k}`` (4H,), ``bias_hh_l{k}`` (4H,), row blocks in gate order i, f, g, o
        (``W_ii``, ``W_if``, ``W_ig``, ``W_io`` stacked); with ``learn_h0`` ``h0`` and ``c0``,
        each (L*D, H). ``state_dict()`` copies them, ``backward`` returns gradients with the
        same keys.
    kind : CellKind
        ``hiddenstate.classic.cells.KINDS["lstm"]`` (a class attribute): the gate blocks, kernels and
        step Jacobian of this layer.
    num_directions : int
        D, 2 if ``bidirectional`` else 1.
    input_size, hidden_size, num_layers, bias, batch_first, bidirectional, dropout, weight_drop, learn_h0, dtype
        The validated constructor arguments (``dtype`` as a ``numpy.dtype``).

    Raises
    ------
    TypeError
        A size that is not an integer, a flag that is not a bool, a dtype other than
        float32/float64, an ``rng`` that is not a ``numpy.random.Generator``.
    ValueError
        A size that is not positive; ``dropout`` or ``weight_drop`` outside [0, 1) or not a
        number.

    Notes
    -----
    Inputs and outputs of ``output, h_n = layer(x, h0)`` (see :meth:`forward`):

    ==========  ====================================================================
    ``x``       (T, N, I), (N, T, I) with ``batch_first=True``, or unbatched (T, I)
    ``h0``      a pair ``(h0, c0)``, each (L*D, N, H) (unbatched: (L*D, H)); None:
                zeros (or the learned ``h0``, ``c0``)
    ``output``  (T, N, D*H) (batch_first: (N, T, D*H); unbatched: (T, D*H)): the
                last layer's hidden state ``h`` at every step, directions concatenated
    ``h_n``     a pair ``(h_n, c_n)``, each (L*D, N, H) (unbatched: (L*D, H)): every
                layer's and direction's final state, layer ``k`` and direction ``d`` at
                index ``k * D + d``
    ==========  ====================================================================

    The extras over torch (``lengths``, ``reset``, ``training``) are described on :meth:`forward`.
    One step of one layer is :class:`hiddenstate.LSTMCell` with the same weights.

    Examples
    --------
    >>> lstm = LSTM(10, 20, 2, rng=np.random.default_rng(0))
    >>> out, (h_n, c_n) = lstm(np.ones((5, 3, 10)))
    >>> out.shape, h_n.shape, c_n.shape
    ((5, 3, 20), (2, 3, 20), (2, 3, 20))
    """

    kind = lstm.KIND


class _LinearRecurrence(RecurrentLayer):
    """The constructor shared by :class:`MinGRU` and :class:`MinLSTM` (no recurrent weights)."""

    def __init__(self, input_size, hidden_size, num_layers=1, *, log_space=False, scan="parallel", bias=True,
                 batch_first=False, bidirectional=False, dropout=0.0, learn_h0=False, dtype=np.float64, rng=None):
        self.log_space = boolean("log_space", log_space)
        self.scan = choice("scan", scan, mingru.SCANS)
        super().__init__(input_size, hidden_size, num_layers, bias=bias, batch_first=batch_first,
                         bidirectional=bidirectional, dropout=dropout, learn_h0=learn_h0, dtype=dtype, rng=rng)


_MIN_PARAMETERS = """
    Parameters
    ----------
    input_size : int
        I, features of each input vector (layer k > 0 reads I_k = D*H).
    hidden_size : int
        H, hidden units per layer and direction.
    num_layers : int, default 1
        L, stacked layers; layer k > 0 reads layer k-1's output (D*H features).
    log_space : bool, default False
        The paper's log-space form (App. B.3): candidate ``g(W_h x + b_h)`` with
        ``g(p) = p + 1/2`` (p >= 0) or ``sigmoid(p)``, always positive, and a parallel scan of
        log pairs. False: the plain form ``h~ = W_h x + b_h``.
    scan : {"parallel", "sequential"}, default "parallel"
        ``"parallel"``: a chunked scan over time (no Python loop over the steps of a chunk);
        ``"sequential"``: the per-step loop (the streaming reference). Same results to rounding.
    bias : bool, default True
        Whether ``bias_ih_l{k}`` exists.
    batch_first : bool, default False
        Input and output as (N, T, features) instead of (T, N, features).
    bidirectional : bool, default False
        D = 2: a second direction (suffix ``_reverse``) reads each sequence backwards.
    dropout : float in [0, 1), default 0
        Inverted dropout on every layer's output except the last, in ``forward(training=True)``.
    learn_h0 : bool, default False
        Add a trainable initial state ``params["h0"]`` (L*D, H), initialised to zeros.
    dtype : {float64, float32}, default float64
        Dtype of the parameters and of every result.
    rng : numpy.random.Generator, optional
        Draws the initial weights from U(-1/sqrt(H), 1/sqrt(H)) and the dropout masks.

    Attributes
    ----------
    params : dict of str to ndarray
        ``weight_ih_l{k}`` (G*H, I_k) and ``bias_ih_l{k}`` (G*H,) (``_reverse`` for the backward
        direction), ``h0`` with ``learn_h0``; no ``weight_hh``/``bias_hh``: the gates read the
        input only.
    kind : CellKind
        The class attribute naming the kernels (``CellKind.recurrent`` is False).
    log_space, scan : bool, str
        The options above.

    Raises
    ------
    TypeError
        A size that is not an integer, a flag that is not a bool, a dtype other than
        float32/float64, an ``rng`` that is not a ``numpy.random.Generator``.
    ValueError
        A size that is not positive, ``dropout`` outside [0, 1), an unknown ``scan``.

    Notes
    -----
    Inputs, outputs, ``lengths``, ``reset``, ``learn_h0`` and ``backward`` are those of
    :class:`GRU` (see :meth:`forward`). Feng, Tung, Ahmed, Bengio and Hajimirsadeghi (2024),
    "Were RNNs all we needed?", arXiv:2410.01201.
"""


class MinGRU(_LinearRecurrence):
    __doc__ = """Multi-layer minGRU (Feng et al. 2024): a GRU whose gate and candidate read the input only.

    Every layer and direction runs, with ``weight_ih`` = [W_z; W_h] (row blocks z, h; G = 2)::

        z_t  = sigmoid(W_z x_t + b_z)          the paper's z: weights the candidate
        h~_t = W_h x_t + b_h                   (log_space: g(W_h x_t + b_h))
        h_t  = (1 - z_t) * h_{t-1} + z_t * h~_t

    that is ``hidden_state_update(keep, h_{t-1}, h~)`` with the keep gate ``keep = 1 - z`` (the
    seeds' z), a linear recurrence computed by a scan (:mod:`hiddenstate.classic.cells.mingru`).
    """ + _MIN_PARAMETERS + """
    Examples
    --------
    >>> layer = MinGRU(10, 20, 2, rng=np.random.default_rng(0))
    >>> out, h_n = layer(np.ones((5, 3, 10)))
    >>> out.shape, h_n.shape
    ((5, 3, 20), (2, 3, 20))
    """

    kind = mingru.KIND


class MinLSTM(_LinearRecurrence):
    __doc__ = """Multi-layer minLSTM (Feng et al. 2024): normalised forget and input gates from the input only.

    Every layer and direction runs, with ``weight_ih`` = [W_f; W_i; W_h] (row blocks f, i, h; G = 3)::

        f_t, i_t = sigmoid(W_f x_t + b_f), sigmoid(W_i x_t + b_i)
        f'_t = f_t / (f_t + i_t)               the keep gate; i'_t = 1 - f'_t
        h~_t = W_h x_t + b_h                   (log_space: g(W_h x_t + b_h))
        h_t  = f'_t * h_{t-1} + i'_t * h~_t

    a linear recurrence computed by a scan (:mod:`hiddenstate.classic.cells.minlstm`). The state is
    ``h`` alone.
    """ + _MIN_PARAMETERS + """
    Examples
    --------
    >>> layer = MinLSTM(10, 20, bidirectional=True, rng=np.random.default_rng(0))
    >>> out, h_n = layer(np.ones((5, 3, 10)))
    >>> out.shape, h_n.shape
    ((5, 3, 40), (2, 3, 20))
    """

    kind = minlstm.KIND


#: The sequence layer of every cell kind, by the kind's name (a new kind adds its layer here).
BY_KIND = {cls.kind.name: cls for cls in (RNN, GRU, LSTM, MinGRU, MinLSTM)}
