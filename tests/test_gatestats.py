"""Gate statistics on gates whose values are set by hand."""

import numpy as np
import pytest

from hiddenstate.probe.gatestats import gate_statistics, time_constant


def test_saturation_fractions_and_means():
    T = 10
    g = np.empty((T, 1, 3))
    g[:, 0, 0] = 0.05  # always left-saturated
    g[:, 0, 1] = 0.95  # always right-saturated
    g[:, 0, 2] = [0.0, 1.0] * 5  # half and half
    s = gate_statistics(g, name="layer 0 z")
    np.testing.assert_allclose(s.left, [1.0, 0.0, 0.5])
    np.testing.assert_allclose(s.right, [0.0, 1.0, 0.5])
    np.testing.assert_allclose(s.mean, [0.05, 0.95, 0.5])
    np.testing.assert_allclose(s.std, [0.0, 0.0, 0.5], atol=1e-15)
    assert s.n_steps == T and s.name == "layer 0 z"
    # GRU update gate z pinned at 0.95: the state decays as 0.95^k, time constant 20 steps
    np.testing.assert_allclose(s.time_constant, [1 / 0.95, 20.0, 2.0])
    assert list(s.memory_units(10)) == [1]


def test_time_constant_matches_leaky_integrator_impulse_response():
    # h_t = m h_{t-1} + (1 - m) x_t: the total weight a unit impulse keeps, sum_k m^k, is 1/(1 - m)
    m = 0.9
    k = np.arange(2000)
    assert time_constant(m) == pytest.approx(np.sum(m**k))
    assert time_constant(1.0) == np.inf
    np.testing.assert_allclose(time_constant([0.0, 0.5]), [1.0, 2.0])


def test_mask_ignores_padding():
    g = np.full((4, 2, 1), 0.5)
    g[2:, 1] = 0.99  # padding of the second sequence
    mask = np.array([[1, 1], [1, 1], [1, 0], [1, 0]], dtype=bool)
    s = gate_statistics(g, mask=mask)
    assert s.right[0] == 0.0 and s.mean[0] == pytest.approx(0.5) and s.n_steps == 6


def test_thresholds_are_strict():
    s = gate_statistics(np.array([[0.1], [0.9]]))
    assert s.left[0] == 0.0 and s.right[0] == 0.0


def test_errors():
    with pytest.raises(ValueError, match=r"gate must have shape \(\.\.\., H\)"):
        gate_statistics(np.zeros(3))
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        gate_statistics(np.array([[1.5]]))
    with pytest.raises(ValueError, match="mask must have shape"):
        gate_statistics(np.zeros((2, 3)), mask=np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match="at least one valid step"):
        gate_statistics(np.zeros((2, 3)), mask=np.zeros(2, dtype=bool))
    with pytest.raises(ValueError, match="low and high"):
        gate_statistics(np.zeros((2, 3)), low=0.9, high=0.1)
    with pytest.raises(ValueError, match=r"mean_keep must lie in \[0, 1\]"):
        time_constant(-0.1)
