"""Two runs' states side by side, and a linear probe of a user's labels from the states.

:func:`state_distance` is the distance per step between two runs of the same layer (two prompts
of the same length: where do their states part, and do they meet again?);
:func:`probe_states` fits a linear readout (ridge regression on the standardised, flattened
states) of a per-token label on the earlier steps of every sequence and scores it on the later
ones, with the chance level beside it (Alain and Bengio 2016; for a label that is the input
``k`` steps back, it is one point of :func:`~hiddenstate.probe.state_memory.state_memory_curve`,
Jaeger 2001). :func:`hiddenstate.compare_states` reads two prompts' states of a model's layers
and gives the distances of every layer.

References
----------
G. Alain and Y. Bengio, "Understanding intermediate layers using linear classifier probes",
arXiv:1610.01644, 2016.
H. Jaeger, "Short term memory in echo state networks", GMD Report 152, 2001.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hiddenstate.core.validation import float_array, shape_str
from hiddenstate.probe.state_memory import state_memory_curve

__all__ = ["ProbeResult", "flat_states", "probe_states", "state_distance"]


def _parts(states, name: str) -> list:
    """The arrays (T, N, ...) a ``states`` argument holds, in a fixed order."""
    if isinstance(states, dict):
        if not states:
            raise ValueError(f"{name} must hold at least one array of states; got an empty dict.")
        out = []
        for key in sorted(states, key=str):
            out.extend(_parts(states[key], f"{name}[{key!r}]"))
        return out
    saved = getattr(states, "states", None)
    if isinstance(saved, dict):  # a SavedStates (hiddenstate.load_states)
        return _parts(saved, f"{name}.states")
    arr = float_array(name, states, dtype=np.float64)
    if arr.ndim < 2:
        raise ValueError(f"{name} must have shape (T, N, ...) (time-major, as records and saved states are); "
                         f"got {shape_str(arr.shape)}.")
    return [arr]


def flat_states(states, name: str = "states") -> np.ndarray:
    """Every array of ``states`` flattened per (step, sequence) and joined: (T, N, F) float64.

    Parameters
    ----------
    states : array_like (T, N, ...), dict of them (nested: ``{layer: {name: array}}``), or SavedStates
        Time-major states (a record's, :func:`hiddenstate.load_states`'s); dict keys are taken in
        sorted order.
    name : str, default "states"
        How errors name the argument.

    Returns
    -------
    ndarray of shape (T, N, F), float64

    Raises
    ------
    TypeError
        Non-numeric states.
    ValueError
        An empty dict, arrays of fewer than two axes, arrays whose (T, N) differ, values that are
        not finite.
    """
    parts = _parts(states, name)
    T, N = parts[0].shape[:2]
    for p in parts:
        if p.shape[:2] != (T, N):
            raise ValueError(f"{name} must all have the same steps and sequences (T, N) = ({T}, {N}); got an "
                             f"array of shape {shape_str(p.shape)}.")
    return np.concatenate([p.reshape(T, N, -1) for p in parts], axis=2)


def state_distance(states_a, states_b) -> tuple[np.ndarray, np.ndarray]:
    """The distance between two runs' states at every step: absolute, and relative to their size.

    ``d_t = ||a_t - b_t||`` over every sequence and state entry at step t, and
    ``r_t = d_t / sqrt((||a_t||^2 + ||b_t||^2) / 2)`` (0 where both are 0): 0 for the same state,
    about 1.4 for two unrelated states of equal size, 2 for opposite ones.

    Parameters
    ----------
    states_a, states_b : array_like (T, N, ...), dict of them, or SavedStates
        The same layers of two runs (:func:`flat_states`), the same shapes.

    Returns
    -------
    distance : ndarray of shape (T,), float64
        ``d_t``, in the states' units.
    relative : ndarray of shape (T,), float64
        ``r_t``, unitless.

    Raises
    ------
    ValueError
        States of different shapes (each named), or any rule of :func:`flat_states`.
    """
    a, b = flat_states(states_a, "states_a"), flat_states(states_b, "states_b")
    if a.shape != b.shape:
        raise ValueError(f"states_a and states_b must have the same shape (two runs of the same layers and "
                         f"length); got {shape_str(a.shape)} and {shape_str(b.shape)}.")
    d = np.sqrt(((a - b) ** 2).sum(axis=(1, 2)))
    scale = np.sqrt(((a**2).sum(axis=(1, 2)) + (b**2).sum(axis=(1, 2))) / 2)
    return d, np.divide(d, scale, out=np.zeros_like(d), where=scale > 0)


@dataclass(frozen=True)
class ProbeResult:
    """A linear probe's held-out score and the chance level beside it.

    Attributes
    ----------
    score : float
        Held-out accuracy (labels that are ints) or variance-weighted ``R^2`` (real labels).
    metric : {"accuracy", "r2"}
        Which.
    chance : float
        The accuracy of always guessing the most common training label (0 for ``"r2"``: a
        constant prediction scores at most 0).
    n_train, n_test : int
        Rows (step, sequence) that fitted and scored the readout.
    features : int
        F, the flattened state entries read.
    alpha : float
        The ridge penalty.
    """

    score: float
    metric: str
    chance: float
    n_train: int
    n_test: int
    features: int
    alpha: float

    def __str__(self) -> str:
        return (f"{self.metric} {self.score:.3f} on {self.n_test} held-out tokens (chance {self.chance:.3f}), "
                f"a linear readout of {self.features} state entries fitted on {self.n_train}")


def probe_states(states, labels, *, alpha: float = 1.0, train_fraction: float = 0.75) -> ProbeResult:
    """How well a linear readout of the states predicts a label of each token, held out, against chance.

    A ridge readout (penalty ``alpha`` on the standardised states) of ``labels[n, t]`` from the
    flattened states at step t is fitted on steps ``[0, round(train_fraction * T))`` of every
    sequence and scored on the later steps (Alain and Bengio 2016): classes for int labels
    (one-vs-all, accuracy), a regression for real ones (``R^2``).

    Parameters
    ----------
    states : array_like (T, N, ...), dict of them (``{layer: {name: array}}``), or SavedStates
        Time-major states of the chosen layers (:func:`flat_states`: every array joined).
    labels : array_like of int or float, shape (N, T) or (T,)
        One label per token, sequences first as token ids are (a part-of-speech tag, a bracket
        depth, the position in a word).
    alpha : float, default 1.0
        Ridge penalty, > 0.
    train_fraction : float, default 0.75
        The share of each sequence's steps that fits the readout, in (0, 1).

    Returns
    -------
    ProbeResult

    Raises
    ------
    TypeError
        Non-numeric states or labels.
    ValueError
        Labels of another (N, T) than the states, too few steps to split, ``alpha <= 0``,
        ``train_fraction`` outside (0, 1), values that are not finite.
    """
    S = flat_states(states)
    T, N, F = S.shape
    y = np.asarray(labels)
    if y.dtype.kind not in "iuf" or y.dtype == bool:
        raise TypeError(f"labels must be ints (classes) or floats (a quantity); got dtype {y.dtype}.")
    y = y[None] if y.ndim == 1 else y
    if y.shape != (N, T):
        raise ValueError(f"labels must have shape (N, T) = ({N}, {T}) (or (T,) for one sequence), one per token of "
                         f"the states; got {shape_str(np.shape(labels))}.")
    curve = state_memory_curve(S, y.T, max_lag=0, alpha=alpha, train_fraction=train_fraction)
    cut = round(train_fraction * T)
    return ProbeResult(score=float(curve.score[0]), metric=curve.metric, chance=float(curve.chance),
                       n_train=cut * N, n_test=(T - cut) * N, features=F, alpha=float(alpha))
