"""Fixed points on maps whose fixed points are known in advance."""

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.probe.fixedpoints import classify_point, find_fixed_points, layer_map


def _tanh_map(a):
    return (lambda h: np.tanh(a * h)), (lambda h: np.diag(a * (1.0 - np.tanh(a * h) ** 2)))


def _root(a):
    # positive root of tanh(a h) = h by fixed-point iteration (converges: slope < 1 there)
    h = 1.0
    for _ in range(500):
        h = np.tanh(a * h)
    return h


def test_one_dimensional_tanh_has_three_fixed_points():
    F, J = _tanh_map(2.0)
    pts = find_fixed_points(F, J, np.linspace(-2, 2, 21)[:, None])
    assert len(pts) == 3
    hstar = _root(2.0)
    by_h = sorted(pts, key=lambda p: p.h[0])
    np.testing.assert_allclose([p.h[0] for p in by_h], [-hstar, 0.0, hstar], atol=1e-10)
    assert [p.kind for p in by_h] == ["stable", "unstable", "stable"]
    assert by_h[1].n_unstable == 1 and by_h[1].eigenvalues[0] == pytest.approx(2.0)
    # slope at the stable points: a (1 - h*^2) < 1
    assert by_h[2].spectral_radius == pytest.approx(2.0 * (1 - hstar**2), rel=1e-8)
    assert all(p.q < 1e-20 for p in pts)
    assert sum(p.n_hits for p in pts) == 21
    # the result order: stable first
    assert pts[-1].kind == "unstable"


def test_contraction_has_one_stable_point_equal_to_iteration(rng):
    H = 8
    W = rng.normal(size=(H, H))
    W *= 0.5 / np.linalg.svd(W, compute_uv=False)[0]
    b = rng.normal(size=H)
    h = np.zeros(H)
    for _ in range(200):
        h = np.tanh(W @ h + b)

    def F(v):
        return np.tanh(W @ v + b)

    def J(v):
        return (1 - np.tanh(W @ v + b) ** 2)[:, None] * W

    pts = find_fixed_points(F, J, rng.normal(size=(10, H)) * 2)
    assert len(pts) == 1
    p = pts[0]
    np.testing.assert_allclose(p.h, h, atol=1e-12)
    assert p.is_stable and p.n_hits == 10 and p.spectral_radius < 0.5


def test_saddle_with_one_unstable_direction():
    # h1 -> tanh(2 h1) (bistable), h2 -> tanh(0.5 h2) (contracting): (0, 0) is a saddle.
    a = np.array([2.0, 0.5])

    def F(h):
        return np.tanh(a * h)

    def J(h):
        return np.diag(a * (1 - np.tanh(a * h) ** 2))

    g = np.linspace(-1.5, 1.5, 7)
    inits = np.array([[x, y] for x in g for y in g])
    pts = find_fixed_points(F, J, inits)
    kinds = sorted((p.kind, p.n_unstable) for p in pts)
    assert kinds == [("saddle", 1), ("stable", 0), ("stable", 0)]
    saddle = next(p for p in pts if p.kind == "saddle")
    np.testing.assert_allclose(saddle.h, 0.0, atol=1e-10)
    v = saddle.unstable_directions()
    assert v.shape == (2, 1) and abs(v[0, 0]) == pytest.approx(1.0)  # the unstable axis is h1


def test_classify_point_kinds():
    assert classify_point(np.diag([0.5, 0.2]))[1:] == (0, "stable")
    assert classify_point(np.diag([1.0, 0.2]))[1:] == (0, "marginal")
    assert classify_point(np.diag([1.5, 0.2]))[1:] == (1, "saddle")
    assert classify_point(np.diag([1.5, -2.0]))[1:] == (2, "unstable")
    rot = 1.2 * np.array([[0.0, -1.0], [1.0, 0.0]])  # complex pair outside the unit circle
    vals, n, kind = classify_point(rot)
    assert n == 2 and kind == "unstable" and np.allclose(np.abs(vals), 1.2)


def test_slow_points_need_a_looser_tolerance():
    # F(h) - h = 0.01 + h^2 > 0: no fixed point, but a slow point at h = 0 with q = 0.5 * 0.01^2.
    def F(h):
        return h + 0.01 + h**2

    def J(h):
        return np.diag(1 + 2 * h)

    assert find_fixed_points(F, J, [[0.3], [-0.4]]) == []
    slow = find_fixed_points(F, J, [[0.3], [-0.4]], tol=1e-4)
    assert len(slow) == 1 and slow[0].q == pytest.approx(5e-5, rel=1e-6) and abs(slow[0].h[0]) < 1e-5


def test_layer_map_fixed_points_match_long_runs(rng):
    for layer in (hs.RNN(3, 5, rng=rng), hs.GRU(3, 5, rng=rng), hs.GRU(3, 5, reset_after=True, rng=rng),
                  hs.LSTM(3, 5, rng=rng)):
        key = "weight_hh_l0"
        layer.params[key] *= 0.3  # a contraction: one stable fixed point
        xc = rng.normal(size=3)
        out, h_n = layer(np.repeat(xc[None, None, :], 400, axis=0))
        F, J = layer_map(layer, xc)
        state = np.concatenate([h_n[0][0, 0], h_n[1][0, 0]]) if isinstance(h_n, tuple) else h_n[0, 0]
        np.testing.assert_allclose(F(state), state, atol=1e-12)
        pts = find_fixed_points(F, J, rng.normal(size=(4, state.size)))
        assert len(pts) == 1 and pts[0].is_stable
        np.testing.assert_allclose(pts[0].h, state, atol=1e-9)
        # analytic Jacobian against central differences
        s0 = rng.normal(size=state.size) * 0.5
        eps = 1e-6
        fd = np.stack([(F(s0 + eps * e) - F(s0 - eps * e)) / (2 * eps) for e in np.eye(state.size)], axis=1)
        np.testing.assert_allclose(J(s0), fd, atol=1e-8)


def test_layer_map_errors(rng):
    layer = hs.GRU(3, 4, rng=rng)
    with pytest.raises(ValueError, match=r"x must have shape \(3,\)"):
        layer_map(layer, np.zeros(4))
    with pytest.raises(ValueError, match="layer_index must be"):
        layer_map(layer, layer_index=2)


def test_errors():
    F, J = _tanh_map(2.0)
    with pytest.raises(ValueError, match=r"inits must have shape \(K, H\)"):
        find_fixed_points(F, J, np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="inits must be finite"):
        find_fixed_points(F, J, [[np.nan]])
    with pytest.raises(ValueError, match=r"F\(h\) must return shape"):
        find_fixed_points(lambda h: np.zeros(2), J, [[0.1]])
    with pytest.raises(ValueError, match=r"jac\(h\) must return shape"):
        find_fixed_points(F, lambda h: np.zeros(1), [[0.1]])
    with pytest.raises(ValueError, match="tol must be positive"):
        find_fixed_points(F, J, [[0.1]], tol=0)


def test_search_stops_once_newton_lands_on_the_fixed_point(rng):
    """A start already near the fixed point costs a few Newton steps, not max_iter optimiser steps."""
    H = 40
    W = rng.normal(size=(H, H))
    W *= 0.9 / np.linalg.svd(W, compute_uv=False)[0]
    b = rng.normal(size=H)
    # the fixed point of the affine map h -> W h + b, solved independently: (I - W) h* = b
    hstar = np.linalg.solve(np.eye(H) - W, b)
    calls = []

    def F(v):
        return W @ v + b

    def J(v):
        calls.append(1)
        return W.copy()

    pts = find_fixed_points(F, J, hstar + 1e-4 * rng.normal(size=(3, H)))
    assert len(pts) == 1 and pts[0].n_hits == 3 and pts[0].is_stable
    np.testing.assert_allclose(pts[0].h, hstar, atol=1e-12)
    # one Newton step per start from the start itself (+ one Jacobian to classify the point): 33 calls
    # measured; optimising first and polishing after took 118
    assert len(calls) <= 3 * 8 + 10


def test_layer_map_batched_F_and_reuse_after_jac(rng):
    layer = hs.GRU(3, 6, rng=rng)
    xc = rng.normal(size=3)
    F, J = layer_map(layer, xc)
    S = rng.uniform(-1, 1, size=(5, 6))
    # each row against one step of the layer itself
    want = np.stack([layer(np.broadcast_to(xc, (1, 1, 3)), s[None, None, :])[1][0, 0] for s in S])
    np.testing.assert_allclose(F(S), want, rtol=1e-13, atol=1e-15)
    J(S[0])
    np.testing.assert_allclose(F(S[0]), want[0], rtol=1e-13, atol=1e-15)  # reused from jac's step
    np.testing.assert_allclose(F(S[1]), want[1], rtol=1e-13, atol=1e-15)  # another state: a fresh step
    out = F(S[0])
    out[:] = 7.0  # the caller owns what F returns; the cache is not aliased
    np.testing.assert_allclose(F(S[0]), want[0], rtol=1e-13, atol=1e-15)
    with pytest.raises(ValueError, match=r"s must have shape \(S=6,\)"):
        J(S)


def test_newton_polish_halves_a_step_that_overshoots_on_a_slow_attractor():
    """F(h) = h - a*atan(h) per unit: one stable point h* = 0 with J = I - diag(a), slow (|λ| > 0.999).

    From h = 2 the full Newton step of each unit lands at 2 - 5*atan(2) = -3.54, where q is
    larger (Newton on atan diverges for |h| > 1.39): polishing that only takes full steps gives up,
    and one optimiser iteration cannot cross the flat q. Halved steps converge (Armijo-style
    backtracking, Nocedal & Wright 2006, section 11.2).
    """
    H = 20
    a = np.geomspace(1e-5, 1e-3, H)
    F = lambda h: h - a * np.arctan(h)
    J = lambda h: np.eye(H) - np.diag(a / (1.0 + h ** 2))
    assert abs(np.arctan(2.0 - 5.0 * np.arctan(2.0))) > abs(np.arctan(2.0))  # the full step overshoots
    pts = find_fixed_points(F, J, np.full((1, H), 2.0), max_iter=1)
    assert len(pts) == 1 and pts[0].is_stable and np.abs(pts[0].h).max() < 1e-9
    np.testing.assert_allclose(np.sort(pts[0].eigenvalues.real), np.sort(1.0 - a), rtol=1e-12)
