"""Stable activations, softmax and cross-entropy (hiddenstate.core.functional)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hiddenstate.core import functional as F
from tests.strategies import finite_floats


def test_sigmoid_matches_the_definition_where_exp_is_safe():
    x = np.linspace(-30, 30, 601)
    np.testing.assert_allclose(F.sigmoid(x), 1.0 / (1.0 + np.exp(-x)), rtol=1e-14, atol=1e-16)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sigmoid_of_huge_inputs_is_finite_and_exact(dtype):
    """sigmoid(+-1000) under np.seterr(all='raise'): no overflow, results exactly 1 and 0."""
    x = np.array([-1000.0, -745.0, -50.0, 0.0, 50.0, 745.0, 1000.0, -np.inf, np.inf], dtype=dtype)
    s = F.sigmoid(x)
    assert s.dtype == dtype
    assert np.all(np.isfinite(s))
    np.testing.assert_array_equal(s[[0, 1, 7]], 0.0)
    np.testing.assert_array_equal(s[[5, 6, 8]], 1.0)
    assert s[3] == 0.5
    assert np.all(np.diff(s[:7]) >= 0)


@settings(max_examples=50, deadline=None)
@given(hnp.arrays(np.float64, st.integers(1, 20), elements=finite_floats(1e300)))
def test_sigmoid_is_in_unit_interval_and_symmetric(x):
    s = F.sigmoid(x)
    assert np.all((s >= 0.0) & (s <= 1.0))
    np.testing.assert_allclose(s + F.sigmoid(-x), 1.0, rtol=0, atol=1e-15)


def test_sigmoid_out_argument_may_alias_the_input():
    x = np.array([-2.0, 0.0, 3.0])
    want = 1.0 / (1.0 + np.exp(-x))
    out = F.sigmoid(x, out=x)
    assert out is x
    np.testing.assert_allclose(x, want, rtol=1e-14)


def test_tanh_and_relu():
    x = np.array([-1000.0, -1.0, 0.0, 2.0, 1000.0])
    np.testing.assert_array_equal(F.tanh(x), np.tanh(x))
    np.testing.assert_array_equal(F.relu(x), [0.0, 0.0, 0.0, 2.0, 1000.0])


def test_derivatives_from_outputs():
    x = np.linspace(-4, 4, 17)
    eps = 1e-6
    num_s = (F.sigmoid(x + eps) - F.sigmoid(x - eps)) / (2 * eps)
    num_t = (np.tanh(x + eps) - np.tanh(x - eps)) / (2 * eps)
    np.testing.assert_allclose(F.dsigmoid_from_output(F.sigmoid(x)), num_s, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(F.dtanh_from_output(np.tanh(x)), num_t, rtol=1e-8, atol=1e-12)


def test_softmax_and_log_softmax_are_stable():
    logits = np.array([[700.0, 700.0, 0.0], [0.0, 1.0, 2.0], [-1e4, -1e4 + 1.0, -1e4]])
    p = F.softmax(logits)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-15)
    np.testing.assert_allclose(p[0, :2], [0.5, 0.5], rtol=1e-15)
    assert 0.0 < p[0, 2] < 1e-300
    e = np.exp([0.0, 1.0, 2.0])
    np.testing.assert_allclose(p[1], e / e.sum(), rtol=1e-15)
    lp = F.log_softmax(logits)
    assert np.all(lp <= 0) and np.all(np.isfinite(lp))
    np.testing.assert_allclose(lp[1], np.log(e / e.sum()), rtol=1e-14)
    np.testing.assert_array_equal(F.softmax(logits.T, axis=0), p.T)


def test_softmax_of_logits_far_apart_does_not_raise_underflow():
    """A confident model has logits more than ~745 apart: exp underflows to 0, which is the
    right answer. Under the suite's np.seterr(all="raise") that must not become an error."""
    logits = np.array([[1000.0, 1000.0, -1000.0]])
    p = F.softmax(logits)
    np.testing.assert_array_equal(p, [[0.5, 0.5, 0.0]])
    np.testing.assert_allclose(F.log_softmax(logits), [[-np.log(2), -np.log(2), -2000.0 - np.log(2)]], rtol=1e-15)


def test_cross_entropy_value_and_gradient():
    rng = np.random.default_rng(0)
    M, V = 5, 7
    logits = 3 * rng.standard_normal((M, V))
    targets = rng.integers(0, V, size=M)
    loss, dlogits = F.cross_entropy(logits, targets)
    assert isinstance(loss, float)
    want = -np.mean(F.log_softmax(logits)[np.arange(M), targets])
    assert abs(loss - want) < 1e-14
    eps = 1e-6
    num = np.empty_like(logits)
    for i in range(M):
        for j in range(V):
            a, b = logits.copy(), logits.copy()
            a[i, j] += eps
            b[i, j] -= eps
            num[i, j] = (F.cross_entropy(a, targets)[0] - F.cross_entropy(b, targets)[0]) / (2 * eps)
    np.testing.assert_allclose(dlogits, num, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dlogits.sum(axis=1), 0.0, atol=1e-15)


def test_cross_entropy_of_uniform_logits_is_log_v():
    loss, _ = F.cross_entropy(np.zeros((3, 10)), np.array([0, 5, 9]))
    assert abs(loss - np.log(10)) < 1e-15


def test_cross_entropy_of_huge_logits_is_finite():
    """Confident predictions (logits 2e4 apart) under np.seterr(all="raise"): finite, no underflow error."""
    loss, d = F.cross_entropy(np.array([[1e4, -1e4], [-1e4, 1e4]]), np.array([0, 0]))
    assert np.isfinite(loss) and np.all(np.isfinite(d))
    assert abs(loss - 1e4) < 1e-9  # half the rows cost 2e4 nats, the other half 0


@pytest.mark.parametrize(
    "logits, targets, exc, match",
    [
        (np.zeros(3), np.array([0]), ValueError, r"^logits must have shape \(M, V\); got shape \(3,\)"),
        (np.zeros((2, 3)), np.array([0, 1, 2]), ValueError, r"^targets must have shape \(M=2,\); got shape \(3,\)"),
        (np.zeros((2, 3)), np.array([0.0, 1.0]), TypeError, r"^targets must be an integer array; got dtype float64"),
        (np.zeros((2, 3)), np.array([0, 3]), ValueError, r"^targets must lie in \[0, V=3\)"),
        (np.zeros((2, 3)), np.array([-1, 0]), ValueError, r"^targets must lie in \[0, V=3\)"),
    ],
)
def test_cross_entropy_errors(logits, targets, exc, match):
    with pytest.raises(exc, match=match):
        F.cross_entropy(logits, targets)


@settings(max_examples=30, deadline=None)
@given(
    z=hnp.arrays(np.float64, 6, elements=st.floats(0.0, 1.0)),
    h=hnp.arrays(np.float64, 6, elements=st.floats(-10.0, 10.0)),
    n=hnp.arrays(np.float64, 6, elements=st.floats(-1.0, 1.0)),
)
def test_gru_blend_is_the_interpolation(z, h, n):
    # values below 1e-100 would underflow under np.seterr(all="raise") in any formula
    z, h, n = (np.where(np.abs(a) < 1e-100, 0.0, a) for a in (z, h, n))
    np.testing.assert_allclose(F.gru_blend(z, h, n), z * h + (1 - z) * n, rtol=1e-12, atol=1e-14)
    out = np.empty_like(n)
    assert F.gru_blend(z, h, n, out=out) is out
    np.testing.assert_allclose(out, z * h + (1 - z) * n, rtol=1e-12, atol=1e-14)


def test_gru_blend_out_may_alias_the_candidate_as_documented():
    """The docstring promises ``out`` may alias ``n``; then the result must still be the blend."""
    z, h, n = np.array([0.0, 0.5, 1.0]), np.array([0.0, 2.0, -3.0]), np.array([1.0, 1.0, 1.0])
    want = z * h + (1 - z) * n  # [1.0, 1.5, -3.0]
    out = n.copy()
    F.gru_blend(z, h, out, out=out)
    np.testing.assert_allclose(out, want, rtol=1e-15)
