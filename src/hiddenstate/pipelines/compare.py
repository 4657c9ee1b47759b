"""``hiddenstate.compare_states``: two prompts through a model, their states side by side, layer by layer."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from hiddenstate.probe.compare import state_distance

__all__ = ["StateComparison", "compare_states"]


@dataclass(frozen=True)
class StateComparison:
    """The distance between two prompts' states at every recurrent layer and step.

    Attributes
    ----------
    layers : tuple of int
        The model's own indices of the compared layers (as in its layer map).
    distance : ndarray of shape (L, T), float64
        ``||a_t - b_t||`` over every sequence and state entry of the layer (every state field
        of its kind joined: an SSM state and its convolution window, a delta rule's matrix).
    relative : ndarray of shape (L, T), float64
        ``distance / sqrt((||a_t||^2 + ||b_t||^2) / 2)``: 0 for the same state, ~1.4 for unrelated
        ones of equal size (:func:`~hiddenstate.probe.compare.state_distance`).
    first_apart : tuple of int or None
        Per layer, the first step whose relative distance exceeds ``tol`` (None: never).
    tol : float
        The threshold of ``first_apart``.
    model : str
        The model's class name.
    """

    layers: tuple
    distance: np.ndarray
    relative: np.ndarray
    first_apart: tuple
    tol: float
    model: str

    def __str__(self) -> str:
        lines = [f"{self.model}: two prompts of {self.relative.shape[1]} steps, {len(self.layers)} recurrent layers"]
        for i, layer in enumerate(self.layers):
            first = self.first_apart[i]
            where = "never apart" if first is None else f"apart from step {first}"
            lines.append(f"  layer {layer}: {where}; relative distance at the last step "
                         f"{self.relative[i, -1]:.3g}, largest {self.relative[i].max():.3g}")
        return "\n".join(lines)

    def plot(self, ax=None):
        """The relative distance as a heatmap, layers by steps (matplotlib).

        Parameters
        ----------
        ax : matplotlib Axes, optional
            Drawn into (default a new figure's).

        Returns
        -------
        matplotlib Axes
        """
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(7, 0.5 + 0.35 * len(self.layers)))
        image = ax.imshow(self.relative, aspect="auto", interpolation="nearest", cmap="viridis")
        ax.set_yticks(range(len(self.layers)), [str(i) for i in self.layers])
        ax.set_xlabel("step t")
        ax.set_ylabel("layer")
        ax.figure.colorbar(image, ax=ax, label="relative distance of the states")
        return ax


def compare_states(model, ids_a, ids_b, *, layers=None, tol: float = 1e-6, max_bytes=None) -> StateComparison:
    """Run two prompts of the same length through a model and measure how far apart their states are, each step.

    Both prompts run as one batch; each recurrent layer is recomputed from its hooked input and
    held to the model's output (:func:`~hiddenstate.interop.families.hooks.recompute_layers`), and
    its states (every field of its kind) are compared step by step. Where two prompts differ in
    one token, the distance is 0 before it and shows how long each layer carries the difference.

    Parameters
    ----------
    model : transformers model of a registered family, or str or os.PathLike
        A directory is a ``save_pretrained`` directory (loaded offline).
    ids_a, ids_b : array_like of int, shape (N, T) or (T,)
        The two prompts (the same shape: positions are compared one to one).
    layers : int or list of int, optional
        Recurrent layers to compare (model indices; default all).
    tol : float, default 1e-6
        A relative distance above this marks the layer's ``first_apart`` step.
    max_bytes : int, optional
        Cap on the records (:func:`~hiddenstate.interop.families.hooks.recompute_layers`; default
        its 4 GiB).

    Returns
    -------
    StateComparison

    Raises
    ------
    TypeError
        A model of no registered family; ids that are not integers.
    ValueError
        ``ids_a`` and ``ids_b`` of different shapes; ids out of the vocabulary; layers that are
        not recurrent; a negative or non-finite ``tol``.
    """
    from hiddenstate.core.validation import real
    from hiddenstate.interop.families.hooks import MAX_BYTES, recompute_layers
    from hiddenstate.kinds import get_kind

    tol = real("tol", tol, low=0.0)
    if isinstance(model, (str, os.PathLike)):
        from hiddenstate.interop.families.directory import load_model_dir

        model = load_model_dir(model)
    a, b = (_ids(x, name) for x, name in ((ids_a, "ids_a"), (ids_b, "ids_b")))
    if a.shape != b.shape:
        raise ValueError(f"ids_a and ids_b must have the same shape (N, T), positions compared one to one; got "
                         f"{a.shape} and {b.shape}.")
    N = a.shape[0]
    run = recompute_layers(model, np.concatenate([a, b]), layers=layers,
                           max_bytes=MAX_BYTES if max_bytes is None else max_bytes)
    kind = get_kind(run.family.kind)
    dist, rel, first = [], [], []
    for record in run.records:
        fields = kind.states(record)
        d, r = state_distance({k: v[:, :N] for k, v in fields.items()}, {k: v[:, N:] for k, v in fields.items()})
        dist.append(d)
        rel.append(r)
        apart = np.flatnonzero(r > tol)
        first.append(int(apart[0]) if apart.size else None)
    return StateComparison(layers=tuple(run.layers), distance=np.stack(dist), relative=np.stack(rel),
                           first_apart=tuple(first), tol=float(tol), model=type(model).__name__)


def _ids(ids, name: str) -> np.ndarray:
    try:
        import torch

        if isinstance(ids, torch.Tensor):
            ids = ids.detach().cpu().numpy()
    except ImportError:  # pragma: no cover
        pass
    arr = np.asarray(ids)
    if arr.dtype == bool or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integer token ids of shape (N, T) or (T,); got dtype {arr.dtype}.")
    arr = arr[None] if arr.ndim == 1 else arr
    if arr.ndim != 2 or 0 in arr.shape:
        raise ValueError(f"{name} must have shape (N, T) with N, T >= 1 (or (T,)); got shape {np.shape(ids)}.")
    return arr.astype(np.int64)
