"""PCA on trajectories with a known principal structure."""

import numpy as np
import pytest

from hiddenstate.probe.pca import pca


def test_recovers_planted_axes(rng):
    T, H = 400, 6
    Q, _ = np.linalg.qr(rng.normal(size=(H, H)))
    lat = rng.normal(size=(T, 2)) * np.array([3.0, 1.0])  # variances 9 and 1
    X = lat @ Q[:, :2].T + 5.0  # (T, H), rank 2 plus an offset
    res = pca(X)
    np.testing.assert_allclose(res.mean, X.mean(axis=0))
    np.testing.assert_allclose(res.explained_variance_ratio[:2].sum(), 1.0, atol=1e-12)
    assert res.explained_variance_ratio[0] > 0.85
    # first axis is the planted one (up to sign), and signs are canonical
    assert abs(res.components[0] @ Q[:, 0]) > 0.99
    assert all(c[np.argmax(np.abs(c))] > 0 for c in res.components)
    np.testing.assert_allclose(res.components @ res.components.T, np.eye(H), atol=1e-12)
    # scores reconstruct the data from two components
    np.testing.assert_allclose(res.scores[:, :2] @ res.components[:2] + res.mean, X, atol=1e-10)
    np.testing.assert_allclose(res.explained_variance, res.scores.var(axis=0, ddof=1), rtol=1e-10, atol=1e-12)
    assert res.n_components_for(0.99) == 2


def test_circle_has_two_equal_components():
    t = np.linspace(0, 2 * np.pi, 1000, endpoint=False)
    X = np.stack([np.cos(t), np.sin(t), np.zeros_like(t)], axis=1)
    res = pca(X, n_components=2)
    np.testing.assert_allclose(res.explained_variance_ratio, [0.5, 0.5], atol=1e-12)
    assert res.scores.shape == (1000, 2)


def test_batched_states_and_mask(rng):
    X = rng.normal(size=(5, 3, 4))
    mask = np.ones((5, 3), dtype=bool)
    mask[3:, 2] = False
    res = pca(X, mask=mask)
    np.testing.assert_allclose(res.mean, X[mask].mean(axis=0))
    assert res.scores.shape == (5, 3, 4)
    np.testing.assert_allclose(res.transform(X), res.scores)


def test_errors(rng):
    with pytest.raises(ValueError, match="at least 2 samples"):
        pca(np.zeros(3))
    with pytest.raises(ValueError, match="at least 2 valid samples"):
        pca(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="n_components must be in"):
        pca(rng.normal(size=(10, 3)), n_components=4)
    with pytest.raises(ValueError, match="must be finite"):
        pca(np.array([[0.0, np.inf], [1.0, 2.0]]))


@pytest.mark.parametrize("shape", [(120, 300), (300, 40)])  # fewer samples than features, and more
def test_the_gram_method_gives_the_svds_axes_variances_and_scores(rng, shape):
    M, H = shape
    r = min(M, H) - 5  # a spectrum over 4 decades, then 5 exactly-zero directions
    X = (rng.normal(size=(M, r)) * np.geomspace(10.0, 1e-3, r)) @ np.linalg.qr(rng.normal(size=(H, r)))[0].T + 2.0
    a, b = pca(X), pca(X, method="gram")
    np.testing.assert_allclose(b.mean, a.mean, rtol=0, atol=1e-14)
    np.testing.assert_allclose(b.explained_variance_ratio, a.explained_variance_ratio, rtol=0, atol=1e-13)
    np.testing.assert_allclose(b.explained_variance[:r], a.explained_variance[:r], rtol=1e-6)  # down to 1e-8 of the top
    np.testing.assert_allclose(b.components[:20], a.components[:20], rtol=0, atol=1e-9)  # same signs too
    np.testing.assert_allclose(b.scores[:, :20], a.scores[:, :20], rtol=0, atol=1e-9 * np.abs(a.scores[:, 0]).max())
    assert b.n_components_for(0.99) == a.n_components_for(0.99)
    with pytest.raises(ValueError, match=r"method must be 'svd' or 'gram'; got 'qr'"):
        pca(X, method="qr")
