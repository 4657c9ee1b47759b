"""The readable reference of the gated delta rule / KDA: one step and its exact adjoint, in array-API functions only.

One step of :mod:`hiddenstate.kinds.delta.kernel` on arrays of any array-API namespace ``xp`` (NumPy,
torch, CuPy through ``array_api_compat``), exactly as transformers' ``torch_recurrent_gated_delta_rule``
and ``recurrent_kimi_delta_attention`` loop over time, with the state ``S`` (N, H, Dk, Dv)::

    P   = exp(g) S              g (N, H) (per head) or (N, H, Dk) (per key channel), <= 0
    r   = v - P^T k             what the decayed state mispredicts
    S'  = P + k (beta r)^T      the delta rule's write
    o   = S'^T q

:func:`scan` and :func:`scan_backward` run it over T steps, one step per loop iteration; the
tests hold them equal to the NumPy kernels (sequential and chunked) to float64 round-off.
"""

from __future__ import annotations

__all__ = ["scan", "scan_backward", "step", "step_backward"]


def _decay(xp, g):
    """``exp(g)`` shaped to multiply (N, H, Dk, Dv): a per-head decay (N, H) or a per-channel one (N, H, Dk)."""
    a = xp.exp(g)
    return a[..., None, None] if g.ndim == 2 else a[..., None]


def step(xp, q, k, v, g, beta, S):
    """One step of the gated delta rule.

    Parameters
    ----------
    xp : module
        The array namespace.
    q, k : array of shape (N, H, Dk)
        Query (already scaled) and key.
    v : array of shape (N, H, Dv)
    g : array of shape (N, H) or (N, H, Dk)
        The log decay.
    beta : array of shape (N, H)
    S : array of shape (N, H, Dk, Dv)
        The state before the step.

    Returns
    -------
    S_new : array of shape (N, H, Dk, Dv)
    o : array of shape (N, H, Dv)
        ``S_new^T q``.
    saved : tuple
        For :func:`step_backward`.
    """
    P = _decay(xp, g) * S
    r = v - xp.sum(P * k[..., :, None], axis=-2)  # (N, H, Dv)
    S_new = P + k[..., :, None] * (beta[..., None] * r)[..., None, :]
    o = xp.sum(S_new * q[..., :, None], axis=-2)
    return S_new, o, (q, k, g, beta, S, P, r, S_new)


def step_backward(xp, saved, d_o, d_S):
    """The exact adjoint of :func:`step`.

    Parameters
    ----------
    xp : module
        The array namespace.
    saved : tuple
        From :func:`step`.
    d_o : array of shape (N, H, Dv)
        Gradient with respect to ``o``.
    d_S : array of shape (N, H, Dk, Dv)
        Gradient with respect to ``S_new`` from later steps.

    Returns
    -------
    d_q, d_k : array of shape (N, H, Dk)
    d_v : array of shape (N, H, Dv)
    d_g : array shaped like ``g``
    d_beta : array of shape (N, H)
    d_S_prev : array of shape (N, H, Dk, Dv)
    """
    q, k, g, beta, S, P, r, S_new = saved
    d_S = d_S + q[..., :, None] * d_o[..., None, :]
    d_q = xp.sum(S_new * d_o[..., None, :], axis=-1)
    u = beta[..., None] * r
    du = xp.sum(d_S * k[..., :, None], axis=-2)  # (N, H, Dv)
    d_beta = xp.sum(du * r, axis=-1)
    dr = beta[..., None] * du
    d_k = xp.sum(d_S * u[..., None, :], axis=-1) - xp.sum(P * dr[..., None, :], axis=-1)
    dP = d_S - k[..., :, None] * dr[..., None, :]
    dPP = dP * P
    d_g = xp.sum(xp.sum(dPP, axis=-1), axis=-1) if g.ndim == 2 else xp.sum(dPP, axis=-1)
    return d_q, d_k, dr, d_g, d_beta, _decay(xp, g) * dP


def scan(xp, q, k, v, g, beta, S0):
    """The rule over T steps, one :func:`step` per iteration.

    Parameters
    ----------
    xp : module
        The array namespace.
    q, k : array of shape (T, N, H, Dk)
    v : array of shape (T, N, H, Dv)
    g : array of shape (T, N, H) or (T, N, H, Dk)
    beta : array of shape (T, N, H)
    S0 : array of shape (N, H, Dk, Dv)

    Returns
    -------
    o : array of shape (T, N, H, Dv)
    S_T : array of shape (N, H, Dk, Dv)
    saved : list of tuple
        Every step's, for :func:`scan_backward`.
    """
    S, outs, saved = S0, [], []
    for t in range(q.shape[0]):
        S, o, s = step(xp, q[t], k[t], v[t], g[t], beta[t], S)
        outs.append(o)
        saved.append(s)
    return xp.stack(outs), S, saved


def scan_backward(xp, saved, d_o, d_S_T):
    """BPTT through :func:`scan`, one :func:`step_backward` per iteration, last step first.

    Parameters
    ----------
    xp : module
        The array namespace.
    saved : list of tuple
        From :func:`scan` (T >= 1 steps).
    d_o : array of shape (T, N, H, Dv)
    d_S_T : array of shape (N, H, Dk, Dv)

    Returns
    -------
    d_q, d_k, d_v, d_g, d_beta : array
        Stacked over time, shaped like the inputs.
    d_S0 : array of shape (N, H, Dk, Dv)
    """
    d_S, grads = d_S_T, []
    for t in range(len(saved) - 1, -1, -1):
        *g_t, d_S = step_backward(xp, saved[t], d_o[t], d_S)
        grads.append(g_t)
    return (*(xp.stack([gr[i] for gr in grads[::-1]]) for i in range(5)), d_S)
