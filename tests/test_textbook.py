"""The seed step functions: worked examples, errors, invariants, and agreement with the cells.

Seed (a), "Finding Structure in Time": init_hidden then one Elman step.
Seed (b), "Learning Phrase Representations": the GRU hidden state update.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import hiddenstate as hs
from hiddenstate.classic.textbook import (
    candidate,
    elman_step,
    gru_step,
    hidden_state_update,
    lstm_step,
    reset_gate,
    update_gate,
)
from hiddenstate.state import init_hidden
from tests.strategies import finite_floats, gates01, make_cell, seeds

# ---------------------------------------------------------------------------- seed (a)

X1 = np.array([[0.5, -0.3], [0.8, 0.1]])  # (B=2, D=2)
W_XH = np.array([[0.2, -0.4, 0.3], [0.1, 0.5, -0.2]])  # (D=2, H=3)
B = np.array([0.1, -0.1, 0.0])  # (H=3,)
W_HH = np.array([[0.3, -0.1, 0.2], [0.0, 0.4, -0.5], [0.7, 0.1, 0.1]])  # any (3, 3): h0 = 0 hides it
PRE = np.array([[0.17, -0.45, 0.21], [0.27, -0.37, 0.22]])  # the seed's pre-activations (exact)
SEED_PRINTED_H1 = np.array([[0.1685, -0.4219, 0.2070], [0.2638, -0.3537, 0.2165]])  # rounded, off in the 4th decimal


def test_seed_a_pre_activation_is_exact():
    np.testing.assert_allclose(X1 @ W_XH + B, PRE, rtol=0, atol=1e-15)


def test_seed_a_first_step_is_the_exact_math():
    """h_1 = tanh(x_1 W_xh + b) exactly (1e-12), not the seed's rounded printout."""
    h0 = init_hidden(2, 3)
    h1 = elman_step(X1, h0, W_XH, W_HH, B)
    assert h1.shape == (2, 3) and h1.dtype == np.float64
    np.testing.assert_allclose(h1, np.tanh(PRE), rtol=0, atol=1e-12)
    # spot values worked out by hand: tanh(0.17) = 0.16838..., tanh(0.27) = 0.26362...
    assert abs(h1[0, 0] - 0.168381) < 1e-6
    assert abs(h1[1, 0] - 0.263625) < 1e-6


def test_seed_a_printed_values_are_rounded_and_off_in_the_4th_decimal():
    """Documented discrepancy: the seed prints values that differ from the exact math by > 1e-4."""
    h1 = elman_step(X1, init_hidden(2, 3), W_XH, W_HH, B)
    err = np.abs(h1 - SEED_PRINTED_H1)
    assert err.max() < 2e-3  # the same numbers up to rounding...
    assert err[0, 0] > 1e-4 and err[1, 0] > 1e-4  # ...but not to the 4 decimals printed
    assert "0.168381" in elman_step.__doc__  # the docstring says so


def test_seed_a_zero_state_hides_w_hh_and_nonzero_state_does_not():
    h0 = init_hidden(2, 3)
    a = elman_step(X1, h0, W_XH, W_HH, B)
    b = elman_step(X1, h0, W_XH, 10 * W_HH, B)
    np.testing.assert_array_equal(a, b)
    h = np.full((2, 3), 0.5)
    np.testing.assert_allclose(elman_step(X1, h, W_XH, W_HH, B), np.tanh(PRE + h @ W_HH), rtol=0, atol=1e-15)
    assert not np.allclose(elman_step(X1, h, W_XH, W_HH, B), a)


def test_seed_a_rows_are_independent_and_single_examples_work():
    h1 = elman_step(X1, init_hidden(2, 3), W_XH, W_HH, B)
    for n in range(2):
        one = elman_step(X1[n], np.zeros(3), W_XH, W_HH, B)
        assert one.shape == (3,)
        np.testing.assert_allclose(one, h1[n], rtol=0, atol=1e-15)  # gemv vs gemm: equal up to rounding


# ---------------------------------------------------------------------------- seed (b)

Z_B = np.array([0.8, 0.2, 0.6, 0.1])
H_PREV_B = np.array([1.0, -0.5, 0.3, 2.0])
H_TILDE_B = np.array([-0.4, 0.9, 0.7, -1.0])


def test_seed_b_worked_example_is_exact():
    h = hidden_state_update(Z_B, H_PREV_B, H_TILDE_B)
    assert h.shape == (4,) and h.dtype == np.float64
    np.testing.assert_allclose(h, [0.72, 0.62, 0.46, -0.70], rtol=0, atol=1e-15)


def test_seed_b_intermediate_terms():
    np.testing.assert_allclose(Z_B * H_PREV_B, [0.80, -0.10, 0.18, 0.20], atol=1e-15)
    np.testing.assert_allclose((1 - Z_B) * H_TILDE_B, [-0.08, 0.72, 0.28, -0.90], atol=1e-15)


def test_hidden_state_update_batch_and_rows_agree():
    rng = np.random.default_rng(0)
    z, h, n = rng.uniform(size=(3, 5, 4)), rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    out = hidden_state_update(z[0], h, n)
    assert out.shape == (5, 4)
    np.testing.assert_allclose(out, z[0] * h + (1 - z[0]) * n, rtol=0, atol=1e-15)
    for i in range(5):
        np.testing.assert_array_equal(hidden_state_update(z[0][i], h[i], n[i]), out[i])


def test_hidden_state_update_gate_extremes():
    h, n = np.array([1.0, -2.0, 3.0]), np.array([0.5, 0.25, -7.0])
    np.testing.assert_array_equal(hidden_state_update(np.ones(3), h, n), h)  # z = 1 keeps the state
    np.testing.assert_array_equal(hidden_state_update(np.zeros(3), h, n), n)  # z = 0 takes the candidate


def test_hidden_state_update_promotes_float32_and_returns_a_new_array():
    z = Z_B.astype(np.float32)
    h = H_PREV_B.astype(np.float32)
    n = H_TILDE_B.astype(np.float32)
    out = hidden_state_update(z, h, n)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, [0.72, 0.62, 0.46, -0.70], atol=1e-6)
    z64, h64, n64 = Z_B.copy(), H_PREV_B.copy(), H_TILDE_B.copy()
    out = hidden_state_update(z64, h64, n64)
    for a in (z64, h64, n64):
        assert not np.shares_memory(out, a)
    np.testing.assert_array_equal(z64, Z_B)
    np.testing.assert_array_equal(h64, H_PREV_B)
    np.testing.assert_array_equal(n64, H_TILDE_B)


def test_hidden_state_update_accepts_python_lists():
    np.testing.assert_allclose(hidden_state_update([0.8, 0.2, 0.6, 0.1], [1.0, -0.5, 0.3, 2.0], [-0.4, 0.9, 0.7, -1.0]),
                               [0.72, 0.62, 0.46, -0.70], atol=1e-15)


@pytest.mark.parametrize(
    "z, h, n, match",
    [
        (np.full(4, 0.5), np.zeros(3), np.zeros(4), r"^h_prev must have the same shape as z_t \(4,\); got \(3,\)"),
        (np.full(4, 0.5), np.zeros(4), np.zeros(3), r"^h_tilde must have the same shape as z_t \(4,\); got \(3,\)"),
        (np.full((2, 4), 0.5), np.zeros(4), np.zeros((2, 4)), r"^h_prev must have the same shape as z_t \(2, 4\); got \(4,\)"),
        (np.full((2, 4), 0.5), np.zeros((1, 4)), np.zeros((2, 4)), r"^h_prev must have the same shape.*never broadcast"),
        (np.full((1, 4), 0.5), np.zeros((2, 4)), np.zeros((2, 4)), r"^h_prev must have the same shape as z_t \(1, 4\)"),
        (np.full((2, 2, 4), 0.5), np.zeros((2, 2, 4)), np.zeros((2, 2, 4)), r"^z_t must have shape \(H,\) or \(N, H\); got \(2, 2, 4\)"),
        (np.float64(0.5), np.float64(0.0), np.float64(0.0), r"^z_t must have shape \(H,\) or \(N, H\); got \(\)"),
        (np.array([0.5, 1.5]), np.zeros(2), np.zeros(2), r"^z_t must lie in \[0, 1\].*1.5"),
        (np.array([0.5, -0.1]), np.zeros(2), np.zeros(2), r"^z_t must lie in \[0, 1\].*-0.1"),
        (np.array([0.5, np.nan]), np.zeros(2), np.zeros(2), r"^z_t must be finite; got 1 NaN or Inf"),
        (np.array([0.5, 0.5]), np.array([np.inf, 0.0]), np.zeros(2), r"^h_prev must be finite; got 1 NaN or Inf"),
        (np.array([0.5, 0.5]), np.zeros(2), np.array([np.nan, -np.inf]), r"^h_tilde must be finite; got 2 NaN or Inf"),
    ],
)
def test_hidden_state_update_value_errors(z, h, n, match):
    with pytest.raises(ValueError, match=match):
        hidden_state_update(z, h, n)


@pytest.mark.parametrize(
    "args, match",
    [
        ((np.array([1, 0]) == 1, np.zeros(2), np.zeros(2)), r"^z_t must be a floating-point array.*got dtype bool"),
        ((np.full(2, 0.5), np.array([True, False]), np.zeros(2)), r"^h_prev must be a floating-point array.*got dtype bool"),
        ((np.full(2, 0.5), np.zeros(2), np.array([0.1, None], dtype=object)), r"^h_tilde must be a floating-point array.*got dtype object"),
        ((np.full(2, 0.5), np.zeros(2), np.zeros(2, dtype=complex)), r"^h_tilde must be a floating-point array"),
    ],
)
def test_hidden_state_update_type_errors(args, match):
    with pytest.raises(TypeError, match=match):
        hidden_state_update(*args)


def _flush(v: float) -> float:
    return 0.0 if abs(v) < 1e-100 else v


@settings(max_examples=40, deadline=None)
@given(data=st.data(), shape=st.sampled_from([(1,), (4,), (2, 3), (3, 1)]))
def test_hidden_state_update_is_a_convex_blend(data, shape):
    """h_t lies between h_prev and h_tilde in every entry (up to rounding), for every gate in [0, 1]."""
    # magnitudes below 1e-100 are flushed to 0: their products underflow, and under
    # np.seterr(all="raise") that is an error in any formula, not a property of the blend
    z = data.draw(hnp.arrays(np.float64, shape, elements=gates01.map(_flush)))
    h = data.draw(hnp.arrays(np.float64, shape, elements=finite_floats().map(_flush)))
    n = data.draw(hnp.arrays(np.float64, shape, elements=finite_floats().map(_flush)))
    out = hidden_state_update(z, h, n)
    lo, hi = np.minimum(h, n), np.maximum(h, n)
    tol = 4 * np.finfo(np.float64).eps * np.maximum(np.abs(h), np.abs(n))
    assert np.all(out >= lo - tol) and np.all(out <= hi + tol)
    np.testing.assert_allclose(out, z * h + (1 - z) * n, rtol=1e-12, atol=1e-9)


# ---------------------------------------------------------------------------- GRU and LSTM steps


def _gru_params(rng, D, H, scale=1.0):
    p = {}
    for g in "zrh":
        p[f"W_{g}"] = scale * rng.standard_normal((D, H))
        p[f"U_{g}"] = scale * rng.standard_normal((H, H))
        p[f"b_{g}"] = scale * rng.standard_normal(H)
    return p


def _lstm_params(rng, D, H, scale=1.0):
    p = {}
    for g in "ifgo":
        p[f"W_{g}"] = scale * rng.standard_normal((D, H))
        p[f"U_{g}"] = scale * rng.standard_normal((H, H))
        p[f"b_{g}"] = scale * rng.standard_normal(H)
    return p


def _sig(a):
    return 1.0 / (1.0 + np.exp(-a))


def test_gates_and_candidate_are_the_cho_equations():
    rng = np.random.default_rng(0)
    D, H, N = 3, 4, 2
    p = _gru_params(rng, D, H)
    x, h = rng.standard_normal((N, D)), rng.standard_normal((N, H))
    z = update_gate(x, h, p["W_z"], p["U_z"], p["b_z"])
    r = reset_gate(x, h, p["W_r"], p["U_r"], p["b_r"])
    np.testing.assert_allclose(z, _sig(x @ p["W_z"] + h @ p["U_z"] + p["b_z"]), rtol=1e-14)
    np.testing.assert_allclose(r, _sig(x @ p["W_r"] + h @ p["U_r"] + p["b_r"]), rtol=1e-14)
    n = candidate(x, h, r, p["W_h"], p["U_h"], p["b_h"])
    # reset applied to h BEFORE the recurrent matmul (Cho et al. 2014, Eq. 8)
    np.testing.assert_allclose(n, np.tanh(x @ p["W_h"] + (r * h) @ p["U_h"] + p["b_h"]), rtol=1e-14)
    # ... which differs from the reset-after form r * (h U_h)
    assert not np.allclose(n, np.tanh(x @ p["W_h"] + r * (h @ p["U_h"]) + p["b_h"]))
    out = gru_step(x, h, p)
    np.testing.assert_allclose(out, z * h + (1 - z) * n, rtol=1e-14, atol=1e-15)


def test_gru_reset_gate_zero_ignores_the_previous_state():
    rng = np.random.default_rng(1)
    p = _gru_params(rng, 2, 3)
    x, h = rng.standard_normal((2, 2)), rng.standard_normal((2, 3))
    n = candidate(x, h, np.zeros((2, 3)), p["W_h"], p["U_h"], p["b_h"])
    np.testing.assert_allclose(n, np.tanh(x @ p["W_h"] + p["b_h"]), rtol=1e-15)


@settings(max_examples=25, deadline=None)
@given(seed=seeds, D=st.integers(1, 4), H=st.integers(1, 4), N=st.integers(1, 3), scale=st.sampled_from([0.1, 1.0, 5.0]))
def test_gru_step_lies_between_previous_state_and_candidate(seed, D, H, N, scale):
    rng = np.random.default_rng(seed)
    p = _gru_params(rng, D, H, scale)
    x, h = rng.standard_normal((N, D)), 3.0 * rng.standard_normal((N, H))
    r = reset_gate(x, h, p["W_r"], p["U_r"], p["b_r"])
    n = candidate(x, h, r, p["W_h"], p["U_h"], p["b_h"])
    out = gru_step(x, h, p)
    tol = 1e-12
    assert np.all(out >= np.minimum(h, n) - tol) and np.all(out <= np.maximum(h, n) + tol)
    assert np.all(np.abs(n) <= 1.0)


def test_lstm_step_is_the_hochreiter_equations():
    rng = np.random.default_rng(2)
    D, H, N = 3, 4, 2
    p = _lstm_params(rng, D, H)
    x, h, c = rng.standard_normal((N, D)), rng.standard_normal((N, H)), rng.standard_normal((N, H))
    pre = {g: x @ p[f"W_{g}"] + h @ p[f"U_{g}"] + p[f"b_{g}"] for g in "ifgo"}
    c_want = _sig(pre["f"]) * c + _sig(pre["i"]) * np.tanh(pre["g"])
    h_want = _sig(pre["o"]) * np.tanh(c_want)
    h_t, c_t = lstm_step(x, h, c, p)
    np.testing.assert_allclose(c_t, c_want, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(h_t, h_want, rtol=1e-13, atol=1e-15)


def test_lstm_step_with_forget_one_and_input_zero_keeps_the_cell():
    """f = 1, i = 0 (saturated gates): c_t == c_{t-1} exactly, and h_t = o * tanh(c_{t-1})."""
    rng = np.random.default_rng(3)
    D, H, N = 3, 4, 2
    p = _lstm_params(rng, D, H)
    p["b_f"] = np.full(H, 1000.0)
    p["b_i"] = np.full(H, -1000.0)
    x, h, c = rng.standard_normal((N, D)), rng.standard_normal((N, H)), 5 * rng.standard_normal((N, H))
    h_t, c_t = lstm_step(x, h, c, p)
    np.testing.assert_array_equal(c_t, c)
    o = _sig(x @ p["W_o"] + h @ p["U_o"] + p["b_o"])
    np.testing.assert_allclose(h_t, o * np.tanh(c), rtol=1e-14)


def test_elman_state_is_bounded_by_one():
    rng = np.random.default_rng(4)
    W, U, b = 10 * rng.standard_normal((3, 5)), 10 * rng.standard_normal((5, 5)), rng.standard_normal(5)
    h = np.zeros((4, 5))
    for _ in range(50):
        h = elman_step(rng.standard_normal((4, 3)), h, W, U, b)
        assert np.all(np.abs(h) <= 1.0)


# ---------------------------------------------------------------------------- seeds == cells


def test_elman_step_agrees_with_rnn_cell():
    """Row-vector form x @ W_xh (D, H) == torch layout W_ih (H, D) applied as W_ih x."""
    rng = np.random.default_rng(5)
    D, H, N = 3, 4, 2
    W, U, b = rng.standard_normal((D, H)), rng.standard_normal((H, H)), rng.standard_normal(H)
    cell = hs.RNNCell(D, H, rng=rng)
    split = rng.uniform(size=H)
    cell.params.update(weight_ih=W.T.copy(), weight_hh=U.T.copy(), bias_ih=split * b, bias_hh=(1 - split) * b)
    x, h = rng.standard_normal((N, D)), rng.standard_normal((N, H))
    np.testing.assert_allclose(cell(x, h), elman_step(x, h, W, U, b), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(cell(x[0], h[0]), elman_step(x[0], h[0], W, U, b), rtol=1e-13, atol=1e-15)


def _gru_cell_from_seed(p, D, H, rng):
    """GRUCell(reset_after=False) with the seed's weights: rows r, z, n = transposed W_r, W_z, W_h."""
    cell = hs.GRUCell(D, H, reset_after=False, rng=rng)
    split = rng.uniform(size=3 * H)  # any split of the bias between b_ih and b_hh is the same map
    b = np.concatenate([p["b_r"], p["b_z"], p["b_h"]])
    cell.params.update(
        weight_ih=np.concatenate([p["W_r"].T, p["W_z"].T, p["W_h"].T]),
        weight_hh=np.concatenate([p["U_r"].T, p["U_z"].T, p["U_h"].T]),
        bias_ih=split * b,
        bias_hh=(1 - split) * b,
    )
    return cell


@settings(max_examples=15, deadline=None)
@given(seed=seeds, D=st.integers(1, 4), H=st.integers(1, 4), N=st.integers(1, 3))
def test_gru_step_agrees_with_gru_cell_cho_form(seed, D, H, N):
    rng = np.random.default_rng(seed)
    p = _gru_params(rng, D, H)
    cell = _gru_cell_from_seed(p, D, H, rng)
    x, h = rng.standard_normal((N, D)), rng.standard_normal((N, H))
    np.testing.assert_allclose(cell(x, h), gru_step(x, h, p), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(cell(x[0], h[0]), gru_step(x[0], h[0], p), rtol=1e-12, atol=1e-14)


def test_gru_step_differs_from_the_reset_after_cell():
    rng = np.random.default_rng(6)
    D, H = 3, 4
    p = _gru_params(rng, D, H)
    cell = _gru_cell_from_seed(p, D, H, rng)
    after = hs.GRUCell(D, H, reset_after=True, rng=rng)
    after.params = {k: v.copy() for k, v in cell.params.items()}
    x, h = rng.standard_normal((2, D)), rng.standard_normal((2, H))
    assert not np.allclose(after(x, h), gru_step(x, h, p))


@settings(max_examples=15, deadline=None)
@given(seed=seeds, D=st.integers(1, 4), H=st.integers(1, 4), N=st.integers(1, 3))
def test_lstm_step_agrees_with_lstm_cell(seed, D, H, N):
    rng = np.random.default_rng(seed)
    p = _lstm_params(rng, D, H)
    cell = hs.LSTMCell(D, H, rng=rng)
    cell.params.update(
        weight_ih=np.concatenate([p[f"W_{g}"].T for g in "ifgo"]),
        weight_hh=np.concatenate([p[f"U_{g}"].T for g in "ifgo"]),
        bias_ih=np.concatenate([p[f"b_{g}"] for g in "ifgo"]),
        bias_hh=np.zeros(4 * H),
    )
    x, h, c = rng.standard_normal((N, D)), rng.standard_normal((N, H)), rng.standard_normal((N, H))
    h_c, c_c = cell(x, (h, c))
    h_s, c_s = lstm_step(x, h, c, p)
    np.testing.assert_allclose(h_c, h_s, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(c_c, c_s, rtol=1e-12, atol=1e-14)


def test_seed_a_through_the_torch_layout_cell():
    cell = make_cell("rnn_tanh", 2, 3)
    cell.params.update(weight_ih=W_XH.T.copy(), weight_hh=W_HH.T.copy(), bias_ih=B.copy(), bias_hh=np.zeros(3))
    np.testing.assert_allclose(cell(X1, init_hidden(2, 3)), np.tanh(PRE), rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------- step errors


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: elman_step(np.zeros((2, 3)), np.zeros((2, 3)), W_XH, W_HH, B), ValueError, r"^x_t must have last dimension D=2; got \(2, 3\)"),
        (lambda: elman_step(X1, np.zeros((2, 4)), W_XH, W_HH, B), ValueError, r"^h_prev must have last dimension H=3; got \(2, 4\)"),
        (lambda: elman_step(X1, np.zeros(3), W_XH, W_HH, B), ValueError, r"^x_t and h_prev must both be single examples or both batches"),
        (lambda: elman_step(X1, np.zeros((3, 3)), W_XH, W_HH, B), ValueError, r"^x_t and h_prev must both be .* got x_t \(2, 2\) and h_prev \(3, 3\)"),
        (lambda: elman_step(X1, np.zeros((2, 3)), W_XH, np.zeros((3, 2)), B), ValueError, r"^W_hh must have shape \(H, H\)=\(3, 3\); got \(3, 2\)"),
        (lambda: elman_step(X1, np.zeros((2, 3)), W_XH[0], W_HH, B), ValueError, r"^W_xh must have shape \(D, H\); got \(3,\)"),
        (lambda: elman_step(X1, np.zeros((2, 3)), W_XH, W_HH, np.zeros(4)), ValueError, r"^b must have shape \(H,\)=\(3,\); got \(4,\)"),
        (lambda: elman_step(X1[None], np.zeros((1, 2, 3)), W_XH, W_HH, B), ValueError, r"^x_t must have shape \(D,\) or \(N, D\); got \(1, 2, 2\)"),
        (lambda: elman_step(np.array([[np.nan, 0.0]]), np.zeros((1, 3)), W_XH, W_HH, B), ValueError, r"^x_t must be finite"),
        (lambda: elman_step(X1.astype(complex), np.zeros((2, 3)), W_XH, W_HH, B), TypeError, r"^x_t must be a floating-point array"),
        (lambda: candidate(X1, np.zeros((2, 3)), np.zeros((2, 2)), W_XH, W_HH, B), ValueError, r"^r_t must have the shape of h_prev \(2, 3\); got \(2, 2\)"),
        (lambda: gru_step(X1, np.zeros((2, 3)), {"W_z": W_XH}), ValueError, r"^params is missing GRU key\(s\)"),
        (lambda: gru_step(X1, np.zeros((2, 3)), [W_XH]), TypeError, r"^params must be a mapping of GRU weights; got list"),
        (lambda: lstm_step(X1, np.zeros((2, 3)), np.zeros((2, 3)), {}), ValueError, r"^params is missing LSTM key\(s\)"),
        (lambda: lstm_step(X1, np.zeros((2, 3)), np.zeros((2, 2)), _lstm_params(np.random.default_rng(0), 2, 3)), ValueError, r"^c_prev must have the shape of h_prev \(2, 3\); got \(2, 2\)"),
    ],
)
def test_step_function_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
