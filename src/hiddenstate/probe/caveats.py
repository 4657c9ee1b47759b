"""What the input lets the analyses say: the lag the data asks for, and plain warnings where it cannot show memory.

* :func:`data_lag`: the largest lag of the gradient curve chosen from the layer itself, three
  times its slowest time constant (so a 900-step head is seen to fall), at least
  :data:`MIN_LAG` and at most T - 1 (and :data:`MAX_AUTO_LAG`);
* :func:`input_warnings`: sentences the report puts at its top when the measurements cannot mean
  much: a memory curve scored on a handful of held-out steps, a PCA of a few points, token ids
  that are (as far as the curve can tell) random, so that there is nothing to remember and no
  readout can learn to decode an id it has seen once.
"""

from __future__ import annotations

import math

import numpy as np

from hiddenstate.core.validation import positive_int

__all__ = ["MAX_AUTO_LAG", "MIN_LAG", "MIN_PCA_POINTS", "MIN_SCORED_STEPS", "data_lag", "input_warnings"]

#: The smallest lag :func:`data_lag` chooses (the fixed default before it).
MIN_LAG = 30
#: The largest lag :func:`data_lag` chooses (each lag is one Jacobian product per layer).
MAX_AUTO_LAG = 2048
#: Below this many held-out steps a memory curve's score is mostly noise (1/sqrt(50) ~ 0.14).
MIN_SCORED_STEPS = 50
#: Below this many points (steps x sequences) a PCA's axes say little.
MIN_PCA_POINTS = 50


def data_lag(T: int, time_constants) -> int:
    """The gradient curve's largest lag for one layer: ``clip(ceil(3 tau_max), MIN_LAG, min(T - 1, MAX_AUTO_LAG))``.

    Parameters
    ----------
    T : int
        Steps (positive).
    time_constants : array_like or None
        The layer's time constants in steps (any shape; ``inf`` for a gate held at 1); None or
        empty for a kind without a keep gate.

    Returns
    -------
    int
        Three slowest time constants (a contribution kept ``m**k`` is down to ``e**-3 ~ 5%``
        there), at least :data:`MIN_LAG`, at most ``T - 1`` (the last lag there is) and
        :data:`MAX_AUTO_LAG`; an infinite time constant asks for the most; at least 1.

    Raises
    ------
    TypeError, ValueError
        ``T`` not a positive int.
    """
    T = positive_int("T", T)
    top = max(min(T - 1, MAX_AUTO_LAG), 1)
    tau = np.asarray([] if time_constants is None else time_constants, dtype=np.float64).reshape(-1)
    tau = tau[~np.isnan(tau)]
    want = MIN_LAG if tau.size == 0 else (top if not np.isfinite(tau.max()) else math.ceil(3.0 * float(tau.max())))
    return int(min(max(want, MIN_LAG), top))


def input_warnings(T: int, N: int, *, scored=None, ids=None, has_text: bool = False) -> list:
    """Plain sentences on what the input cannot show, for the top of the report.

    Parameters
    ----------
    T, N : int
        Steps and sequences the analyses read.
    scored : int, optional
        Held-out steps the memory curve is scored on (None: no memory curve).
    ids : array_like of int, optional
        The token ids (any shape), for the random-ids check.
    has_text : bool, default False
        The ids come from a text (then they are not called random).

    Returns
    -------
    list of str
        Empty when nothing needs saying. The checks: fewer than :data:`MIN_SCORED_STEPS` scored
        steps; fewer than :data:`MIN_PCA_POINTS` points for PCA; ids, without a text, of which
        most distinct values occur once (a random draw from a large vocabulary): nothing to
        remember, and a readout cannot learn an id from one example, so the memory curve
        stays at chance whatever the layer keeps.
    """
    out = []
    if scored is not None and scored < MIN_SCORED_STEPS:
        out.append(f"The memory curve is scored on only {scored} held-out step(s) (T={T}, N={N}; the last quarter "
                   f"of each sequence): a score moves by about {1 / math.sqrt(max(scored, 1)):.2f} from chance "
                   f"alone. Give at least {4 * MIN_SCORED_STEPS} steps for a curve to mean something.")
    if T * N < MIN_PCA_POINTS:
        out.append(f"PCA of the states rests on {T * N} point(s) (T={T} steps of N={N} sequence(s)): its axes and "
                   f"explained variances say little below about {MIN_PCA_POINTS}.")
    if ids is not None and not has_text:
        arr = np.asarray(ids).reshape(-1)
        if arr.size >= 8 and arr.dtype.kind in "iu":
            _, counts = np.unique(arr, return_counts=True)
            once = float(np.mean(counts == 1))
            if once > 0.5:
                out.append(f"The input looks like random token ids: {100 * once:.0f}% of its {counts.size} distinct ids "
                           "occur only once. Random ids carry nothing to remember and a readout cannot learn to decode "
                           "an id seen once, so the memory curve stays near chance whatever the layers keep (a horizon "
                           "of -1 says so). Give a real text (--text FILE, or ids of one) to see memory.")
    return out
