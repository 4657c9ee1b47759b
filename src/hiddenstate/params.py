"""Parameters in torch's layout: their initialisation and loading a state dict into them in place."""

from __future__ import annotations

import numpy as np

from hiddenstate.validation import float_array, shape_str

__all__ = ["load_into", "uniform_init"]


def uniform_init(rng: np.random.Generator, shape, hidden_size: int, dtype) -> np.ndarray:
    """PyTorch's default recurrent initialisation U(-1/sqrt(H), 1/sqrt(H)).

    Parameters
    ----------
    rng : numpy.random.Generator
    shape : tuple of int
    hidden_size : int
        H, which sets the range.
    dtype : {float32, float64}

    Returns
    -------
    ndarray of ``shape`` and ``dtype``
    """
    k = 1.0 / np.sqrt(hidden_size)
    return rng.uniform(-k, k, size=shape).astype(dtype)


def load_into(params: dict, state, owner: str) -> None:
    """Copy every array of ``state`` into the array of the same key in ``params``, in place.

    The arrays of ``params`` are written, not replaced, so every alias of a parameter (an
    optimizer's, a model's ``params`` dict that shares them) sees the new values. Nothing is
    written unless every key, shape and value fits.

    Parameters
    ----------
    params : dict of str to ndarray
        The parameters to load into; their dtypes are kept (values are cast).
    state : mapping of str to array_like
        Exactly the keys of ``params``, each with its shape.
    owner : str
        Name of the owner for messages (e.g. ``"GRU"``).

    Raises
    ------
    ValueError
        A key is missing or unexpected, an array has the wrong shape, or a value is NaN/Inf.
    TypeError
        ``state`` is not a mapping, or an array is not floating point.
    """
    if not hasattr(state, "keys"):
        raise TypeError(f"state_dict must be a mapping of parameter names to arrays; got {type(state).__name__}.")
    missing = sorted(set(params) - set(state.keys()))
    extra = sorted(set(state.keys()) - set(params))
    if missing or extra:
        raise ValueError(f"state_dict keys do not match {owner}: missing {missing}, unexpected {extra}.")
    new = {}
    for k, v in params.items():
        a = np.asarray(state[k])
        if a.shape != v.shape:
            raise ValueError(f"state_dict[{k!r}] must have shape {shape_str(v.shape)}; got {shape_str(a.shape)}.")
        new[k] = float_array(f"state_dict[{k!r}]", a, dtype=v.dtype)
    for k, a in new.items():
        np.copyto(params[k], a)
