"""RWKV-4's time mixing with its state in the open: :class:`RWKVTimeMix` (transformers' ``RwkvSelfAttention``).

The time-mixing block of Peng et al. (2023) as transformers' ``RwkvSelfAttention`` computes it,
in its parameter names and layouts (``time_decay``, ``time_first`` (A,), ``time_mix_key``,
``time_mix_value``, ``time_mix_receptance`` (1, 1, M), ``key.weight``, ``value.weight``,
``receptance.weight`` (A, M), ``output.weight`` (M, A)), so a state dict maps 1:1. The WKV
recurrence and its kernels are in :mod:`hiddenstate.kinds.rwkv.kernel`.

==============  ===========================================================================
state           an :class:`RWKVState` ``(shift (N, M), num, den, max (N, A))``: the token shift's
                last input (transformers' ``state[1]``) and the WKV state (``state[2:5]``) of
                this layer; an input (None: zeros, max -1e30) and the final state an output
every step      ``forward(..., record=True)`` also returns every step's state
gradients       :meth:`RWKVTimeMix.backward`: every parameter, the input and every part of the
                initial state, with the final state's gradient honoured
carry           pass the returned state to the next call: two chunks give what one long call gives
==============  ===========================================================================

Agreement with transformers' ``RwkvSelfAttention`` (tests/test_rwkv.py, measured at M = 6, N = 3,
T = 13): ``rwkv_linear_attention_cpu`` rounds every key to float32 (``key.float()``) whatever the
model's dtype, and ``RwkvModel`` keeps num, den and max in float32; so a float32 layer agrees to
2.5e-7 (outputs) and 2e-7 (states), a float64 one only to 4e-8 (the keys' rounding).

A :class:`~hiddenstate.shared.seqblock.SequenceBlock`: ``forward(u, state=None, *, lengths=None,
reset=None, record=False)``, ``backward(cache, d_out, d_state_n=None)``, ``initial_state(N)``,
``state_dict``/``load_state_dict`` as every block of the modern recurrent families. Not here:
right-padded batches (``lengths``) and ``reset`` (refused in one line: the layer takes whole sequences).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hiddenstate.core.functional import sigmoid
from hiddenstate.core.validation import boolean, choice, float_dtype, generator, positive_int
from hiddenstate.kinds.rwkv import kernel
from hiddenstate.shared.seqblock import SequenceBlock

__all__ = ["RWKVState", "RWKVTimeMix"]

_MIX = ("time_mix_key", "time_mix_value", "time_mix_receptance")


def _mm(x, W):
    """``x @ W`` for x (T, N, K) as one 2-D product (numpy runs a 3-D @ 2-D product as T small ones)."""
    return (x.reshape(-1, x.shape[-1]) @ W).reshape(x.shape[:-1] + (W.shape[-1],))


class RWKVState(NamedTuple):
    """The state of one RWKV-4 time-mixing layer.

    Attributes
    ----------
    shift : ndarray of shape (N, M)
        The last input the token shift read (transformers' ``state[1][:, :, layer]``).
    num, den : ndarray of shape (N, A)
        The stabilised WKV numerator and denominator (``state[2]``, ``state[3]``).
    max : ndarray of shape (N, A)
        Their running maximum (``state[4]``).
    """

    shift: np.ndarray
    num: np.ndarray
    den: np.ndarray
    max: np.ndarray


class RWKVTimeMix(SequenceBlock):
    """RWKV-4 time mixing (Peng et al. 2023): ``out, state_n = layer(u, state)``, transformers' ``RwkvSelfAttention``.

    ``s_t = u_{t-1}`` (the token shift; ``s_0`` the state's ``shift``);
    ``k = W_k (mu_k u + (1 - mu_k) s)``, likewise ``v`` and ``r`` (``r = sigmoid(W_r ...)``);
    ``wkv`` by the WKV recurrence (:mod:`hiddenstate.kinds.rwkv.kernel`); ``out = W_o (r * wkv)``.

    Parameters
    ----------
    hidden_size : int
        M, features in and out.
    attention_hidden_size : int, optional
        A, the WKV channels (default M).
    scan : {"parallel", "sequential"}, default "parallel"
        How the numerator/denominator recurrence runs; the same numbers to round-off.
    batch_first : bool, default False
        Input and output as (N, T, M) instead of (T, N, M) (transformers' layout).
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
        Draws the weights as transformers' ``RwkvPreTrainedModel._init_weights`` does for layer 0:
        orthogonal projections (gain ``sqrt(rows / cols)`` when rows > cols), ``time_decay =
        -5 + 8 (h / (A - 1))^0.7``, ``time_first = 1``, ``time_mix_key = time_mix_value = i / M``,
        ``time_mix_receptance = (i / M)^0.5``.

    Attributes
    ----------
    params : dict of str to ndarray
        ``time_decay``, ``time_first`` (A,), ``time_mix_key``, ``time_mix_value``,
        ``time_mix_receptance`` (1, 1, M), ``key.weight``, ``value.weight``,
        ``receptance.weight`` (A, M), ``output.weight`` (M, A).

    Raises
    ------
    TypeError, ValueError
        A size that is not a positive integer, an unknown ``scan``, a dtype other than float32/float64.
    """

    state_type = RWKVState
    supports = frozenset()

    def __init__(self, hidden_size, attention_hidden_size=None, *, scan="parallel", batch_first=False,
                 dtype=np.float64, rng=None):
        self.hidden_size = self.d_model = positive_int("hidden_size", hidden_size)
        self.attention_hidden_size = self.hidden_size if attention_hidden_size is None else positive_int(
            "attention_hidden_size", attention_hidden_size)
        self.scan = choice("scan", scan, kernel.SCANS)
        self.batch_first = boolean("batch_first", batch_first)
        self.dtype = float_dtype("dtype", dtype)
        rng = generator(rng)
        self._check_sizes(hidden_size=self.hidden_size, attention_hidden_size=self.attention_hidden_size)
        M, A = self.hidden_size, self.attention_hidden_size

        def orthogonal(rows, cols):
            q, r = np.linalg.qr(rng.standard_normal((max(rows, cols), min(rows, cols))))
            q = q * np.sign(np.diag(r))
            q = q if rows >= cols else q.T
            return q * (np.sqrt(rows / cols) if rows > cols else 1.0)

        tw = np.arange(M) / M
        p = {"time_decay": -5 + 8 * (np.arange(A) / max(A - 1, 1)) ** 0.7, "time_first": np.ones(A),
             "time_mix_key": tw[None, None], "time_mix_value": tw[None, None].copy(),
             "time_mix_receptance": np.sqrt(tw)[None, None],
             "key.weight": orthogonal(A, M), "value.weight": orthogonal(A, M), "receptance.weight": orthogonal(A, M),
             "output.weight": orthogonal(M, A)}
        self.params = {key: np.ascontiguousarray(val, dtype=self.dtype) for key, val in p.items()}

    def __repr__(self) -> str:
        return f"RWKVTimeMix({self.hidden_size}, {self.attention_hidden_size})"

    def shapes(self) -> dict:
        """Every parameter's shape and its legend (for :func:`hiddenstate.core.params.check_params`).

        Returns
        -------
        dict of str to (tuple of int, str)
        """
        M, A = self.hidden_size, self.attention_hidden_size
        out = {k: ((A,), f"(A={A},)") for k in ("time_decay", "time_first")}
        out.update({k: ((1, 1, M), f"(1, 1, M={M})") for k in _MIX})
        out.update({f"{k}.weight": ((A, M), f"(A={A}, M={M})") for k in ("key", "value", "receptance")})
        out["output.weight"] = ((M, A), f"(M={M}, A={A})")
        return out

    def initial_state(self, batch_size: int) -> RWKVState:
        """The fresh state of transformers' ``RwkvModel`` cache for ``batch_size`` sequences.

        Parameters
        ----------
        batch_size : int
            N.

        Returns
        -------
        RWKVState
            ``shift``, ``num``, ``den`` zeros, ``max`` -1e30, of the layer's dtype.
        """
        N = positive_int("batch_size", batch_size)
        self._check_state_memory(N)
        M, A = self.hidden_size, self.attention_hidden_size
        z = np.zeros((N, A), dtype=self.dtype)
        return RWKVState(np.zeros((N, M), dtype=self.dtype), z, z.copy(), np.full((N, A), kernel.MAX0, dtype=self.dtype))

    def _state_shapes(self, N):
        M, A = self.hidden_size, self.attention_hidden_size
        return [((N, M), f"(N={N}, M={M})")] + [((N, A), f"(N={N}, A={A})")] * 3

    def _refusal(self, opt):
        return "RWKVTimeMix takes whole sequences: run rows of other lengths, or documents, in calls of their own."

    def _forward(self, p, x, s, lengths, reset):
        s0 = RWKVState(*s)
        T = x.shape[0]
        sx = np.concatenate([s0.shift[None], x[:-1]], axis=0)  # (T, N, M): the token shift
        diff = x - sx
        xk, xv, xr = (sx + p[m][0, 0] * diff for m in _MIX)
        k = _mm(xk, p["key.weight"].T)  # (T, N, A)
        v = _mm(xv, p["value.weight"].T)
        r = sigmoid(_mm(xr, p["receptance.weight"].T))
        wkv, final, kc = kernel.wkv_forward(k, v, p["time_decay"], p["time_first"],
                                            kernel.WKVState(s0.num, s0.den, s0.max), scan=self.scan)
        rw = r * wkv
        out = _mm(rw, p["output.weight"].T)
        shift = x[-1].copy() if T else s0.shift
        return out, RWKVState(shift, *final), (p, x, diff, xk, xv, xr, r, kc, rw)

    def _backward(self, values, d_out, d_final):
        p, x, diff, xk, xv, xr, r, kc, rw = values
        T, N, M = x.shape
        A = self.attention_hidden_size
        d_out = np.zeros((T, N, M), dtype=self.dtype) if d_out is None else d_out
        d_fin = (None,) * 4 if d_final is None else tuple(d_final)
        g = {"output.weight": d_out.reshape(-1, M).T @ rw.reshape(-1, A)}
        d_rw = _mm(d_out, p["output.weight"])  # (T, N, A)
        wkv = kc[16]
        d_wkv = d_rw * r
        d_rpre = d_rw * wkv * r * (1.0 - r)
        (d_k, d_v, g["time_decay"], g["time_first"]), d_wkv0 = kernel.wkv_backward(
            kc, d_wkv, None if d_final is None else kernel.WKVState(*d_fin[1:]))
        d_x = np.zeros_like(x)
        d_sx = np.zeros_like(x)
        for name, xin, dpre in (("key", xk, d_k), ("value", xv, d_v), ("receptance", xr, d_rpre)):
            g[f"{name}.weight"] = dpre.reshape(-1, A).T @ xin.reshape(-1, M)
            d_in = _mm(dpre, p[f"{name}.weight"])  # (T, N, M)
            mu = p[f"time_mix_{name}"][0, 0]
            g[f"time_mix_{name}"] = (d_in * diff).sum(axis=(0, 1))[None, None]
            d_x += d_in * mu
            d_sx += d_in * (1.0 - mu)
        d_x[:-1] += d_sx[1:]
        d_shift0 = d_sx[0].copy() if T else np.zeros((N, M), dtype=self.dtype)
        if d_fin[0] is not None:  # the final shift is the last input (the initial one when T = 0)
            if T:
                d_x[-1] += d_fin[0]
            else:
                d_shift0 += d_fin[0]
        return {key: np.ascontiguousarray(g[key]) for key in p}, d_x, RWKVState(d_shift0, *d_wkv0)

    def _recorded(self, values):
        return RWKVState(values[1].copy(), *kernel.wkv_states(values[7]))
