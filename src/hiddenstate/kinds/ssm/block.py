"""What the two selective state space blocks share: :class:`SelectiveSSMBlock`, the base of Mamba and Mamba-2.

:class:`~hiddenstate.kinds.ssm.mamba.Mamba` (Gu & Dao 2023) and :class:`~hiddenstate.kinds.ssm.mamba2.Mamba2`
(Dao & Gu 2024) are :class:`~hiddenstate.shared.seqblock.SequenceBlock` s with the same two states
(a :class:`~hiddenstate.state.MambaState` ``(ssm, conv)``), the same kernel contract
(``scan_forward``, ``scan_backward``, ``recorded`` of :mod:`hiddenstate.kinds.ssm.mamba_kernel` and
:mod:`hiddenstate.kinds.ssm.mamba2_kernel`), the same initialisation of their projections and step sizes,
and one way to refuse or run an input of another array library. Each block keeps its own
options, parameter shapes and its call of ``scan_forward``.
"""

from __future__ import annotations

import math

import numpy as np

from hiddenstate.core.validation import boolean
from hiddenstate.shared.seqblock import SequenceBlock
from hiddenstate.state import MambaState
from hiddenstate.xp.arrays import is_foreign

__all__ = ["SelectiveSSMBlock", "dt_bias_init", "linear_init"]


def linear_init(rng, out_f, in_f, dtype):
    """A linear layer's weight drawn as torch's ``nn.Linear``: U(-1/sqrt(in_f), 1/sqrt(in_f)).

    Parameters
    ----------
    rng : numpy.random.Generator
    out_f, in_f : int
        The layer's outputs and inputs.
    dtype : {float32, float64}

    Returns
    -------
    ndarray of shape (out_f, in_f)
    """
    k = 1.0 / math.sqrt(in_f)
    return rng.uniform(-k, k, size=(out_f, in_f)).astype(dtype)


def dt_bias_init(rng, n):
    """The step sizes' bias as transformers' Mamba mixers draw it: ``softplus^-1(dt)``, ``dt`` log-uniform in [0.001, 0.1].

    Parameters
    ----------
    rng : numpy.random.Generator
    n : int
        How many step sizes (Di for Mamba, H for Mamba-2).

    Returns
    -------
    ndarray of shape (n,), float64
        ``dt + log(-expm1(-dt))`` with ``dt`` clipped below at 1e-4.
    """
    dt = np.exp(rng.uniform(size=n) * (math.log(0.1) - math.log(0.001)) + math.log(0.001)).clip(1e-4)
    return dt + np.log(-np.expm1(-dt))


class SelectiveSSMBlock(SequenceBlock):
    """Base class of :class:`~hiddenstate.Mamba` and :class:`~hiddenstate.Mamba2`: ``out, state_n = block(u, state)``.

    A subclass sets ``kernel`` (the module of its kernels: ``scan_forward``, ``scan_backward``,
    ``recorded``) and ``xp_path`` (the module of its array-API forward and backward, or None),
    and implements ``shapes()``, ``_state_shapes(N)`` and ``_forward(p, x, states, lengths, reset)``;
    :class:`~hiddenstate.shared.seqblock.SequenceBlock` validates the inputs and runs them.
    """

    state_type = MambaState
    kernel = None
    xp_path = None

    def _state_kind(self, name):
        return "a pair (d_ssm, d_conv)" if name == "d_state_n" else "a pair (ssm, conv) (a MambaState)"

    def _backward(self, kc, d_out, d_final):
        return self.kernel.scan_backward(kc, d_out, d_final)

    def _recorded(self, kc):
        return self.kernel.recorded(kc)

    def forward(self, u, state=None, *, lengths=None, reset=None, record=False):
        """Run the block over a sequence and keep what :meth:`backward` needs.

        Parameters
        ----------
        u : ndarray of shape (T, N, M), or (N, T, M) with ``batch_first``
            The input; cast to the layer's dtype. For Mamba a torch tensor or CuPy array runs in
            its own library (:func:`hiddenstate.kinds.ssm.reference.forward`); Mamba-2 refuses one.
        state : MambaState or pair (ssm, conv), optional
            The initial states (Mamba: ``ssm`` (N, Di, S), ``conv`` (N, Di, K-1); Mamba-2: ``ssm``
            (N, H, P, S), ``conv`` (N, Dc, K-1)); None, or a None part: zeros. Pass the previous
            call's ``state_n`` to carry it.
        lengths : array_like of int, shape (N,), optional
            Mamba only: valid steps of each row of a right-padded batch, each in [0, T]: outputs
            past a row's length are 0 and ``state_n`` is its state at its own last valid step (a
            length-0 row keeps its initial states).
        reset : ndarray of bool, shape (T, N) ((N, T) with ``batch_first``), optional
            Mamba only: where ``reset[t, n]`` is True, row n starts step t from its initial
            states (both the SSM state and the convolution's inputs) instead of its previous
            ones, and no gradient flows back across that boundary (ignored on padded steps).
        record : bool, default False
            Also return every step's states and selective parameters.

        Returns
        -------
        out : ndarray shaped like ``u``
        state_n : MambaState
            The final SSM state and conv state (the shapes of ``state``).
        cache : BlockCache or MambaXPCache
            Pass it to :meth:`backward` (a :class:`~hiddenstate.kinds.ssm.reference.MambaXPCache` for an
            array of another library: its call is computed in that library, on its device).
        record : MambaRecord or Mamba2Record
            Only with ``record=True``: time-major arrays (T, N, ...), whatever ``batch_first``.

        Raises
        ------
        ValueError
            ``u`` not of shape (T, N, M), a state of another shape, NaN/Inf, lengths out of range,
            ``lengths`` or ``reset`` for Mamba-2, ``record=True`` for an array of another library.
        TypeError
            Non-float input, a state that is not a pair, a non-bool ``record``, non-integer lengths,
            a non-bool ``reset``, an array of another library for Mamba-2.
        """
        record = boolean("record", record)
        if is_foreign(u):  # a torch tensor, a CuPy array, ...: the reference step in its library
            name = type(self).__name__
            if self.xp_path is None:
                raise TypeError(f"u must be a NumPy array for {name} (only Mamba has the array-API path); got "
                                f"{type(u).__name__}. Convert it with .numpy() (on the CPU) first.")
            if record:
                raise ValueError("record must be False for an input of another array library (the array-API path "
                                 "keeps no record); got True. Pass a NumPy array to record every step.")
            return self.xp_path.forward(self, u, state, lengths=lengths, reset=reset)
        return super().forward(u, state, lengths=lengths, reset=reset, record=record)

    def backward(self, cache, d_out, d_state_n=None):
        """Exact BPTT through one :meth:`forward` call.

        Parameters
        ----------
        cache : BlockCache or MambaXPCache
            From this layer's :meth:`forward` (a cache of another library's arrays is differentiated
            in that library by :func:`hiddenstate.kinds.ssm.reference.backward`: every result is an array of it).
        d_out : ndarray shaped like that call's output, or None
            Gradient of the loss with respect to the output (None: zeros).
        d_state_n : pair (d_ssm, d_conv), optional
            Gradient with respect to the final states (either part None), shaped like them.

        Returns
        -------
        grads : dict of str to ndarray
            Same keys and shapes as :attr:`params`.
        d_u : ndarray shaped like the input
        d_state : MambaState
            ``d_h0`` and ``d_conv0``, shaped like the initial states.

        Raises
        ------
        TypeError
            A cache from something else, a ``d_state_n`` that is not a pair.
        ValueError
            A cache of another layer, gradients of the wrong shape or with NaN/Inf.
        """
        if self.xp_path is not None and isinstance(cache, self.xp_path.MambaXPCache):
            return self.xp_path.backward(self, cache, d_out, d_state_n)
        return super().backward(cache, d_out, d_state_n)
