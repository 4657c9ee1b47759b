"""minLSTM (Feng et al. 2024): scan kernels (forward and exact backward side by side) and :class:`MinLSTMCell`.

The LSTM without its output gate and cell/hidden split, with forget and input gates that read
the input only and are normalised to sum to one, so that the update is a linear recurrence in
``h`` (Feng et al. 2024, Sec. 3.2)::

    f_t  = sigmoid(W_f x_t + b_f),   i_t = sigmoid(W_i x_t + b_i)
    keep_t = f'_t = f_t / (f_t + i_t),   i'_t = i_t / (f_t + i_t) = 1 - keep_t
    h~_t = W_h x_t + b_h   (log_space=False)   or   g(W_h x_t + b_h)   (log_space=True)
    h_t  = keep_t * h_{t-1} + i'_t * h~_t

Written as in :func:`hiddenstate.classic.textbook.hidden_state_update`, the normalised forget gate ``f'``
is the keep gate (it weights the old state) and ``i' = 1 - f'`` weights the candidate. The
normalised gates are computed as ``f' = sigmoid(log f - log i)`` with ``log f = -softplus(-W_f x
- b_f)``, the paper's log-space formulas, in both forms (they equal ``f / (f + i)`` exactly in
real arithmetic and keep every digit in floating point). Gate blocks of ``weight_ih`` (3H, I):
``f``, ``i``, ``h``; no recurrent weights. The options ``log_space`` and ``scan`` and the
treatment of ``h0`` are those of :mod:`hiddenstate.classic.cells.mingru`.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.classic.cells.base import Cell, CellKind, Record
from hiddenstate.classic.cells.mingru import SCANS, bounds, candidate, jacobian
from hiddenstate.core.validation import boolean, choice
from hiddenstate.shared.scan import previous_states, recurrence_backward, recurrence_forward, sigmoid_parts

__all__ = ["KIND", "MinLSTMCell", "bounds", "jacobian", "recorded", "scan_backward", "scan_forward"]


@np.errstate(under="ignore")  # gates and products of gates may underflow to 0: the right limit
def scan_forward(xw, h0, w_hh=None, b_hh=None, keep=None, reset=None, *, record=False, log_space=False,
                 scan="parallel"):
    """minLSTM recurrence over all T steps: the forward scan kernel (G = 3, column blocks f, i, h).

    ``f, i = sigmoid(xw_f), sigmoid(xw_i)``, ``keep = f / (f + i)``, ``h~ = xw_h`` (or
    ``g(xw_h)``), ``h_t = keep_t h_{t-1} + (1 - keep_t) h~_t`` for ``t = 0 .. T-1`` from ``h0``.
    This is the kernel contract of :mod:`hiddenstate.classic.cells.base`; nothing is validated, every
    array must have the dtype of ``xw``.

    Parameters
    ----------
    xw : ndarray of shape (T, N, G*H), G = 3
        The input projection ``x_t W_ih^T + b_ih`` of every step, blocks f, i, h. Not modified.
    h0 : ndarray of shape (N, H)
        The initial state (any sign, also in log space).
    w_hh, b_hh : None
        A minLSTM has no recurrent weights; accepted for the uniform kernel signature.
    keep : ndarray of bool, shape (T, N, 1), or None
        False where step ``t`` of column ``n`` is padding: the state is carried unchanged.
    reset : ndarray of bool, shape (T, N, 1), or None
        True where step ``t`` of column ``n`` starts from ``h0``; no gradient crosses that boundary.
    record : bool, default False
        Also expose the pre-activations ``f``, ``i`` and ``h_tilde`` (for :func:`recorded`).
    log_space : bool, default False
        The paper's log-space form: ``h~ = g(xw_h) > 0`` and, with ``scan="parallel"``, the scan
        runs on ``(log f', log(i' h~))`` pairs.
    scan : {"parallel", "sequential"}, default "parallel"
        A chunked scan over time, or the per-step loop.

    Returns
    -------
    hs : ndarray of shape (T, N, H)
        Every step's state (at padded steps, the carried state).
    final : ndarray of shape (N, H)
        The state after the last step (each column's state at its last valid step); a copy of
        ``h0`` when T = 0.
    cache : tuple
        Opaque; pass it to :func:`scan_backward` and :func:`recorded`.
    """
    H = xw.shape[2] // 3
    kf, ki, p = xw[:, :, :H], xw[:, :, H:2 * H], xw[:, :, 2 * H:]
    f, f_minus, sp_f = sigmoid_parts(kf)  # sigmoid(kf), sigmoid(-kf), -log f
    i, i_minus, sp_i = sigmoid_parts(ki)
    u = sp_i - sp_f  # log f - log i
    kp, ip, sp_u = sigmoid_parts(u)  # f' = sigmoid(u), i' = sigmoid(-u), -log f'
    n, log_n, dn = candidate(p, log_space)
    b = ip * n
    log_ab = (-sp_u, log_n - (sp_u + u)) if log_space else None  # log i' = -softplus(u)
    hs = recurrence_forward(kp, b, h0, keep, reset, parallel=scan == "parallel", log_ab=log_ab)
    cache = (kf, ki, p, f, i, f_minus, i_minus, kp, ip, n, dn, hs, h0, keep, reset, scan, record)
    return hs, hs[-1].copy() if hs.shape[0] else h0.copy(), cache


@np.errstate(under="ignore")
def scan_backward(cache, d_hs, d_final):
    """Exact backward pass through :func:`scan_forward` (the backward kernel).

    The state gradient runs through the same scan backwards in time
    (:func:`hiddenstate.shared.scan.recurrence_backward`); with ``u = log f - log i`` (so
    ``keep = sigmoid(u)``), ``dL/du = keep i' (dL/da - dL/db h~)``, ``dL/dk_f = dL/du (1 - f)``,
    ``dL/dk_i = -dL/du (1 - i)`` and ``dL/dp = dL/db i' h~'``.

    Parameters
    ----------
    cache : tuple
        From :func:`scan_forward`.
    d_hs : ndarray of shape (T, N, H) or None
        Gradient of the loss with respect to ``hs`` (None: zeros).
    d_final : ndarray of shape (N, H) or None
        Gradient with respect to ``final`` (None: zeros).

    Returns
    -------
    d_xw : ndarray of shape (T, N, G*H), G = 3
        Gradient with respect to ``xw``, blocks f, i, h.
    d_w_hh, d_b_hh : None
        No recurrent weights.
    d_h0 : ndarray of shape (N, H)
        Gradient with respect to ``h0``, including what reached it through reset steps.
    """
    _, _, _, _, _, f_minus, i_minus, kp, ip, n, dn, hs, h0, keep, reset, scan, _ = cache
    T, N, H = hs.shape
    d_a, d_b, d_h0 = recurrence_backward(kp, hs, h0, keep, reset, d_hs, d_final, parallel=scan == "parallel")
    d_u = kp * ip * (d_a - d_b * n)
    d_xw = np.empty((T, N, 3 * H), dtype=hs.dtype)
    np.multiply(d_u, f_minus, out=d_xw[:, :, :H])
    np.multiply(d_u, i_minus, out=d_xw[:, :, H:2 * H])
    np.negative(d_xw[:, :, H:2 * H], out=d_xw[:, :, H:2 * H])
    np.multiply(d_b, ip if dn is None else ip * dn, out=d_xw[:, :, 2 * H:])
    return d_xw, None, None, d_h0


def recorded(cache) -> Record:
    """Gates ``f``, ``i`` (raw), ``keep`` (``f' = f / (f + i)``), candidate ``h_tilde`` and pre-activations.

    Parameters
    ----------
    cache : tuple
        From :func:`scan_forward`.

    Returns
    -------
    Record
        ``h`` (T, N, H) every state; ``h_prev`` (T, N, H) the state each step read (after
        resets); ``gates`` ``{"f", "i", "keep", "h_tilde"}`` (the candidate's weight is
        ``i' = 1 - keep``); ``preacts`` ``{"f", "i", "h_tilde"}`` when the forward ran with
        ``record=True``, else empty.
    """
    kf, ki, p, f, i, _, _, kp, _, n, _, hs, h0, _, reset, _, record = cache
    preacts = {"f": kf, "i": ki, "h_tilde": p} if record else {}
    return Record(h=hs, h_prev=previous_states(hs, h0, reset), gates={"f": f, "i": i, "keep": kp, "h_tilde": n},
                  preacts=preacts)


#: minLSTM (Feng et al. 2024), declared once.
KIND = CellKind(name="minlstm", blocks=("f", "i", "h"), gates=("f", "i", "keep", "h_tilde"),
                preacts=("f", "i", "h_tilde"), sigmoid_gates=("keep",), keep_gate="keep", has_cell=False,
                options=("log_space", "scan"), scan_forward=scan_forward, scan_backward=scan_backward,
                recorded=recorded, jacobian=jacobian, bounds=bounds, recurrent=False)


class MinLSTMCell(Cell):
    """One minLSTM step (Feng et al. 2024): ``h' = f' * h + (1 - f') * h~``, ``f' = f / (f + i)``, all from the input.

    ``f = sigmoid(W_f x + b_f)``, ``i = sigmoid(W_i x + b_i)``, ``h~ = W_h x + b_h`` or, with
    ``log_space``, ``g(W_h x + b_h)``; see :mod:`hiddenstate.classic.cells.minlstm`. The state is ``h``
    alone (no cell state).

    Parameters
    ----------
    input_size : int
        I, features per input vector.
    hidden_size : int
        H, hidden units.
    bias : bool, default True
        Whether ``bias_ih`` (3H,) exists.
    log_space : bool, default False
        The paper's log-space form (positive candidate ``g``).
    scan : {"parallel", "sequential"}, default "parallel"
        Accepted for symmetry with :class:`hiddenstate.MinLSTM` (one step is one step).
    dtype : {float64, float32}, default float64
        Dtype of the parameters and of every result.
    rng : numpy.random.Generator, optional
        Initial weights U(-1/sqrt(H), 1/sqrt(H)).

    Attributes
    ----------
    params : dict of str to ndarray
        ``weight_ih`` (3H, I) and ``bias_ih`` (3H,), row blocks f, i, h (G = 3); no recurrent
        weights.
    kind : CellKind
        :data:`KIND` (a class attribute).

    Raises
    ------
    TypeError
        A non-bool ``log_space`` or ``bias``, a size that is not an integer, a dtype other than
        float32/float64, an ``rng`` that is not a Generator.
    ValueError
        A size that is not positive, an unknown ``scan``.
    """

    kind = KIND

    def __init__(self, input_size, hidden_size, *, bias=True, log_space=False, scan="parallel", dtype=np.float64,
                 rng=None):
        self.log_space = boolean("log_space", log_space)
        self.scan = choice("scan", scan, SCANS)
        super().__init__(input_size, hidden_size, bias=bias, dtype=dtype, rng=rng)
