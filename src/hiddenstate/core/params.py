"""Parameters in torch's layout: their initialisation, their expected shapes, the check at every forward, loading in place."""

from __future__ import annotations

import math

import numpy as np

from hiddenstate.core.nesting import as_array
from hiddenstate.core.resources import check_memory
from hiddenstate.core.validation import float_array, shape_str

__all__ = ["MAMBA_NORMS", "check_param_memory", "check_params", "load_into", "param_shapes", "uniform_init"]

#: The weights of the RMS norms of Mamba's dt, B, C in transformers' names (``JambaMambaMixer``;
#: optional): :data:`hiddenstate.kinds.ssm.mamba_kernel.NORMS`, read by the kernels and the array-API path.
MAMBA_NORMS = ("dt_layernorm.weight", "b_layernorm.weight", "c_layernorm.weight")


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
        ``state`` is not a mapping, or an array is not floating point, or a value is ragged
        nested lists (named by key).
    """
    if not hasattr(state, "keys"):
        raise TypeError(f"state_dict must be a mapping of parameter names to arrays; got {type(state).__name__}.")
    missing = sorted(set(params) - set(state.keys()))
    extra = sorted(set(state.keys()) - set(params))
    if missing or extra:
        raise ValueError(f"state_dict keys do not match {owner}: missing {missing}, unexpected {extra}; a state_dict "
                         f"must have exactly the keys of {owner}'s params.")
    new = {}
    for k, v in params.items():
        a = as_array(f"state_dict[{k!r}]", state[k])
        if a.shape != v.shape:
            raise ValueError(f"state_dict[{k!r}] must have shape {shape_str(v.shape)}; got {shape_str(a.shape)}.")
        new[k] = float_array(f"state_dict[{k!r}]", a, dtype=v.dtype)
    for k, a in new.items():
        np.copyto(params[k], a)


def param_shapes(num_gates: int, hidden_size: int, widths: dict, *, bias: bool, recurrent: bool,
                 states: tuple = (), num_states: int = 0) -> dict:
    """The shape of every parameter of a cell or layer, with the same shape spelled in symbols.

    Parameters
    ----------
    num_gates : int
        G.
    hidden_size : int
        H.
    widths : dict of str to int
        The input width of each parameter-name suffix (``{"": I}`` for a cell,
        ``{"_l0": I, "_l0_reverse": I, "_l1": D*H, ...}`` for a layer).
    bias : bool
        Whether ``bias_ih`` (and ``bias_hh``) exist.
    recurrent : bool
        Whether ``weight_hh`` (and ``bias_hh``) exist.
    states : tuple of str, default ()
        Learned initial states (``("h0",)``, ``("h0", "c0")``), each (L*D, H).
    num_states : int, default 0
        L*D, the rows of each learned initial state.

    Returns
    -------
    dict of str to (tuple of int, str)
        Key -> ``(shape, legend)``, e.g. ``"weight_ih_l0" -> ((9, 3), "(G*H=9, I_0=3)")``, in the
        order the constructors create the parameters.
    """
    GH, H = num_gates * hidden_size, hidden_size
    out = {}
    for sfx, width in widths.items():
        sym = "I" if not sfx else ("I_" + sfx.split("_")[1][1:])
        out["weight_ih" + sfx] = ((GH, width), f"(G*H={GH}, {sym}={width})")
        if recurrent:
            out["weight_hh" + sfx] = ((GH, H), f"(G*H={GH}, H={H})")
        if bias:
            out["bias_ih" + sfx] = ((GH,), f"(G*H={GH},)")
            if recurrent:
                out["bias_hh" + sfx] = ((GH,), f"(G*H={GH},)")
    for name in states:
        out[name] = ((num_states, H), f"(L*D={num_states}, H={H})")
    return out


def check_param_memory(owner: str, sizes: dict, shapes: dict, dtype) -> float:
    """Refuse sizes whose parameters cannot fit in memory, before any of them is drawn.

    A constructor asked for ``d_model=10**9`` would otherwise end in NumPy's ``MemoryError`` (or
    take the machine's memory) while drawing its first weight.

    Parameters
    ----------
    owner : str
        The class, for the message (``"GatedDeltaNet"``).
    sizes : dict of str to int
        The constructor's size arguments as the message names them (``{"d_model": 10**9}``).
    shapes : dict of str to (tuple of int, str)
        Every parameter's shape (the owner's ``shapes()``).
    dtype : numpy.dtype
        The parameters' dtype.

    Returns
    -------
    float
        The bytes counted: the parameters in float64 as they are drawn, plus their cast copy for
        another dtype.

    Raises
    ------
    ValueError
        ``"<owner>(<sizes>) needs about <bytes> of memory; this machine allows <limit>. ..."``
        (:func:`hiddenstate.core.resources.check_memory`).
    """
    itemsize = np.dtype(dtype).itemsize  # weights are drawn in float64, then cast: both live at once
    nbytes = float(sum(math.prod(shape) for shape, _ in shapes.values())) * (8 + (itemsize if itemsize != 8 else 0))
    args = ", ".join(f"{k}={v}" for k, v in sizes.items())
    return check_memory(f"{owner}({args})", nbytes, "Its parameters alone take that much: choose smaller sizes.")


def check_params(params, shapes: dict, dtype, owner: str, *, finite: bool = True) -> None:
    """Check a cell's or layer's parameters before a forward pass: keys, types, dtypes, shapes, finiteness.

    ``params`` is a public, mutable dict: a value set by hand (``params["weight_hh_l0"] = ...``)
    or a diverged update must fail here, with the parameter's name, not deep inside a kernel or
    as a silently wrong result. The cost is one pass over the parameters (``numpy.isfinite``),
    O(G*H*(I+H)) per forward, small next to the scan's O(T*N*G*H*(I+H)).

    Parameters
    ----------
    params : dict of str to ndarray
        The parameters to check.
    shapes : dict of str to (tuple of int, str)
        From :func:`param_shapes`: the expected shape and its legend for every key.
    dtype : numpy.dtype
        The owner's dtype; every parameter must have exactly it (no silent cast per call).
    owner : str
        Name of the owner for messages (e.g. ``"GRU"``).
    finite : bool, default True
        Also check every value for NaN/Inf (about 1 µs per array; a one-step cell checks its
        result instead, and calls this with True only to name the culprit).

    Raises
    ------
    TypeError
        ``params`` is not a dict, a value is not an ndarray or has another dtype.
    ValueError
        A key is missing or unexpected, a shape differs, a value is NaN or Inf.
    """
    if not isinstance(params, dict):
        raise TypeError(f"{owner}.params must be a dict of parameter names to arrays; got {type(params).__name__}. "
                        f"Change parameters in place or with load_state_dict.")
    if params.keys() != shapes.keys():
        missing = [k for k in shapes if k not in params]
        extra = sorted(k for k in params if k not in shapes)
        raise ValueError(f"{owner}.params must hold exactly the keys {list(shapes)}; got missing {missing}, "
                         f"unexpected {extra}. Change parameters in place or with load_state_dict.")
    for key, (shape, legend) in shapes.items():
        v = params[key]
        if type(v) is not np.ndarray or v.dtype != dtype or v.shape != shape:
            _bad_param(key, v, shape, legend, dtype)
        if finite and not np.isfinite(v).all():
            bad = int(v.size - np.count_nonzero(np.isfinite(v)))
            raise ValueError(f"params[{key!r}] must be finite; got {bad} NaN or Inf value(s). A value set by hand or "
                             f"a diverged update: reload the parameters (load_state_dict) or lower the learning rate.")


def _bad_param(key, v, shape, legend, dtype):
    """Raise the error that says why ``params[key]`` does not fit (the slow path of :func:`check_params`)."""
    if not isinstance(v, np.ndarray):
        raise TypeError(f"params[{key!r}] must be an ndarray of shape {legend} and dtype {dtype}; got "
                        f"{type(v).__name__}. Assign into the array (params[{key!r}][...] = value) instead of "
                        f"replacing it.")
    if v.dtype != dtype:
        raise TypeError(f"params[{key!r}] must have dtype {dtype} (the owner's dtype); got {v.dtype}. Assign into "
                        f"the array (params[{key!r}][...] = value) so the dtype is kept.")
    if v.shape != shape:
        raise ValueError(f"params[{key!r}] must have shape {legend}; got {shape_str(v.shape)}.")
