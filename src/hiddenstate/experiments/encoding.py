"""One-hot codes for the integer token streams of the synthetic tasks."""

from __future__ import annotations

import numpy as np

from hiddenstate.core.validation import positive_int

__all__ = ["one_hot"]


def one_hot(ids: np.ndarray, size: int, *, dtype=np.float64) -> np.ndarray:
    """One-hot encode integer ids.

    Parameters
    ----------
    ids : ndarray of int, any shape S
        Values in ``[0, size)``.
    size : int
        Length of each one-hot vector.
    dtype : dtype, default float64
        Of the result.

    Returns
    -------
    ndarray of shape S + (size,), dtype ``dtype``
        1 at the position of each id, 0 elsewhere.

    Raises
    ------
    TypeError
        If ``ids`` is not an integer array or ``size`` not an integer.
    ValueError
        If an id lies outside ``[0, size)`` or ``size`` is not positive.

    Examples
    --------
    >>> one_hot(np.array([2, 0]), 3)
    array([[0., 0., 1.],
           [1., 0., 0.]])
    """
    ids = np.asarray(ids)
    size = positive_int("size", size)
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"ids must be an integer array; got dtype {ids.dtype}. "
                        "Pass token ids, e.g. ids.astype(np.int64).")
    if ids.size and (ids.min() < 0 or ids.max() >= size):
        raise ValueError(
            f"ids must lie in [0, size={size}); got values in [{ids.min()}, {ids.max()}]."
        )
    out = np.zeros(ids.shape + (size,), dtype=dtype)
    np.put_along_axis(out, ids[..., None], 1.0, axis=-1)
    return out
