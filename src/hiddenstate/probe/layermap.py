"""The autonomous map of one layer with its input held fixed, and the box its states live in.

:func:`layer_map` gives the ``F`` and ``jac`` that :func:`hiddenstate.probe.fixedpoints.find_fixed_points`
searches (Sussillo and Barak 2013 hold the input at zero); :func:`reachable_box` its ``bounds``.
Both are re-exported by :mod:`hiddenstate.probe.fixedpoints`.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.classic.cells import kind_of
from hiddenstate.core.validation import float_array, index, shape_str
from hiddenstate.probe.trace import sequence_layer

__all__ = ["layer_map", "reachable_box"]


def layer_map(layer, x=None, *, layer_index: int = 0, direction: int = 0):
    """The autonomous map ``state -> next state`` of one layer of a network, with a fixed input.

    Parameters
    ----------
    layer : hiddenstate.RNN, GRU or LSTM
    x : array_like of shape (I_k,), optional
        The constant input of that layer (``I_0 = input_size`` for layer 0, ``D*H`` above);
        default zeros (Sussillo and Barak 2013 hold the input at zero).
    layer_index : int, default 0
    direction : int, default 0

    Returns
    -------
    F : callable
        ``F(s) -> ndarray (S,)`` for a state ``s`` of shape (S,): ``S = H``, or ``2H`` for an LSTM
        whose state is ``(h, c)`` concatenated (``h`` first). ``F`` also maps K states at once,
        ``(K, S) -> (K, S)`` (one batched step, e.g. to run many starts forward).
    jac : callable
        ``jac(s) -> ndarray (S, S)``, the analytic Jacobian ``dF/ds`` (the same step Jacobian as
        :func:`hiddenstate.probe.gradflow.step_jacobians`). Both run the cell kind's scan kernel
        for one step (:meth:`hiddenstate.classic.cells.base.CellKind.step`): the layers' own map.
        ``F(s)`` right after ``jac(s)`` for the same ``s`` returns the state that step computed
        (the search asks for both at every point). Both use a copy of the layer's weights taken
        now: changing the layer's parameters later does not change them.

    Raises
    ------
    TypeError
        ``layer`` is not a sequence layer; an index that is not an integer; ``x`` that is not
        real numbers.
    ValueError
        If the indices are out of range (``layer_index`` in ``[-L, L)``, negative counting from
        the top; ``direction`` in ``[-D, D)``), ``x`` has the wrong shape or NaN/Inf, or a
        parameter of the layer does not fit (:meth:`~hiddenstate.classic.recurrent.RecurrentLayer.check_params`).
    """
    kind = kind_of(sequence_layer(layer))
    L, D = layer.num_layers, layer.num_directions
    li = index("layer_index", layer_index, L, what="layers")
    direction = index("direction", direction, D, what="directions")
    layer.check_params()
    # float64 whatever the layer's dtype: q must reach ~1e-12 to call a point fixed; private read-only copies,
    # so that the kernels keep their layout of them across the hundreds of steps of a search (workspace.derived)
    w = {k: (None if v is None else _frozen(v)) for k, v in layer.weights(li, direction).items()}
    width = w["weight_ih"].shape[1]
    xv = np.zeros(width) if x is None else float_array("x", x, dtype=np.float64)
    if xv.shape != (width,):
        raise ValueError(f"x must have shape ({width},) (the input width of layer {li}); got {shape_str(xv.shape)}.")
    xv = xv[None, :]  # (1, I)
    opts = layer.options
    S = kind.state_size(layer.hidden_size)

    last = {}  # the state and step of the latest jac(s): F(s) for the same s reuses it

    def step(s, jacobian):
        a = np.asarray(s, dtype=np.float64)
        if a.shape != (S,) and not (a.ndim == 2 and a.shape[1] == S and not jacobian):
            raise ValueError(f"s must have shape (S={S},), one state of layer {li}{'' if jacobian else ' (or (K, S) for F)'}; "
                             f"got {shape_str(a.shape)}.")
        return kind.step(w, xv if a.ndim == 1 else np.broadcast_to(xv, (a.shape[0], width)), a.reshape(-1, S),
                         jacobian=jacobian, **opts)

    def F(s):
        a = np.asarray(s)
        if "s" in last and a.shape == last["s"].shape and np.array_equal(a, last["s"]):
            return last["state"].copy()
        out = step(s, False).state
        return out[0] if a.ndim == 1 else out

    def jac(s):
        st = step(s, True)
        last["s"], last["state"] = np.array(s, dtype=np.float64), st.state[0].copy()
        return st.jacobian[0]

    F.state_size = jac.state_size = S  # find_fixed_points checks its inits against it
    return F, jac


def _frozen(v) -> np.ndarray:
    """A float64 copy of ``v`` that owns its memory, read-only."""
    a = np.array(v, dtype=np.float64)
    a.flags.writeable = False
    return a


def reachable_box(layer) -> list:
    """Per-coordinate bounds of the states a layer can reach from an initial state inside them.

    tanh RNN and GRU: ``(-1, 1)`` (a GRU state is a convex combination of its previous state
    and a tanh candidate); logistic RNN ``(0, 1)``; ReLU RNN ``(0, None)``; LSTM: ``(-1, 1)``
    for ``h`` and unbounded for ``c``. Pass it as ``bounds`` to :func:`find_fixed_points` with
    :func:`layer_map`.

    Parameters
    ----------
    layer : hiddenstate.RNN, GRU or LSTM
        The layer (or cell); its cell kind's ``bounds`` is called with its options.

    Returns
    -------
    list of (low, high) pairs, length S (H, or 2H for the LSTM)

    Raises
    ------
    TypeError
        ``layer`` is not a layer or cell of this package.
    """
    return kind_of(layer).bounds(layer.hidden_size, **layer.options)
