"""``hiddenstate.causal_trace`` and ``hiddenstate.trace_cost``: restore the clean state of one (layer, step) into a corrupted run.

Causal tracing (Meng et al. 2022, "Locating and Editing Factual Associations in GPT", section
2.1; Sharma et al. 2024 on Mamba's block activations) asks which hidden quantities carry what a
prompt needs for its answer: run a clean prompt and a corrupted one, restore one quantity of the
clean run into the corrupted run, and see how much of the answer's probability comes back. Here
the quantity is a recurrent layer's state after one step, and the restored run continues its
recurrence from it through the model's own code (:func:`hiddenstate.intervene`, op
``"replace"``): for every traced layer l and step t,

    IE(l, t) = p(target | corrupted, layer l's state after step t restored) - p(target | corrupted)

read at one position (default the last). The sweep runs the clean and corrupted ids once each and
keeps what the cells read (:mod:`hiddenstate.edit.causal.families`: each traced layer's inputs,
one layer's states at a time; :mod:`hiddenstate.edit.causal.ours`: every layer's states), then
one edited run per cell; its cost (:class:`~hiddenstate.edit.causal.result.TraceCost`: the
number of edited runs, the seconds of the first and of the first layer's or step's preparation,
timed, and the bytes held) is known before the rest of the sweep runs (``on_cost=``, or
:func:`trace_cost` alone).
"""

from __future__ import annotations

import numbers
import os
import time

import numpy as np

from hiddenstate.edit.causal.result import CausalTrace, TraceCost
from hiddenstate.edit.result import log_softmax

__all__ = ["causal_trace", "trace_cost"]


def _tracer(model):
    if isinstance(model, (str, os.PathLike)):
        from hiddenstate.interop.families.directory import load_model_dir

        model = load_model_dir(model)
    if type(model).__module__.startswith("hiddenstate."):
        from hiddenstate.edit.causal.ours import OursTracer

        return OursTracer(model)
    from hiddenstate.edit.causal.families import FamilyTracer

    return FamilyTracer(model)


def _ids(name, ids, V):
    try:
        import torch

        if isinstance(ids, torch.Tensor):
            ids = ids.detach().cpu().numpy()
    except ImportError:  # pragma: no cover - torch is optional
        pass
    arr = np.asarray(ids)
    if arr.dtype == bool or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integer token ids of shape (N, T) or (T,); got dtype {arr.dtype}.")
    arr = arr[None] if arr.ndim == 1 else arr
    if arr.ndim != 2 or 0 in arr.shape or arr.shape[1] < 2:
        raise ValueError(f"{name} must have shape (N, T) with N >= 1 and T >= 2 (or (T,)); got shape "
                         f"{np.shape(ids)}.")
    if V is not None and (arr.min() < 0 or arr.max() >= V):
        raise ValueError(f"{name} must lie in [0, vocab_size={V}); got values in [{arr.min()}, {arr.max()}].")
    return arr.astype(np.int64)


def _int(name, value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be an int; got {type(value).__name__} {value!r:.60}.")
    return int(value)


def _list(name, value, default):
    if value is None:
        return list(default)
    items = [value] if isinstance(value, (numbers.Integral, np.integer)) else value
    try:
        out = [_int(name, v) for v in items]
    except TypeError:
        raise TypeError(f"{name} must be None, an int or a list of ints; got {type(value).__name__}.") from None
    if not out or len(set(out)) != len(out):
        raise ValueError(f"{name} must list distinct indices, at least one; got {out}.")
    return out


def _plan(model, clean_ids, corrupted_ids, target, layers, steps, position, part):
    """Everything checked before any model runs: the tracer, ids, target (N,), layers, steps, position."""
    tracer = _tracer(model)
    clean = _ids("clean_ids", clean_ids, tracer.V)
    corrupted = _ids("corrupted_ids", corrupted_ids, tracer.V)
    if clean.shape != corrupted.shape:
        raise ValueError(f"corrupted_ids must have the shape of clean_ids {clean.shape} (the same positions, "
                         f"token for token); got {corrupted.shape}.")
    N, T = clean.shape
    position = T - 1 if position is None else _int("position", position)
    if not 1 <= position < T:
        raise ValueError(f"position must lie in [1, T={T}) (a position with an earlier step to restore); got "
                         f"{position}.")
    tgt = np.asarray(target)
    if tgt.dtype == bool or tgt.dtype.kind not in "iu":
        raise TypeError(f"target must be a token id (an int) or one per sequence (N={N},); got "
                        f"{type(target).__name__} of dtype {tgt.dtype}.")
    if tgt.shape not in ((), (N,)):
        raise ValueError(f"target must be one token id or N={N} of them; got shape {tgt.shape}.")
    V = tracer.V
    if V is not None and (tgt.min() < 0 or tgt.max() >= V):
        raise ValueError(f"target must lie in [0, vocab_size={V}); got {tgt.tolist()}.")
    tgt = np.broadcast_to(tgt.astype(np.int64), (N,)).copy()
    layers = _list("layers", layers, tracer.recurrent)
    for i in layers:
        tracer.check_layer(i)
    steps = _list("steps", steps, range(position))
    bad = [s for s in steps if not 0 <= s < position]
    if bad:
        raise ValueError(f"steps must lie in [0, position={position}) (a state restored at or after the position "
                         f"read cannot reach it); got {bad}.")
    if not isinstance(part, str) or not part:
        raise TypeError(f"part must be 'state', 'conv' or a state field's name; got {part!r:.60}.")
    return tracer, clean, corrupted, tgt, layers, steps, position


def _prob(logits, position, target):
    """The target's probability at ``position``, per sequence (N,)."""
    lp = log_softmax(logits[:, position])  # (N, V)
    return np.exp(lp[np.arange(len(target)), target])


class _Sweep:
    """The plan, the setup's runs and the first cell, timed: the cost, then the rest of the cells."""

    def __init__(self, model, clean_ids, corrupted_ids, target, layers, steps, position, part):
        plan = _plan(model, clean_ids, corrupted_ids, target, layers, steps, position, part)
        self.tracer, clean, corrupted, self.target, self.layers, self.steps, self.position = plan
        self.part = part
        start = time.perf_counter()
        clean_logits, corrupted_logits, held = self.tracer.setup(clean, corrupted, self.layers, part)
        setup = time.perf_counter() - start
        self.clean_prob = _prob(clean_logits, self.position, self.target)
        self.corrupted_prob = _prob(corrupted_logits, self.position, self.target)
        self.prob = np.full((len(self.target), len(self.layers), len(self.steps)), np.nan)
        start = time.perf_counter()
        held += self.tracer.prepare(self.layers[0], self.steps[0])
        group = time.perf_counter() - start
        start = time.perf_counter()
        self._cell(0, 0)
        per_run = time.perf_counter() - start
        groups = len(self.layers) if self.tracer.group == "layer" else len(self.steps)
        self.cost = TraceCost(model=self.tracer.name, layers=tuple(self.layers), steps=tuple(self.steps),
                              runs=len(self.layers) * len(self.steps), seconds_per_run=per_run, setup_seconds=setup,
                              group=self.tracer.group, seconds_per_group=group, groups=groups, state_bytes=int(held))

    def _cell(self, a, b):
        logits = self.tracer.cell(self.layers[a], self.steps[b])
        self.prob[:, a, b] = _prob(logits, self.position, self.target)

    def run(self) -> CausalTrace:
        cells = [(a, b) for a in range(len(self.layers)) for b in range(len(self.steps))]
        if self.tracer.group == "step":  # our models: the unchanged continuation after a step serves every layer
            cells.sort(key=lambda ab: (ab[1], ab[0]))
        for a, b in cells[1:]:
            self._cell(a, b)
        return CausalTrace(restored_prob=self.prob, clean_prob=self.clean_prob, corrupted_prob=self.corrupted_prob,
                           layers=tuple(self.layers), steps=tuple(self.steps), position=self.position,
                           target=self.target, model=self.tracer.name, part=self.part, cost=self.cost)


def causal_trace(model, clean_ids, corrupted_ids, *, target, layers=None, steps=None, position=None, part="state",
                 on_cost=None) -> CausalTrace:
    """Restore the clean run's state of each (layer, step) into the corrupted run; the target's probability each time.

    Parameters
    ----------
    model : transformers model of a registered family, str or os.PathLike, or one of ours
        As :func:`hiddenstate.intervene` takes it: a ``save_pretrained`` directory is loaded
        offline; ours: a :class:`~hiddenstate.train.model.CharRNN` (any cell), a
        :class:`~hiddenstate.MambaLM` or a :class:`~hiddenstate.Mamba2LM`.
    clean_ids, corrupted_ids : array_like of int, shape (N, T) or (T,)
        The clean prompt and its corrupted version, token for token at the same positions
        (T >= 2).
    target : int or array_like of int, shape (N,)
        The token whose probability at ``position`` is read (one for all sequences, or one each).
    layers : int or list of int, optional
        The traced layers, the model's own indices (as in its layer map; for ours, the index in
        the stack); default every recurrent layer.
    steps : int or list of int, optional
        The steps whose state (after reading that token) is restored, each in
        ``[0, position)``; default all of them, ``0 .. position-1``.
    position : int, optional
        The position whose next-token distribution is read, in ``[1, T)``; default T-1, the last.
    part : str, default "state"
        The part of the state restored (:class:`~hiddenstate.StateEdit`'s ``part``: ``"state"``,
        ``"conv"`` or a field's name; ``"state"`` restores a stabiliser with it).
    on_cost : callable, optional
        ``on_cost(cost)``, called with the :class:`~hiddenstate.edit.causal.result.TraceCost`
        after the clean and corrupted runs and the first cell, before the rest of the sweep (the
        command line prints it).

    Returns
    -------
    CausalTrace
        ``restored_prob`` (N, L, S), ``clean_prob`` and ``corrupted_prob`` (N,); its
        ``indirect_effect`` (L, S) is the mean over the sequences of ``p_restored -
        p_corrupted``; ``normalized`` divides it by ``p_clean - p_corrupted``; ``plot()`` draws
        the heatmap.

    Raises
    ------
    TypeError
        A model that cannot be traced (neither of a registered family nor ours); ids or a target
        that are not integers; layers or steps that are not ints.
    ValueError
        Clean and corrupted ids of different shapes; ids or a target outside the vocabulary; a
        layer that is not recurrent (naming its role) or past our stack; a step outside
        ``[0, position)``; a position outside ``[1, T)``; a part the layers' state has not; a
        layer whose recomputation leaves the tolerance.

    Notes
    -----
    The sweep runs the clean and corrupted ids once each, then ``L * S`` edited runs, one per
    cell: for a transformers model two runs of the traced layer's block over the steps after t
    and one forward pass of the model (and, per layer, two runs of its block over all steps for
    its states); for ours one run of the model over the steps after t (and one per step shared
    by the layers). Each cell equals :func:`hiddenstate.intervene` of
    ``StateEdit(layer, step, "replace", source=clean_ids, part=part)`` on the corrupted ids, to
    round-off (``tests/test_causal_trace.py``).
    """
    sweep = _Sweep(model, clean_ids, corrupted_ids, target, layers, steps, position, part)
    if on_cost is not None:
        on_cost(sweep.cost)
    return sweep.run()


def trace_cost(model, clean_ids, corrupted_ids, *, target, layers=None, steps=None, position=None,
               part="state") -> TraceCost:
    """What :func:`causal_trace` with these arguments will cost: its edited runs and the seconds of one, measured.

    Runs the clean and corrupted ids and the sweep's first cell (timed), nothing more.

    Parameters
    ----------
    model, clean_ids, corrupted_ids, target, layers, steps, position, part
        As :func:`causal_trace`.

    Returns
    -------
    TraceCost
        ``runs`` (L * S), ``seconds_per_run``, ``seconds`` (the estimate), ``setup_seconds``,
        ``state_bytes``; ``str(cost)`` is one line.

    Raises
    ------
    TypeError, ValueError
        As :func:`causal_trace`.
    """
    return _Sweep(model, clean_ids, corrupted_ids, target, layers, steps, position, part).cost
