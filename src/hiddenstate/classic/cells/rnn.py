"""Elman RNN: scan kernels (forward and exact BPTT side by side) and :class:`RNNCell`.

``h_t = act(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)`` with ``act`` in {tanh, relu, sigmoid}
(Elman 1990 with PyTorch's parameter layout: ``weight_ih`` (H, I), ``weight_hh`` (H, H)).
``"sigmoid"`` (logistic units in [0, 1]) is Elman's own choice; torch offers only tanh and relu.

Kernel contract: :mod:`hiddenstate.classic.cells.base` (repeated on :func:`scan_forward` and
:func:`scan_backward`). The step Jacobian is ``dF/dh = diag(act'(a)) W_hh``, one factor of the
product in Pascanu, Mikolov & Bengio (2013), Eq. 5 (in this package's parametrisation, where the
nonlinearity is applied after the recurrent product).
"""

from __future__ import annotations

import numpy as np

from hiddenstate.classic.cells.base import Cell, CellKind, Record
from hiddenstate.core import workspace as ws
from hiddenstate.core.functional import previous_states, sigmoid_tanh

__all__ = ["KIND", "NONLINEARITIES", "RNNCell", "jacobian", "recorded", "scan_backward", "scan_forward", "scan_infer"]

NONLINEARITIES = ("tanh", "relu", "sigmoid")


def scan_forward(xw, h0, w_hh, b_hh, keep=None, reset=None, *, record=False, nonlinearity="tanh"):
    """Elman recurrence over all T steps: the forward scan kernel of the RNN (G = 1).

    ``a_t = xw_t + W_hh h_{t-1} + b_hh`` and ``h_t = act(a_t)`` (Elman 1990, with PyTorch's
    layout), for ``t = 0 .. T-1`` starting from ``h0``. This is the kernel contract of
    :mod:`hiddenstate.classic.cells.base`; nothing is validated (the layers and cells validate once at
    their boundary), every array must have the dtype of ``xw``.

    Parameters
    ----------
    xw : ndarray of shape (T, N, G*H), G = 1
        The input projection ``x_t W_ih^T + b_ih`` of every step, computed by the caller in one
        matrix multiply. Not modified.
    h0 : ndarray of shape (N, H)
        The initial state.
    w_hh : ndarray of shape (G*H, H)
        ``weight_hh``.
    b_hh : ndarray of shape (G*H,) or None
        ``bias_hh``; None for a layer without bias.
    keep : ndarray of bool, shape (T, N, 1), or None
        False where step ``t`` of column ``n`` is padding: the state is carried unchanged
        (``hs[t] = hs[t-1]``). None: every step is valid.
    reset : ndarray of bool, shape (T, N, 1), or None
        True where step ``t`` of column ``n`` starts from ``h0`` instead of the previous state;
        no gradient crosses that boundary (it goes to ``d_h0`` instead). None: never.
    record : bool, default False
        Also keep every pre-activation ``a_t`` in the cache (for :func:`recorded`).
    nonlinearity : {"tanh", "relu", "sigmoid"}, default "tanh"
        ``act``; ``"sigmoid"`` is Elman's logistic unit.

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
    T, N, H = xw.shape
    dt = xw.dtype
    if b_hh is not None:  # (T, N, H), bias folded once outside the loop
        xw = np.add(xw, b_hh, out=ws.empty((T, N, H), dt))
    w_t = np.ascontiguousarray(w_hh.T)  # (H, H); a contiguous copy: up to 1.2x faster products than the view
    hnew = ws.empty((T, N, H), dt)  # activation output of every step
    hs = hnew if keep is None else ws.empty((T, N, H), dt)
    hprev = ws.empty((T, N, H), dt)  # the state each step read (after resets)
    pre = ws.empty((T, N, H), dt) if record else None  # pre-activations, kept only when recording
    act = nonlinearity
    h = h0
    for t in range(T):
        if reset is not None:
            h = np.where(reset[t], h0, h)
        a = hnew[t]
        np.matmul(h, w_t, out=a)
        a += xw[t]
        if pre is not None:
            pre[t] = a
        if act == "tanh":
            np.tanh(a, out=a)
        elif act == "relu":
            np.maximum(a, 0.0, out=a)
        else:
            sigmoid_tanh(a, out=a)  # the fast tanh form: absolute accuracy, as the gates
        if keep is not None:
            hs[t] = np.where(keep[t], a, h)
        h = hs[t]
    previous_states(hs, h0, reset, out=hprev)  # hprev[t]: what step t read, in one pass
    cache = (hnew, hprev, w_hh, h0, keep, reset, act, pre)
    return hs, h.copy() if T else h0.copy(), cache



def scan_infer(xw, h0, w_hh, b_hh, keep=None, reset=None, *, nonlinearity="tanh"):
    """:func:`scan_forward` for a run that no backward pass follows: the same ``hs`` and ``final``, no cache.

    The same operations in the same order (so the results are bit-identical), without what only
    the backward and :func:`recorded` read: no copy of the pre-activations' input, no
    ``h_prev`` pass. Unlike :func:`scan_forward`, ``xw`` is the caller's scratch and is
    overwritten (``b_hh`` is added to it in place).

    Parameters
    ----------
    xw : ndarray of shape (T, N, G*H), G = 1
        The input projection ``x_t W_ih^T + b_ih`` of every step; overwritten.
    h0 : ndarray of shape (N, H)
        The initial state.
    w_hh : ndarray of shape (G*H, H)
        ``weight_hh``.
    b_hh : ndarray of shape (G*H,) or None
        ``bias_hh``; None for a layer without bias.
    keep : ndarray of bool, shape (T, N, 1), or None
        As :func:`scan_forward`.
    reset : ndarray of bool, shape (T, N, 1), or None
        As :func:`scan_forward`.
    nonlinearity : {"tanh", "relu", "sigmoid"}, default "tanh"
        ``act``.

    Returns
    -------
    hs : ndarray of shape (T, N, H)
        Every step's state, as :func:`scan_forward`'s.
    final : ndarray of shape (N, H)
        As :func:`scan_forward`'s (a new array).
    """
    T, N, H = xw.shape
    dt = xw.dtype
    if b_hh is not None:
        xw += b_hh  # the same sum as scan_forward's copy, in place
    w_t = np.ascontiguousarray(w_hh.T)
    hs = ws.empty((T, N, H), dt)
    a = hs[0] if T else None
    if keep is not None:
        a = np.empty((N, H), dtype=dt)
    h = h0
    for t in range(T):
        if reset is not None:
            h = np.where(reset[t], h0, h)
        if keep is None:
            a = hs[t]
        np.matmul(h, w_t, out=a)
        a += xw[t]
        if nonlinearity == "tanh":
            np.tanh(a, out=a)
        elif nonlinearity == "relu":
            np.maximum(a, 0.0, out=a)
        else:
            sigmoid_tanh(a, out=a)
        if keep is not None:
            np.copyto(hs[t], np.where(keep[t], a, h))
        h = hs[t]
    return hs, h.copy() if T else h0.copy()

def _derivative(act: str, h: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``act'(a)`` from the activation's output ``h = act(a)`` (into ``out`` when given)."""
    if out is None:
        out = np.empty_like(h)
    if act == "tanh":
        np.multiply(h, h, out=out)
        return np.subtract(1.0, out, out=out)
    if act == "relu":
        return np.greater(h, 0, out=out, casting="unsafe")
    np.subtract(1.0, h, out=out)
    out *= h
    return out


def scan_backward(cache, d_hs, d_final):
    """Exact backpropagation through time through :func:`scan_forward` (the backward kernel).

    Walks the steps in reverse, ``da_t = (dh_t) * act'(a_t)`` and ``dh_{t-1} = da_t W_hh``, with
    the state passed straight through padded steps and cut at reset steps; the weight
    gradients are one matrix multiply after the time loop (kernel contract of
    :mod:`hiddenstate.classic.cells.base`).

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
    d_xw : ndarray of shape (T, N, G*H), G = 1
        Gradient with respect to ``xw`` (also the pre-activation gradient ``da``; the caller
        turns it into the ``weight_ih``, ``bias_ih`` and input gradients).
    d_w_hh : ndarray of shape (G*H, H)
        Gradient with respect to ``w_hh`` (the array that was passed in, e.g. a DropConnect-masked
        one).
    d_b_hh : ndarray of shape (G*H,)
        Gradient with respect to ``b_hh`` (computed even when ``b_hh`` was None).
    d_h0 : ndarray of shape (N, H)
        Gradient with respect to ``h0``, including what reached it through reset steps.
    """
    dhs, dh_last = d_hs, d_final
    hnew, hprev, w_hh, h0, keep, reset, act, _ = cache
    T, N, H = hnew.shape
    B = ws.block_steps(T, N * H * hnew.dtype.itemsize)  # act'(a) one cache-sized block of steps at a time
    dbuf = np.empty((B, N, H), dtype=hnew.dtype)
    da = ws.empty(hnew.shape, hnew.dtype)  # (T, N, H) pre-activation gradients
    carry = np.zeros_like(h0) if dh_last is None else np.array(dh_last, dtype=h0.dtype)
    dh0 = np.zeros_like(h0)
    for t in range(T - 1, -1, -1):
        dh = carry if dhs is None else carry + dhs[t]
        if keep is not None:
            dpass = np.where(keep[t], 0.0, dh)
            dh = np.where(keep[t], dh, 0.0)
        k = t % B
        if t == T - 1 or k == B - 1:
            deriv = _derivative(act, hnew[t - k:t + 1], out=dbuf[:k + 1])
        np.multiply(dh, deriv[k], out=da[t])
        dh_prev = da[t] @ w_hh  # (N, H)
        if keep is not None:
            dh_prev += dpass
        if reset is not None:
            dh0 += np.where(reset[t], dh_prev, 0.0)
            dh_prev = np.where(reset[t], 0.0, dh_prev)
        carry = dh_prev
    dh0 += carry
    dw_hh = da.reshape(-1, H).T @ hprev.reshape(-1, H)  # (H, H)
    db_hh = da.sum(axis=1).sum(axis=0)  # two-level sum: over N, then over T
    return da, dw_hh, db_hh, dh0


def recorded(cache) -> Record:
    """Every step's state and pre-activation from a :func:`scan_forward` cache (no gates).

    Parameters
    ----------
    cache : tuple
        From :func:`scan_forward`.

    Returns
    -------
    Record
        ``h`` (T, N, H), the activation output of each step (before padding is applied);
        ``h_prev`` (T, N, H), the state each step read (after resets); ``gates`` empty;
        ``preacts`` ``{"a": (T, N, H)}`` when the forward ran with ``record=True``, else empty.
        The arrays are the cache's own (views, not copies).
    """
    hnew, hprev, *_, pre = cache
    return Record(h=hnew, h_prev=hprev, gates={}, preacts={} if pre is None else {"a": pre})


def jacobian(rec: Record, w_hh: np.ndarray, *, nonlinearity: str = "tanh") -> np.ndarray:
    """Step Jacobian ``dh_t/dh_{t-1} = diag(act'(a_t)) W_hh`` of the Elman map.

    One factor of the product ``dh_t/dh_k`` of Pascanu, Mikolov & Bengio (2013), Eq. 5.
    ``act'`` is computed from the activation's output ``rec.h``. Padding and resets are not part
    of the step map and are not reflected.

    Parameters
    ----------
    rec : Record
        Arrays of shape (..., H) with any leading axes, e.g. (T, N, H) from :func:`recorded` or
        (N, H) for one step; only ``rec.h`` is read.
    w_hh : ndarray of shape (G*H, H), G = 1
        The recurrent weights the record was computed with.
    nonlinearity : {"tanh", "relu", "sigmoid"}, default "tanh"
        The activation of the layer.

    Returns
    -------
    ndarray of shape (..., H, H)
        ``J[..., i, j] = d h_t[i] / d h_{t-1}[j]``.
    """
    return _derivative(nonlinearity, rec.h)[..., :, None] * w_hh


def bounds(hidden_size: int, *, nonlinearity: str = "tanh") -> list:
    """A box containing every state the Elman map can produce: the range of the activation.

    Parameters
    ----------
    hidden_size : int
        H.
    nonlinearity : {"tanh", "relu", "sigmoid"}, default "tanh"
        The activation of the layer.

    Returns
    -------
    list of (low, high) pairs, length H
        (-1, 1) for tanh, (0, 1) for sigmoid, (0, None) for relu (None: unbounded).
    """
    box = {"tanh": (-1.0, 1.0), "sigmoid": (0.0, 1.0), "relu": (0.0, None)}[nonlinearity]
    return [box] * hidden_size


#: The Elman RNN (tanh, relu or Elman's logistic units), declared once.
KIND = CellKind(name="rnn", blocks=("h",), gates=(), preacts=("a",), sigmoid_gates=(), keep_gate=None,
                has_cell=False, options=("nonlinearity",), scan_forward=scan_forward,
                scan_backward=scan_backward, recorded=recorded, jacobian=jacobian, bounds=bounds)


class RNNCell(Cell):
    """Elman RNN cell ``h' = act(W_ih x + b_ih + W_hh h + b_hh)`` (Elman 1990), torch layout.

    Parameters
    ----------
    input_size : int
        I, features per input vector.
    hidden_size : int
        H, hidden units.
    nonlinearity : {"tanh", "relu", "sigmoid"}, default "tanh"
        ``"sigmoid"`` gives Elman's (1990) logistic units (not available in torch).
    bias : bool, default True
        Whether ``bias_ih`` and ``bias_hh`` (each (H,)) exist.
    dtype : {float64, float32}, default float64
        Dtype of the parameters and of every result.
    rng : numpy.random.Generator, optional
        Draws the initial weights from U(-1/sqrt(H), 1/sqrt(H)) like PyTorch.

    Attributes
    ----------
    params : dict of str to ndarray
        ``weight_ih`` (H, I), ``weight_hh`` (H, H), ``bias_ih`` (H,), ``bias_hh`` (H,) (G = 1).
    kind : CellKind
        :data:`KIND` (a class attribute).

    Raises
    ------
    ValueError
        ``nonlinearity`` is not one of ``"tanh"``, ``"relu"``, ``"sigmoid"``, or a size is not
        positive.
    TypeError
        A size that is not an integer, a non-bool ``bias``, a dtype other than float32/float64,
        an ``rng`` that is not a Generator.

    Notes
    -----
    ``h = cell(x, h)`` with ``x`` (N, I) or (I,), ``h`` (N, H) or (H,) (None: zeros);
    ``h, cache = cell.forward(x, h)``; ``grads, dx, dh = cell.backward(cache, dh_out)``.
    Equivalent to ``torch.nn.RNNCell`` with the same weights.
    """

    kind = KIND

    def __init__(self, input_size, hidden_size, *, nonlinearity="tanh", bias=True, dtype=np.float64, rng=None):
        if not isinstance(nonlinearity, str) or nonlinearity not in NONLINEARITIES:  # an array has no truth value
            raise ValueError(f"nonlinearity must be one of {NONLINEARITIES}; got {nonlinearity!r}.")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias=bias, dtype=dtype, rng=rng)
