"""The gated delta rule (Yang et al. 2024) and Kimi Delta Attention: one kernel, sequential and chunked, with its exact backward.

Per row n and head h the state is a matrix ``S`` of shape (Dk, Dv), stored as (N, H, Dk, Dv):
the orientation of transformers' cache (``recurrent_states``) and of flash-linear-attention's
``initial_state``/``final_state``, so a state goes in and out of their caches unchanged. (The
paper writes the transpose, ``S`` (Dv, Dk) with ``S_t = S_{t-1} diag(alpha_t) (I - beta_t k_t
k_t^T) + beta_t v_t k_t^T``; the two are the same equations.) One step, exactly as
transformers' ``torch_recurrent_gated_delta_rule`` and ``recurrent_kimi_delta_attention`` (and
fla's ``naive_recurrent_gated_delta_rule`` / ``naive_recurrent_kda``) compute it::

    P_t = diag(exp(g_t)) S_{t-1}                      decay: g_t <= 0 in log space
    u_t = beta_t (v_t - P_t^T k_t)                    the delta: what the decayed state mispredicts
    S_t = P_t + k_t u_t^T                             = (I - beta_t k_t k_t^T) P_t + beta_t k_t v_t^T
    o_t = S_t^T q_t                                   read out with the query (scaled by the caller)

``g_t`` is either one number per head, ``(T, N, H)`` (the gated delta rule of Qwen3-Next and
OLMo-hybrid: ``exp(g_t) = alpha_t`` multiplies the whole state), or one number per key channel,
``(T, N, H, Dk)`` (Kimi Delta Attention: a diagonal decay of the rows of ``S``). Both run
through the same code, the scalar as a decay of width 1 broadcast over the key channels.

The chunked form (``chunk=Q``) is the WY/UT form of DeltaNet (Yang et al. 2024, "Parallelizing
linear transformers with the delta rule"), generalised to a diagonal decay as in KDA. Over one
chunk of Q steps entering with state ``S`` and with ``G_i = g_0 + ... + g_i`` (inside the chunk)::

    A_ij  = beta_i sum_d k_i[d] k_j[d] exp(G_i[d] - G_j[d])       j < i  (strictly lower)
    U     = (I + A)^-1 (beta v - (beta k exp(G)) S)                 every u_i of the chunk at once
    O     = (q exp(G)) S + Attn U,   Attn_ij = sum_d q_i k_j exp(G_i - G_j), j <= i
    S_out = diag(exp(G_last)) S + (k exp(G_last - G))^T U

which is transformers' ``torch_chunk_gated_delta_rule`` / ``chunk_kimi_delta_attention``
(``new_values``, ``k_cumdecay``, ``intra_chunk_attn``), here in float64 and with its own
adjoint (:mod:`hiddenstate.kinds.delta.chunked`). The sequential form is the per-step loop above;
both give the same outputs, states and gradients to round-off (the tests hold them to 1e-12).

Kernel contract
---------------
``delta_forward(q, k, v, g, beta, S0, *, chunk=None) -> (o, S_T, cache)``
    ``q``, ``k`` (T, N, H, Dk); ``v`` (T, N, H, Dv); ``g`` (T, N, H) or (T, N, H, Dk); ``beta``
    (T, N, H); ``S0`` (N, H, Dk, Dv); ``chunk`` None (the sequential loop) or Q. Nothing is
    validated; every array has one float dtype.
``delta_backward(cache, d_o, d_S_T) -> (d_q, d_k, d_v, d_g, d_beta, d_S0)``
    ``d_o`` (T, N, H, Dv) or None, ``d_S_T`` (N, H, Dk, Dv) or None.
``delta_states(cache) -> ndarray (T, N, H, Dk, Dv)``
    Every step's state ``S_t``.

References
----------
S. Yang, J. Kautz, A. Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with delta rule",
arXiv:2412.06464, 2024.
S. Yang, B. Wang, Y. Zhang, Y. Shen, Y. Kim, "Parallelizing linear transformers with the delta
rule over sequence length", arXiv:2406.06484, 2024.
Kimi Team, "Kimi Linear: An expressive, efficient attention architecture", arXiv:2510.26692, 2025.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.kinds.delta import chunked as delta_chunk

__all__ = ["DELTA_CHUNK", "delta_backward", "delta_forward", "delta_states"]

#: The default Q, steps per chunk of the chunked form (transformers' and fla's ``chunk_size``).
DELTA_CHUNK = 64


def _decay_view(g):
    """``exp(g)`` shaped to multiply a state (..., Dk, Dv): (T, N, H, 1, 1) or (T, N, H, Dk, 1)."""
    a = np.exp(g)
    return a[..., None, None] if g.ndim == 3 else a[..., None]


@np.errstate(under="ignore")
def _sequential_forward(q, k, v, g, beta, S0):
    T = q.shape[0]
    a = _decay_view(g)
    states = np.empty((T,) + S0.shape, dtype=S0.dtype)  # (T, N, H, Dk, Dv)
    r = np.empty_like(v)  # v_t - P_t^T k_t
    o = np.empty_like(v)
    S = S0
    for t in range(T):
        P = a[t] * S
        r[t] = v[t] - (k[t][..., None, :] @ P)[..., 0, :]
        u = beta[t][..., None] * r[t]
        S = P + k[t][..., :, None] * u[..., None, :]
        o[t] = (q[t][..., None, :] @ S)[..., 0, :]
        states[t] = S
    return o, (S.copy() if T else S0.copy()), ("sequential", q, k, v, g, beta, S0, states, r)


@np.errstate(under="ignore")
def _sequential_backward(cache, d_o, d_ST):
    _, q, k, v, g, beta, S0, states, r = cache
    T = q.shape[0]
    a = _decay_view(g)
    d_q, d_k, d_v = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    d_g, d_beta = np.empty_like(g), np.empty_like(beta)
    dS = np.zeros_like(S0) if d_ST is None else d_ST.copy()
    for t in range(T - 1, -1, -1):
        S, prev = states[t], (states[t - 1] if t else S0)
        if d_o is not None:
            d_q[t] = (S @ d_o[t][..., None])[..., 0]
            dS += q[t][..., :, None] * d_o[t][..., None, :]
        else:
            d_q[t] = 0.0
        u = beta[t][..., None] * r[t]
        du = (k[t][..., None, :] @ dS)[..., 0, :]  # (N, H, Dv): dS^T k
        d_k[t] = (dS @ u[..., None])[..., 0]
        d_beta[t] = (du * r[t]).sum(axis=-1)
        dr = beta[t][..., None] * du
        d_v[t] = dr
        P = a[t] * prev
        d_k[t] -= (P @ dr[..., None])[..., 0]
        dP = dS - k[t][..., :, None] * dr[..., None, :]
        dPP = dP * P
        d_g[t] = dPP.sum(axis=(-2, -1)) if g.ndim == 3 else dPP.sum(axis=-1)
        dS = a[t] * dP
    return d_q, d_k, d_v, d_g, d_beta, dS


def delta_forward(q, k, v, g, beta, S0, *, chunk: int | None = None):
    """The gated delta rule over T steps (the module's equations): the forward kernel.

    Parameters
    ----------
    q, k : ndarray of shape (T, N, H, Dk)
        Queries (already scaled) and keys of every step and head.
    v : ndarray of shape (T, N, H, Dv)
        Values.
    g : ndarray of shape (T, N, H) or (T, N, H, Dk)
        The log decay (<= 0): one per head (gated delta rule) or one per key channel (KDA).
    beta : ndarray of shape (T, N, H)
        The write strength.
    S0 : ndarray of shape (N, H, Dk, Dv)
        The state before step 0.
    chunk : int, optional
        None: the per-step loop; Q: the chunked WY/UT form with chunks of Q steps.

    Returns
    -------
    o : ndarray of shape (T, N, H, Dv)
        ``S_t^T q_t``.
    S_T : ndarray of shape (N, H, Dk, Dv)
        The state after the last step (a copy of ``S0`` when T = 0).
    cache : tuple
        Opaque; for :func:`delta_backward` and :func:`delta_states`.
    """
    if chunk is None:
        return _sequential_forward(q, k, v, g, beta, S0)
    return delta_chunk.chunk_forward(q, k, v, g, beta, S0, chunk)


def delta_backward(cache, d_o, d_S_T):
    """The exact adjoint of :func:`delta_forward` (either form).

    The sequential form runs the step's adjoint backwards in time: with ``dS`` the gradient of
    ``S_t``, ``du = dS^T k``, ``d_beta = du . r``, ``d_v = beta du``, ``dP = dS - k (beta du)^T``,
    ``d_g = rowsum(dP o P)`` and ``dS_{t-1} = diag(exp(g_t)) dP``; the chunked form runs the
    chunk's adjoint (:func:`hiddenstate.kinds.delta.chunked.chunk_backward`).

    Parameters
    ----------
    cache : tuple
        From :func:`delta_forward`.
    d_o : ndarray of shape (T, N, H, Dv) or None
        Gradient with respect to ``o`` (None: zeros).
    d_S_T : ndarray of shape (N, H, Dk, Dv) or None
        Gradient with respect to the final state.

    Returns
    -------
    d_q, d_k : ndarray of shape (T, N, H, Dk)
    d_v : ndarray of shape (T, N, H, Dv)
    d_g : ndarray shaped like ``g``
    d_beta : ndarray of shape (T, N, H)
    d_S0 : ndarray of shape (N, H, Dk, Dv)
    """
    if cache[0] == "sequential":
        return _sequential_backward(cache, d_o, d_S_T)
    return delta_chunk.chunk_backward(cache, d_o, d_S_T)


def delta_states(cache) -> np.ndarray:
    """Every step's state from a forward cache.

    Parameters
    ----------
    cache : tuple
        From :func:`delta_forward`.

    Returns
    -------
    ndarray of shape (T, N, H, Dk, Dv)
        ``S_t`` after each step (the sequential form's own array; a new one for the chunked form).
    """
    if cache[0] == "sequential":
        return cache[7]
    return delta_chunk.chunk_states(cache)
