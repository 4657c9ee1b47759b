"""xLSTM's mLSTM recurrence (Beck et al. 2024): matrix memory, normaliser, stabiliser; forward and exact backward.

For every row and head, from the projected ``q_t, k_t`` (Dk), ``v_t`` (Dv) and the gate
pre-activations ``i_t, f_t`` (scalars), in transformers' ``mlstm_recurrent_step_native``::

    a_t  = log sigmoid(f_t) + m_{t-1}          the forget gate in log space, on the old stabiliser's scale
    m_t  = max(a_t, i_t)                        the stabiliser (the largest log weight so far)
    C_t  = exp(a_t - m_t) C_{t-1} + exp(i_t - m_t) k_t v_t^T        matrix memory (Dk, Dv)
    n_t  = exp(a_t - m_t) n_{t-1} + exp(i_t - m_t) k_t              normaliser (Dk,)
    h_t  = C_t^T q~_t / (max(|n_t . q~_t|, exp(-m_t)) + eps)        q~_t = q_t / sqrt(Dk)

The input gate is exponential, the forget gate ``sigmoid(f)`` (``exp(log sigmoid f)``); the
state ``(C, n, m)`` is transformers' cache layout: C (N, H, Dk, Dv), n (N, H, Dk), m (N, H, 1).
``C_t exp(m_t)`` and ``n_t exp(m_t)`` are the unstabilised memory and normaliser; the stored
state is them scaled by ``exp(-m_t)``, so the numbers stay finite.

The stabiliser's gradient
-------------------------
``m`` is a max, differentiable except on ties. The backward differentiates through it as
autograd does (the winning branch takes the gradient, a tie splits it in halves, torch's rule for
``maximum``), and the same for ``max(|n.q~|, exp(-m))`` and ``|.|`` (sign, 0 at 0). With
``eps = 0`` the outputs do not depend on ``m`` at all (``h_t = C~_t^T q~ / max(|n~.q~|, 1)`` in
the unstabilised terms), so the paths through ``m`` cancel in ``dL/dh``; with ``eps > 0`` they
leave ``eps exp(m_t)`` in the denominator, and the stored states ``C_t, n_t, m_t`` depend on
``m`` directly, so a gradient on the final state flows through it. Either way the gradient
returned is the exact derivative of the function computed (held to torch autograd at 1e-10).

Evaluation
----------
``m`` runs first, one (N, H) maximum per step. Then ``C`` and ``n`` are one linear recurrence
with the scalar decay ``exp(a_t - m_t) <= 1`` on the augmented state ``S_t = [C_t^T; n_t^T]``
(N, H, Dv+1, Dk) with input ``exp(i_t - m_t) [v_t; 1] k_t^T``, read out as ``S_t q~_t``: the
recurrence of Mamba-2's SSM. ``scan="sequential"`` runs it step by step, ``"parallel"`` as the
chunked Brent-Kung scan of :mod:`hiddenstate.shared.scan` (both form every state), and
``"chunkwise"`` in the chunked matrix form of :mod:`hiddenstate.shared.ssd` (xLSTM's chunkwise
form, with the sequential stabiliser, so it equals the other two to round-off; it forms no
per-step state). Everything else is per step, as whole-sequence array operations.

Kernel contract
---------------
``mlstm_forward(q, k, v, i, f, state0, *, eps, scan) -> (h, state_T, cache)``
    ``q, k`` (T, N, H, Dk), ``v`` (T, N, H, Dv), ``i, f`` (T, N, H), ``state0`` an
    :class:`MLSTMState`. Nothing is validated; every array has the dtype of ``q``.
``mlstm_backward(cache, d_h, d_final) -> ((d_q, d_k, d_v, d_i, d_f), d_state0)``
    ``d_h`` (T, N, H, Dv) or None, ``d_final`` an :class:`MLSTMState` of gradients (any part None) or None.
``mlstm_states(cache) -> MLSTMState``
    Every step's state, time-major: C (T, N, H, Dk, Dv), n (T, N, H, Dk), m (T, N, H, 1).

References
----------
M. Beck, K. Poeppel, M. Spanring, A. Auer, O. Prudnikova, M. Kopp, G. Klambauer, J. Brandstetter,
S. Hochreiter, "xLSTM: Extended Long Short-Term Memory", NeurIPS 2024, arXiv:2405.04517 (Sec. 2.3,
eqs. 19-27).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hiddenstate.core.functional import sigmoid
from hiddenstate.core.resources import check_memory, format_bytes
from hiddenstate.shared.scan import linear_scan, recurrence_backward, recurrence_forward
from hiddenstate.shared.ssd import ssd_backward, ssd_forward

__all__ = ["SCANS", "MLSTMState", "mlstm_backward", "mlstm_forward", "mlstm_states", "state_bytes"]

#: The evaluation modes of the C/n recurrence.
SCANS = ("chunkwise", "parallel", "sequential")


class MLSTMState(NamedTuple):
    """The mLSTM state in transformers' layout (``xLSTMCache.rnn_state[layer]``).

    Attributes
    ----------
    C : ndarray of shape (N, H, Dk, Dv)
        The stabilised matrix memory.
    n : ndarray of shape (N, H, Dk)
        The stabilised normaliser.
    m : ndarray of shape (N, H, 1)
        The stabiliser (log scale of ``C`` and ``n``).
    """

    C: np.ndarray
    n: np.ndarray
    m: np.ndarray


def state_bytes(T: int, N: int, H: int, Dk: int, Dv: int, itemsize: int) -> int:
    """Bytes of every step's state ``(C, n, m)`` over T steps.

    Parameters
    ----------
    T, N, H, Dk, Dv : int
        Steps, rows, heads, key and value dimensions per head.
    itemsize : int
        Bytes per number (8 for float64).

    Returns
    -------
    int
    """
    return int(T) * int(N) * int(H) * (int(Dk) * (int(Dv) + 1) + 1) * int(itemsize)


def _tie_weight(x, y):
    """d max(x, y) / dx as torch takes it: 1 where x > y, 1/2 on a tie, 0 below."""
    return np.where(x > y, 1.0, np.where(x == y, 0.5, 0.0)).astype(x.dtype)


def _check_states_fit(T, N, H, Dk, Dv, dtype, why):
    nbytes = state_bytes(T, N, H, Dk, Dv, np.dtype(dtype).itemsize)
    check_memory(f"{why} ({T} steps of {N} x {H} heads of ({Dk}, {Dv}) matrices, {format_bytes(nbytes)})", nbytes,
                 "Use scan='chunkwise' without record, or a shorter sequence.")


@np.errstate(under="ignore")
def mlstm_forward(q, k, v, i, f, state0: MLSTMState, *, eps: float, scan: str = "chunkwise"):
    """The mLSTM recurrence over T steps (the equations of the module docstring).

    Parameters
    ----------
    q, k : ndarray of shape (T, N, H, Dk)
        Queries and keys per head.
    v : ndarray of shape (T, N, H, Dv)
        Values per head.
    i, f : ndarray of shape (T, N, H)
        The input and forget gates' pre-activations (after any soft cap).
    state0 : MLSTMState
        The state before step 0: C (N, H, Dk, Dv), n (N, H, Dk), m (N, H, 1).
    eps : float
        Added to the denominator.
    scan : {"chunkwise", "parallel", "sequential"}, default "chunkwise"
        How the C/n recurrence runs (module docstring); the same numbers to round-off.

    Returns
    -------
    h : ndarray of shape (T, N, H, Dv)
    state_T : MLSTMState
        The state after the last step (copies of ``state0`` when T = 0).
    cache : tuple
        Opaque; for :func:`mlstm_backward` and :func:`mlstm_states`.

    Raises
    ------
    ValueError
        When the per-step states of ``scan="parallel"``/``"sequential"`` cannot fit in memory.
    """
    T, N, H, Dk = q.shape
    Dv = v.shape[-1]
    scale = Dk ** -0.5
    lf = -np.logaddexp(0.0, -f)  # log sigmoid(f), (T, N, H)
    a, m = np.empty_like(i), np.empty_like(i)
    prev = state0.m[..., 0]
    for t in range(T):  # the stabiliser: one (N, H) maximum per step
        np.add(lf[t], prev, out=a[t])
        np.maximum(a[t], i[t], out=m[t])
        prev = m[t]
    lin = a - m  # log of the forget factor, <= 0
    ia = np.exp(i - m)  # (T, N, H)
    vv = np.concatenate([v, np.ones(v.shape[:-1] + (1,), dtype=v.dtype)], axis=-1)  # (T, N, H, Dv+1)
    u = ia[..., None] * vv
    qs = q * scale
    S0 = np.concatenate([np.swapaxes(state0.C, -1, -2), state0.n[..., None, :]], axis=-2)  # (N, H, Dv+1, Dk)
    if scan == "chunkwise":
        Ss = None
        y, S_T, starts = ssd_forward(lin, u, k, qs, S0)
    else:
        _check_states_fit(T, N, H, Dk, Dv, q.dtype, f"mLSTM scan={scan!r}")
        b = u[..., :, None] * k[..., None, :]  # (T, N, H, Dv+1, Dk)
        Ss = recurrence_forward(np.exp(lin)[..., None, None], b, S0, parallel=scan == "parallel")
        y, S_T, starts = (Ss @ qs[..., None])[..., 0], (Ss[-1].copy() if T else S0.copy()), None
    num, qn = y[..., :Dv], y[..., Dv]  # (T, N, H, Dv), (T, N, H)
    em = np.exp(-m)
    w_den = _tie_weight(np.abs(qn), em)  # which side of max(|qn|, exp(-m)) wins
    den = np.maximum(np.abs(qn), em) + eps
    h = num / den[..., None]
    m_T = m[-1] if T else state0.m[..., 0]
    final = MLSTMState(np.ascontiguousarray(np.swapaxes(S_T[..., :Dv, :], -1, -2)), S_T[..., Dv, :].copy(),
                       m_T[..., None].copy())
    cache = (q, k, v, i, f, state0, scale, a, m, lin, ia, vv, u, qs, S0, Ss, starts, qn, em, w_den, den, h, scan)
    return h, final, cache


@np.errstate(under="ignore")
def mlstm_backward(cache, d_h, d_final):
    """Exact backward pass through :func:`mlstm_forward`.

    The output's gradient gives ``dL/dS_t`` through the readout and ``dL/dm_t`` through the
    denominator; the adjoint of the C/n recurrence runs as the forward ran (the same scan
    backwards in time, or the chunkwise form's own adjoint); then the gates, and last the
    stabiliser's chain ``m_t = max(log sigmoid(f_t) + m_{t-1}, i_t)`` backwards, itself a linear
    recurrence in ``dL/dm`` with the 0/1 (1/2 on ties) weights of the max (module docstring).

    Parameters
    ----------
    cache : tuple
        From :func:`mlstm_forward`.
    d_h : ndarray of shape (T, N, H, Dv) or None
        Gradient with respect to ``h`` (None: zeros).
    d_final : MLSTMState or None
        Gradients with respect to the final state's C, n, m (any part None).

    Returns
    -------
    grads : tuple of ndarray
        ``(d_q, d_k, d_v, d_i, d_f)`` shaped as ``q, k, v, i, f``.
    d_state0 : MLSTMState
        Gradients with respect to the initial C, n, m.
    """
    q, k, v, i, f, state0, scale, a, m, lin, ia, vv, u, qs, S0, Ss, starts, qn, em, w_den, den, h, scan = cache
    T, N, H, Dk = q.shape
    Dv = v.shape[-1]
    dC_T, dn_T, dm_T = (None, None, None) if d_final is None else d_final
    d_h = np.zeros_like(h) if d_h is None else d_h
    d_num = d_h / den[..., None]
    d_den = -(d_h * h).sum(axis=-1) / den  # (T, N, H)
    d_qn = d_den * w_den * np.sign(qn)
    dm_local = -d_den * (1.0 - w_den) * em  # d exp(-m) / dm = -exp(-m)
    d_y = np.concatenate([d_num, d_qn[..., None]], axis=-1)  # (T, N, H, Dv+1)
    d_S_T = np.zeros_like(S0)
    if dC_T is not None:
        d_S_T[..., :Dv, :] = np.swapaxes(dC_T, -1, -2)
    if dn_T is not None:
        d_S_T[..., Dv, :] = dn_T
    if scan == "chunkwise":
        d_lin, d_u, d_k, d_qs, d_S0 = ssd_backward(lin, u, k, qs, starts, d_y, d_S_T)
    else:
        dec = np.exp(lin)
        d_Ss = d_y[..., :, None] * qs[..., None, :]  # (T, N, H, Dv+1, Dk)
        d_qs = (d_y[..., None, :] @ Ss)[..., 0, :]  # (T, N, H, Dk)
        d_dec, d_b, d_S0 = recurrence_backward(dec[..., None, None], Ss, S0, None, None, d_Ss, d_S_T,
                                               parallel=scan == "parallel")
        d_lin = d_dec.sum(axis=(-2, -1)) * dec
        d_u = (d_b @ k[..., None])[..., 0]  # (T, N, H, Dv+1)
        d_k = (u[..., None, :] @ d_b)[..., 0, :]  # (T, N, H, Dk)
    d_ia = (d_u * vv).sum(axis=-1) * ia  # dL/d(i - m)
    d_v = d_u[..., :Dv] * ia[..., None]
    d_q = d_qs * scale
    # lin = a - m, ia = exp(i - m): a gets d_lin, m gets -d_lin - d_ia, i gets d_ia
    dm_local -= d_lin + d_ia
    d_i = d_ia.copy()
    # m_t = max(a_t, i_t), a_t = lf_t + m_{t-1}: with x_t = dL/da_t (everything through a_t),
    # x_t = d_lin_t + w_t (dm_local_t + x_{t+1}) and x_T = dL/dm_{T-1} from the final state
    w = _tie_weight(a, i)
    g_end = np.zeros(i.shape[1:], dtype=i.dtype) if dm_T is None else dm_T[..., 0].astype(i.dtype)
    x = linear_scan(w[::-1], (d_lin + w * dm_local)[::-1], g_end)[::-1]  # (T, N, H)
    after = np.concatenate([x[1:], g_end[None]], axis=0) if T else x  # dL/dm_t from step t+1 on
    d_i += (1.0 - w) * (dm_local + after)
    d_f = x * sigmoid(-f)  # d log sigmoid(f) / df = sigmoid(-f)
    d_m0 = x[0] if T else g_end
    d_state0 = MLSTMState(np.ascontiguousarray(np.swapaxes(d_S0[..., :Dv, :], -1, -2)), d_S0[..., Dv, :].copy(),
                          d_m0[..., None].copy())
    return (d_q, d_k, d_v, d_i, d_f), d_state0


def mlstm_states(cache) -> MLSTMState:
    """Every step's state from a forward cache (recomputed by the scan after ``scan="chunkwise"``).

    Parameters
    ----------
    cache : tuple
        From :func:`mlstm_forward`.

    Returns
    -------
    MLSTMState
        Time-major: C (T, N, H, Dk, Dv), n (T, N, H, Dk), m (T, N, H, 1).

    Raises
    ------
    ValueError
        When the states cannot fit in memory (the message gives the bytes).
    """
    q, k, v, i, f, state0, scale, a, m, lin, ia, vv, u, qs, S0, Ss, starts, qn, em, w_den, den, h, scan = cache
    T, N, H, Dk = q.shape
    Dv = v.shape[-1]
    if Ss is None:
        _check_states_fit(T, N, H, Dk, Dv, q.dtype, "the mLSTM record")
        with np.errstate(under="ignore"):
            Ss = recurrence_forward(np.exp(lin)[..., None, None], u[..., :, None] * k[..., None, :], S0)
    return MLSTMState(np.ascontiguousarray(np.swapaxes(Ss[..., :Dv, :], -1, -2)), Ss[..., Dv, :].copy(),
                      m[..., None].copy())
