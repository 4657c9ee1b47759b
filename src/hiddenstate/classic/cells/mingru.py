"""minGRU (Feng et al. 2024): scan kernels (forward and exact backward side by side) and :class:`MinGRUCell`.

The GRU with the previous state taken out of its gate and candidate, so that both read the
input only and the update becomes a *linear* recurrence in ``h`` (Feng et al. 2024, Sec. 3.1)::

    z_t       = sigmoid(W_z x_t + b_z)                  the paper's update gate: weights the candidate
    keep_t    = 1 - z_t = sigmoid(-(W_z x_t + b_z))     the seeds' z: weights the old state
    h~_t      = W_h x_t + b_h                           (log_space=False)
              = g(W_h x_t + b_h)                        (log_space=True; g(p) = p + 1/2 if p >= 0 else sigmoid(p))
    h_t       = keep_t * h_{t-1} + (1 - keep_t) * h~_t  = (1 - z_t) * h_{t-1} + z_t * h~_t

The last line is :func:`hiddenstate.classic.textbook.hidden_state_update` with the keep gate in the
place of the seeds' update gate (Cho et al. 2014's z weights the *old* state; the paper's z
weights the *candidate*). Gate blocks of ``weight_ih`` (2H, I): ``z``, ``h`` (the paper's
``Linear_z``, ``Linear_h``); there are no recurrent weights (``CellKind.recurrent`` is False).

Options: ``log_space`` (the paper's log-space variant, App. B.3: a positive candidate and a scan
of ``(log keep, log(z h~))`` pairs in log space) and ``scan`` (``"parallel"``: a chunked
Brent-Kung scan over time, :mod:`hiddenstate.shared.scan`; ``"sequential"``: the per-step loop,
the streaming reference). Both modes give the same states to rounding; the backward pass is the
reverse-time recurrence of the adjoint through the same scan. The initial state is the state
itself, never passed through ``g``: the paper's listing applies ``log_g`` to ``h_0`` in its
parallel mode only (its sequential mode does not), which would make the two modes disagree and
change a state carried from one chunk to the next; ``h0 = g(u)`` reproduces that listing.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.classic.cells.base import Cell, CellKind, Record
from hiddenstate.core.validation import boolean, choice
from hiddenstate.shared.scan import (
    g_prime,
    log_g,
    previous_states,
    recurrence_backward,
    recurrence_forward,
    sigmoid_parts,
)

__all__ = ["KIND", "SCANS", "MinGRUCell", "bounds", "jacobian", "recorded", "scan_backward", "scan_forward"]

#: The evaluation modes of the linear recurrences (option ``scan``).
SCANS = ("parallel", "sequential")


def candidate(p, log_space: bool):
    """The candidate ``h~`` from its pre-activation, with what its derivative needs.

    Parameters
    ----------
    p : ndarray
        ``W_h x + b_h``.
    log_space : bool
        Whether the candidate goes through ``g`` (and ``log h~`` is wanted).

    Returns
    -------
    n : ndarray
        ``p`` (a contiguous copy), or ``g(p)``.
    log_n : ndarray or None
        ``log g(p)`` (log space only).
    dn : ndarray or None
        ``g'(p)`` (log space only; 1 otherwise).
    """
    if not log_space:
        return np.ascontiguousarray(p), None, None
    s, s_minus, sp_minus = sigmoid_parts(p)
    return np.where(p >= 0, p + 0.5, s), log_g(p, sp_minus), g_prime(p, s, s_minus)


@np.errstate(under="ignore")  # gates and products of gates may underflow to 0: the right limit
def scan_forward(xw, h0, w_hh=None, b_hh=None, keep=None, reset=None, *, record=False, log_space=False,
                 scan="parallel"):
    """minGRU recurrence over all T steps: the forward scan kernel (G = 2, column blocks z, h).

    ``z = sigmoid(xw_z)``, ``keep = 1 - z``, ``h~ = xw_h`` (or ``g(xw_h)``),
    ``h_t = keep_t h_{t-1} + z_t h~_t`` for ``t = 0 .. T-1`` from ``h0`` (Feng et al. 2024, Eqs.
    for minGRU). This is the kernel contract of :mod:`hiddenstate.classic.cells.base`; nothing is
    validated, every array must have the dtype of ``xw``.

    Parameters
    ----------
    xw : ndarray of shape (T, N, G*H), G = 2
        The input projection ``x_t W_ih^T + b_ih`` of every step, blocks z, h. Not modified.
    h0 : ndarray of shape (N, H)
        The initial state (any sign, also in log space).
    w_hh, b_hh : None
        A minGRU has no recurrent weights; accepted for the uniform kernel signature.
    keep : ndarray of bool, shape (T, N, 1), or None
        False where step ``t`` of column ``n`` is padding: the state is carried unchanged.
    reset : ndarray of bool, shape (T, N, 1), or None
        True where step ``t`` of column ``n`` starts from ``h0``; no gradient crosses that boundary.
    record : bool, default False
        Also expose the pre-activations ``z`` and ``h_tilde`` (for :func:`recorded`).
    log_space : bool, default False
        The paper's log-space form: ``h~ = g(xw_h) > 0`` and, with ``scan="parallel"``, the scan
        runs on ``(log keep, log(z h~))`` pairs.
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
    H = xw.shape[2] // 2
    k, p = xw[:, :, :H], xw[:, :, H:]
    z, kp, sp_minus = sigmoid_parts(k)  # z = sigmoid(k), keep = sigmoid(-k), softplus(-k) = -log z
    n, log_n, dn = candidate(p, log_space)
    b = z * n
    log_ab = (-(sp_minus + k), log_n - sp_minus) if log_space else None  # log keep = -softplus(k)
    hs = recurrence_forward(kp, b, h0, keep, reset, parallel=scan == "parallel", log_ab=log_ab)
    cache = (k, p, z, kp, n, dn, hs, h0, keep, reset, scan, record)
    return hs, hs[-1].copy() if hs.shape[0] else h0.copy(), cache


@np.errstate(under="ignore")
def scan_backward(cache, d_hs, d_final):
    """Exact backward pass through :func:`scan_forward` (the backward kernel).

    The state gradient ``g_t = d_hs_t + keep_{t+1} g_{t+1}`` runs through the same scan
    backwards in time (:func:`hiddenstate.shared.scan.recurrence_backward`), then
    ``dL/dk = z (1 - z) g_t (h~_t - h_{t-1})`` and ``dL/dp = g_t z h~'`` at every valid step.

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
    d_xw : ndarray of shape (T, N, G*H), G = 2
        Gradient with respect to ``xw``, blocks z, h.
    d_w_hh, d_b_hh : None
        No recurrent weights.
    d_h0 : ndarray of shape (N, H)
        Gradient with respect to ``h0``, including what reached it through reset steps.
    """
    k, p, z, kp, n, dn, hs, h0, keep, reset, scan, _ = cache
    T, N, H = hs.shape
    d_a, d_b, d_h0 = recurrence_backward(kp, hs, h0, keep, reset, d_hs, d_final, parallel=scan == "parallel")
    d_xw = np.empty((T, N, 2 * H), dtype=hs.dtype)
    np.multiply(z * kp, d_b * n - d_a, out=d_xw[:, :, :H])  # a = sigmoid(-k), b = sigmoid(k) h~
    np.multiply(d_b, z if dn is None else z * dn, out=d_xw[:, :, H:])
    return d_xw, None, None, d_h0


def recorded(cache) -> Record:
    """Gates ``z`` (the paper's), ``keep`` (``1 - z``), candidate ``h_tilde`` and pre-activations.

    Parameters
    ----------
    cache : tuple
        From :func:`scan_forward`.

    Returns
    -------
    Record
        ``h`` (T, N, H) every state; ``h_prev`` (T, N, H) the state each step read (after
        resets); ``gates`` ``{"z", "keep", "h_tilde"}``; ``preacts`` ``{"z", "h_tilde"}`` (the
        arguments of the sigmoid and of the candidate's activation) when the forward ran with
        ``record=True``, else empty.
    """
    k, p, z, kp, n, _, hs, h0, _, reset, _, record = cache
    preacts = {"z": k, "h_tilde": p} if record else {}
    return Record(h=hs, h_prev=previous_states(hs, h0, reset), gates={"z": z, "keep": kp, "h_tilde": n},
                  preacts=preacts)


def jacobian(rec: Record, w_hh=None, **options) -> np.ndarray:
    """Step Jacobian ``dh_t/dh_{t-1} = diag(keep_t)``: the gates read the input only.

    So the Jacobian product over ``k`` steps, ``dh_T/dh_{T-k}``, is the diagonal matrix of the
    products of the keep gates: a unit remembers exactly as long as its keep gate stays near 1.

    Parameters
    ----------
    rec : Record
        Arrays of shape (..., H) with any leading axes; reads ``gates["keep"]``.
    w_hh : None
        Unused (no recurrent weights).
    **options
        The kind's options (``log_space``, ``scan``); the Jacobian is the same for all.

    Returns
    -------
    ndarray of shape (..., H, H)
        ``diag(keep)``.
    """
    kp = rec.gates["keep"]
    return np.eye(kp.shape[-1]) * kp[..., None, :]


def bounds(hidden_size: int, *, log_space: bool = False, scan: str = "parallel") -> list:
    """A box of reachable states: unbounded for the plain form, ``[0, inf)`` per unit in log space.

    Parameters
    ----------
    hidden_size : int
        H.
    log_space : bool, default False
        Log space: the candidate is positive, so a non-negative state stays non-negative.
    scan : str, default "parallel"
        Accepted for a uniform signature.

    Returns
    -------
    list of (low, high) pairs, length H
        ``(None, None)`` or ``(0.0, None)`` for every unit.
    """
    return [(0.0, None) if log_space else (None, None)] * hidden_size


#: minGRU (Feng et al. 2024), declared once.
KIND = CellKind(name="mingru", blocks=("z", "h"), gates=("z", "keep", "h_tilde"), preacts=("z", "h_tilde"),
                sigmoid_gates=("keep",), keep_gate="keep", has_cell=False, options=("log_space", "scan"),
                scan_forward=scan_forward, scan_backward=scan_backward, recorded=recorded, jacobian=jacobian,
                bounds=bounds, recurrent=False)


class MinGRUCell(Cell):
    """One minGRU step (Feng et al. 2024): ``h' = (1 - z) * h + z * h~`` with ``z``, ``h~`` from the input only.

    ``z = sigmoid(W_z x + b_z)`` (the paper's z, weighting the candidate; the keep gate is
    ``1 - z``), ``h~ = W_h x + b_h`` or, with ``log_space``, ``g(W_h x + b_h)``; see
    :mod:`hiddenstate.classic.cells.mingru`.

    Parameters
    ----------
    input_size : int
        I, features per input vector.
    hidden_size : int
        H, hidden units.
    bias : bool, default True
        Whether ``bias_ih`` (2H,) exists.
    log_space : bool, default False
        The paper's log-space form (positive candidate ``g``).
    scan : {"parallel", "sequential"}, default "parallel"
        Accepted for symmetry with :class:`hiddenstate.MinGRU` (one step is one step).
    dtype : {float64, float32}, default float64
        Dtype of the parameters and of every result.
    rng : numpy.random.Generator, optional
        Initial weights U(-1/sqrt(H), 1/sqrt(H)).

    Attributes
    ----------
    params : dict of str to ndarray
        ``weight_ih`` (2H, I) and ``bias_ih`` (2H,), row blocks z, h (G = 2); no recurrent weights.
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
