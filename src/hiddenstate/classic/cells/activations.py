"""Elementwise activations of the modern recurrent blocks, each with its derivative, in a few whole-array passes.

:func:`logistic` is ``1 / (1 + exp(-x))`` written in place: ``exp(-x)`` may overflow to inf where
the exact sigmoid rounds to 0, which is then the exact result (the overflow is not an error).
Its relative error is a few ulps wherever the result is a normal number; the careful
branch-free :func:`hiddenstate.core.functional.sigmoid` also rounds the subnormal range exactly but
costs several passes more, which matters on the gates of every step of a long sequence.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["gelu_tanh", "logistic", "silu"]

_S2PI = math.sqrt(2.0 / math.pi)


def logistic(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The logistic sigmoid ``1 / (1 + exp(-x))``.

    Parameters
    ----------
    x : ndarray, floating
        Pre-activations.
    out : ndarray, optional
        Where to write the result (may be ``x`` itself).

    Returns
    -------
    ndarray, shape and dtype of ``x``
        Values in [0, 1].
    """
    with np.errstate(over="ignore"):
        y = np.negative(x, out=out)
        np.exp(y, out=y)
    y += 1.0
    return np.reciprocal(y, out=y)


def silu(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``silu(x) = x sigmoid(x)`` (Elfwing et al. 2018) and its derivative ``s (1 + x (1 - s))``.

    Parameters
    ----------
    x : ndarray, floating

    Returns
    -------
    value, derivative : ndarray, shape and dtype of ``x``
    """
    s = logistic(x)
    value = x * s
    deriv = 1.0 - s
    deriv *= x
    deriv += 1.0
    deriv *= s
    return value, deriv


def gelu_tanh(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GELU in its tanh approximation and its derivative (Hendrycks & Gimpel 2016; torch ``approximate="tanh"``).

    Parameters
    ----------
    x : ndarray, floating

    Returns
    -------
    value, derivative : ndarray, shape and dtype of ``x``
        ``x (1 + tanh(s (x + 0.044715 x^3))) / 2`` with ``s = sqrt(2/pi)``, and its derivative.
    """
    x2 = x * x
    th = np.tanh(_S2PI * x * (1.0 + 0.044715 * x2))
    value = 0.5 * x * (1.0 + th)
    deriv = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * _S2PI * (1.0 + 3 * 0.044715 * x2)
    return value, deriv
