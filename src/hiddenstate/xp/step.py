"""One step on arrays of any array-API library: the cells' forward/backward and the step map with its Jacobian.

:class:`hiddenstate.classic.cells.base.Cell` hands an array-API input to :func:`cell_forward` /
:func:`cell_backward`, and :meth:`CellKind.step <hiddenstate.classic.cells.base.CellKind.step>` to
:func:`step_map`. They run the reference step of :mod:`hiddenstate.xp.cells` in the input's
namespace and on its device. The Jacobian of the step map is computed exactly by the step's own
adjoint: S backward passes at once, one per unit of the new state (the rows of the identity).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from hiddenstate.core.validation import boolean, shape_str
from hiddenstate.xp.arrays import converted, float_input, is_foreign, namespace, state_input, to_namespace
from hiddenstate.xp.cells import KINDS

__all__ = ["XPCellCache", "cell_backward", "cell_forward", "step_map"]


@dataclass(frozen=True)
class XPCellCache:
    """What :func:`cell_backward` needs from one :func:`cell_forward` (the array-API ``CellCache``).

    Attributes
    ----------
    xp : module
        The namespace of the step.
    device : object
        Its device.
    x : array of shape (N, I)
        The step's input (a private copy).
    saved : tuple
        The reference step's values.
    w : dict
        The recurrent weights used.
    weight_ih : array of shape (G*H, I)
        The input weights used.
    unbatched : bool
        The input was (I,).
    owner : weakref.ref
        The cell that made the cache.
    keys : tuple of str
        The cell's parameter names, in order.
    """

    xp: object
    device: object
    x: object
    saved: tuple
    w: dict
    weight_ih: object
    unbatched: bool
    owner: weakref.ref
    keys: tuple


def _projection(xp, x, w_ih, b_ih):
    xw = xp.matmul(x, xp.matrix_transpose(w_ih))
    return xw if b_ih is None else xw + b_ih


def cell_forward(cell, x, h=None):
    """:meth:`Cell.forward <hiddenstate.classic.cells.base.Cell.forward>` on an array-API input.

    Parameters
    ----------
    cell : Cell
        The cell (NumPy parameters, converted once per change).
    x : array of shape (N, I) or (I,)
        A torch tensor, CuPy array, ...
    h : array of shape (N, H) or (H,), optional
        Previous state (LSTM: a pair); None: zeros.

    Returns
    -------
    h_new : array of shape (N, H) or (H,)
        LSTM: a pair ``(h_new, c_new)``.
    cache : XPCellCache

    Raises
    ------
    TypeError, ValueError
        As the NumPy path: shapes, dtypes, NaN/Inf, an LSTM state that is not a pair.
    """
    xp, dev = namespace(x)
    cell.check_params()
    p = converted(cell, xp, dev)
    x = float_input("x", x, xp, dev, cell.dtype)
    I, H = cell.input_size, cell.hidden_size
    if x.ndim not in (1, 2) or x.shape[-1] != I:
        raise ValueError(f"x must have shape (N, I={I}) or (I={I},); got {shape_str(tuple(x.shape))}.")
    unbatched = x.ndim == 1
    x2 = x[None] if unbatched else x
    N = x2.shape[0]
    want, legend = ((H,), f"(H={H},)") if unbatched else ((N, H), f"(N={N}, H={H})")
    names = ("h", "c") if cell.is_lstm else ("h",)
    if cell.is_lstm and h is not None and not (isinstance(h, tuple) and len(h) == 2):
        raise TypeError(f"state must be a pair (h, c) for an LSTM cell; got {type(h).__name__}.")
    given = (h if cell.is_lstm else (h,)) if h is not None else (None,) * len(names)
    state = tuple(xp.zeros((N, H), dtype=x2.dtype, device=dev) if v is None
                  else state_input(n, v, want, legend, xp, dev, cell.dtype) for n, v in zip(names, given))
    state = tuple(s[None] if (unbatched and s.ndim == 1) else s for s in state)
    w = {k: p[k] for k in ("weight_hh", "bias_hh") if k in p}
    xw = _projection(xp, x2, p["weight_ih"], p.get("bias_ih"))
    new, saved = KINDS[cell.kind.name].forward(xp, xw, state, w, **cell.options)
    out = tuple(s[0] for s in new) if unbatched else new
    cache = XPCellCache(xp=xp, device=dev, x=x2, saved=saved, w=w, weight_ih=p["weight_ih"], unbatched=unbatched,
                        owner=weakref.ref(cell), keys=tuple(cell.params))
    return (out if cell.is_lstm else out[0]), cache


def cell_backward(cell, cache: XPCellCache, d_out):
    """:meth:`Cell.backward <hiddenstate.classic.cells.base.Cell.backward>` through an :class:`XPCellCache`.

    Parameters
    ----------
    cell : Cell
        The cell whose :func:`cell_forward` made ``cache``.
    cache : XPCellCache
        From :func:`cell_forward`.
    d_out : array shaped like the new state, or None
        LSTM: a pair ``(dh, dc)``, either part None.

    Returns
    -------
    grads : dict of str to array
        Same keys and shapes as ``cell.params``, in the step's namespace and on its device.
    dx : array shaped like ``x``
    dh : array shaped like ``h`` (LSTM: a pair)

    Raises
    ------
    TypeError, ValueError
        A cache of another cell; a gradient of another shape, library or device, or with NaN/Inf.
    """
    if cache.owner() is not cell:
        raise ValueError(f"cache must come from this cell's forward ({cell!r}); got a cache of another cell. "
                         "Call backward on the cell whose forward returned the cache.")
    xp, dev, H = cache.xp, cache.device, cell.hidden_size
    N = cache.x.shape[0]
    want, legend = ((H,), f"(H={H},)") if cache.unbatched else ((N, H), f"(N={N}, H={H})")
    names = ("d_out[0]", "d_out[1]") if cell.is_lstm else ("d_out",)
    if cell.is_lstm and d_out is not None and not (isinstance(d_out, tuple) and len(d_out) == 2):
        raise TypeError(f"d_out must be None or a pair (dh, dc) for an LSTM cell; got {type(d_out).__name__}.")
    given = (d_out if cell.is_lstm else (d_out,)) if d_out is not None else (None,) * len(names)
    d = tuple(xp.zeros((N, H), dtype=cache.x.dtype, device=dev) if v is None
              else state_input(n, v, want, legend, xp, dev, cell.dtype) for n, v in zip(names, given))
    d = tuple(a[None] if cache.unbatched else a for a in d)
    dxw, dstate, dw_hh, db_hh = KINDS[cell.kind.name].backward(xp, cache.saved, d, cache.w, **cell.options)
    grads = {"weight_ih": xp.matmul(xp.matrix_transpose(dxw), cache.x), "bias_ih": xp.sum(dxw, axis=0),
             "weight_hh": dw_hh, "bias_hh": db_hh}
    grads = {k: grads[k] for k in cache.keys}
    dx = xp.matmul(dxw, cache.weight_ih)
    if cache.unbatched:
        dx, dstate = dx[0], tuple(s[0] for s in dstate)
    return grads, dx, (dstate if cell.is_lstm else dstate[0])


def step_map(kind, weights: dict, x, state, *, jacobian: bool = True, **options):
    """:meth:`CellKind.step <hiddenstate.classic.cells.base.CellKind.step>` on array-API inputs: the new state and its Jacobian.

    Parameters
    ----------
    kind : CellKind
        The cell kind.
    weights : dict
        ``weight_ih`` (G*H, I), ``weight_hh`` (G*H, H), optional ``bias_ih``, ``bias_hh``
        (G*H,): NumPy arrays (copied over) or arrays of ``x``'s library.
    x : array of shape (N, I)
        A torch tensor, CuPy array, ...
    state : array of shape (N, S)
        ``h``, or ``(h, c)`` concatenated for the LSTM (S = 2H).
    jacobian : bool, default True
        Also compute ``d state_new / d state`` (N, S, S), exactly, by the step's adjoint.
    **options
        The kind's options.

    Returns
    -------
    new_state : array of shape (N, S)
    J : array of shape (N, S, S) or None
        Row ``i`` is the gradient of ``new_state[:, i]``.

    Raises
    ------
    TypeError, ValueError
        A non-bool ``jacobian``; inputs of another library or device; a state of the wrong shape.
    """
    jacobian = boolean("jacobian", jacobian)
    xp, dev = namespace(x)
    w_ih = weights["weight_ih"]
    dtype = np.dtype(str(w_ih.dtype).rpartition(".")[2])  # "float64" from NumPy's, torch's "torch.float64", ...
    conv = {k: (None if v is None else (v if is_foreign(v) else to_namespace(v, xp, dev)))
            for k, v in weights.items()}
    x = float_input("x", x, xp, dev, dtype)
    H = conv["weight_ih"].shape[0] // kind.num_gates
    S = 2 * H if kind.has_cell else H
    s = state_input("state", state, (x.shape[0], S), "(N, S)", xp, dev, dtype)
    w = {k: conv[k] for k in ("weight_hh", "bias_hh") if conv.get(k) is not None}
    ref = KINDS[kind.name]

    def parts(a):
        return (a[:, :H], a[:, H:]) if kind.has_cell else (a,)

    xw = _projection(xp, x, conv["weight_ih"], conv.get("bias_ih"))
    new, _ = ref.forward(xp, xw, parts(s), w, **options)
    new_state = xp.concat(new, axis=1) if kind.has_cell else new[0]
    if not jacobian:
        return new_state, None
    N = x.shape[0]
    rep = lambda a: xp.reshape(xp.broadcast_to(a[:, None, :], (N, S, a.shape[1])), (N * S, a.shape[1]))
    _, saved = ref.forward(xp, rep(xw), parts(rep(s)), w, **options)
    eye = xp.reshape(xp.broadcast_to(xp.eye(S, dtype=s.dtype, device=dev)[None], (N, S, S)), (N * S, S))
    _, d_prev, _, _ = ref.backward(xp, saved, parts(eye), w, **options)
    J = xp.concat(d_prev, axis=1) if kind.has_cell else d_prev[0]
    return new_state, xp.reshape(J, (N, S, S))
