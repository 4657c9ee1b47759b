"""Why nested lists are not an array, said in the user's terms (the index where rows differ)."""

from __future__ import annotations

import numpy as np

__all__ = ["as_array", "where_ragged"]


def as_array(name: str, value) -> np.ndarray:
    """``numpy.asarray(value)``, refusing ragged nested lists by name instead of NumPy's "inhomogeneous shape".

    Parameters
    ----------
    name : str
        The argument's name for the message (``"state_dict['weight_ih_l0']"``).
    value : array_like
        Anything ``numpy.asarray`` takes.

    Returns
    -------
    ndarray
        ``value`` itself if it is already an ndarray.

    Raises
    ------
    TypeError
        ``value`` is nested lists of different lengths (or holds items NumPy cannot put in one
        array): ``"<name> must be an array of one shape; got list (ragged: ...)"``.
    """
    if isinstance(value, np.ndarray):
        return value
    try:
        return np.asarray(value)
    except (ValueError, TypeError):  # ragged nested lists: say where
        raise TypeError(f"{name} must be an array of one shape; got {type(value).__name__} "
                        f"({where_ragged(value, name)}).") from None


def where_ragged(value, name: str = "x") -> str:
    """Where nested lists stop being an array: the first two items of one depth that differ.

    Parameters
    ----------
    value : list or tuple
        Nested lists that ``numpy.asarray`` refused.
    name : str, default "x"
        The argument's name, for the indices shown (``x[0][1]``).

    Returns
    -------
    str
        ``"ragged: x[0] has 3 entries but x[1] has 2; ..."``, for an error message.
    """
    level = [((), value)]  # (index path, item) of every item at one depth
    for _ in range(32):
        rows = [(p, v) for p, v in level if isinstance(v, (list, tuple))]
        odd = [(p, v) for p, v in level if not isinstance(v, (list, tuple)) or len(v) != len(rows[0][1])] if rows else []
        if odd:
            (p0, v0), (p1, v1) = rows[0], odd[0]
            other = f"has {len(v1)}" if isinstance(v1, (list, tuple)) else "is a scalar"
            return (f"ragged: {name}{''.join(f'[{i}]' for i in p0)} has {len(v0)} entries but {name}{''.join(f'[{i}]' for i in p1)}"
                    f" {other}; every row of an array has the same length (pad them, see hiddenstate.pad_sequences)")
        level = [((*p, i), item) for p, v in rows for i, item in enumerate(v)][:100_000]
    return "its entries are not numbers of one shape"
