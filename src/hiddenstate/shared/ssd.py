"""SSD, the chunked matrix form of a recurrence with a scalar decay per head (Dao & Gu 2024, Sec. 6), and its exact adjoint.

For every row and head, ``h_t = exp(a_t) h_{t-1} + u_t B_t^T`` (``h`` (P, S), ``a_t <= 0`` a
scalar) read out as ``y_t = h_t C_t``. Over a chunk of Q steps starting from ``h_in`` this is

    y_i   = sum_{j <= i} exp(seg(i, j)) (C_i . B_j) u_j  +  exp(l_i) h_in C_i
    h_out = exp(l_{Q-1}) h_in + sum_j exp(seg(Q-1, j)) u_j B_j^T

with ``l_i = a_0 + ... + a_i`` and ``seg(i, j) = a_{j+1} + ... + a_i`` (the segment sum;
``L = exp(seg)`` is formed as a masked running product of the factors ``exp(a_k)`` rather than
from a difference of cumulative sums, so a long run of strong decays loses no digits, and with
Q exponentials per chunk instead of Q^2): the first term is a (Q, Q) masked "attention" matrix ``L o (C B^T)``
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


def _decays(a):
    """``L[i, j] = exp(a_{j+1} + ... + a_i)`` for ``i >= j`` (0 above the diagonal) and ``l_i`` for one chunk.

    ``a`` is (Q, N, H); returns ``L`` (N, H, Q, Q) and ``l`` (Q, N, H). ``L`` is the running
    product of the factors ``exp(a_k)`` (each formed once), along the last (contiguous) axis of
    the transposed mask, then transposed back: no exponential of a difference of large sums.
    """
    Q = a.shape[0]
    e = np.exp(np.moveaxis(a, 0, -1))  # (N, H, Q): exp(a_k)
    upto = np.tri(Q, Q, 0, dtype=bool)  # [j, k]: k <= j
    X = np.empty(e.shape[:-1] + (Q, Q), dtype=e.dtype)  # (N, H, Q j, Q k): exp(a_k) where k > j, else 1
    X[...] = e[..., None, :]
    np.copyto(X, 1.0, where=upto)
    np.cumprod(X, axis=-1, out=X)  # [j, i]: the product over j < k <= i (1 for i <= j)
    L = X.swapaxes(-1, -2)  # [i, j]
    np.copyto(L, 0.0, where=upto.T & ~np.eye(Q, dtype=bool))  # 0 above the diagonal
    return L, np.cumsum(a, axis=0)


def _heads_first(x):
    """(T, N, H, ...) -> (N, H, T, ...): the layout in which a chunk's products are batched matmuls."""
    return np.moveaxis(x, 0, 2)


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
    starts : list of tuple
        Per chunk, the state entering it (N, H, P, S), its decay matrix ``exp(seg)`` (N, H, Q, Q)
        and ``l`` (N, H, Q), for :func:`ssd_backward` (which then forms no segment sums again;
        together the size of a (T, N, H, Q) array).
    """
    Q = chunk or SSD_CHUNK
    T = a.shape[0]
    ut, Bt, Ct = _heads_first(u), _heads_first(B), _heads_first(C)  # (N, H, T, .)
    y = np.empty(ut.shape, dtype=u.dtype)  # (N, H, T, P)
    h, starts = h0.copy(), []
    for s in range(0, T, Q):
        e = min(s + Q, T)
        uc, Bc, Cc = ut[:, :, s:e], Bt[:, :, s:e], Ct[:, :, s:e]
        L, cum = _decays(a[s:e])  # (N, H, Q, Q)
        cum = np.moveaxis(cum, 0, -1)  # (N, H, Q)
        M = (Cc @ Bc.swapaxes(-1, -2)) * L  # L o (C B^T)
        y[:, :, s:e] = M @ uc + np.exp(cum)[..., None] * (Cc @ h.swapaxes(-1, -2))
        starts.append((h, L, cum))
        r = L[..., -1, :]  # (N, H, Q): exp(seg(Q-1, j))
        h = np.exp(cum[..., -1])[..., None, None] * h + (uc * r[..., None]).swapaxes(-1, -2) @ Bc
    return np.ascontiguousarray(np.moveaxis(y, 2, 0)), h, starts


@np.errstate(under="ignore")
def ssd_backward(a, u, B, C, starts, d_y, d_hT, *, chunk: int | None = None):
    """The exact adjoint of :func:`ssd_forward`.

    Parameters
    ----------
    a, u, B, C : ndarray
        As given to :func:`ssd_forward`.
    starts : list of tuple
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
    ut, Bt, Ct, dyt = _heads_first(u), _heads_first(B), _heads_first(C), _heads_first(d_y)  # (N, H, T, .)
    d_a = np.zeros(a.shape[1:] + (T,), dtype=a.dtype)  # (N, H, T)
    d_u, d_B, d_C = np.zeros(ut.shape, dtype=u.dtype), np.zeros(Bt.shape, dtype=B.dtype), np.zeros(Ct.shape,
                                                                                                   dtype=C.dtype)
    g = np.zeros(u.shape[1:3] + (u.shape[3], B.shape[3]), dtype=u.dtype) if d_hT is None else d_hT.copy()
    for c in range((T + Q - 1) // Q - 1, -1, -1):
        s, e = c * Q, min(c * Q + Q, T)
        uc, Bc, Cc, dy = ut[:, :, s:e], Bt[:, :, s:e], Ct[:, :, s:e], dyt[:, :, s:e]
        h, L, cum = starts[c]  # the entering state, exp(seg) (N, H, Q, Q), l (N, H, Q)
        Gm = Cc @ Bc.swapaxes(-1, -2)  # (N, H, Q i, Q j): C_i . B_j
        # the state leaving the chunk: h_out = exp(l_last) h + sum_j r_j u_j B_j^T (g = dL/dh_out)
        r = L[..., -1, :]  # (N, H, Q)
        gB = Bc @ g.swapaxes(-1, -2)  # (N, H, Q, P): g B_j
        dr = (gB * uc).sum(axis=-1)  # (N, H, Q): <g, u_j B_j^T>
        d_uc = r[..., None] * gB
        d_Bc = r[..., None] * (uc @ g)
        dec = np.exp(cum[..., -1])  # (N, H)
        d_cum = np.zeros_like(cum)
        d_cum[..., -1] += dec * (g * h).sum(axis=(-2, -1))
        d_h = dec[..., None, None] * g
        d_seg = np.zeros_like(L)
        d_seg[..., -1, :] = dr * r  # d exp(seg(Q-1, j)) * exp(seg(Q-1, j))
        # the diagonal block: y_i = sum_j L_ij G_ij u_j
        dM = dy @ uc.swapaxes(-1, -2)  # (N, H, Q i, Q j)
        d_uc += (Gm * L).swapaxes(-1, -2) @ dy
        dG = dM * L
        d_Cc = dG @ Bc
        d_Bc += dG.swapaxes(-1, -2) @ Cc
        d_seg += dM * Gm * L  # d_seg where L > 0 (0 above the diagonal)
        # the part from the state entering the chunk: y_i += exp(l_i) h C_i
        w = Cc @ h.swapaxes(-1, -2)  # (N, H, Q, P)
        el = np.exp(cum)  # (N, H, Q)
        d_cum += el * (dy * w).sum(axis=-1)
        dw = el[..., None] * dy
        d_h += dw.swapaxes(-1, -2) @ Cc
        d_Cc += dw @ h
        d_u[:, :, s:e], d_B[:, :, s:e], d_C[:, :, s:e] = d_uc, d_Bc, d_Cc
        # back to a: l_i = sum_{k <= i} a_k, seg(i, j) = sum_{j < k <= i} a_k
        d_a[..., s:e] = np.cumsum(d_cum[..., ::-1], axis=-1)[..., ::-1]
        Rt = np.cumsum(np.ascontiguousarray(d_seg.swapaxes(-1, -2))[..., ::-1], axis=-1)[..., ::-1]
        # Rt[j, k] = sum_{i >= k} d_seg[i, j]; a_k enters seg(i, j) for j < k <= i
        d_a[..., s:e] += np.where(np.triu(np.ones(Rt.shape[-2:], dtype=bool), 1), Rt, 0.0).sum(axis=-2)
        g = d_h
    return (*(np.ascontiguousarray(np.moveaxis(x, 2, 0)) for x in (d_a, d_u, d_B, d_C)), g)
