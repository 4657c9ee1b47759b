"""ZAYA's compressed convolutional attention projection with its state in the open: :class:`CCAProjection`.

:class:`CCAProjection` computes transformers' ``ZayaCCAProjection`` (Figliolia et al. 2025, CCA)
in its parameter names and layouts, so a state dict maps 1:1: the queries and keys of the
attention through two stacked causal convolutions (depthwise, then grouped by head) with
residual paths, and half of the values one token late
(:mod:`hiddenstate.kinds.shortconv.cca_kernel`). Its output is ``[query | key | value]``
flattened, (N, T, Cq + 2 Ck), what the attention then reads.

==============  ===========================================================================
state           ``(window, v)``: the last W = (t0 - 1) + (t1 - 1) values of ``[q | k]``
                (N, Cq + Ck, W), oldest first, and the last token's delayed value
                projection (N, Ck / 2); an input (None: zeros and ``v_proj_delayed(0)``) and
                an output
every step      ``forward(..., record=True)``: the window and the delayed value after every
                step (:class:`CCARecord`)
gradients       :meth:`CCAProjection.backward`: every parameter, the input, both state parts
carry           two chunks give what one long call gives (transformers' decoding path)
==============  ===========================================================================

It is the registered kind ``"cca"`` (:mod:`hiddenstate.kinds.shortconv.cca_view`): its output
is the attention's queries, keys and values, (N, T, Cq + 2 Ck), not a sequence of the layer's
width M, and ``d_out`` says its width; ZAYA's family (``zaya``) hooks the three as that one
flattened view and puts an edited view back as the three.

References
----------
T. Figliolia et al., "Compressed convolutional attention", arXiv:2510.04476, 2025.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hiddenstate.core.validation import boolean, expect_shape, float_array, float_dtype, generator, positive_int
from hiddenstate.kinds.shortconv import cca_kernel

__all__ = ["CCACache", "CCAProjection", "CCARecord"]


class CCARecord(NamedTuple):
    """Every step of a CCA projection (time-major).

    Attributes
    ----------
    conv : ndarray of shape (T, N, Cq+Ck, W)
        The window of ``[q | k]`` after each step, oldest first.
    v : ndarray of shape (T, N, Ck/2)
        The delayed value projection after each step (the next token's delayed value).
    """

    conv: np.ndarray
    v: np.ndarray


class CCACache(NamedTuple):
    """What :meth:`CCAProjection.backward` needs of a forward call (opaque)."""

    kernel: tuple
    shape: tuple
    default_v: bool


class CCAProjection:
    """ZAYA's CCA projection: ``out, (window_n, v_n), cache = block.forward(u, (window, v))``.

    Equivalent to transformers' ``ZayaCCAProjection`` with the same weights.

    Parameters
    ----------
    hidden_size : int
        M, the input's width.
    num_attention_heads, num_key_value_heads : int
        Hq and Hk (Hk divides Hq).
    head_dim : int
        D (even: the values are two halves).
    cca_time0, cca_time1 : int, default 2
        The taps of the depthwise and of the grouped convolution.
    bias : bool, default False
        Whether the four projections have biases (``attention_bias``); the convolutions always do.
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
        Draws every weight normal of standard deviation 0.02, the biases zero.

    Raises
    ------
    TypeError, ValueError
        A size that is not a positive integer, Hk not dividing Hq, an odd D, a dtype other than
        float32/float64.
    """

    def __init__(self, hidden_size, num_attention_heads, num_key_value_heads, head_dim, *, cca_time0=2, cca_time1=2,
                 bias=False, dtype=np.float64, rng=None):
        self.hidden_size = positive_int("hidden_size", hidden_size)
        self.heads = tuple(positive_int(n, v) for n, v in (("num_attention_heads", num_attention_heads),
                                                           ("num_key_value_heads", num_key_value_heads),
                                                           ("head_dim", head_dim)))
        Hq, Hk, D = self.heads
        if Hq % Hk:
            raise ValueError(f"num_key_value_heads must divide num_attention_heads={Hq}; got {Hk}.")
        if D % 2:
            raise ValueError(f"head_dim must be even (the values are two halves); got {D}.")
        self.taps = (positive_int("cca_time0", cca_time0), positive_int("cca_time1", cca_time1))
        self.bias = boolean("bias", bias)
        self.dtype = float_dtype("dtype", dtype)
        rng = generator(rng)
        self.params = {name: (0.02 * rng.standard_normal(shape) if name.endswith("weight") else np.zeros(shape))
                       .astype(self.dtype) for name, (shape, _) in self.shapes().items()}

    @property
    def d_model(self) -> int:
        """M, the input's width (``hidden_size``)."""
        return self.hidden_size

    @property
    def d_out(self) -> int:
        """Cq + 2 Ck, the output's width: ``[query | key | value]`` flattened."""
        Hq, Hk, D = self.heads
        return (Hq + 2 * Hk) * D

    @property
    def batch_first(self) -> bool:
        """Always True: the input is (N, T, M)."""
        return True

    @property
    def window(self) -> int:
        """W = (cca_time0 - 1) + (cca_time1 - 1), the steps the convolutions' window holds."""
        return self.taps[0] + self.taps[1] - 2

    def __repr__(self) -> str:
        Hq, Hk, D = self.heads
        return (f"CCAProjection({self.hidden_size}, {Hq}, {Hk}, {D}, cca_time0={self.taps[0]}, "
                f"cca_time1={self.taps[1]}, bias={self.bias})")

    def shapes(self) -> dict:
        """Every parameter's shape and its legend.

        Returns
        -------
        dict of str to (tuple of int, str)
        """
        M, (Hq, Hk, D), (t0, t1) = self.hidden_size, self.heads, self.taps
        C = (Hq + Hk) * D
        out = {}
        for name, rows, legend in (("q_proj", Hq * D, "Hq*D"), ("k_proj", Hk * D, "Hk*D"),
                                   ("v_proj_current", Hk * D // 2, "Hk*D/2"), ("v_proj_delayed", Hk * D // 2, "Hk*D/2")):
            out[f"{name}.weight"] = ((rows, M), f"({legend}={rows}, M={M})")
            if self.bias:
                out[f"{name}.bias"] = ((rows,), f"({legend}={rows},)")
        out["conv_qk_depthwise.weight"] = ((C, 1, t0), f"(C={C}, 1, t0={t0})")
        out["conv_qk_depthwise.bias"] = ((C,), f"(C={C},)")
        out["conv_qk_grouped.weight"] = ((C, D, t1), f"(C={C}, D={D}, t1={t1})")
        out["conv_qk_grouped.bias"] = ((C,), f"(C={C},)")
        return out

    def load_state_dict(self, state) -> None:
        """Replace the parameters with ``state`` (transformers' names), checked and cast to the block's dtype.

        Parameters
        ----------
        state : dict of str to array_like
            Exactly the names of :meth:`shapes`.

        Raises
        ------
        TypeError
            Not a dict; a value that is not a finite floating or integer array.
        ValueError
            Missing or unexpected names, a wrong shape, NaN or Inf.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict of parameter arrays; got {type(state).__name__}.")
        spec = self.shapes()
        if set(state) != set(spec):
            raise ValueError(f"state must hold exactly {sorted(spec)}; got {sorted(map(str, state))}.")
        new = {}
        for name, (shape, legend) in spec.items():
            arr = float_array(name, state[name], dtype=self.dtype)
            expect_shape(name, arr, shape, legend)
            new[name] = arr.copy()
        self.params = new

    def forward(self, u, state=None, *, record=False):
        """The projection over all T steps.

        Parameters
        ----------
        u : array_like of shape (N, T, M)
            The layer's (normed) input, batch first.
        state : (array_like, array_like), optional
            ``(window (N, Cq+Ck, W), v (N, Ck/2))``; default zeros and ``v_proj_delayed(0)``.
        record : bool, default False
            Also return every step's state.

        Returns
        -------
        out : ndarray of shape (N, T, Cq+2Ck)
            ``[query | key | value]``, each flattened over its heads.
        state_n : (ndarray, ndarray)
        cache : CCACache
        record : CCARecord
            Only with ``record=True``.

        Raises
        ------
        TypeError, ValueError
            Inputs that are not finite float arrays of these shapes; a state that is not a pair.
        """
        u = float_array("u", u, dtype=self.dtype)
        if u.ndim != 3 or u.shape[-1] != self.hidden_size or 0 in u.shape[:2]:
            raise ValueError(f"u must have shape (N, T, M={self.hidden_size}) with N, T >= 1; got {tuple(u.shape)}.")
        N, T, _ = u.shape
        Hq, Hk, D = self.heads
        C, V, W = (Hq + Hk) * D, Hk * D // 2, self.window
        default_v = state is None
        if state is None:
            b = self.params.get("v_proj_delayed.bias")
            window, v = np.zeros((N, C, W), self.dtype), np.zeros((N, V), self.dtype) + (0 if b is None else b)
        else:
            if not isinstance(state, tuple) or len(state) != 2:
                raise TypeError(f"state must be None or a pair (window, v); got {type(state).__name__}.")
            window, v = (float_array(n, a, dtype=self.dtype) for n, a in zip(("window", "v"), state))
            expect_shape("window", window, (N, C, W), f"(N={N}, Cq+Ck={C}, W={W})")
            expect_shape("v", v, (N, V), f"(N={N}, Ck/2={V})")
        out, window_n, v_n, kc = cca_kernel.forward(self.params, u, window, v, self.heads)
        cache = CCACache(kc, u.shape, default_v)
        if not record:
            return out, (window_n, v_n), cache
        zp = kc[2]  # (N, W+T, C): the window after step t is zp[t+1 : t+1+W]
        conv = np.stack([zp[:, 1 + i:1 + i + T] for i in range(W)], axis=-1) if W else np.zeros((N, T, C, 0))
        vd = out[..., C + V:]  # value_delayed_t = v after step t-1
        v_all = np.concatenate([vd[:, 1:], v_n[:, None]], axis=1)
        return out, (window_n, v_n), cache, CCARecord(conv=np.ascontiguousarray(conv.transpose(1, 0, 2, 3)),
                                                      v=np.ascontiguousarray(v_all.transpose(1, 0, 2)))

    def backward(self, cache, d_out, d_state_n=None):
        """The exact gradients of :meth:`forward`.

        Parameters
        ----------
        cache : CCACache
            From :meth:`forward`.
        d_out : array_like of shape (N, T, Cq+2Ck)
        d_state_n : (array_like or None, array_like or None), optional
            The gradients of the final window and delayed value.

        Returns
        -------
        grads : dict of str to ndarray
            By parameter name (with ``state=None``, the initial ``v_proj_delayed(0)``'s share in
            its bias).
        d_u : ndarray of shape (N, T, M)
        d_state0 : (ndarray, ndarray)
            The gradients of the initial window and delayed value.

        Raises
        ------
        TypeError, ValueError
            Not this block's cache; gradients of other shapes.
        """
        if not isinstance(cache, CCACache):
            raise TypeError(f"cache must be what CCAProjection.forward returned; got {type(cache).__name__}.")
        N, T, _ = cache.shape
        Hq, Hk, D = self.heads
        C, V, W = (Hq + Hk) * D, Hk * D // 2, self.window
        d_out = float_array("d_out", d_out, dtype=self.dtype)
        expect_shape("d_out", d_out, (N, T, C + 2 * V), f"(N={N}, T={T}, Cq+2Ck={C + 2 * V})")
        dw, dv = (None, None) if d_state_n is None else d_state_n
        if dw is not None:
            dw = float_array("d_window_n", dw, dtype=self.dtype)
            expect_shape("d_window_n", dw, (N, C, W), f"(N={N}, Cq+Ck={C}, W={W})")
        if dv is not None:
            dv = float_array("d_v_n", dv, dtype=self.dtype)
            expect_shape("d_v_n", dv, (N, V), f"(N={N}, Ck/2={V})")
        grads, d_u, d_w0, d_v0 = cca_kernel.backward(cache.kernel, d_out, dw, dv)
        if cache.default_v and "v_proj_delayed.bias" in grads:
            grads["v_proj_delayed.bias"] = grads["v_proj_delayed.bias"] + d_v0.sum(axis=0)
        return grads, d_u, (d_w0, d_v0)
