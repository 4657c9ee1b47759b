"""What the report's explorer shows about each unit, computed from a trace (no report code here).

:func:`explore_data` gathers, for the top layer of a trace and the characters of sequence 0,
the state and every sigmoid gate of every unit (directions side by side, like the layer's
output), and per unit: the feature it tracks best with its correlation, its memory time
constant ``1 / (1 - mean keep gate)`` and how saturated it is. :mod:`hiddenstate.report.explorer`
renders that mapping; :func:`hiddenstate.analyze_model` stores it as ``Analysis.explore``.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.probe.gatestats import time_constant

__all__ = ["explore_data", "varying_memory_unit"]


def _top_gates(tr, n_chars: int) -> dict[str, np.ndarray]:
    """The top layer's sigmoid gates of sequence 0, (T', D*H) each, directions side by side."""
    top = [tr[tr.num_layers - 1, d] for d in range(tr.num_directions)]
    cell = top[0].cell
    return {g: np.concatenate([lt.gates[g][:n_chars, 0] for lt in top], axis=1) for g in cell.sigmoid_gates}


def explore_data(tr, text: str, units: dict, *, featured=()) -> dict:
    """The explorer's data for the top layer of a trace on the characters of its sequence 0.

    Parameters
    ----------
    tr : Trace
        A traced run (:func:`hiddenstate.probe.trace.trace`); sequence 0 read ``text``.
    text : str
        Its characters, one per step (at most the valid steps of sequence 0).
    units : dict of str to UnitCorrelation
        Feature name -> correlations of every unit (``r`` of shape (D*H,)), e.g.
        :func:`hiddenstate.probe.unitfeatures.best_units` of the same states; may be empty.
    featured : sequence of (label, signal, unit), default ()
        Units to offer as buttons (the first one is shown first).

    Returns
    -------
    dict
        ``"text"``; ``"signals"``: ``"h"`` (T', D*H) then each sigmoid gate of the kind (the
        cell kind's keep gate first); ``"units"``: ``"best feature"`` (label with ``r``), ``"|r|"``,
        ``"time constant"`` (of the keep gate; absent for kinds without one) and
        ``"saturation"`` (fraction of steps a unit's gates are below 0.1 or above 0.9, averaged
        over its gates; for an Elman RNN the fraction with ``|h| > 0.9``), each of shape (D*H,);
        ``"featured"``; ``"norm"``: ``||h_t||`` over all units, shape (T',).
    """
    n = len(text)
    h = tr.output[:n, 0]  # (T', D*H)
    gates = _top_gates(tr, n)
    keep = tr[0].cell.keep_gate
    order = ([keep] if keep in gates else []) + [g for g in gates if g != keep]
    signals = {"h": h, **{g: gates[g] for g in order}}
    cols = {}
    if units:
        names = list(units)
        R = np.stack([units[k].r for k in names])  # (F, D*H)
        best = np.argmax(np.abs(R), axis=0)
        cols["best feature"] = [f"{names[b]} (r = {R[b, j]:+.2f})" for j, b in enumerate(best)]
        cols["|r|"] = np.abs(R[best, np.arange(R.shape[1])])
    if keep in gates:
        cols["time constant"] = np.minimum(time_constant(np.clip(gates[keep].mean(axis=0), 0.0, 1.0)), 1e6)
    if gates:
        cols["saturation"] = np.mean([((g < 0.1) | (g > 0.9)).mean(axis=0) for g in gates.values()], axis=0)
    else:
        cols["saturation"] = (np.abs(h) > 0.9).mean(axis=0)
    return {"text": text, "signals": signals, "units": cols, "featured": list(featured),
            "norm": np.linalg.norm(h, axis=1)}


def varying_memory_unit(gate: np.ndarray, *, candidates: int = 10) -> int:
    """The keep-gate unit to feature: among the longest-memory units, the one whose gate varies most.

    A unit whose keep gate sits at 0.99 throughout has the longest time constant but colours the
    text a uniform "always on"; of the ``candidates`` units with the largest mean, the one with
    the largest standard deviation over time shows when the unit holds and when it lets go.

    Parameters
    ----------
    gate : ndarray of shape (T, H)
        The keep gate's values.
    candidates : int, default 10
        How many of the longest-memory units to choose from.

    Returns
    -------
    int
        The unit's index.
    """
    m = gate.mean(axis=0)
    pool = np.argsort(-m, kind="stable")[:candidates]
    return int(pool[np.argmax(gate[:, pool].std(axis=0))])
