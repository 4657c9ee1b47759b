"""Every argument check of the package, each rule stated once (the inner loops trust their inputs).

The public functions, layers, cells, training configuration and the CLI's argument types all call
these: a rule such as "a drop probability lies in [0, 1)" lives here and nowhere else. Each
raises ``TypeError`` for a value of the wrong type and ``ValueError`` for a wrong value, with the
message ``"<name> must <rule>; got <value>."`` (the CLI passes the flag as ``name``).

One dtype rule for every array argument of the API (:func:`float_array`): floating arrays are
used as they are (float32 stays float32, other floating types become float64, or the dtype the
callee asks for); integer arrays, and nested lists of Python ints, are promoted to float64 as
NumPy's ufuncs promote them; bool, complex, object, string and other arrays are refused with a
``TypeError`` (a bool mask or a complex value passed as data is a mistake, not a number).
Booleans are ``bool`` (or ``numpy.bool_``) only (:func:`boolean`): ``"False"``, ``0`` and ``None``
are refused, never read as truthy or falsy.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from hiddenstate.core.nesting import where_ragged

__all__ = [
    "bool_mask",
    "boolean",
    "choice",
    "drop_probability",
    "expect_shape",
    "float_array",
    "float_dtype",
    "generator",
    "index",
    "lengths",
    "nonnegative_int",
    "positive_int",
    "real",
    "shape_str",
    "state_array",
]


def positive_int(name: str, value) -> int:
    """Return ``value`` as an int if it is a positive Python/NumPy integer (not bool).

    Parameters
    ----------
    name : str
        Argument name used in messages.
    value : int or numpy.integer
        The value to check.

    Returns
    -------
    int
        ``value`` as a Python int, >= 1.

    Raises
    ------
    TypeError
        Not an integer (bool and float are refused).
    ValueError
        Zero or negative.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(
            f"{name} must be a positive integer; got {type(value).__name__} {value!r}."
        )
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer; got {value}.")
    return int(value)


def nonnegative_int(name: str, value) -> int:
    """Return ``value`` as an int if it is a non-negative integer (not bool).

    Parameters
    ----------
    name : str
        Argument name used in messages.
    value : int or numpy.integer
        The value to check.

    Returns
    -------
    int
        ``value`` as a Python int, >= 0.

    Raises
    ------
    TypeError
        Not an integer (bool and float are refused).
    ValueError
        Negative.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(
            f"{name} must be a non-negative integer; got {type(value).__name__} {value!r}."
        )
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer; got {value}.")
    return int(value)


def boolean(name: str, value) -> bool:
    """Return ``value`` as a bool if it is a Python or NumPy bool (strings and ints are refused).

    Parameters
    ----------
    name : str
        Argument name used in messages.
    value : bool or numpy.bool_
        The value to check.

    Returns
    -------
    bool
        ``value`` as a Python bool.

    Raises
    ------
    TypeError
        For anything that is not a bool, e.g. ``"False"`` or ``0``.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool; got {type(value).__name__} {value!r}.")
    return bool(value)


def generator(rng, *, name: str = "rng", required: bool = False) -> np.random.Generator:
    """Return ``rng`` if it is a :class:`numpy.random.Generator`; None gives a fresh unseeded one.

    Parameters
    ----------
    rng : numpy.random.Generator or None
        The value to check.
    name : str, default "rng"
        Argument name used in messages.
    required : bool, default False
        Refuse None (for results that must be reproducible, e.g. a task's data).

    Returns
    -------
    numpy.random.Generator
        ``rng`` itself, or a new ``numpy.random.default_rng()`` for None.

    Raises
    ------
    TypeError
        For anything else (the global ``np.random`` module, a seed, a ``RandomState``).
    """
    if rng is None and not required:
        return np.random.default_rng()
    if not isinstance(rng, np.random.Generator):
        allowed = "a numpy.random.Generator" + ("" if required else " or None")
        raise TypeError(f"{name} must be {allowed}; got {type(rng).__name__}. "
                        f"Pass {name}=np.random.default_rng(seed).")
    return rng


def real(name: str, value, *, low: float | None = None, high: float | None = None,
         low_open: bool = False, high_open: bool = False) -> float:
    """Return ``value`` as a float if it is a finite real number in the given range (not bool).

    Parameters
    ----------
    name : str
    value : int or float
    low, high : float, optional
        Bounds of the range; None leaves that side unbounded (finite all the same).
    low_open, high_open : bool, default False
        Exclude the bound itself.

    Returns
    -------
    float
        ``value`` as a Python float.

    Raises
    ------
    TypeError
        Not a real number (bool, str, array ...).
    ValueError
        NaN, infinite, or outside the range; the message states the range.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a number; got {type(value).__name__} {value!r}.")
    v = float(value)
    rule = "a finite number"
    if low is not None and high is not None:
        rule = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    elif low is not None:
        rule = f"a finite number {'>' if low_open else '>='} {low:g}"
    elif high is not None:
        rule = f"a finite number {'<' if high_open else '<='} {high:g}"
    ok = math.isfinite(v)
    ok = ok and (low is None or (v > low if low_open else v >= low))
    ok = ok and (high is None or (v < high if high_open else v <= high))
    if not ok:
        raise ValueError(f"{name} must be {rule}; got {value!r}.")
    return v


def drop_probability(name: str, value) -> float:
    """Return ``value`` as a float if it is a number in [0, 1) (a dropout rate; not bool).

    The one rule for every dropout-like rate of the package (``dropout``, ``weight_drop``, the
    CLI's ``--dropout`` and ``--weight-drop``): 1 would drop everything.

    Parameters
    ----------
    name : str
        Argument name used in messages.
    value : int or float
        The rate to check.

    Returns
    -------
    float
        ``value`` as a Python float in [0, 1).

    Raises
    ------
    TypeError
        Not a number (bool, str, ...).
    ValueError
        Outside [0, 1), or NaN.
    """
    return real(name, value, low=0.0, high=1.0, high_open=True)


def float_dtype(name: str, dtype) -> np.dtype:
    """Return ``dtype`` as float32 or float64, else raise TypeError.

    Parameters
    ----------
    name : str
        Argument name used in messages.
    dtype : dtype-like
        Anything ``numpy.dtype`` accepts (``np.float32``, ``"float64"``, ...).

    Returns
    -------
    numpy.dtype
        ``dtype('float32')`` or ``dtype('float64')``.

    Raises
    ------
    TypeError
        Not a dtype, or another dtype than float32/float64.
    """
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{name} must be float32 or float64; got {dtype!r}.") from None
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"{name} must be float32 or float64; got {dt}.")
    return dt


def float_array(name: str, value, *, dtype=None, finite: bool = True) -> np.ndarray:
    """Convert ``value`` to a floating array by the package's one dtype rule (module docstring).

    Parameters
    ----------
    name : str
        Argument name used in messages.
    value : array_like
        Floating or integer data (an ndarray, a NumPy scalar, nested lists of numbers).
    dtype : dtype, optional
        If given, the result is cast to it (float32 or float64). Otherwise float32 stays
        float32 and every other floating type, and every integer type, becomes float64.
    finite : bool, default True
        Reject NaN and Inf.

    Returns
    -------
    ndarray
        float32 or float64; ``value`` itself when no conversion was needed.

    Raises
    ------
    TypeError
        bool, complex, object, string or other non-numeric data, or ragged nested lists.
    ValueError
        NaN or Inf when ``finite``.
    """
    if isinstance(value, np.ndarray):
        arr = value
    elif isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a floating-point array; got {type(value).__name__} {value[:40]!r}.")
    else:
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError):  # ragged nested lists: say where
            why = where_ragged(value, name)
            raise TypeError(f"{name} must be a floating-point array; got {type(value).__name__} ({why}).") from None
    kind = arr.dtype.kind
    if kind in "iu":  # integers: promoted to float64 (or the requested dtype), as NumPy's ufuncs do
        arr = arr.astype(np.float64 if dtype is None else dtype)
    elif kind != "f":
        shown = "bool" if kind == "b" else str(arr.dtype)
        raise TypeError(
            f"{name} must be a floating-point array (float32 or float64; integers are promoted to float64); "
            f"got dtype {shown}. Convert it with {name}.astype(np.float64) if the values are numbers."
        )
    source = arr
    with np.errstate(over="ignore"):  # a value beyond the target's range becomes Inf: reported below
        if dtype is not None:
            arr = arr.astype(dtype, copy=False)
        elif arr.dtype not in (np.float32, np.float64):
            arr = arr.astype(np.float64)
    if finite and arr.size and not np.isfinite(arr).all():
        if arr is not source and np.isfinite(source).all():
            bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
            raise ValueError(f"{name} must fit in {arr.dtype}; got {bad} value(s) beyond its range "
                             f"(|x| > {np.finfo(arr.dtype).max:.3g}). Scale the values down.")
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(f"{name} must be finite; got {bad} NaN or Inf value(s).")
    return arr


def index(name: str, value, size: int, *, what: str = "entries") -> int:
    """Return ``value`` as an index in ``0 .. size-1``; negative values count from the end, like Python's.

    Parameters
    ----------
    name : str
    value : int or numpy.integer
        In ``[-size, size)``; bool and float are refused (``2.9`` is not an index).
    size : int
        Number of items indexed.
    what : str, default "entries"
        What is indexed, for the message (``"layers"``).

    Returns
    -------
    int
        In ``[0, size)``. TypeError for a non-integer; ValueError outside ``[-size, size)``
        (an index never wraps around).
    """
    rule = f"an integer in [-{size}, {size}) ({size} {what}; negative counts from the end)"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be {rule}; got {type(value).__name__} {value!r}.")
    if not -size <= value < size:
        raise ValueError(f"{name} must be {rule}; got {value}.")
    return int(value) % size


def shape_str(shape) -> str:
    """``(3, 4)``, ``(3,)`` or ``()``: a shape as Python prints a tuple, for messages.

    Parameters
    ----------
    shape : sequence of int
        E.g. ``arr.shape``.

    Returns
    -------
    str
        The shape in Python's tuple notation.
    """
    return "(" + ", ".join(str(s) for s in shape) + (",)" if len(shape) == 1 else ")")


def expect_shape(name: str, arr: np.ndarray, expected: tuple, legend: str, hint: str = "") -> None:
    """Raise ValueError unless ``arr.shape == expected``; ``legend`` spells the symbols.

    Parameters
    ----------
    name : str
        Argument name used in messages.
    arr : ndarray
        The array to check.
    expected : tuple of int
        The required shape.
    legend : str
        The required shape spelled with symbols, e.g. ``"(N=4, H=8)"``.
    hint : str, optional
        How to fix it, appended to the message.

    Raises
    ------
    ValueError
        ``arr.shape != expected``.
    """
    if arr.shape != tuple(expected):
        msg = f"{name} must have shape {legend}; got {shape_str(arr.shape)}."
        if hint:
            msg += " " + hint
        raise ValueError(msg)


def state_array(name: str, value, batch: int | None, hidden: int, dtype, lead: tuple = (), legend: str = "") -> np.ndarray:
    """Validate a hidden state of shape ``lead + (N, H)`` (or ``lead + (H,)``); never broadcast.

    Parameters
    ----------
    name : str
    value : array_like
    batch : int or None
        N, or None for an unbatched state.
    hidden : int
        H.
    dtype : dtype
        The result's dtype.
    lead : tuple of int, default ()
        Leading axes, e.g. ``(L*D,)`` for a layer's ``h0``.
    legend : str, optional
        The expected shape spelled with symbols, for the message.

    Returns
    -------
    ndarray
        C-contiguous, of ``dtype``.

    Raises
    ------
    ValueError
        Any other shape: a state with fewer axes would broadcast silently across the batch.
    """
    arr = float_array(name, value, dtype=dtype)
    want = lead + ((batch,) if batch is not None else ()) + (hidden,)
    if arr.shape != want:
        hint = ""
        if arr.ndim < len(want):
            hint = " A state with fewer dimensions would broadcast silently across the batch; give every row its own state."
        raise ValueError(f"{name} must have shape {legend or shape_str(want)}; got {shape_str(arr.shape)}.{hint}")
    return np.ascontiguousarray(arr)


def lengths(value, T: int, N: int, *, name: str = "lengths") -> np.ndarray:
    """Validate the valid steps of each column of a padded batch.

    Parameters
    ----------
    value : array_like of int, shape (N,)
    T, N : int
        Time steps and batch size of the padded batch.
    name : str, default "lengths"

    Returns
    -------
    ndarray of int64, shape (N,)

    Raises
    ------
    TypeError
        Not an integer array (bool refused).
    ValueError
        Wrong shape, or a value outside [0, T].
    """
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):  # ragged nested lists
        raise TypeError(f"{name} must be an integer array of shape (N={N},); got {type(value).__name__} that is not "
                        f"an array.") from None
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be an integer array of shape (N={N},); got dtype {arr.dtype}.")
    if arr.shape != (N,):
        raise ValueError(f"{name} must have shape (N={N},); got {shape_str(arr.shape)}.")
    if N and (arr.min() < 0 or arr.max() > T):
        raise ValueError(f"{name} must lie in [0, T={T}]; got values in [{arr.min()}, {arr.max()}].")
    return arr.astype(np.int64)


def bool_mask(name: str, mask, shape: tuple) -> np.ndarray:
    """``mask`` as a bool array of exactly ``shape``; masks of other dtypes are refused, not cast.

    Parameters
    ----------
    name : str
    mask : array_like of bool
        True for the samples to use.
    shape : tuple of int
        The required shape.

    Returns
    -------
    ndarray of bool
        TypeError for another dtype (an int or float mask would be read as "nonzero"),
        ValueError for another shape.
    """
    try:
        m = np.asarray(mask)
    except (ValueError, TypeError):  # ragged nested lists
        m = np.asarray(None)
    if m.dtype != bool:
        raise TypeError(f"{name} must be a bool array of shape {shape_str(shape)}; got dtype {m.dtype}. Use "
                        f"{name} != 0 or {name}.astype(bool) if that is what you mean.")
    if m.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {shape_str(shape)}; got {shape_str(m.shape)}.")
    return m


def choice(name: str, value, options) -> str:
    """Return ``value`` if it is one of ``options`` (strings, e.g. a cell kind or a dtype name).

    Parameters
    ----------
    name : str
    value : str
    options : sequence of str
        The allowed values, in the order the message lists them.

    Returns
    -------
    str
        ``value``.

    Raises
    ------
    ValueError
        For any other value (including one of another type); the message lists the options.
    """
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {', '.join(options)}; got {value!r}.")
    return value
