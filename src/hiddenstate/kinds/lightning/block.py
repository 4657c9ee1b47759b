"""MiniMax's lightning attention with its matrix state in the open: :class:`LightningAttention`.

:class:`LightningAttention` is the linear-attention layer of MiniMax-Text-01 (MiniMax 2025) in
the parameter names and layouts of transformers' ``MiniMaxLightningAttention``
(``qkv_proj.weight``, ``output_gate.weight``, ``out_proj.weight``, ``norm.weight``), so a state
dict maps 1:1 (transformers' decay buffers are not parameters here: the slopes are the
``slope_rate`` attribute). The recurrence and its kernels are in :mod:`hiddenstate.kinds.lightning.kernel`::

    q, k, v  = split_per_head(silu(qkv_proj(u)))           qkv_proj.weight (3 H D, M): per head [q | k | v]
    S_t      = exp(-lambda_h) S_{t-1} + k_t^T v_t           state (N, H, D, D)
    o_t      = q_t S_t                                      (N, H, D) -> (N, H D)
    out_t    = out_proj(sigmoid(output_gate(u_t)) * rms_norm(o_t))   norm.weight (H D,), eps 1e-6

==============  ===========================================================================
state           a :class:`LightningState` ``(kv (N, H, D, D))``, keys by values; an input (None:
                zeros) and an output
every step      ``forward(..., record=True)``: every step's matrix state (memory checked first),
                q, k, v and the output gate (:class:`LightningRecord`)
gradients       :meth:`LightningAttention.backward`: every parameter, the input, ``d_kv0``
carry           two chunks give what one long call gives (transformers' decoding path)
lengths         right-padded batches (a padded step carries the state); ``reset`` is refused
==============  ===========================================================================
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hiddenstate.classic.cells.activations import logistic, silu
from hiddenstate.core.resources import check_memory, format_bytes
from hiddenstate.core.validation import boolean, choice, float_array, float_dtype, generator, positive_int, shape_str
from hiddenstate.kinds.lightning import kernel
from hiddenstate.kinds.lightning.kernel import slope_rates
from hiddenstate.kinds.ssm.mamba_kernel import rms_norm, rms_norm_backward
from hiddenstate.shared.seqblock import SequenceBlock

__all__ = ["MAX_RATE", "LightningAttention", "LightningRecord", "LightningState", "slope_rates"]

_EPS = 1e-6
#: The largest decay rate the kernels see: exp(-1e4) is already 0 in float32 and float64, so a larger
#: ``lambda_h`` keeps the same (zero) share of the state, while 1e300 would overflow the chunked
#: form's sums of ``g`` (to -inf, and -inf - -inf = NaN) or be -inf once cast to float32.
MAX_RATE = 1e4


class LightningState(NamedTuple):
    """The state of a lightning attention layer.

    Attributes
    ----------
    kv : ndarray of shape (N, H, D, D)
        ``S = sum_s decay^(t-s) k_s^T v_s``: keys by values, per head.
    """

    kv: np.ndarray


class LightningRecord(NamedTuple):
    """Every step of a lightning attention layer (time-major).

    Attributes
    ----------
    kv : ndarray of shape (T, N, H, D, D)
        The state after each step.
    q, k, v : ndarray of shape (T, N, H, D)
        Queries, keys and values (0 at padded steps).
    decay : ndarray of shape (H,)
        ``exp(-lambda_h)``: how much of the state each head keeps per step (the keep gate).
    gate : ndarray of shape (T, N, H D)
        ``sigmoid(output_gate(u_t))``.
    """

    kv: np.ndarray
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    decay: np.ndarray
    gate: np.ndarray


class LightningAttention(SequenceBlock):
    """MiniMax's lightning attention (MiniMax 2025): ``out, state_n = layer(u, state)``.

    Equivalent to transformers' ``MiniMaxLightningAttention`` with the same weights and slopes
    (see the module docstring for the equations).

    Parameters
    ----------
    hidden_size : int
        M, features in and out.
    num_heads : int
        H.
    head_dim : int, optional
        D (None: M // H).
    slope_rate : array_like of shape (H,), optional
        The decay rates ``lambda_h > 0``; None: :func:`slope_rates` of layer 0 of a one-layer model
        (transformers' ``slope_rate`` buffer of layer ``i`` of ``L`` is ``slope_rates(H, i, L)``).
        A rate above :data:`MAX_RATE` (1e4) runs as 1e4: either keeps none of the state.
    form : {"chunked", "sequential"}, default "chunked"
        Lightning attention's chunked tiling or the per-step loop (the same outputs and states
        to round-off).
    chunk : int, default 64
        Steps per chunk of the chunked form (transformers' ``block_size``; any value gives the
        same result).
    batch_first : bool, default False
        Input and output as (N, T, M) instead of (T, N, M).
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
        Draws the weights as transformers' ``MiniMaxPreTrainedModel`` does: normal with standard
        deviation 0.02 (``initializer_range``), ``norm.weight = 1``.

    Attributes
    ----------
    params : dict of str to ndarray
        ``qkv_proj.weight`` (3 H D, M), ``output_gate.weight`` (H D, M), ``out_proj.weight``
        (M, H D), ``norm.weight`` (H D,).
    slope_rate : ndarray of float64, shape (H,)
        ``lambda_h`` (not a parameter: no gradient).

    Raises
    ------
    TypeError, ValueError
        A size that is not a positive integer, slopes of another shape or not positive, an
        unknown ``form``, a flag that is not a bool, a dtype other than float32/float64.
    """

    state_type = LightningState
    supports = frozenset({"lengths"})

    def __init__(self, hidden_size, num_heads, *, head_dim=None, slope_rate=None, form="chunked", chunk=64,
                 batch_first=False, dtype=np.float64, rng=None):
        self.d_model = positive_int("hidden_size", hidden_size)
        self.num_heads = positive_int("num_heads", num_heads)
        self.head_dim = self.d_model // self.num_heads if head_dim is None else positive_int("head_dim", head_dim)
        if self.head_dim < 1:
            raise ValueError(f"head_dim must be positive; got hidden_size // num_heads = {self.head_dim}. Pass head_dim.")
        H = self.num_heads
        self.form = choice("form", form, kernel.FORMS)
        self.chunk = positive_int("chunk", chunk)
        self.batch_first = boolean("batch_first", batch_first)
        self.dtype = float_dtype("dtype", dtype)
        self._check_sizes(hidden_size=self.d_model, num_heads=H, head_dim=self.head_dim)
        if slope_rate is None:
            self.slope_rate = slope_rates(H)
        else:
            s = float_array("slope_rate", slope_rate, dtype=np.float64)
            if s.shape != (H,) or not (s > 0).all():
                raise ValueError(f"slope_rate must have shape (H={H},) with every value > 0; got shape "
                                 f"{shape_str(s.shape)} with minimum {s.min() if s.size else 'none'}.")
            self.slope_rate = s.copy()
        rng = generator(rng)
        M, HD = self.d_model, H * self.head_dim

        def normal(shape):
            return (0.02 * rng.standard_normal(shape)).astype(self.dtype)

        self.params = {"qkv_proj.weight": normal((3 * HD, M)), "output_gate.weight": normal((HD, M)),
                       "out_proj.weight": normal((M, HD)), "norm.weight": np.ones(HD, dtype=self.dtype)}

    def __repr__(self) -> str:
        return f"LightningAttention({self.d_model}, {self.num_heads}, head_dim={self.head_dim}, form={self.form!r})"

    def shapes(self) -> dict:
        """Every parameter's shape and its legend (for :func:`hiddenstate.core.params.check_params`).

        Returns
        -------
        dict of str to (tuple of int, str)
        """
        M, H, D = self.d_model, self.num_heads, self.head_dim
        HD = H * D
        return {"qkv_proj.weight": ((3 * HD, M), f"(3*H*D={3 * HD}, M={M})"),
                "output_gate.weight": ((HD, M), f"(H*D={HD}, M={M})"),
                "out_proj.weight": ((M, HD), f"(M={M}, H*D={HD})"), "norm.weight": ((HD,), f"(H*D={HD},)")}

    def _state_shapes(self, N):
        H, D = self.num_heads, self.head_dim
        return [((N, H, D, D), f"(N={N}, H={H}, D={D}, D={D})")]

    def _refusal(self, opt):
        return "MiniMax's lightning attention has no document resets: start a new call from a zero state instead."

    def _forward(self, p, u, s, lengths, reset):
        T, N, M = u.shape
        H, D = self.num_heads, self.head_dim
        HD = H * D
        uf = u.reshape(-1, M)
        pre = (uf @ p["qkv_proj.weight"].T).reshape(T, N, H, 3 * D)
        a, da = silu(pre)
        keep = None if lengths is None else (np.arange(T)[:, None] < lengths[None, :])  # (T, N)
        g = -np.minimum(self.slope_rate, MAX_RATE).astype(self.dtype)  # (H,): the same decay at every step
        if keep is not None:
            a *= keep[:, :, None, None]
            g = g * keep[:, :, None]  # (T, N, H): 0 (the state carried) at padded steps
        q, k, v = a[..., :D], a[..., D:2 * D], a[..., 2 * D:]
        Q = min(self.chunk, T)
        if self.form == "chunked" and Q > 64:  # one chunk's (N, H, Q, Q) products and decay factors at a time
            check_memory(f"LightningAttention.forward with chunk={self.chunk} over T={T}, N={N}: a chunk's (N, H, Q, Q) "
                         f"matrices", 3.0 * N * H * Q * Q * u.itemsize, "Pass a smaller chunk (64 is transformers' own).")
        o, S_T, ac = kernel.attention_forward(q, k, v, g, s[0], form=self.form, chunk=self.chunk)
        o = o.reshape(T, N, HD)
        nrm, inv = rms_norm(o, p["norm.weight"], _EPS)
        gate = logistic((uf @ p["output_gate.weight"].T).reshape(T, N, HD))
        y = gate * nrm
        out = (y.reshape(-1, HD) @ p["out_proj.weight"].T).reshape(T, N, M)
        if keep is not None:
            out *= keep[:, :, None]
        return out, LightningState(S_T), (p, u, da, keep, ac, o, nrm, inv, gate, y)

    def _backward(self, kc, d_out, d_final):
        p, u, da, keep, ac, o, nrm, inv, gate, y = kc
        T, N, M = u.shape
        H, D = self.num_heads, self.head_dim
        HD = H * D
        uf = u.reshape(-1, M)
        d_out = np.zeros((T, N, M), dtype=u.dtype) if d_out is None else d_out
        if keep is not None:
            d_out = d_out * keep[:, :, None]
        grads = {"out_proj.weight": d_out.reshape(-1, M).T @ y.reshape(-1, HD)}
        d_y = (d_out.reshape(-1, M) @ p["out_proj.weight"]).reshape(T, N, HD)
        d_gpre = d_y * nrm * gate * (1.0 - gate)
        grads["output_gate.weight"] = d_gpre.reshape(-1, HD).T @ uf
        d_o, grads["norm.weight"] = rms_norm_backward(o, p["norm.weight"], inv, d_y * gate)
        d_q, d_k, d_v, d_S0 = kernel.attention_backward(ac, d_o.reshape(T, N, H, D), d_final[0] if d_final else None)
        d_pre = np.concatenate([d_q, d_k, d_v], axis=-1) * da  # (T, N, H, 3 D)
        if keep is not None:
            d_pre *= keep[:, :, None, None]
        d_pre = d_pre.reshape(-1, 3 * HD)
        grads["qkv_proj.weight"] = d_pre.T @ uf
        d_u = (d_pre @ p["qkv_proj.weight"] + d_gpre.reshape(-1, HD) @ p["output_gate.weight"]).reshape(T, N, M)
        return {k: grads[k] for k in p}, d_u, LightningState(d_S0)

    def _recorded(self, kc):
        p, u, da, keep, ac, o, nrm, inv, gate, y = kc
        q, k, v = ac[2], ac[3], ac[4]
        T, N, H, D = q.shape
        check_memory("record=True", T * N * H * D * D * q.itemsize,
                     f"Every step's state is T*N*H*D*D = {T * N * H * D * D} numbers "
                     f"({format_bytes(T * N * H * D * D * q.itemsize)}): record a shorter call.")
        return LightningRecord(kv=kernel.states(ac), q=q, k=k, v=v, decay=np.exp(-self.slope_rate), gate=gate)

