"""The memory curve of a Mamba layer: the input ``k`` steps back, read out of the whole SSM state.

A Mamba layer's state is ``h_t`` (N, Di, S): Di * S entries a sequence (2,048 at ``d_model`` 64,
``d_state`` 16), often more than the steps there are to fit a readout on. The curve here is the
one of :mod:`hiddenstate.probe.memory` (Jaeger 2001: for each lag ``k``, a linear readout of
``x_{t-k}`` from ``h_t`` fitted on the first steps and scored on the later ones), computed so
that it stays well posed and fast at that width:

* **the readout is ridge regression on the whole flattened state** (F = Di * S features, each
  standardised on the training steps as :func:`~hiddenstate.probe.memory.memory_curve` does,
  penalty ``alpha > 0``), not on a few principal components: a principal subspace chosen by
  variance can drop exactly the low-variance entries that hold an old input (a slow entry's
  contribution is small), so a truncation would under-report memory. With ``alpha > 0`` the
  system ``X^T X + alpha I`` is positive definite, so the readout exists and is unique even when
  F exceeds the number of training steps M;
* **one factorisation serves every lag**: the training rows are the same steps ``t`` in
  ``[K, cut)`` for every lag (K the largest lag, ``cut = round(train_fraction * T)``) and the test
  rows the steps in ``[cut, T)``; only the target ``x_{t-k}`` changes with ``k``. The ridge
  prediction of the test rows is linear in the (centred) targets, ``Y_hat = P Y + mean``, with

  .. math:: P = X_{te} (X^\\top X + \\alpha I)^{-1} X^\\top = X_{te} X^\\top (X X^\\top + \\alpha I)^{-1},

  so the curve costs one M x M solve (the dual form, when M <= F) or one F x F solve (the primal
  form, when F < M) and then one matrix product per lag. Measured (one thread, 2 shared CPUs at
  load average 5): 0.4 ms a layer for the README's model (T = 12, N = 2, F = 512), and 1.0 to
  1.1 s a layer for a character model of ``d_model`` 64 (F = 2,048) on T = 2,000 steps
  (M = 1,470 training rows, 31 lags).

Token ids are decoded by a one-vs-all ridge classifier on one-hot targets (score: accuracy,
chance the frequency of the most common training token among the test targets); real-valued
inputs are regressed (score: variance-weighted held-out ``R^2``). Both give a
:class:`~hiddenstate.probe.memory.MemoryCurve`, whose ``capacity`` is the area above chance.

References
----------
H. Jaeger, "Short term memory in echo state networks", GMD Report 152, 2001.
A. E. Hoerl and R. W. Kennard, "Ridge regression: biased estimation for nonorthogonal problems",
Technometrics 12(1):55-67, 1970.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.core.validation import float_array, nonnegative_int, real, shape_str
from hiddenstate.probe.memory import MemoryCurve

__all__ = ["memory_rows", "memory_target", "ridge_predictor", "state_memory_curve"]


def memory_rows(T: int, N: int, max_lag: int, train_fraction: float = 0.75) -> tuple[int, int]:
    """The training and test rows the curve reads: steps ``[K, cut)`` and ``[cut, T)`` of every sequence.

    Parameters
    ----------
    T, N : int
        Steps and sequences.
    max_lag : int
        Largest lag ``K``.
    train_fraction : float, default 0.75
        ``cut = round(train_fraction * T)``.

    Returns
    -------
    cut : int
        The first test step.
    n_train : int
        ``N * (cut - K)`` training rows (shared by every lag).

    Raises
    ------
    ValueError
        Fewer than 2 training rows or no test row: the sequence is too short for a held-out
        split at lag ``K`` (the message says which).
    """
    cut = round(train_fraction * T)
    n_train, n_test = N * max(cut - max_lag, 0), N * max(T - cut, 0)
    if n_train < 2 or n_test < 1:
        raise ValueError(f"max_lag must leave training and test rows; lag {max_lag} leaves {n_train} training and "
                         f"{n_test} test rows with T={T}, N={N}, train_fraction={train_fraction}. Use a longer "
                         f"sequence or a smaller max_lag.")
    return cut, n_train


def ridge_predictor(X_train, X_test, alpha: float = 1.0):
    """The linear map from centred training targets to the ridge predictions of the test rows.

    For a ridge readout ``W = (X^T X + alpha I)^{-1} X^T Y`` of centred features ``X`` (M, F)
    and centred targets ``Y`` (M, P), the test predictions are ``X_test W = P Y`` with
    ``P = X_test X^T (X X^T + alpha I)^{-1}``. The factorisation is done once, here: in the dual
    form (an M x M solve, ``P`` kept) when M <= F, in the primal form (an F x F solve, ``X_test
    (X^T X + alpha I)^{-1}`` kept) otherwise.

    Parameters
    ----------
    X_train : ndarray of shape (M, F)
        Training rows, centred (their mean is the origin).
    X_test : ndarray of shape (M_test, F)
        Test rows, centred with the training mean.
    alpha : float, default 1.0
        Ridge penalty, > 0.

    Returns
    -------
    callable
        ``predict(Y)``: for centred targets ``Y`` (M, P), the predictions ``X_test W`` (M_test, P).

    Raises
    ------
    ValueError
        Shapes that do not fit, values that are not finite, or ``alpha <= 0``.
    """
    X = float_array("X_train", X_train, dtype=np.float64)
    Xt = float_array("X_test", X_test, dtype=np.float64)
    if X.ndim != 2 or Xt.ndim != 2 or Xt.shape[1] != X.shape[1]:
        raise ValueError(f"X_train and X_test must have shapes (M, F) and (M_test, F); got {shape_str(X.shape)} and "
                         f"{shape_str(Xt.shape)}.")
    alpha = real("alpha", alpha, low=0.0, low_open=True)
    M, F = X.shape
    if M <= F:  # dual: (X X^T + alpha I) Z = X X_test^T, P = Z^T
        G = X @ X.T
        G[np.diag_indices(M)] += alpha
        P = np.linalg.solve(G, X @ Xt.T).T  # (M_test, M)
        return lambda Y: P @ Y
    G = X.T @ X  # primal: W = (X^T X + alpha I)^{-1} X^T Y
    G[np.diag_indices(F)] += alpha
    Q = np.linalg.solve(G, Xt.T).T  # (M_test, F)
    return lambda Y: Q @ (X.T @ Y)


def state_memory_curve(states, targets, *, max_lag: int = 20, alpha: float = 1.0,
                       train_fraction: float = 0.75) -> MemoryCurve:
    """Held-out ridge decodability of ``targets[t-k]`` from the whole ``states[t]``, for ``k = 0..max_lag``.

    Parameters
    ----------
    states : array_like of shape (T, N, F)
        One layer's states, flattened (a Mamba layer's SSM state ``(T, N, Di * S)``).
    targets : array_like of int, shape (T, N); or of float, shape (T, N) or (T, N, P)
        What to decode: token ids (classified; score accuracy) or real inputs (regressed; score
        the variance-weighted held-out ``R^2``).
    max_lag : int, default 20
        Largest lag ``K``.
    alpha : float, default 1.0
        Ridge penalty on the standardised states, > 0.
    train_fraction : float, default 0.75
        Steps ``[K, round(train_fraction * T))`` of every sequence train the readout (the same
        rows for every lag), the later steps test it.

    Returns
    -------
    MemoryCurve
        ``lags`` 0..K, ``score``, ``metric`` (``"accuracy"`` or ``"r2"``), ``chance`` and ``alpha``.

    Raises
    ------
    TypeError
        Non-numeric states or targets.
    ValueError
        Shapes that do not fit, values that are not finite, a split that leaves too few rows
        (:func:`memory_rows`), ``alpha <= 0`` or ``train_fraction`` outside (0, 1).
    """
    S = float_array("states", states, dtype=np.float64)
    if S.ndim != 3:
        raise ValueError(f"states must have shape (T, N, F); got {shape_str(S.shape)}.")
    T, N, F = S.shape
    U = np.asarray(targets)
    if U.dtype.kind not in "iuf" or U.dtype == bool:
        raise TypeError(f"targets must be token ids (int) or real inputs (float); got dtype {U.dtype}.")
    classify = U.dtype.kind in "iu"
    if U.shape[:2] != (T, N) or U.ndim not in ((2,) if classify else (2, 3)):
        want = "(T, N)" if classify else "(T, N) or (T, N, P)"
        raise ValueError(f"targets must have shape {want} with T={T}, N={N}; got {shape_str(U.shape)}.")
    if not classify:
        U = float_array("targets", U, dtype=np.float64)
        U = U[:, :, None] if U.ndim == 2 else U
    max_lag = nonnegative_int("max_lag", max_lag)
    alpha = real("alpha", alpha, low=0.0, low_open=True)
    train_fraction = real("train_fraction", train_fraction, low=0.0, high=1.0, low_open=True, high_open=True)
    cut, _ = memory_rows(T, N, max_lag, train_fraction)
    K = max_lag
    Xtr, Xte = S[K:cut].reshape(-1, F), S[cut:].reshape(-1, F)  # rows (t, n), t-major
    mu, sd = Xtr.mean(axis=0), Xtr.std(axis=0)
    sd = np.where(sd > 1e-12, sd, 1.0)
    predict = ridge_predictor((Xtr - mu) / sd, (Xte - mu) / sd, alpha)
    scores = np.empty(K + 1)
    chance = 0.0
    if classify:
        classes = np.unique(U)
        for k in range(K + 1):
            ytr, yte = U[K - k:cut - k].reshape(-1), U[cut - k:T - k].reshape(-1)
            Y = (ytr[:, None] == classes[None, :]).astype(np.float64)  # (M, C) one-hot
            ybar = Y.mean(axis=0)
            pred = classes[np.argmax(predict(Y - ybar) + ybar, axis=1)]
            scores[k] = float(np.mean(pred == yte))
            if k == 0:
                vals, counts = np.unique(ytr, return_counts=True)
                chance = float(np.mean(yte == vals[np.argmax(counts)]))
    else:
        for k in range(K + 1):
            ytr, yte = U[K - k:cut - k].reshape(-1, U.shape[2]), U[cut - k:T - k].reshape(-1, U.shape[2])
            ybar = ytr.mean(axis=0)
            sst = float(((yte - yte.mean(axis=0)) ** 2).sum())
            sse = float(((yte - (predict(ytr - ybar) + ybar)) ** 2).sum())
            scores[k] = 1.0 - sse / sst if sst > 0 else 0.0  # a constant held-out target: no information
    return MemoryCurve(lags=np.arange(K + 1), score=scores, metric="accuracy" if classify else "r2",
                       chance=chance, alpha=float(alpha))


def memory_target(x, tokens, T: int, N: int, *, ids: bool, batch_first: bool) -> tuple[np.ndarray, str]:
    """What a Mamba model's memory curve decodes, time-major, and how the report names it.

    Parameters
    ----------
    x : array_like
        The model's input: token ids (N, T) (``batch_first``) or (T, N) of a language model, or a
        block's input (N, T, M) / (T, N, M).
    tokens : array_like of int, shape (T, N) or (T,) for N = 1, optional
        The ids behind the steps; default: ``x`` when ``ids``, else the block's input itself.
    T, N : int
        Steps and sequences of the traced run.
    ids : bool
        ``x`` holds token ids (a language model).
    batch_first : bool
        The layout of ``x``.

    Returns
    -------
    target : ndarray
        (T, N) integer ids (decoded by accuracy) or (T, N, M) floats (by held-out R^2).
    what : str
        ``"the token k steps back (held-out accuracy)"`` or ``"the block's input u (held-out R^2)"``.

    Raises
    ------
    TypeError
        ``tokens`` that are not integers.
    ValueError
        ``tokens`` of another shape than (T, N).
    """
    if tokens is None and ids:
        tokens = np.asarray(x).T if batch_first else np.asarray(x)
    if tokens is None:
        u = np.asarray(x, dtype=np.float64)
        return (u.transpose(1, 0, 2) if batch_first else u), "the block's input u (held-out R^2)"
    tok = np.asarray(tokens)
    if tok.dtype == bool or tok.dtype.kind not in "iu":
        raise TypeError(f"tokens must be an integer array of shape (T={T}, N={N}); got dtype {tok.dtype}.")
    tok = tok[:, None] if (tok.ndim == 1 and N == 1) else tok
    if tok.shape != (T, N):
        raise ValueError(f"tokens must have shape (T={T}, N={N}) (time-major; or (T,) for one sequence), one id per "
                         f"step; got {shape_str(np.shape(tokens))}.")
    return tok, "the token k steps back (held-out accuracy)"
