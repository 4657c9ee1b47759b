"""Trace a recurrent layer: every step's state, gates and pre-activations, per layer and direction.

:func:`trace` runs an :class:`~hiddenstate.RNN`, :class:`~hiddenstate.GRU` or
:class:`~hiddenstate.LSTM` over a sequence exactly as its ``forward`` does (same parameters,
lengths, resets, directions; inference mode, no dropout) but steps the cell equations here, so
that every intermediate quantity can be kept:

* RNN: no gates (``h`` itself is the activation); pre-activation ``a``.
* GRU: gates ``r``, ``z`` (update, ``h = z * h_prev + (1 - z) * n``) and the candidate ``n``;
  pre-activations ``r``, ``z``, ``n`` (the argument of each sigmoid / tanh).
* LSTM: gates ``i``, ``f``, ``g``, ``o`` and their pre-activations; cell state ``c``.

All arrays are time-major (T, N, H) in the sequence's own time order, for the backward direction
too (``h[t]`` of the backward direction is its state after reading ``x[t], x[t+1], ...``), and
zero at padded steps (``mask[t, n]`` False), like the layer's output. Equations follow
:mod:`hiddenstate.cells` (Elman 1990; Cho et al. 2014; Hochreiter and Schmidhuber 1997 with
PyTorch's gate layout).

The trace of the last layer reproduces the layer's ``output`` and ``h_n``; the tests check this
against :meth:`~hiddenstate.GRU.forward` to round-off.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hiddenstate.functional import sigmoid

__all__ = ["LayerTrace", "Trace", "cell_kind", "cell_step", "trace"]

GATE_NAMES = {"rnn": (), "gru": ("r", "z", "n"), "lstm": ("i", "f", "g", "o")}
PREACT_NAMES = {"rnn": ("a",), "gru": ("r", "z", "n"), "lstm": ("i", "f", "g", "o")}


def cell_kind(layer) -> str:
    """``"rnn"``, ``"gru"`` or ``"lstm"`` for a layer (or cell) of this package.

    Raises
    ------
    TypeError
        If ``layer`` is not an RNN/GRU/LSTM layer or cell of :mod:`hiddenstate`.
    """
    name = type(layer).__name__.lower()
    for kind in ("lstm", "gru", "rnn"):
        if name.startswith(kind):
            return kind
    raise TypeError(f"layer must be a hiddenstate RNN, GRU or LSTM layer; got {type(layer).__name__}.")


def _act(name: str, a: np.ndarray) -> np.ndarray:
    if name == "tanh":
        return np.tanh(a)
    if name == "relu":
        return np.maximum(a, 0.0)
    return sigmoid(a.copy())


def cell_step(kind: str, w: dict, x: np.ndarray, h: np.ndarray, c: np.ndarray | None = None, *,
              reset_after: bool = False, nonlinearity: str = "tanh") -> dict:
    """One step of a cell, returning every intermediate quantity.

    Parameters
    ----------
    kind : {"rnn", "gru", "lstm"}
    w : dict
        ``weight_ih`` (G*H, I), ``weight_hh`` (G*H, H), optional ``bias_ih``, ``bias_hh`` (G*H,)
        (PyTorch layout; gate rows r, z, n or i, f, g, o).
    x : ndarray of shape (N, I)
    h : ndarray of shape (N, H)
        Previous state.
    c : ndarray of shape (N, H), optional
        Previous cell state (LSTM only).
    reset_after : bool, default False
        GRU candidate form (see :class:`hiddenstate.GRU`).
    nonlinearity : {"tanh", "relu", "sigmoid"}, default "tanh"
        RNN activation.

    Returns
    -------
    dict
        ``"h"`` (N, H) new state; ``"c"`` (LSTM); ``"gates"`` dict of (N, H); ``"preacts"`` dict of
        (N, H); for the GRU also ``"s"``: ``W_hn h + b_hn`` (``reset_after``) or ``r * h``.
    """
    H = h.shape[-1]
    gi = x @ w["weight_ih"].T  # (N, G*H)
    if w.get("bias_ih") is not None:
        gi = gi + w["bias_ih"]
    W = w["weight_hh"]
    b = w.get("bias_hh")
    if kind == "rnn":
        a = gi + h @ W.T + (0.0 if b is None else b)
        return {"h": _act(nonlinearity, a), "gates": {}, "preacts": {"a": a}}
    if kind == "gru":
        bh = np.zeros(3 * H) if b is None else b
        a_r = gi[:, :H] + h @ W[:H].T + bh[:H]
        a_z = gi[:, H:2 * H] + h @ W[H:2 * H].T + bh[H:2 * H]
        r, z = sigmoid(a_r.copy()), sigmoid(a_z.copy())
        if reset_after:
            s = h @ W[2 * H:].T + bh[2 * H:]
            a_n = gi[:, 2 * H:] + r * s
        else:
            s = r * h
            a_n = gi[:, 2 * H:] + s @ W[2 * H:].T + bh[2 * H:]
        n = np.tanh(a_n)
        h_new = n + z * (h - n)
        return {"h": h_new, "s": s, "gates": {"r": r, "z": z, "n": n},
                "preacts": {"r": a_r, "z": a_z, "n": a_n}}
    if kind == "lstm":
        a = gi + h @ W.T + (0.0 if b is None else b)  # (N, 4H)
        a_i, a_f, a_g, a_o = (a[:, k * H:(k + 1) * H] for k in range(4))
        i, f, o = sigmoid(a_i.copy()), sigmoid(a_f.copy()), sigmoid(a_o.copy())
        g = np.tanh(a_g)
        c_new = f * c + i * g
        h_new = o * np.tanh(c_new)
        return {"h": h_new, "c": c_new, "gates": {"i": i, "f": f, "g": g, "o": o},
                "preacts": {"i": a_i, "f": a_f, "g": a_g, "o": a_o}}
    raise ValueError(f"kind must be 'rnn', 'gru' or 'lstm'; got {kind!r}.")


@dataclass
class LayerTrace:
    """Everything one layer and direction computed, step by step.

    Attributes
    ----------
    kind : {"rnn", "gru", "lstm"}
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

    @property
    def hidden_size(self) -> int:
        return self.h.shape[-1]

    @property
    def label(self) -> str:
        """``"layer 0"`` or ``"layer 0 reverse"``."""
        return f"layer {self.layer}" + (" reverse" if self.direction else "")

    def in_processing_order(self) -> "LayerTrace":
        """This trace with time in the order the direction processed it (a copy for direction 1).

        For the backward direction each column is reversed within its own length
        (:func:`hiddenstate.reverse_padded`), so step ``t`` of the result read ``h_prev[t]``
        which is ``h[t-1]`` (while valid). The forward direction is returned as is.
        """
        if self.direction == 0:
            return self
        lengths = self.mask.sum(axis=0)
        idx = _reverse_index(self.mask.shape[0], lengths)

        def rev(a):
            return None if a is None else a[idx, np.arange(a.shape[1])[None, :]]

        rs = None
        if self.reset is not None:
            rs = rev(self.reset)
        return LayerTrace(
            kind=self.kind, layer=self.layer, direction=self.direction, x=rev(self.x), h=rev(self.h),
            h_prev=rev(self.h_prev), c=rev(self.c), c_prev=rev(self.c_prev),
            gates={k: rev(v) for k, v in self.gates.items()}, preacts={k: rev(v) for k, v in self.preacts.items()},
            mask=rev(self.mask), reset=rs, weights=self.weights, options=self.options, s=rev(self.s),
        )


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
        """``trace[layer]`` (forward direction) or ``trace[layer, direction]``."""
        if isinstance(key, tuple):
            layer, direction = key
        else:
            layer, direction = key, 0
        if not (0 <= layer < self.num_layers and 0 <= direction < self.num_directions):
            raise IndexError(
                f"trace index must be (layer < {self.num_layers}, direction < {self.num_directions}); got {key!r}."
            )
        return self.layers[layer * self.num_directions + direction]

    def __iter__(self):
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)


def _reverse_index(T: int, lengths) -> np.ndarray:
    t = np.arange(T)[:, None]
    lengths = np.asarray(lengths)[None, :]
    return np.where(t < lengths, lengths - 1 - t, t)


def _rev(a, idx):
    return a[idx, np.arange(a.shape[1])[None, :]]


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
        As ``layer.forward`` for invalid inputs (the same validation is used).
    """
    kind = cell_kind(layer)
    # validation and normalisation exactly as the layer's forward does it
    xt, state0, _learned, lens, keep, rmask, _unbatched = layer._prepare(x, h0, lengths, reset)
    T, N, _ = xt.shape
    H, D, L = layer.hidden_size, layer.num_directions, layer.num_layers
    mask = np.ones((T, N), dtype=bool) if keep is None else keep[:, :, 0].copy()
    lens_arr = np.full(N, T) if lens is None else lens
    idx = _reverse_index(T, lens_arr)
    opts = {"reset_after": layer.reset_after} if kind == "gru" else (
        {"nonlinearity": layer.nonlinearity} if kind == "rnn" else {})
    rmask_rev = None
    if D == 2 and rmask is not None:
        shifted = np.zeros_like(rmask)
        shifted[:-1] = rmask[1:]  # a boundary before t is, read backwards, a boundary before t-1
        shifted &= mask
        rmask_rev = _rev(shifted, idx)
    p = layer.params
    layers = []
    finals_h, finals_c = [None] * (L * D), [None] * (L * D)
    inp = xt
    for li in range(L):
        outs = []
        for d in range(D):
            sfx = f"_l{li}" + ("_reverse" if d else "")
            w = {k: p.get(k + sfx) for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
            xin = inp if d == 0 else _rev(inp, idx)
            rs = rmask if d == 0 else rmask_rev
            k = li * D + d
            if kind == "lstm":
                h_init, c_init = state0[0][k], state0[1][k]
            else:
                h_init, c_init = state0[k], None
            rec = {name: np.zeros((T, N, H), dtype=xt.dtype) for name in ("h", "h_prev")}
            gates = {g: np.zeros((T, N, H), dtype=xt.dtype) for g in GATE_NAMES[kind]}
            pre = {g: np.zeros((T, N, H), dtype=xt.dtype) for g in PREACT_NAMES[kind]}
            cs = np.zeros((T, N, H), dtype=xt.dtype) if kind == "lstm" else None
            cps = np.zeros((T, N, H), dtype=xt.dtype) if kind == "lstm" else None
            ss = np.zeros((T, N, H), dtype=xt.dtype) if kind == "gru" else None
            h, c = h_init, c_init
            for t in range(T):
                if rs is not None:
                    r_t = rs[t][:, None]
                    h = np.where(r_t, h_init, h)
                    if c is not None:
                        c = np.where(r_t, c_init, c)
                out = cell_step(kind, w, xin[t], h, c, **opts)
                v = mask[t][:, None]  # padding stays in place when a column is reversed
                rec["h_prev"][t] = np.where(v, h, 0.0)
                rec["h"][t] = np.where(v, out["h"], 0.0)
                for g in gates:
                    gates[g][t] = np.where(v, out["gates"][g], 0.0)
                for g in pre:
                    pre[g][t] = np.where(v, out["preacts"][g], 0.0)
                if kind == "lstm":
                    cps[t] = np.where(v, c, 0.0)
                    cs[t] = np.where(v, out["c"], 0.0)
                    c = np.where(v, out["c"], c)
                if kind == "gru":
                    ss[t] = np.where(v, out["s"], 0.0)
                h = np.where(v, out["h"], h)
            finals_h[k], finals_c[k] = h, c
            back = (lambda a: a) if d == 0 else (lambda a: None if a is None else _rev(a, idx))
            lt = LayerTrace(
                kind=kind, layer=li, direction=d, x=back(xin), h=back(rec["h"]), h_prev=back(rec["h_prev"]),
                c=back(cs), c_prev=back(cps), gates={g: back(a) for g, a in gates.items()},
                preacts={g: back(a) for g, a in pre.items()}, mask=mask.copy(),
                reset=None if rs is None else back(rs), weights=w, options=dict(opts), s=back(ss),
            )
            layers.append(lt)
            outs.append(lt.h)
        inp = outs[0] if D == 1 else np.concatenate(outs, axis=2)
    return Trace(
        kind=kind, layers=layers, output=inp, h_n=np.stack(finals_h),
        c_n=np.stack(finals_c) if kind == "lstm" else None, mask=mask, num_layers=L, num_directions=D,
    )
