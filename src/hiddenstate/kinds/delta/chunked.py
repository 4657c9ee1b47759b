"""The chunked WY/UT form of the gated delta rule (scalar or per-channel decay) and its exact adjoint.

See :mod:`hiddenstate.kinds.delta.kernel` for the equations. Inside a chunk every quantity that does
not depend on the state entering it is formed for all chunks at once: the decayed Gram
matrices ``A`` and ``Attn``, the inverse ``(I + A)^-1`` of the unit lower-triangular UT system, ``U0 = (I + A)^-1 beta v`` and ``Kc = (I + A)^-1 beta k exp(G)``; only the
state is carried chunk to chunk (three (Q, Dk) x (Dk, Dv) products per chunk). The adjoint
carries ``dL/dS`` back through the same loop, then forms the rest for all chunks at once.

A decayed Gram matrix ``M_ij = sum_d x_i[d] y_j[d] exp(G_i[d] - G_j[d])`` (j <= i) is, for a
decay of width 1, ``(x y^T) o exp(G_i - G_j)``; for a per-channel decay it is formed in
sub-blocks of :data:`SUB_BLOCK` rows (as fla's KDA kernels do): a diagonal block as a product
through its middle log decay (the exact (n, n, Dk) sum when its span exceeds :data:`SPAN_LIMIT`),
the rows below block J as the product ``(x_I exp(G_I - r)) (y_J exp(r -
G_J))^T`` with ``r`` the last log decay of block J, where both factors are <= 1 whatever the
decay (nothing can overflow; what underflows is below every term it would be added to). Its
adjoint is ``dx = (dM o E) y``, ``dy = (dM o E)^T x`` (E the decay factors) and ``dG = x o dx -
y o dy``. The unit lower-triangular system is inverted by forward substitution.

:func:`chunk_forward` is :func:`chunk_parts` (everything that does not depend on the state, all
chunks at once) and :func:`chunk_carry` per chunk; :func:`chunk_states` forms every step's
state inside the chunks with :func:`step_states`. The streamed run
(:mod:`hiddenstate.kinds.delta.stream`) calls the same three, forming states only where a sink
keeps them (:func:`state_at` reaches the state before a kept stretch in one product).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["SPAN_LIMIT", "SUB_BLOCK", "ChunkParts", "chunk_backward", "chunk_carry", "chunk_forward", "chunk_parts",
           "chunk_states", "state_at", "step_states"]

#: Rows per sub-block of a chunk in the per-channel Gram.
SUB_BLOCK = 16

#: Largest log-decay span inside a diagonal sub-block for which its Gram is formed as a product of
#: two factors ``exp(+-span / 2)`` (float64, float32): the masked entries above the diagonal reach
#: ``exp(span)`` and must stay finite. Wider blocks use the exact (n, n, Dk) sum.
SPAN_LIMIT = {np.dtype(np.float64): 600.0, np.dtype(np.float32): 60.0}


def _chunked(x, Q):
    """(T, N, H, ...) -> (N, H, C, Q, ...), zero-padded to a multiple of Q."""
    T = x.shape[0]
    C = -(-T // Q)
    x = np.moveaxis(x, 0, 2)  # (N, H, T, ...)
    out = (np.empty if C * Q == T else np.zeros)(x.shape[:2] + (C * Q,) + x.shape[3:], dtype=x.dtype)
    out[:, :, :T] = x  # one copy (np.pad makes several passes)
    return out.reshape(x.shape[:2] + (C, Q) + x.shape[3:])


def _unchunked(x, T):
    """(N, H, C, Q, ...) -> (T, N, H, ...)."""
    x = x.reshape(x.shape[:2] + (x.shape[2] * x.shape[3],) + x.shape[4:])[:, :, :T]  # not -1: T = 0 or N = 0
    return np.ascontiguousarray(np.moveaxis(x, 2, 0))


def _tril(Q, strict, dtype=bool):
    return np.tril(np.ones((Q, Q), dtype=dtype), -1 if strict else 0)


def _blocks(Q):
    """The sub-blocks of a chunk for the per-channel Gram: (start, stop) pairs of :data:`SUB_BLOCK` rows."""
    return [(b, min(b + SUB_BLOCK, Q)) for b in range(0, Q, SUB_BLOCK)]


def _diagonal_factors(G, b, e, strict):
    """``exp(G_i - G_j)`` for i, j in rows b:e, masked to j <= i (j < i when strict): (..., e-b, e-b, Dk)."""
    n = e - b
    mask = _tril(n, strict)[..., None]
    diff = G[..., b:e, None, :] - G[..., None, b:e, :]
    return np.exp(np.where(mask, diff, -np.inf))


def _diagonal_parts(G, b, e):
    """``exp(G - c)``, ``exp(c - G)`` over rows b:e with ``c`` the block's middle log decay, and its too-wide entries.

    Above the diagonal the product reaches ``exp(span)``: a block whose span exceeds
    :data:`SPAN_LIMIT` gets factors 1 and is marked in ``wide`` (None when there is none), for the
    exact sum instead.
    """
    Gb = G[..., b:e, :]
    span = (Gb[..., 0, :] - Gb[..., -1, :]).max(axis=-1)
    wide = span > SPAN_LIMIT.get(G.dtype, 60.0)
    d = np.where(wide[..., None, None], 0.0, Gb - 0.5 * (Gb[..., :1, :] + Gb[..., -1:, :]))
    return np.exp(d), np.exp(-d), (wide if wide.any() else None)


def _scalar_factors(G):
    """``exp(G_i - G_j)`` on and below the diagonal, 0 above, for a decay of width 1: (..., Q, Q)."""
    Q = G.shape[-2]
    d = G[..., :, None, 0] - G[..., None, :, 0]
    np.copyto(d, -np.inf, where=~_tril(Q, False))
    return np.exp(d, out=d)


def _zero_diagonal(M):
    Q = M.shape[-1]
    M[..., np.arange(Q), np.arange(Q)] = 0.0
    return M


def _gram(x, y, G, strict, E=None):
    """``M_ij = sum_d x_i[d] y_j[d] exp(G_i[d] - G_j[d])`` below (or on) the diagonal; (..., Q, Q).

    ``E`` is :func:`_scalar_factors` of a decay of width 1 (unused for a per-channel decay).
    """
    Q = x.shape[-2]
    if E is not None:  # one decay per head (a per-channel decay of width Dk = 1 takes the general path)
        M = (x @ np.swapaxes(y, -1, -2)) * E
        return _zero_diagonal(M) if strict else M
    M = np.zeros(x.shape[:-1] + (Q,), dtype=x.dtype)
    for b, e in _blocks(Q):
        ex, ey, wide = _diagonal_parts(G, b, e)  # the diagonal block, through its middle log decay
        Mb = np.where(_tril(e - b, strict), (x[..., b:e, :] * ex) @ np.swapaxes(y[..., b:e, :] * ey, -1, -2), 0.0)
        if wide is not None:  # a block too wide for the product: the exact sum over the channels
            E = _diagonal_factors(G[wide], b, e, strict)
            Mb[wide] = (x[wide][..., b:e, None, :] * y[wide][..., None, b:e, :] * E).sum(-1)
        M[..., b:e, b:e] = Mb
        if e < Q:  # the rows below it, through the block's last log decay r: both factors <= 1
            r = G[..., e - 1:e, :]
            M[..., e:, b:e] = (x[..., e:, :] * np.exp(G[..., e:, :] - r)) @ np.swapaxes(
                y[..., b:e, :] * np.exp(r - G[..., b:e, :]), -1, -2)
    return M


def _gram_backward(x, y, G, strict, dM, E=None):
    """The adjoint of :func:`_gram`: ``(dx, dy, dG)``."""
    Q = x.shape[-2]
    if E is not None:
        dP = dM * E
        if strict:
            _zero_diagonal(dP)
        dx, dy = dP @ y, np.swapaxes(dP, -1, -2) @ x
        return dx, dy, (x * dx - y * dy).sum(axis=-1, keepdims=True)
    dM = np.where(_tril(Q, strict), dM, 0.0)
    dx, dy = np.zeros_like(x), np.zeros_like(y)
    for b, e in _blocks(Q):
        ex, ey, wide = _diagonal_parts(G, b, e)
        dB = dM[..., b:e, b:e]
        ddx = ex * (dB @ (y[..., b:e, :] * ey))
        ddy = ey * (np.swapaxes(dB, -1, -2) @ (x[..., b:e, :] * ex))
        if wide is not None:
            dE = dB[wide][..., None] * _diagonal_factors(G[wide], b, e, strict)  # (B, n, n, Dk)
            ddx[wide] = (dE * y[wide][..., None, b:e, :]).sum(-2)
            ddy[wide] = (dE * x[wide][..., b:e, None, :]).sum(-3)
        dx[..., b:e, :] += ddx
        dy[..., b:e, :] += ddy
        if e < Q:
            r = G[..., e - 1:e, :]
            ex, ey = np.exp(G[..., e:, :] - r), np.exp(r - G[..., b:e, :])
            dB = dM[..., e:, b:e]
            dx[..., e:, :] += ex * (dB @ (y[..., b:e, :] * ey))
            dy[..., b:e, :] += ey * (np.swapaxes(dB, -1, -2) @ (x[..., e:, :] * ex))
    return dx, dy, x * dx - y * dy


def _unit_lower_inverse(A):
    """``(I + A)^-1`` for strictly lower-triangular A (..., Q, Q), by blocked forward substitution.

    The diagonal blocks of :data:`SUB_BLOCK` rows are inverted together, row by row (row i of a
    block's inverse is ``e_i - sum_{j<i} A_ij X_j``); then each block row I below them is
    ``X[I, :I] = -X_II A[I, :I] X[:I, :I]`` (the leading part ``X[:I, :I]`` is already the inverse
    of the leading principal block): SUB_BLOCK + Q / SUB_BLOCK vectorised steps instead of Q.
    """
    Q = A.shape[-1]
    X = np.zeros_like(A)
    idx = np.arange(Q)
    X[..., idx, idx] = 1.0
    B = min(SUB_BLOCK, Q)
    nb, rest = divmod(Q, B)
    if rest:  # a chunk that is not a whole number of blocks: plain forward substitution
        for i in range(1, Q):
            X[..., i, :i] = -(A[..., i:i + 1, :i] @ X[..., :i, :i])[..., 0, :]
        return X
    # the diagonal blocks as one stack (..., nb, B, B) (views of the blocks of A and X)
    shape = A.shape[:-2] + (nb, B, B)
    Ad = np.lib.stride_tricks.as_strided(A, shape, A.strides[:-2] + (B * sum(A.strides[-2:]),) + A.strides[-2:],
                                         writeable=False)
    Xd = np.lib.stride_tricks.as_strided(X, shape, X.strides[:-2] + (B * sum(X.strides[-2:]),) + X.strides[-2:])
    for i in range(1, B):
        Xd[..., i, :i] = -(Ad[..., i:i + 1, :i] @ Xd[..., :i, :i])[..., 0, :]
    for b in range(B, Q, B):
        e = b + B
        X[..., b:e, :b] = -(X[..., b:e, b:e] @ (A[..., b:e, :b] @ X[..., :b, :b]))
    return X


def _decay_sum(a, width):
    """Sum (..., Dk) down to the decay's width (1 or Dk)."""
    return a.sum(axis=-1, keepdims=True) if width == 1 else a


class ChunkParts(NamedTuple):
    """What the chunked form forms for all chunks at once, before the state is carried: :func:`chunk_parts`.

    Arrays (N, H, C, Q, ...) of C chunks of Q steps (the last zero-padded: a padded step has
    ``g = 0``, ``beta = 0``, ``k = 0``, so it leaves the state as it is): the inputs chunked
    (``qc``, ``kc``, ``vc``; ``bc`` beta (..., Q, 1); ``gc`` the log decay (..., Q, Dg), Dg = 1
    or Dk), ``G`` its cumulative sum in each chunk and ``eG = exp(G)``, ``Gk`` the decayed key
    Gram, ``Tinv`` the inverse ``(I + beta Gk)^-1``, ``W = beta k exp(G)``, ``U0`` and ``Kc``
    (``u = U0 - Kc S``), ``Attn``, ``Qd = q exp(G)``, ``Kd = k exp(G_last - G)``, ``dl`` (N, H, C,
    Dg, 1) the whole chunk's decay (the module's equations) and ``E`` the decay factors (..., Q,
    Q) of a decay of width 1 (None otherwise).
    """

    qc: np.ndarray
    kc: np.ndarray
    vc: np.ndarray
    bc: np.ndarray
    gc: np.ndarray
    G: np.ndarray
    eG: np.ndarray
    Gk: np.ndarray
    Tinv: np.ndarray
    W: np.ndarray
    U0: np.ndarray
    Kc: np.ndarray
    Attn: np.ndarray
    Qd: np.ndarray
    Kd: np.ndarray
    dl: np.ndarray
    E: np.ndarray | None


@np.errstate(under="ignore")
def chunk_parts(q, k, v, g, beta, Q) -> ChunkParts:
    """Everything of the chunked form that does not depend on the state entering a chunk, for all chunks at once.

    Parameters
    ----------
    q, k : ndarray of shape (T, N, H, Dk)
    v : ndarray of shape (T, N, H, Dv)
    g : ndarray of shape (T, N, H) or (T, N, H, Dk)
    beta : ndarray of shape (T, N, H)
    Q : int
        Steps per chunk.

    Returns
    -------
    ChunkParts
    """
    scalar = g.ndim == 3
    qc, kc, vc = _chunked(q, Q), _chunked(k, Q), _chunked(v, Q)  # (N, H, C, Q, D)
    gc = _chunked(g[..., None] if scalar else g, Q)  # (N, H, C, Q, Dg)
    bc = _chunked(beta, Q)[..., None]  # (N, H, C, Q, 1)
    G = np.cumsum(gc, axis=-2)
    eG = np.exp(G)
    E = _scalar_factors(G) if scalar else None  # (N, H, C, Q, Q)
    Gk = _gram(kc, kc, G, True, E)  # (N, H, C, Q, Q)
    Tinv = _unit_lower_inverse(bc * Gk)
    W = bc * kc * eG  # (N, H, C, Q, Dk)
    Dv = vc.shape[-1]
    UK = Tinv @ np.concatenate([bc * vc, W], axis=-1)  # one product for both right-hand sides
    Kd = kc * np.exp(G[..., -1:, :] - G)
    dl = np.swapaxes(np.exp(G[..., -1:, :]), -1, -2)  # (N, H, C, Dg, 1): multiplies the state's rows
    return ChunkParts(qc, kc, vc, bc, gc, G, eG, Gk, Tinv, W, UK[..., :Dv], UK[..., Dv:], _gram(qc, kc, G, False, E),
                      qc * eG, Kd, dl, E)


def chunk_carry(parts: ChunkParts, c: int, S):
    """Chunk ``c`` entered with state ``S`` (N, H, Dk, Dv): its ``u`` (N, H, Q, Dv), outputs (N, H, Q, Dv), state after.

    Parameters
    ----------
    parts : ChunkParts
    c : int
        The chunk.
    S : ndarray of shape (N, H, Dk, Dv)

    Returns
    -------
    U, O : ndarray of shape (N, H, Q, Dv)
        ``u = U0 - Kc S`` and ``O = Qd S + Attn U``.
    S_next : ndarray of shape (N, H, Dk, Dv)
        ``dl S + Kd^T U``.
    """
    U = parts.U0[:, :, c] - parts.Kc[:, :, c] @ S
    O = parts.Qd[:, :, c] @ S + parts.Attn[:, :, c] @ U
    return U, O, parts.dl[:, :, c] * S + np.swapaxes(parts.Kd[:, :, c], -1, -2) @ U


@np.errstate(under="ignore")
def state_at(parts: ChunkParts, c: int, S, U, j: int):
    """The state after step ``j`` of chunk ``c`` entered with ``S``, straight from the chunk's writes ``U``.

    ``S_j = diag(exp(G_j)) S + sum_{i <= j} diag(exp(G_j - G_i)) k_i u_i^T``: the chunk's
    ``S_out`` (the module's equations) with ``G_j`` for ``G_last``; one (Dk, j+1) x (j+1, Dv)
    product per head instead of j + 1 steps, and every factor ``exp(G_j - G_i)`` <= 1.

    Parameters
    ----------
    parts : ChunkParts
    c : int
        The chunk.
    S : ndarray of shape (N, H, Dk, Dv)
        The state entering it.
    U : ndarray of shape (N, H, Q, Dv)
        Its writes (:func:`chunk_carry`'s ``U``).
    j : int
        The step inside the chunk, in [0, Q).

    Returns
    -------
    ndarray of shape (N, H, Dk, Dv)
    """
    G = parts.G[:, :, c, :j + 1]  # (N, H, j+1, Dg)
    K = parts.kc[:, :, c, :j + 1] * np.exp(G[..., -1:, :] - G)
    return np.exp(G[..., -1, :])[..., :, None] * S + np.swapaxes(K, -1, -2) @ U[:, :, :j + 1]


@np.errstate(under="ignore")
def step_states(a, k, U, S, out):
    """Every step's state inside a stretch of steps from the state entering it: ``S_i = diag(a_i) S_{i-1} + k_i u_i^T``.

    Parameters
    ----------
    a : ndarray of shape (L, ..., Dg)
        The decay ``exp(g_i)`` of each step (Dg = 1 or Dk).
    k : ndarray of shape (L, ..., Dk)
    U : ndarray of shape (L, ..., Dv)
        The chunked form's ``u_i`` (its ``U``).
    S : ndarray of shape (..., Dk, Dv)
        The state before the first step.
    out : ndarray of shape (L, ..., Dk, Dv)
        Filled with the L states (written in place, one step at a time).

    Returns
    -------
    ndarray
        ``out``.
    """
    tmp = np.empty(out.shape[1:], dtype=out.dtype)
    for i in range(out.shape[0]):
        np.multiply(a[i][..., :, None], S, out=out[i])
        np.multiply(k[i][..., :, None], U[i][..., None, :], out=tmp)
        out[i] += tmp
        S = out[i]
    return out


@np.errstate(under="ignore")
def chunk_forward(q, k, v, g, beta, S0, Q):
    """The chunked form of :func:`hiddenstate.kinds.delta.kernel.delta_forward` (same arguments and results).

    Parameters
    ----------
    q, k : ndarray of shape (T, N, H, Dk)
    v : ndarray of shape (T, N, H, Dv)
    g : ndarray of shape (T, N, H) or (T, N, H, Dk)
    beta : ndarray of shape (T, N, H)
    S0 : ndarray of shape (N, H, Dk, Dv)
    Q : int
        Steps per chunk.

    Returns
    -------
    o : ndarray of shape (T, N, H, Dv)
    S_T : ndarray of shape (N, H, Dk, Dv)
    cache : tuple
    """
    T = q.shape[0]
    parts = chunk_parts(q, k, v, g, beta, Q)
    C = parts.qc.shape[2]
    starts = np.empty(parts.qc.shape[:3] + S0.shape[-2:], dtype=S0.dtype)  # (N, H, C, Dk, Dv)
    U = np.empty_like(parts.vc)
    O = np.empty_like(parts.vc)
    S = S0
    for c in range(C):
        starts[:, :, c] = S
        U[:, :, c], O[:, :, c], S = chunk_carry(parts, c, S)
    cache = ("chunk", T, g.ndim == 3, *parts[:-1], starts, U, S0, parts.E)
    return _unchunked(O, T), (S.copy() if T else S0.copy()), cache


@np.errstate(under="ignore")
def chunk_backward(cache, d_o, d_ST):
    """The exact adjoint of :func:`chunk_forward`.

    Parameters
    ----------
    cache : tuple
        From :func:`chunk_forward`.
    d_o : ndarray of shape (T, N, H, Dv) or None
    d_ST : ndarray of shape (N, H, Dk, Dv) or None

    Returns
    -------
    d_q, d_k, d_v, d_g, d_beta, d_S0 : ndarray
        As :func:`hiddenstate.kinds.delta.kernel.delta_backward`.
    """
    _, T, scalar, qc, kc, vc, bc, gc, G, eG, Gk, Tinv, W, U0, Kc, Attn, Qd, Kd, dl, starts, U, S0, E = cache
    C, Q, width = qc.shape[2], qc.shape[3], G.shape[-1]
    dO = np.zeros_like(vc) if d_o is None else _chunked(d_o, Q)
    dS = np.zeros_like(S0) if d_ST is None else d_ST.copy()
    dU = np.empty_like(U)
    dSn = np.empty_like(starts)  # dL/d(state leaving chunk c)
    AttnT, KcT, QdT = np.swapaxes(Attn, -1, -2), np.swapaxes(Kc, -1, -2), np.swapaxes(Qd, -1, -2)
    for c in range(C - 1, -1, -1):
        dSn[:, :, c] = dS
        dUc = AttnT[:, :, c] @ dO[:, :, c] + Kd[:, :, c] @ dS
        dS = QdT[:, :, c] @ dO[:, :, c] + dl[:, :, c] * dS - KcT[:, :, c] @ dUc
        dU[:, :, c] = dUc
    startsT = np.swapaxes(starts, -1, -2)  # (N, H, C, Dv, Dk)
    dQd = dO @ startsT  # (N, H, C, Q, Dk)
    dAttn = dO @ np.swapaxes(U, -1, -2)
    dKd = U @ np.swapaxes(dSn, -1, -2)
    d_dl = (dSn * starts).sum(axis=-1)  # (N, H, C, Dk)
    d_dl = d_dl.sum(axis=-1, keepdims=True) if width == 1 else d_dl
    dKc = -(dU @ startsT)
    TinvT = np.swapaxes(Tinv, -1, -2)
    dVb, dW = TinvT @ dU, TinvT @ dKc
    dA = -(dVb @ np.swapaxes(U0, -1, -2) + dW @ np.swapaxes(Kc, -1, -2))
    dA = np.where(_tril(Q, True), dA, 0.0)
    d_v = bc * dVb
    d_beta = (dVb * vc).sum(axis=-1) + (dW * kc * eG).sum(axis=-1) + (dA * Gk).sum(axis=-1)
    d_k = bc * eG * dW
    dG = _decay_sum(dW * W, width)
    dk1, dk2, dGa = _gram_backward(kc, kc, G, True, bc * dA, E)
    dq, dk3, dGb = _gram_backward(qc, kc, G, False, dAttn, E)
    d_k += dk1 + dk2 + dk3 + np.exp(G[..., -1:, :] - G) * dKd
    dq += eG * dQd
    dG += dGa + dGb + _decay_sum(Qd * dQd, width)
    t = _decay_sum(Kd * dKd, width)  # (N, H, C, Q, Dg)
    dG -= t
    dG[..., -1, :] += t.sum(axis=-2) + dl[..., 0] * d_dl
    dg = np.cumsum(dG[..., ::-1, :], axis=-2)[..., ::-1, :]
    d_g = _unchunked(dg, T)
    return (_unchunked(dq, T), _unchunked(d_k, T), _unchunked(d_v, T), d_g[..., 0] if scalar else d_g,
            _unchunked(d_beta, T), dS)


@np.errstate(under="ignore")
def chunk_states(cache) -> np.ndarray:
    """Every step's state from a :func:`chunk_forward` cache, step by step inside all chunks at once.

    Parameters
    ----------
    cache : tuple
        From :func:`chunk_forward`.

    Returns
    -------
    ndarray of shape (T, N, H, Dk, Dv)
    """
    _, T, scalar, qc, kc, vc, bc, gc, G, eG, Gk, Tinv, W, U0, Kc, Attn, Qd, Kd, dl, starts, U, S0, E = cache
    N, H, C, Q = qc.shape[:4]
    full = np.empty((C, Q, N, H) + starts.shape[-2:], dtype=starts.dtype)  # chunk by chunk, step by step: time order
    step_states(np.moveaxis(np.exp(gc), 3, 0), np.moveaxis(kc, 3, 0), np.moveaxis(U, 3, 0), starts,
                np.moveaxis(full, 0, 3))  # (Q, N, H, C, Dk, Dv): step i of every chunk at once
    full = full.reshape((C * Q,) + full.shape[2:])
    return full if C * Q == T else full[:T].copy()
