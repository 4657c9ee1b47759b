"""Which hidden units track a given feature of the input: Pearson correlation per unit.

A unit "tracks" a per-step feature (inside quotes, position in line, ...) when its activation
over time correlates with the feature. Karpathy, Johnson and Fei-Fei (2015) found such
interpretable cells by eye; here they are ranked by the absolute Pearson correlation

.. math:: r_j = \\frac{\\sum_t (h_{tj} - \\bar h_j)(f_t - \\bar f)}
                     {\\sqrt{\\sum_t (h_{tj} - \\bar h_j)^2}\\,\\sqrt{\\sum_t (f_t - \\bar f)^2}} .

A constant unit (or a constant feature) has no defined correlation; it is reported as ``r = 0``.

References
----------
A. Karpathy, J. Johnson, L. Fei-Fei, "Visualizing and understanding recurrent networks",
arXiv:1506.02078, 2015.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from hiddenstate.core.validation import bool_mask, float_array, positive_int

__all__ = ["UnitCorrelation", "best_units", "featured_units", "unit_feature_correlation"]


@dataclass(frozen=True)
class UnitCorrelation:
    """Correlation of every unit with one feature, and the best units.

    Attributes
    ----------
    feature : str
    r : ndarray of shape (H,)
        Pearson correlation of each unit with the feature (0 for constant units).
    top_units : ndarray of int, shape (k,)
        Units with the largest ``|r|``, best first.
    top_r : ndarray of shape (k,)
        Their correlations (signed).
    """

    feature: str
    r: np.ndarray
    top_units: np.ndarray
    top_r: np.ndarray

    def __repr__(self) -> str:
        """``UnitCorrelation('position in line', H=64, best unit 17 (r=+0.62), then 3 (r=-0.41))``."""
        tops = ", then ".join(f"{int(u)} (r={float(r):+.2f})" for u, r in zip(self.top_units[:3], self.top_r[:3]))
        return f"UnitCorrelation({self.feature!r}, H={self.r.size}, best unit {tops})"

    @property
    def best_unit(self) -> int:
        """Index of the unit with the largest ``|r|``."""
        return int(self.top_units[0])


def _pearson(A: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Pearson r of every column of A (M, H) with f (M,); 0 where either is constant."""
    Ac = A - A.mean(axis=0)
    fc = f - f.mean()
    with np.errstate(under="ignore"):
        num = fc @ Ac  # (H,)
        den = np.sqrt((Ac * Ac).sum(axis=0) * (fc @ fc))
    r = np.zeros(A.shape[1])
    np.divide(num, den, out=r, where=den > 1e-300)
    return np.clip(r, -1.0, 1.0)


def unit_feature_correlation(activations, feature, *, top: int = 5, mask=None,
                             name: str = "feature") -> UnitCorrelation:
    """Rank units by how well their activation tracks a per-step feature.

    Parameters
    ----------
    activations : array_like of shape (T, H) or (T, N, H)
        Unit activations over time (``h``, ``c`` or a gate from a trace).
    feature : array_like of shape (T,) or (T, N)
        The feature at every step (bool or numeric), aligned with ``activations``.
    top : int, default 5
        How many units to list (at most ``H``).
    mask : array_like of bool, shape activations.shape[:-1], optional
        Valid steps.
    name : str, default "feature"
        Stored in the result.

    Returns
    -------
    UnitCorrelation

    Raises
    ------
    TypeError
        Activations that are not real numbers, a feature that is not real or bool, a mask that is
        not bool, a ``top`` that is not an integer, a ``name`` that is not a str.
    ValueError
        If the shapes do not match, fewer than 2 steps are valid, values are not finite or
        ``top < 1``.
    """
    A = float_array("activations", activations, dtype=np.float64, finite=False)
    f = np.asarray(feature)
    f = f.astype(np.float64) if f.dtype == bool else float_array("feature", f, dtype=np.float64, finite=False)
    top = positive_int("top", top)
    if not isinstance(name, str):
        raise TypeError(f"name must be a str; got {type(name).__name__}.")
    if A.ndim in (2, 3) and A.shape[-1] == 0:
        raise ValueError(f"activations must have at least one unit (shape (T, H) or (T, N, H), H >= 1); got {A.shape}.")
    if A.ndim not in (2, 3) or f.shape != A.shape[:-1]:
        raise ValueError(
            f"feature must have shape activations.shape[:-1]={A.shape[:-1]} (one value per step); got "
            f"{f.shape} with activations of shape {A.shape}."
        )
    H = A.shape[-1]
    A2, f2 = A.reshape(-1, H), f.reshape(-1)
    if mask is not None:
        m = bool_mask("mask", mask, f.shape)
        A2, f2 = A2[m.reshape(-1)], f2[m.reshape(-1)]
    if A2.shape[0] < 2:
        raise ValueError(f"activations must have at least 2 valid steps; got {A2.shape[0]}.")
    if not (np.isfinite(A2).all() and np.isfinite(f2).all()):
        raise ValueError("activations and feature must be finite; got NaN or Inf.")
    r = _pearson(A2, f2)
    k = min(top, H)
    order = np.lexsort((np.arange(H), -np.abs(r)))[:k]  # ties: lower unit index first
    return UnitCorrelation(feature=name, r=r, top_units=order, top_r=r[order])


def best_units(activations, features: Mapping[str, np.ndarray], *, top: int = 3, mask=None) -> dict[str, UnitCorrelation]:
    """:func:`unit_feature_correlation` for several features at once.

    Parameters
    ----------
    activations : array_like of shape (T, H) or (T, N, H)
    features : mapping of str to array_like of shape activations.shape[:-1]
        E.g. :func:`hiddenstate.probe.textfeatures.text_features` of the text that produced the states.
    top : int, default 3
    mask : array_like of bool, optional

    Returns
    -------
    dict of str to UnitCorrelation
        In the order of ``features``.

    Raises
    ------
    TypeError
        ``features`` is not a mapping of names to arrays; and as :func:`unit_feature_correlation`.
    ValueError
        As :func:`unit_feature_correlation`.
    """
    if not isinstance(features, Mapping):
        raise TypeError(f"features must be a mapping of names to per-step arrays; got {type(features).__name__}.")
    return {
        name: unit_feature_correlation(activations, f, top=top, mask=mask, name=name)
        for name, f in features.items()
    }


def featured_units(units: Mapping[str, UnitCorrelation], *, limit: int | None = None) -> list[tuple[int, list[str]]]:
    """Each feature's best unit, one entry per unit: the units a report features, with what they track.

    A unit that is the best of several features appears once with all of them. Its features are
    ordered by decreasing ``|r|`` of that unit (ties: in the order of ``units``), so the first one
    is the feature the unit tracks best among them, as a unit's title says.

    Parameters
    ----------
    units : mapping of str to UnitCorrelation
        Feature name -> correlations, e.g. :func:`best_units`.
    limit : int, optional
        Keep only the first ``limit`` units (in the order their first feature appears in ``units``).

    Returns
    -------
    list of (int, list of str)
        ``(unit, feature names)`` pairs, in the order of the features in ``units``.

    Raises
    ------
    TypeError
        ``limit`` that is not an integer.
    ValueError
        ``limit`` below 1.
    """
    limit = None if limit is None else positive_int("limit", limit)
    groups: dict[int, list[str]] = {}
    for name, u in units.items():
        if u.top_units.size:
            groups.setdefault(int(u.top_units[0]), []).append(name)
    out = [(j, sorted(names, key=lambda n: -abs(float(units[n].r[j])))) for j, names in groups.items()]
    return out if limit is None else out[:limit]
