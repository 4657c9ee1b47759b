"""What :func:`hiddenstate.intervene` returns: :class:`EditRun`, the edited and clean logits and the effect per position."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["EditRun", "check_target", "log_softmax"]


def log_softmax(logits) -> np.ndarray:
    """``log softmax`` over the last axis, float64, stable (the row's maximum subtracted first).

    Parameters
    ----------
    logits : ndarray of shape (..., V)

    Returns
    -------
    ndarray of shape (..., V), float64
    """
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


@dataclass(frozen=True, repr=False)
class EditRun:
    """An edited run beside the clean run of the same ids, and the edit's effect at every position.

    Attributes
    ----------
    logits : ndarray of shape (N, T, V), float64
        The edited run's logits (the model's own, computed in its dtype, as float64).
    clean_logits : ndarray of shape (N, T, V), float64
        The clean run's; equal to ``logits`` at every position <= the first edited step.
    states : dict of int to dict of str to ndarray (T, N, ...)
        Per edited layer, its state after every step of the edited run, by field (after the edit
        at an edited step), float64.
    clean_states : dict of int to dict of str to ndarray (T, N, ...)
        The same layers' states in the clean run.
    edits : tuple of StateEdit
    model : str
        What ran: the family (``"bamba"``) or our model's class.
    errors : dict of int to float
        Per edited layer of a transformers model, ``max |ours - theirs| / max |theirs|`` of our
        clean recomputation against the model's own output in the edited run (empty for our models).
    target : ndarray of int, shape (N, T), or None
        The target ids the probabilities are read at.
    """

    logits: np.ndarray
    clean_logits: np.ndarray
    states: dict
    clean_states: dict
    edits: tuple
    model: str
    errors: dict = field(default_factory=dict)
    target: np.ndarray | None = None

    def __repr__(self) -> str:
        N, T, V = self.logits.shape
        return (f"EditRun({self.model}, N={N}, T={T}, V={V}, edits={len(self.edits)}, max KL "
                f"{float(self.kl.max()):.3g})")

    @property
    def logit_diff(self) -> np.ndarray:
        """``||logits - clean_logits||_2`` over the vocabulary, (N, T).

        Returns
        -------
        ndarray of shape (N, T)
        """
        return np.linalg.norm(self.logits - self.clean_logits, axis=-1)

    @property
    def kl(self) -> np.ndarray:
        """``KL(clean || edited)`` of the next-token distributions, in nats, (N, T).

        Returns
        -------
        ndarray of shape (N, T)
            ``sum_v p_clean(v) (log p_clean(v) - log p_edited(v))``, >= 0.
        """
        lp, lq = log_softmax(self.clean_logits), log_softmax(self.logits)
        return np.maximum((np.exp(lp) * (lp - lq)).sum(axis=-1), 0.0)

    def _prob(self, logits):
        if self.target is None:
            raise ValueError("target must be given to intervene (token ids of shape (N, T)) to read a target's "
                             "probability; got None.")
        return np.take_along_axis(np.exp(log_softmax(logits)), self.target[..., None], axis=-1)[..., 0]

    @property
    def target_prob(self) -> np.ndarray:
        """The edited run's probability of the target token at every position, (N, T).

        Returns
        -------
        ndarray of shape (N, T)

        Raises
        ------
        ValueError
            No ``target`` was given.
        """
        return self._prob(self.logits)

    @property
    def clean_target_prob(self) -> np.ndarray:
        """The clean run's probability of the target token, (N, T).

        Returns
        -------
        ndarray of shape (N, T)

        Raises
        ------
        ValueError
            No ``target`` was given.
        """
        return self._prob(self.clean_logits)

    def effects(self) -> dict:
        """The effect per position as plain lists, for JSON: ``logit_diff``, ``kl`` and the target's probabilities.

        Returns
        -------
        dict of str to list
            ``{"logit_diff": [[...] per sequence], "kl": ..., "target_prob": ..., "clean_target_prob": ...}``
            (the last two only with a target).
        """
        out = {"logit_diff": self.logit_diff.tolist(), "kl": self.kl.tolist()}
        if self.target is not None:
            out.update(target_prob=self.target_prob.tolist(), clean_target_prob=self.clean_target_prob.tolist())
        return out


def check_target(target, N: int, T: int, V: int):
    """``target`` as int64 (N, T) in [0, V), or None.

    Parameters
    ----------
    target : array_like of int or None
        (N, T), or (T,) for one sequence.
    N, T, V : int

    Returns
    -------
    ndarray of int64, shape (N, T), or None

    Raises
    ------
    TypeError, ValueError
        Not integers, another shape, out of range.
    """
    if target is None:
        return None
    arr = np.asarray(target)
    if arr.dtype.kind not in "iu" or arr.dtype == bool:
        raise TypeError(f"target must be integer token ids of shape (N={N}, T={T}); got dtype {arr.dtype}.")
    arr = arr[None] if arr.ndim == 1 else arr
    if arr.shape != (N, T):
        raise ValueError(f"target must have the ids' shape (N={N}, T={T}); got {arr.shape}.")
    if arr.min() < 0 or arr.max() >= V:
        raise ValueError(f"target must lie in [0, V={V}); got values in [{arr.min()}, {arr.max()}].")
    return arr.astype(np.int64)
