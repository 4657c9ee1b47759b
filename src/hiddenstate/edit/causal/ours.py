"""Causal tracing in our own models (a CharRNN of any cell, MambaLM, Mamba2LM): one run of the rest of the ids per cell.

:meth:`OursTracer.setup` runs the model once on the clean ids (keeping the traced layers'
restored part after every step) and once on the corrupted ids (keeping every layer's whole state
after every step). A cell (layer l, step t) rebuilds the model's carried state after step t of
the corrupted run, replaces layer l's part with the clean run's, and runs the model's own
forward pass on the corrupted ids after t from it; the logits returned are the corrupted run's
plus the difference of that run and the same continuation from the unchanged state (computed
once per step, shared by the layers)::

    logits[:, t+1:] = corrupted[:, t+1:] + (continued_restored - continued_corrupted)

the ``"delta"`` form of :func:`hiddenstate.intervene` for our models, whose cell
(``StateEdit(l, t, "replace", source=clean_ids)`` on the corrupted ids) it equals to round-off.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.edit.ops import part_fields
from hiddenstate.edit.ours import runner_for

__all__ = ["OursTracer"]


class OursTracer:
    """The clean and corrupted runs of one of our models, kept for a sweep of restored cells.

    Parameters
    ----------
    model : CharRNN, MambaLM or Mamba2LM

    Attributes
    ----------
    name : str
    V : int
    recurrent : list of int
        Every layer of the stack.

    Raises
    ------
    TypeError
        Another model.
    """

    def __init__(self, model):
        self.runner = runner_for(model)
        self.name, self.V, self.recurrent = self.runner.name, self.runner.V, list(range(self.runner.L))

    def check_layer(self, i: int) -> None:
        """Refuse a layer past the stack.

        Parameters
        ----------
        i : int

        Raises
        ------
        ValueError
        """
        if not 0 <= i < self.runner.L:
            raise ValueError(f"layers must lie in [0, {self.runner.L}) (the index in this {self.name}'s stack of "
                             f"{self.runner.L} layers); got {i}.")

    def setup(self, clean, corrupted, layers, part: str):
        """Run the clean and corrupted ids, keep the states the cells read.

        Parameters
        ----------
        clean, corrupted : ndarray of int64, shape (N, T)
        layers : list of int
        part : str

        Returns
        -------
        clean_logits, corrupted_logits : ndarray of shape (N, T, V), float64
        held_bytes : int
            Bytes of the states kept.

        Raises
        ------
        ValueError
            A part the layers' state has not.
        """
        r = self.runner
        probe = r.run(clean[:, :1], None, layers)[2]  # a part the state has not: refused before the model runs
        for i in layers:
            part_fields(r.kind, part, tuple(probe[i]), with_stabiliser=True)
        clean_logits, _, rec_clean = r.run(clean, None, layers)
        corrupted_logits, final, rec = r.run(corrupted, None, list(range(r.L)))
        self.clean = {}
        for i in layers:
            names = part_fields(r.kind, part, tuple(rec_clean[i]), with_stabiliser=True)
            self.clean[i] = {f: np.array(rec_clean[i][f], dtype=np.float64) for f in names}
        self.rec = {i: {f: np.array(v, dtype=np.float64) for f, v in d.items()} for i, d in rec.items()}
        self.final, self.ids, self.base = final, corrupted, {}
        self.logits = np.asarray(corrupted_logits, dtype=np.float64)
        held = sum(v.nbytes for d in (*self.clean.values(), *self.rec.values()) for v in d.values())
        return np.asarray(clean_logits, dtype=np.float64), self.logits, held

    #: The sweep's order: step by step (the unchanged continuation after a step serves every layer, :meth:`prepare`).
    group = "step"

    def prepare(self, i, t: int) -> int:
        """Hold the corrupted run's continuation after step ``t`` from its own state (one run of the model).

        Parameters
        ----------
        i : int or None
            Unused (the continuation serves every layer).
        t : int

        Returns
        -------
        int
            Bytes of the continuation held.
        """
        if t not in self.base:
            rest = self.ids[:, t + 1:]
            self.base = {t: np.asarray(self.runner.run(rest, self._state_at(t), [])[0], dtype=np.float64)}
        return self.base[t].nbytes

    def _state_at(self, t: int):
        state = self.final
        for i, fields in self.rec.items():
            state = self.runner.put(state, i, {f: v[t] for f, v in fields.items()})
        return state

    def cell(self, i: int, t: int) -> np.ndarray:
        """The corrupted run's logits with layer ``i``'s part restored after step ``t`` (module docstring).

        Parameters
        ----------
        i : int
        t : int
            In [0, T-1).

        Returns
        -------
        ndarray of shape (N, T, V), float64
        """
        r, rest = self.runner, self.ids[:, t + 1:]
        self.prepare(i, t)
        state = self._state_at(t)
        restored = r.put(state, i, {f: v[t] for f, v in self.clean[i].items()})
        logits = self.logits.copy()
        logits[:, t + 1:] += np.asarray(r.run(rest, restored, [])[0], dtype=np.float64) - self.base[t]
        return logits
