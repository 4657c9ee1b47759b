"""Trace a recurrent layer: every step's state, gates and pre-activations, per layer and direction.

:func:`trace` runs an :class:`~hiddenstate.RNN`, :class:`~hiddenstate.GRU` or
:class:`~hiddenstate.LSTM` exactly as its ``forward`` does (same parameters, lengths, resets,
directions; inference mode, no dropout), with the kernels asked to record what they compute
(:meth:`~hiddenstate.classic.recurrent.RecurrentLayer.run` with ``record=True``); nothing is re-derived
here. What is recorded is named by the cell kind (:mod:`hiddenstate.classic.cells`):

* RNN: no gates (``h`` itself is the activation); pre-activation ``a``.
* GRU: gates ``r``, ``z`` (update, ``h = z * h_prev + (1 - z) * n``) and the candidate ``n``;
  pre-activations ``r``, ``z``, ``n`` (the argument of each sigmoid / tanh).
* LSTM: gates ``i``, ``f``, ``g``, ``o`` and their pre-activations; cell state ``c``.

All arrays are time-major (T, N, H) in the sequence's own time order, for the backward direction
too (``h[t]`` of the backward direction is its state after reading ``x[t], x[t+1], ...``), and
zero at padded steps (``mask[t, n]`` False), like the layer's output (Elman 1990; Cho et al.
2014; Hochreiter and Schmidhuber 1997 with PyTorch's gate layout).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hiddenstate.classic.cells import KINDS, kind_of
from hiddenstate.classic.recurrent import RecurrentLayer
from hiddenstate.core.ragged import reverse_index, reverse_time
from hiddenstate.core.validation import index

__all__ = ["LayerTrace", "Trace", "cell_kind", "layer_trace", "sequence_layer", "trace"]


def cell_kind(layer) -> str:
    """``"rnn"``, ``"gru"`` or ``"lstm"``: the name of a layer's (or cell's) kind attribute.

    Parameters
    ----------
    layer : hiddenstate layer or cell

    Returns
    -------
    str

    Raises
    ------
    TypeError
        If ``layer`` is not an RNN/GRU/LSTM layer or cell of :mod:`hiddenstate`.
    """
    return kind_of(layer).name


def sequence_layer(layer, name: str = "layer"):
    """Return ``layer`` if it is a sequence layer of this package (what the probes measure), else raise.

    Parameters
    ----------
    layer : object
        The argument to check.
    name : str, default "layer"
        Its name, for the message.

    Returns
    -------
    RecurrentLayer
        ``layer`` itself.

    Raises
    ------
    TypeError
        Anything else, e.g. a one-step cell (wrap its weights in a one-layer layer of its kind).
    """
    if not isinstance(layer, RecurrentLayer) or layer.kind is None:
        hint = (" A one-step cell has no sequence to trace: build the layer of its kind with the same weights."
                if hasattr(layer, "kind") else "")
        raise TypeError(f"{name} must be a hiddenstate sequence layer (RNN, GRU, LSTM, ...); got "
                        f"{type(layer).__name__}.{hint}")
    kind_of(layer)
    return layer


@dataclass
class LayerTrace:
    """Everything one layer and direction computed, step by step.

    Attributes
    ----------
    kind : {"rnn", "gru", "lstm"}
        The cell kind's name (``hiddenstate.classic.cells.KINDS[kind]`` is its definition).
    layer : int
        Layer index (0 = reads the input).
    direction : int
        0 forward, 1 backward (reads each sequence from its last valid step to its first).
    x : ndarray of shape (T, N, I_k)
        The input this layer read (for layer k > 0, the previous layer's output).
    h : ndarray of shape (T, N, H)
        State after each step (0 at padded steps).
    h_prev : ndarray of shape (T, N, H)
        State each step read (after resets): ``h_prev[t]`` is the ``h_{t-1}`` of step ``t``
        (for the backward direction, the state after reading ``x[t+1:]``).
    c, c_prev : ndarray of shape (T, N, H) or None
        LSTM cell state after / before each step.
    gates : dict of str to ndarray of shape (T, N, H)
        See the module table.
    preacts : dict of str to ndarray of shape (T, N, H)
        Arguments of the gate nonlinearities.
    mask : ndarray of bool, shape (T, N)
        True at valid steps.
    reset : ndarray of bool, shape (T, N) or None
        Steps that started from the initial state (this direction's view).
    weights : dict
        This direction's ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``.
    options : dict
        ``reset_after`` (GRU) or ``nonlinearity`` (RNN).
    s : ndarray of shape (T, N, H) or None
        GRU: ``W_hn h + b_hn`` (``reset_after``) or ``r * h`` (the input of ``W_hn``).
    """

    kind: str
    layer: int
    direction: int
    x: np.ndarray
    h: np.ndarray
    h_prev: np.ndarray
    c: np.ndarray | None
    c_prev: np.ndarray | None
    gates: dict
    preacts: dict
    mask: np.ndarray
    reset: np.ndarray | None
    weights: dict = field(repr=False)
    options: dict = field(default_factory=dict)
    s: np.ndarray | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        """``LayerTrace(gru layer 0, T=100, N=8, H=32, gates r, z, n)``."""
        T, N = self.mask.shape
        gates = ", ".join(self.gates) or "none"
        return f"LayerTrace({self.kind} {self.label}, T={T}, N={N}, H={self.hidden_size}, gates {gates})"

    @property
    def hidden_size(self) -> int:
        """H."""
        return self.h.shape[-1]

    @property
    def label(self) -> str:
        """``"layer 0"`` or ``"layer 0 reverse"``."""
        return f"layer {self.layer}" + (" reverse" if self.direction else "")

    @property
    def cell(self):
        """The :class:`~hiddenstate.classic.cells.base.CellKind` of this trace."""
        return KINDS[self.kind]

    def in_processing_order(self) -> LayerTrace:
        """This trace with time in the order the direction processed it (a copy for direction 1).

        For the backward direction each column is reversed within its own length
        (:func:`hiddenstate.reverse_padded`), so step ``t`` of the result read ``h_prev[t]``
        which is ``h[t-1]`` (while valid). The forward direction is returned as is.

        Returns
        -------
        LayerTrace
        """
        if self.direction == 0:
            return self
        idx = reverse_index(self.mask.shape[0], self.mask.sum(axis=0))
        return _map_arrays(self, lambda a: reverse_time(a, idx))


def _map_arrays(lt: LayerTrace, f) -> LayerTrace:
    """A copy of ``lt`` with ``f`` applied to every per-step array (None stays None)."""
    g = lambda a: None if a is None else f(a)
    return LayerTrace(
        kind=lt.kind, layer=lt.layer, direction=lt.direction, x=g(lt.x), h=g(lt.h), h_prev=g(lt.h_prev),
        c=g(lt.c), c_prev=g(lt.c_prev), gates={k: g(v) for k, v in lt.gates.items()},
        preacts={k: g(v) for k, v in lt.preacts.items()}, mask=g(lt.mask), reset=g(lt.reset),
        weights=lt.weights, options=lt.options, s=g(lt.s),
    )


def layer_trace(lt) -> LayerTrace:
    """Return ``lt`` if it is a :class:`LayerTrace`, else raise TypeError (for the functions that read one).

    Parameters
    ----------
    lt : object
        The argument to check.

    Returns
    -------
    LayerTrace
        ``lt`` itself.
    """
    if not isinstance(lt, LayerTrace):
        raise TypeError(f"lt must be a LayerTrace (one entry of hiddenstate.probe.trace(...)); got {type(lt).__name__}.")
    return lt


@dataclass
class Trace:
    """A traced run of a layer: one :class:`LayerTrace` per layer and direction.

    Attributes
    ----------
    kind : {"rnn", "gru", "lstm"}
    layers : list of LayerTrace
        Index ``layer * D + direction`` (the order of ``h_n``'s first axis).
    output : ndarray of shape (T, N, D*H)
        The last layer's states, directions concatenated (equals the layer's ``output``).
    h_n : ndarray of shape (L*D, N, H)
    c_n : ndarray of shape (L*D, N, H) or None
    mask : ndarray of bool, shape (T, N)
    num_layers, num_directions : int
    """

    kind: str
    layers: list
    output: np.ndarray
    h_n: np.ndarray
    c_n: np.ndarray | None
    mask: np.ndarray
    num_layers: int
    num_directions: int

    def __getitem__(self, key) -> LayerTrace:
        """``trace[layer]`` (forward direction) or ``trace[layer, direction]``; negative indices count from the end.

        Raises ``TypeError`` for an index that is not an integer (or a pair of them) and
        ``IndexError`` for one out of range (never wrapped around).
        """
        if isinstance(key, tuple) and len(key) == 2:
            layer, direction = key
        elif isinstance(key, tuple):
            raise TypeError(f"trace index must be layer or (layer, direction); got a tuple of {len(key)}.")
        else:
            layer, direction = key, 0
        try:
            li = index("trace index (layer)", layer, self.num_layers, what="layers")
            d = index("trace index (direction)", direction, self.num_directions, what="directions")
        except ValueError:
            raise IndexError(
                f"trace index must be (layer < {self.num_layers}, direction < {self.num_directions}); got {key!r}."
            ) from None
        return self.layers[li * self.num_directions + d]

    def __iter__(self):
        """The layer traces in ``h_n`` order."""
        return iter(self.layers)

    def __len__(self) -> int:
        """L * D."""
        return len(self.layers)

    def __repr__(self) -> str:
        """``Trace(gru, 2 layers x 1 direction, T=100, N=8, H=32, 800 valid steps)``."""
        T, N = self.mask.shape
        H = self.layers[0].hidden_size if self.layers else 0
        return (f"Trace({self.kind}, {self.num_layers} layer{'s' if self.num_layers != 1 else ''} x {self.num_directions} "
                f"direction{'s' if self.num_directions != 1 else ''}, T={T}, N={N}, H={H}, "
                f"{int(self.mask.sum())} valid steps)")

    def _repr_html_(self) -> str:
        from hiddenstate.report.notebook import trace_html

        return trace_html(self)


def trace(layer, x, h0=None, *, lengths=None, reset=None) -> Trace:
    """Run ``layer`` over ``x`` and record every step's state, gates and pre-activations.

    Parameters
    ----------
    layer : hiddenstate.RNN, hiddenstate.GRU or hiddenstate.LSTM
    x : ndarray of shape (T, N, I) ((N, T, I) if ``layer.batch_first``) or (T, I)
    h0 : ndarray of shape (L*D, N, H) or (L*D, H), optional
        Initial state as for ``layer.forward`` (LSTM: pair ``(h0, c0)``).
    lengths : array_like of int, shape (N,), optional
        Valid steps per sequence (padded batch).
    reset : ndarray of bool, shape (T, N), optional
        Restart chosen sequences from their initial state at chosen steps (as ``layer.forward``).

    Returns
    -------
    Trace
        Time-major (T, N, ...) arrays even for ``batch_first`` or unbatched input.

    Raises
    ------
    TypeError, ValueError
        As ``layer.forward`` for invalid inputs (the same validation is used); ``layer`` that is
        not a sequence layer (:func:`sequence_layer`).
    """
    kind = kind_of(sequence_layer(layer))
    prepared = layer.prepare(x, h0, lengths=lengths, reset=reset)
    _, h_n, cache = layer.run(prepared, record=True)
    T, N = prepared.x.shape[:2]
    D, L = layer.num_directions, layer.num_layers
    mask = prepared.mask
    valid = mask[:, :, None]
    idx = reverse_index(T, np.full(N, T) if prepared.lengths is None else prepared.lengths)
    layers = []
    for li in range(L):
        for d in range(D):
            dc = cache.directions[li * D + d]
            rec = kind.recorded(dc.kernel)
            zero = lambda a: None if a is None else np.where(valid, a, 0.0)
            lt = LayerTrace(
                kind=kind.name, layer=li, direction=d, x=dc.x, h=zero(rec.h), h_prev=zero(rec.h_prev),
                c=zero(rec.c), c_prev=zero(rec.c_prev), gates={k: zero(v) for k, v in rec.gates.items()},
                preacts={k: zero(v) for k, v in rec.preacts.items()}, mask=mask.copy(),
                reset=None if dc.reset is None else dc.reset[:, :, 0], weights=layer.weights(li, d),
                options=layer.options, s=zero(rec.s),
            )
            if d == 1:  # back to the sequence's own time order (the reversal is an involution)
                lt = _map_arrays(lt, lambda a: reverse_time(a, idx))
                lt.mask = mask.copy()
            layers.append(lt)
    outs = [layers[(L - 1) * D + d].h for d in range(D)]
    output = outs[0] if D == 1 else np.concatenate(outs, axis=2)
    h_n, c_n = h_n if kind.has_cell else (h_n, None)
    if prepared.unbatched:
        h_n = h_n[:, None]
        c_n = None if c_n is None else c_n[:, None]
    return Trace(kind=kind.name, layers=layers, output=output, h_n=h_n, c_n=c_n, mask=mask,
                 num_layers=L, num_directions=D)
