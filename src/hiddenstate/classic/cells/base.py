"""What every cell kind declares, and the one-step cell built on it.

A *cell kind* (:class:`CellKind`) is the whole definition of one recurrence, written once in its
own module (:mod:`~hiddenstate.classic.cells.rnn`, :mod:`~hiddenstate.classic.cells.gru`,
:mod:`~hiddenstate.classic.cells.lstm`):

* its gate blocks: the names of the G row blocks of ``weight_ih`` (G*H, I) and ``weight_hh``
  (G*H, H), in torch's order;
* the forward and exact backward **scan kernels** over all T steps (the contract below), which
  can also record every gate value they compute (``record=True``);
* ``recorded(cache)``: those values as named (T, N, H) arrays (:class:`Record`), which is what
  :func:`hiddenstate.probe.trace` returns;
* ``jacobian(record, w_hh, **options)``: the step Jacobian ``dF/dh`` (and ``dF/dc``) from them,
  which gradient flow, fixed points and the reports use;
* the options that change the math (``nonlinearity``, ``reset_after``), the keep gate, the box
  of reachable states.

:meth:`CellKind.step` runs the scan kernel for one step and hands back the new state, the record
and the Jacobian: the one-step map ``F`` of the network, with nothing re-derived.

Kernel contract
---------------
``scan_forward(xw, h0, w_hh, b_hh, keep=None, reset=None, *, record=False, **options) -> (hs, final, cache)``
    ``xw`` (T, N, G*H): the input projection ``x_t W_ih^T + b_ih`` of every step, computed by
    the caller in one matrix multiply. ``h0`` (N, H) (LSTM: a pair ``(h0, c0)``). ``w_hh``
    (G*H, H), ``b_hh`` (G*H,) or None. ``keep`` (T, N, 1) bool or None: where False the step
    is padding and the state is carried unchanged. ``reset`` (T, N, 1) bool or None: where True
    the step starts from ``h0`` instead of the previous state (no gradient crosses that
    boundary). ``record``: also keep the pre-activations. Returns every step's state ``hs``
    (T, N, H) (the backward may read it: :attr:`CellKind.shares_hs`), the final state ``final``
    (a copy of ``h0`` when T = 0; LSTM: a pair) and an opaque ``cache`` for the backward kernel
    and ``recorded``. The engine passes the kernels private copies of the weights and states,
    so a cache never sees later changes to the caller's arrays.
``scan_backward(cache, d_hs, d_final) -> (d_xw, d_w_hh, d_b_hh, d_h0)``
    ``d_hs`` (T, N, H): gradient of the loss with respect to ``hs`` (or None); ``d_final``
    with respect to the final state (or None; LSTM: a pair, either part None). ``d_xw``
    (T, N, G*H), ``d_w_hh`` (G*H, H), ``d_b_hh`` (G*H,), ``d_h0`` shaped like ``h0``. The
    weight gradients are one matrix multiply after the time loop.
Buffers
    A kernel may take any array it returns or caches from :func:`hiddenstate.core.workspace.empty`
    (reused across calls of one shape, never while anything references it), and must not keep
    module-level state of its own: a result the caller holds stays valid after later calls.

Adding a cell kind means writing one module with these pieces, a :class:`CellKind` and its
layer and cell classes, and registering it in :data:`hiddenstate.classic.cells.KINDS`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hiddenstate.classic.prepared import CellCache, private
from hiddenstate.core.functional import FloatGuard
from hiddenstate.core.params import check_params, param_shapes, uniform_init
from hiddenstate.core.resources import check_memory
from hiddenstate.core.validation import (
    boolean,
    float_array,
    float_dtype,
    generator,
    positive_int,
    shape_str,
    state_array,
)
from hiddenstate.xp import step as xp_step
from hiddenstate.xp.arrays import is_foreign

__all__ = ["Cell", "CellKind", "OfKind", "Record", "Step"]


@dataclass(frozen=True)
class Record:
    """What a scan kernel computed at every step, by name, in processing order.

    Attributes
    ----------
    h : ndarray of shape (T, N, H)
        The state each step produced (before padding is applied).
    h_prev : ndarray of shape (T, N, H)
        The state each step read (after resets).
    gates : dict of str to ndarray of shape (T, N, H)
        Gate values and candidates (GRU r, z, n; LSTM i, f, g, o; none for the Elman RNN).
    preacts : dict of str to ndarray of shape (T, N, H)
        Arguments of the nonlinearities (RNN ``a``; the gates' pre-activations), or empty when
        the kernel ran without ``record=True``.
    c, c_prev : ndarray of shape (T, N, H) or None
        LSTM cell state after / before each step.
    s : ndarray of shape (T, N, H) or None
        GRU: ``W_hn h + b_hn`` (``reset_after=True``) or ``r * h`` (the Cho form).
    """

    h: np.ndarray
    h_prev: np.ndarray
    gates: dict
    preacts: dict = field(default_factory=dict)
    c: np.ndarray | None = None
    c_prev: np.ndarray | None = None
    s: np.ndarray | None = None


@dataclass(frozen=True)
class Step:
    """One step of a cell from one state, with everything it computed (:meth:`CellKind.step`).

    Attributes
    ----------
    state : ndarray of shape (N, S)
        The new state, ``S = H`` (LSTM: ``2H``, ``(h, c)`` concatenated, ``h`` first).
    record : Record
        The step's gates (and, with the Jacobian, pre-activations), each of shape (1, N, H); None
        for array-API input (:mod:`hiddenstate.xp`), whose step keeps no record.
    jacobian : ndarray of shape (N, S, S) or None
        ``d state_new / d state`` (row ``i`` is the gradient of ``state_new[:, i]``); None when
        :meth:`CellKind.step` was asked for the map alone.
    """

    state: np.ndarray
    record: Record
    jacobian: np.ndarray


@dataclass(frozen=True)
class CellKind:
    """The definition of one kind of recurrent cell (see the module docstring).

    Attributes
    ----------
    name : str
        ``"rnn"``, ``"gru"`` or ``"lstm"``: the key in :data:`hiddenstate.classic.cells.KINDS`.
    blocks : tuple of str
        Names of the G row blocks of the weights, in order (``("h",)``, ``("r", "z", "n")``,
        ``("i", "f", "g", "o")``).
    gates : tuple of str
        Names of the recorded gate values (:attr:`Record.gates`).
    preacts : tuple of str
        Names of the recorded pre-activations.
    sigmoid_gates : tuple of str
        The gates in [0, 1] (what gate statistics measure).
    keep_gate : str or None
        The gate whose value near 1 carries the state unchanged (GRU ``z``, LSTM ``f``).
    has_cell : bool
        The state is a pair ``(h, c)`` (LSTM).
    options : tuple of str
        Constructor options that change the math (``nonlinearity``, ``reset_after``).
    scan_forward, scan_backward : callable
        The kernels (contract in the module docstring).
    recorded : callable
        ``recorded(cache) -> Record`` from a forward cache.
    jacobian : callable
        ``jacobian(record, w_hh, **options) -> ndarray (..., S, S)`` for record arrays of shape
        (..., H) (any leading axes, e.g. (K, N)): ``d state_t / d state_{t-1}``.
    bounds : callable
        ``bounds(H, **options) -> list of (low, high)`` of length S: a box that contains every
        state reachable from a state inside it (None: unbounded).
    recurrent : bool, default True
        The kind has recurrent weights ``weight_hh`` (G*H, H) and ``bias_hh`` (G*H,). False for
        the linear recurrences whose gates read the input only (minGRU, minLSTM): their
        kernels get ``w_hh = b_hh = None`` and return ``d_w_hh = d_b_hh = None``.
    shares_hs : bool, default True
        ``scan_backward`` reads the ``hs`` array ``scan_forward`` returned (the Elman kernel's
        ``hs`` is its activations), so the engine copies ``hs`` before handing it out as a
        layer's output; False for kernels whose backward reads buffers of their own only (GRU,
        LSTM), which saves that copy.
    """

    name: str
    blocks: tuple
    gates: tuple
    preacts: tuple
    sigmoid_gates: tuple
    keep_gate: str | None
    has_cell: bool
    options: tuple
    scan_forward: Callable
    scan_backward: Callable
    recorded: Callable
    jacobian: Callable
    bounds: Callable
    recurrent: bool = True
    shares_hs: bool = True

    @property
    def num_gates(self) -> int:
        """G, the number of gate blocks in the weights."""
        return len(self.blocks)

    def state_size(self, hidden_size: int) -> int:
        """S, the size of the state as one vector: H, or 2H for a cell whose state is ``(h, c)``.

        Parameters
        ----------
        hidden_size : int
            H.

        Returns
        -------
        int
            ``hidden_size``, or ``2 * hidden_size`` when :attr:`has_cell`.
        """
        return 2 * hidden_size if self.has_cell else hidden_size

    def step(self, weights: dict, x: np.ndarray, state: np.ndarray, *, jacobian: bool = True, **options) -> Step:
        """One step ``state -> F(state)`` with input ``x``, its record and its Jacobian.

        Runs :attr:`scan_forward` for T = 1 (so the map is exactly the layers' map).

        Parameters
        ----------
        weights : dict
            ``weight_ih`` (G*H, I), ``weight_hh`` (G*H, H), optional ``bias_ih``, ``bias_hh``
            (G*H,), in torch's layout.
        x : ndarray of shape (N, I)
        state : ndarray of shape (N, S)
            ``h``, or ``(h, c)`` concatenated for the LSTM.
        jacobian : bool, default True
            Also compute the step Jacobian (``Step.jacobian`` is None otherwise: the map alone
            costs O(N H G) instead of O(N S^2)).
        **options
            This kind's :attr:`options` (e.g. ``reset_after=True``).

        Returns
        -------
        Step
        """
        if is_foreign(x):  # a torch tensor, a CuPy array, ...: the reference step in its library (no record)
            new, J = xp_step.step_map(self, weights, x, state, jacobian=jacobian, **options)
            return Step(state=new, record=None, jacobian=J)
        jacobian = boolean("jacobian", jacobian)
        w_hh = weights.get("weight_hh")
        H = weights["weight_ih"].shape[0] // self.num_gates
        s = np.ascontiguousarray(state)
        s0 = (s[:, :H], s[:, H:]) if self.has_cell else s
        with FloatGuard() as guard:
            xw = x @ weights["weight_ih"].T  # (N, G*H)
            if weights.get("bias_ih") is not None:
                xw = xw + weights["bias_ih"]
            _, final, cache = self.scan_forward(xw[None], s0, w_hh, weights.get("bias_hh"), record=jacobian, **options)
            rec = self.recorded(cache)
            J = None
            if jacobian:
                J = self.jacobian(Record(*(_first(v) for v in (rec.h, rec.h_prev, rec.gates, rec.preacts, rec.c,
                                                                   rec.c_prev, rec.s))), w_hh, **options)
            new = np.concatenate(final, axis=1) if self.has_cell else final
        if guard.tripped:  # only then are the results read again
            guard.check("the step", (("state", new), ("jacobian", J)), "The state or the input is too large; scale it down.")
        return Step(state=new, record=rec, jacobian=J)


def _first(v):
    """Step 0 of a record entry (arrays (1, N, H) -> (N, H); dicts entry-wise; None stays)."""
    if v is None:
        return None
    if isinstance(v, dict):
        return {k: a[0] for k, a in v.items()}
    return v[0]


class OfKind:
    """What a cell or layer knows from its class attribute ``kind`` (a :class:`CellKind`)."""

    kind: CellKind

    @property
    def num_gates(self) -> int:
        """G, the number of gate blocks (1 RNN, 3 GRU, 4 LSTM)."""
        return self.kind.num_gates

    @property
    def is_lstm(self) -> bool:
        """True when the state is a pair ``(h, c)``."""
        return self.kind.has_cell

    @property
    def options(self) -> dict:
        """The kind's options of this object (``{"nonlinearity": "tanh"}``, ``{"reset_after": False}``, ``{}``)."""
        return {name: getattr(self, name) for name in self.kind.options}


class Cell(OfKind):
    """One recurrence step of a cell kind with its own parameters (base of the three cells).

    Subclasses set :attr:`kind` (a :class:`CellKind`); the constructor arguments and the
    parameters are torch's (``torch.nn.RNNCell``/``GRUCell``/``LSTMCell``).

    Parameters
    ----------
    input_size : int
        I, features per input vector.
    hidden_size : int
        H, hidden units.
    bias : bool, default True
        Whether ``bias_ih`` and ``bias_hh`` (each (G*H,)) exist.
    dtype : {float64, float32}, default float64
        Dtype of the parameters and of every result.
    rng : numpy.random.Generator, optional
        Draws the initial weights from U(-1/sqrt(H), 1/sqrt(H)) like PyTorch.

    Attributes
    ----------
    kind : CellKind
        What kind of cell this is (a class attribute).
    params : dict of str to ndarray
        ``weight_ih`` (G*H, I), ``weight_hh`` (G*H, H), ``bias_ih`` (G*H,), ``bias_hh`` (G*H,).

    Raises
    ------
    TypeError, ValueError
        Sizes that are not positive integers, a non-bool ``bias``, a dtype other than
        float32/float64, an ``rng`` that is not a Generator.
    """

    kind: CellKind

    def __init__(self, input_size, hidden_size, *, bias=True, dtype=np.float64, rng=None):
        self.input_size = positive_int("input_size", input_size)
        self.hidden_size = positive_int("hidden_size", hidden_size)
        self.bias = boolean("bias", bias)
        self.dtype = float_dtype("dtype", dtype)
        rng = generator(rng)
        G, H, I = self.kind.num_gates, self.hidden_size, self.input_size
        check_memory(f"{type(self).__name__}(input_size={I}, hidden_size={H})", float(G * H * (I + H + 2)) * self.dtype.itemsize,
                     "Use smaller sizes.")
        rec = self.kind.recurrent
        self.params = {"weight_ih": uniform_init(rng, (G * H, I), H, self.dtype)}
        if rec:
            self.params["weight_hh"] = uniform_init(rng, (G * H, H), H, self.dtype)
        if self.bias:
            self.params["bias_ih"] = uniform_init(rng, (G * H,), H, self.dtype)
            if rec:
                self.params["bias_hh"] = uniform_init(rng, (G * H,), H, self.dtype)

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return f"{type(self).__name__}({self.input_size}, {self.hidden_size}{opts})"

    def _state(self, h, batch, unbatched):
        H = self.hidden_size
        legend = f"(H={H},)" if unbatched else f"(N={batch}, H={H})"
        n = None if unbatched else batch

        def one(name, v):
            if v is None:
                return np.zeros((1 if unbatched else batch, H), dtype=self.dtype)
            a = private(state_array(name, v, n, H, self.dtype, legend=legend), v)  # the cache's own copy
            return a[None] if unbatched else a

        if self.is_lstm:
            if h is None:
                return one("h", None), one("c", None)
            if not (isinstance(h, tuple) and len(h) == 2):
                raise TypeError(f"state must be a pair (h, c) for an LSTM cell; got {type(h).__name__}.")
            return one("h", h[0]), one("c", h[1])
        return one("h", h)

    def forward(self, x, h=None):
        """One step, keeping what :meth:`backward` needs.

        Parameters
        ----------
        x : ndarray of shape (N, I) or (I,), float
        h : ndarray of shape (N, H) or (H,), optional
            Previous state; None means zeros. LSTM: a pair ``(h, c)``.

        Returns
        -------
        h_new : ndarray of shape (N, H) or (H,)
            LSTM: a pair ``(h_new, c_new)``.
        cache : CellCache
            Pass it to :meth:`backward` (it holds private copies of ``x`` and the weights).

        Raises
        ------
        ValueError, TypeError
            Shapes, dtypes or NaN/Inf in ``x`` or ``h``; parameters changed by hand into
            something of the wrong type, dtype or shape, or with NaN/Inf (the message names the
            key).
        """
        if is_foreign(x):  # a torch tensor, a CuPy array, ...: computed in its library (hiddenstate.xp)
            return xp_step.cell_forward(self, x, h)
        given = x
        x = float_array("x", x, dtype=self.dtype)
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
            raise ValueError(f"x must have shape (N, I={self.input_size}) or (I={self.input_size},); got {shape_str(x.shape)}.")
        unbatched = x.ndim == 1
        x2 = private(x[None] if unbatched else x, given)  # the backward reads it: never the caller's array
        state0 = self._state(h, x2.shape[0], unbatched)
        self.check_params(finite=False)  # values: through the result below
        p = self.params
        w_ih = p["weight_ih"].copy()  # the step's own weights: later changes to params do not reach backward
        w_hh, b_hh = (None if p.get(k) is None else p[k].copy() for k in ("weight_hh", "bias_hh"))
        with FloatGuard() as guard:
            xw = x2 @ w_ih.T  # (N, G*H)
            if self.bias:
                xw += p["bias_ih"]
            _, final, kcache = self.kind.scan_forward(xw[None], state0, w_hh, b_hh, **self.options)
        parts = final if self.is_lstm else (final,)
        if not all(np.isfinite(s).all() for s in parts):  # a NaN/Inf parameter, or an overflow
            self.check_params()  # names the parameter, if it is one
            guard.tripped = True
            guard.check("the step", zip(("h_new", "c_new"), parts),
                        "The input, state or weights are too large for this dtype; scale them down.")
        if unbatched:
            final = tuple(s[0] for s in final) if self.is_lstm else final[0]
        return final, CellCache(x=x2, kernel=kcache, unbatched=unbatched, weight_ih=w_ih, owner=weakref.ref(self),
                                keys=tuple(p))

    def check_params(self, finite: bool = True) -> None:
        """Check :attr:`params`: keys, ndarray, dtype, shape and (``finite``) NaN/Inf.

        Every step checks keys, types, dtypes and shapes, and the finiteness of its result (one
        array instead of four): a NaN or Inf result runs the full check, which names the key.

        Parameters
        ----------
        finite : bool, default True
            Also check the values for NaN/Inf.

        Raises
        ------
        TypeError
            A parameter replaced by something that is not an ndarray, or of another dtype.
        ValueError
            A missing or unexpected key, a wrong shape, a NaN or Inf (the message names the key).
        """
        spec = self.__dict__.get("_param_spec")
        if spec is None:
            spec = self._param_spec = param_shapes(self.kind.num_gates, self.hidden_size, {"": self.input_size},
                                                   bias=self.bias, recurrent=self.kind.recurrent)
        check_params(self.params, spec, self.dtype, type(self).__name__, finite=finite)

    def __call__(self, x, h=None):
        """``h_new = cell(x, h)``: one step without keeping a cache (see :meth:`forward`).

        Parameters
        ----------
        x : ndarray of shape (N, I) or (I,), float
            Input of the step.
        h : ndarray of shape (N, H) or (H,), optional
            Previous state; None means zeros. LSTM: a pair ``(h, c)``.

        Returns
        -------
        ndarray of shape (N, H) or (H,)
            The new state; LSTM: a pair ``(h_new, c_new)``.

        Raises
        ------
        ValueError, TypeError
            As :meth:`forward`.
        """
        return self.forward(x, h)[0]

    def backward(self, cache, d_out):
        """Gradients of one step.

        Parameters
        ----------
        cache : CellCache
            From this cell's :meth:`forward`.
        d_out : ndarray of shape (N, H) or (H,), or None
            Gradient of the loss with respect to the new state, exactly its shape (None: zeros;
            LSTM: a tuple ``(dh, dc)``, either part None).

        Returns
        -------
        grads : dict
            Same keys and shapes as :attr:`params`.
        dx : ndarray shaped like ``x``
        dh : ndarray shaped like ``h`` (LSTM: a pair ``(dh, dc)``)

        Raises
        ------
        TypeError
            ``cache`` is not what this cell's :meth:`forward` returned; an LSTM ``d_out`` that is
            not a pair; a gradient that is not a float array.
        ValueError
            A cache of another cell; a gradient of another shape than the new state (it is never
            broadcast over the batch) or with NaN/Inf.
        """
        if isinstance(cache, xp_step.XPCellCache):  # from an array-API forward: gradients in its library
            return xp_step.cell_backward(self, cache, d_out)
        if not isinstance(cache, CellCache):
            raise TypeError(f"cache must be the cache that {type(self).__name__}.forward returned; got "
                            f"{type(cache).__name__}.")
        cache.check_owner(self)
        x2, kcache, unbatched = cache.x, cache.kernel, cache.unbatched
        d_out = cache.upstream(d_out, self.hidden_size, self.dtype, self.is_lstm)
        with FloatGuard() as guard:
            dxw, dw_hh, db_hh, dstate = self.kind.scan_backward(kcache, None, d_out)
            dxw = dxw[0]  # (N, G*H)
            grads = {"weight_ih": dxw.T @ x2, "weight_hh": dw_hh}
            if self.bias:
                grads["bias_ih"] = dxw.sum(axis=0)
                grads["bias_hh"] = db_hh
            grads = {k: grads[k] for k in cache.keys}  # a kind without recurrent weights has no weight_hh/bias_hh
            dx = dxw @ cache.weight_ih
        if guard.tripped:  # only then are the results read again
            self.check_params()  # an infinite weight gives a finite (saturated) step but NaN gradients: name it
            guard.check("the backward step", (*grads.items(), ("dx", dx), *zip(("dh", "dc"), dstate if self.is_lstm else (dstate,))),
                        "The upstream gradient is too large; scale the loss down.")
        if unbatched:
            dx = dx[0]
            dstate = tuple(s[0] for s in dstate) if self.is_lstm else dstate[0]
        return grads, dx, dstate
