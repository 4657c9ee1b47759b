"""RWKV-4's time mixing with its state in the open: :class:`RWKVTimeMix` (transformers' ``RwkvSelfAttention``).

The time-mixing block of Peng et al. (2023) as transformers' ``RwkvSelfAttention`` computes it,
in its parameter names and layouts (``time_decay``, ``time_first`` (A,), ``time_mix_key``,
``time_mix_value``, ``time_mix_receptance`` (1, 1, M), ``key.weight``, ``value.weight``,
``receptance.weight`` (A, M), ``output.weight`` (M, A)), so a state dict maps 1:1. The WKV
recurrence and its kernels are in :mod:`hiddenstate.cells.rwkv`.

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

Not here: right-padded batches (``lengths``) and ``reset`` (refused: the layer takes whole sequences).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hiddenstate.cells import rwkv as kernel
from hiddenstate.functional import FloatGuard, sigmoid
from hiddenstate.params import check_params, load_into
from hiddenstate.validation import boolean, choice, float_array, float_dtype, generator, positive_int, shape_str

__all__ = ["RWKVCache", "RWKVState", "RWKVTimeMix"]

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


class RWKVCache:
    """What :meth:`RWKVTimeMix.backward` needs from one forward call (opaque).

    Parameters
    ----------
    values : tuple
        The layer's intermediate arrays and the kernel's cache.
    batch_first : bool
        The layout of the call's input and output.
    owner : RWKVTimeMix
        The layer that made it.
    """

    __slots__ = ("batch_first", "owner", "values")

    def __init__(self, values, batch_first, owner):
        self.values = values
        self.batch_first = batch_first
        self.owner = owner


class RWKVTimeMix:
    """RWKV-4 time mixing (Peng et al. 2023): ``out, state_n = layer(u, state)``, transformers' ``RwkvSelfAttention``.

    ``s_t = u_{t-1}`` (the token shift; ``s_0`` the state's ``shift``);
    ``k = W_k (mu_k u + (1 - mu_k) s)``, likewise ``v`` and ``r`` (``r = sigmoid(W_r ...)``);
    ``wkv`` by the WKV recurrence (:mod:`hiddenstate.cells.rwkv`); ``out = W_o (r * wkv)``.

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

    def __init__(self, hidden_size, attention_hidden_size=None, *, scan="parallel", batch_first=False,
                 dtype=np.float64, rng=None):
        self.hidden_size = positive_int("hidden_size", hidden_size)
        self.attention_hidden_size = self.hidden_size if attention_hidden_size is None else positive_int(
            "attention_hidden_size", attention_hidden_size)
        self.scan = choice("scan", scan, kernel.SCANS)
        self.batch_first = boolean("batch_first", batch_first)
        self.dtype = float_dtype("dtype", dtype)
        rng = generator(rng)
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
        """Every parameter's shape and its legend (for :func:`hiddenstate.params.check_params`).

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

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of the parameters by their ``RwkvSelfAttention`` names.

        Returns
        -------
        dict of str to ndarray
        """
        return {key: val.copy() for key, val in self.params.items()}

    def load_state_dict(self, state) -> None:
        """Copy ``state`` into :attr:`params` in place (every key and shape must match).

        Parameters
        ----------
        state : mapping of str to array_like

        Raises
        ------
        ValueError, TypeError
            As :func:`hiddenstate.params.load_into`.
        """
        load_into(self.params, state, "RWKVTimeMix")

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
        M, A = self.hidden_size, self.attention_hidden_size
        z = np.zeros((N, A), dtype=self.dtype)
        return RWKVState(np.zeros((N, M), dtype=self.dtype), z, z.copy(), np.full((N, A), kernel.MAX0, dtype=self.dtype))

    def _state(self, name, value, N):
        if not (isinstance(value, tuple) and len(value) == 4):
            raise TypeError(f"{name} must be a 4-tuple (shift, num, den, max) (an RWKVState); got "
                            f"{type(value).__name__}.")
        M, A = self.hidden_size, self.attention_hidden_size
        parts = []
        for part, v in zip(RWKVState._fields, value):
            if v is None and name.startswith("d_"):
                parts.append(None)
                continue
            want, legend = ((N, M), f"(N={N}, M={M})") if part == "shift" else ((N, A), f"(N={N}, A={A})")
            arr = float_array(f"{name}.{part}", v, dtype=self.dtype)
            if arr.shape != want:
                raise ValueError(f"{name}.{part} must have shape {legend}; got {shape_str(arr.shape)}. A state is "
                                 f"never broadcast over the batch.")
            parts.append(np.array(arr, copy=True))
        return RWKVState(*parts)

    def forward(self, u, state=None, *, record=False, lengths=None, reset=None):
        """Run the layer over a sequence and keep what :meth:`backward` needs.

        Parameters
        ----------
        u : ndarray of shape (T, N, M), or (N, T, M) with ``batch_first``
            The input; cast to the layer's dtype.
        state : RWKVState or 4-tuple (shift, num, den, max), optional
            The initial state; None: :meth:`initial_state`. Pass the previous call's ``state_n`` to carry it.
        record : bool, default False
            Also return every step's state.
        lengths, reset : None
            Not supported: refused unless None.

        Returns
        -------
        out : ndarray shaped like ``u``
        state_n : RWKVState
            ``shift`` (N, M), ``num``, ``den``, ``max`` (N, A) after the last step.
        cache : RWKVCache
            Pass it to :meth:`backward`.
        states : RWKVState
            Only with ``record=True``: every step's state, time-major (T, N, ...).

        Raises
        ------
        ValueError
            ``u`` not of shape (T, N, M), a state of another shape, NaN/Inf, ``lengths`` or ``reset`` given.
        TypeError
            Non-float input, a state that is not a 4-tuple, a non-bool ``record``.
        """
        record = boolean("record", record)
        if lengths is not None or reset is not None:
            raise ValueError("lengths and reset must be None for RWKVTimeMix; got "
                             f"{'lengths' if lengths is not None else 'reset'}. Run each sequence on its own.")
        x = float_array("u", u, dtype=self.dtype)
        legend = "(N, T, M)" if self.batch_first else "(T, N, M)"
        if x.ndim != 3 or x.shape[2] != self.hidden_size:
            raise ValueError(f"u must have shape {legend} with M={self.hidden_size}; got {shape_str(x.shape)}.")
        x = np.array(x.transpose(1, 0, 2) if self.batch_first else x, copy=True)  # (T, N, M)
        T, N, M = x.shape
        s0 = self.initial_state(N) if state is None else self._state("state", state, N)
        check_params(self.params, self.shapes(), self.dtype, "RWKVTimeMix")
        p = {key: val.copy() for key, val in self.params.items()}
        with FloatGuard() as guard:
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
        guard.check("the forward pass", (("out", out), ("num", final.num)), "Scale the input or the weights down.")
        shift = x[-1].copy() if T else s0.shift
        state_n = RWKVState(shift, *final)
        cache = RWKVCache((p, x, s0, diff, xk, xv, xr, r, kc, rw), self.batch_first, self)
        out = out.transpose(1, 0, 2) if self.batch_first else out
        if record:
            rec = kernel.wkv_states(kc)
            return out, state_n, cache, RWKVState(x.copy(), *rec)
        return out, state_n, cache

    def __call__(self, u, state=None):
        """``out, state_n = layer(u, state)`` (see :meth:`forward`).

        Parameters
        ----------
        u : ndarray of shape (T, N, M), or (N, T, M) with ``batch_first``
        state : RWKVState, optional

        Returns
        -------
        out : ndarray shaped like ``u``
        state_n : RWKVState
        """
        out, final, _ = self.forward(u, state)
        return out, final

    def backward(self, cache: RWKVCache, d_out, d_state_n=None):
        """Exact BPTT through one :meth:`forward` call.

        Parameters
        ----------
        cache : RWKVCache
            From this layer's :meth:`forward`.
        d_out : ndarray shaped like that call's output, or None
            Gradient of the loss with respect to the output (None: zeros).
        d_state_n : 4-tuple (d_shift, d_num, d_den, d_max), optional
            Gradient with respect to the final state (any part None).

        Returns
        -------
        grads : dict of str to ndarray
            Same keys and shapes as :attr:`params`.
        d_u : ndarray shaped like the input
        d_state : RWKVState
            Gradients with respect to the initial shift, num, den, max.

        Raises
        ------
        TypeError
            A cache from something else, a ``d_state_n`` that is not a 4-tuple.
        ValueError
            A cache of another layer, gradients of the wrong shape or with NaN/Inf.
        """
        if not isinstance(cache, RWKVCache):
            raise TypeError(f"cache must be what RWKVTimeMix.forward returned; got {type(cache).__name__}.")
        if cache.owner is not self:
            raise ValueError("cache must come from this layer's forward; got the cache of another RWKVTimeMix.")
        p, x, s0, diff, xk, xv, xr, r, kc, rw = cache.values
        T, N, M = x.shape
        A = self.attention_hidden_size
        if d_out is not None:
            d_out = float_array("d_out", d_out, dtype=self.dtype)
            want = (N, T, M) if cache.batch_first else (T, N, M)
            if d_out.shape != want:
                raise ValueError(f"d_out must have the output's shape {shape_str(want)}; got {shape_str(d_out.shape)}.")
            d_out = d_out.transpose(1, 0, 2) if cache.batch_first else d_out
        else:
            d_out = np.zeros((T, N, M), dtype=self.dtype)
        d_fin = (None,) * 4 if d_state_n is None else self._state("d_state_n", d_state_n, N)
        g = {}
        with FloatGuard():
            g["output.weight"] = d_out.reshape(-1, M).T @ rw.reshape(-1, A)
            d_rw = _mm(d_out, p["output.weight"])  # (T, N, A)
            wkv = kc[16]
            d_wkv = d_rw * r
            d_rpre = d_rw * wkv * r * (1.0 - r)
            (d_k, d_v, g["time_decay"], g["time_first"]), d_wkv0 = kernel.wkv_backward(
                kc, d_wkv, None if d_state_n is None else kernel.WKVState(*d_fin[1:]))
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
            if d_fin[0] is not None:
                if T:
                    d_x[-1] += d_fin[0]
                else:
                    d_shift0 += d_fin[0]
        grads = {key: np.ascontiguousarray(g[key]) for key in p}
        d_u = d_x.transpose(1, 0, 2) if cache.batch_first else d_x
        return grads, d_u, RWKVState(d_shift0, *d_wkv0)
