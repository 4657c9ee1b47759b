"""Inkling 2's dynamic short convolution with its window in the open: :class:`DynamicShortConv`.

:class:`DynamicShortConv` computes transformers' ``Inkling2DynamicShortConvolution`` (the key and
value convolutions of Inkling 2's full-attention layers) in its parameter names and layouts,
``static_weight`` (K, C) and ``weight_proj.weight`` (H K, M), so a state dict maps 1:1:
``y_t = s (x_t + sum_j (static_weight[j] + P_t[h, j]) x_{t-j})`` with per-token, per-head taps
``P_t = weight_proj(d_t)`` (:mod:`hiddenstate.kinds.shortconv.dynamic_kernel`). It takes two
inputs, the convolved ``x`` (N, T, C) and the input ``d`` (N, T, M) the taps are projected from.

==============  ===========================================================================
state           the window (N, C, K-1): the last K - 1 inputs x, oldest first; an input
                (None: zeros) and an output
every step      ``forward(..., record=True)``: every step's window and taps
                (:class:`DynamicShortConvRecord`)
gradients       :meth:`DynamicShortConv.backward`: both parameters, both inputs, the window
carry           two chunks give what one long call gives (transformers' decoding path)
==============  ===========================================================================

It is not a registered kind: a family records one mixer per layer, and Inkling 2's families
record the layer's ``post_attention_convolution`` (:mod:`hiddenstate.interop.families.inkling2_text`),
where this convolution is a part of the attention.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from hiddenstate.core.validation import expect_shape, float_array, float_dtype, generator, positive_int, real
from hiddenstate.kinds.shortconv import dynamic_kernel

__all__ = ["DynamicShortConv", "DynamicShortConvCache", "DynamicShortConvRecord"]


class DynamicShortConvRecord(NamedTuple):
    """Every step of a dynamic short convolution (time-major).

    Attributes
    ----------
    conv : ndarray of shape (T, N, C, K-1)
        The window after each step, oldest first.
    taps : ndarray of shape (T, N, C, K)
        Each step's taps ``static_weight[j] + P_t[h, j]``, lag j = 0 the current token.
    """

    conv: np.ndarray
    taps: np.ndarray


class DynamicShortConvCache(NamedTuple):
    """What :meth:`DynamicShortConv.backward` needs of a forward call (opaque)."""

    kernel: tuple
    shape: tuple


class DynamicShortConv:
    """Inkling 2's dynamic short convolution: ``y, window_n, cache = block.forward(x, d, window)``.

    Equivalent to transformers' ``Inkling2DynamicShortConvolution`` with the same weights.

    Parameters
    ----------
    hidden_size : int
        C, the convolved channels (``num_heads * head_dim``).
    input_size : int
        M, the width of the input ``d`` the dynamic taps are projected from.
    num_heads : int
        H, the heads the dynamic taps are shared within; must divide C.
    kernel_size : int, default 4
        K, the taps (``sconv_kernel_size``).
    scale : float, optional
        s, the output's factor; default ``1 / sqrt(2 K + 1)``, transformers'.
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
        Draws the weights: ``static_weight`` zeros (transformers'), ``weight_proj`` normal of
        standard deviation 0.02.

    Raises
    ------
    TypeError, ValueError
        A size that is not a positive integer, H not dividing C, a scale that is not a finite
        positive number, a dtype other than float32/float64.
    """

    def __init__(self, hidden_size, input_size, num_heads, *, kernel_size=4, scale=None, dtype=np.float64, rng=None):
        self.hidden_size = positive_int("hidden_size", hidden_size)
        self.input_size = positive_int("input_size", input_size)
        self.num_heads = positive_int("num_heads", num_heads)
        self.kernel_size = positive_int("kernel_size", kernel_size)
        if self.hidden_size % self.num_heads:
            raise ValueError(f"num_heads must divide hidden_size={self.hidden_size}; got {self.num_heads}.")
        default = 1.0 / math.sqrt(2 * self.kernel_size + 1)
        self.scale = default if scale is None else real("scale", scale, low=0.0)
        if not self.scale > 0:
            raise ValueError(f"scale must be a finite number > 0; got {scale!r}.")
        self.dtype = float_dtype("dtype", dtype)
        rng = generator(rng)
        C, M, H, K = self.hidden_size, self.input_size, self.num_heads, self.kernel_size
        self.params = {"static_weight": np.zeros((K, C), self.dtype),
                       "weight_proj.weight": (0.02 * rng.standard_normal((H * K, M))).astype(self.dtype)}

    def __repr__(self) -> str:
        return (f"DynamicShortConv({self.hidden_size}, {self.input_size}, {self.num_heads}, "
                f"kernel_size={self.kernel_size}, scale={self.scale:.6g})")

    def shapes(self) -> dict:
        """Every parameter's shape and its legend.

        Returns
        -------
        dict of str to (tuple of int, str)
        """
        C, M, H, K = self.hidden_size, self.input_size, self.num_heads, self.kernel_size
        return {"static_weight": ((K, C), f"(K={K}, C={C})"),
                "weight_proj.weight": ((H * K, M), f"(H*K={H * K}, M={M})")}

    def load_state_dict(self, state) -> None:
        """Replace the parameters with ``state`` (transformers' names), checked and cast to the block's dtype.

        Parameters
        ----------
        state : dict of str to array_like
            Exactly :data:`~hiddenstate.kinds.shortconv.dynamic_kernel.PARAMS`.

        Raises
        ------
        TypeError
            Not a dict; a value that is not a finite floating or integer array.
        ValueError
            Missing or unexpected names, a wrong shape, NaN or Inf.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict of parameter arrays; got {type(state).__name__}.")
        if set(state) != set(dynamic_kernel.PARAMS):
            raise ValueError(f"state must hold exactly {list(dynamic_kernel.PARAMS)}; got {sorted(map(str, state))}.")
        new = {}
        for name, (shape, legend) in self.shapes().items():
            arr = float_array(name, state[name], dtype=self.dtype)
            expect_shape(name, arr, shape, legend)
            new[name] = arr.copy()
        self.params = new

    def _inputs(self, x, d, window):
        x = float_array("x", x, dtype=self.dtype)
        if x.ndim != 3 or x.shape[-1] != self.hidden_size or 0 in x.shape[:2]:
            raise ValueError(f"x must have shape (N, T, C={self.hidden_size}) with N, T >= 1; got "
                             f"{tuple(x.shape)}.")
        N, T, _ = x.shape
        d = float_array("d", d, dtype=self.dtype)
        expect_shape("d", d, (N, T, self.input_size), f"(N={N}, T={T}, M={self.input_size})")
        W = self.kernel_size - 1
        if window is None:
            window = np.zeros((N, self.hidden_size, W), self.dtype)
        else:
            window = float_array("window", window, dtype=self.dtype)
            expect_shape("window", window, (N, self.hidden_size, W), f"(N={N}, C={self.hidden_size}, K-1={W})")
        return x, d, window

    def forward(self, x, d, window=None, *, record=False):
        """The convolution over all T steps.

        Parameters
        ----------
        x : array_like of shape (N, T, C)
            The convolved input (batch first).
        d : array_like of shape (N, T, M)
            The input the dynamic taps are projected from.
        window : array_like of shape (N, C, K-1), optional
            The last K - 1 inputs before step 0, oldest first (default zeros).
        record : bool, default False
            Also return every step's window and taps.

        Returns
        -------
        y : ndarray of shape (N, T, C)
        window_n : ndarray of shape (N, C, K-1)
        cache : DynamicShortConvCache
            For :meth:`backward`.
        record : DynamicShortConvRecord
            Only with ``record=True``.

        Raises
        ------
        TypeError, ValueError
            Inputs that are not finite float arrays of these shapes.
        """
        x, d, window = self._inputs(x, d, window)
        p = self.params
        y, window_n, kc = dynamic_kernel.forward(p["static_weight"], p["weight_proj.weight"], x, d, window,
                                                 self.num_heads, self.scale)
        cache = DynamicShortConvCache(kc, x.shape)
        if not record:
            return y, window_n, cache
        win, taps = kc[3], kc[4]  # (N, T, C, K): lag j at index j
        K = self.kernel_size
        conv = win[..., K - 2::-1] if K > 1 else win[..., :0]  # after step t: x_{t-K+2} .. x_t, oldest first
        return y, window_n, cache, DynamicShortConvRecord(conv=np.ascontiguousarray(conv.transpose(1, 0, 2, 3)),
                                                          taps=np.ascontiguousarray(taps.transpose(1, 0, 2, 3)))

    def backward(self, cache, d_y, d_window_n=None):
        """The exact gradients of :meth:`forward`.

        Parameters
        ----------
        cache : DynamicShortConvCache
            From :meth:`forward`.
        d_y : array_like of shape (N, T, C)
        d_window_n : array_like of shape (N, C, K-1), optional

        Returns
        -------
        grads : dict of str to ndarray
            By parameter name.
        d_x : ndarray of shape (N, T, C)
        d_d : ndarray of shape (N, T, M)
        d_window0 : ndarray of shape (N, C, K-1)

        Raises
        ------
        TypeError, ValueError
            Not this block's cache; gradients of other shapes.
        """
        if not isinstance(cache, DynamicShortConvCache):
            raise TypeError(f"cache must be what DynamicShortConv.forward returned; got {type(cache).__name__}.")
        N, T, C = cache.shape
        d_y = float_array("d_y", d_y, dtype=self.dtype)
        expect_shape("d_y", d_y, (N, T, C), f"(N={N}, T={T}, C={C})")
        if d_window_n is not None:
            W = self.kernel_size - 1
            d_window_n = float_array("d_window_n", d_window_n, dtype=self.dtype)
            expect_shape("d_window_n", d_window_n, (N, C, W), f"(N={N}, C={C}, K-1={W})")
        return dynamic_kernel.backward(cache.kernel, d_y, d_window_n)
