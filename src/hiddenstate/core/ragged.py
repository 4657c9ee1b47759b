"""Ragged batches without packing: pad a list of sequences, build masks, gather the last valid step.

The layers take ``lengths`` (N,) directly (see :mod:`hiddenstate.classic.layers`): no sorting, no
``pack_padded_sequence``. This module holds the helpers around that contract:

=============================  =====================================================================
:func:`pad_sequences`          list of (T_n, ...) arrays -> padded (T, N, ...) and lengths (N,)
:func:`mask_from_lengths`      lengths (N,) -> bool mask (T, N), True on valid steps
:func:`lengths_from_mask`      right-padded bool mask (T, N) -> lengths (N,)
:func:`last_valid`             output (T, N, F) -> each row's output at its own last valid step (N, F)
:func:`last_valid_backward`    its adjoint: (N, F) -> (T, N, F), for training a head on it
:func:`reverse_padded`         reverse each row within its length (padding stays in place)
=============================  =====================================================================

Examples
--------
>>> import numpy as np
>>> from hiddenstate import GRU
>>> rng = np.random.default_rng(0)
>>> seqs = [rng.standard_normal((t, 3)) for t in (4, 1, 3)]
>>> x, lengths = pad_sequences(seqs)             # (T=4, N=3, I=3), lengths [4 1 3]
>>> gru = GRU(3, 5, rng=rng)
>>> output, h_n = gru(x, lengths=lengths)       # padding never changes h_n
>>> bool(np.allclose(last_valid(output, lengths), h_n[-1]))
True
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from hiddenstate.core.validation import boolean, float_array, nonnegative_int, shape_str
from hiddenstate.core.validation import lengths as check_lengths

_MAX_STEPS = int(np.iinfo(np.intp).max)  # the largest T an array axis can have

__all__ = [
    "last_valid",
    "last_valid_backward",
    "lengths_from_mask",
    "mask_from_lengths",
    "pad_sequences",
    "reverse_index",
    "reverse_padded",
    "reverse_time",
]


def reverse_index(T: int, lengths) -> np.ndarray:
    """Time index (T, N) that reverses each column within its own length (an involution).

    Parameters
    ----------
    T : int
        Padded length.
    lengths : ndarray of int, shape (N,)
        Valid steps per column, each in [0, T] (already validated).

    Returns
    -------
    ndarray of int64, shape (T, N)
        ``idx[t, n] = lengths[n] - 1 - t`` for ``t < lengths[n]``, else ``t`` (padding stays).
    """
    t = np.arange(T)[:, None]
    lens = np.asarray(lengths)[None, :]
    return np.where(t < lens, lens - 1 - t, t)


def reverse_time(a: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
    """``a`` (T, N, ...) with each column's time reversed by ``idx`` from :func:`reverse_index`.

    Parameters
    ----------
    a : ndarray of shape (T, N, ...)
    idx : ndarray of int, shape (T, N), or None
        None reverses the whole time axis (every column has length T).

    Returns
    -------
    ndarray of shape (T, N, ...), C-contiguous (a new array)
    """
    if idx is None:
        return np.ascontiguousarray(a[::-1])
    return a[idx, np.arange(a.shape[1])[None, :]]


def reverse_padded(x, lengths) -> np.ndarray:
    """Reverse each sequence of a padded batch within its own length; padding stays in place.

    Parameters
    ----------
    x : ndarray of shape (T, N, ...)
        Time-major padded batch.
    lengths : array_like of int, shape (N,)
        Valid steps per column, each in [0, T].

    Returns
    -------
    ndarray of shape (T, N, ...)
        ``out[t, n] = x[lengths[n] - 1 - t, n]`` for ``t < lengths[n]``, else ``x[t, n]``.
        Applying it twice gives back ``x``.

    Raises
    ------
    ValueError, TypeError
        ``x`` with fewer than two axes; ``lengths`` of the wrong shape, type or range.
    """
    x = _array("x", x)
    if x.ndim < 2:
        raise ValueError(f"x must have shape (T, N, ...); got {shape_str(x.shape)}.")
    lengths = check_lengths(lengths, x.shape[0], x.shape[1])
    return reverse_time(x, reverse_index(x.shape[0], lengths))


def _array(name: str, value) -> np.ndarray:
    """``np.asarray(value)``, or a TypeError naming the argument for ragged nested lists and the like."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError):
        raise TypeError(f"{name} must be an array (or nested lists of one shape); got {type(value).__name__} that "
                        f"NumPy cannot turn into one.") from None


def _fits(value, dtype) -> bool:
    """``value`` is an integer that ``dtype`` (bool or integer) holds exactly."""
    if not math.isfinite(value) or not float(value).is_integer():
        return False
    info = (0, 1) if dtype.kind == "b" else (np.iinfo(dtype).min, np.iinfo(dtype).max)
    return info[0] <= int(value) <= info[1]


def _time_major(name: str, a, batch_first: bool, min_ndim: int = 2) -> np.ndarray:
    a = _array(name, a)
    if a.ndim < min_ndim:
        legend = "(N, T, ...)" if batch_first else "(T, N, ...)"
        raise ValueError(f"{name} must have shape {legend}; got {shape_str(a.shape)}.")
    return np.swapaxes(a, 0, 1) if batch_first else a


def pad_sequences(sequences, *, batch_first=False, padding_value=0.0):
    """Stack sequences of different lengths into one padded batch (cf. ``torch.nn.utils.rnn.pad_sequence``).

    Parameters
    ----------
    sequences : sequence of array_like, each of shape (T_n, ...)
        N >= 1 sequences; every one has the same trailing shape (e.g. (I,) for features, () for
        token ids). T_n may be 0. Any real or bool dtype; the result has their common dtype.
    batch_first : bool, default False
        Return (N, T, ...) instead of (T, N, ...).
    padding_value : scalar, default 0.0
        Written into every step past a sequence's end. Must be representable in the result
        dtype (no 0.5 into an integer batch).

    Returns
    -------
    padded : ndarray of shape (T, N, ...) ((N, T, ...) if ``batch_first``)
        T = max T_n. ``padded[:T_n, n] == sequences[n]``.
    lengths : ndarray of int64, shape (N,)
        T_n, in the input order (no sorting). Pass it as ``lengths=`` to a layer.

    Raises
    ------
    ValueError
        No sequences, a sequence that is a scalar, trailing shapes that differ, a padding value
        the dtype cannot hold.
    TypeError
        ``sequences`` is a single array or not a sequence; a non-numeric element.
    """
    batch_first = boolean("batch_first", batch_first)
    if isinstance(sequences, np.ndarray) or not isinstance(sequences, (list, tuple)):
        raise TypeError(f"sequences must be a list or tuple of arrays of shape (T_n, ...); got "
                        f"{type(sequences).__name__}. Wrap a single array as [x].")
    if len(sequences) == 0:
        raise ValueError("sequences must hold at least one array; got an empty list.")
    arrays = []
    for n, s in enumerate(sequences):
        a = np.asarray(s)
        if a.dtype == object or a.dtype.kind not in "biuf":
            raise TypeError(f"sequences[{n}] must be a real or bool array; got dtype {a.dtype}.")
        if a.ndim == 0:
            raise ValueError(f"sequences[{n}] must have shape (T_n, ...); got a scalar. Use shape (T_n,) for a "
                             f"sequence of scalars.")
        if arrays and a.shape[1:] != arrays[0].shape[1:]:
            raise ValueError(f"sequences[{n}] must have trailing shape {shape_str(arrays[0].shape[1:])} like "
                             f"sequences[0]; got shape {shape_str(a.shape)}.")
        arrays.append(a)
    dtype = np.result_type(*arrays)
    if not isinstance(padding_value, (numbers.Real, np.bool_)) or isinstance(padding_value, np.ndarray):
        raise TypeError(f"padding_value must be a real scalar; got {type(padding_value).__name__}.")
    if dtype.kind in "biu" and not _fits(padding_value, dtype):
        raise ValueError(f"padding_value must be representable in the batch dtype {dtype}; got {padding_value!r}. "
                         f"Convert the sequences to a float dtype first.")
    lengths = np.array([a.shape[0] for a in arrays], dtype=np.int64)
    T, N = int(lengths.max()), len(arrays)
    padded = np.full((T, N) + arrays[0].shape[1:], padding_value, dtype=dtype)  # (T, N, ...)
    for n, a in enumerate(arrays):
        padded[: a.shape[0], n] = a
    if batch_first:
        padded = np.ascontiguousarray(np.swapaxes(padded, 0, 1))
    return padded, lengths


def mask_from_lengths(lengths, T=None, *, batch_first=False) -> np.ndarray:
    """Bool mask of the valid steps: ``mask[t, n] = t < lengths[n]``.

    Parameters
    ----------
    lengths : array_like of int, shape (N,)
    T : int, optional
        Number of time steps (default ``max(lengths)``); every length must be <= T.
    batch_first : bool, default False
        Return (N, T) instead of (T, N).

    Returns
    -------
    ndarray of bool, shape (T, N) ((N, T) if ``batch_first``)
    """
    batch_first = boolean("batch_first", batch_first)
    arr = _array("lengths", lengths)
    if arr.ndim != 1:
        raise ValueError(f"lengths must have shape (N,); got {shape_str(arr.shape)}.")
    if T is None:
        T = int(arr.max(initial=0)) if arr.dtype.kind in "iu" else 0
    if isinstance(T, (bool, np.bool_)) or not isinstance(T, (numbers.Integral, np.integer)) or T < 0:
        raise ValueError(f"T must be a non-negative integer; got {T!r}.")
    if T > _MAX_STEPS:
        raise ValueError(f"T must be a non-negative integer that can index an array; got {T}.")
    lens = check_lengths(arr, int(T), arr.shape[0])
    mask = np.arange(T)[:, None] < lens[None, :]  # (T, N)
    return np.ascontiguousarray(mask.T) if batch_first else mask


def lengths_from_mask(mask, *, batch_first=False) -> np.ndarray:
    """Lengths of a right-padded bool mask (True on valid steps, all of them before any False).

    Parameters
    ----------
    mask : ndarray of bool, shape (T, N) ((N, T) if ``batch_first``)
        E.g. Keras's ``mask`` (which is (N, T): pass ``batch_first=True``).
    batch_first : bool, default False
        ``mask`` is (N, T) instead of (T, N).

    Returns
    -------
    ndarray of int64, shape (N,)

    Raises
    ------
    TypeError
        ``mask`` is not bool.
    ValueError
        ``mask`` is not 2-D, or a row has a valid step after a padded one (left padding or
        holes cannot be expressed as lengths; use ``reset`` or right-pad the data).
    """
    batch_first = boolean("batch_first", batch_first)
    m = _array("mask", mask)
    if m.dtype != bool:
        raise TypeError(f"mask must be a bool array; got dtype {m.dtype}. Use mask.astype(bool) or x != pad.")
    if m.ndim != 2:
        legend = "(N, T)" if batch_first else "(T, N)"
        raise ValueError(f"mask must have shape {legend}; got {shape_str(m.shape)}.")
    m = m.T if batch_first else m  # (T, N)
    lengths = m.sum(axis=0).astype(np.int64)
    ok = (m == (np.arange(m.shape[0])[:, None] < lengths[None, :])).all(axis=0)
    if not ok.all():
        n = int(np.flatnonzero(~ok)[0])
        raise ValueError(f"mask must be right-padded (every True before every False in a row); got row {n} = "
                         f"{m[:, n].astype(int).tolist()}. Right-pad the sequences, or split them with reset=.")
    return lengths


def last_valid(output, lengths, *, batch_first=False) -> np.ndarray:
    """Each row's output at its own last valid step, ``output[lengths[n] - 1, n]``.

    For a unidirectional layer this equals the last layer's ``h_n`` on rows with
    ``lengths[n] > 0``. For a bidirectional layer the backward half at the last valid step has
    read one step only; use ``layer.split_directions(h_n)`` for a summary of both directions.

    Parameters
    ----------
    output : ndarray of shape (T, N, ...) ((N, T, ...) if ``batch_first``)
    lengths : array_like of int, shape (N,)
        Each in [0, T].
    batch_first : bool, default False

    Returns
    -------
    ndarray of shape (N, ...)
        A row with ``lengths[n] == 0`` has no valid step: its entry is **zeros** (like the
        layers' outputs past a row's length), not an error, so batches with empty rows flow
        through a head and a masked loss. Its state is in ``h_n`` (which keeps ``h0``).

    Raises
    ------
    ValueError
        ``output`` has fewer than two axes; lengths of the wrong shape or out of [0, T].
    TypeError
        Non-integer lengths.
    """
    batch_first = boolean("batch_first", batch_first)
    out = _time_major("output", output, batch_first)  # (T, N, ...)
    T, N = out.shape[:2]
    lens = check_lengths(lengths, T, N)
    if T == 0:
        return np.zeros((N,) + out.shape[2:], dtype=out.dtype)
    cols = np.arange(N)
    last = out[np.maximum(lens - 1, 0), cols]  # (N, ...); fancy indexing copies
    last[lens == 0] = 0
    return last


def last_valid_backward(d_last, lengths, T, *, batch_first=False) -> np.ndarray:
    """The adjoint of :func:`last_valid`: scatter ``d_last`` (N, ...) to each row's last valid step.

    Parameters
    ----------
    d_last : ndarray of shape (N, ...)
        Gradient of the loss with respect to ``last_valid(output, lengths)``.
    lengths : array_like of int, shape (N,)
    T : int
        Number of time steps of ``output``.
    batch_first : bool, default False
        Return (N, T, ...) instead of (T, N, ...).

    Returns
    -------
    ndarray of shape (T, N, ...) ((N, T, ...) if ``batch_first``)
        Zero except ``[lengths[n] - 1, n]``; rows of length 0 get no gradient. Pass it as
        ``d_output`` to ``layer.backward``.

    Raises
    ------
    TypeError
        ``d_last`` not real numbers, ``T`` not an integer, lengths not integers, a non-bool
        ``batch_first``.
    ValueError
        ``d_last`` a scalar or with NaN/Inf, a negative ``T``, lengths of the wrong shape or range.
    """
    batch_first = boolean("batch_first", batch_first)
    d = float_array("d_last", d_last)  # integers promoted, bool/complex refused (TypeError), NaN/Inf refused
    if d.ndim < 1:
        raise ValueError(f"d_last must be a float array of shape (N, ...); got {shape_str(d.shape)} {d.dtype}.")
    T = nonnegative_int("T", T)
    if T > _MAX_STEPS:
        raise ValueError(f"T must be a non-negative integer that can index an array; got {T}.")
    N = d.shape[0]
    lens = check_lengths(lengths, int(T), N)
    out = np.zeros((int(T),) + d.shape, dtype=d.dtype)  # (T, N, ...)
    rows = np.flatnonzero(lens > 0)
    out[lens[rows] - 1, rows] = d[rows]
    return np.ascontiguousarray(np.swapaxes(out, 0, 1)) if batch_first else out
