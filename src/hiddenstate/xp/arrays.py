"""Arrays of any library that follows the Python array API: find the namespace, convert, validate.

The array-API path (:mod:`hiddenstate.xp`) computes in the library of its input (torch tensors,
CuPy arrays, ...) on the input's device. This module holds what every part of it shares:

* :func:`is_foreign` -- is this an array of another library than NumPy (the dispatch test);
* :func:`namespace` -- its array-API namespace (``array_api_compat.array_namespace``) and device;
* :func:`to_numpy` / :func:`to_namespace` -- copies across the host/device boundary;
* :func:`converted` -- a layer's NumPy parameters as arrays of a namespace and device, cached and
  keyed by a digest of their bytes, so that a parameter changed in place is never served stale;
* :func:`float_input` / :func:`state_input` -- the checks the NumPy path makes (float dtype,
  finite values, shapes), in the input's library.

``array_api_compat`` is imported inside the functions, never when ``hiddenstate`` is imported.
"""

from __future__ import annotations

import hashlib

import numpy as np

from hiddenstate.core.validation import float_array, shape_str

__all__ = ["converted", "float_input", "is_foreign", "namespace", "state_input", "to_namespace", "to_numpy"]

#: Libraries whose arrays are recognised even without ``__array_namespace__`` (array_api_compat wraps them).
_KNOWN = frozenset({"torch", "cupy", "jax", "jaxlib", "dask", "sparse", "ndonnx"})


def is_foreign(value) -> bool:
    """Whether ``value`` is an array of an array-API library other than NumPy (torch, CuPy, ...).

    Parameters
    ----------
    value : object
        Anything a layer may receive as ``x``.

    Returns
    -------
    bool
        False for NumPy arrays, scalars, lists and None (the NumPy path takes them); True for a
        torch tensor, a CuPy array or any object with ``__array_namespace__`` that
        ``array_api_compat`` accepts.
    """
    if value is None or isinstance(value, (np.ndarray, np.generic, list, tuple, int, float, str, bytes)):
        return False
    root = type(value).__module__.partition(".")[0]
    if root == "numpy" or not (root in _KNOWN or hasattr(value, "__array_namespace__")):
        return False
    import array_api_compat

    return bool(array_api_compat.is_array_api_obj(value)) and not array_api_compat.is_numpy_array(value)


def namespace(x):
    """The array-API namespace and the device of an array.

    Parameters
    ----------
    x : array
        A torch tensor, CuPy array, or any array ``array_api_compat`` knows.

    Returns
    -------
    xp : module
        The compatible namespace (e.g. ``array_api_compat.torch``).
    device : object
        ``array_api_compat.device(x)``.

    Raises
    ------
    TypeError
        ``x`` is not an array of an array-API library.
    ValueError
        ``x`` is a torch tensor on the ``meta`` device (shapes without values).
    """
    import array_api_compat

    try:
        xp = array_api_compat.array_namespace(x)
    except TypeError as error:
        raise TypeError(f"x must be an array of an array-API library (NumPy, torch, CuPy, ...); got "
                        f"{type(x).__name__} ({error}).") from None
    device = array_api_compat.device(x)
    if str(device) == "meta":  # its values do not exist: the first check that reads one fails deep in torch
        raise ValueError(f"x must hold values (a tensor on the CPU or a GPU); got a {type(x).__name__} of shape "
                         f"{tuple(x.shape)} on the meta device, which has shapes but no values. Move it to a real "
                         "device first (.to_empty(device='cpu') for a module built on meta, then load its weights).")
    return xp, device


def to_numpy(a) -> np.ndarray:
    """A NumPy copy of an array of any array-API library (torch on any device, CuPy, NumPy).

    Parameters
    ----------
    a : array
        The array to bring to the host.

    Returns
    -------
    ndarray
        The same values, shape and dtype, in host memory (a new array).
    """
    import array_api_compat

    if isinstance(a, np.ndarray):
        return a.copy()
    if array_api_compat.is_torch_array(a):
        return a.detach().cpu().numpy().copy()
    if array_api_compat.is_cupy_array(a):
        return a.get()
    return np.array(array_api_compat.to_device(a, "cpu"), copy=True)


def to_namespace(a, xp, device, dtype=None):
    """A copy of a NumPy array (or nested lists) as an array of ``xp`` on ``device``.

    Parameters
    ----------
    a : array_like
        Host data.
    xp : module
        The target namespace (from :func:`namespace`).
    device : object
        The target device.
    dtype : numpy.dtype, optional
        Cast to this dtype's equivalent in ``xp`` (by name: ``float64``, ``bool``, ``int64``).

    Returns
    -------
    array
        A new array of ``xp`` (never sharing memory with ``a``).
    """
    a = np.asarray(a)
    if dtype is not None:
        a = a.astype(dtype, copy=False)
    return xp.asarray(np.array(a, order="C", copy=True), device=device, dtype=getattr(xp, a.dtype.name))


def _digest(arrays: dict) -> tuple:
    """Names, shapes, dtypes and a BLAKE2b digest of the bytes of every array (what a cache is keyed by)."""
    out = []
    for key, value in arrays.items():
        data = np.ascontiguousarray(value)
        out.append((key, data.shape, data.dtype.str, hashlib.blake2b(memoryview(data).cast("B"), digest_size=16).digest()))
    return tuple(out)


def converted(owner, xp, device) -> dict:
    """``owner.params`` (NumPy) as arrays of ``xp`` on ``device``: cached, never stale.

    The copies are kept on ``owner`` (one set per namespace and device) together with a digest
    of the parameters' names, shapes, dtypes and bytes; a later call with parameters changed in
    any way (an optimizer step in place, ``load_state_dict``, a replaced array) converts again.

    Parameters
    ----------
    owner : object
        A layer or cell with a ``params`` dict of ndarrays (already checked by its
        ``check_params``).
    xp : module
        The target namespace.
    device : object
        The target device.

    Returns
    -------
    dict of str to array
        Same keys as ``owner.params``; private copies that the array-API path never modifies.
    """
    cache = owner.__dict__.setdefault("_xp_params", {})
    key = (getattr(xp, "__name__", str(xp)), str(device))
    digest = _digest(owner.params)
    hit = cache.get(key)
    if hit is not None and hit[0] == digest:
        return hit[1]
    arrays = {k: to_namespace(v, xp, device) for k, v in owner.params.items()}
    cache[key] = (digest, arrays)
    return arrays


def float_input(name: str, value, xp, device, dtype: np.dtype):
    """``value`` as a private floating array of ``xp`` on ``device``, checked like the NumPy path.

    Parameters
    ----------
    name : str
        Argument name used in messages.
    value : array
        An array of ``xp`` (on ``device``), or host data (a NumPy array, nested lists), which is
        checked by :func:`hiddenstate.core.validation.float_array` and copied over.
    xp : module
        The namespace of the computation.
    device : object
        Its device.
    dtype : numpy.dtype
        float32 or float64: the result's dtype (integers are promoted, as in NumPy).

    Returns
    -------
    array
        A new array of ``xp`` (the caller's array is never kept).

    Raises
    ------
    TypeError
        A bool, complex or non-numeric dtype; an array of another library than ``xp``.
    ValueError
        NaN or Inf, or an array on another device.
    """
    if not is_foreign(value):
        return to_namespace(float_array(name, value, dtype=dtype), xp, device)
    import array_api_compat

    other = array_api_compat.array_namespace(value)
    if other is not xp:
        raise TypeError(f"{name} must be an array of the same library as x ({xp.__name__}); got "
                        f"{type(value).__module__}.{type(value).__name__}.")
    if str(array_api_compat.device(value)) != str(device):
        raise ValueError(f"{name} must be on the device of x ({device}); got {array_api_compat.device(value)}.")
    if not xp.isdtype(value.dtype, ("real floating", "integral")):
        raise TypeError(f"{name} must be a floating-point array (float32 or float64; integers are promoted); got "
                        f"dtype {value.dtype}.")
    out = xp.astype(value, getattr(xp, dtype.name), copy=True)
    finite = xp.isfinite(out)
    if not bool(xp.all(finite)):
        bad = int(xp.sum(xp.astype(xp.logical_not(finite), xp.int64)))
        raise ValueError(f"{name} must be finite; got {bad} NaN or Inf value(s).")
    return out


def state_input(name: str, value, want: tuple, legend: str, xp, device, dtype: np.dtype):
    """An initial state (or a gradient of one) of exactly the shape ``want``, as :func:`float_input`.

    Parameters
    ----------
    name : str
        Argument name used in messages.
    value : array
        As :func:`float_input`.
    want : tuple of int
        The required shape (never broadcast).
    legend : str
        The shape in symbols, for the message (``"(L*D, N, H)"``).
    xp, device, dtype
        As :func:`float_input`.

    Returns
    -------
    array
        A new array of ``xp``, shape ``want``.

    Raises
    ------
    TypeError, ValueError
        As :func:`float_input`; another shape.
    """
    a = float_input(name, value, xp, device, dtype)
    if tuple(a.shape) != tuple(want):
        raise ValueError(f"{name} must have shape {legend}={shape_str(want)}; got {shape_str(tuple(a.shape))}.")
    return a
