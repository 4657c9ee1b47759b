"""ZAYA's compressed convolutional attention projection (CCA): stacked causal convolutions and a delayed value.

In the names and layouts of transformers' ``ZayaCCAProjection`` (u the layer input, (N, T, M);
``Hq`` query heads and ``Hk`` key/value heads of D channels, G = Hq / Hk; ``Cq = Hq D``,
``Ck = Hk D``; kernel sizes ``t0 = cca_time0``, ``t1 = cca_time1``, W = (t0 - 1) + (t1 - 1))::

    q_t, k_t   = q_proj(u_t), k_proj(u_t)                        (Cq,), (Ck,)
    z_t        = [q_t | k_t]                                     (Cq + Ck,)
    a_s        = conv_qk_depthwise over z (valid, t0 taps, bias)  causal: the W inputs before step 0 are the window
    c_t        = conv_qk_grouped over a (valid, t1 taps, bias,    Hq + Hk groups of D channels)
    r^q_t      = (q_t + k_t of the query head's key head) / 2    per query head
    r^k_t      = the mean of r^q_t over the G query heads of a key head
    query_t    = c_t[:Cq] + r^q_t,    key_t = c_t[Cq:] + r^k_t
    value_t    = [v_proj_current(u_t) | v_proj_delayed(u_{t-1})]  (Ck,): the delayed half one token late

The state is the window of the last W values of ``z`` (N, Cq + Ck, W), oldest first, and the
last token's delayed value projection (N, Ck / 2): before the first token it is
``v_proj_delayed(0)`` (its bias, or zeros), as transformers' forward without a cache. Nothing else
carries across steps. The output is ``[query | key | value]`` flattened, (N, T, Cq + 2 Ck).

Kernel contract (batch-first arrays)
------------------------------------
``forward(p, u, window0, v0, heads) -> (out, window_T, v_T, cache)``
``backward(cache, d_out, d_window_T, d_v_T) -> (grads, d_u, d_window0, d_v0)``, ``grads`` by name.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PARAMS", "backward", "forward"]

#: The parameters in transformers' ``ZayaCCAProjection`` names (the projections' biases only with attention_bias).
PARAMS = ("q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias", "v_proj_current.weight",
          "v_proj_current.bias", "v_proj_delayed.weight", "v_proj_delayed.bias", "conv_qk_depthwise.weight",
          "conv_qk_depthwise.bias", "conv_qk_grouped.weight", "conv_qk_grouped.bias")


def _linear(p, name, u):
    y = u @ p[f"{name}.weight"].T
    b = p.get(f"{name}.bias")
    return y if b is None else y + b


def _valid_conv(x, w):
    """``y[s] = sum_i w[..., i] x[s + i]`` over the time axis 1 of x (N, S, C): (N, S - taps + 1, ...)."""
    taps = w.shape[-1]
    S = x.shape[1] - taps + 1
    return np.stack([x[:, i:i + S] for i in range(taps)], axis=-1), S


def forward(p: dict, u: np.ndarray, window0: np.ndarray, v0: np.ndarray, heads: tuple):
    """The CCA projection over all T steps (the equations of the module docstring).

    Parameters
    ----------
    p : dict of str to ndarray
        :data:`PARAMS` by name (the projections' biases may be absent).
    u : ndarray of shape (N, T, M)
    window0 : ndarray of shape (N, Cq+Ck, W)
        The last W values of ``z`` before step 0, oldest first.
    v0 : ndarray of shape (N, Ck/2)
        The delayed value projection of the token before step 0.
    heads : (int, int, int)
        ``(Hq, Hk, D)``.

    Returns
    -------
    out : ndarray of shape (N, T, Cq+2Ck)
        ``[query | key | value]``.
    window_T : ndarray of shape (N, Cq+Ck, W)
    v_T : ndarray of shape (N, Ck/2)
    cache : tuple
        What :func:`backward` reads.
    """
    Hq, Hk, D = heads
    N, T, _ = u.shape
    G = Hq // Hk
    q, k = _linear(p, "q_proj", u), _linear(p, "k_proj", u)
    z = np.concatenate([q, k], axis=-1)
    C = z.shape[-1]
    W = window0.shape[-1]
    zp = np.concatenate([window0.transpose(0, 2, 1), z], axis=1)  # (N, W+T, C)
    w1, w2 = p["conv_qk_depthwise.weight"][:, 0], p["conv_qk_grouped.weight"]  # (C, t0), (C, D, t1)
    win1, S = _valid_conv(zp, w1)  # (N, S, C, t0)
    a = np.einsum("nsci,ci->nsc", win1, w1) + p["conv_qk_depthwise.bias"]
    win2, _ = _valid_conv(a, w2)  # (N, T, C, t1)
    g2 = win2.reshape(N, T, Hq + Hk, D, -1)
    c = np.einsum("ntgdi,godi->ntgo", g2, w2.reshape(Hq + Hk, D, D, -1)).reshape(N, T, C) + p["conv_qk_grouped.bias"]
    kq = np.repeat(k.reshape(N, T, Hk, D), G, axis=2)  # each query head's key head
    rq = (q.reshape(N, T, Hq, D) + kq) / 2
    rk = rq.reshape(N, T, Hk, G, D).mean(axis=3)
    vc, vd = _linear(p, "v_proj_current", u), _linear(p, "v_proj_delayed", u)
    delayed = np.concatenate([v0[:, None], vd[:, :-1]], axis=1)
    out = np.concatenate([c[..., :Hq * D] + rq.reshape(N, T, -1), c[..., Hq * D:] + rk.reshape(N, T, -1), vc,
                          delayed], axis=-1)
    window_T = zp[:, T:].transpose(0, 2, 1).copy()
    return out, window_T, vd[:, -1].copy(), (p, u, zp, win1, win2, heads, W)


def backward(cache, d_out: np.ndarray, d_window_T=None, d_v_T=None):
    """The exact gradients of :func:`forward`.

    Parameters
    ----------
    cache : tuple
        From :func:`forward`.
    d_out : ndarray of shape (N, T, Cq+2Ck)
    d_window_T : ndarray of shape (N, Cq+Ck, W), optional
    d_v_T : ndarray of shape (N, Ck/2), optional

    Returns
    -------
    grads : dict of str to ndarray
        Every parameter of ``p`` by name.
    d_u : ndarray of shape (N, T, M)
    d_window0 : ndarray of shape (N, Cq+Ck, W)
    d_v0 : ndarray of shape (N, Ck/2)
    """
    p, u, zp, win1, win2, (Hq, Hk, D), W = cache
    N, T, M = u.shape
    G, Cq, Ck = Hq // Hk, Hq * D, Hk * D
    C = Cq + Ck
    w1, w2 = p["conv_qk_depthwise.weight"][:, 0], p["conv_qk_grouped.weight"]
    t0, t1 = w1.shape[-1], w2.shape[-1]
    dq_out, dk_out = d_out[..., :Cq], d_out[..., Cq:C]
    d_vc, d_del = d_out[..., C:C + Ck // 2], d_out[..., C + Ck // 2:]
    d_c = np.concatenate([dq_out, dk_out], axis=-1)  # (N, T, C)
    d_rq = dq_out.reshape(N, T, Hq, D) + np.repeat(dk_out.reshape(N, T, Hk, 1, D) / G, G, axis=3).reshape(N, T, Hq, D)
    d_q = d_rq.reshape(N, T, Cq) / 2
    d_k = d_rq.reshape(N, T, Hk, G, D).sum(axis=3).reshape(N, T, Ck) / 2
    grads = {"conv_qk_grouped.bias": d_c.sum(axis=(0, 1))}
    dcg = d_c.reshape(N, T, Hq + Hk, D)
    w2g = w2.reshape(Hq + Hk, D, D, t1)  # (group, out, in, tap)
    grads["conv_qk_grouped.weight"] = np.einsum("ntgo,ntgdi->godi", dcg, win2.reshape(N, T, Hq + Hk, D, t1)).reshape(
        w2.shape)
    d_win2 = np.einsum("ntgo,godi->ntgdi", dcg, w2g).reshape(N, T, C, t1)
    S = T + t1 - 1
    d_a = np.zeros((N, S, C), dtype=d_out.dtype)
    for i in range(t1):
        d_a[:, i:i + T] += d_win2[..., i]
    grads["conv_qk_depthwise.bias"] = d_a.sum(axis=(0, 1))
    grads["conv_qk_depthwise.weight"] = np.einsum("nsc,nsci->ci", d_a, win1)[:, None]
    d_zp = np.zeros((N, W + T, C), dtype=d_out.dtype)
    for i in range(t0):
        d_zp[:, i:i + S] += d_a * w1[:, i]
    if d_window_T is not None and W:
        d_zp[:, T:] += d_window_T.transpose(0, 2, 1)
    d_q += d_zp[:, W:, :Cq]
    d_k += d_zp[:, W:, Cq:]
    d_vd = np.zeros((N, T, Ck // 2), dtype=d_out.dtype)
    d_vd[:, :-1] = d_del[:, 1:]
    if d_v_T is not None:
        d_vd[:, -1] += d_v_T
    d_u = np.zeros_like(u)
    uf = u.reshape(N * T, M)
    for name, dy in (("q_proj", d_q), ("k_proj", d_k), ("v_proj_current", d_vc), ("v_proj_delayed", d_vd)):
        dyf = dy.reshape(N * T, -1)
        grads[f"{name}.weight"] = dyf.T @ uf
        if f"{name}.bias" in p:
            grads[f"{name}.bias"] = dyf.sum(axis=0)
        d_u += (dyf @ p[f"{name}.weight"]).reshape(N, T, M)
    return grads, d_u, d_zp[:, :W].transpose(0, 2, 1).copy(), d_del[:, 0].copy()
