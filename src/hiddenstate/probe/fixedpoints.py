"""Fixed points and slow points of a recurrent map, found by minimising a speed function.

A recurrent network run with its input held constant is an autonomous map ``h -> F(h)``.
Following Sussillo and Barak (2013), its fixed points (``F(h*) = h*``) are the global minima,
with value zero, of the "kinetic energy"

.. math:: q(h) = \\tfrac12 \\lVert F(h) - h \\rVert^2 ,
          \\qquad \\nabla q(h) = (J(h) - I)^\\top (F(h) - h),

where :math:`J = \\partial F / \\partial h`. This module minimises ``q`` from many starting
states with :func:`scipy.optimize.minimize` and the analytic gradient above, polishes each
candidate with Newton steps on ``F(h) - h = 0``, merges duplicates, and classifies every point
by the eigenvalues of ``J`` at it: for a discrete-time map a point is *stable* when every
eigenvalue has modulus below one, and a *saddle* with ``k`` unstable directions when ``k`` of
them lie outside the unit circle.

References
----------
D. Sussillo and O. Barak, "Opening the black box: low-dimensional dynamics in high-dimensional
recurrent neural networks", Neural Computation 25(3):626-649, 2013.
M. D. Golub and D. Sussillo, "FixedPointFinder: a TensorFlow toolbox for identifying and
characterizing fixed points in recurrent neural networks", JOSS 3(31):1003, 2018.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize

from hiddenstate.core.validation import choice, float_array, nonnegative_int, positive_int, real, shape_str
from hiddenstate.probe.layermap import layer_map, reachable_box

__all__ = ["FixedPoint", "FixedPoints", "classify_point", "find_fixed_points", "layer_map", "reachable_box"]

_KINDS = ("stable", "marginal", "saddle", "unstable")
#: scipy.optimize.minimize methods that use the gradient (``jac=True``), and those of them that take bounds
_METHODS = ("L-BFGS-B", "BFGS", "CG", "TNC", "SLSQP", "trust-constr")
_BOUNDED = ("L-BFGS-B", "TNC", "SLSQP", "trust-constr")
#: q of a Newton-polished point at which the optimiser of that start stops (an exact fixed point to round-off)
_EXACT = 1e-20
#: q below which Newton polishing is first tried during the optimisation
_NEWTON_FROM = 1e-6
#: halvings of a Newton step that does not decrease q before polishing gives up
_HALVINGS = 10


class _Converged(Exception):
    """Raised inside the optimiser's objective when Newton polishing has found an exact fixed point."""

    def __init__(self, h: np.ndarray, q: float):
        super().__init__("converged")
        self.h, self.q = h, q


def _positive(name: str, value) -> float:
    """A finite number > 0 (a tolerance), with the message this module has always given."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a positive number; got {type(value).__name__} {value!r}.")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive; got {value!r}.")
    return float(value)


def _pairs(bounds, H: int) -> tuple[np.ndarray, np.ndarray]:
    """``bounds`` (one (low, high) pair or H of them, None = unbounded) as two float arrays (H,)."""
    try:
        b = None if isinstance(bounds, (str, bytes, dict)) else list(bounds)
    except TypeError:
        b = None
    if b is None:
        raise TypeError(f"bounds must be one (low, high) pair or H={H} pairs; got {type(bounds).__name__}.")
    if len(b) == 2 and not isinstance(b[0], (tuple, list, np.ndarray)):
        b = [tuple(b)] * H
    if len(b) != H:
        raise ValueError(f"bounds must be one (low, high) pair or H={H} pairs; got {len(b)} entries.")
    lo, hi = np.empty(H), np.empty(H)
    for i, p in enumerate(b):
        if not isinstance(p, (tuple, list, np.ndarray)) or len(p) != 2:
            raise TypeError(f"bounds[{i}] must be a pair (low, high); got {p!r}.")
        lo[i] = -np.inf if p[0] is None else real(f"bounds[{i}][0]", p[0])
        hi[i] = np.inf if p[1] is None else real(f"bounds[{i}][1]", p[1])
        if lo[i] > hi[i]:
            raise ValueError(f"bounds[{i}] must have low <= high; got {tuple(p)!r}.")
    return lo, hi


@dataclass(frozen=True)
class FixedPoint:
    """One fixed point (or slow point) of a map ``h -> F(h)``.

    Attributes
    ----------
    h : ndarray of shape (H,), float64
        The state.
    q : float
        ``0.5 * ||F(h) - h||**2`` at ``h`` (0 for an exact fixed point).
    eigenvalues : ndarray of shape (H,), complex128
        Eigenvalues of the Jacobian ``J = dF/dh`` at ``h``, sorted by decreasing modulus.
    n_unstable : int
        Number of eigenvalues with modulus greater than ``1 + margin`` (directions along which
        a small perturbation grows under the discrete-time map).
    kind : {"stable", "marginal", "saddle", "unstable"}
        ``"stable"``: every ``|eig| < 1 - margin``; ``"marginal"``: none unstable but some within
        ``margin`` of the unit circle; ``"saddle"``: ``0 < n_unstable < H``; ``"unstable"``:
        every direction unstable (a repeller).
    n_hits : int
        How many starting states converged to this point (after de-duplication).
    jacobian : ndarray of shape (H, H), float64
        ``dF/dh`` at ``h``.
    """

    h: np.ndarray
    q: float
    eigenvalues: np.ndarray
    n_unstable: int
    kind: str
    n_hits: int = 1
    jacobian: np.ndarray = field(default=None, repr=False)

    def __repr__(self) -> str:
        """``FixedPoint(saddle, H=32, q=1.2e-14, max |λ|=1.08, 1 unstable, 3 starts)``."""
        return (f"FixedPoint({self.kind}, H={self.h.size}, q={self.q:.3g}, max |λ|={self.spectral_radius:.4g}, "
                f"{self.n_unstable} unstable, {self.n_hits} start{'s' if self.n_hits != 1 else ''})")

    @property
    def is_stable(self) -> bool:
        """True when every eigenvalue of the Jacobian lies strictly inside the unit circle."""
        return self.kind == "stable"

    @property
    def spectral_radius(self) -> float:
        """Largest eigenvalue modulus of the Jacobian at the point."""
        return float(np.abs(self.eigenvalues[0])) if self.eigenvalues.size else 0.0

    def unstable_directions(self) -> np.ndarray:
        """Eigenvectors of the unstable eigenvalues, one per column.

        Returns
        -------
        ndarray of shape (H, n_unstable), complex128
            Perturbing a saddle along ``±`` one of these and iterating the map shows which
            attractors the saddle separates (Sussillo and Barak 2013, section 3).
        """
        vals, vecs = np.linalg.eig(self.jacobian)
        order = np.argsort(-np.abs(vals), kind="stable")
        return vecs[:, order[: self.n_unstable]]


class FixedPoints(list):
    """The fixed points one search found: a list of :class:`FixedPoint` that knows how many starts it tried.

    Parameters
    ----------
    points : iterable of FixedPoint, default ()
        The points, in the order :func:`find_fixed_points` sorts them.
    n_starts : int, optional
        How many starting states the search was run from (None: not known).

    Attributes
    ----------
    n_starts : int or None
        How many starting states were tried; ``sum(p.n_hits for p in self)`` of them converged.
    """

    def __init__(self, points=(), n_starts: int | None = None):
        super().__init__(points)
        self.n_starts = None if n_starts is None else int(n_starts)

    def counts(self) -> dict[str, int]:
        """How many points of each kind, e.g. ``{"stable": 2, "saddle": 1}`` (kinds found only).

        Returns
        -------
        dict of str to int
            In the order stable, marginal, saddle, unstable.
        """
        out = {k: sum(p.kind == k for p in self) for k in ("stable", "marginal", "saddle", "unstable")}
        return {k: n for k, n in out.items() if n}

    def __repr__(self) -> str:
        """``FixedPoints(3 from 32 starts: 2 stable, 1 saddle)``."""
        kinds = ", ".join(f"{n} {k}" for k, n in self.counts().items()) or "none"
        starts = "" if self.n_starts is None else f" from {self.n_starts} starts"
        return f"FixedPoints({len(self)}{starts}: {kinds})"

    def _repr_html_(self) -> str:
        from hiddenstate.report.notebook import fixed_points_html

        return fixed_points_html(self)


def classify_point(jacobian: np.ndarray, *, margin: float = 1e-8) -> tuple[np.ndarray, int, str]:
    """Classify a fixed point of a discrete-time map by the eigenvalues of its Jacobian.

    Parameters
    ----------
    jacobian : ndarray of shape (H, H)
        ``dF/dh`` at the point.
    margin : float, default 1e-8
        Eigenvalues with ``| |eig| - 1 | <= margin`` count as marginal, not unstable.

    Returns
    -------
    eigenvalues : ndarray of shape (H,), complex128
        Sorted by decreasing modulus.
    n_unstable : int
        Number of eigenvalues with modulus ``> 1 + margin``.
    kind : str
        One of ``"stable"``, ``"marginal"``, ``"saddle"``, ``"unstable"`` (see :class:`FixedPoint`).

    Raises
    ------
    TypeError
        A Jacobian that is not real numbers (bool, complex, strings ...), a ``margin`` that is not a
        number.
    ValueError
        A Jacobian that is not square (H, H) with H >= 1 or has NaN/Inf, a negative ``margin``.
    """
    jacobian = float_array("jacobian", jacobian, dtype=np.float64)
    if jacobian.ndim != 2 or jacobian.shape[0] != jacobian.shape[1] or jacobian.shape[0] == 0:
        raise ValueError(f"jacobian must have shape (H, H) with H >= 1; got {shape_str(jacobian.shape)}.")
    margin = real("margin", margin, low=0.0)
    vals = np.linalg.eigvals(jacobian).astype(np.complex128)
    mods = np.abs(vals)
    order = np.argsort(-mods, kind="stable")
    vals, mods = vals[order], mods[order]
    n_unstable = int(np.count_nonzero(mods > 1.0 + margin))
    n_marginal = int(np.count_nonzero(np.abs(mods - 1.0) <= margin))
    H = jacobian.shape[0]
    if n_unstable == 0:
        kind = "stable" if n_marginal == 0 else "marginal"
    elif n_unstable == H:
        kind = "unstable"
    else:
        kind = "saddle"
    return vals, n_unstable, kind


def find_fixed_points(
    F: Callable[[np.ndarray], np.ndarray],
    jac: Callable[[np.ndarray], np.ndarray],
    inits,
    *,
    tol: float = 1e-12,
    dedup_tol: float | None = None,
    max_iter: int = 2000,
    newton_steps: int = 20,
    margin: float = 1e-8,
    method: str = "L-BFGS-B",
    bounds=None,
) -> FixedPoints:
    """Find, de-duplicate and classify the fixed points of ``h -> F(h)``.

    Minimises ``q(h) = 0.5 * ||F(h) - h||**2`` from every row of ``inits`` (Sussillo and Barak
    2013) with :func:`scipy.optimize.minimize` and the exact gradient
    ``(J(h) - I)^T (F(h) - h)``, then refines each candidate with at most ``newton_steps``
    damped Newton steps ``h <- h - t (J - I)^{-1} (F(h) - h)`` (``t = 1, 1/2, 1/4, ...`` down to
    ``2**-10``, the first that decreases ``q``; a least-squares step where ``J - I`` is singular;
    projected onto ``bounds``). Far from a slow attractor the full step overshoots where a half
    step lands: on the 256-unit demo GRU (``|λ| = 0.997``) the 16 starts run forward all converged
    this way, where full steps converged from 1 of them. The same polishing is tried at the start and each time the optimiser brings ``q``
    below ``1e-6``, ``1e-8``, ... (each a factor of 100 below the last try); once it lands on
    ``q <= min(tol, 1e-20)`` (an exact fixed point to round-off) that start stops there. Near a
    fixed point Newton converges in a few steps where the optimiser, on the nearly flat ``q`` of
    saturated gates, takes hundreds: a 512-unit GRU's 32 starts took 19 s instead of 80 s.
    Candidates with ``q <= tol`` are merged greedily (in order of increasing ``q``)
    when closer than ``dedup_tol``; every survivor is classified by :func:`classify_point`.

    Parameters
    ----------
    F : callable
        ``F(h) -> ndarray of shape (H,)`` for ``h`` of shape (H,), float64: one step of the
        network with its input held fixed (usually at zero).
    jac : callable
        ``jac(h) -> ndarray of shape (H, H)``: the Jacobian ``dF/dh`` (row ``i`` = gradient of
        ``F(h)[i]``).
    inits : array_like of shape (K, H) or (H,)
        Starting states, typically states visited by the network plus a little Gaussian noise
        (Golub and Sussillo 2018 use noise of standard deviation 0.5).
    tol : float, default 1e-12
        Largest ``q`` accepted as a fixed point. Raise it (e.g. to 1e-4) to keep "slow points"
        (local minima of ``q`` that are not exact fixed points).
    dedup_tol : float, optional
        Euclidean distance under which two points are the same. Default ``1e-3 * sqrt(H)``.
    max_iter : int, default 2000
        Iteration limit of the optimiser per start.
    newton_steps : int, default 20
        Newton polishing steps per start (0 disables polishing).
    margin : float, default 1e-8
        Passed to :func:`classify_point`.
    method : str, default "L-BFGS-B"
        Any gradient-based method of :func:`scipy.optimize.minimize` that accepts ``jac=True``.
    bounds : sequence of (low, high) pairs of length H, or one pair, optional
        Box to search in (``None`` entries are unbounded), e.g. ``(-1, 1)`` for the states a tanh
        RNN or a GRU can reach. Needs a method that supports bounds (L-BFGS-B does); Newton
        polishing is projected onto the box. Without it, units whose gate is saturated (GRU ``z == 1``)
        make whole lines of far-away "fixed points" that no trajectory visits.

    Returns
    -------
    FixedPoints
        A list of :class:`FixedPoint` (with ``n_starts``, the number of starts tried), sorted by
        number of unstable directions, stable before marginal, then by decreasing
        ``n_hits``, then by the state's coordinates (a deterministic order). Empty if no start
        converged.

    Raises
    ------
    TypeError
        ``F`` or ``jac`` not callable, ``inits`` not real numbers, an option of the wrong type
        (``max_iter=2.5``), a ``method`` that is not a string.
    ValueError
        If ``inits`` is not finite with shape (K, H), if ``F`` or ``jac`` return the wrong shape
        or NaN/Inf at the first start, if a tolerance is not positive, a count is negative, an
        unknown ``method``, ``bounds`` with a method that ignores them or with low > high.
    """
    for name, fn in (("F", F), ("jac", jac)):
        if not callable(fn):
            raise TypeError(f"{name} must be callable; got {type(fn).__name__}.")
    X = float_array("inits", inits, dtype=np.float64, finite=False)
    if X.ndim == 1:
        X = X[None, :]
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(
            f"inits must have shape (K, H) with K >= 1 starting states of size H >= 1; got shape "
            f"{X.shape}. Stack the starting states as rows."
        )
    if not np.isfinite(X).all():
        raise ValueError("inits must be finite; got NaN or Inf. Drop or replace those rows.")
    width = getattr(F, "state_size", None)  # F of layer_map says the width of its states
    if width is not None and X.shape[1] != width:
        raise ValueError(f"inits must have shape (K, S={width}), states of the map F; got shape "
                         f"{shape_str(X.shape)}. Give starting states of the layer's state size.")
    tol = _positive("tol", tol)
    K, H = X.shape
    dedup_tol = 1e-3 * np.sqrt(H) if dedup_tol is None else _positive("dedup_tol", dedup_tol)
    max_iter = positive_int("max_iter", max_iter)
    newton_steps = nonnegative_int("newton_steps", newton_steps)
    margin = real("margin", margin, low=0.0)
    method = choice("method", method, _METHODS)
    if bounds is not None and method not in _BOUNDED:
        raise ValueError(f"method must be one of {', '.join(_BOUNDED)} when bounds are given; got {method!r}, "
                         f"which ignores bounds.")

    F0 = float_array("F(h)", F(X[0].copy()), dtype=np.float64, finite=False)
    J0 = float_array("jac(h)", jac(X[0].copy()), dtype=np.float64, finite=False)
    if F0.shape != (H,):
        raise ValueError(f"F(h) must return shape (H,)=({H},); got {F0.shape}. F maps one state to the next.")
    if J0.shape != (H, H):
        raise ValueError(f"jac(h) must return shape (H, H)=({H}, {H}); got {J0.shape}.")
    if not (np.isfinite(F0).all() and np.isfinite(J0).all()):
        raise ValueError("F(h) and jac(h) must return finite values; got NaN or Inf at the first start.")
    eye = np.eye(H)
    lo = hi = None
    if bounds is not None:
        lo, hi = _pairs(bounds, H)
        bounds = [(None if not np.isfinite(a) else float(a), None if not np.isfinite(c) else float(c))
                  for a, c in zip(lo, hi)]
        X = np.clip(X, lo, hi)

    A = np.empty((H, H))  # J - I, one buffer for every evaluation (a fresh (H, H) was page-faulted in each time)

    def q_and_grad(h):
        J = np.asarray(jac(h), dtype=np.float64)  # (H, H); first, so that F(h) may reuse the step
        r = np.asarray(F(h), dtype=np.float64) - h  # (H,)
        return 0.5 * float(r @ r), np.subtract(J, eye, out=A).T @ r

    exact = min(tol, _EXACT)

    def residual(h):
        r = np.asarray(F(h), dtype=np.float64) - h  # (H,)
        return r, 0.5 * float(r @ r)

    def polish(h, q):
        """At most ``newton_steps`` damped Newton steps from ``h``, each kept only if q decreases."""
        for _ in range(newton_steps):
            if q == 0.0:
                break
            np.subtract(np.asarray(jac(h), dtype=np.float64), eye, out=A)  # (H, H)
            r = np.asarray(F(h), dtype=np.float64) - h  # (H,)
            if not (np.isfinite(r).all() and np.isfinite(A).all()):
                break  # a map that is not finite here: keep the point we have
            try:
                d = np.linalg.solve(A, r)  # (H,)
            except np.linalg.LinAlgError:
                d = None
            if d is None or not np.isfinite(d).all():
                d = np.linalg.lstsq(A, r, rcond=None)[0]  # a singular J - I (a line of fixed points)
            # the full step first, halved until q decreases: far from a point, on the slow manifold of
            # a nearly marginal attractor (|λ| = 0.997), the full step overshoots where a half step lands
            # (at round-off, q <= exact, only the full step is tried: halving it would chase the noise)
            for k in range(_HALVINGS + 1 if q > exact else 1):
                h_new = h - 0.5 ** k * d
                if lo is not None:
                    h_new = np.clip(h_new, lo, hi)  # projected onto the box
                with np.errstate(over="ignore", invalid="ignore"):
                    q_new = residual(h_new)[1] if np.isfinite(h_new).all() else np.inf
                if q_new < q:
                    break
            else:
                break
            h, q = h_new, q_new
        return h, q

    options = ({"maxiter": max_iter, "gtol": 1e-14} if method != "L-BFGS-B"
               else {"maxiter": max_iter, "gtol": 1e-14, "ftol": 1e-20})
    candidates = []
    with np.errstate(under="ignore"):  # tiny residuals underflow to 0 harmlessly
        for x0 in X:
            # Newton is tried from the start and whenever the optimiser has brought q down by another
            # factor of 100 below _NEWTON_FROM: once a Newton polish lands on q <= exact (round-off of
            # an exact fixed point) the optimiser stops there. Near a fixed point Newton converges in
            # a few steps, where L-BFGS-B, on the nearly flat q of saturated gates, can take hundreds.
            trial = [_NEWTON_FROM]

            def objective(h, trial=trial):
                q, g = q_and_grad(h)
                if newton_steps and q <= trial[0]:
                    trial[0] = q * 1e-2
                    hp, qp = polish(np.array(h, dtype=np.float64), q)
                    if qp <= exact:
                        raise _Converged(hp, qp)
                return q, g

            try:
                objective(x0.copy())
                res = optimize.minimize(objective, x0, jac=True, method=method,
                                        **({"bounds": bounds} if bounds is not None else {}), options=options)
                h = np.asarray(res.x, dtype=np.float64)
                h, q = polish(h, q_and_grad(h)[0])
            except _Converged as done:
                h, q = done.h, done.q
            if q <= tol and np.isfinite(h).all():
                candidates.append((q, h))

        candidates.sort(key=lambda c: c[0])
        reps: list[list] = []  # [q, h, hits]
        for q, h in candidates:
            for rep in reps:
                if np.linalg.norm(rep[1] - h) < dedup_tol:
                    rep[2] += 1
                    break
            else:
                reps.append([q, h, 1])

        points = []
        for q, h, hits in reps:
            J = np.asarray(jac(h), dtype=np.float64)
            vals, n_unstable, kind = classify_point(J, margin=margin)
            points.append(
                FixedPoint(h=h, q=float(q), eigenvalues=vals, n_unstable=n_unstable, kind=kind,
                           n_hits=hits, jacobian=J)
            )
    points.sort(key=lambda p: (p.n_unstable, _KINDS.index(p.kind), -p.n_hits, tuple(np.round(p.h, 9))))
    return FixedPoints(points, n_starts=K)
