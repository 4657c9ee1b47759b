"""Gradient flow over time on networks whose answer is known in advance (Pascanu et al. 2013)."""

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.probe.gradflow import (
    backprop_hidden,
    hidden_gradient_norms,
    jacobian_flow,
    sensitivity,
    spectral_bounds,
    step_jacobians,
)
from hiddenstate.probe.trace import trace

CASES = [
    (hs.RNN, {}),
    (hs.RNN, {"nonlinearity": "relu"}),
    (hs.RNN, {"nonlinearity": "sigmoid"}),
    (hs.GRU, {}),
    (hs.GRU, {"reset_after": True}),
    (hs.LSTM, {}),
]
IDS = ["rnn-tanh", "rnn-relu", "rnn-sigmoid", "gru", "gru-reset-after", "lstm"]


def _orthogonal(rng, H):
    Q, R = np.linalg.qr(rng.normal(size=(H, H)))
    return Q * np.sign(np.diag(R))


def _scaled(rng, H, s):
    W = rng.normal(size=(H, H))
    return W * (s / np.linalg.svd(W, compute_uv=False)[0])


def _adding_inputs(rng, T, N):
    """Adding-problem inputs (Hochreiter & Schmidhuber 1997): a value in [0, 1) and a marker bit."""
    x = np.zeros((T, N, 2))
    x[:, :, 0] = rng.random((T, N))
    for n in range(N):
        x[rng.choice(T, 2, replace=False), n, 1] = 1.0
    return x


def test_linear_rnn_gradient_grows_as_1_1_to_the_k(rng):
    # identity activation: dh_t/dh_{t-1} = W_hh = 1.1 Q, so ||dh_T/dh_{T-k}|| = 1.1^k exactly
    H, T = 8, 50
    W = 1.1 * _orthogonal(rng, H)
    J = np.broadcast_to(W, (T, H, H))
    flow = jacobian_flow(J)
    k = np.arange(T + 1)
    np.testing.assert_allclose(flow.spectral, 1.1**k, rtol=1e-10)
    np.testing.assert_allclose(flow.frobenius, 1.1**k * np.sqrt(H), rtol=1e-10)
    assert flow.spectral[50] == pytest.approx(1.1**50, rel=1e-6)  # ≈ 117.4
    v = rng.normal(size=H)
    v /= np.linalg.norm(v)
    grads, d0 = backprop_hidden(J, v)
    np.testing.assert_allclose(np.linalg.norm(grads, axis=-1), 1.1 ** (T - 1 - np.arange(T)), rtol=1e-10)
    assert np.linalg.norm(d0) / np.linalg.norm(v) == pytest.approx(117.39085287969579, rel=1e-6)


def test_tanh_rnn_with_sigma_0_9_stays_below_0_9_to_the_k(rng):
    H, T, N = 16, 50, 8
    layer = hs.RNN(3, H, rng=rng)
    layer.params["weight_hh_l0"] = _scaled(rng, H, 0.9)
    x = rng.normal(size=(T, N, 3))
    flow = sensitivity(layer, x)
    k = np.arange(T + 1)
    assert np.all(flow.per_sequence_spectral <= 0.9 ** k[:, None] * (1 + 1e-12))
    assert flow.spectral[50] < 0.9**50 < 5.2e-3
    g = hidden_gradient_norms(layer, x)  # unit-norm loss gradient on h_T
    assert np.all(g.per_sequence[0] <= 0.9 ** g.lags[:, None] * (1 + 1e-12))
    row = spectral_bounds(layer)[0]
    assert row["sigma_max"] == pytest.approx(0.9) and row["bound"] == 1.0 and row["vanishing guaranteed"]


def test_logistic_rnn_bound_is_four(rng):
    H, T = 12, 50
    layer = hs.RNN(2, H, nonlinearity="sigmoid", rng=rng)
    layer.params["weight_hh_l0"] = _scaled(rng, H, 3.5)
    flow = sensitivity(layer, rng.normal(size=(T, 4, 2)))
    k = np.arange(T + 1)
    assert np.all(flow.per_sequence_spectral <= (3.5 / 4) ** k[:, None] * (1 + 1e-12))
    assert flow.spectral[50] < 0.875**50  # ≈ 1.3e-3
    row = spectral_bounds(layer)[0]
    assert row["bound"] == 4.0 and row["vanishing guaranteed"]


def test_gru_carry_bias_keeps_gradient_where_tanh_vanishes():
    # experiments.md §7: H = 32, U(±1/sqrt(H)) init, adding-problem inputs, T = 100
    H, T, N = 32, 100, 16
    x = _adding_inputs(np.random.default_rng(7), T, N)
    tanh = hs.RNN(2, H, rng=np.random.default_rng(0))
    gru = hs.GRU(2, H, rng=np.random.default_rng(0))
    gru.params["bias_hh_l0"][H:2 * H] += 3.0  # update gate z ≈ 0.95: carry the state
    g_tanh = hidden_gradient_norms(tanh, x)
    g_gru = hidden_gradient_norms(gru, x)
    lag50 = T - 1 - 50
    assert g_tanh.norm[0, lag50] < 1e-6
    assert g_gru.norm[0, lag50] > 1e-2
    assert g_gru.norm[0, lag50] / g_tanh.norm[0, lag50] > 1e4
    assert sensitivity(gru, x).spectral[50] > 1e-2 > 1e-6 > sensitivity(tanh, x).spectral[50]
    assert spectral_bounds(tanh)[0]["sigma_max"] > 1.0  # vanishing although sigma_max > 1: necessary, not sufficient


@pytest.mark.parametrize("cls,kw", CASES, ids=IDS)
def test_analytic_jacobians_agree_with_layer_bptt(cls, kw, rng):
    T, N, I, H = 9, 3, 2, 4
    layer = cls(I, H, 2, rng=rng, **kw)
    x = rng.normal(size=(T, N, I))
    v = rng.normal(size=(N, H))
    g = hidden_gradient_norms(layer, x, dh_last=v)
    lt = trace(layer, x)[1]
    J = step_jacobians(lt)
    S = J.shape[-1]
    v_state = np.concatenate([v, np.zeros((N, S - H))], axis=1)
    grads, d0 = backprop_hidden(J, v_state)
    np.testing.assert_allclose(np.linalg.norm(grads[..., :H], axis=-1), g.per_sequence[1], rtol=1e-10, atol=1e-15)
    if cls is hs.LSTM:  # the cell-state gradient dL/dc_t too
        np.testing.assert_allclose(np.linalg.norm(grads[..., H:], axis=-1).mean(axis=1), g.norm_c[1],
                                   rtol=1e-10, atol=1e-15)
    # against the layer's own gradient on h0
    _, _, cache = layer.forward(x)
    dh_n = np.zeros((2, N, H))
    dh_n[1] = v
    d = layer.backward(cache, None, (dh_n, None) if cls is hs.LSTM else dh_n)[2]
    d_top = d[0][1] if cls is hs.LSTM else d[1]
    np.testing.assert_allclose(d0[:, :H], d_top, rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("cls,kw", CASES, ids=IDS)
def test_step_jacobians_match_finite_differences(cls, kw, rng):
    layer = cls(3, 4, rng=rng, **kw)
    lt = trace(layer, rng.normal(size=(6, 2, 3)))[0]
    J = step_jacobians(lt)
    t = 3
    lstm = cls is hs.LSTM

    def step(s):  # the cell kind's one-step map: its scan kernel run for T = 1
        return lt.cell.step(lt.weights, lt.x[t], s, **lt.options).state

    s0 = np.concatenate([lt.h_prev[t], lt.c_prev[t]], axis=1) if lstm else lt.h_prev[t]
    eps = 1e-6
    fd = np.stack([(step(s0 + eps * e) - step(s0 - eps * e)) / (2 * eps) for e in np.eye(s0.shape[1])], axis=-1)
    np.testing.assert_allclose(J[t], fd, atol=1e-8)


def test_padding_and_resets_in_jacobians(rng):
    layer = hs.GRU(2, 3, rng=rng)
    x = rng.normal(size=(6, 2, 2))
    reset = np.zeros((6, 2), dtype=bool)
    reset[2, 0] = True
    lt = trace(layer, x, lengths=np.array([6, 4]), reset=reset)[0]
    J = step_jacobians(lt)
    np.testing.assert_array_equal(J[4, 1], np.eye(3))  # padding carries the state
    np.testing.assert_array_equal(J[2, 0], 0.0)  # no gradient across a reset
    flow = jacobian_flow(lt, max_lag=6)
    assert np.isnan(flow.per_sequence_spectral[5, 1]) and np.isfinite(flow.per_sequence_spectral[5, 0])
    assert flow.per_sequence_spectral[4, 0] == 0.0  # the product crosses the reset at t = 2
    assert np.isfinite(flow.spectral).all()


def test_lstm_blocks(rng):
    layer = hs.LSTM(2, 3, rng=rng)
    x = rng.normal(size=(10, 2, 2))
    h_only = sensitivity(layer, x, block="h")
    full = sensitivity(layer, x, block="state")
    assert h_only.block == "h" and full.block == "state"
    assert full.frobenius[0] == pytest.approx(np.sqrt(6)) and h_only.frobenius[0] == pytest.approx(np.sqrt(3))
    rows = spectral_bounds(layer)
    assert [r["block"] for r in rows] == ["i", "f", "g", "o"] and rows[0]["bound"] is None


def test_errors(rng):
    bi = hs.GRU(2, 3, bidirectional=True, rng=rng)
    with pytest.raises(ValueError, match="layer must be unidirectional"):
        hidden_gradient_norms(bi, np.zeros((4, 1, 2)))
    layer = hs.GRU(2, 3, rng=rng)
    with pytest.raises(ValueError, match=r"dh_last must have shape \(N, H\)"):
        hidden_gradient_norms(layer, np.zeros((4, 2, 2)), dh_last=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="block must be"):
        jacobian_flow(np.zeros((2, 3, 3)), block="c")
    with pytest.raises(ValueError, match=r"source must be a LayerTrace or step Jacobians"):
        jacobian_flow(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match="max_lag must be in"):
        jacobian_flow(np.zeros((2, 3, 3)), max_lag=3)


def test_batch_first_and_unbatched_give_the_same_norms(rng):
    tm = hs.GRU(2, 3, rng=rng)
    bf = hs.GRU(2, 3, batch_first=True, rng=rng)
    bf.load_state_dict(tm.state_dict())
    x = rng.normal(size=(7, 2, 2))
    a = hidden_gradient_norms(tm, x)
    b = hidden_gradient_norms(bf, x.transpose(1, 0, 2))
    c = hidden_gradient_norms(tm, x[:, 0])  # unbatched (T, I): the first sequence
    np.testing.assert_allclose(a.per_sequence, b.per_sequence, rtol=1e-12)
    np.testing.assert_allclose(c.per_sequence[:, :, 0], a.per_sequence[:, :, 0], rtol=1e-12)
    lags, norms = a.curve()
    assert lags[0] == 0 and norms[0] == pytest.approx(1.0)
