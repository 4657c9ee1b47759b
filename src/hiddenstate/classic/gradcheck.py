"""Public finite-difference gradient checker (central differences, directional and elementwise).

Compare an analytic gradient (our BPTT) with numerical derivatives of a scalar function, as
HIPS/autograd's ``check_grads`` does. Use float64: central differences with ``eps = 1e-6`` have
truncation error O(eps**2) and rounding error O(1e-16 / eps), so relative errors of about 1e-8
are expected for correct gradients and anything above 1e-6 points to a bug.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping

import numpy as np

from hiddenstate.core.validation import float_array, generator, positive_int, real, shape_str

__all__ = ["GradcheckError", "check_grads", "directional_check", "elementwise_check", "relative_error"]


class GradcheckError(AssertionError):
    """Raised by :func:`check_grads` when an analytic gradient disagrees with finite differences."""


def relative_error(a, b) -> float:
    """``max|a - b| / max(max|a|, max|b|, 1e-12)``: a scale-free distance between two arrays.

    Parameters
    ----------
    a, b : array_like of the same shape
        Finite real numbers (the package's dtype rule: integers are promoted), compared in
        float64. They are never broadcast: ``(3, 1)`` against ``(4,)`` is an error, not 0.

    Returns
    -------
    float
        0 for identical arrays (and for two empty ones); about 1e-8 for a correct gradient
        against central differences.

    Raises
    ------
    TypeError
        Non-numeric, bool or complex data.
    ValueError
        Shapes that differ, NaN or Inf.
    """
    a = float_array("a", a, dtype=np.float64)
    b = float_array("b", b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"b must have the shape of a {shape_str(a.shape)}; got {shape_str(b.shape)}. The arrays are "
                         f"compared entry by entry, never broadcast.")
    scale = max(np.abs(a).max(initial=0.0), np.abs(b).max(initial=0.0), 1e-12)
    return float(np.abs(a - b).max(initial=0.0) / scale)


def _check_inputs(f, arrays, grads, eps, rng) -> tuple[dict, float, np.random.Generator]:
    """Validate the shared arguments; return the gradients as float64 arrays, ``eps`` and the generator."""
    if not callable(f):
        raise TypeError(f"f must be callable; got {type(f).__name__}.")
    if not isinstance(arrays, Mapping):
        raise TypeError(f"arrays must be a mapping name -> ndarray; got {type(arrays).__name__}.")
    if not arrays:
        raise ValueError("arrays must name at least one array to check; got an empty mapping.")
    for k, a in arrays.items():
        if not isinstance(a, np.ndarray) or a.dtype != np.float64:
            raise TypeError(f"arrays[{k!r}] must be a float64 ndarray (finite differences need float64); got "
                            f"{getattr(a, 'dtype', type(a).__name__)}.")
        if not a.flags.writeable:
            raise ValueError(f"arrays[{k!r}] must be writable (it is perturbed in place); got a read-only array.")
        if not np.isfinite(a).all():
            raise ValueError(f"arrays[{k!r}] must be finite; got NaN or Inf.")
    names = list(arrays)
    for i, k in enumerate(names):
        for j in names[i + 1:]:
            if np.may_share_memory(arrays[k], arrays[j]):
                raise ValueError(f"arrays[{k!r}] and arrays[{j!r}] must not share memory (each is perturbed on its "
                                 f"own); got two views of one buffer. Check each once.")
    if not isinstance(grads, Mapping):
        raise TypeError(f"grads must be a mapping name -> ndarray; got {type(grads).__name__}.")
    missing = [k for k in arrays if k not in grads]
    if missing:
        raise ValueError(f"grads must have an entry for every name of arrays; got none for {missing}.")
    g = {}
    for k, a in arrays.items():
        g[k] = float_array(f"grads[{k!r}]", grads[k], dtype=np.float64)
        if g[k].shape != a.shape:  # never broadcast: a (1,) gradient is not the gradient of a (3,) array
            raise ValueError(f"grads[{k!r}] must have shape {shape_str(a.shape)}; got {shape_str(g[k].shape)}.")
    eps = real("eps", eps, low=0.0, high=1.0, low_open=True, high_open=True)  # a small step: (0, 1)
    rng = np.random.default_rng(0) if rng is None else generator(rng)
    return g, eps, rng


def _evaluate(f, where: str) -> float:
    """``f()`` as a finite float, or a TypeError/ValueError that says what it returned."""
    v = f()
    if isinstance(v, np.ndarray) and v.shape == ():
        v = v[()]
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"f must return a real number (the loss); got {type(v).__name__} {where}.")
    v = float(v)
    if not math.isfinite(v):
        raise ValueError(f"f must return a finite number; got {v} {where}. Use a smaller eps or check the loss.")
    return v


def elementwise_check(f: Callable[[], float], arrays: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray],
                      *, eps: float = 1e-6, max_entries: int | None = 64,
                      rng: np.random.Generator | None = None) -> dict[str, float]:
    """Central differences entry by entry: ``(f(a + eps e_i) - f(a - eps e_i)) / (2 eps)``.

    Parameters
    ----------
    f : callable () -> float
        The loss, reading the arrays in ``arrays`` (which are perturbed in place and restored).
    arrays : mapping name -> float64 ndarray
        The variables to check (parameters, inputs, initial states).
    grads : mapping name -> ndarray
        The analytic gradient of ``f`` for each name, same shapes.
    eps : float, default 1e-6
        Finite-difference step, in (0, 1).
    max_entries : int or None, default 64
        Check at most this many randomly chosen entries per array (None: all).
    rng : numpy.random.Generator, optional
        Chooses the entries (default: seed 0, so results are reproducible).

    Returns
    -------
    dict name -> relative error (see :func:`relative_error`) over the checked entries.

    Raises
    ------
    TypeError
        ``f`` is not callable or does not return a real number, ``arrays`` or ``grads`` is not a
        mapping, an array is not a float64 ndarray, ``max_entries`` is not an integer or None.
    ValueError
        A gradient's shape differs from its array's (never broadcast) or is missing, an array is
        not C-contiguous or writable, ``eps`` is not a positive number, ``max_entries`` is not
        positive, ``f`` returns NaN or Inf.
    """
    grads, eps, rng = _check_inputs(f, arrays, grads, eps, rng)
    if max_entries is not None:
        max_entries = positive_int("max_entries", max_entries)
    errors = {}
    for name, a in arrays.items():
        g = grads[name]
        flat = a.reshape(-1)  # a view: arrays must be contiguous
        if not np.shares_memory(flat, a):
            raise ValueError(f"arrays[{name!r}] must be C-contiguous so it can be perturbed in place.")
        n = flat.size
        pick = np.arange(n) if (max_entries is None or n <= max_entries) else rng.choice(n, max_entries, replace=False)
        num = np.empty(len(pick))
        for j, i in enumerate(pick):
            old = flat[i]
            try:
                flat[i] = old + eps
                fp = _evaluate(f, f"at {name}[{i}] + eps")
                flat[i] = old - eps
                fm = _evaluate(f, f"at {name}[{i}] - eps")
            finally:
                flat[i] = old
            num[j] = (fp - fm) / (2 * eps)
        errors[name] = relative_error(g.reshape(-1)[pick], num)
    return errors


def directional_check(f: Callable[[], float], arrays: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray],
                      *, eps: float = 1e-6, num_directions: int = 3,
                      rng: np.random.Generator | None = None) -> float:
    """Central difference along random unit directions ``v`` of all arrays jointly.

    Compares ``(f(a + eps v) - f(a - eps v)) / (2 eps)`` with ``<grad, v>``; one pair of
    function evaluations checks every entry of every array at once.

    Parameters
    ----------
    f : callable () -> float
        The loss, reading the arrays in ``arrays`` (which are perturbed in place and restored).
    arrays : mapping name -> float64 ndarray
        The variables to check (parameters, inputs, initial states).
    grads : mapping name -> ndarray
        The analytic gradient of ``f`` for each name, same shapes.
    eps : float, default 1e-6
        Step along the unit direction, in (0, 1).
    num_directions : int, default 3
        How many random directions (standard normal over all arrays jointly, normalised).
    rng : numpy.random.Generator, optional
        Draws the directions (default: seed 0, so results are reproducible).

    Returns
    -------
    float
        The largest error ``|num - ana| / max(|num|, |ana|, ||grad||, 1e-12)`` over the
        directions. Scaling by the gradient norm as well keeps a direction that happens to be
        nearly orthogonal to the gradient (``<grad, v>`` small by cancellation) from reporting a
        correct gradient as wrong.

    Raises
    ------
    TypeError
        ``f`` is not callable or does not return a real number, ``arrays`` or ``grads`` is not a
        mapping, an array is not a float64 ndarray, ``num_directions`` is not an integer.
    ValueError
        A gradient's shape differs from its array's (never broadcast) or is missing, ``eps`` is
        not a positive number, ``num_directions`` is not positive, ``f`` returns NaN or Inf.
    """
    grads, eps, rng = _check_inputs(f, arrays, grads, eps, rng)
    num_directions = positive_int("num_directions", num_directions)
    worst = 0.0
    gnorm = np.sqrt(sum(float((grads[k] ** 2).sum()) for k in arrays))
    for _ in range(num_directions):
        vs = {k: rng.standard_normal(a.shape) for k, a in arrays.items()}
        norm = np.sqrt(sum(float((v * v).sum()) for v in vs.values())) or 1.0
        ana = sum(float((grads[k] * v).sum()) for k, v in vs.items()) / norm
        olds = {k: a.copy() for k, a in arrays.items()}
        try:
            for k, a in arrays.items():
                a += eps * vs[k] / norm
            fp = _evaluate(f, "at arrays + eps * v")
            for k, a in arrays.items():
                a[...] = olds[k] - eps * vs[k] / norm
            fm = _evaluate(f, "at arrays - eps * v")
        finally:
            for k, a in arrays.items():
                a[...] = olds[k]
        num = (fp - fm) / (2 * eps)
        worst = max(worst, abs(num - ana) / max(abs(num), abs(ana), gnorm, 1e-12))
    return worst


def check_grads(f: Callable[[], float], arrays: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray],
                *, rtol: float = 1e-6, eps: float = 1e-6, max_entries: int | None = 64) -> dict[str, float]:
    """Run :func:`elementwise_check` and :func:`directional_check`; raise if any error exceeds ``rtol``.

    Parameters
    ----------
    f : callable () -> float
        The loss, reading the arrays in ``arrays`` (which are perturbed in place and restored).
    arrays : mapping name -> float64 ndarray
        The variables to check.
    grads : mapping name -> ndarray
        The analytic gradient of ``f`` for each name, same shapes.
    rtol : float, default 1e-6
        Largest accepted error, elementwise and directional.
    eps : float, default 1e-6
        Finite-difference step, in (0, 1).
    max_entries : int or None, default 64
        Entries checked per array by :func:`elementwise_check` (None: all).

    Returns
    -------
    dict
        Relative error per array name, plus ``"<directional>"``.

    Raises
    ------
    GradcheckError
        If an error exceeds ``rtol``; the message lists every array's error.
    TypeError, ValueError
        Arrays that are not float64 or whose gradient has another shape, ``rtol`` that is not a
        finite number >= 0 (NaN would pass every check), and every error of
        :func:`elementwise_check` and :func:`directional_check`.
    """
    rtol = real("rtol", rtol, low=0.0)
    errs = elementwise_check(f, arrays, grads, eps=eps, max_entries=max_entries)
    errs["<directional>"] = directional_check(f, arrays, grads, eps=eps)
    bad = {k: v for k, v in errs.items() if not v <= rtol}
    if bad:
        raise GradcheckError(f"gradient check failed (rtol={rtol}): {bad}; all errors: {errs}")
    return errs
