"""The engine of every sequence layer: validate once, unroll any cell kind over layers and directions, BPTT.

:class:`RecurrentLayer` knows nothing about a particular recurrence: it reads its subclass's
``kind`` (a :class:`~hiddenstate.classic.cells.base.CellKind`) and calls that kind's scan kernels. The
two public steps of a forward pass are

* :meth:`RecurrentLayer.prepare` -> :class:`Prepared`: the validated, time-major input, the
  initial states, lengths, padding and reset masks (everything a run needs, checked once);
* :meth:`RecurrentLayer.run` -> ``(output, h_n, LayerCache)``: the unrolled computation, which
  can also record every gate (``record=True``) for :func:`hiddenstate.probe.trace`.

:meth:`RecurrentLayer.forward` is the two in a row, :meth:`RecurrentLayer.backward` the exact
BPTT through a :class:`LayerCache`. The concrete layers are in :mod:`hiddenstate.classic.layers`.
"""

from __future__ import annotations

import numpy as np

from hiddenstate import state as _state
from hiddenstate.classic.cells.base import OfKind
from hiddenstate.classic.prepared import DirectionalState, LayerCache, Prepared, prepare_input
from hiddenstate.classic.unroll import backprop, unroll
from hiddenstate.core.functional import FloatGuard
from hiddenstate.core.params import check_params, load_into, param_shapes, uniform_init
from hiddenstate.core.resources import check_memory
from hiddenstate.core.validation import (
    boolean,
    drop_probability,
    float_dtype,
    generator,
    positive_int,
    shape_str,
)
from hiddenstate.xp import layer as xp_layer
from hiddenstate.xp.arrays import is_foreign

__all__ = ["RecurrentLayer"]

_TOO_LARGE = "The inputs or the weights are too large for this dtype; scale them down."


def _parts(state):
    """``(h,)`` or the LSTM's ``(h, c)``."""
    return state if isinstance(state, tuple) else (state,)


class RecurrentLayer(OfKind):
    """Shared engine of :class:`~hiddenstate.RNN`, :class:`~hiddenstate.GRU` and :class:`~hiddenstate.LSTM`.

    Subclasses set the class attribute ``kind`` (a :class:`~hiddenstate.classic.cells.base.CellKind`)
    and store its options (``nonlinearity``, ``reset_after``) as attributes before calling this
    constructor; each subclass documents its own equations and options. G below is
    ``kind.num_gates`` (1 RNN, 3 GRU, 4 LSTM), D the number of directions.

    Parameters
    ----------
    input_size : int
        I, features of each input vector (layer 0 reads I_0 = I, layer k > 0 reads I_k = D*H).
    hidden_size : int
        H, hidden units per layer and direction.
    num_layers : int, default 1
        L, stacked layers.
    bias : bool, default True
        Whether ``bias_ih_l{k}`` and ``bias_hh_l{k}`` (G*H,) exist.
    batch_first : bool, default False
        Input and output as (N, T, features) instead of (T, N, features).
    bidirectional : bool, default False
        D = 2: a second direction (parameter suffix ``_reverse``) reads each sequence backwards
        within its length.
    dropout : float in [0, 1), default 0
        Inverted dropout on every layer's output except the last, in ``training`` only.
    weight_drop : float in [0, 1), default 0
        DropConnect on ``weight_hh_l*`` (one mask per forward call), in ``training`` only.
    learn_h0 : bool, default False
        Add trainable initial states ``params["h0"]`` (and for a cell with ``(h, c)`` state
        ``params["c0"]``), each (L*D, H), initialised to zeros.
    dtype : {float64, float32}, default float64
        Dtype of the parameters and of every result.
    rng : numpy.random.Generator, optional
        Draws the initial parameters from U(-1/sqrt(H), 1/sqrt(H)) and, by default, the dropout
        masks. None: a fresh unseeded generator.

    Attributes
    ----------
    kind : CellKind
        Set by the subclass (None here).
    params : dict of str to ndarray
        ``weight_ih_l{k}`` (G*H, I_k), ``weight_hh_l{k}`` (G*H, H), ``bias_ih_l{k}`` and
        ``bias_hh_l{k}`` (G*H,), with the suffix ``_reverse`` for the backward direction;
        ``h0`` (and ``c0``) (L*D, H) with ``learn_h0``.
    num_directions : int
        D.

    Raises
    ------
    TypeError
        A size that is not an integer, a flag that is not a bool, a dtype other than
        float32/float64, an ``rng`` that is not a ``numpy.random.Generator``.
    ValueError
        A size that is not positive, ``dropout`` or ``weight_drop`` outside [0, 1) or not a
        number.
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
        if self.weight_drop and not self.kind.recurrent:
            raise ValueError(f"weight_drop must be 0 for {type(self).__name__}, which has no recurrent weights "
                             f"to drop; got {self.weight_drop}. Use dropout between layers instead.")
        self.dtype = float_dtype("dtype", dtype)
        self._rng = generator(rng)
        self.num_directions = 2 if self.bidirectional else 1
        G, H = self.num_gates, self.hidden_size
        D, L = self.num_directions, self.num_layers
        size = L * D * G * H * (self.input_size + D * H + 2)  # an upper bound of the parameter count
        check_memory(f"{type(self).__name__}(input_size={self.input_size}, hidden_size={H}, num_layers={L})",
                     float(size) * self.dtype.itemsize, "Use smaller sizes.")
        self.params: dict[str, np.ndarray] = {}
        for layer in range(self.num_layers):
            width = self.input_size if layer == 0 else H * self.num_directions
            for d in range(self.num_directions):
                sfx = self.suffix(layer, d)
                self.params["weight_ih" + sfx] = uniform_init(self._rng, (G * H, width), H, self.dtype)
                if self.kind.recurrent:
                    self.params["weight_hh" + sfx] = uniform_init(self._rng, (G * H, H), H, self.dtype)
                if self.bias:
                    self.params["bias_ih" + sfx] = uniform_init(self._rng, (G * H,), H, self.dtype)
                    if self.kind.recurrent:
                        self.params["bias_hh" + sfx] = uniform_init(self._rng, (G * H,), H, self.dtype)
        if self.learn_h0:
            LD = self.num_layers * self.num_directions
            self.params["h0"] = np.zeros((LD, H), dtype=self.dtype)
            if self.is_lstm:
                self.params["c0"] = np.zeros((LD, H), dtype=self.dtype)

    @staticmethod
    def suffix(layer: int, direction: int) -> str:
        """The parameter-name suffix of one layer and direction: ``"_l0"``, ``"_l1_reverse"``.

        Parameters
        ----------
        layer : int
            Layer index ``k`` in ``0 .. L-1``.
        direction : int
            0 forward, 1 backward.

        Returns
        -------
        str
            ``"_l{layer}"``, plus ``"_reverse"`` for direction 1.
        """
        return f"_l{layer}" + ("_reverse" if direction else "")

    def weights(self, layer: int, direction: int) -> dict:
        """This layer's and direction's ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh`` (None without bias).

        The arrays are the parameters themselves (not copies).

        Parameters
        ----------
        layer : int
            Layer index ``k`` in ``0 .. L-1``.
        direction : int
            0 forward, 1 backward.

        Returns
        -------
        dict of str to (ndarray or None)
            ``weight_ih`` (G*H, I_k), ``weight_hh`` (G*H, H), ``bias_ih`` and ``bias_hh`` (G*H,)
            or None; the keys of :meth:`hiddenstate.classic.cells.base.CellKind.step`'s ``weights``.
        """
        sfx = self.suffix(layer, direction)
        return {k: self.params.get(k + sfx) for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return (f"{type(self).__name__}({self.input_size}, {self.hidden_size}, num_layers={self.num_layers}{opts}, "
                f"bidirectional={self.bidirectional}, dtype={self.dtype})")

    # -- parameters ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """A copy of :attr:`params` (torch names; ``torch.nn.GRU.load_state_dict`` accepts the recurrent part).

        Returns
        -------
        dict of str to ndarray
            Every parameter by name (see the class's Attributes), copied.
        """
        return {k: v.copy() for k, v in self.params.items()}

    def load_state_dict(self, state: dict) -> None:
        """Copy every parameter in from ``state``, in place; keys and shapes must match exactly.

        The existing arrays are overwritten (cast to the layer's dtype), so every alias of
        :attr:`params`, e.g. a :class:`~hiddenstate.CharRNN`'s or an optimizer's, sees the new
        values. Nothing is loaded if anything does not fit.

        Parameters
        ----------
        state : mapping of str to array_like
            Exactly the keys of :attr:`params` (e.g. from :meth:`state_dict`), each with the
            shape of that parameter.

        Raises
        ------
        ValueError
            A key is missing or unexpected, an array has the wrong shape, or a value is NaN/Inf.
        TypeError
            ``state`` is not a mapping, or an array is not floating point.
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
        make = lambda: _state.initial_state(shape, kind, dtype=self.dtype, **options)
        return (make(), make()) if self.is_lstm else make()

    def split_directions(self, h_n) -> DirectionalState:
        """Split a final state (L*D, N, H) into named forward / backward parts (each (L, N, H)).

        Parameters
        ----------
        h_n : ndarray of shape (L*D, N, H) or (L*D, H)
            A final state of this layer (for an LSTM, ``h_n`` or ``c_n``, not the pair).

        Returns
        -------
        DirectionalState
            ``forward`` ``h_n[0::2]`` and ``backward`` ``h_n[1::2]`` when bidirectional; else
            ``forward`` ``h_n`` itself and ``backward`` None.

        Raises
        ------
        ValueError
            ``h_n`` has fewer than two axes or a first axis other than L*D.
        """
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

        Parameters
        ----------
        x : ndarray of shape (T, N, I), (N, T, I) if ``batch_first``, or (T, I), float
            Input sequence; cast to the layer's dtype.
        h0 : ndarray of shape (L*D, N, H) or (L*D, H) unbatched, optional
            Initial state (LSTM: pair ``(h0, c0)``, either part None). None: zeros, or the
            learned initial state.
        lengths : array_like of int, shape (N,), optional
            Valid steps of each column, each in [0, T]; not allowed for unbatched input.
        reset : ndarray of bool, shape (T, N) ((N, T) if ``batch_first``; (T,) unbatched), optional
            Where True, the column restarts from its initial state at that step (ignored on
            padded steps).

        Returns
        -------
        Prepared
            Time-major ``x`` (T, N, I), ``state0`` (L*D, N, H) (LSTM: a pair), ``lengths``,
            the ``keep`` mask (T, N, 1) and the ``reset`` mask (T, N) (each None when unused).

        Raises
        ------
        ValueError
            Shapes that do not match, NaN/Inf, lengths out of range or given for unbatched input.
        TypeError
            Non-float inputs, non-integer lengths, non-bool reset, an LSTM ``h0`` that is not a
            pair.
        """
        return prepare_input(self, x, h0, lengths=lengths, reset=reset)

    # -- forward -------------------------------------------------------------------------------
    def forward(self, x, h0=None, *, lengths=None, reset=None, training=False, rng=None, need_cache=True):
        """Run the layer over a sequence and keep what :meth:`backward` needs (unless ``need_cache=False``).

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
        reset : ndarray of bool, shape (T, N) ((N, T) if ``batch_first``; (T,) unbatched), optional
            Where ``reset[t, n]`` is True, column n starts step t from its initial state instead
            of its previous state, and no gradient flows back across that boundary (ignored on
            padded steps). The backward direction of a bidirectional layer restarts at the
            mirrored boundary.
        training : bool, default False
            Apply inter-layer dropout (when ``dropout > 0``) and DropConnect on the recurrent
            weights (when ``weight_drop > 0``).
        rng : numpy.random.Generator, optional
            Draws the dropout masks (default: the generator given at construction).
        need_cache : bool, default True
            False: no :meth:`backward` will follow (inference, validation, generation), so
            nothing is kept for one; the output and ``h_n`` are the same (bit for bit) and
            faster to get, and ``cache`` is None.

        Returns
        -------
        output : ndarray of shape (T, N, D*H) (batch_first: (N, T, D*H); unbatched: (T, D*H))
        h_n : ndarray of shape (L*D, N, H) (unbatched: (L*D, H)); LSTM: pair ``(h_n, c_n)``
        cache : LayerCache or None
            Pass it to :meth:`backward`; None when ``need_cache=False``.

        Raises
        ------
        ValueError
            Shapes that do not match the legend above, NaN/Inf, lengths out of range or given
            for unbatched input.
        TypeError
            Non-float inputs, non-integer lengths, non-bool reset, an LSTM ``h0`` that is not a
            pair, a non-bool ``training`` or ``need_cache``, an ``rng`` that is not a Generator.
        """
        need_cache = boolean("need_cache", need_cache)
        if is_foreign(x):  # a torch tensor, a CuPy array, ...: computed in its library (hiddenstate.xp)
            out = xp_layer.forward(self, x, h0, lengths=lengths, reset=reset, training=training, rng=rng)
            return out if need_cache else (*out[:2], None)
        prepared = self.prepare(x, h0, lengths=lengths, reset=reset)
        if need_cache or type(self).run is not RecurrentLayer.run:  # a subclass's own run keeps its cache
            output, h_n, cache = self.run(prepared, training=training, rng=rng)
            return output, h_n, (cache if need_cache else None)
        return self.run(prepared, training=training, rng=rng, need_cache=False)

    def run(self, prepared: Prepared, *, training=False, rng=None, record=False, need_cache=True):
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
        need_cache : bool, default True
            As :meth:`forward`; False cannot be combined with ``record=True`` (the record is
            part of the cache).

        Returns
        -------
        output, h_n, cache
            As :meth:`forward`.

        Raises
        ------
        TypeError
            ``prepared`` is not a :class:`Prepared`; a parameter that is not an ndarray of the
            layer's dtype (see :meth:`check_params`); non-bool flags.
        ValueError
            ``prepared`` made for another input width or dtype; a parameter of the wrong shape
            or with NaN/Inf; ``record=True`` with ``need_cache=False``.
        """
        training, record = boolean("training", training), boolean("record", record)
        need_cache = boolean("need_cache", need_cache)
        if record and not need_cache:
            raise ValueError("record=True keeps the gates in the cache, so it needs need_cache=True; got "
                             "need_cache=False.")
        if not isinstance(prepared, Prepared):
            raise TypeError(f"prepared must be the Prepared that {type(self).__name__}.prepare returned; got "
                            f"{type(prepared).__name__}. Call layer.prepare(x, ...) first, or layer.forward(x, ...).")
        px = prepared.x
        if not isinstance(px, np.ndarray) or px.ndim != 3 or px.shape[2] != self.input_size or px.dtype != self.dtype:
            raise ValueError(f"prepared must come from this layer's prepare (x of shape (T, N, I={self.input_size}) "
                             f"and dtype {self.dtype}); got x of shape {shape_str(np.shape(px))}. Call prepare again.")
        self.check_params()
        drng = generator(rng) if rng is not None else self._rng
        with FloatGuard() as guard:  # gates may underflow to 0 (exact enough); an overflow is checked below
            output, h_n, cache = unroll(self, prepared, training, drng, record, need_cache)
        if guard.tripped:  # only then are the results read again
            guard.check("the forward pass", (("output", output), *zip(("h_n", "c_n"), _parts(h_n))), _TOO_LARGE)
        return output, h_n, cache

    def check_params(self) -> None:
        """Check :attr:`params` as every forward pass does: keys, ndarray, dtype, shape, finite values.

        Raises
        ------
        TypeError
            A parameter replaced by something that is not an ndarray, or of another dtype.
        ValueError
            A missing or unexpected key, a wrong shape, a NaN or Inf (the message names the key).
        """
        spec = self.__dict__.get("_param_spec")
        if spec is None:
            H, D = self.hidden_size, self.num_directions
            widths = {self.suffix(k, d): (self.input_size if k == 0 else D * H)
                      for k in range(self.num_layers) for d in range(D)}
            states = (("h0", "c0") if self.is_lstm else ("h0",)) if self.learn_h0 else ()
            spec = self._param_spec = param_shapes(self.num_gates, H, widths, bias=self.bias,
                                                   recurrent=self.kind.recurrent, states=states,
                                                   num_states=self.num_layers * D)
        check_params(self.params, spec, self.dtype, type(self).__name__)

    def __call__(self, x, h0=None, *, lengths=None, reset=None):
        """``output, h_n = layer(x, h0)``: a forward pass that keeps nothing for a backward (``need_cache=False``).

        Parameters
        ----------
        x : ndarray of shape (T, N, I), (N, T, I) if ``batch_first``, or (T, I), float
            Input sequence.
        h0 : ndarray of shape (L*D, N, H) or (L*D, H) unbatched, optional
            Initial state (LSTM: pair ``(h0, c0)``). None: zeros, or the learned initial state.
        lengths : array_like of int, shape (N,), optional
            Valid steps of each column, as :meth:`forward`.
        reset : ndarray of bool, shape (T, N) ((N, T) if ``batch_first``), optional
            Restart mask, as :meth:`forward`.

        Returns
        -------
        output : ndarray of shape (T, N, D*H) (batch_first: (N, T, D*H); unbatched: (T, D*H))
            The last layer's state at every step, directions concatenated; zero past a
            column's length.
        h_n : ndarray of shape (L*D, N, H) (unbatched: (L*D, H)); LSTM: pair ``(h_n, c_n)``
            Every layer's and direction's final state.

        Raises
        ------
        ValueError, TypeError
            As :meth:`forward`.
        """
        output, h_n, _ = self.forward(x, h0, lengths=lengths, reset=reset, need_cache=False)
        return output, h_n

    # -- backward ------------------------------------------------------------------------------
    def backward(self, cache: LayerCache, d_output, d_h_n=None, *, ready=None):
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
        ready : callable, optional
            ``ready(grads)`` with each layer's final gradients as soon as its BPTT ends, top layer
            first (a data-parallel run starts reducing them then); NumPy inputs only.

        Returns
        -------
        grads : dict
            Same keys and shapes as :attr:`params` (``h0``/``c0`` included when learned:
            the batch sum of the initial-state gradient when ``h0=None`` was used, else zero).
        dx : ndarray shaped like ``x``
        dh0 : ndarray shaped like ``h0`` (LSTM: pair ``(dh0, dc0)``)

        Raises
        ------
        TypeError
            ``cache`` is not a :class:`LayerCache`; a gradient that is not a float array.
        ValueError
            ``cache`` made by another layer's forward; a gradient whose shape does not match the
            forward result, or with NaN/Inf.
        """
        if isinstance(cache, xp_layer.XPCache):  # from an array-API forward: gradients in its library
            return xp_layer.backward(self, cache, d_output, d_h_n)
        if not isinstance(cache, LayerCache):
            raise TypeError(f"cache must be the LayerCache that {type(self).__name__}.forward returned; got "
                            f"{type(cache).__name__}.")
        cache.check_owner(self)
        with FloatGuard() as guard:
            grads, dx, dh0 = backprop(self, cache, d_output, d_h_n, ready)
        if guard.tripped:  # only then are the results read again
            guard.check("the backward pass", (*grads.items(), ("dx", dx), *zip(("dh0", "dc0"), _parts(dh0))),
                        "The upstream gradients are too large; scale the loss down.")
        return grads, dx, dh0
