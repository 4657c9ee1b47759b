"""Interventions in our own models: a :class:`~hiddenstate.train.model.CharRNN` (any cell), :class:`~hiddenstate.MambaLM`, :class:`~hiddenstate.Mamba2LM`.

The model runs in segments carrying its state, cut after every edited step: ``ids[:, :s0+1]``
from the zero state, then ``ids[:, s0+1:s1+1]`` from the state the first segment ended in, with
the edits of step s0 applied to that state (only the edited layer's entry of the model's state),
and so on, so every later step and every later layer runs from the edited state through the
model's own forward pass. The same segments run once more without edits (the clean chain): it
shares every step up to the first edit with the edited chain bit for bit. ``clean_logits`` is the
model's plain forward pass (one call on all ids), and the logits returned are::

    output="delta" (default):  plain + (edited chain - clean chain)
    output="ours":             the edited chain

With ``"delta"`` the logits at positions <= the first edited step are the plain forward's bit for
bit and a null edit (scale 1, add 0) returns them exactly; ``"ours"`` is the segmented run
itself, equal to the plain forward pass to float64 round-off (~1e-16 relative: a segment's
matrix products are summed in another order).

``layer`` is the index in the stack (0 the first layer above the input). The parts of a layer's
state (:data:`~hiddenstate.edit.ops.PARTS`): a GRU's, RNN's, minGRU's or minLSTM's ``h``
(``part="state"`` or ``"h"``; in a minGRU/minLSTM block the carried ``h`` is read both by the
recurrence and by the block's state shift, :mod:`hiddenstate.train.blocks`); an LSTM's ``h`` and ``c`` (``part="state"`` edits both, ``"h"`` or ``"c"`` one alone);
a Mamba block's ``ssm`` (``"state"``) and its convolution window ``conv`` (``"conv"``), in a
MambaLM, a Mamba2LM or a CharRNN of ``cell="mamba"``.
``channels`` selects hidden units (GRU/LSTM/RNN/minGRU/minLSTM), Mamba's inner channels ``Di``, Mamba-2's head
channels ``P``; ``heads`` Mamba-2's heads.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.edit.blocks import boundaries
from hiddenstate.edit.ops import apply_op, part_fields
from hiddenstate.edit.result import EditRun, check_target
from hiddenstate.edit.sources import group_by_layer, source_states, target_of
from hiddenstate.kinds import get_kind
from hiddenstate.kinds.ssm.lm import Mamba2LM, MambaLM
from hiddenstate.train.model import CharRNN

__all__ = ["check_ids", "intervene_ours", "runner_for", "supported"]

def supported(model) -> bool:
    """Whether ``model`` is one of ours that :func:`intervene_ours` runs: a CharRNN (any cell), MambaLM, Mamba2LM.

    Parameters
    ----------
    model : object

    Returns
    -------
    bool
    """
    return isinstance(model, (MambaLM, Mamba2LM, CharRNN))


class _CharRNN:
    """Segments of a CharRNN of GRU, LSTM, RNN, minGRU or minLSTM layers: its stack's ``run``, then ``W_hy``.

    The stack's own ``run`` (:class:`~hiddenstate.classic.recurrent.RecurrentLayer`: the layers
    of torch's form, or :class:`~hiddenstate.train.blocks.MinStack`'s residual blocks) gives the
    output the decoder reads and every layer's kernel cache, whose record holds each step's
    ``h`` (and an LSTM's ``c``).
    """

    def __init__(self, model):
        self.model, self.kind, self.name = model, "classic", f"CharRNN({model.cell})"
        self.L, self.V, self.lstm = model.num_layers, model.vocab_size, model.cell == "lstm"
        self.fields = ("h", "c") if self.lstm else ("h",)

    def run(self, ids, state, layers):
        m = self.model
        stack = m.rnn
        out, state, cache = stack.run(stack.prepare(m.embed(ids.T), state))  # ids (N, t) -> the model's (t, N)
        logits = out @ m.params["decoder.weight"].T + m.params["decoder.bias"]  # (t, N, V)
        kind = stack.kind
        rec = {i: {f: getattr(kind.recorded(cache.directions[i].kernel), f) for f in self.fields} for i in layers}
        return logits.transpose(1, 0, 2), state, rec

    def get(self, state, i):
        return {"h": state[0][i], "c": state[1][i]} if self.lstm else {"h": state[i]}

    def put(self, state, i, new):
        parts = [np.array(a, copy=True) for a in (state if self.lstm else (state,))]
        for k, f in enumerate(self.fields):
            if f in new:
                parts[k][i] = new[f]
        return tuple(parts) if self.lstm else parts[0]


class _CharMamba:
    """Segments of a CharRNN of Mamba blocks: its stack's forward with ``record=True``, then ``W_hy``."""

    def __init__(self, model):
        self.model, self.kind, self.name = model, "mamba", "CharRNN(mamba)"
        self.L, self.V, self.fields = model.num_layers, model.vocab_size, ("ssm", "conv")

    def run(self, ids, state, layers):
        m = self.model
        out, state, _, recs = m.rnn.forward(m.embed(ids.T), state, need_cache=False, record=True)
        logits = out @ m.params["decoder.weight"].T + m.params["decoder.bias"]  # (t, N, V)
        rec = {i: get_kind("mamba").states(recs[i]) for i in layers}
        return logits.transpose(1, 0, 2), state, rec

    def get(self, state, i):
        return {"ssm": state[0][i], "conv": state[1][i]}

    def put(self, state, i, new):
        parts = [np.array(a, copy=True) for a in state]
        for k, f in enumerate(self.fields):
            if f in new:
                parts[k][i] = new[f]
        return tuple(parts)


class _MambaLM:
    """Segments of a MambaLM or Mamba2LM: its forward with ``record=True``."""

    def __init__(self, model):
        self.model, self.kind = model, "mamba2" if isinstance(model, Mamba2LM) else "mamba"
        self.name, self.L, self.V, self.fields = type(model).__name__, model.num_layers, model.vocab_size, ("ssm", "conv")

    def run(self, ids, state, layers):
        m = self.model
        logits, finals, _, recs = m.forward(ids if m.batch_first else ids.T, state, record=True)
        rec = {i: get_kind(self.kind).states(recs[i]) for i in layers}
        return (logits if m.batch_first else logits.transpose(1, 0, 2)), list(finals), rec

    def get(self, state, i):
        return {"ssm": state[i].ssm, "conv": state[i].conv}

    def put(self, state, i, new):
        state = list(state)
        state[i] = state[i]._replace(**new)
        return state


def runner_for(model):
    """The segment runner of one of our models: ``run(ids (N, t), state, layers) -> (logits (N, t, V), state, rec)``.

    ``rec`` is ``{layer: {field: (t, N, ...)}}``, the layers' states after every step;
    ``get(state, i)`` and ``put(state, i, {field: array})`` read and replace layer i's entry of
    the carried state (a new state; the given one is not changed). Attributes ``kind`` (the
    :data:`~hiddenstate.edit.ops.PARTS` key), ``name``, ``L`` (layers), ``V`` (vocabulary),
    ``fields``.

    Parameters
    ----------
    model : CharRNN, MambaLM or Mamba2LM

    Returns
    -------
    object

    Raises
    ------
    TypeError
        Not one of those models.
    """
    if not supported(model):
        raise TypeError(f"model must be a CharRNN, a MambaLM or a Mamba2LM among our models; got "
                        f"{type(model).__name__}. Run it in segments with its forward(ids, state) and edit the state "
                        f"in between.")
    if isinstance(model, CharRNN):
        return _CharMamba(model) if model.cell == "mamba" else _CharRNN(model)
    return _MambaLM(model)


def _chain(runner, ids, cuts, layers, edit_at=None):
    """Logits (N, T, V) float64 and the layers' states {layer: {field: (T, N, ...)}} of a segmented run."""
    T = ids.shape[1]
    state, logits, pieces, start = None, [], [], 0
    for end in [*cuts, T - 1]:
        if end < start:
            continue
        lg, state, rec = runner.run(ids[:, start:end + 1], state, layers)
        rec = {i: {f: np.array(v, dtype=np.float64, copy=True) for f, v in r.items()} for i, r in rec.items()}
        if edit_at is not None and end in cuts:
            for i in layers:
                new = edit_at(i, end, runner.get(state, i))
                if new:
                    state = runner.put(state, i, new)
                    for f, v in new.items():
                        rec[i][f][-1] = v
        logits.append(np.asarray(lg, dtype=np.float64))
        pieces.append(rec)
        start = end + 1
    states = {i: {f: np.concatenate([p[i][f] for p in pieces]) for f in pieces[0][i]} for i in layers}
    return np.concatenate(logits, axis=1), states


def check_ids(runner, ids, name="ids"):
    """``ids`` as int64 (N, T) in [0, V) of the runner's model (:func:`runner_for`).

    Parameters
    ----------
    runner : object
    ids : array_like of int, shape (N, T) or (T,)
    name : str, default "ids"

    Returns
    -------
    ndarray of int64, shape (N, T)

    Raises
    ------
    TypeError, ValueError
        Not integers, not (N, T), out of range (naming ``name``).
    """
    arr = np.asarray(ids)
    if arr.dtype == bool or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integer token ids of shape (N, T) or (T,) (sequences first, for every "
                        f"model); got dtype {arr.dtype}.")
    arr = arr[None] if arr.ndim == 1 else arr
    if arr.ndim != 2 or 0 in arr.shape:
        raise ValueError(f"{name} must have shape (N, T) with N, T >= 1 (or (T,)); got shape {np.shape(ids)}.")
    if arr.min() < 0 or arr.max() >= runner.V:
        raise ValueError(f"{name} must lie in [0, vocab_size={runner.V}); got values in [{arr.min()}, {arr.max()}].")
    return arr.astype(np.int64)


def _check(runner, by_layer, N, T):
    """Refuse a layer past the stack, a step past T, a part, heads, channels or value the state does not fit."""
    probe = runner.run(np.zeros((N, 1), dtype=np.int64), None, list(range(runner.L)))[1]
    for i, es in by_layer.items():
        if not 0 <= i < runner.L:
            raise ValueError(f"layer must lie in [0, {runner.L}) (the index in this {runner.name}'s stack of "
                             f"{runner.L} layers); got {i}.")
        boundaries(es, T)
        shapes = {f: np.shape(v) for f, v in runner.get(probe, i).items()}
        for e in es:
            names = part_fields(runner.kind, e.part, tuple(shapes), with_stabiliser=e.op in ("mean", "replace"))
            if e.value is not None and e.value.ndim and len(names) > 1:
                raise ValueError(f"value must be a number for part={e.part!r} of a {runner.name} layer, whose part "
                                 f"has the fields {list(names)}; got an array of shape {e.value.shape}. Name one "
                                 f"field as part=.")
            for f in names:
                zero = np.zeros(shapes[f])
                apply_op(runner.kind, f, zero, e, target=e.value if e.value is not None else zero)


def intervene_ours(model, ids, edits, *, target=None, output="delta") -> EditRun:
    """Run our ``model`` on ``ids`` with ``edits`` of its layers' states (module docstring).

    Parameters
    ----------
    model : CharRNN (any cell), MambaLM or Mamba2LM
    ids : array_like of int, shape (N, T) or (T,)
        Token ids, sequences first (a CharRNN's own forward takes (T, N): they are transposed).
    edits : StateEdit or list of StateEdit
        ``layer`` the index in the stack.
    target : array_like of int, shape (N, T), optional
        Token ids whose probabilities :class:`EditRun` reads.
    output : {"delta", "ours"}, default "delta"
        ``"delta"``: the plain forward's logits plus the edited chain's difference from the clean
        chain; ``"ours"``: the edited chain.

    Returns
    -------
    EditRun
        ``logits``, ``clean_logits`` (N, T, V) float64; ``states`` / ``clean_states`` of the
        edited layers, ``{layer: {field: (T, N, ...)}}`` float64 (``h`` (T, N, H), an LSTM's
        ``c``; ``ssm``, ``conv``); ``errors`` empty; ``model`` ``"CharRNN(gru)"``, ``"MambaLM"``,
        ``"Mamba2LM"``.

    Raises
    ------
    TypeError
        A model that is not one of ours above; ids that are not integers; edits that are not
        StateEdits.
    ValueError
        A layer past the stack; a step or until at or past T; a part, heads, channels or value
        the layer's state does not fit; a source of another model or shape; an unknown ``output``.
    """
    if output not in ("delta", "ours"):
        raise ValueError(f"output must be 'delta' or 'ours'; got {output!r:.60}.")
    runner = runner_for(model)
    by_layer = group_by_layer(edits)
    ids = check_ids(runner, ids)
    N, T = ids.shape
    target = check_target(target, N, T, runner.V)
    _check(runner, by_layer, N, T)
    layers = sorted(by_layer)
    cuts = sorted({s for es in by_layer.values() for e in es for s in e.steps()})
    plain = np.asarray(runner.run(ids, None, [])[0], dtype=np.float64)
    clean_logits, clean = _chain(runner, ids, cuts, layers)

    def run_ids(i):
        return lambda src: _chain(runner, check_ids(runner, src, "source"), [], [i])[1][i]

    shapes = {i: {f: v.shape[2:] for f, v in clean[i].items()} for i in layers}
    plan = {i: [(e, target_of(e, N, clean[i], source_states(e, runner.name, shapes[i], run_ids(i))),
                 part_fields(runner.kind, e.part, tuple(shapes[i]), with_stabiliser=e.op in ("mean", "replace")))
                for e in es] for i, es in by_layer.items()}

    def edit_at(i, step, state):
        new = {}
        for e, tgt, names in plan[i]:
            if step in e.steps():
                for f in names:
                    old = new.get(f, state[f])
                    new[f] = apply_op(runner.kind, f, old, e, target=None if tgt is None else tgt(f, step))
        return new

    logits, states = _chain(runner, ids, cuts, layers, edit_at)
    if output == "delta":
        logits = plain + (logits - clean_logits)
    return EditRun(logits=logits, clean_logits=plain, states=states, clean_states=clean,
                   edits=tuple(e for es in by_layer.values() for e in es), model=runner.name, target=target)
