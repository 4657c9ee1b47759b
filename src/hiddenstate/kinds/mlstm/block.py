"""xLSTM's mLSTM layer with its state in the open: :class:`MLSTMLayer` (transformers' ``xLSTMLayer``).

The layer of Beck et al. (2024) as transformers' ``xLSTMLayer`` computes it, in its parameter
names and layouts (``weight_mode="single"``: ``q``, ``k``, ``v``, ``ogate_preact``,
``igate_preact``, ``fgate_preact``, ``multihead_norm``, ``out_proj``; ``"fused"``:
``qkv_opreact``, ``ifgate_preact``, ``multihead_norm``, ``out_proj``), so a state dict maps 1:1.
The recurrence and its kernels are in :mod:`hiddenstate.kinds.mlstm.kernel`.

==============  ===========================================================================
state           an :class:`~hiddenstate.kinds.mlstm.kernel.MLSTMState` ``(C (N, H, Dk, Dv), n (N, H, Dk),
                m (N, H, 1))``, transformers' ``xLSTMCache.rnn_state[layer]``; an input (None:
                zeros) and the final state an output
every step      ``forward(..., record=True)`` also returns every step's state (memory checked first)
gradients       :meth:`MLSTMLayer.backward`: every parameter, the input and the initial C, n, m,
                with the final state's gradient honoured
carry           pass the returned state to the next call: two chunks give what one long call gives
==============  ===========================================================================

Agreement with transformers' ``xLSTMLayer`` (tests/test_mlstm.py, measured at M = 8, H = 2, N = 3):
its recurrent path keeps the state in ``inference_state_dtype`` (float32 by default, whatever the
model's dtype) and its norms reduce in float32 (``norm_reduction_force_float32``), so a float32
layer agrees to float32 round-off (outputs 2.9e-7 relative at T = 13, 7.4e-7 at T = 40 through its
chunkwise path; states 1e-7); with both set to float64 the agreement is 8e-16 (outputs) and
4e-16 (states). Its chunkwise stabiliser is the same maximum as the sequential one, so even the
stabilised states (C, n, m) agree, not only ``C exp(m)``.

A :class:`~hiddenstate.shared.seqblock.SequenceBlock`: ``forward(u, state=None, *, lengths=None,
reset=None, record=False)``, ``backward(cache, d_out, d_state_n=None)``, ``initial_state(N)``,
``state_dict``/``load_state_dict`` as every block of the modern recurrent families. Not here:
right-padded batches (``lengths``) and ``reset`` (refused in one line: the layer takes whole sequences).
"""

from __future__ import annotations

import math

import numpy as np

from hiddenstate.core.validation import boolean, choice, float_dtype, generator, positive_int, real
from hiddenstate.kinds.mlstm import kernel
from hiddenstate.kinds.mlstm.kernel import MLSTMState
from hiddenstate.shared.seqblock import SequenceBlock

__all__ = ["MLSTMLayer", "MLSTMState"]


def _mm(x, W):
    """``x @ W`` for x (T, N, K) as one 2-D product (numpy runs a 3-D @ 2-D product as T small ones)."""
    return (x.reshape(-1, x.shape[-1]) @ W).reshape(x.shape[:-1] + (W.shape[-1],))


class MLSTMLayer(SequenceBlock):
    """One mLSTM layer (Beck et al. 2024): ``out, state_n = layer(u, state)``, transformers' ``xLSTMLayer``.

    ``q, k, v, o = W u``; ``i, f = cap tanh((W_if u + b_if) / cap)`` (the gates' soft cap);
    per head ``h_t`` by the mLSTM recurrence (:mod:`hiddenstate.kinds.mlstm.kernel`); ``h`` layer-normed
    per head (``multihead_norm``: mean and variance over Dv, then the weight and bias over all
    H Dv channels); ``out = out_proj(sigmoid(o) * norm(h))``.

    Parameters
    ----------
    hidden_size : int
        M, features in and out.
    num_heads : int
        H; ``qk_dim = int(M * qk_dim_factor)`` and ``v_dim = int(M * v_dim_factor)`` must be
        multiples of it (Dk = qk_dim / H, Dv = v_dim / H).
    qk_dim_factor : float, default 0.5
    v_dim_factor : float, default 1.0
    use_bias : bool, default False
        Whether the projections, the norm and ``out_proj`` have biases (the gates always have one).
    weight_mode : {"single", "fused"}, default "single"
        transformers' two layouts of the same projections.
    gate_soft_cap : float or None, default 15.0
        ``cap`` of the gates' soft cap (None: none).
    norm_eps : float, default 1e-6
        The per-head layer norm's epsilon.
    eps : float, default 1e-6
        The recurrence's denominator epsilon.
    scan : {"chunkwise", "parallel", "sequential"}, default "chunkwise"
        How the C/n recurrence runs (:mod:`hiddenstate.kinds.mlstm.kernel`); the same numbers to round-off.
    batch_first : bool, default False
        Input and output as (N, T, M) instead of (T, N, M) (transformers' layout).
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
        Draws the weights as transformers' ``xLSTMPreTrainedModel._init_weights`` does for one
        block: projections normal with std ``sqrt(2 / (5 M))``, ``out_proj`` std ``2 / sqrt(M)``,
        gate weights 0, input-gate bias -10, forget-gate biases ``linspace(3, 6, H)``, other biases 0,
        norm weight 1.

    Attributes
    ----------
    params : dict of str to ndarray
        ``"single"``: ``q.weight``, ``k.weight`` (Qk, M), ``v.weight``, ``ogate_preact.weight``
        (V, M), ``igate_preact.weight``, ``fgate_preact.weight`` (H, M) and their biases (H,),
        ``multihead_norm.weight`` (V,), ``out_proj.weight`` (M, V) (and the optional biases).
        ``"fused"``: ``qkv_opreact.weight`` (2 Qk + 2 V, M), ``ifgate_preact.weight`` (2 H, M),
        ``ifgate_preact.bias`` (2 H,), the norm and ``out_proj``.

    Raises
    ------
    TypeError, ValueError
        A size that is not a positive integer, dimensions not divisible by ``num_heads``, an
        unknown ``weight_mode`` or ``scan``, a non-positive epsilon or cap (or a cap beyond the
        dtype's range), a dtype other than float32/float64.
    """

    state_type = MLSTMState
    supports = frozenset()

    def __init__(self, hidden_size, num_heads, *, qk_dim_factor=0.5, v_dim_factor=1.0, use_bias=False,
                 weight_mode="single", gate_soft_cap=15.0, norm_eps=1e-6, eps=1e-6, scan="chunkwise",
                 batch_first=False, dtype=np.float64, rng=None):
        self.hidden_size = self.d_model = positive_int("hidden_size", hidden_size)
        self.num_heads = positive_int("num_heads", num_heads)
        dims = {}
        for name, factor in (("qk_dim", qk_dim_factor), ("v_dim", v_dim_factor)):
            d = self.hidden_size * real(f"{name}_factor", factor, low=0.0, low_open=True)
            if not math.isfinite(d):  # int(inf) would raise OverflowError
                raise ValueError(f"{name} = int(hidden_size * {name}_factor) must be finite; got {self.hidden_size} * "
                                 f"{factor!r}.")
            dims[name] = d = int(d)
            if d == 0 or d % self.num_heads:
                raise ValueError(f"{name} = int(hidden_size * {name}_factor) must be a positive multiple of "
                                 f"num_heads={self.num_heads}; got {d}.")
        self.qk_dim, self.v_dim = dims["qk_dim"], dims["v_dim"]
        self.use_bias = boolean("use_bias", use_bias)
        self.weight_mode = choice("weight_mode", weight_mode, ("single", "fused"))
        self.gate_soft_cap = None if gate_soft_cap is None else real("gate_soft_cap", gate_soft_cap, low=0.0,
                                                                     low_open=True)
        self.norm_eps = real("norm_eps", norm_eps, low=0.0, low_open=True)
        self.eps = real("eps", eps, low=0.0)
        self.scan = choice("scan", scan, kernel.SCANS)
        self.batch_first = boolean("batch_first", batch_first)
        self.dtype = float_dtype("dtype", dtype)
        info = np.finfo(self.dtype)  # cap * tanh(g / cap) would overflow, or divide by a cap that is 0 in the dtype
        if self.gate_soft_cap is not None and not float(info.tiny) <= self.gate_soft_cap <= float(info.max):
            raise ValueError(f"gate_soft_cap must lie in {self.dtype}'s normal range [{info.tiny:.3g}, {info.max:.3g}], "
                             f"or be None for no cap; got {self.gate_soft_cap:g}.")
        rng = generator(rng)
        self._check_sizes(hidden_size=self.hidden_size, qk_dim=self.qk_dim, v_dim=self.v_dim)
        M, H = self.hidden_size, self.num_heads
        std = (2 / (5 * M)) ** 0.5
        W = rng.normal(0.0, std, size=(2 * self.qk_dim + 2 * self.v_dim, M))
        b_if = np.concatenate([np.full(H, -10.0), np.linspace(3.0, 6.0, H)])
        p = {}
        if self.weight_mode == "single":
            for name, (s, e) in self._blocks().items():
                p[f"{name}.weight"] = W[s:e]
                if self.use_bias:
                    p[f"{name}.bias"] = np.zeros(e - s)
            p["igate_preact.weight"], p["igate_preact.bias"] = np.zeros((H, M)), b_if[:H]
            p["fgate_preact.weight"], p["fgate_preact.bias"] = np.zeros((H, M)), b_if[H:]
        else:
            p["qkv_opreact.weight"] = W
            if self.use_bias:
                p["qkv_opreact.bias"] = np.zeros(W.shape[0])
            p["ifgate_preact.weight"], p["ifgate_preact.bias"] = np.zeros((2 * H, M)), b_if
        p["multihead_norm.weight"] = np.ones(self.v_dim)
        if self.use_bias:
            p["multihead_norm.bias"] = np.zeros(self.v_dim)
        p["out_proj.weight"] = rng.normal(0.0, 2 / M ** 0.5, size=(M, self.v_dim))
        if self.use_bias:
            p["out_proj.bias"] = np.zeros(M)
        self.params = {key: np.ascontiguousarray(val, dtype=self.dtype) for key, val in p.items()}

    def _blocks(self):
        """The rows of the fused projection (2 Qk + 2 V, M) by their ``"single"`` names."""
        Qk, V = self.qk_dim, self.v_dim
        return {"q": (0, Qk), "k": (Qk, 2 * Qk), "v": (2 * Qk, 2 * Qk + V), "ogate_preact": (2 * Qk + V, 2 * Qk + 2 * V)}

    def __repr__(self) -> str:
        return (f"MLSTMLayer({self.hidden_size}, {self.num_heads}, qk_dim={self.qk_dim}, v_dim={self.v_dim}, "
                f"weight_mode={self.weight_mode!r})")

    def shapes(self) -> dict:
        """Every parameter's shape and its legend (for :func:`hiddenstate.core.params.check_params`).

        Returns
        -------
        dict of str to (tuple of int, str)
        """
        M, H, Qk, V = self.hidden_size, self.num_heads, self.qk_dim, self.v_dim
        out = {}
        if self.weight_mode == "single":
            for name, (s, e) in self._blocks().items():
                out[f"{name}.weight"] = ((e - s, M), f"({e - s}, M={M})")
                if self.use_bias:
                    out[f"{name}.bias"] = ((e - s,), f"({e - s},)")
            for g in ("igate_preact", "fgate_preact"):
                out[f"{g}.weight"], out[f"{g}.bias"] = ((H, M), f"(H={H}, M={M})"), ((H,), f"(H={H},)")
        else:
            out["qkv_opreact.weight"] = ((2 * Qk + 2 * V, M), f"(2 Qk + 2 V={2 * Qk + 2 * V}, M={M})")
            if self.use_bias:
                out["qkv_opreact.bias"] = ((2 * Qk + 2 * V,), f"(2 Qk + 2 V={2 * Qk + 2 * V},)")
            out["ifgate_preact.weight"], out["ifgate_preact.bias"] = ((2 * H, M), f"(2 H={2 * H}, M={M})"), \
                ((2 * H,), f"(2 H={2 * H},)")
        out["multihead_norm.weight"] = ((V,), f"(V={V},)")
        if self.use_bias:
            out["multihead_norm.bias"] = ((V,), f"(V={V},)")
        out["out_proj.weight"] = ((M, V), f"(M={M}, V={V})")
        if self.use_bias:
            out["out_proj.bias"] = ((M,), f"(M={M},)")
        return out

    def _state_shapes(self, N):
        H, Dk, Dv = self.num_heads, self.qk_dim // self.num_heads, self.v_dim // self.num_heads
        return [((N, H, Dk, Dv), f"(N={N}, H={H}, Dk={Dk}, Dv={Dv})"), ((N, H, Dk), f"(N={N}, H={H}, Dk={Dk})"),
                ((N, H, 1), f"(N={N}, H={H}, 1)")]

    def _refusal(self, opt):
        return "MLSTMLayer takes whole sequences: run rows of other lengths, or documents, in calls of their own."

    def _weights(self, p):
        """The fused projection, its bias (or None) and the gates' weight and bias, whatever the mode."""
        if self.weight_mode == "fused":
            return p["qkv_opreact.weight"], p.get("qkv_opreact.bias"), p["ifgate_preact.weight"], \
                p["ifgate_preact.bias"]
        names = tuple(self._blocks())
        W = np.concatenate([p[f"{n}.weight"] for n in names])
        b = np.concatenate([p[f"{n}.bias"] for n in names]) if self.use_bias else None
        Wg = np.concatenate([p["igate_preact.weight"], p["fgate_preact.weight"]])
        bg = np.concatenate([p["igate_preact.bias"], p["fgate_preact.bias"]])
        return W, b, Wg, bg

    def _forward(self, p, x, s, lengths, reset):
        T, N, M = x.shape
        H, Qk, V = self.num_heads, self.qk_dim, self.v_dim
        Dk, Dv = Qk // H, V // H
        W, b, Wg, bg = self._weights(p)
        proj = _mm(x, W.T)  # (T, N, 2 Qk + 2 V)
        if b is not None:
            proj += b
        g_raw = _mm(x, Wg.T) + bg  # (T, N, 2 H)
        cap = self.gate_soft_cap
        th = None if cap is None else np.tanh(g_raw / cap)
        gates = g_raw if cap is None else cap * th
        q = proj[..., :Qk].reshape(T, N, H, Dk)
        k = proj[..., Qk:2 * Qk].reshape(T, N, H, Dk)
        v = proj[..., 2 * Qk:2 * Qk + V].reshape(T, N, H, Dv)
        o = proj[..., 2 * Qk + V:]
        h, final, kc = kernel.mlstm_forward(q, k, v, gates[..., :H], gates[..., H:], MLSTMState(*s), eps=self.eps,
                                            scan=self.scan)
        xc = h - h.mean(axis=-1, keepdims=True)  # (T, N, H, Dv): the per-head layer norm
        r = 1.0 / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + self.norm_eps)
        hn = (xc * r).reshape(T, N, V)
        nw = hn * p["multihead_norm.weight"]
        if self.use_bias:
            nw += p["multihead_norm.bias"]
        so = np.negative(o)  # sigmoid(o) = 1 / (1 + exp(-o)), in place: exp(-o) = inf gives 0
        with np.errstate(over="ignore"):
            np.exp(so, out=so)
        so += 1.0
        np.reciprocal(so, out=so)
        hout = so * nw
        out = _mm(hout, p["out_proj.weight"].T)
        if self.use_bias:
            out += p["out_proj.bias"]
        return out, final, (p, x, W, Wg, th, kc, r, hn, nw, so, hout)

    def _backward(self, values, d_out, d_final):
        p, x, W, Wg, th, kc, r, hn, nw, so, hout = values
        T, N, M = x.shape
        H, Qk, V = self.num_heads, self.qk_dim, self.v_dim
        d_out = np.zeros((T, N, M), dtype=self.dtype) if d_out is None else d_out
        g = {}
        d2 = d_out.reshape(-1, M)
        g["out_proj.weight"] = d2.T @ hout.reshape(-1, V)
        if self.use_bias:
            g["out_proj.bias"] = d2.sum(axis=0)
        d_hout = _mm(d_out, p["out_proj.weight"])  # (T, N, V)
        d_o = d_hout * nw * so * (1.0 - so)
        d_nw = d_hout * so
        g["multihead_norm.weight"] = (d_nw * hn).reshape(-1, V).sum(axis=0)
        if self.use_bias:
            g["multihead_norm.bias"] = d_nw.reshape(-1, V).sum(axis=0)
        d_hn = (d_nw * p["multihead_norm.weight"]).reshape(T, N, H, V // H)
        xn = hn.reshape(T, N, H, V // H)
        d_h = r * (d_hn - d_hn.mean(axis=-1, keepdims=True) - xn * (d_hn * xn).mean(axis=-1, keepdims=True))
        (d_q, d_k, d_v, d_i, d_f), d_state = kernel.mlstm_backward(
            kc, d_h, None if d_final is None else MLSTMState(*d_final))
        d_gates = np.concatenate([d_i, d_f], axis=-1)  # (T, N, 2 H)
        if th is not None:
            d_gates = d_gates * (1.0 - th * th)
        d_proj = np.concatenate([d_q.reshape(T, N, Qk), d_k.reshape(T, N, Qk), d_v.reshape(T, N, V), d_o], axis=-1)
        x2 = x.reshape(-1, M)
        dW = d_proj.reshape(-1, d_proj.shape[-1]).T @ x2
        dWg = d_gates.reshape(-1, 2 * H).T @ x2
        db, dbg = d_proj.reshape(-1, d_proj.shape[-1]).sum(axis=0), d_gates.reshape(-1, 2 * H).sum(axis=0)
        d_u = _mm(d_proj, W) + _mm(d_gates, Wg)
        if self.weight_mode == "fused":
            g["qkv_opreact.weight"], g["ifgate_preact.weight"], g["ifgate_preact.bias"] = dW, dWg, dbg
            if self.use_bias:
                g["qkv_opreact.bias"] = db
        else:
            for name, (lo, hi) in self._blocks().items():
                g[f"{name}.weight"] = dW[lo:hi]
                if self.use_bias:
                    g[f"{name}.bias"] = db[lo:hi]
            g["igate_preact.weight"], g["fgate_preact.weight"] = dWg[:H], dWg[H:]
            g["igate_preact.bias"], g["fgate_preact.bias"] = dbg[:H], dbg[H:]
        return {key: np.ascontiguousarray(g[key]) for key in p}, d_u, d_state

    def _recorded(self, values):
        return kernel.mlstm_states(values[5])
