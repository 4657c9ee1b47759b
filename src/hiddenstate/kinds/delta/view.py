"""The delta-rule kinds' views: ``"gated_delta"`` (a decay per head) and ``"kda"`` (per head and key channel).

Per value head the state is a matrix ``S`` (Dk, Dv) (:mod:`hiddenstate.kinds.delta.kernel`), and one
step is ``S_t = (I - beta_t k_t k_t^T) diag(a_t) S_{t-1} + beta_t k_t v_t^T`` with the decay
``a_t = exp(g_t)`` one scalar per head (the gated delta rule of Qwen3-Next and OLMo-hybrid,
:class:`~hiddenstate.kinds.delta.block.GatedDeltaNet`) or one per key channel (Kimi Delta Attention,
:class:`~hiddenstate.kinds.delta.block.KimiDeltaAttention`). What the analyses read
(:class:`~hiddenstate.kinds.base.RecordView`):

* ``state``: ``S_t`` of every head flattened to Hv*Dk*Dv entries; ``matrix`` the (Hv, Dk, Dv)
  matrices themselves, whose singular values give the effective rank per step
  (:func:`effective_rank`, :func:`numerical_rank`);
* ``keep``: the decay ``exp(g_t)``, per head (``keep_shape`` (Hv,)) or per head and key channel
  (``(Hv, Dk)``): what of the state survives a step before the delta write;
* ``lag_norms``: the step Jacobian is **not** diagonal: ``dS_t/dS_{t-1}`` acts on every column of
  ``S`` as ``J_t = (I - beta_t k_t k_t^T) diag(a_t)`` (Dk, Dk), so ``dS_T/dS_{T-k}`` is
  ``J_T J_{T-1} ... J_{T-k+1}`` on each column (:func:`delta_lag_norms`, the exact product, its
  spectral norm and RMS; per head as ``heads``);
* ``units``: a head-channel ``d = h * Dv + j`` of the rule's readout ``o_t = S_t^T q_t`` (before
  the gated norm, which divides a head's Dv channels by their common RMS), its keep gate its
  head's decay (KDA: the mean of the head's key-channel decays, all of which column j of ``S``
  sees); ``out_gate``: KDA's ``sigmoid`` gate, and None for the gated delta rule, whose gate
  ``silu(z)`` is not a (0, 1) gate (its record keeps ``silu(z)``, not ``z``).

References
----------
O. Roy, M. Vetterli, "The effective rank: a measure of effective dimensionality", EUSIPCO 2007.
S. Yang, J. Kautz, A. Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with delta rule",
arXiv:2412.06464, 2024.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.core.validation import positive_int, real
from hiddenstate.kinds.base import Kind, LagNorms, RecordView
from hiddenstate.kinds.delta.block import GatedDeltaNet, KimiDeltaAttention

__all__ = ["KINDS", "delta_lag_norms", "delta_states", "delta_view", "effective_rank", "numerical_rank",
           "singular_values"]


def delta_lag_norms(decay, beta, k, max_lag: int) -> LagNorms:
    """The exact ``dS_T/dS_{T-k}`` of the delta rule, ``prod_j (I - beta_j k_j k_j^T) diag(a_j)``, against the lag k.

    Parameters
    ----------
    decay : ndarray of shape (T, N, H) or (T, N, H, Dk)
        ``a_t = exp(g_t)`` per head (gated delta rule) or per head and key channel (KDA).
    beta : ndarray of shape (T, N, H)
        The write strengths.
    k : ndarray of shape (T, N, H, Dk)
        The (L2-normalised) keys the rule read.
    max_lag : int
        Largest k (at most T).

    Returns
    -------
    LagNorms
        ``spectral`` (K,): the spectral norm of the whole state's product (the largest of its
        heads'), ``rms`` (K,): ``||J||_F / sqrt(F)`` over the whole state (per head
        ``||A_h||_F^2 / Dk`` averaged over the heads, since ``J = A_h (x) I_Dv`` on head h),
        ``heads`` (K, H): each head's spectral norm; all averaged over the N sequences, ``K =
        min(max_lag, T) + 1``, 1 at k = 0. Each lag costs one rank-1 update per head (O(Dk^2))
        and the singular values of the (Dk, Dk) products.
    """
    T, N, H, Dk = k.shape
    K = min(positive_int("max_lag", max_lag), T) + 1
    a = np.broadcast_to(decay[..., None] if decay.ndim == 3 else decay, (T, N, H, Dk))
    prod = np.broadcast_to(np.eye(Dk), (N, H, Dk, Dk)).copy()
    spectral, rms, heads = np.empty(K), np.empty(K), np.empty((K, H))
    with np.errstate(under="ignore"):  # a product that vanishes below the smallest float is 0: the gradient is gone
        for j in range(K):
            if j:
                t = T - j
                pk = prod @ k[t][..., None]  # (N, H, Dk, 1)
                prod = (prod - beta[t][..., None, None] * pk * k[t][..., None, :]) * a[t][..., None, :]
            sv = np.linalg.svd(prod, compute_uv=False)[..., 0]  # (N, H)
            heads[j] = sv.mean(axis=0)
            spectral[j] = sv.max(axis=1).mean()
            rms[j] = np.sqrt((prod ** 2).sum(axis=(-2, -1)).mean(axis=1) / Dk).mean()
    return LagNorms(spectral, rms, heads)


def singular_values(matrix) -> np.ndarray:
    """The singular values of every matrix state, largest first.

    Parameters
    ----------
    matrix : ndarray of shape (..., Dk, Dv)

    Returns
    -------
    ndarray of shape (..., min(Dk, Dv))
    """
    return np.linalg.svd(np.asarray(matrix, dtype=np.float64), compute_uv=False)


def effective_rank(matrix) -> np.ndarray:
    """The entropy effective rank of every matrix state (Roy & Vetterli 2007): ``exp(-sum_i p_i log p_i)``.

    With ``p_i = sigma_i / sum_j sigma_j`` the singular values normalised to sum to 1: r equal
    singular values (the rest 0) give exactly r, and it falls between 1 and the rank as the
    spectrum grows uneven. A zero matrix has rank 0.

    Parameters
    ----------
    matrix : ndarray of shape (..., Dk, Dv)

    Returns
    -------
    ndarray of shape (...)
        In [1, min(Dk, Dv)], or 0 for a zero matrix.
    """
    sv = singular_values(matrix)
    total = sv.sum(axis=-1, keepdims=True)
    p = np.divide(sv, total, out=np.zeros_like(sv), where=total > 0)
    plogp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    return np.where(total[..., 0] > 0, np.exp(-plogp.sum(axis=-1)), 0.0)


def numerical_rank(matrix, rtol: float = 1e-2) -> np.ndarray:
    """How many singular values of every matrix state exceed ``rtol`` times its largest.

    Parameters
    ----------
    matrix : ndarray of shape (..., Dk, Dv)
    rtol : float, default 0.01
        The fraction of the largest singular value a direction must keep to count, in (0, 1].

    Returns
    -------
    ndarray of int64, shape (...)
        0 for a zero matrix.

    Raises
    ------
    ValueError
        ``rtol`` outside (0, 1].
    """
    rtol = real("rtol", rtol, low=0.0, low_open=True, high=1.0)
    sv = singular_values(matrix)
    top = sv[..., :1]
    return ((sv > rtol * top) & (top > 0)).sum(axis=-1).astype(np.int64)


def delta_view(rec) -> RecordView:
    """The :class:`~hiddenstate.kinds.base.RecordView` of a delta-rule record (gated delta rule or KDA).

    Parameters
    ----------
    rec : DeltaRecord
        ``recurrent`` (T, N, Hv, Dk, Dv), ``decay`` (T, N, Hv) or (T, N, Hv, Dk), ``beta``
        (T, N, Hv), ``k`` (T, N, Hv, Dk), ``o`` and ``gate`` (T, N, Hv, Dv).

    Returns
    -------
    RecordView
        ``state`` (T, N, Hv*Dk*Dv), ``keep`` the decay (T, N, Hv) or (T, N, Hv*Dk), ``units``
        ``o`` per head-channel (T, N, Hv*Dv), ``unit_keep`` the head's (mean) decay, ``out_gate``
        the gate for KDA (sigmoid) and None for the gated delta rule (silu), ``matrix`` the
        states, ``lag_norms`` :func:`delta_lag_norms`.
    """
    T, N, Hv, Dk, Dv = rec.recurrent.shape
    per_channel = rec.decay.ndim == 4
    head_keep = rec.decay.mean(axis=-1) if per_channel else rec.decay  # (T, N, Hv)
    return RecordView(
        state=rec.recurrent.reshape(T, N, Hv * Dk * Dv), keep=rec.decay.reshape(T, N, Hv * Dk if per_channel else Hv),
        keep_shape=(Hv, Dk) if per_channel else (Hv,), keep_name="key-channel decay" if per_channel else "head decay",
        lag_norms=lambda max_lag: delta_lag_norms(rec.decay, rec.beta, rec.k, max_lag),
        units=rec.o.reshape(T, N, Hv * Dv), unit_keep=np.repeat(head_keep, Dv, axis=-1),
        out_gate=rec.gate.reshape(T, N, Hv * Dv) if per_channel else None, matrix=rec.recurrent,
        out_gate_name="sigmoid(g)")


def delta_states(rec) -> dict:
    """A delta-rule record's states by name: ``{"recurrent": (T, N, Hv, Dk, Dv), "conv": (T, N, Dc, K-1)}``.

    Parameters
    ----------
    rec : DeltaRecord

    Returns
    -------
    dict of str to ndarray
    """
    return {"recurrent": rec.recurrent, "conv": rec.conv}


#: The two delta-rule kinds.
KINDS = (Kind("gated_delta", GatedDeltaNet, delta_view, delta_states,
              description="matrix state (N, Hv, Dk, Dv), a decay exp(g) per head, delta-rule writes",
              analysis="hiddenstate.kinds.delta.analysis:GATED_DELTA", card="hiddenstate.kinds.delta.card:CARD",
              analyze="hiddenstate.kinds.delta.analysis:analyze_delta", title="gated delta rule",
              stream="hiddenstate.kinds.delta.stream:stream"),
         Kind("kda", KimiDeltaAttention, delta_view, delta_states,
              description="matrix state (N, H, D, D), a decay exp(g) per head and key channel, delta-rule writes",
              analysis="hiddenstate.kinds.delta.analysis:KDA", card="hiddenstate.kinds.delta.card:KDA_CARD",
              analyze="hiddenstate.kinds.delta.analysis:analyze_delta", title="Kimi delta attention",
              stream="hiddenstate.kinds.delta.stream:stream"))
