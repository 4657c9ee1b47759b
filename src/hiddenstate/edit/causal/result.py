"""What :func:`hiddenstate.causal_trace` returns (:class:`CausalTrace`) and what it says before it runs (:class:`TraceCost`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CausalTrace", "TraceCost"]


def _size(nbytes: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{int(nbytes)} B"


@dataclass(frozen=True)
class TraceCost:
    """The cost of a causal trace's sweep, known before the sweep runs (:func:`hiddenstate.trace_cost`).

    Attributes
    ----------
    model : str
        What runs: the family (``"mamba2"``) or our model's class.
    layers : tuple of int
        The traced layers (the model's own indices), L of them.
    steps : tuple of int
        The restored steps, S of them.
    runs : int
        Edited runs of the sweep, ``L * S`` (one per cell), besides the clean and corrupted runs.
    seconds_per_run : float
        Wall-clock seconds of the first cell's edited run, measured (its block recomputation and
        the model's forward pass).
    setup_seconds : float
        Seconds of the clean and corrupted runs and of the recomputation checks, measured.
    group : {"layer", "step"}
        What the sweep prepares once for several cells: a transformers model's layer (its
        states, every step, recomputed from the kept inputs; one layer held at a time), our
        model's step (the corrupted continuation after it, shared by the layers).
    seconds_per_group : float
        Seconds of preparing the first group, measured.
    groups : int
        Groups of the sweep (L or S).
    state_bytes : int
        Bytes held during the sweep: the traced layers' inputs and outputs in both runs and one
        layer's states (a transformers model), or every layer's states after every step of both
        runs (ours), float64.
    """

    model: str
    layers: tuple
    steps: tuple
    runs: int
    seconds_per_run: float
    setup_seconds: float
    group: str
    seconds_per_group: float
    groups: int
    state_bytes: int

    @property
    def seconds(self) -> float:
        """The sweep's estimated seconds, ``runs * seconds_per_run + groups * seconds_per_group``.

        Returns
        -------
        float
        """
        return self.runs * self.seconds_per_run + self.groups * self.seconds_per_group

    def __str__(self) -> str:
        return (f"causal trace of {self.model}: {len(self.layers)} layers x {len(self.steps)} steps = {self.runs} "
                f"edited runs; one took {self.seconds_per_run:.3g} s (and {self.seconds_per_group:.3g} s per "
                f"{self.group}), so about {self.seconds:.3g} s in all (held: {_size(self.state_bytes)}; clean and "
                f"corrupted runs {self.setup_seconds:.3g} s)")


@dataclass(frozen=True, repr=False)
class CausalTrace:
    """Causal tracing of a recurrent state over layers x steps (Meng et al. 2022, section 2.1; on the state itself).

    For each traced layer l and step t, the corrupted run with layer l's state after step t
    (its ``part``) replaced by the clean run's, continued by the model's own code; the target
    token's probability at ``position`` in that run is ``restored_prob``. The indirect effect of
    the cell is ``p_restored - p_corrupted``.

    Attributes
    ----------
    restored_prob : ndarray of shape (N, L, S), float64
        Per sequence, layer and step, the target's probability at ``position`` with that layer's
        state after that step restored.
    clean_prob, corrupted_prob : ndarray of shape (N,), float64
        The target's probability at ``position`` in the clean and in the corrupted run.
    layers : tuple of int
        The layers (the model's own indices, as in its layer map; for ours, the index in the stack).
    steps : tuple of int
        The restored steps (0-based positions; the state after reading that token).
    position : int
        The position whose next-token distribution is read.
    target : ndarray of int64, shape (N,)
        The target token per sequence.
    model : str
    part : str
        The restored part of the state (``"state"``, ``"conv"`` or a field).
    cost : TraceCost
        What the sweep cost, measured before it ran (its first cell).
    """

    restored_prob: np.ndarray
    clean_prob: np.ndarray
    corrupted_prob: np.ndarray
    layers: tuple
    steps: tuple
    position: int
    target: np.ndarray
    model: str
    part: str
    cost: TraceCost

    def __repr__(self) -> str:
        ie = self.indirect_effect
        l, s = np.unravel_index(int(np.argmax(ie)), ie.shape)
        return (f"CausalTrace({self.model}, {len(self.layers)} layers x {len(self.steps)} steps, p_clean "
                f"{float(self.clean_prob.mean()):.3g}, p_corrupted {float(self.corrupted_prob.mean()):.3g}, largest "
                f"effect {float(ie[l, s]):.3g} at layer {self.layers[l]}, step {self.steps[s]})")

    @property
    def indirect_effect(self) -> np.ndarray:
        """The indirect effect ``p_restored - p_corrupted`` per layer and step, the mean over the N sequences.

        Returns
        -------
        ndarray of shape (L, S), float64
            In probability (between -1 and 1); row i is ``layers[i]``, column j ``steps[j]``.
        """
        return (self.restored_prob - self.corrupted_prob[:, None, None]).mean(axis=0)

    @property
    def normalized(self) -> np.ndarray | None:
        """``indirect_effect / (p_clean - p_corrupted)`` (means over the sequences), or None where undefined.

        1 where restoring the cell recovers the whole clean probability, 0 where it recovers
        nothing.

        Returns
        -------
        ndarray of shape (L, S), float64, or None
            None when the mean clean and corrupted probabilities are equal (nothing to recover).
        """
        gap = float(self.clean_prob.mean() - self.corrupted_prob.mean())
        return None if gap == 0.0 else self.indirect_effect / gap

    def plot(self, *, normalized: bool = False, step_labels=None):
        """The heatmap of the indirect effect: layers (rows) x steps (columns), with a colour bar.

        Parameters
        ----------
        normalized : bool, default False
            Plot :attr:`normalized` instead of :attr:`indirect_effect`.
        step_labels : sequence of str, optional
            One tick label per step (the tokens read); default the step numbers.

        Returns
        -------
        matplotlib.figure.Figure
            On the Agg canvas (:func:`hiddenstate.report.figures.figure`); nothing is shown or written.

        Raises
        ------
        ValueError
            ``normalized=True`` where :attr:`normalized` is None; ``step_labels`` of another length.
        """
        from hiddenstate.report.tracing import trace_figure

        if normalized and self.normalized is None:
            raise ValueError("normalized must be False for this trace: the clean and corrupted probabilities are "
                             f"equal ({float(self.clean_prob.mean()):.6g}), so nothing is there to recover.")
        values = self.normalized if normalized else self.indirect_effect
        label = "normalised indirect effect" if normalized else "p restored - p corrupted"
        title = f"Restoring the clean {self.part} of {self.model}: target at position {self.position}"
        return trace_figure(values, self.layers, self.steps, title=title, label=label, step_labels=step_labels)

    def to_dict(self) -> dict:
        """The trace as plain JSON-ready values.

        Returns
        -------
        dict
            ``model``, ``part``, ``position``, ``layers``, ``steps``, ``target`` (N,),
            ``clean_prob`` and ``corrupted_prob`` (N,), ``restored_prob`` (N, L, S),
            ``indirect_effect`` (L, S), ``normalized`` (L, S) or None, ``cost``.
        """
        norm = self.normalized
        c = self.cost
        return {"model": self.model, "part": self.part, "position": self.position, "layers": list(self.layers),
                "steps": list(self.steps), "target": self.target.tolist(), "clean_prob": self.clean_prob.tolist(),
                "corrupted_prob": self.corrupted_prob.tolist(), "restored_prob": self.restored_prob.tolist(),
                "indirect_effect": self.indirect_effect.tolist(), "normalized": None if norm is None else norm.tolist(),
                "cost": {"runs": c.runs, "seconds_per_run": c.seconds_per_run, "setup_seconds": c.setup_seconds,
                         "group": c.group, "seconds_per_group": c.seconds_per_group, "groups": c.groups,
                         "state_bytes": c.state_bytes}}
