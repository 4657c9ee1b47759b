"""The edit record, :class:`StateEdit`, and how one operation changes a state array.

An edit names a recurrent layer (the model's own index), a step (the 0-based position whose state
-- the state *after* reading the token at that position -- is changed), optionally a last step
``until`` (the state after every step from ``step`` to ``until`` is changed again, each time after
that step's update), the part of the layer's state, which heads and channels, and the operation:

=========  ==================================================================================
``zero``   the selected entries set to 0
``mean``   set to their mean over a reference run (every step and sequence of the layer's
           states in the clean run of the same ids, or of ``source`` ids)
``replace``  set to ``value`` (an array of the state's shape), or to the state of another run
           of the same model at the same step (``source``: its ids, or an :class:`EditRun`):
           activation patching of the state
``add``    ``value`` added (a number, or a steering array of the state's shape)
``scale``  multiplied by ``value`` (a number or an array of the state's shape)
=========  ==================================================================================

A *part* is one or more of the block's state fields (:data:`PARTS`): ``"state"`` is the layer's
recurrent state (Mamba's ``ssm``, the delta rule's matrix ``recurrent``, RG-LRU's ``rg``,
lightning's ``kv``, mLSTM's ``C`` and ``n``, RWKV's ``num`` and ``den``; a short convolution's
window, its only state; ZAYA's CCA projection's window ``conv`` and delayed value ``v``),
``"conv"`` its convolution window (RWKV's token shift), or a field by name (``"m"``, the mLSTM
stabiliser). ``zero`` and ``scale`` of mLSTM's ``(C, n)`` or RWKV's ``(num, den)`` zero or scale
the true, unstabilised state (the stabiliser they share is kept); ``mean`` and ``replace`` set the
stabiliser with them.

``heads`` selects along a state's head axis and ``channels`` along its channel axis
(:data:`AXES`: Mamba's ``Di``, Mamba-2's head dimension ``P``, the delta rule's and lightning's
key channels ``Dk``, a convolution window's channels, an RNN's hidden units); a state without
such an axis refuses the selection.
"""

from __future__ import annotations

import numbers

import numpy as np

from hiddenstate.core.validation import shape_str

__all__ = ["AXES", "OPS", "PARTS", "StateEdit", "apply_op", "part_fields"]

#: The operations an edit may apply.
OPS = ("zero", "mean", "replace", "add", "scale")

#: Per kind, the state fields each part names (``"state"``, ``"conv"``), in the block's state order.
PARTS = {
    "mamba": {"state": ("ssm",), "conv": ("conv",)},
    "mamba2": {"state": ("ssm",), "conv": ("conv",)},
    "gated_delta": {"state": ("recurrent",), "conv": ("conv",)},
    "kda": {"state": ("recurrent",), "conv": ("conv",)},
    "rglru": {"state": ("rg",), "conv": ("conv",)},
    "lightning": {"state": ("kv",)},
    "shortconv": {"state": ("conv",), "conv": ("conv",)},
    "cca": {"state": ("conv", "v"), "conv": ("conv",)},
    "mlstm": {"state": ("C", "n"), "conv": ()},
    "rwkv": {"state": ("num", "den"), "conv": ("shift",)},
    "classic": {"state": ("h", "c"), "conv": ()},
}

#: Stabilisers set together with their part by ``mean`` and ``replace``.
STABILISERS = {"mlstm": ("m",), "rwkv": ("max",)}

#: Per (kind, field): the (heads, channels) axes of the field's (N, ...) array, None where it has none.
AXES = {
    ("mamba", "ssm"): (None, 1), ("mamba2", "ssm"): (1, 2), ("gated_delta", "recurrent"): (1, 2),
    ("kda", "recurrent"): (1, 2), ("rglru", "rg"): (None, 1), ("lightning", "kv"): (1, 2),
    ("mlstm", "C"): (1, 2), ("mlstm", "n"): (1, 2), ("mlstm", "m"): (1, None),
    ("rwkv", "num"): (None, 1), ("rwkv", "den"): (None, 1), ("rwkv", "max"): (None, 1), ("rwkv", "shift"): (None, 1),
    ("classic", "h"): (None, 1), ("classic", "c"): (None, 1), ("cca", "conv"): (None, 1), ("cca", "v"): (None, 1),
}


def _int(name, value, low=0):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be an int; got {type(value).__name__} {value!r:.60}.")
    if int(value) < low:
        raise ValueError(f"{name} must be >= {low}; got {int(value)}.")
    return int(value)


def _indices(name, value):
    if value is None:
        return None
    items = [value] if isinstance(value, (numbers.Integral, np.integer)) else value
    try:
        items = list(np.asarray(items).reshape(-1).tolist()) if isinstance(items, np.ndarray) else list(items)
    except TypeError:
        raise TypeError(f"{name} must be None, an int or a list of ints; got {type(value).__name__}.") from None
    out = tuple(_int(name, i) for i in items)
    if not out or len(set(out)) != len(out):
        raise ValueError(f"{name} must list distinct indices, at least one; got {list(out)}.")
    return out


class StateEdit:
    """One change of a recurrent layer's state, propagated by :func:`hiddenstate.intervene`.

    Parameters
    ----------
    layer : int
        The model's own layer index (as in its layer map; for our stacks, the layer in the stack).
    step : int
        The 0-based position whose state (after reading that token) is changed; the outputs at
        positions <= ``step`` are the clean run's.
    op : {"zero", "mean", "replace", "add", "scale"}, default "zero"
        The operation (module docstring).
    value : float or array_like, optional
        ``add``: the number or steering array added; ``scale``: the factor (number or array);
        ``replace``: the new state, shape ``S`` (one sequence's, broadcast to all) or ``(N,) + S``
        (S: the state field's shape after N); required for ``add`` and ``scale``, and for
        ``replace`` without ``source``.
    source : array_like of int, or EditRun, optional
        ``replace``: token ids of another prompt of the same model (N or 1 rows, at least
        ``until + 1`` steps), whose state at the same step is copied, or an EditRun whose clean
        states hold this layer; ``mean``: the reference ids (default the intervened ids).
    heads, channels : int or list of int, optional
        Only these indices along the state's head / channel axis (module docstring); default all.
    until : int, optional
        The last step edited (default ``step``): the state after each step in
        ``[step, until]`` is edited, after that step's own update.
    part : str, default "state"
        ``"state"``, ``"conv"`` or a state field's name (module docstring).

    Raises
    ------
    TypeError
        A non-int ``layer``, ``step``, ``until`` or index, a ``part`` that is not a str, a
        non-numeric ``value``.
    ValueError
        An unknown ``op``; ``until < step``; ``value`` or ``source`` missing where the op needs
        one, or given where it takes none; repeated or negative indices.
    """

    __slots__ = ("channels", "heads", "layer", "op", "part", "source", "step", "until", "value")

    def __init__(self, layer, step, op="zero", *, value=None, source=None, heads=None, channels=None, until=None,
                 part="state"):
        self.layer = _int("layer", layer)
        self.step = _int("step", step)
        if not isinstance(op, str) or op not in OPS:
            raise ValueError(f"op must be one of {', '.join(OPS)}; got {op!r:.60}.")
        self.op = op
        self.until = self.step if until is None else _int("until", until)
        if self.until < self.step:
            raise ValueError(f"until must be >= step={self.step} (the last edited step); got {self.until}.")
        if not isinstance(part, str) or not part:
            raise TypeError(f"part must be 'state', 'conv' or a state field's name; got {part!r:.60}.")
        self.part = part
        self.heads, self.channels = _indices("heads", heads), _indices("channels", channels)
        need = {"add": "value", "scale": "value", "replace": "value or source"}.get(op)
        if op == "replace" and (value is None) == (source is None):
            raise ValueError(f"op='replace' must have exactly one of value= (the new state) or source= (another "
                             f"run's ids); got {'both' if value is not None else 'neither'}.")
        if need == "value" and value is None:
            raise ValueError(f"value must be given for op={op!r} (a number or an array of the state's shape); got None.")
        if op in ("zero", "mean") and value is not None:
            raise ValueError(f"value must be None for op={op!r}; got {type(value).__name__}.")
        if op in ("zero", "add", "scale") and source is not None:
            raise ValueError(f"source must be None for op={op!r} (only replace and mean read another run); got "
                             f"{type(source).__name__}.")
        if value is not None:
            arr = np.asarray(value)
            if arr.dtype.kind not in "iuf" or arr.dtype == bool:
                raise TypeError(f"value must be a number or a float array; got dtype {arr.dtype}.")
            if not np.isfinite(arr).all():
                raise ValueError("value must be finite; got NaN or Inf.")
            value = arr.astype(np.float64)
        self.value, self.source = value, source

    def __repr__(self) -> str:
        extra = "".join(f", {k}={getattr(self, k)!r}" for k in ("heads", "channels") if getattr(self, k) is not None)
        extra += f", until={self.until}" if self.until != self.step else ""
        extra += f", part={self.part!r}" if self.part != "state" else ""
        if self.value is not None:  # a number as itself, an array by its shape
            extra += f", value={self.value.item():g}" if self.value.ndim == 0 else f", value=<{shape_str(self.value.shape)}>"
        extra += "" if self.source is None else f", source=<{type(self.source).__name__}>"
        return f"StateEdit(layer={self.layer}, step={self.step}, op={self.op!r}{extra})"

    def steps(self) -> range:
        """The edited steps, ``step .. until``.

        Returns
        -------
        range
        """
        return range(self.step, self.until + 1)


def part_fields(kind: str, part: str, fields: tuple, *, with_stabiliser: bool = False) -> tuple:
    """The state fields an edit's ``part`` names for a block of ``kind`` whose state has ``fields``.

    Parameters
    ----------
    kind : str
        The kind's name (``"mamba2"``), or ``"classic"`` for an RNN stack.
    part : str
        ``"state"``, ``"conv"`` or a field's name.
    fields : tuple of str
        The block's state fields.
    with_stabiliser : bool, default False
        Also the kind's stabiliser (``mean``, ``replace``).

    Returns
    -------
    tuple of str

    Raises
    ------
    ValueError
        A part the kind has not (naming the ones it has).
    """
    parts = PARTS.get(kind, {"state": tuple(f for f in fields if f != "conv"), "conv": ("conv",)})
    if part in parts:
        got = tuple(f for f in parts[part] if f in fields)
    else:
        got = (part,) if part in fields else ()
    if not got:
        options = sorted({p for p, fs in parts.items() if any(f in fields for f in fs)} | set(fields))
        raise ValueError(f"part must be one of {options} for a {kind} layer; got {part!r}.")
    if with_stabiliser and part in parts:
        got += tuple(f for f in STABILISERS.get(kind, ()) if f in fields and f not in got)
    return got


def _mask(kind, field, shape, edit: StateEdit):
    """A bool mask of the (N, ...) state's entries the edit's heads and channels select (None: all)."""
    if edit.heads is None and edit.channels is None:
        return None
    h_axis, c_axis = AXES.get((kind, field), (None, None))
    mask = np.ones(shape[1:], dtype=bool)
    for name, axis, picked in (("heads", h_axis, edit.heads), ("channels", c_axis, edit.channels)):
        if picked is None:
            continue
        if axis is None:
            raise ValueError(f"{name} must be None for the {kind} state {field!r} of shape (N, "
                             f"{', '.join(map(str, shape[1:]))}), which has no {name} axis; got {list(picked)}.")
        size = shape[axis]
        if max(picked) >= size:
            raise ValueError(f"{name} must lie in [0, {size}) for the {kind} state {field!r} (axis {axis} of "
                             f"{shape_str(shape)}); got {list(picked)}.")
        sel = np.zeros(size, dtype=bool)
        sel[list(picked)] = True
        mask &= sel.reshape((size,) + (1,) * (len(shape) - 1 - axis))
    return mask


def _full(name, arr, shape, what):
    """``arr`` broadcast to ``shape`` (N, ...): a number, one sequence's state ``shape[1:]`` or ``shape`` itself."""
    arr = np.asarray(arr, dtype=np.float64)
    if arr.ndim == 0 or arr.shape in (shape, shape[1:]):
        return np.broadcast_to(arr, shape)
    raise ValueError(f"{name} must be a number or {what} of shape {shape_str(shape[1:])} (one sequence's) or "
                     f"{shape_str(shape)}; got {shape_str(arr.shape)}.")


def apply_op(kind: str, field: str, state, edit: StateEdit, *, target=None):
    """``state`` (N, ...) of field ``field`` with ``edit``'s operation applied to its selected entries.

    Parameters
    ----------
    kind : str
        The kind's name, or ``"classic"``.
    field : str
        The state field (``"ssm"``).
    state : ndarray of shape (N, ...)
        The state after the edited step; not changed.
    edit : StateEdit
    target : ndarray, optional
        ``mean``: the reference mean, ``S`` (one sequence's shape); ``replace``: the new state,
        ``S`` or ``(N,) + S`` (from ``value`` or the source run).

    Returns
    -------
    ndarray of shape (N, ...)
        A new array, ``state``'s dtype: ``where(selected, op(state), state)``.

    Raises
    ------
    ValueError
        ``value`` or ``target`` of another shape; heads or channels out of range or on a state
        without that axis.
    """
    state = np.asarray(state)
    shape = state.shape
    mask = _mask(kind, field, shape, edit)
    if edit.op == "zero":
        new = np.zeros(shape)
    elif edit.op == "scale":
        new = state * _full("value", edit.value, shape, "an array")
    elif edit.op == "add":
        new = state + _full("value", edit.value, shape, "a steering array")
    else:  # mean, replace
        name = "value" if edit.op == "replace" and edit.value is not None else "source"
        new = _full(name, target, shape, "a state")
    new = np.asarray(new, dtype=state.dtype)
    return new.copy() if mask is None else np.where(mask, new, state)
