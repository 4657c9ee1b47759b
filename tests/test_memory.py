"""Memory curves of systems whose memory is known exactly."""

import numpy as np
import pytest

from hiddenstate.probe.memory import memory_curve, ridge_fit, ridge_predict


def _delay_line(x, m):
    """State h_t = (x_t, x_{t-1}, ..., x_{t-m}) (zeros before the start)."""
    T = x.shape[0]
    H = np.zeros((T, m + 1) + x.shape[1:])
    for j in range(m + 1):
        H[j:, j] = x[: T - j]
    return H


def test_delay_line_remembers_exactly_m_steps(rng):
    x = rng.normal(size=2000)
    states = _delay_line(x, 4)  # (T, 5)
    mc = memory_curve(states, x, max_lag=8, alpha=1e-6)
    assert mc.metric == "r2" and mc.chance == 0.0
    np.testing.assert_allclose(mc.score[:5], 1.0, atol=1e-6)
    assert np.all(np.abs(mc.score[5:]) < 0.02)  # i.i.d. input: nothing about older steps
    assert mc.capacity == pytest.approx(5.0, abs=0.05)
    assert mc.horizon(0.5) == 4


def test_leaky_integrator_r2_is_squared_correlation(rng):
    # h_t = a h_{t-1} + x_t with i.i.d. x: corr(h_t, x_{t-k})^2 = a^(2k) (1 - a^2)
    a, T = 0.8, 40000
    x = rng.normal(size=T)
    h = np.zeros(T)
    for t in range(T):
        h[t] = a * (h[t - 1] if t else 0.0) + x[t]
    mc = memory_curve(h[:, None], x, max_lag=6, alpha=1e-6)
    expected = a ** (2 * np.arange(7)) * (1 - a**2)
    np.testing.assert_allclose(mc.score, expected, atol=0.02)


def test_tokens_decoded_by_accuracy(rng):
    V, T, N = 4, 600, 3
    tok = rng.integers(0, V, size=(T, N))
    onehot = np.eye(V)[tok]  # (T, N, V)
    states = np.concatenate([onehot, np.roll(onehot, 1, axis=0)], axis=2)  # remembers one step back
    mc = memory_curve(states, tok, max_lag=3)
    assert mc.metric == "accuracy"
    assert mc.score[0] == 1.0 and mc.score[1] == 1.0
    assert mc.score[2] < 0.45 and mc.score[3] < 0.45  # chance is about 1/4
    assert 0.15 < mc.chance < 0.4


def test_mask_and_batch(rng):
    T, N = 300, 2
    x = rng.normal(size=(T, N))
    states = _delay_line(x, 1)  # (T, 2, N) -> need (T, N, H)
    states = np.moveaxis(states, 1, 2)
    mask = np.ones((T, N), dtype=bool)
    mask[200:, 1] = False
    mc = memory_curve(states, x, max_lag=2, mask=mask, alpha=1e-6)
    np.testing.assert_allclose(mc.score[:2], 1.0, atol=1e-6)


def test_ridge_closed_form(rng):
    X = rng.normal(size=(50, 3))
    W = rng.normal(size=(3, 2))
    Y = X @ W + 0.7
    Wf, b = ridge_fit(X, Y, alpha=0.0)
    np.testing.assert_allclose(Wf, W, atol=1e-10)
    np.testing.assert_allclose(b, 0.7, atol=1e-10)
    np.testing.assert_allclose(ridge_predict(X, Wf, b), Y, atol=1e-10)
    Ws, _ = ridge_fit(X, Y, alpha=1e6)
    assert np.abs(Ws).max() < 1e-2  # heavy penalty shrinks to zero


def test_errors(rng):
    s = rng.normal(size=(20, 3))
    with pytest.raises(ValueError, match="inputs must have shape"):
        memory_curve(s, np.zeros(19))
    with pytest.raises(ValueError, match="states must be a real array"):
        memory_curve(np.zeros(5), np.zeros(5))
    with pytest.raises(ValueError, match="max_lag must leave training and test pairs"):
        memory_curve(s, np.zeros(20), max_lag=19)
    with pytest.raises(ValueError, match="train_fraction"):
        memory_curve(s, np.zeros(20), train_fraction=1.0)
    with pytest.raises(ValueError, match="max_lag must be a non-negative integer"):
        memory_curve(s, np.zeros(20), max_lag=-1)
