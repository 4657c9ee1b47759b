"""LFM2's gated short convolution with its window in the open: :class:`ShortConv`.

:class:`ShortConv` is the convolution block of LFM2 (Liquid AI 2025) in the parameter names and
layouts of transformers' ``Lfm2ShortConv`` (``in_proj.weight`` (3 M, M), ``conv.weight``
(M, 1, K), ``out_proj.weight`` (M, M), and with ``bias`` the three biases), so a state dict maps
1:1: ``B, C, x = in_proj(u)``, ``out = out_proj(C * conv(B * x))`` (see
:mod:`hiddenstate.kinds.shortconv.kernel`).

==============  ===========================================================================
state           a :class:`ShortConvState` ``(conv (N, M, K-1))``: the last K - 1 values of
                ``B * x``, oldest first; an input (None: zeros) and an output
every step      ``forward(..., record=True)``: every step's window and the gates B, C and x
                (:class:`ShortConvRecord`)
gradients       :meth:`ShortConv.backward`: every parameter, the input, ``d_conv0``
carry           two chunks give what one long call gives (transformers' decoding path)
lengths         right-padded batches; ``reset`` is refused
==============  ===========================================================================
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from hiddenstate.core.validation import boolean, float_dtype, generator, positive_int
from hiddenstate.kinds.shortconv import kernel
from hiddenstate.shared.seqblock import SequenceBlock

__all__ = ["ShortConv", "ShortConvRecord", "ShortConvState"]


class ShortConvState(NamedTuple):
    """The state of a short convolution block.

    Attributes
    ----------
    conv : ndarray of shape (N, M, K-1)
        The last K - 1 inputs of the convolution (``B * x``), oldest first.
    """

    conv: np.ndarray


class ShortConvRecord(NamedTuple):
    """Every step of a short convolution block (time-major).

    Attributes
    ----------
    conv : ndarray of shape (T, N, M, K-1)
        The window after each step.
    B, C, x : ndarray of shape (T, N, M)
        The input gate, the output gate and the value of every step.
    """

    conv: np.ndarray
    B: np.ndarray
    C: np.ndarray
    x: np.ndarray


class ShortConv(SequenceBlock):
    """LFM2's gated short convolution (Liquid AI 2025): ``out, state_n = block(u, state)``.

    Equivalent to transformers' ``Lfm2ShortConv`` with the same weights.

    Parameters
    ----------
    hidden_size : int
        M, features in and out (and channels of the convolution).
    kernel_size : int, default 3
        K, the taps of the convolution (transformers' ``conv_L_cache``).
    bias : bool, default False
        Whether ``in_proj.bias`` (3 M,), ``conv.bias`` (M,) and ``out_proj.bias`` (M,) exist
        (``conv_bias``).
    batch_first : bool, default False
        Input and output as (N, T, M) instead of (T, N, M).
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
        Draws the weights: the projections normal with standard deviation 0.02 (transformers'
        ``initializer_range``), the taps U(-1/sqrt(K), 1/sqrt(K)) (torch's ``Conv1d``), zero biases.

    Attributes
    ----------
    params : dict of str to ndarray
        ``in_proj.weight`` (3 M, M), ``conv.weight`` (M, 1, K), ``out_proj.weight`` (M, M) (and
        the biases).

    Raises
    ------
    TypeError, ValueError
        A size that is not a positive integer, a flag that is not a bool, a dtype other than
        float32/float64.
    """

    state_type = ShortConvState
    supports = frozenset({"lengths"})

    def __init__(self, hidden_size, *, kernel_size=3, bias=False, batch_first=False, dtype=np.float64, rng=None):
        self.d_model = positive_int("hidden_size", hidden_size)
        self.kernel_size = positive_int("kernel_size", kernel_size)
        self.bias = boolean("bias", bias)
        self.batch_first = boolean("batch_first", batch_first)
        self.dtype = float_dtype("dtype", dtype)
        rng = generator(rng)
        self._check_sizes(hidden_size=self.d_model, kernel_size=self.kernel_size)
        M, K = self.d_model, self.kernel_size
        k = 1.0 / math.sqrt(K)
        p = {"conv.weight": rng.uniform(-k, k, size=(M, 1, K)).astype(self.dtype)}
        if self.bias:
            p["conv.bias"] = np.zeros(M, self.dtype)
        p["in_proj.weight"] = (0.02 * rng.standard_normal((3 * M, M))).astype(self.dtype)
        if self.bias:
            p["in_proj.bias"] = np.zeros(3 * M, self.dtype)
        p["out_proj.weight"] = (0.02 * rng.standard_normal((M, M))).astype(self.dtype)
        if self.bias:
            p["out_proj.bias"] = np.zeros(M, self.dtype)
        self.params = p

    def __repr__(self) -> str:
        return f"ShortConv({self.d_model}, kernel_size={self.kernel_size}, bias={self.bias})"

    def shapes(self) -> dict:
        """Every parameter's shape and its legend (for :func:`hiddenstate.core.params.check_params`).

        Returns
        -------
        dict of str to (tuple of int, str)
        """
        M, K = self.d_model, self.kernel_size
        out = {"conv.weight": ((M, 1, K), f"(M={M}, 1, K={K})")}
        if self.bias:
            out["conv.bias"] = ((M,), f"(M={M},)")
        out["in_proj.weight"] = ((3 * M, M), f"(3*M={3 * M}, M={M})")
        if self.bias:
            out["in_proj.bias"] = ((3 * M,), f"(3*M={3 * M},)")
        out["out_proj.weight"] = ((M, M), f"(M={M}, M={M})")
        if self.bias:
            out["out_proj.bias"] = ((M,), f"(M={M},)")
        return out

    def _state_shapes(self, N):
        M, K = self.d_model, self.kernel_size
        return [((N, M, K - 1), f"(N={N}, M={M}, K-1={K - 1})")]

    def _refusal(self, opt):
        return "LFM2's short convolution has no document resets: start a new call from a zero state instead."

    def _forward(self, p, u, s, lengths, reset):
        out, conv_T, kc = kernel.forward(p, u, s[0], lengths=lengths)
        return out, ShortConvState(conv_T), kc

    def _backward(self, kc, d_out, d_final):
        grads, d_u, d_conv0 = kernel.backward(kc, d_out, d_final[0] if d_final else None)
        return grads, d_u, ShortConvState(d_conv0)

    def _recorded(self, kc):
        return ShortConvRecord(conv=kernel.windows(kc), B=kc[2], C=kc[3], x=kc[4])
