"""Argument checks used once at the public boundary (the inner loops trust their inputs)."""

from __future__ import annotations

import numbers

import numpy as np


def positive_int(name: str, value) -> int:
    """Return ``value`` as an int if it is a positive Python/NumPy integer (not bool)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(
            f"{name} must be a positive integer; got {type(value).__name__} {value!r}."
        )
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer; got {value}.")
    return int(value)


def nonnegative_int(name: str, value) -> int:
    """Return ``value`` as an int if it is a non-negative integer (not bool)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(
            f"{name} must be a non-negative integer; got {type(value).__name__} {value!r}."
        )
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer; got {value}.")
    return int(value)


def drop_probability(name: str, value) -> float:
    """Return ``value`` as a float if it is a number in [0, 1) (a dropout rate; not bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a number in [0, 1); got {value!r}.")
    return float(value)


def float_dtype(name: str, dtype) -> np.dtype:
    """Return ``dtype`` as float32 or float64, else raise TypeError."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{name} must be float32 or float64; got {dtype!r}.") from None
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"{name} must be float32 or float64; got {dt}.")
    return dt


def float_array(name: str, value, *, dtype=None, finite: bool = True) -> np.ndarray:
    """Convert ``value`` to a floating array, rejecting bool/int/complex/object data and NaN/Inf.

    Parameters
    ----------
    name : str
        Argument name used in messages.
    value : array_like
    dtype : dtype, optional
        If given, the result is cast to it (float32 or float64). Otherwise float32 stays
        float32 and every other floating type becomes float64.
    finite : bool, default True
        Reject NaN and Inf.
    """
    if isinstance(value, np.ndarray):
        arr = value
    else:
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError) as exc:
            raise TypeError(f"{name} must be a floating-point array; got {type(value).__name__} ({exc}).") from None
    if arr.dtype == object or arr.dtype.kind not in "f":
        kind = "bool" if arr.dtype.kind == "b" else str(arr.dtype)
        if arr.dtype.kind in "iu" and not isinstance(value, np.ndarray):
            # Python lists of ints are a common way to type small examples; accept them.
            arr = arr.astype(np.float64)
        else:
            raise TypeError(
                f"{name} must be a floating-point array (float32 or float64); got dtype {kind}. "
                f"Convert it with {name}.astype(np.float64)."
            )
    if dtype is not None:
        arr = arr.astype(dtype, copy=False)
    elif arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)
    if finite and arr.size and not np.isfinite(arr).all():
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(f"{name} must be finite; got {bad} NaN or Inf value(s).")
    return arr


def shape_str(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + (",)" if len(shape) == 1 else ")")


def expect_shape(name: str, arr: np.ndarray, expected: tuple, legend: str, hint: str = "") -> None:
    """Raise ValueError unless ``arr.shape == expected``; ``legend`` spells the symbols."""
    if arr.shape != tuple(expected):
        msg = f"{name} must have shape {legend}; got {shape_str(arr.shape)}."
        if hint:
            msg += " " + hint
        raise ValueError(msg)
