"""RNNCell, GRUCell and LSTMCell: parameters, shapes, invariants, batch/row equivalences."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hiddenstate as hs
from tests.strategies import ALL_KINDS, GATES, KINDS, make_cell, seeds


def _sig(a):
    return 1.0 / (1.0 + np.exp(-a))


def _state(kind, rng, N, H, scale=0.5):
    shape = (N, H) if N is not None else (H,)
    if kind == "lstm":
        return scale * rng.standard_normal(shape), scale * rng.standard_normal(shape)
    return scale * rng.standard_normal(shape)


def _parts(s):
    return tuple(s) if isinstance(s, tuple) else (s,)


# ---------------------------------------------------------------------------- parameters


@pytest.mark.parametrize("kind", KINDS)
def test_parameters_have_torch_names_shapes_and_init(kind):
    I, H = 3, 16
    cell = make_cell(kind, I, H)
    G = GATES[kind]
    assert list(cell.params) == ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
    assert cell.params["weight_ih"].shape == (G * H, I)
    assert cell.params["weight_hh"].shape == (G * H, H)
    assert cell.params["bias_ih"].shape == cell.params["bias_hh"].shape == (G * H,)
    k = 1 / np.sqrt(H)
    for p in cell.params.values():
        assert p.dtype == np.float64 and p.flags.c_contiguous
        assert np.all(np.abs(p) <= k)
    w = cell.params["weight_hh"]
    assert w.max() > 0.8 * k and w.min() < -0.8 * k  # spread over the whole interval
    assert cell.num_gates == G and cell.input_size == I and cell.hidden_size == H


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_init_is_reproducible_from_the_generator(kind):
    a, b, c = make_cell(kind, 3, 4, seed=1), make_cell(kind, 3, 4, seed=1), make_cell(kind, 3, 4, seed=2)
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])
        assert not np.array_equal(a.params[k], c.params[k])


@pytest.mark.parametrize("kind", KINDS)
def test_no_bias(kind):
    cell = make_cell(kind, 3, 4, bias=False)
    assert set(cell.params) == {"weight_ih", "weight_hh"}
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3))
    out, cache = cell.forward(x, _state(kind, rng, 2, 4))
    grads, _, _ = cell.backward(cache, tuple(np.ones_like(s) for s in out) if kind == "lstm" else np.ones_like(out))
    assert set(grads) == {"weight_ih", "weight_hh"}


# ---------------------------------------------------------------------------- shapes and equivalences


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_forward_and_backward_shapes(kind):
    rng = np.random.default_rng(0)
    cell = make_cell(kind, 3, 4)
    x = rng.standard_normal((5, 3))
    h = _state(kind, rng, 5, 4)
    out, cache = cell.forward(x, h)
    for s in _parts(out):
        assert s.shape == (5, 4) and s.dtype == np.float64
    d_out = tuple(rng.standard_normal((5, 4)) for _ in _parts(out))
    grads, dx, dh = cell.backward(cache, d_out if kind == "lstm" else d_out[0])
    assert set(grads) == set(cell.params)
    for k in grads:
        assert grads[k].shape == cell.params[k].shape
    assert dx.shape == (5, 3)
    for a, b in zip(_parts(dh), _parts(h)):
        assert a.shape == b.shape


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_none_state_means_zeros(kind):
    rng = np.random.default_rng(1)
    cell = make_cell(kind, 3, 4)
    x = rng.standard_normal((2, 3))
    zeros = (np.zeros((2, 4)), np.zeros((2, 4))) if kind == "lstm" else np.zeros((2, 4))
    for a, b in zip(_parts(cell(x)), _parts(cell(x, zeros))):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_unbatched_equals_batch_of_one(kind):
    rng = np.random.default_rng(2)
    cell = make_cell(kind, 3, 4)
    x = rng.standard_normal(3)
    h = _state(kind, rng, None, 4)
    out1, c1 = cell.forward(x, h)
    hb = tuple(s[None] for s in h) if kind == "lstm" else h[None]
    outb, cb = cell.forward(x[None], hb)
    for a, b in zip(_parts(out1), _parts(outb)):
        assert a.shape == (4,)
        np.testing.assert_allclose(a, b[0], rtol=0, atol=1e-15)
    d = tuple(rng.standard_normal(4) for _ in _parts(out1))
    g1, dx1, dh1 = cell.backward(c1, d if kind == "lstm" else d[0])
    db = tuple(v[None] for v in d)
    gb, dxb, dhb = cell.backward(cb, db if kind == "lstm" else db[0])
    assert dx1.shape == (3,)
    np.testing.assert_allclose(dx1, dxb[0], rtol=0, atol=1e-15)
    for a, b in zip(_parts(dh1), _parts(dhb)):
        assert a.shape == (4,)
        np.testing.assert_allclose(a, b[0], rtol=0, atol=1e-15)
    for k in g1:
        np.testing.assert_allclose(g1[k], gb[k], rtol=0, atol=1e-15)


@settings(max_examples=10, deadline=None)
@given(kind=st.sampled_from(ALL_KINDS), seed=seeds, N=st.integers(2, 4), I=st.integers(1, 4), H=st.integers(1, 4))
def test_batch_equals_rows_one_by_one(kind, seed, N, I, H):
    """Rows never mix: each row of a batch gives what it gives alone; gradients add over rows."""
    rng = np.random.default_rng(seed)
    cell = make_cell(kind, I, H, seed=seed)
    x = rng.standard_normal((N, I))
    h = _state(kind, rng, N, H)
    out, cache = cell.forward(x, h)
    d = tuple(rng.standard_normal((N, H)) for _ in _parts(out))
    grads, dx, dh = cell.backward(cache, d if kind == "lstm" else d[0])
    total = {k: np.zeros_like(v) for k, v in grads.items()}
    for n in range(N):
        hn = tuple(s[n:n + 1] for s in h) if kind == "lstm" else h[n:n + 1]
        o, c = cell.forward(x[n:n + 1], hn)
        for a, b in zip(_parts(o), _parts(out)):
            np.testing.assert_allclose(a[0], b[n], rtol=1e-13, atol=1e-15)
        dn = tuple(v[n:n + 1] for v in d)
        g, dxn, dhn = cell.backward(c, dn if kind == "lstm" else dn[0])
        np.testing.assert_allclose(dxn[0], dx[n], rtol=1e-13, atol=1e-15)
        for a, b in zip(_parts(dhn), _parts(dh)):
            np.testing.assert_allclose(a[0], b[n], rtol=1e-13, atol=1e-15)
        for k in g:
            total[k] += g[k]
    for k in grads:
        np.testing.assert_allclose(total[k], grads[k], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_forward_does_not_modify_its_inputs(kind):
    rng = np.random.default_rng(3)
    cell = make_cell(kind, 3, 4)
    x = rng.standard_normal((2, 3))
    h = _state(kind, rng, 2, 4)
    saved = [a.copy() for a in (x, *_parts(h))]
    params = {k: v.copy() for k, v in cell.params.items()}
    out, cache = cell.forward(x, h)
    cell.backward(cache, tuple(np.ones((2, 4)) for _ in _parts(out)) if kind == "lstm" else np.ones((2, 4)))
    for a, b in zip(saved, (x, *_parts(h))):
        np.testing.assert_array_equal(a, b)
    for k in params:
        np.testing.assert_array_equal(params[k], cell.params[k])
    for s in _parts(out):
        for a in _parts(h):
            assert not np.shares_memory(s, a)


# ---------------------------------------------------------------------------- invariants


def test_rnn_tanh_state_is_bounded_and_relu_state_nonnegative():
    rng = np.random.default_rng(4)
    tanh_cell = make_cell("rnn_tanh", 3, 6)
    relu_cell = make_cell("rnn_relu", 3, 6)
    for c in (tanh_cell, relu_cell):
        for k in c.params:
            c.params[k] *= 20.0
    h_t = h_r = np.zeros((4, 6))
    for _ in range(30):
        x = rng.standard_normal((4, 3))
        h_t = tanh_cell(x, h_t)
        h_r = relu_cell(x, h_r * 0.01)
        assert np.all(np.abs(h_t) <= 1.0)
        assert np.all(h_r >= 0.0)


def _gru_candidate(cell, x, h):
    """The candidate n of a GRUCell, from its parameters (torch layout, gate rows r, z, n)."""
    p = cell.params
    H = cell.hidden_size
    gi = x @ p["weight_ih"].T + p["bias_ih"]
    w_hh, b_hh = p["weight_hh"], p["bias_hh"]
    r = _sig(gi[:, :H] + h @ w_hh[:H].T + b_hh[:H])
    if cell.reset_after:
        return np.tanh(gi[:, 2 * H:] + r * (h @ w_hh[2 * H:].T + b_hh[2 * H:]))
    return np.tanh(gi[:, 2 * H:] + (r * h) @ w_hh[2 * H:].T + b_hh[2 * H:])


@settings(max_examples=20, deadline=None)
@given(seed=seeds, reset_after=st.booleans(), N=st.integers(1, 3), I=st.integers(1, 4), H=st.integers(1, 4),
       scale=st.sampled_from([1.0, 10.0]))
def test_gru_state_lies_between_previous_state_and_candidate(seed, reset_after, N, I, H, scale):
    rng = np.random.default_rng(seed)
    cell = make_cell("gru_after" if reset_after else "gru", I, H, seed=seed)
    for k in cell.params:
        cell.params[k] *= scale
    x = rng.standard_normal((N, I))
    h = 3.0 * rng.standard_normal((N, H))  # outside (-1, 1) too
    out = cell(x, h)
    n = _gru_candidate(cell, x, h)
    tol = 1e-12
    assert np.all(out >= np.minimum(h, n) - tol) and np.all(out <= np.maximum(h, n) + tol)
    # hence a state inside [-1, 1] stays inside, and a larger one never grows
    assert np.all(np.abs(out) <= np.maximum(np.abs(h), 1.0) + tol)


def test_gru_cell_forms_differ_and_match_their_equations():
    rng = np.random.default_rng(5)
    cho = make_cell("gru", 3, 4, seed=7)
    after = make_cell("gru_after", 3, 4, seed=7)
    x, h = rng.standard_normal((2, 3)), rng.standard_normal((2, 4))
    for cell in (cho, after):
        p, H = cell.params, 4
        gi = x @ p["weight_ih"].T + p["bias_ih"]
        gh = h @ p["weight_hh"].T + p["bias_hh"]
        z = _sig(gi[:, H:2 * H] + gh[:, H:2 * H])
        n = _gru_candidate(cell, x, h)
        np.testing.assert_allclose(cell(x, h), z * h + (1 - z) * n, rtol=1e-13, atol=1e-15)
    assert not np.allclose(cho(x, h), after(x, h))


def test_lstm_with_forget_one_and_input_zero_keeps_the_cell_state():
    rng = np.random.default_rng(6)
    H = 4
    cell = make_cell("lstm", 3, H)
    cell.params["bias_ih"][:H] = -1000.0  # i = 0
    cell.params["bias_ih"][H:2 * H] = 1000.0  # f = 1
    c = 5.0 * rng.standard_normal((2, H))
    h = rng.standard_normal((2, H))
    for _ in range(10):
        h, c_new = cell(rng.standard_normal((2, 3)), (h, c))
        np.testing.assert_array_equal(c_new, c)
        assert np.all(np.abs(h) <= np.abs(np.tanh(c)))  # h = o * tanh(c), o in (0, 1)
    # and no gradient leaks: dc_prev == dc, the gate pre-activations of i and f get ~0
    h0 = rng.standard_normal((2, H))
    (h1, c1), cache = cell.forward(rng.standard_normal((2, 3)), (h0, c))
    grads, dx, (dh, dc) = cell.backward(cache, (None, np.ones((2, H))))
    np.testing.assert_array_equal(dc, np.ones((2, H)))


def test_lstm_equations():
    rng = np.random.default_rng(7)
    H = 3
    cell = make_cell("lstm", 2, H)
    x, h, c = rng.standard_normal((4, 2)), rng.standard_normal((4, H)), rng.standard_normal((4, H))
    p = cell.params
    a = x @ p["weight_ih"].T + p["bias_ih"] + h @ p["weight_hh"].T + p["bias_hh"]
    i, f, g, o = _sig(a[:, :H]), _sig(a[:, H:2 * H]), np.tanh(a[:, 2 * H:3 * H]), _sig(a[:, 3 * H:])
    c_want = f * c + i * g
    h_new, c_new = cell(x, (h, c))
    np.testing.assert_allclose(c_new, c_want, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(h_new, o * np.tanh(c_want), rtol=1e-13, atol=1e-15)


# ---------------------------------------------------------------------------- float32


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_float32_cell_end_to_end(kind):
    rng = np.random.default_rng(8)
    c64 = make_cell(kind, 3, 4, seed=3)
    c32 = make_cell(kind, 3, 4, seed=3, dtype=np.float32)
    for k in c32.params:
        assert c32.params[k].dtype == np.float32
        np.testing.assert_array_equal(c32.params[k], c64.params[k].astype(np.float32))
        c64.params[k] = c32.params[k].astype(np.float64)
    x = rng.standard_normal((2, 3))
    h = _state(kind, rng, 2, 4)
    out32, cache32 = c32.forward(x, h)
    out64, cache64 = c64.forward(x, h)
    for a, b in zip(_parts(out32), _parts(out64)):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    d = tuple(np.ones((2, 4)) for _ in _parts(out32))
    g32, dx32, dh32 = c32.backward(cache32, d if kind == "lstm" else d[0])
    g64, dx64, dh64 = c64.backward(cache64, d if kind == "lstm" else d[0])
    assert dx32.dtype == np.float32
    np.testing.assert_allclose(dx32, dx64, rtol=1e-4, atol=1e-5)
    for a, b in zip(_parts(dh32), _parts(dh64)):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    for k in g32:
        assert g32[k].dtype == np.float32, k
        np.testing.assert_allclose(g32[k], g64[k], rtol=1e-4, atol=1e-5)


def test_cells_are_exported():
    for name in ("RNNCell", "GRUCell", "LSTMCell"):
        assert name in hs.__all__
