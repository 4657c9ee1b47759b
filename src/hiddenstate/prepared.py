"""What a sequence layer's run is made of: its validated input, its caches, its final state by direction.

:class:`Prepared` is the result of :meth:`hiddenstate.recurrent.RecurrentLayer.prepare` (the one
place a layer's inputs are validated); :class:`LayerCache` and :class:`DirectionCache` are what
:meth:`~hiddenstate.recurrent.RecurrentLayer.run` keeps for the backward pass and for
:func:`hiddenstate.probe.trace`; :class:`DirectionalState` names the two halves of a
bidirectional ``h_n``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = ["DirectionCache", "DirectionalState", "LayerCache", "Prepared"]


class DirectionalState(NamedTuple):
    """A final state split by direction, so nobody has to index ``h_n[-2]`` / ``h_n[-1]`` by hand.

    Attributes
    ----------
    forward : ndarray of shape (L, N, H)
        Final state of the forward direction of every layer.
    backward : ndarray of shape (L, N, H) or None
        Final state of the backward direction (state after reading each row's first step),
        None for a unidirectional layer.
    """

    forward: np.ndarray
    backward: np.ndarray | None


class Prepared(NamedTuple):
    """A validated layer input, time-major, ready for :meth:`RecurrentLayer.run`.

    Attributes
    ----------
    x : ndarray of shape (T, N, I)
        C-contiguous, of the layer's dtype (unbatched input gets N = 1, batch_first is undone).
    state0 : ndarray of shape (L*D, N, H), or a pair of them (LSTM)
        The initial state of every layer and direction (a private copy).
    learned : tuple of bool
        For each part of the state (``(h,)``, or ``(h, c)`` for the LSTM): it is the layer's learned
        initial state (``learn_h0=True`` and that part not given), so its gradient goes to
        ``params["h0"]`` / ``params["c0"]``.
    lengths : ndarray of int64, shape (N,), or None
        Valid steps per column (None: every column has length T).
    keep : ndarray of bool, shape (T, N, 1), or None
        False at padded steps (None when nothing is padded).
    reset : ndarray of bool, shape (T, N), or None
        True where a column restarts from its initial state (None when it never does).
    unbatched : bool
        The input was (T, I); results drop the batch axis again.
    """

    x: np.ndarray
    state0: object
    learned: tuple
    lengths: np.ndarray | None
    keep: np.ndarray | None
    reset: np.ndarray | None
    unbatched: bool

    @property
    def mask(self) -> np.ndarray:
        """Valid steps, bool (T, N)."""
        T, N = self.x.shape[:2]
        return np.ones((T, N), dtype=bool) if self.keep is None else self.keep[:, :, 0].copy()


@dataclass(frozen=True)
class DirectionCache:
    """What one layer and direction of a run kept for the backward pass.

    Attributes
    ----------
    x : ndarray of shape (T, N, I_k)
        The input this direction read, in its processing order.
    kernel : object
        The cache of the kind's ``scan_forward`` (read it with ``kind.recorded``).
    weight_mask : ndarray of shape (G*H, H) or None
        The DropConnect mask applied to ``weight_hh`` (``weight_drop``), if any.
    reset : ndarray of bool, shape (T, N, 1), or None
        The reset mask in this direction's processing order.
    """

    x: np.ndarray
    kernel: object
    weight_mask: np.ndarray | None
    reset: np.ndarray | None


@dataclass(frozen=True)
class LayerCache:
    """Everything :meth:`RecurrentLayer.backward` needs from one :meth:`RecurrentLayer.run`.

    Attributes
    ----------
    directions : list of DirectionCache
        Index ``layer * D + direction`` (the order of ``h_n``'s first axis).
    dropout_masks : list of (ndarray or None)
        The inter-layer dropout mask applied to each layer's output (T, N, D*H).
    prepared : Prepared
        The input of the run.
    reverse : ndarray of int, shape (T, N), or None
        The time index of the backward direction (:func:`hiddenstate.ragged.reverse_index`).
    """

    directions: list
    dropout_masks: list
    prepared: Prepared
    reverse: np.ndarray | None
