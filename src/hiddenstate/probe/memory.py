"""Memory curves: how well the input ``k`` steps back can be read out linearly from ``h_t``.

The hidden state is a fixed-size, lossy summary of the past. A direct way to measure how much of
the past it keeps is to fit, for each lag ``k``, a linear readout from ``h_t`` to the input
``x_{t-k}`` and score it on held-out steps: the *memory curve* ``m(k)``. Jaeger (2001) defines
the short-term memory capacity of a reservoir as the sum of these scores (squared correlations)
over lags; here the score is the held-out coefficient of determination ``R^2`` for real-valued
inputs, or the accuracy of a one-vs-all ridge classifier for integer tokens.

The readout is closed-form ridge regression on standardised states,

.. math:: W = (X^\\top X + \\alpha I)^{-1} X^\\top Y ,

fitted on the first ``train_fraction`` of the time steps and evaluated on the rest (a split in
time, so neighbouring, correlated steps do not leak between the two sets).

References
----------
H. Jaeger, "Short term memory in echo state networks", GMD Report 152, 2001.
A. E. Hoerl and R. W. Kennard, "Ridge regression: biased estimation for nonorthogonal problems",
Technometrics 12(1):55-67, 1970.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hiddenstate.core.validation import bool_mask, float_array, nonnegative_int, real, shape_str

__all__ = ["MemoryCurve", "check_lags", "memory_curve", "ridge_fit", "ridge_predict"]


@dataclass(frozen=True)
class MemoryCurve:
    """Held-out linear decodability of the input ``k`` steps back, for ``k = 0..K``.

    Attributes
    ----------
    lags : ndarray of int, shape (K+1,)
    score : ndarray of float64, shape (K+1,)
        Held-out ``R^2`` (``metric == "r2"``; can be negative for a readout worse than the mean)
        or accuracy (``metric == "accuracy"``).
    metric : {"r2", "accuracy"}
    chance : float
        Score of a readout that ignores ``h``: 0 for ``R^2``; the frequency of the most common
        training class in the held-out targets for accuracy.
    alpha : float
        Ridge penalty used.
    """

    lags: np.ndarray
    score: np.ndarray
    metric: str
    chance: float
    alpha: float

    def __repr__(self) -> str:
        """``MemoryCurve(accuracy, lags 0..30, capacity=4.12, horizon(0.5)=3, chance=0.16)``."""
        return (f"MemoryCurve({self.metric}, lags 0..{int(self.lags[-1])}, capacity={self.capacity:.4g}, "
                f"horizon(0.5)={self.horizon(0.5)}, chance={self.chance:.4g})")

    def _repr_html_(self) -> str:
        from hiddenstate.report.notebook import memory_html

        return memory_html(self)

    @property
    def capacity(self) -> float:
        """Memory capacity: ``sum_k clip((score_k - chance) / (1 - chance), 0, 1)`` over all lags.

        For ``R^2`` (chance 0) this is Jaeger's (2001) capacity including lag 0 — for a perfect
        delay line keeping the last ``m`` inputs it equals ``m + 1``.
        """
        denom = 1.0 - self.chance
        if denom <= 0:
            return 0.0
        return float(np.clip((self.score - self.chance) / denom, 0.0, 1.0).sum())

    def horizon(self, threshold: float = 0.5) -> int:
        """Largest lag ``k`` such that every lag ``<= k`` scores at least ``threshold``; -1 if none.

        Parameters
        ----------
        threshold : float, default 0.5
            Score a lag must reach (``R^2`` or accuracy, as :attr:`metric`).

        Returns
        -------
        int
            The horizon in steps; -1 when even lag 0 scores below ``threshold``.

        Raises
        ------
        TypeError, ValueError
            ``threshold`` not a finite number.
        """
        ok = self.score >= real("threshold", threshold)
        if not ok[0]:
            return -1
        bad = np.flatnonzero(~ok)
        return int(self.lags[bad[0] - 1]) if bad.size else int(self.lags[-1])


def ridge_fit(X, Y, alpha: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form ridge regression with an unpenalised intercept.

    Parameters
    ----------
    X : ndarray of shape (M, H)
    Y : ndarray of shape (M, P)
    alpha : float, default 1.0
        Penalty on the weights (not the intercept); must be >= 0.

    Returns
    -------
    W : ndarray of shape (H, P)
    b : ndarray of shape (P,)
        Prediction is ``X @ W + b``.

    Raises
    ------
    TypeError, ValueError
        Arrays that are not finite real numbers, shapes other than (M, H) and (M, P) with
        M >= 1, a negative ``alpha``.
    """
    X = float_array("X", X, dtype=np.float64)
    Y = float_array("Y", Y, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"X must have shape (M, H) with M >= 1; got {shape_str(X.shape)}.")
    if Y.ndim != 2 or Y.shape[0] != X.shape[0]:
        raise ValueError(f"Y must have shape (M={X.shape[0]}, P); got {shape_str(Y.shape)}.")
    alpha = real("alpha", alpha, low=0.0)
    xm, ym = X.mean(axis=0), Y.mean(axis=0)
    Xc, Yc = X - xm, Y - ym
    A = Xc.T @ Xc + alpha * np.eye(X.shape[1])  # (H, H)
    W = np.linalg.lstsq(A, Xc.T @ Yc, rcond=None)[0] if alpha == 0 else np.linalg.solve(A, Xc.T @ Yc)
    return W, ym - xm @ W


def ridge_predict(X, W, b) -> np.ndarray:
    """``X @ W + b`` for the output of :func:`ridge_fit`; shape (M, P).

    Parameters
    ----------
    X : array_like of shape (M, H)
        Inputs (e.g. hidden states), converted to float64.
    W : ndarray of shape (H, P)
        Weights from :func:`ridge_fit`.
    b : ndarray of shape (P,)
        Intercept from :func:`ridge_fit`.

    Returns
    -------
    ndarray of shape (M, P), float64
        The predictions.

    Raises
    ------
    TypeError, ValueError
        Arrays that are not finite real numbers or whose shapes do not fit together.
    """
    X = float_array("X", X, dtype=np.float64)
    W = float_array("W", W, dtype=np.float64)
    b = float_array("b", b, dtype=np.float64)
    if W.ndim != 2 or X.ndim != 2 or X.shape[1] != W.shape[0] or b.shape != (W.shape[1],):
        raise ValueError(f"X, W, b must have shapes (M, H), (H, P), (P,); got {shape_str(X.shape)}, "
                         f"{shape_str(W.shape)}, {shape_str(b.shape)}.")
    return X @ W + b


def _r2(y, yhat) -> float:
    sst = ((y - y.mean(axis=0)) ** 2).sum()
    sse = ((y - yhat) ** 2).sum()
    if sst <= 0:  # constant held-out target: R^2 undefined, report "no information"
        return 0.0
    return float(1.0 - sse / sst)


def check_lags(valid, max_lag: int, train_fraction: float) -> None:
    """Raise unless every lag ``0..max_lag`` leaves 2 training and 1 test pair (what :func:`memory_curve` needs).

    Parameters
    ----------
    valid : ndarray of bool, shape (T, N)
        Valid steps.
    max_lag : int
        Largest lag ``K``.
    train_fraction : float
        Steps ``t < round(train_fraction * T)`` train the readout.

    Raises
    ------
    ValueError
        The first lag that leaves too few pairs (a sequence too short for a held-out split).
    """
    T = valid.shape[0]
    cut = round(train_fraction * T)
    for k in range(max_lag + 1):
        t_idx = np.arange(k, T)
        ok = valid[k:] & valid[: T - k]  # (T-k, N)
        n_train, n_test = int((ok & (t_idx < cut)[:, None]).sum()), int((ok & (t_idx >= cut)[:, None]).sum())
        if n_train < 2 or n_test < 1:
            raise ValueError(
                f"max_lag must leave training and test pairs; lag {k} leaves {n_train} training and {n_test} test "
                f"pairs with T={T}, train_fraction={train_fraction}. Use a longer sequence or a smaller max_lag."
            )


def memory_curve(states, inputs, *, max_lag: int = 20, alpha: float = 1.0, train_fraction: float = 0.75,
                 mask=None) -> MemoryCurve:
    """Held-out linear decodability of ``inputs[t-k]`` from ``states[t]`` for ``k = 0..max_lag``.

    Parameters
    ----------
    states : array_like of shape (T, H) or (T, N, H)
        Hidden states ``h_t`` (time-major; ``N`` sequences side by side).
    inputs : array_like of shape (T,), (T, P), (T, N) or (T, N, P)
        What to decode. Floating arrays are regressed (score: variance-weighted ``R^2`` over the
        ``P`` outputs); integer arrays of shape (T,) or (T, N) are token ids, decoded by a ridge
        classifier on one-hot targets (score: accuracy).
    max_lag : int, default 20
        Largest lag ``K``.
    alpha : float, default 1.0
        Ridge penalty, applied to standardised states (each unit scaled to unit variance on the
        training steps), so its scale does not depend on the activation range.
    train_fraction : float, default 0.75
        Steps ``t < round(train_fraction * T)`` train the readout, later steps test it.
    mask : array_like of bool, shape (T,) or (T, N), optional
        Valid steps (for padded sequences). A pair ``(t, t-k)`` is used only if both are valid.

    Returns
    -------
    MemoryCurve

    Raises
    ------
    TypeError
        States or inputs that are not real numbers, a mask that is not bool, a ``max_lag`` that is
        not an integer, an ``alpha`` or ``train_fraction`` that is not a number.
    ValueError
        On mismatched shapes, non-finite values, a lag so large that no training or test pair
        remains (:func:`check_lags`), ``train_fraction`` outside (0, 1) or a negative ``alpha``.
    """
    S = float_array("states", states, dtype=np.float64, finite=False)
    if S.ndim not in (2, 3):
        raise ValueError(
            f"states must be a real array of shape (T, H) or (T, N, H); got shape {S.shape}, dtype {S.dtype}."
        )
    if S.ndim == 2:
        S = S[:, None, :]  # (T, 1, H)
        single = True
    else:
        single = False
    T, N, H = S.shape
    U = np.asarray(inputs)
    if U.dtype.kind not in "iubf":
        raise TypeError(f"inputs must be real numbers (float: regressed) or token ids (int or bool: classified); got "
                        f"dtype {U.dtype}.")
    classify = U.dtype.kind in "iub"
    if single:
        U = U[:, None] if U.ndim == 1 else (U[:, None, :] if U.ndim == 2 else U)
        want = "(T,) or (T, P)" if not classify else "(T,)"
    else:
        want = "(T, N) or (T, N, P)" if not classify else "(T, N)"
    if U.ndim == 2:
        U = U[:, :, None]
    if U.ndim != 3 or U.shape[:2] != (T, N) or (classify and U.shape[2] != 1):
        raise ValueError(
            f"inputs must have shape {want} matching states (T={T}, N={N}); got {np.asarray(inputs).shape}."
        )
    if not np.isfinite(S).all() or (not classify and not np.isfinite(U.astype(np.float64)).all()):
        raise ValueError("states and inputs must be finite; got NaN or Inf.")
    train_fraction = real("train_fraction", train_fraction, low=0.0, high=1.0, low_open=True, high_open=True)
    max_lag = nonnegative_int("max_lag", max_lag)
    alpha = real("alpha", alpha, low=0.0)
    valid = np.ones((T, N), dtype=bool)
    if mask is not None:
        m = np.asarray(mask)
        m = m[:, None] if (single and m.ndim == 1) else m
        valid = bool_mask("mask", m, (T, N))
    check_lags(valid, max_lag, train_fraction)
    cut = round(train_fraction * T)

    if classify:
        tokens = U[:, :, 0].astype(np.int64)
        classes = np.unique(tokens[valid])
    scores = np.empty(max_lag + 1)
    chance = 0.0
    with np.errstate(under="ignore"):
        for k in range(max_lag + 1):
            t_idx = np.arange(k, T)
            ok = valid[k:] & valid[: T - k]  # (T-k, N)
            train = ok & (t_idx < cut)[:, None]
            test = ok & (t_idx >= cut)[:, None]
            Hk = S[k:]  # (T-k, N, H) states at t
            Xtr, Xte = Hk[train], Hk[test]
            mu, sd = Xtr.mean(axis=0), Xtr.std(axis=0)
            sd = np.where(sd > 1e-12, sd, 1.0)
            Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
            if classify:
                tk = tokens[: T - k]  # (T-k, N) token at t-k
                ytr, yte = tk[train], tk[test]
                Ytr = (ytr[:, None] == classes[None, :]).astype(np.float64)  # (M, C)
                W, b = ridge_fit(Xtr, Ytr, alpha)
                pred = classes[np.argmax(ridge_predict(Xte, W, b), axis=1)]
                scores[k] = float(np.mean(pred == yte))
                if k == 0:
                    vals, counts = np.unique(ytr, return_counts=True)
                    chance = float(np.mean(yte == vals[np.argmax(counts)]))
            else:
                Uk = U[: T - k].astype(np.float64)  # (T-k, N, P) input at t-k
                W, b = ridge_fit(Xtr, Uk[train], alpha)
                scores[k] = _r2(Uk[test], ridge_predict(Xte, W, b))
    return MemoryCurve(
        lags=np.arange(max_lag + 1), score=scores, metric="accuracy" if classify else "r2",
        chance=chance, alpha=float(alpha),
    )
