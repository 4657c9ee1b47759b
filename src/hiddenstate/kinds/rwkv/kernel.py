"""RWKV-4's WKV recurrence (Peng et al. 2023): numerator, denominator, running maximum; forward and exact backward.

Per channel, with the decay ``w = -exp(time_decay)`` (< 0) and the bonus ``u = time_first`` of
the current token, from keys ``k_t`` and values ``v_t`` (transformers' ``rwkv_linear_attention_cpu``)::

    q_t   = max(p_{t-1}, k_t + u)                                   the output's stabiliser
    wkv_t = (e^{p_{t-1}-q_t} a_{t-1} + e^{k_t+u-q_t} v_t) / (e^{p_{t-1}-q_t} b_{t-1} + e^{k_t+u-q_t})
    p_t   = max(p_{t-1} + w, k_t)                                   the running maximum (the state's scale)
    a_t   = e^{p_{t-1}+w-p_t} a_{t-1} + e^{k_t-p_t} v_t             numerator
    b_t   = e^{p_{t-1}+w-p_t} b_{t-1} + e^{k_t-p_t}                 denominator

``a_t e^{p_t} = sum_{s<=t} e^{(t-s) w + k_s} v_s`` and ``b_t e^{p_t}`` are the unstabilised sums;
the stored state ``(a, b, p)`` (transformers' ``state[2:5]``: num, den, max) is them scaled by
``e^{-p_t}`` so they stay finite. ``wkv_t`` is an average of the values weighted by
``e^{k_s}`` decayed by ``e^{w}`` per step, the current token weighted by ``e^{k_t + u}``.

The maxima's gradient
---------------------
``q`` and ``p`` are maxima, differentiable except on ties; the backward differentiates through
them as autograd does (the winner takes the gradient, a tie splits it in halves, torch's rule for
``maximum``). ``wkv_t`` does not depend on ``q_t`` or on the scale ``p`` at all (numerator and
denominator carry the same factor), so in exact arithmetic the paths through them cancel in
``dL/dwkv``; the stored state does depend on ``p``, so a gradient on the final state flows
through the maxima. The gradients returned are the exact derivative of the function computed
(held to torch autograd at 1e-10).

Evaluation
----------
``p`` runs first, one (N, A) maximum per step. Then ``a`` and ``b`` are one linear recurrence
with the decay ``e^{p_{t-1}+w-p_t} <= 1`` (stacked as (N, 2, A)), run as the chunked Brent-Kung
scan of :mod:`hiddenstate.shared.scan` (``scan="parallel"``) or the per-step loop
(``"sequential"``); the outputs are then whole-sequence array operations.

Kernel contract
---------------
``wkv_forward(k, v, time_decay, time_first, state0, *, scan) -> (wkv, state_T, cache)``
    ``k, v`` (T, N, A), ``time_decay, time_first`` (A,), ``state0`` a :class:`WKVState`.
``wkv_backward(cache, d_wkv, d_final) -> ((d_k, d_v, d_time_decay, d_time_first), d_state0)``
``wkv_states(cache) -> WKVState``: every step's state, time-major (T, N, A) each.

References
----------
B. Peng et al., "RWKV: Reinventing RNNs for the Transformer Era", Findings of EMNLP 2023,
arXiv:2305.13048 (Sec. 4.1.2 and Appendix D, the numerically stable WKV).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hiddenstate.shared.scan import linear_scan, recurrence_backward, recurrence_forward

__all__ = ["MAX0", "SCANS", "WKVState", "wkv_backward", "wkv_forward", "wkv_states"]

#: The evaluation modes of the numerator/denominator recurrence.
SCANS = ("parallel", "sequential")

#: The running maximum of a fresh state (transformers' ``RwkvModel`` starts its cache at -1e30).
MAX0 = -1e30


class WKVState(NamedTuple):
    """The WKV state of one layer, transformers' ``state[2:5]`` (num, den, max) for one layer.

    Attributes
    ----------
    num : ndarray of shape (N, A)
        The stabilised numerator ``a``.
    den : ndarray of shape (N, A)
        The stabilised denominator ``b``.
    max : ndarray of shape (N, A)
        The running maximum ``p`` (log scale of ``num`` and ``den``).
    """

    num: np.ndarray
    den: np.ndarray
    max: np.ndarray


def _tie_weight(x, y):
    """d max(x, y) / dx as torch takes it: 1 where x > y, 1/2 on a tie, 0 below."""
    return np.where(x > y, 1.0, np.where(x == y, 0.5, 0.0)).astype(x.dtype)


@np.errstate(under="ignore")
def wkv_forward(k, v, time_decay, time_first, state0: WKVState, *, scan: str = "parallel"):
    """The WKV recurrence over T steps (the equations of the module docstring).

    Parameters
    ----------
    k, v : ndarray of shape (T, N, A)
        Keys and values.
    time_decay, time_first : ndarray of shape (A,)
        ``w = -exp(time_decay)`` per step and the bonus ``u`` of the current token.
    state0 : WKVState
        The state before step 0, each (N, A).
    scan : {"parallel", "sequential"}, default "parallel"
        How the numerator/denominator recurrence runs; the same numbers to round-off.

    Returns
    -------
    wkv : ndarray of shape (T, N, A)
    state_T : WKVState
        After the last step (copies of ``state0`` when T = 0).
    cache : tuple
        Opaque; for :func:`wkv_backward` and :func:`wkv_states`.
    """
    T = k.shape[0]
    w = -np.exp(time_decay)
    p, pprev = np.empty_like(k), np.empty_like(k)
    prev = state0.max
    for t in range(T):  # the running maximum: one (N, A) maximum per step
        pprev[t] = prev
        np.maximum(prev + w, k[t], out=p[t])
        prev = p[t]
    f = np.exp(pprev + w - p)  # (T, N, A), <= 1
    g = np.exp(k - p)
    ab0 = np.stack([state0.num, state0.den], axis=1)  # (N, 2, A)
    X = np.stack([g * v, g], axis=2)  # (T, N, 2, A)
    ab = recurrence_forward(f[:, :, None, :], X, ab0, parallel=scan == "parallel")
    prev_ab = np.concatenate([ab0[None], ab[:-1]], axis=0) if T else ab  # (T, N, 2, A): what step t read
    ku = k + time_first
    q = np.maximum(pprev, ku)
    e1, e2 = np.exp(pprev - q), np.exp(ku - q)
    num = e1 * prev_ab[:, :, 0] + e2 * v
    den = e1 * prev_ab[:, :, 1] + e2
    wkv = num / den
    last = ab[-1] if T else ab0
    final = WKVState(last[:, 0].copy(), last[:, 1].copy(), (p[-1] if T else state0.max).copy())
    cache = (k, v, w, state0, p, pprev, f, g, ab0, ab, prev_ab, ku, q, e1, e2, den, wkv, scan)
    return wkv, final, cache


@np.errstate(under="ignore")
def wkv_backward(cache, d_wkv, d_final):
    """Exact backward pass through :func:`wkv_forward`.

    The output's gradient reaches ``a_{t-1}, b_{t-1}`` (what step t read), ``k_t``, ``v_t``, ``u``
    and ``p_{t-1}`` (through ``q_t``); the numerator/denominator adjoint runs through the same
    scan backwards in time; last the running maximum's chain ``p_t = max(p_{t-1} + w, k_t)``
    backwards, a linear recurrence in ``dL/dp`` with the 0/1 (1/2 on ties) weights of the max.

    Parameters
    ----------
    cache : tuple
        From :func:`wkv_forward`.
    d_wkv : ndarray of shape (T, N, A) or None
        Gradient with respect to ``wkv`` (None: zeros).
    d_final : WKVState or None
        Gradients with respect to the final num, den, max (any part None).

    Returns
    -------
    grads : tuple of ndarray
        ``(d_k, d_v, d_time_decay, d_time_first)``: (T, N, A), (T, N, A), (A,), (A,).
    d_state0 : WKVState
        Gradients with respect to the initial num, den, max.
    """
    k, v, w, state0, p, pprev, f, g, ab0, ab, prev_ab, ku, q, e1, e2, den, wkv, scan = cache
    T = k.shape[0]
    dnum_T, dden_T, dmax_T = (None, None, None) if d_final is None else d_final
    d_wkv = np.zeros_like(wkv) if d_wkv is None else d_wkv
    d_num = d_wkv / den
    d_den = -d_wkv * wkv / den
    d_e1 = d_num * prev_ab[:, :, 0] + d_den * prev_ab[:, :, 1]
    d_e2 = d_num * v + d_den
    d_v = d_num * e2
    d_prev_ab = np.stack([d_num * e1, d_den * e1], axis=2)  # (T, N, 2, A): into the state step t read
    t1, t2 = d_e1 * e1, d_e2 * e2
    d_q = -(t1 + t2)
    wq = _tie_weight(pprev, ku)
    d_ku = t2 + d_q * (1.0 - wq)
    E = t1 + d_q * wq  # dL/dp_{t-1} as read by step t's output
    # the numerator/denominator recurrence: its state h_t = ab[t] is read by step t+1's output
    d_hs = np.zeros_like(ab)
    d_hs[:-1] = d_prev_ab[1:]
    d_ab_T = np.zeros_like(ab0)
    if dnum_T is not None:
        d_ab_T[:, 0] = dnum_T
    if dden_T is not None:
        d_ab_T[:, 1] = dden_T
    if T:
        d_f, d_X, d_ab0 = recurrence_backward(f[:, :, None, :], ab, ab0, None, None, d_hs, d_ab_T,
                                              parallel=scan == "parallel")
        d_ab0 = d_ab0 + d_prev_ab[0]
    else:
        d_f, d_X, d_ab0 = np.zeros((0,) + ab0.shape, dtype=ab0.dtype), np.zeros_like(ab), d_ab_T
    d_f = d_f.sum(axis=2)  # (T, N, A)
    d_v += d_X[:, :, 0] * g
    d_g = d_X[:, :, 0] * v + d_X[:, :, 1]
    d_lf = d_f * f  # lf = p_{t-1} + w - p_t
    d_gk = d_g * g  # g = exp(k - p_t)
    d_k = d_ku + d_gk
    dp_local = -(d_lf + d_gk)
    E += d_lf
    d_w = d_lf.sum(axis=(0, 1))
    # p_t = max(s_t, k_t), s_t = p_{t-1} + w: with Z_t = dL/dp_t (everything),
    # Z_t = dp_local_t + E_{t+1} + wp_{t+1} Z_{t+1}, and Z_{T-1} = dp_local_{T-1} + d_max_T
    wp = _tie_weight(pprev + w, k)
    d_pT = np.zeros_like(ab0[:, 0]) if dmax_T is None else np.asarray(dmax_T, dtype=k.dtype)
    coef = np.concatenate([wp[1:], np.ones_like(wp[:1])], axis=0)
    c = dp_local + np.concatenate([E[1:], np.zeros_like(E[:1])], axis=0)
    Z = linear_scan(coef[::-1], c[::-1], d_pT)[::-1]  # (T, N, A)
    d_s = Z * wp
    d_k += Z * (1.0 - wp)
    d_w += d_s.sum(axis=(0, 1))
    d_p0 = (E[0] + d_s[0]) if T else d_pT
    d_time_decay = d_w * w  # w = -exp(time_decay)
    d_time_first = d_ku.sum(axis=(0, 1))
    d_state0 = WKVState(d_ab0[:, 0].copy(), d_ab0[:, 1].copy(), np.array(d_p0, copy=True))
    return (d_k, d_v, d_time_decay, d_time_first), d_state0


def wkv_states(cache) -> WKVState:
    """Every step's state from a forward cache.

    Parameters
    ----------
    cache : tuple
        From :func:`wkv_forward`.

    Returns
    -------
    WKVState
        Time-major: num, den, max, each (T, N, A).
    """
    k, v, w, state0, p, pprev, f, g, ab0, ab, prev_ab, ku, q, e1, e2, den, wkv, scan = cache
    return WKVState(ab[:, :, 0].copy(), ab[:, :, 1].copy(), p.copy())
