"""Principal components of a hidden-state trajectory (NumPy SVD).

Hidden states of trained RNNs often move on a low-dimensional manifold: a few principal
components explain most of the variance, and plotting the first two shows the dynamics
(Elman 1990 used PCA of hidden states to show grammatical structure; Sussillo and Barak 2013
plot trajectories and fixed points in the top-PC plane).

With the centred data matrix ``X - mean = U S V^T`` (rows are states), the principal axes are
the rows of ``V^T``, the explained variance of component ``k`` is ``S_k**2 / (M - 1)`` and the
scores are ``U S``. Signs are fixed so that the largest-magnitude loading of each axis is
positive (as scikit-learn's ``svd_flip``), which makes results reproducible across LAPACK builds.

For wide data (thousands of samples of thousands of features, a Mamba layer's flattened state)
``method="gram"`` takes the eigendecomposition of the smaller Gram matrix instead of the SVD
(about twice as fast at 2,000 x 2,048): the same axes and variances wherever the variance is
not negligible, i.e. down to ``sqrt(eps)`` of the largest standard deviation.

The decomposition is of the centred states divided by their largest magnitude, so the explained
variance ratios do not depend on the states' scale: states scaled by 1e-170 or 1e160 give the
ratios of the unscaled ones (their squares would under- or overflow float64). The explained
variances themselves are ``S_k**2 / (M - 1)`` in the states' own units, which float64 may not hold
at such scales (0 or inf).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hiddenstate.core.validation import bool_mask, float_array, positive_int, real, shape_str

__all__ = ["PCAResult", "pca"]


@dataclass(frozen=True)
class PCAResult:
    """Principal components of a set of states.

    Attributes
    ----------
    mean : ndarray of shape (H,)
        Mean state subtracted before the SVD.
    components : ndarray of shape (K', H)
        Orthonormal principal axes, strongest first: all K of them, or the first K' that
        :func:`pca`'s ``keep`` asked for.
    explained_variance : ndarray of shape (K,)
        Variance along each axis (``S**2 / (M - 1)``).
    explained_variance_ratio : ndarray of shape (K,)
        Fraction of the total variance along each axis.
    scores : ndarray of shape states.shape[:-1] + (K',)
        The input states projected on the axes (the trajectory in PC coordinates).
    """

    mean: np.ndarray
    components: np.ndarray
    explained_variance: np.ndarray
    explained_variance_ratio: np.ndarray
    scores: np.ndarray

    def __repr__(self) -> str:
        """``PCAResult(K=64 of H=64, PC1 6.7%, PC1+PC2 10.9%, 90% in 41 components)``."""
        evr = self.explained_variance_ratio
        return (f"PCAResult(K={self.components.shape[0]} of H={self.mean.size}, PC1 {100 * evr[0]:.1f}%, "
                f"PC1+PC2 {100 * evr[:2].sum():.1f}%, 90% in {self.n_components_for(0.9)} components)")

    def _repr_html_(self) -> str:
        from hiddenstate.report.notebook import pca_html

        return pca_html(self)

    def transform(self, states) -> np.ndarray:
        """Project states of shape (..., H) onto the components; returns shape (..., K).

        Parameters
        ----------
        states : array_like of shape (..., H)
            States in the space the PCA was fitted in (converted to float64).

        Returns
        -------
        ndarray of shape (..., K), float64
            ``(states - mean) @ components.T``.

        Raises
        ------
        TypeError, ValueError
            States that are not real numbers, have NaN/Inf, or a last axis other than H.
        """
        s = float_array("states", states, dtype=np.float64)
        H = self.mean.shape[0]
        if s.ndim < 1 or s.shape[-1] != H:
            raise ValueError(f"states must have shape (..., H={H}); got {shape_str(s.shape)}.")
        return (s - self.mean) @ self.components.T

    def n_components_for(self, fraction: float = 0.9) -> int:
        """Smallest number of components whose explained variance ratio sums to ``fraction``.

        Parameters
        ----------
        fraction : float, default 0.9
            Share of the total variance to explain, in (0, 1].

        Returns
        -------
        int
            Between 1 and K (K when even all kept components explain less).

        Raises
        ------
        TypeError, ValueError
            ``fraction`` not a number in (0, 1].
        """
        fraction = real("fraction", fraction, low=0.0, high=1.0, low_open=True)
        cum = np.cumsum(self.explained_variance_ratio)
        return int(min(np.searchsorted(cum, fraction - 1e-12) + 1, cum.size))


def _svd(Xc: np.ndarray, method: str, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Singular values (descending, all) and the first ``rows`` right singular vectors (rows) of the centred ``Xc`` (M, H)."""
    if method == "svd":
        _, S, Vt = np.linalg.svd(Xc, full_matrices=False)
        return S, (Vt[:rows].copy() if rows < Vt.shape[0] else Vt)
    M, H = Xc.shape
    if M > H:  # Xc^T Xc = V S^2 V^T: V is orthonormal as eigh returns it
        w, V = np.linalg.eigh(Xc.T @ Xc)
        return np.sqrt(np.clip(w[::-1], 0.0, None)), V[:, ::-1][:, :rows].T.copy()
    w, U = np.linalg.eigh(Xc @ Xc.T)  # Xc Xc^T = U S^2 U^T, and V^T = S^-1 U^T Xc
    sv, U = np.sqrt(np.clip(w[::-1], 0.0, None)), U[:, ::-1]
    live = sv > np.sqrt(np.finfo(np.float64).eps) * sv[0]  # none when Xc is 0
    Vt = np.zeros((rows, H))  # only the rows kept: a (M, H) Vt is as large as the states
    top = live[:rows]
    Vt[top] = (U[:, :rows][:, top].T @ Xc) / sv[:rows][top, None]
    return np.where(live, sv, 0.0), Vt  # below sqrt(eps) of the largest, the Gram matrix has no accurate digit left


def pca(states, n_components: int | None = None, *, mask=None, method: str = "svd", keep: int | None = None) -> PCAResult:
    """Principal component analysis of hidden states.

    Parameters
    ----------
    states : array_like of shape (..., H)
        Hidden states, e.g. a trajectory (T, H) or a batch of them (T, N, H). All leading axes
        are flattened into samples.
    n_components : int, optional
        Number of components to keep; default ``min(M, H)`` (all).
    mask : array_like of bool, shape states.shape[:-1], optional
        True for samples used to fit (e.g. steps inside each sequence's length). Scores are still
        returned for every sample.
    method : {"svd", "gram"}, default "svd"
        ``"gram"``: the eigendecomposition of the smaller Gram matrix (faster on wide data; the
        components whose standard deviation is below ``sqrt(eps)`` of the largest come back as
        zero vectors of zero variance, when there are fewer samples than features).
    keep : int, optional
        How many of the ``n_components`` axes to keep as ``components`` rows and ``scores``
        columns (default all); the explained variance (and its ratio) of all ``n_components`` is
        returned either way, so ``n_components_for`` still counts them. For wide states (a
        recurrent layer's thousands of entries) the full set of axes is as large as the states
        themselves, while a report draws two.

    Returns
    -------
    PCAResult

    Raises
    ------
    TypeError
        States that are not real numbers (bool, complex, strings), a mask that is not bool, an
        ``n_components`` that is not an integer (``2.5`` is not a number of components), a
        ``method`` that is not a str.
    ValueError
        If fewer than 2 samples are valid, H is 0, the states are not finite,
        ``n_components`` or ``keep`` is out of range, or ``method`` is neither.
    """
    if not isinstance(method, str):  # an array here made `not in` ambiguous
        raise TypeError(f"method must be 'svd' or 'gram'; got {type(method).__name__} {method!r:.60}.")
    if method not in ("svd", "gram"):
        raise ValueError(f"method must be 'svd' or 'gram'; got {method!r}.")
    X = float_array("states", states, dtype=np.float64, finite=False)
    if X.ndim < 2 or X.shape[-1] == 0:
        raise ValueError(f"states must have shape (..., H) with H >= 1 and at least 2 samples; got shape {X.shape}.")
    if not np.isfinite(X).all():
        raise ValueError("states must be finite; got NaN or Inf.")
    H = X.shape[-1]
    flat = X.reshape(-1, H)  # (M, H)
    fit = flat
    if mask is not None:
        fit = flat[bool_mask("mask", mask, X.shape[:-1]).reshape(-1)]
    if n_components is not None:
        n_components = positive_int("n_components", n_components)
    M = fit.shape[0]
    if M < 2:
        raise ValueError(f"states must contain at least 2 valid samples; got {M}.")
    kmax = min(M, H)
    if n_components is None:
        n_components = kmax
    if not (1 <= n_components <= kmax):
        raise ValueError(f"n_components must be in [1, min(M, H)={kmax}]; got {n_components}.")
    k = n_components
    rows = k if keep is None else positive_int("keep", keep)
    if rows > k:
        raise ValueError(f"keep must be at most n_components={k}; got {rows}.")
    mean = fit.mean(axis=0)
    centred = fit - mean
    scale = float(np.abs(centred).max())  # the decomposition of centred / scale: no square under- or overflows
    with np.errstate(under="ignore", over="ignore"):
        S, Vt = _svd(centred / scale if scale > 0 else centred, method, rows)
        big = np.argmax(np.abs(Vt), axis=1)
        signs = np.sign(Vt[np.arange(Vt.shape[0]), big])
        signs[signs == 0] = 1.0
        Vt *= signs[:, None]
        var = (S * scale) ** 2 / (M - 1) if scale > 0 else S**2 / (M - 1)
    unit = S**2
    total = unit.sum()
    ratio = unit / total if total > 0 else np.zeros_like(unit)
    comps = Vt
    scores = ((centred if mask is None else flat - mean) @ comps.T).reshape(X.shape[:-1] + (rows,))
    del centred
    return PCAResult(
        mean=mean, components=comps, explained_variance=var[:k], explained_variance_ratio=ratio[:k],
        scores=scores,
    )
