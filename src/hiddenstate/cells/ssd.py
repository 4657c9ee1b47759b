"""SSD, the chunked matrix form of a recurrence with a scalar decay per head (Dao & Gu 2024, Sec. 6), and its exact adjoint.

For every row and head, ``h_t = exp(a_t) h_{t-1} + u_t B_t^T`` (``h`` (P, S), ``a_t <= 0`` a
scalar) read out as ``y_t = h_t C_t``. Over a chunk of Q steps starting from ``h_in`` this is

    y_i   = sum_{j <= i} exp(seg(i, j)) (C_i . B_j) u_j  +  exp(l_i) h_in C_i
    h_out = exp(l_{Q-1}) h_in + sum_j exp(seg(Q-1, j)) u_j B_j^T

with ``l_i = a_0 + ... + a_i`` and ``seg(i, j) = a_{j+1} + ... + a_i`` (the segment sum, formed
as a masked cumulative sum rather than a difference of cumulative sums, so a long run of strong
decays loses no digits): the first term is a (Q, Q) masked "attention" matrix ``L o (C B^T)``
applied to ``u``, the second and the state are low-rank, and only the chunk-to-chunk state is a
loop (T / Q steps). This is the "state space duality" of the paper: the same outputs as the scan,
computed as matrix products. The adjoint below is this module's own, derived term by term
(``dL/dseg``, ``dL/dl`` then ``dL/da`` by the sums that built them).

References
----------
T. Dao, A. Gu, "Transformers are SSMs: Generalized models and efficient algorithms through
structured state space duality", arXiv:2405.21060, 2024.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SSD_CHUNK", "ssd_backward", "ssd_forward"]

#: Steps per chunk of the SSD form (its work space is O(SSD_CHUNK^2 * N * H)).
SSD_CHUNK = 64


def _segments(a):
    """``seg[i, j] = a_{j+1} + ... + a_i`` for ``i >= j`` (-inf above the diagonal) and ``l_i`` for one chunk.

    ``a`` is (Q, N, H); returns ``seg`` (N, H, Q, Q) and ``l`` (Q, N, H).
    """
    Q = a.shape[0]
    at = np.moveaxis(a, 0, -1)  # (N, H, Q)
    below = np.tril(np.ones((Q, Q), dtype=bool), -1)  # k > j
    X = np.where(below, at[..., :, None], 0.0)  # (N, H, Q k, Q j): a_k where k > j
    seg = np.cumsum(X, axis=-2)  # sum over j < k <= i
    seg = np.where(np.tril(np.ones((Q, Q), dtype=bool)), seg, -np.inf)
    return seg, np.cumsum(a, axis=0)


@np.errstate(under="ignore")
def ssd_forward(a, u, B, C, h0, *, chunk: int | None = None):
    """Every ``y_t = h_t C_t`` and the final state of ``h_t = exp(a_t) h_{t-1} + u_t B_t^T``, chunk by chunk.

    Parameters
    ----------
    a : ndarray of shape (T, N, H)
        The log decay of every step and head (``dt A``, <= 0).
    u : ndarray of shape (T, N, H, P)
        The input of every step (``dt x``).
    B, C : ndarray of shape (T, N, H, S)
        The input and output matrices of every head.
    h0 : ndarray of shape (N, H, P, S)
        The state before step 0.
    chunk : int, optional
        Q, steps per chunk (default :data:`SSD_CHUNK`).

    Returns
    -------
    y : ndarray of shape (T, N, H, P)
    h_T : ndarray of shape (N, H, P, S)
        The state after the last step (a copy of ``h0`` when T = 0).
    starts : list of ndarray of shape (N, H, P, S)
        The state entering each chunk, for :func:`ssd_backward`.
    """
    Q = chunk or SSD_CHUNK
    T = a.shape[0]
    y = np.empty(u.shape, dtype=u.dtype)
    h, starts = h0.copy(), []
    for s in range(0, T, Q):
        e = min(s + Q, T)
        ac, uc, Bc, Cc = a[s:e], u[s:e], B[s:e], C[s:e]
        seg, cum = _segments(ac)
        L = np.exp(seg)  # (N, H, Q, Q)
        M = np.einsum("inhs,jnhs->nhij", Cc, Bc) * L
        y[s:e] = np.einsum("nhij,jnhp->inhp", M, uc)
        y[s:e] += np.exp(cum)[..., None] * np.einsum("nhps,inhs->inhp", h, Cc)
        starts.append(h)
        r = np.moveaxis(L[..., -1, :], -1, 0)  # (Q, N, H): exp(seg(Q-1, j))
        h = np.exp(cum[-1])[..., None, None] * h + np.einsum("jnh,jnhp,jnhs->nhps", r, uc, Bc)
    return y, h, starts


@np.errstate(under="ignore")
def ssd_backward(a, u, B, C, starts, d_y, d_hT, *, chunk: int | None = None):
    """The exact adjoint of :func:`ssd_forward`.

    Parameters
    ----------
    a, u, B, C : ndarray
        As given to :func:`ssd_forward`.
    starts : list of ndarray
        From :func:`ssd_forward`.
    d_y : ndarray of shape (T, N, H, P)
        Gradient with respect to ``y``.
    d_hT : ndarray of shape (N, H, P, S) or None
        Gradient with respect to the final state.
    chunk : int, optional
        The ``chunk`` of the forward call.

    Returns
    -------
    d_a : ndarray of shape (T, N, H)
    d_u : ndarray of shape (T, N, H, P)
    d_B, d_C : ndarray of shape (T, N, H, S)
    d_h0 : ndarray of shape (N, H, P, S)
    """
    Q = chunk or SSD_CHUNK
    T = a.shape[0]
    d_a, d_u, d_B, d_C = np.zeros_like(a), np.zeros_like(u), np.zeros_like(B), np.zeros_like(C)
    g = np.zeros(u.shape[1:3] + (u.shape[3], B.shape[3]), dtype=u.dtype) if d_hT is None else d_hT.copy()
    for c in range((T + Q - 1) // Q - 1, -1, -1):
        s, e = c * Q, min(c * Q + Q, T)
        ac, uc, Bc, Cc, dy, h = a[s:e], u[s:e], B[s:e], C[s:e], d_y[s:e], starts[c]
        seg, cum = _segments(ac)
        L = np.exp(seg)
        Gm = np.einsum("inhs,jnhs->nhij", Cc, Bc)
        # the state leaving the chunk: h_out = exp(l_last) h + sum_j r_j u_j B_j^T (g = dL/dh_out)
        r = np.moveaxis(L[..., -1, :], -1, 0)  # (Q, N, H)
        gB = np.einsum("nhps,jnhs->jnhp", g, Bc)  # (Q, N, H, P): g B_j
        dr = (gB * uc).sum(axis=-1)  # (Q, N, H): <g, u_j B_j^T>
        d_u[s:e] = r[..., None] * gB
        d_B[s:e] = r[..., None] * np.einsum("nhps,jnhp->jnhs", g, uc)
        dec = np.exp(cum[-1])  # (N, H)
        d_cum = np.zeros_like(ac)
        d_cum[-1] += dec * np.einsum("nhps,nhps->nh", g, h)
        d_h = dec[..., None, None] * g
        d_seg = np.zeros_like(L)
        d_seg[..., -1, :] = np.moveaxis(dr * r, 0, -1)  # d exp(seg(Q-1, j)) * exp(seg(Q-1, j))
        # the diagonal block: y_i = sum_j L_ij G_ij u_j
        dM = np.einsum("inhp,jnhp->nhij", dy, uc)
        d_u[s:e] += np.einsum("nhij,inhp->jnhp", Gm * L, dy)
        dG = dM * L
        d_C[s:e] += np.einsum("nhij,jnhs->inhs", dG, Bc)
        d_B[s:e] += np.einsum("nhij,inhs->jnhs", dG, Cc)
        d_seg += dM * Gm * L  # d_seg where L > 0 (0 above the diagonal)
        # the part from the state entering the chunk: y_i += exp(l_i) h C_i
        w = np.einsum("nhps,inhs->inhp", h, Cc)  # (Q, N, H, P)
        el = np.exp(cum)  # (Q, N, H)
        d_cum += el * (dy * w).sum(axis=-1)
        dw = el[..., None] * dy
        d_h += np.einsum("inhp,inhs->nhps", dw, Cc)
        d_C[s:e] += np.einsum("nhps,inhp->inhs", h, dw)
        # back to a: l_i = sum_{k <= i} a_k, seg(i, j) = sum_{j < k <= i} a_k
        d_a[s:e] = np.cumsum(d_cum[::-1], axis=0)[::-1]
        R = np.cumsum(d_seg[..., ::-1, :], axis=-2)[..., ::-1, :]  # R[k, j] = sum_{i >= k} d_seg[i, j]
        d_a[s:e] += np.moveaxis(np.where(np.tril(np.ones(R.shape[-2:], dtype=bool), -1), R, 0.0).sum(axis=-1), -1, 0)
        g = d_h
    return d_a, d_u, d_B, d_C, g
