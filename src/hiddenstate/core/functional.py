"""Numerically stable activations, softmax and cross-entropy, with their derivatives.

Every function here is elementwise or row-wise NumPy and never overflows. Two logistic sigmoids:

* :func:`sigmoid`, the public one (and so :func:`hiddenstate.classic.textbook.update_gate` and
  :func:`~hiddenstate.classic.textbook.reset_gate`): accurate to a few ulps in *relative* terms over the
  whole range, from ``exp(-|x|)`` (``sigmoid(-50) = 1.93e-22``, not 0);
* :func:`sigmoid_tanh`, the kernels' fast form ``0.5 * tanh(0.5 * x) + 0.5`` (an exact identity,
  one ``tanh``, in place): accurate in *absolute* terms (about 1e-16), which is what a gate that
  multiplies a state needs, but it loses the relative accuracy of tiny values (``sigmoid_tanh(-40)``
  is 0). The scan kernels of :mod:`hiddenstate.classic.cells` use this form, so the layers match torch.

Softmax subtracts the row maximum before exponentiating.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "FloatGuard",
    "cross_entropy",
    "dsigmoid_from_output",
    "dtanh_from_output",
    "gru_blend",
    "log_softmax",
    "previous_states",
    "relu",
    "sigmoid",
    "sigmoid_tanh",
    "softmax",
    "tanh",
]


def sigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Logistic sigmoid ``1 / (1 + exp(-x))``, accurate to a few ulps over the whole range, without overflow.

    With ``e = exp(-|x|)`` (in (0, 1], so it never overflows): ``1 / (1 + e)`` for ``x >= 0`` and
    ``e / (1 + e)`` for ``x < 0``. Every operation is within half an ulp or one ulp, so the
    result has a relative error of at most about 3 ulps for every input, including the tiny
    values of very negative ``x`` (``sigmoid(-50) = 1.9287e-22``; the tanh form
    :func:`sigmoid_tanh` returns 0 there). Results below the smallest normal number
    (``x < -708`` in float64) are subnormal; below the smallest subnormal (``x < -744.44``) they
    are 0 (an error of less than one ulp of the subnormal range).

    Parameters
    ----------
    x : ndarray of any shape, floating dtype
        Pre-activation.
    out : ndarray, optional
        Where to write the result (may be ``x`` itself).

    Returns
    -------
    ndarray, same shape and dtype as ``x``
        Values in [0, 1]; NaN where ``x`` is NaN.
    """
    x = np.asarray(x)
    with np.errstate(under="ignore", invalid="ignore"):  # exp(-|x|) underflows to 0 for |x| > 745: exact enough
        e = np.exp(-np.abs(x))  # (0, 1]
        # x < 0: e / (1 + e), rounded to 0 where the exact value is below the smallest subnormal
        # (less than one ulp of error; NaN compares False and stays NaN through 1 / NaN)
        num = np.where(x < 0, np.where(x < _FLUSH.get(e.dtype, -np.inf), 0, e), 1)
        return np.divide(num, 1 + e, out=out)


#: ln(smallest subnormal) of each dtype: below it the exact sigmoid rounds to 0 rather than to the smallest subnormal
_FLUSH = {np.dtype(t): float(np.log(np.finfo(t).smallest_subnormal)) for t in (np.float64, np.float32)}


def sigmoid_tanh(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The kernels' fast sigmoid ``0.5 * tanh(0.5 * x) + 0.5``: absolute accuracy, in place, one ``tanh``.

    An exact identity, computed with one ``tanh`` and three in-place operations (what the scan
    kernels of :mod:`hiddenstate.classic.cells` use, and what keeps them equal to torch's to 1e-10 and
    better). Its *absolute* error is about one ulp of 1 (1.1e-16 in float64), so a gate in [0, 1]
    that scales a state is exact enough; its *relative* error grows for very negative ``x``
    (``sigmoid_tanh(-20)`` is off in the 9th digit, ``sigmoid_tanh(-40)`` is 0). For tiny
    probabilities use :func:`sigmoid`.

    Parameters
    ----------
    x : ndarray of any shape, floating dtype
        Pre-activation.
    out : ndarray, optional
        Where to write the result (may be ``x`` itself).

    Returns
    -------
    ndarray, same shape and dtype as ``x``
        Values in [0, 1], finite for every finite or infinite input.
    """
    out = np.multiply(x, 0.5, out=out)
    np.tanh(out, out=out)
    out *= 0.5
    out += 0.5
    return out


def tanh(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Hyperbolic tangent (``numpy.tanh``), here for symmetry with :func:`sigmoid`.

    Parameters
    ----------
    x : ndarray of any shape, floating dtype
        Pre-activation.
    out : ndarray, optional
        Where to write the result (may be ``x`` itself).

    Returns
    -------
    ndarray, same shape and dtype as ``x``
        Values in [-1, 1].
    """
    return np.tanh(x, out=out)


def relu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Rectified linear unit ``max(x, 0)``.

    Parameters
    ----------
    x : ndarray of any shape, floating dtype
        Pre-activation.
    out : ndarray, optional
        Where to write the result (may be ``x`` itself).

    Returns
    -------
    ndarray, same shape and dtype as ``x``
        Values in [0, inf).
    """
    return np.maximum(x, 0.0, out=out)


def dsigmoid_from_output(s: np.ndarray) -> np.ndarray:
    """Derivative of the sigmoid expressed through its output: ``s * (1 - s)``.

    Parameters
    ----------
    s : ndarray of any shape, floating dtype
        ``sigmoid(x)``, values in [0, 1].

    Returns
    -------
    ndarray, same shape as ``s``
        ``d sigmoid(x) / dx``, values in [0, 1/4].
    """
    return s * (1.0 - s)


def dtanh_from_output(y: np.ndarray) -> np.ndarray:
    """Derivative of tanh expressed through its output: ``1 - y**2``.

    Parameters
    ----------
    y : ndarray of any shape, floating dtype
        ``tanh(x)``, values in [-1, 1].

    Returns
    -------
    ndarray, same shape as ``y``
        ``d tanh(x) / dx``, values in [0, 1].
    """
    return 1.0 - y * y


def log_softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """Log of the softmax along ``axis``, stable for any finite logits.

    Parameters
    ----------
    logits : ndarray of shape (..., V)
    axis : int, default -1

    Returns
    -------
    ndarray, same shape as ``logits``
        ``logits - logsumexp(logits)``; every entry is <= 0.
    """
    shifted = logits - np.max(logits, axis=axis, keepdims=True)
    with np.errstate(under="ignore"):  # exp of a very negative logit is exactly 0: correct, not an error
        return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax along ``axis`` (max-subtracted, so it never overflows).

    Parameters
    ----------
    logits : ndarray of shape (..., V)
    axis : int, default -1

    Returns
    -------
    ndarray, same shape as ``logits``
        Non-negative, summing to 1 along ``axis``.
    """
    shifted = logits - np.max(logits, axis=axis, keepdims=True)
    with np.errstate(under="ignore"):  # exp of a very negative logit is exactly 0: correct, not an error
        e = np.exp(shifted)
        return e / np.sum(e, axis=axis, keepdims=True)


def cross_entropy(logits: np.ndarray, targets: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean softmax cross-entropy in nats and its gradient with respect to the logits.

    Parameters
    ----------
    logits : ndarray of shape (M, V), floating
        Unnormalised scores for M predictions over V classes.
    targets : ndarray of shape (M,), integer
        Class index of each prediction, in ``[0, V)``.

    Returns
    -------
    loss : float
        ``-mean(log softmax(logits)[m, targets[m]])`` in nats (divide by ln 2 for bits).
    dlogits : ndarray of shape (M, V)
        ``(softmax(logits) - onehot(targets)) / M``.

    Raises
    ------
    ValueError
        If the shapes do not agree or a target is out of range.
    TypeError
        If ``targets`` is not an integer array.
    """
    logits = np.asarray(logits)
    targets = np.asarray(targets)
    if logits.ndim != 2:
        raise ValueError(f"logits must have shape (M, V); got shape {logits.shape}.")
    if targets.shape != (logits.shape[0],):
        raise ValueError(
            f"targets must have shape (M={logits.shape[0]},); got shape {targets.shape}."
        )
    if not np.issubdtype(targets.dtype, np.integer):
        raise TypeError(f"targets must be an integer array; got dtype {targets.dtype}.")
    m, v = logits.shape
    if m and (targets.min() < 0 or targets.max() >= v):
        raise ValueError(
            f"targets must lie in [0, V={v}); got values in [{targets.min()}, {targets.max()}]."
        )
    logp = log_softmax(logits)
    rows = np.arange(m)
    loss = float(-logp[rows, targets].mean()) if m else 0.0
    with np.errstate(under="ignore"):
        dlogits = np.exp(logp)
    dlogits[rows, targets] -= 1.0
    dlogits /= max(m, 1)
    return loss, dlogits


def previous_states(seq: np.ndarray, first: np.ndarray, reset: np.ndarray | None, out: np.ndarray) -> np.ndarray:
    """The state each step of a scan read, from the states it wrote: one pass after the loop.

    ``out[0] = first`` and ``out[t] = seq[t - 1]``, or ``first`` where ``reset[t]`` is True.
    This is what a scan kernel's loop would copy step by step (``h_prev[t] = h``); doing it
    once for all steps saves T small copies (the loop's call overhead at small N).

    Parameters
    ----------
    seq : ndarray of shape (T, N, H)
        The state after every step (padded steps carry the previous state).
    first : ndarray of shape (N, H)
        The initial state.
    reset : ndarray of bool, shape (T, N, 1), or None
        Where a step starts from ``first`` instead of the previous state.
    out : ndarray of shape (T, N, H)
        Where to write (not ``seq`` itself).

    Returns
    -------
    ndarray of shape (T, N, H)
        ``out``.
    """
    if out.shape[0] == 0:
        return out
    out[0] = first
    if reset is None:
        out[1:] = seq[:-1]
    else:
        np.copyto(out[1:], np.where(reset[1:], first, seq[:-1]))
    return out


def gru_blend(z: np.ndarray, h_prev: np.ndarray, n: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``z * h_prev + (1 - z) * n`` without validation, computed as ``n + z * (h_prev - n)``.

    The unchecked kernel behind :func:`hiddenstate.classic.textbook.hidden_state_update` (Cho et al.
    2014, Eq. 7), used inside the GRU time loop.

    Parameters
    ----------
    z : ndarray of shape (N, H) (or any shape)
        Update gate, values in [0, 1].
    h_prev : ndarray, same shape as ``z``
        Previous state ``h_{t-1}``.
    n : ndarray, same shape as ``z``
        Candidate state.
    out : ndarray, optional
        Where to write the result: a new buffer or an alias of any input.

    Returns
    -------
    ndarray, same shape as ``z``
        ``h_t``; ``out`` when given.
    """
    d = h_prev - n
    d *= z
    return np.add(n, d, out=out)


class FloatGuard:
    """``with FloatGuard() as guard:`` NumPy code with underflow ignored and overflow/invalid noted, not raised.

    Gradients and gates may underflow to 0 (exact enough). An overflow or an invalid operation
    (``inf - inf``) is recorded in :attr:`tripped` instead of raising or warning, whatever
    ``numpy.seterr`` says: a saturated result such as ``tanh(inf) = 1`` is the exact limit and
    is returned, while :meth:`check` turns a result that is left non-finite into one clear
    ``ValueError``. In the normal case (nothing tripped) :meth:`check` costs nothing.

    Attributes
    ----------
    tripped : bool
        An overflow or invalid operation happened inside the block.
    """

    def __init__(self):
        self.tripped = False
        self._state = np.errstate(under="ignore", over="call", invalid="call", call=self._note)

    def _note(self, err, flag):
        self.tripped = True

    def __enter__(self) -> FloatGuard:
        """Enter the guarded block."""
        self._state.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        """Leave it (exceptions propagate)."""
        self._state.__exit__(*exc)

    def check(self, what: str, arrays, hint: str, *, always: bool = False) -> None:
        """Raise ValueError if the block overflowed and left a result non-finite.

        Parameters
        ----------
        what : str
            What overflowed, for the message (``"the forward pass"``).
        arrays : iterable of (str, ndarray or None)
            The results by name; None entries are skipped.
        hint : str
            How to fix it, appended to the message.
        always : bool, default False
            Check the results even when nothing tripped: a matrix product (BLAS) overflows to Inf,
            or makes ``0 * Inf = NaN``, without raising NumPy's floating-point flags.

        Raises
        ------
        ValueError
            ``tripped`` (or ``always``) and some result has NaN or Inf.
        """
        if not (self.tripped or always):
            return
        for name, a in arrays:
            if a is not None and not np.isfinite(a).all():
                bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
                after = " after an overflow" if self.tripped else ""
                raise ValueError(f"{what} must stay within the float range; got {bad} NaN or Inf value(s) in {name}"
                                 f"{after}. {hint}")
