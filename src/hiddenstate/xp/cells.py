"""The reference form of every cell kind, in array-API functions only: one step forward, its exact adjoint.

Each kind is a pair of plain functions on arrays of any array-API namespace ``xp``
(``xp.matmul``, ``xp.tanh``, ``xp.exp``, ``xp.where``, slicing):

``forward(xp, xw, state, w, **options) -> (new_state, saved)``
    ``xw`` (N, G*H): this step's input projection ``x W_ih^T + b_ih``; ``state`` a tuple
    ``(h,)`` (LSTM ``(h, c)``), each (N, H); ``w`` a dict with ``weight_hh`` (G*H, H) and
    ``bias_hh`` (G*H,) or None (absent for minGRU/minLSTM).
``backward(xp, saved, d_new, w, **options) -> (d_xw, d_state, d_w_hh, d_b_hh)``
    ``d_new``: the gradient with respect to ``new_state`` (a tuple like it); the results are
    the gradients with respect to ``xw``, ``state``, and this step's share of ``weight_hh`` and
    ``bias_hh`` (None for a kind without recurrent weights).

:func:`scan` and :func:`scan_backward` run a kind over T steps with padding (``keep``) and resets,
exactly as the NumPy kernels of :mod:`hiddenstate.classic.cells` do (the equations are in their module
docstrings and in :mod:`hiddenstate.classic.layers`); the tests hold the two equal to float64 round-off.
This is the readable form: one Python loop over time, one step of the equations per iteration.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["KINDS", "Reference", "scan", "scan_backward", "sigmoid", "softplus"]


def sigmoid(xp, a):
    """The logistic function, without overflow: ``1 / (1 + e^-a)`` for a >= 0, ``e^a / (1 + e^a)`` below.

    Parameters
    ----------
    xp : module
        The array namespace.
    a : array

    Returns
    -------
    array
        ``sigmoid(a)``, shaped like ``a``.
    """
    e = xp.exp(-xp.abs(a))
    return xp.where(a >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def softplus(xp, a):
    """``log(1 + e^a)`` without overflow: ``max(a, 0) + log1p(e^-|a|)``.

    Parameters
    ----------
    xp : module
        The array namespace.
    a : array

    Returns
    -------
    array
        ``softplus(a)``, shaped like ``a``.
    """
    return xp.maximum(a, xp.zeros_like(a)) + xp.log1p(xp.exp(-xp.abs(a)))


def _t(xp, w):
    return xp.matrix_transpose(w)


def _recurrent(xp, h, w):
    """``h W_hh^T + b_hh`` (N, G*H)."""
    out = xp.matmul(h, _t(xp, w["weight_hh"]))
    return out if w.get("bias_hh") is None else out + w["bias_hh"]


# -- Elman RNN: h' = act(xw + h W^T + b) ----------------------------------------------------------
def _rnn_forward(xp, xw, state, w, *, nonlinearity="tanh"):
    (h,) = state
    a = xw + _recurrent(xp, h, w)
    if nonlinearity == "tanh":
        h_new = xp.tanh(a)
    elif nonlinearity == "relu":
        h_new = xp.maximum(a, xp.zeros_like(a))
    else:
        h_new = sigmoid(xp, a)
    return (h_new,), (h, h_new)


def _rnn_backward(xp, saved, d_new, w, *, nonlinearity="tanh"):
    h, h_new = saved
    if nonlinearity == "tanh":
        deriv = 1.0 - h_new * h_new
    elif nonlinearity == "relu":
        deriv = xp.astype(h_new > 0, h_new.dtype)
    else:
        deriv = h_new * (1.0 - h_new)
    da = d_new[0] * deriv
    return da, (xp.matmul(da, w["weight_hh"]),), xp.matmul(_t(xp, da), h), xp.sum(da, axis=0)


# -- GRU (Cho et al. 2014), gates r, z, n; h' = z h + (1 - z) n ----------------------------------
def _gru_forward(xp, xw, state, w, *, reset_after=False):
    (h,) = state
    H = h.shape[1]
    if reset_after:  # torch / cuDNN: n = tanh(x_n + r * (W_hn h + b_hn))
        gh = _recurrent(xp, h, w)
        r = sigmoid(xp, xw[:, :H] + gh[:, :H])
        z = sigmoid(xp, xw[:, H:2 * H] + gh[:, H:2 * H])
        s = gh[:, 2 * H:]
        n = xp.tanh(xw[:, 2 * H:] + r * s)
    else:  # the paper's Eq. 8: n = tanh(x_n + W_hn (r * h) + b_hn)
        w_hh, b_hh = w["weight_hh"], w.get("bias_hh")
        g_rz = xp.matmul(h, _t(xp, w_hh[:2 * H]))
        g_rz = g_rz if b_hh is None else g_rz + b_hh[:2 * H]
        r = sigmoid(xp, xw[:, :H] + g_rz[:, :H])
        z = sigmoid(xp, xw[:, H:2 * H] + g_rz[:, H:])
        s = r * h
        g_n = xp.matmul(s, _t(xp, w_hh[2 * H:]))
        n = xp.tanh(xw[:, 2 * H:] + (g_n if b_hh is None else g_n + b_hh[2 * H:]))
    return (n + z * (h - n),), (h, r, z, n, s)


def _gru_backward(xp, saved, d_new, w, *, reset_after=False):
    h, r, z, n, s = saved
    H = h.shape[1]
    dh = d_new[0]
    dn = dh * (1.0 - z)
    dz_pre = dh * (h - n) * z * (1.0 - z)
    dn_pre = dn * (1.0 - n * n)
    w_hh = w["weight_hh"]
    if reset_after:
        dr_pre = dn_pre * s * r * (1.0 - r)
        d_gh = xp.concat([dr_pre, dz_pre, dn_pre * r], axis=1)  # gradient of h W^T + b
        dh_prev = dh * z + xp.matmul(d_gh, w_hh)
        d_w, d_b = xp.matmul(_t(xp, d_gh), h), xp.sum(d_gh, axis=0)
    else:
        ds = xp.matmul(dn_pre, w_hh[2 * H:])  # gradient of s = r * h
        dr_pre = ds * h * r * (1.0 - r)
        d_rz = xp.concat([dr_pre, dz_pre], axis=1)
        dh_prev = dh * z + ds * r + xp.matmul(d_rz, w_hh[:2 * H])
        d_w = xp.concat([xp.matmul(_t(xp, d_rz), h), xp.matmul(_t(xp, dn_pre), s)], axis=0)
        d_b = xp.sum(xp.concat([d_rz, dn_pre], axis=1), axis=0)
    d_xw = xp.concat([dr_pre, dz_pre, dn_pre], axis=1)
    return d_xw, (dh_prev,), d_w, d_b


# -- LSTM, gates i, f, g, o; c' = f c + i g, h' = o tanh(c') -------------------------------------
def _lstm_forward(xp, xw, state, w):
    h, c = state
    H = h.shape[1]
    a = xw + _recurrent(xp, h, w)
    i, f = sigmoid(xp, a[:, :H]), sigmoid(xp, a[:, H:2 * H])
    g, o = xp.tanh(a[:, 2 * H:3 * H]), sigmoid(xp, a[:, 3 * H:])
    c_new = f * c + i * g
    tc = xp.tanh(c_new)
    return (o * tc, c_new), (h, c, i, f, g, o, tc)


def _lstm_backward(xp, saved, d_new, w):
    h, c, i, f, g, o, tc = saved
    dh, dc_new = d_new
    dc = dc_new + dh * o * (1.0 - tc * tc)
    da = xp.concat([dc * g * i * (1.0 - i), dc * c * f * (1.0 - f), dc * i * (1.0 - g * g),
                    dh * tc * o * (1.0 - o)], axis=1)
    dh_prev = xp.matmul(da, w["weight_hh"])
    return da, (dh_prev, dc * f), xp.matmul(_t(xp, da), h), xp.sum(da, axis=0)


# -- minGRU and minLSTM (Feng et al. 2024): h' = keep h + (1 - keep) h~, gates from the input only --
def _candidate(xp, p, log_space):
    """``h~`` and ``dh~/dp``: ``p`` and 1, or ``g(p)`` (``p + 1/2`` for p >= 0, else ``sigmoid(p)``) and ``g'``."""
    if not log_space:
        return p, xp.ones_like(p)
    s = sigmoid(xp, p)
    return xp.where(p >= 0, p + 0.5, s), xp.where(p >= 0, xp.ones_like(p), s * (1.0 - s))


def _mingru_forward(xp, xw, state, w, *, log_space=False, scan="parallel"):
    (h,) = state
    H = h.shape[1]
    k = xw[:, :H]
    z, keep = sigmoid(xp, k), sigmoid(xp, -k)  # the paper's z weights the candidate
    n, dn = _candidate(xp, xw[:, H:], log_space)
    return (keep * h + z * n,), (h, z, keep, n, dn)


def _mingru_backward(xp, saved, d_new, w, *, log_space=False, scan="parallel"):
    h, z, keep, n, dn = saved
    dh = d_new[0]
    d_xw = xp.concat([dh * (n - h) * z * keep, dh * z * dn], axis=1)
    return d_xw, (dh * keep,), None, None


def _minlstm_forward(xp, xw, state, w, *, log_space=False, scan="parallel"):
    (h,) = state
    H = h.shape[1]
    kf, ki = xw[:, :H], xw[:, H:2 * H]
    u = softplus(xp, -ki) - softplus(xp, -kf)  # log f - log i: keep = f / (f + i) = sigmoid(u)
    keep, ip = sigmoid(xp, u), sigmoid(xp, -u)
    n, dn = _candidate(xp, xw[:, 2 * H:], log_space)
    return (keep * h + ip * n,), (h, sigmoid(xp, -kf), sigmoid(xp, -ki), keep, ip, n, dn)


def _minlstm_backward(xp, saved, d_new, w, *, log_space=False, scan="parallel"):
    h, f_minus, i_minus, keep, ip, n, dn = saved
    dh = d_new[0]
    du = dh * (h - n) * keep * ip
    d_xw = xp.concat([du * f_minus, -du * i_minus, dh * ip * dn], axis=1)
    return d_xw, (dh * keep,), None, None


class Reference(NamedTuple):
    """One kind's reference step: its forward and backward functions (module docstring)."""

    forward: object
    backward: object


#: The reference step of every cell kind, by :attr:`hiddenstate.classic.cells.base.CellKind.name`.
KINDS = {
    "rnn": Reference(_rnn_forward, _rnn_backward),
    "gru": Reference(_gru_forward, _gru_backward),
    "lstm": Reference(_lstm_forward, _lstm_backward),
    "mingru": Reference(_mingru_forward, _mingru_backward),
    "minlstm": Reference(_minlstm_forward, _minlstm_backward),
}


def scan(xp, kind: str, xw, state0: tuple, w: dict, keep=None, reset=None, options=None):
    """Run a kind's reference step over T steps, with padding and resets.

    At step t: the state read is ``state0`` where ``reset[t]`` (else the previous state); the
    new state is the step's where ``keep[t]`` (else the state read is carried unchanged).

    Parameters
    ----------
    xp : module
        The array namespace.
    kind : str
        A key of :data:`KINDS`.
    xw : array of shape (T, N, G*H)
        The input projection of every step.
    state0 : tuple of arrays (N, H)
        ``(h0,)``, or ``(h0, c0)`` for the LSTM.
    w : dict
        ``weight_hh`` and ``bias_hh`` (or nothing for minGRU/minLSTM).
    keep : bool array of shape (T, N, 1), optional
        False on padded steps.
    reset : bool array of shape (T, N, 1), optional
        True where a step restarts from ``state0``.
    options : dict, optional
        The kind's options (``nonlinearity``, ``reset_after``, ``log_space``).

    Returns
    -------
    hs : array of shape (T, N, H)
        ``h`` after every step.
    final : tuple of arrays (N, H)
        The state after the last step (``state0`` when T = 0).
    saved : list
        What each step keeps for :func:`scan_backward`.
    """
    step, opts = KINDS[kind].forward, options or {}
    state, hs, saved = state0, [], []
    for t in range(xw.shape[0]):
        read = state if reset is None else tuple(xp.where(reset[t], s0, s) for s0, s in zip(state0, state))
        new, kept = step(xp, xw[t], read, w, **opts)
        if keep is not None:
            new = tuple(xp.where(keep[t], a, b) for a, b in zip(new, read))
        hs.append(new[0])
        saved.append(kept)
        state = new
    hs = xp.stack(hs) if hs else xp.zeros((0, *state0[0].shape), dtype=state0[0].dtype, device=_device(state0[0]))
    return hs, state, saved


def _device(a):
    import array_api_compat

    return array_api_compat.device(a)


def scan_backward(xp, kind: str, saved: list, w: dict, state0: tuple, keep=None, reset=None, d_hs=None,
                  d_final=None, options=None):
    """Exact BPTT through :func:`scan`: the steps in reverse, each step's adjoint.

    Parameters
    ----------
    xp : module
        The array namespace.
    kind : str
        A key of :data:`KINDS`.
    saved : list
        From :func:`scan`.
    w : dict
        The weights :func:`scan` used.
    state0 : tuple of arrays (N, H)
        The initial state :func:`scan` started from.
    keep, reset : bool arrays of shape (T, N, 1), optional
        As :func:`scan`.
    d_hs : array of shape (T, N, H), optional
        Gradient with respect to ``hs``.
    d_final : tuple of (array (N, H) or None), optional
        Gradient with respect to ``final``.
    options : dict, optional
        As :func:`scan`.

    Returns
    -------
    d_xw : array of shape (T, N, G*H)
    d_w_hh : array of shape (G*H, H) or None
    d_b_hh : array of shape (G*H,) or None
    d_state0 : tuple of arrays (N, H)
        Including what reached ``state0`` through reset steps.
    """
    back, opts = KINDS[kind].backward, options or {}
    zeros = tuple(xp.zeros_like(s) for s in state0)
    carry = zeros if d_final is None else tuple(z if d is None else d for z, d in zip(zeros, d_final))
    d0, d_xw, d_w, d_b = zeros, [], None, None
    for t in range(len(saved) - 1, -1, -1):
        d = carry if d_hs is None else (carry[0] + d_hs[t], *carry[1:])
        if keep is not None:  # a padded step passes the gradient straight through
            passed = tuple(xp.where(keep[t], xp.zeros_like(a), a) for a in d)
            d = tuple(xp.where(keep[t], a, xp.zeros_like(a)) for a in d)
        dx_t, d_prev, dw_t, db_t = back(xp, saved[t], d, w, **opts)
        d_xw.append(dx_t)
        if dw_t is not None:
            d_w = dw_t if d_w is None else d_w + dw_t
            d_b = db_t if d_b is None else d_b + db_t
        if keep is not None:
            d_prev = tuple(a + b for a, b in zip(d_prev, passed))
        if reset is not None:  # a reset step read state0: its gradient goes there, none further back
            d0 = tuple(a + xp.where(reset[t], b, xp.zeros_like(b)) for a, b in zip(d0, d_prev))
            d_prev = tuple(xp.where(reset[t], xp.zeros_like(b), b) for b in d_prev)
        carry = d_prev
    d0 = tuple(a + b for a, b in zip(d0, carry))
    d_xw = xp.stack(d_xw[::-1]) if d_xw else None
    w_hh = w.get("weight_hh")
    if w_hh is not None and d_w is None:  # T = 0
        d_w = xp.zeros_like(w_hh)
        d_b = xp.zeros((w_hh.shape[0],), dtype=w_hh.dtype, device=_device(w_hh))
    return d_xw, d_w, d_b, d0
