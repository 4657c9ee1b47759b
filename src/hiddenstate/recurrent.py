"""The engine of every sequence layer: validate once, unroll any cell kind over layers and directions, BPTT.

:class:`RecurrentLayer` knows nothing about a particular recurrence: it reads its subclass's
``kind`` (a :class:`~hiddenstate.cells.base.CellKind`) and calls that kind's scan kernels. The
two public steps of a forward pass are

* :meth:`RecurrentLayer.prepare` -> :class:`Prepared`: the validated, time-major input, the
  initial states, lengths, padding and reset masks (everything a run needs, checked once);
* :meth:`RecurrentLayer.run` -> ``(output, h_n, LayerCache)``: the unrolled computation, which
  can also record every gate (``record=True``) for :func:`hiddenstate.probe.trace`.

:meth:`RecurrentLayer.forward` is the two in a row, :meth:`RecurrentLayer.backward` the exact
BPTT through a :class:`LayerCache`. The concrete layers are in :mod:`hiddenstate.layers`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from hiddenstate import state as _state
from hiddenstate.params import load_into, uniform_init
from hiddenstate.ragged import reverse_index, reverse_time
from hiddenstate.validation import (
    boolean,
    drop_probability,
    float_array,
    float_dtype,
    generator,
    positive_int,
    shape_str,
    state_array,
)
from hiddenstate.validation import lengths as check_lengths

__all__ = ["DirectionCache", "DirectionalState", "LayerCache", "Prepared", "RecurrentLayer"]


class DirectionalState(NamedTuple):
    """A final state split by direction, so nobody has to index ``h_n[-2]`` / ``h_n[-1]`` by hand.

    Attributes
    ----------
    forward : ndarray of shape (L, N, H)
        Final state of the forward direction of every layer.
    backward : ndarray of shape (L, N, H) or None
        Final state of the backward direction (state after reading each row's first step),
        None for a unidirectional layer.
    """

    forward: np.ndarray
    backward: np.ndarray | None


class Prepared(NamedTuple):
    """A validated layer input, time-major, ready for :meth:`RecurrentLayer.run`.

    Attributes
    ----------
    x : ndarray of shape (T, N, I)
        C-contiguous, of the layer's dtype (unbatched input gets N = 1, batch_first is undone).
    state0 : ndarray of shape (L*D, N, H), or a pair of them (LSTM)
        The initial state of every layer and direction (a private copy).
    learned : bool
        ``state0`` is the layer's learned ``h0`` (``learn_h0=True`` and no ``h0`` given).
    lengths : ndarray of int64, shape (N,), or None
        Valid steps per column (None: every column has length T).
    keep : ndarray of bool, shape (T, N, 1), or None
        False at padded steps (None when nothing is padded).
    reset : ndarray of bool, shape (T, N), or None
        True where a column restarts from its initial state (None when it never does).
    unbatched : bool
        The input was (T, I); results drop the batch axis again.
    """

    x: np.ndarray
    state0: object
    learned: bool
    lengths: np.ndarray | None
    keep: np.ndarray | None
    reset: np.ndarray | None
    unbatched: bool

    @property
    def mask(self) -> np.ndarray:
        """Valid steps, bool (T, N)."""
        T, N = self.x.shape[:2]
        return np.ones((T, N), dtype=bool) if self.keep is None else self.keep[:, :, 0].copy()


@dataclass(frozen=True)
class DirectionCache:
    """What one layer and direction of a run kept for the backward pass.

    Attributes
    ----------
    x : ndarray of shape (T, N, I_k)
        The input this direction read, in its processing order.
    kernel : object
        The cache of the kind's ``scan_forward`` (read it with ``kind.recorded``).
    weight_mask : ndarray of shape (G*H, H) or None
        The DropConnect mask applied to ``weight_hh`` (``weight_drop``), if any.
    reset : ndarray of bool, shape (T, N, 1), or None
        The reset mask in this direction's processing order.
    """

    x: np.ndarray
    kernel: object
    weight_mask: np.ndarray | None
    reset: np.ndarray | None


@dataclass(frozen=True)
class LayerCache:
    """Everything :meth:`RecurrentLayer.backward` needs from one :meth:`RecurrentLayer.run`.

    Attributes
    ----------
    directions : list of DirectionCache
        Index ``layer * D + direction`` (the order of ``h_n``'s first axis).
    dropout_masks : list of (ndarray or None)
        The inter-layer dropout mask applied to each layer's output (T, N, D*H).
    prepared : Prepared
        The input of the run.
    reverse : ndarray of int, shape (T, N), or None
        The time index of the backward direction (:func:`hiddenstate.ragged.reverse_index`).
    """

    directions: list
    dropout_masks: list
    prepared: Prepared
    reverse: np.ndarray | None


class RecurrentLayer:
    """Shared engine of :class:`~hiddenstate.RNN`, :class:`~hiddenstate.GRU` and :class:`~hiddenstate.LSTM`.

    Subclasses set the class attribute ``kind`` (a :class:`~hiddenstate.cells.base.CellKind`)
    and store its options (``nonlinearity``, ``reset_after``) as attributes before calling this
    constructor. The parameters of the subclasses are documented there.
    """

    kind = None

    def __init__(self, input_size, hidden_size, num_layers=1, *, bias=True, batch_first=False,
                 bidirectional=False, dropout=0.0, weight_drop=0.0, learn_h0=False, dtype=np.float64, rng=None):
        self.input_size = positive_int("input_size", input_size)
        self.hidden_size = positive_int("hidden_size", hidden_size)
        self.num_layers = positive_int("num_layers", num_layers)
        self.bias = boolean("bias", bias)
        self.batch_first = boolean("batch_first", batch_first)
        self.bidirectional = boolean("bidirectional", bidirectional)
        self.learn_h0 = boolean("learn_h0", learn_h0)
        self.dropout = drop_probability("dropout", dropout)
        self.weight_drop = drop_probability("weight_drop", weight_drop)
        self.dtype = float_dtype("dtype", dtype)
        self._rng = generator(rng)
        self.num_directions = 2 if self.bidirectional else 1
        G, H = self.num_gates, self.hidden_size
        self.params: dict[str, np.ndarray] = {}
        for layer in range(self.num_layers):
            width = self.input_size if layer == 0 else H * self.num_directions
            for d in range(self.num_directions):
                sfx = self.suffix(layer, d)
                self.params["weight_ih" + sfx] = uniform_init(self._rng, (G * H, width), H, self.dtype)
                self.params["weight_hh" + sfx] = uniform_init(self._rng, (G * H, H), H, self.dtype)
                if self.bias:
                    self.params["bias_ih" + sfx] = uniform_init(self._rng, (G * H,), H, self.dtype)
                    self.params["bias_hh" + sfx] = uniform_init(self._rng, (G * H,), H, self.dtype)
        if self.learn_h0:
            LD = self.num_layers * self.num_directions
            self.params["h0"] = np.zeros((LD, H), dtype=self.dtype)
            if self.is_lstm:
                self.params["c0"] = np.zeros((LD, H), dtype=self.dtype)

    # -- what kind of layer --------------------------------------------------------------------
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
        """The kind's options of this layer (``{"nonlinearity": "tanh"}``, ``{"reset_after": False}``, ``{}``)."""
        return {name: getattr(self, name) for name in self.kind.options}

    @staticmethod
    def suffix(layer: int, direction: int) -> str:
        """The parameter-name suffix of one layer and direction: ``"_l0"``, ``"_l1_reverse"``."""
        return f"_l{layer}" + ("_reverse" if direction else "")

    def weights(self, layer: int, direction: int) -> dict:
        """This layer's and direction's ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh`` (None without bias).

        The arrays are the parameters themselves (not copies).
        """
        sfx = self.suffix(layer, direction)
        return {k: self.params.get(k + sfx) for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return (f"{type(self).__name__}({self.input_size}, {self.hidden_size}, num_layers={self.num_layers}{opts}, "
                f"bidirectional={self.bidirectional}, dtype={self.dtype})")

    # -- parameters ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """A copy of :attr:`params` (torch names; ``torch.nn.GRU.load_state_dict`` accepts the recurrent part)."""
        return {k: v.copy() for k, v in self.params.items()}

    def load_state_dict(self, state: dict) -> None:
        """Copy every parameter in from ``state``, in place; keys and shapes must match exactly.

        The existing arrays are overwritten (cast to the layer's dtype), so every alias of
        :attr:`params`, e.g. a :class:`~hiddenstate.CharRNN`'s or an optimizer's, sees the new
        values. Nothing is loaded if anything does not fit.

        Raises
        ------
        ValueError
            A key is missing or unexpected, an array has the wrong shape, or a value is NaN/Inf.
        """
        load_into(self.params, state, type(self).__name__)

    def initial_state(self, batch_size: int, kind: str = "zeros", **options):
        """Build an initial state of the right structure for ``batch_size`` sequences (cf. Flax ``initialize_carry``).

        Parameters
        ----------
        batch_size : int
            N.
        kind : {"zeros", "normal", "constant", "learned"}, default "zeros"
            See :func:`hiddenstate.state.initial_state`; ``"learned"`` broadcasts the layer's
            ``h0`` (and ``c0``) parameters (requires ``learn_h0=True``).
        **options
            ``std``, ``value``, ``rng`` for :func:`hiddenstate.state.initial_state`.

        Returns
        -------
        ndarray of shape (L*D, N, H), or a pair of them for the LSTM
        """
        N = positive_int("batch_size", batch_size)
        shape = (self.num_layers * self.num_directions, N, self.hidden_size)
        if kind == "learned":
            if not self.learn_h0:
                raise ValueError("kind='learned' needs a layer built with learn_h0=True; got learn_h0=False.")
            h = np.repeat(self.params["h0"][:, None, :], N, axis=1)
            return (h, np.repeat(self.params["c0"][:, None, :], N, axis=1)) if self.is_lstm else h
        make = lambda: _state.initial_state(shape, kind, dtype=self.dtype, **options)  # noqa: E731
        return (make(), make()) if self.is_lstm else make()

    def split_directions(self, h_n) -> DirectionalState:
        """Split a final state (L*D, N, H) into named forward / backward parts (each (L, N, H))."""
        h = np.asarray(h_n)
        LD = self.num_layers * self.num_directions
        if h.ndim < 2 or h.shape[0] != LD:
            raise ValueError(f"h_n must have shape (L*D={LD}, N, H); got {shape_str(h.shape)}.")
        if self.num_directions == 1:
            return DirectionalState(h, None)
        return DirectionalState(h[0::2], h[1::2])

    # -- preparation ---------------------------------------------------------------------------
    def prepare(self, x, h0=None, *, lengths=None, reset=None) -> Prepared:
        """Validate a forward pass's inputs once and bring them to the time-major form :meth:`run` uses.

        Parameters are those of :meth:`forward`.

        Returns
        -------
        Prepared

        Raises
        ------
        ValueError, TypeError
            As :meth:`forward`.
        """
        x = float_array("x", x, dtype=self.dtype)
        I, H = self.input_size, self.hidden_size
        LD = self.num_layers * self.num_directions
        if x.ndim == 2:
            unbatched = True
            if x.shape[1] != I:
                raise ValueError(f"x must have shape (T, I={I}) when unbatched; got {shape_str(x.shape)}.")
            x = x[:, None, :]
        elif x.ndim == 3:
            unbatched = False
            if x.shape[2] != I:
                legend = f"(N, T, I={I})" if self.batch_first else f"(T, N, I={I})"
                raise ValueError(f"x must have shape {legend}; got {shape_str(x.shape)}.")
            if self.batch_first:
                x = x.transpose(1, 0, 2)
        else:
            legend = "(N, T, I)" if self.batch_first else "(T, N, I)"
            raise ValueError(f"x must have shape {legend} or unbatched (T, I); got {shape_str(x.shape)}.")
        x = np.ascontiguousarray(x)
        T, N, _ = x.shape

        def state(name, value, learned_key):
            if value is None:
                if self.learn_h0:
                    return np.repeat(self.params[learned_key][:, None, :], N, axis=1), True
                return np.zeros((LD, N, H), dtype=self.dtype), False
            if unbatched:
                a = state_array(name, value, None, H, self.dtype, lead=(LD,), legend=f"(L*D={LD}, H={H})")
                return a[:, None, :].copy(), False
            legend = f"(num_layers*num_directions={LD}, N={N}, H={H})"
            return state_array(name, value, N, H, self.dtype, lead=(LD,), legend=legend).copy(), False

        if self.is_lstm:
            if h0 is None:
                hc = (None, None)
            elif isinstance(h0, tuple) and len(h0) == 2:
                hc = h0
            else:
                raise TypeError(f"h0 must be None or a pair (h0, c0) for an LSTM; got {type(h0).__name__}.")
            (h, learned), (c, _) = state("h0", hc[0], "h0"), state("c0", hc[1], "c0")
            state0 = (h, c)
        else:
            state0, learned = state("h0", h0, "h0")

        keep = None
        lens = None
        if lengths is not None:
            if unbatched:
                raise ValueError("lengths must be None for unbatched (T, I) input; add a batch axis to use lengths.")
            lens = check_lengths(lengths, T, N)
            if (lens < T).any():
                keep = (np.arange(T)[:, None] < lens[None, :])[:, :, None]  # (T, N, 1)
        rmask = None
        if reset is not None:
            r = np.asarray(reset)
            if r.dtype != bool:
                raise TypeError(f"reset must be a bool array; got dtype {r.dtype}.")
            want = (T,) if unbatched else ((N, T) if self.batch_first else (T, N))
            if r.shape != want:
                legend = "(T,)" if unbatched else ("(N, T)" if self.batch_first else "(T, N)")
                raise ValueError(f"reset must have shape {legend}={shape_str(want)}; got {shape_str(r.shape)}.")
            r = r[:, None] if unbatched else (r.T if self.batch_first else r)
            if keep is not None:
                r = r & keep[:, :, 0]
            if r.any():
                rmask = np.ascontiguousarray(r)
        return Prepared(x, state0, learned, lens, keep, rmask, unbatched)

    # -- forward -------------------------------------------------------------------------------
    def forward(self, x, h0=None, *, lengths=None, reset=None, training=False, rng=None):
        """Run the layer over a sequence and keep what :meth:`backward` needs.

        Parameters
        ----------
        x : ndarray of shape (T, N, I), (N, T, I) if ``batch_first``, or (T, I), float
            Input sequence; cast to the layer's dtype.
        h0 : ndarray of shape (L*D, N, H) or (L*D, H) unbatched, optional
            Initial state (LSTM: pair ``(h0, c0)``). None: zeros, or the learned initial state.
            Pass the ``h_n`` of the previous chunk to carry the state (truncated BPTT); its
            batch size must match ``x``; it is never sliced or broadcast.
        lengths : array_like of int, shape (N,), optional
            Valid steps of each column, in any order, each in [0, T]. Outputs past a column's
            length are zero and ``h_n`` is the state at its own last valid step; a length-0
            column keeps its ``h0``.
        reset : ndarray of bool, shape (T, N) ((N, T) if ``batch_first``), optional
            Where ``reset[t, n]`` is True, column n starts step t from its initial state instead
            of its previous state, and no gradient flows back across that boundary.
        training : bool, default False
            Apply inter-layer dropout (when ``dropout > 0``) and DropConnect on the recurrent
            weights (when ``weight_drop > 0``).
        rng : numpy.random.Generator, optional
            Draws the dropout masks (default: the generator given at construction).

        Returns
        -------
        output : ndarray of shape (T, N, D*H) (batch_first: (N, T, D*H); unbatched: (T, D*H))
        h_n : ndarray of shape (L*D, N, H) (unbatched: (L*D, H)); LSTM: pair ``(h_n, c_n)``
        cache : LayerCache
            Pass it to :meth:`backward`.

        Raises
        ------
        ValueError
            Shapes that do not match the legend above, NaN/Inf, lengths out of range.
        TypeError
            Non-float inputs, non-integer lengths, non-bool reset.
        """
        prepared = self.prepare(x, h0, lengths=lengths, reset=reset)
        return self.run(prepared, training=training, rng=rng)

    def run(self, prepared: Prepared, *, training=False, rng=None, record=False):
        """Unroll the layer over a :class:`Prepared` input (the body of :meth:`forward`).

        Parameters
        ----------
        prepared : Prepared
            From :meth:`prepare`.
        training : bool, default False
            As :meth:`forward`.
        rng : numpy.random.Generator, optional
            As :meth:`forward`.
        record : bool, default False
            Let the kernels also keep every pre-activation (for :func:`hiddenstate.probe.trace`).

        Returns
        -------
        output, h_n, cache
            As :meth:`forward`.
        """
        with np.errstate(under="ignore"):  # gradients and gates may underflow to 0; that is exact enough
            return self._run(prepared, boolean("training", training), rng, boolean("record", record))

    def _run(self, prepared, training, rng, record):
        x, state0, _, lens, keep, rmask, unbatched = prepared
        T, N, _ = x.shape
        H, D, L = self.hidden_size, self.num_directions, self.num_layers
        p = self.params
        fwd = self.kind.scan_forward
        opts = self.options
        idx = reverse_index(T, lens) if (D == 2 and lens is not None) else None
        rmask_rev = None
        if D == 2 and rmask is not None:
            shifted = np.zeros_like(rmask)
            shifted[:-1] = rmask[1:]  # a boundary before t is, read backwards, a boundary before t-1
            if keep is not None:
                shifted &= keep[:, :, 0]
            rmask_rev = reverse_time(shifted, idx)[:, :, None]
        rm = None if rmask is None else rmask[:, :, None]
        use_dropout = training and self.dropout > 0.0 and L > 1
        use_weight_drop = training and self.weight_drop > 0.0
        drng = generator(rng) if rng is not None else self._rng
        finals = [None] * (L * D)
        directions, masks = [], []
        inp = x
        for layer in range(L):
            outs = []
            for d in range(D):
                sfx = self.suffix(layer, d)
                xin = inp if d == 0 else reverse_time(inp, idx)
                xw = (xin.reshape(T * N, xin.shape[2]) @ p["weight_ih" + sfx].T).reshape(T, N, self.num_gates * H)
                if self.bias:
                    xw += p["bias_ih" + sfx]
                k = layer * D + d
                s0 = (state0[0][k], state0[1][k]) if self.is_lstm else state0[k]
                w_hh, w_mask = p["weight_hh" + sfx], None
                if use_weight_drop:  # one DropConnect mask for the whole chunk (Merity et al. 2018)
                    w_mask = ((drng.random(w_hh.shape) >= self.weight_drop).astype(self.dtype)
                              / self.dtype.type(1.0 - self.weight_drop))  # (G*H, H)
                    w_hh = w_hh * w_mask
                r_d = rm if d == 0 else rmask_rev
                hs, final, kc = fwd(xw, s0, w_hh, p.get("bias_hh" + sfx), keep, r_d, record=record, **opts)
                finals[k] = final
                out = hs if keep is None else np.where(keep, hs, 0.0)
                outs.append(out if d == 0 else reverse_time(out, idx))
                directions.append(DirectionCache(x=xin, kernel=kc, weight_mask=w_mask, reset=r_d))
            out = outs[0] if D == 1 else np.concatenate(outs, axis=2)
            mask = None
            if use_dropout and layer < L - 1:
                mask = (drng.random(out.shape) >= self.dropout).astype(self.dtype) / (1.0 - self.dropout)
                out = out * mask
            masks.append(mask)
            inp = out
        output = inp
        if self.is_lstm:
            h_n = np.stack([f[0] for f in finals])
            c_n = np.stack([f[1] for f in finals])
        else:
            h_n = np.stack(finals)
        if unbatched:
            output = output[:, 0]
            h_n = h_n[:, 0]
            if self.is_lstm:
                c_n = c_n[:, 0]
        elif self.batch_first:
            output = output.transpose(1, 0, 2)
        cache = LayerCache(directions=directions, dropout_masks=masks, prepared=prepared, reverse=idx)
        return output, ((h_n, c_n) if self.is_lstm else h_n), cache

    def __call__(self, x, h0=None, *, lengths=None, reset=None):
        """``output, h_n = layer(x, h0)`` (inference; see :meth:`forward`)."""
        output, h_n, _ = self.forward(x, h0, lengths=lengths, reset=reset)
        return output, h_n

    # -- backward ------------------------------------------------------------------------------
    def backward(self, cache: LayerCache, d_output, d_h_n=None):
        """Exact backpropagation through time for a :meth:`forward` call.

        Parameters
        ----------
        cache : LayerCache
            From :meth:`forward`.
        d_output : ndarray shaped like ``output``, or None
            Gradient of the loss with respect to the output (None: zeros).
        d_h_n : ndarray shaped like ``h_n``, or None
            Gradient with respect to the final state (LSTM: pair ``(dh_n, dc_n)``, either may be
            None).

        Returns
        -------
        grads : dict
            Same keys and shapes as :attr:`params` (``h0``/``c0`` included when learned:
            the batch sum of the initial-state gradient when ``h0=None`` was used, else zero).
        dx : ndarray shaped like ``x``
        dh0 : ndarray shaped like ``h0`` (LSTM: pair ``(dh0, dc0)``)

        Raises
        ------
        ValueError
            A gradient whose shape does not match the forward result.
        """
        with np.errstate(under="ignore"):
            return self._backward(cache, d_output, d_h_n)

    def _backward(self, cache, d_output, d_h_n):
        prep = cache.prepared
        keep, idx, learned, unbatched = prep.keep, cache.reverse, prep.learned, prep.unbatched
        T, N = prep.x.shape[:2]
        H, D, L, G = self.hidden_size, self.num_directions, self.num_layers, self.num_gates
        LD = L * D
        p = self.params
        bwd = self.kind.scan_backward

        def as_tm(name, a, shape_tm):
            if a is None:
                return None
            a = float_array(name, a, dtype=self.dtype)
            if unbatched:
                a = a[:, None] if name == "d_output" else a[:, None, :]
            elif self.batch_first and name == "d_output":
                a = a.transpose(1, 0, 2)
            if a.shape != shape_tm:
                raise ValueError(f"{name} must have the shape of the forward result; got {shape_str(a.shape)} "
                                 f"(time-major), expected {shape_str(shape_tm)}.")
            return a

        dout = as_tm("d_output", d_output, (T, N, D * H))
        if self.is_lstm:
            dh_n, dc_n = (None, None) if d_h_n is None else d_h_n
            dh_n = as_tm("d_h_n", dh_n, (LD, N, H))
            dc_n = as_tm("d_c_n", dc_n, (LD, N, H))
        else:
            dh_n = as_tm("d_h_n", d_h_n, (LD, N, H))
        grads = {}
        dstate_h = np.zeros((LD, N, H), dtype=self.dtype)
        dstate_c = np.zeros((LD, N, H), dtype=self.dtype) if self.is_lstm else None
        for layer in range(L - 1, -1, -1):
            mask = cache.dropout_masks[layer]
            if dout is not None and mask is not None:
                dout = dout * mask
            dinp = None
            for d in range(D):
                sfx = self.suffix(layer, d)
                k = layer * D + d
                dc = cache.directions[k]
                xin = dc.x
                dhs = None
                if dout is not None:
                    dhs = dout[:, :, d * H:(d + 1) * H]
                    if keep is not None:
                        dhs = np.where(keep, dhs, 0.0)
                    dhs = np.ascontiguousarray(dhs) if d == 0 else reverse_time(dhs, idx)
                if self.is_lstm:
                    dfin = None
                    if dh_n is not None or dc_n is not None:
                        dfin = (None if dh_n is None else dh_n[k], None if dc_n is None else dc_n[k])
                else:
                    dfin = None if dh_n is None else dh_n[k]
                dxw, dw_hh, db_hh, ds0 = bwd(dc.kernel, dhs, dfin)
                dxw2 = dxw.reshape(T * N, G * H)
                grads["weight_ih" + sfx] = dxw2.T @ xin.reshape(T * N, xin.shape[2])
                grads["weight_hh" + sfx] = dw_hh if dc.weight_mask is None else dw_hh * dc.weight_mask
                if self.bias:
                    grads["bias_ih" + sfx] = dxw.sum(axis=1).sum(axis=0)
                    grads["bias_hh" + sfx] = db_hh
                dxin = (dxw2 @ p["weight_ih" + sfx]).reshape(T, N, xin.shape[2])
                if d == 1:
                    dxin = reverse_time(dxin, idx)
                dinp = dxin if dinp is None else dinp + dxin
                if self.is_lstm:
                    dstate_h[k], dstate_c[k] = ds0
                else:
                    dstate_h[k] = ds0
            dout = dinp
        dx = dout
        if self.learn_h0:
            grads["h0"] = dstate_h.sum(axis=1) if learned else np.zeros((LD, H), dtype=self.dtype)
            if self.is_lstm:
                grads["c0"] = dstate_c.sum(axis=1) if learned else np.zeros((LD, H), dtype=self.dtype)
        grads = {key: grads[key] for key in self.params}  # the parameters' order
        if unbatched:
            dx = dx[:, 0]
            dstate_h = dstate_h[:, 0]
            dstate_c = None if dstate_c is None else dstate_c[:, 0]
        elif self.batch_first:
            dx = dx.transpose(1, 0, 2)
        return grads, dx, ((dstate_h, dstate_c) if self.is_lstm else dstate_h)
