"""Gate statistics: how often each unit's gate is saturated, and how long it remembers.

Karpathy, Johnson and Fei-Fei (2015, section 4.3, Figure 3) summarise every gate of every unit
by the fraction of time it is *left-saturated* (activation below 0.1) and *right-saturated*
(above 0.9) and plot one against the other. A forget gate (LSTM) or update gate (GRU, in the
convention ``h_t = z * h_{t-1} + (1 - z) * n``) that is right-saturated most of the time keeps
its unit's value: an integrator, a "memory" unit.

A gate held at its mean value ``m`` makes the unit a leaky integrator
``h_t = m h_{t-1} + (1 - m) n_t`` whose impulse response decays as ``m**k``; its effective time
constant (mean lifetime of a contribution, in steps) is

.. math:: \\tau = \\sum_{k \\ge 0} m^k = \\frac{1}{1 - m} .

``tau`` near 1 marks an "update" unit that follows its input; a large ``tau`` a "memory" unit.

References
----------
A. Karpathy, J. Johnson, L. Fei-Fei, "Visualizing and understanding recurrent networks",
arXiv:1506.02078, 2015 (ICLR 2016 workshop).
K. Cho et al., "Learning phrase representations using RNN encoder-decoder for statistical
machine translation", EMNLP 2014 (the GRU and its update gate).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hiddenstate.core.validation import bool_mask, float_array, real

__all__ = ["GateStats", "gate_statistics", "time_constant", "unit_time_constants"]


def time_constant(mean_keep) -> np.ndarray:
    """Effective memory time constant ``1 / (1 - m)`` of a leaky integrator that keeps ``m``.

    Parameters
    ----------
    mean_keep : array_like of floats in [0, 1]
        Mean value of a "keep" gate: the GRU update gate ``z`` (``h_t = z h_{t-1} + (1-z) n_t``)
        or the LSTM forget gate ``f``.

    Returns
    -------
    ndarray of float64, same shape as ``mean_keep``
        Time constant in steps; ``inf`` where ``mean_keep == 1``.

    Raises
    ------
    TypeError
        Values that are not real numbers.
    ValueError
        If a value lies outside [0, 1] or is NaN.
    """
    m = float_array("mean_keep", mean_keep, dtype=np.float64, finite=False)
    if np.isnan(m).any():
        raise ValueError(f"mean_keep must lie in [0, 1]; got {int(np.isnan(m).sum())} NaN value(s).")
    if m.size and (m.min() < 0.0 or m.max() > 1.0):
        raise ValueError(
            f"mean_keep must lie in [0, 1]; got values in [{m.min():.4g}, {m.max():.4g}]. "
            "Pass gate activations (after the sigmoid), not pre-activations."
        )
    gap = 1.0 - m
    out = np.full_like(m, np.inf)
    np.divide(1.0, gap, out=out, where=gap > 0)
    return out


def unit_time_constants(time_constants, n_units: int) -> np.ndarray | None:
    """Each unit's time constant, the one definition the report's cards and explorer share.

    A unit's time constant is ``1 / (1 - m)`` (:func:`time_constant`) with ``m`` the mean over
    steps (and sequences) of its keep gate. Where one unit reads several state entries with
    gates of their own (a Mamba channel's S entries, a KDA head's Dk key channels), it is the
    longest of theirs: the slowest entry is what the unit still remembers. Where several units
    share a gate (a Mamba-2 or delta-rule head's P or Dv channels), each has its gate's. The
    layer's card summarises these per unit (quantiles, median over units); a time constant of
    ``-1 / log(m)`` would be the e-folding time of the mean gate instead (within 1/2 step of
    this one for ``m >= 0.5``).

    Parameters
    ----------
    time_constants : array_like of shape (G, ...)
        Per gate unit, in steps (``inf`` for a gate held at 1), its first axis the units or
        the heads (the kind's ``keep_shape``: ``(Di, S)``, ``(H,)``, ``(Hv, Dk)``).
    n_units : int
        The layer's units U.

    Returns
    -------
    ndarray of float64, shape (U,), or None
        The longest over the axes after the first, each repeated ``U / G`` times (unit ``k``
        belongs to gate unit ``k // (U / G)``); None where U is not a multiple of G.

    Raises
    ------
    ValueError
        ``time_constants`` is a scalar.
    """
    tau = np.asarray(time_constants, dtype=np.float64)
    if tau.ndim == 0:
        raise ValueError(f"time_constants must have at least one axis (the gate units); got a scalar {float(tau)}.")
    per = tau.reshape(tau.shape[0], -1).max(axis=1)  # (G,) the slowest entry of each
    if n_units % per.size:
        return None
    return np.repeat(per, n_units // per.size)


@dataclass(frozen=True)
class GateStats:
    """Per-unit statistics of one gate over time.

    Attributes
    ----------
    name : str
        Label, e.g. ``"layer 0 z"``.
    mean : ndarray of shape (H,)
        Mean activation of each unit over the valid steps.
    std : ndarray of shape (H,)
        Standard deviation over the valid steps.
    left : ndarray of shape (H,)
        Fraction of valid steps with activation ``< low`` (left-saturated).
    right : ndarray of shape (H,)
        Fraction of valid steps with activation ``> high`` (right-saturated).
    n_steps : int
        Number of (time, sequence) samples averaged.
    low, high : float
        The saturation thresholds (0.1 and 0.9 in Karpathy et al. 2015).
    keep : bool or None, default None
        Whether this is the cell kind's keep gate (``CellKind.keep_gate``: GRU ``z``, LSTM ``f``),
        whose time constant is meaningful; None when not known (the report then goes by the name).
    """

    name: str
    mean: np.ndarray
    std: np.ndarray
    left: np.ndarray
    right: np.ndarray
    n_steps: int
    low: float = 0.1
    high: float = 0.9
    keep: bool | None = None

    def __repr__(self) -> str:
        """``GateStats('layer 0 z', H=64, steps=2000, mean=0.61, <0.1: 12%, >0.9: 31%, longest τ=41.2)``."""
        tau = f", longest τ={float(np.max(self.time_constant)):.4g}" if self.keep else ""
        return (f"GateStats({self.name!r}, H={self.mean.size}, steps={self.n_steps}, mean={float(np.mean(self.mean)):.4g}, "
                f"<{self.low:g}: {100 * float(np.mean(self.left)):.1f}%, >{self.high:g}: "
                f"{100 * float(np.mean(self.right)):.1f}%{tau})")

    def _repr_html_(self) -> str:
        from hiddenstate.report.notebook import gate_stats_html

        return gate_stats_html(self)

    @property
    def time_constant(self) -> np.ndarray:
        """``1 / (1 - mean)`` per unit, shape (H,); meaningful for keep gates (GRU z, LSTM f)."""
        return time_constant(np.clip(self.mean, 0.0, 1.0))

    def memory_units(self, min_steps: float = 10.0) -> np.ndarray:
        """Indices of units whose time constant is at least ``min_steps``, longest first.

        Parameters
        ----------
        min_steps : float, default 10.0

        Returns
        -------
        ndarray of int, shape (k,)
        """
        min_steps = real("min_steps", min_steps)
        tau = self.time_constant
        idx = np.flatnonzero(tau >= min_steps)
        return idx[np.argsort(-tau[idx], kind="stable")]


def gate_statistics(gate, *, mask=None, name: str = "gate", low: float = 0.1, high: float = 0.9,
                    keep: bool | None = None) -> GateStats:
    """Mean, saturation fractions and time constant of each unit of one gate.

    Parameters
    ----------
    gate : array_like of shape (..., H), floats in [0, 1]
        Gate activations (after the sigmoid), e.g. the ``z`` of a trace, shape (T, N, H) or (T, H).
    mask : array_like of bool, shape gate.shape[:-1], optional
        True for valid steps (use it to ignore padding of sequences shorter than ``T``).
    name : str, default "gate"
        Label stored in the result.
    low, high : float, default 0.1 and 0.9
        Saturation thresholds: left-saturated is ``< low``, right-saturated ``> high``.
    keep : bool, optional
        Whether this is the cell kind's keep gate (stored as :attr:`GateStats.keep`).

    Returns
    -------
    GateStats

    Raises
    ------
    TypeError
        ``gate`` not real numbers, a mask that is not bool, thresholds that are not numbers, a
        ``name`` that is not a str, a ``keep`` that is not a bool or None.
    ValueError
        If ``gate`` has fewer than 2 dimensions, values outside [0, 1], a mask of the wrong shape,
        no valid step, or ``not 0 <= low < high <= 1``.
    """
    g = float_array("gate", gate, dtype=np.float64, finite=False)
    if not isinstance(name, str):
        raise TypeError(f"name must be a str; got {type(name).__name__}.")
    low, high = real("low", low), real("high", high)
    if keep is not None and not isinstance(keep, (bool, np.bool_)):
        raise TypeError(f"keep must be a bool or None; got {type(keep).__name__}.")
    keep = None if keep is None else bool(keep)
    if g.ndim < 2 or g.shape[-1] == 0:
        raise ValueError(
            f"gate must have shape (..., H) with at least one time axis and H >= 1; got shape {g.shape}. "
            "For a single step use gate[None]."
        )
    if not (0.0 <= low < high <= 1.0):
        raise ValueError(f"low and high must satisfy 0 <= low < high <= 1; got low={low}, high={high}.")
    H = g.shape[-1]
    flat = g.reshape(-1, H)  # (M, H)
    if mask is not None:
        flat = flat[bool_mask("mask", mask, g.shape[:-1]).reshape(-1)]
    if flat.shape[0] == 0:
        raise ValueError("gate must have at least one valid step; got none (empty array or all-False mask).")
    if not np.isfinite(flat).all() or flat.min() < 0.0 or flat.max() > 1.0:
        raise ValueError(
            f"gate must hold finite activations in [0, 1]; got values in [{flat.min():.4g}, {flat.max():.4g}]. "
            "Pass gate outputs (after the sigmoid), not pre-activations."
        )
    return GateStats(
        name=name,
        mean=flat.mean(axis=0),
        std=flat.std(axis=0),
        left=(flat < low).mean(axis=0),
        right=(flat > high).mean(axis=0),
        n_steps=int(flat.shape[0]),
        low=float(low),
        high=float(high),
        keep=keep,
    )
