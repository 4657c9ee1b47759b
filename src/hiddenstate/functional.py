"""Numerically stable activations, softmax and cross-entropy, with their derivatives.

Every function here is elementwise or row-wise NumPy and never overflows: the logistic
sigmoid is computed as ``0.5 * tanh(0.5 * x) + 0.5`` (exact identity, no ``exp`` of a large
argument), softmax subtracts the row maximum before exponentiating.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "cross_entropy",
    "dsigmoid_from_output",
    "dtanh_from_output",
    "gru_blend",
    "log_softmax",
    "relu",
    "sigmoid",
    "softmax",
    "tanh",
]


def sigmoid(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Logistic sigmoid ``1 / (1 + exp(-x))``, computed without overflow.

    Parameters
    ----------
    x : ndarray of any shape, floating dtype
        Pre-activation.
    out : ndarray, optional
        Where to write the result (may be ``x`` itself).

    Returns
    -------
    ndarray, same shape and dtype as ``x``
        Values in [0, 1]. Uses the identity ``sigmoid(x) = (1 + tanh(x / 2)) / 2``, which is
        finite for every finite or infinite input.
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


def gru_blend(z: np.ndarray, h_prev: np.ndarray, n: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``z * h_prev + (1 - z) * n`` without validation, computed as ``n + z * (h_prev - n)``.

    The unchecked kernel behind :func:`hiddenstate.textbook.hidden_state_update` (Cho et al.
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
