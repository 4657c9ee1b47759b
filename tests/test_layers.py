"""Sequence layers RNN, GRU, LSTM: equivalences that pin the unrolled computation down.

layer == loop of cells; batch == rows one by one; chunked run with carried state == one long
run; two stacked layers == two one-layer runs chained; T = 0 gives h_n == h0; unbatched ==
batch of one; lengths and reset masks == running the pieces separately.
"""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hiddenstate as hs
from tests.strategies import (
    ALL_KINDS,
    KINDS,
    cell_like,
    chunkings,
    make_layer,
    random_state,
    seeds,
    state_parts,
    take_rows,
)

TOL = {"rtol": 1e-12, "atol": 1e-14}


def ref_run(layer, x, h0):
    """Reference: the layer unrolled with cells, step by step. x (T, N, I) time-major."""
    T, N, _ = x.shape
    L, D, H = layer.num_layers, layer.num_directions, layer.hidden_size
    if h0 is None:
        h0 = tuple(np.zeros((L * D, N, H)) for _ in range(2)) if layer.is_lstm else np.zeros((L * D, N, H))
    inp = x
    finals = []
    for li in range(L):
        outs = []
        for d in range(D):
            cell = cell_like(layer, li, reverse=bool(d))
            k = li * D + d
            s = (h0[0][k], h0[1][k]) if layer.is_lstm else h0[k]
            out = np.zeros((T, N, H))
            for t in (range(T) if d == 0 else range(T - 1, -1, -1)):
                s = cell(inp[t], s)
                out[t] = s[0] if layer.is_lstm else s
            finals.append(s)
            outs.append(out)
        inp = np.concatenate(outs, axis=2)
    if layer.is_lstm:
        return inp, (np.stack([f[0] for f in finals]), np.stack([f[1] for f in finals]))
    return inp, np.stack(finals)


def assert_state_close(a, b, **tol):
    for u, v in zip(state_parts(a), state_parts(b)):
        assert u.shape == v.shape
        np.testing.assert_allclose(u, v, **(tol or TOL))


def d_like(state, rng):
    return tuple(rng.standard_normal(s.shape) for s in state) if isinstance(state, tuple) else rng.standard_normal(state.shape)


# ---------------------------------------------------------------------------- construction


@pytest.mark.parametrize("kind", KINDS)
def test_parameter_names_and_shapes_follow_torch(kind):
    layer = make_layer(kind, 3, 5, 2, bidirectional=True)
    G = layer.num_gates
    names = []
    for li in range(2):
        for sfx in ("", "_reverse"):
            names += [f"{w}_l{li}{sfx}" for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    assert list(layer.params) == names
    assert layer.params["weight_ih_l0"].shape == (G * 5, 3)
    assert layer.params["weight_ih_l1_reverse"].shape == (G * 5, 10)  # layer 1 reads D*H features
    assert layer.params["weight_hh_l1"].shape == (G * 5, 5)
    assert layer.params["bias_hh_l0_reverse"].shape == (G * 5,)
    k = 1 / np.sqrt(5)
    assert all(np.all(np.abs(p) <= k) for p in layer.params.values())
    assert (layer.num_layers, layer.num_directions, layer.hidden_size, layer.input_size) == (2, 2, 5, 3)


@pytest.mark.parametrize("kind", KINDS)
def test_state_dict_round_trip(kind):
    a = make_layer(kind, 3, 4, 2, seed=1)
    b = make_layer(kind, 3, 4, 2, seed=2)
    sd = a.state_dict()
    for k in sd:
        assert not np.shares_memory(sd[k], a.params[k])
    b.load_state_dict(sd)
    sd["weight_hh_l0"][...] = 0.0  # loading copies
    x = np.random.default_rng(0).standard_normal((4, 2, 3))
    assert_state_close(a(x)[0], b(x)[0], rtol=0, atol=0)


# ---------------------------------------------------------------------------- layer == loop of cells


@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("num_layers, bidirectional", [(1, False), (2, False), (1, True), (2, True)])
def test_layer_equals_loop_of_cells(kind, num_layers, bidirectional):
    rng = np.random.default_rng(0)
    layer = make_layer(kind, 3, 4, num_layers, bidirectional=bidirectional)
    x = rng.standard_normal((5, 2, 3))
    h0 = random_state(layer, 2, rng)
    out, h_n = layer(x, h0)
    ref_out, ref_hn = ref_run(layer, x, h0)
    np.testing.assert_allclose(out, ref_out, **TOL)
    assert_state_close(h_n, ref_hn)
    assert out.shape == (5, 2, layer.num_directions * 4)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_default_h0_is_zeros(kind):
    rng = np.random.default_rng(1)
    layer = make_layer(kind, 3, 4, 2)
    x = rng.standard_normal((4, 3, 3))
    zeros = tuple(np.zeros((2, 3, 4)) for _ in range(2)) if kind == "lstm" else np.zeros((2, 3, 4))
    a, b = layer(x), layer(x, zeros)
    np.testing.assert_array_equal(a[0], b[0])
    assert_state_close(a[1], b[1], rtol=0, atol=0)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_final_state_is_the_last_output(kind):
    rng = np.random.default_rng(2)
    layer = make_layer(kind, 3, 4, 2, bidirectional=True)
    out, h_n = layer(rng.standard_normal((6, 2, 3)))
    h = state_parts(h_n)[0]
    fwd, bwd = layer.split_directions(h)
    np.testing.assert_array_equal(out[-1, :, :4], fwd[-1])  # last layer, forward: state after the last step
    np.testing.assert_array_equal(out[0, :, 4:], bwd[-1])  # backward direction ends at t = 0
    np.testing.assert_array_equal(fwd, h[0::2])
    np.testing.assert_array_equal(bwd, h[1::2])
    uni = make_layer(kind, 3, 4, 2)
    _, h_uni = uni(rng.standard_normal((6, 2, 3)))
    split = uni.split_directions(state_parts(h_uni)[0])
    assert split.backward is None and split.forward.shape == (2, 2, 4)


# ---------------------------------------------------------------------------- batch == rows


@settings(max_examples=12, deadline=None)
@given(kind=st.sampled_from(ALL_KINDS), seed=seeds, bidirectional=st.booleans(), L=st.integers(1, 2), N=st.integers(2, 4))
def test_batch_equals_rows_one_by_one(kind, seed, bidirectional, L, N):
    rng = np.random.default_rng(seed)
    layer = make_layer(kind, 3, 3, L, bidirectional=bidirectional, seed=seed)
    x = rng.standard_normal((4, N, 3))
    h0 = random_state(layer, N, rng)
    out, h_n, cache = layer.forward(x, h0)
    d_out, d_hn = rng.standard_normal(out.shape), d_like(h_n, rng)
    grads, dx, dh0 = layer.backward(cache, d_out, d_hn)
    total = {k: np.zeros_like(v) for k, v in grads.items()}
    for n in range(N):
        o, hn, c = layer.forward(x[:, n:n + 1], take_rows(h0, slice(n, n + 1)))
        np.testing.assert_allclose(o[:, 0], out[:, n], **TOL)
        assert_state_close(take_rows(hn, 0), take_rows(h_n, n))
        g, dxn, dhn = layer.backward(c, d_out[:, n:n + 1], take_rows(d_hn, slice(n, n + 1)))
        np.testing.assert_allclose(dxn[:, 0], dx[:, n], **TOL)
        assert_state_close(take_rows(dhn, 0), take_rows(dh0, n))
        for k in g:
            total[k] += g[k]
    for k in grads:
        np.testing.assert_allclose(total[k], grads[k], rtol=1e-11, atol=1e-13)


# ---------------------------------------------------------------------------- chunked == whole


def _run_chunks(layer, x, h0, sizes):
    outs, state, t = [], h0, 0
    for s in sizes:
        o, state = layer(x[t:t + s], state)
        outs.append(o)
        t += s
    return np.concatenate(outs, axis=0), state


@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("chunk", [1, 3, 7, 12])
def test_chunked_run_with_carried_state_equals_one_long_run(kind, num_layers, chunk):
    rng = np.random.default_rng(3)
    T = 12
    layer = make_layer(kind, 3, 4, num_layers)
    x = rng.standard_normal((T, 2, 3))
    h0 = random_state(layer, 2, rng)
    whole_out, whole_hn = layer(x, h0)
    sizes = [chunk] * (T // chunk) + ([T % chunk] if T % chunk else [])
    out, hn = _run_chunks(layer, x, h0, sizes)
    np.testing.assert_allclose(out, whole_out, rtol=1e-13, atol=1e-15)
    assert_state_close(hn, whole_hn, rtol=1e-13, atol=1e-15)


@settings(max_examples=15, deadline=None)
@given(kind=st.sampled_from(ALL_KINDS), seed=seeds, L=st.integers(1, 2), T=st.integers(2, 10), data=st.data())
def test_chunked_equals_whole_property(kind, seed, L, T, data):
    sizes = data.draw(chunkings(T))
    rng = np.random.default_rng(seed)
    layer = make_layer(kind, 2, 3, L, seed=seed)
    x = rng.standard_normal((T, 2, 2))
    h0 = random_state(layer, 2, rng)
    whole_out, whole_hn = layer(x, h0)
    out, hn = _run_chunks(layer, x, h0, sizes)
    np.testing.assert_allclose(out, whole_out, rtol=1e-13, atol=1e-15)
    assert_state_close(hn, whole_hn, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_chunked_backward_chained_through_the_state_equals_full_bptt(kind):
    """Gradients of two chunks, chained by passing chunk 2's dh0 as chunk 1's d_h_n, equal full BPTT."""
    rng = np.random.default_rng(4)
    layer = make_layer(kind, 3, 4, 2)
    x = rng.standard_normal((9, 2, 3))
    h0 = random_state(layer, 2, rng)
    out, h_n, cache = layer.forward(x, h0)
    d_out, d_hn = rng.standard_normal(out.shape), d_like(h_n, rng)
    grads, dx, dh0 = layer.backward(cache, d_out, d_hn)
    o1, s1, c1 = layer.forward(x[:4], h0)
    o2, s2, c2 = layer.forward(x[4:], s1)
    g2, dx2, ds1 = layer.backward(c2, d_out[4:], d_hn)
    g1, dx1, dh0_1 = layer.backward(c1, d_out[:4], ds1)
    np.testing.assert_allclose(np.concatenate([dx1, dx2]), dx, **TOL)
    assert_state_close(dh0_1, dh0)
    for k in grads:
        np.testing.assert_allclose(g1[k] + g2[k], grads[k], rtol=1e-11, atol=1e-13)


# ---------------------------------------------------------------------------- stacked == chained


@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_two_stacked_layers_equal_two_one_layer_runs_chained(kind, bidirectional):
    rng = np.random.default_rng(5)
    D = 2 if bidirectional else 1
    stack = make_layer(kind, 3, 4, 2, bidirectional=bidirectional)
    first = make_layer(kind, 3, 4, 1, bidirectional=bidirectional, seed=9)
    second = make_layer(kind, 4 * D, 4, 1, bidirectional=bidirectional, seed=9)
    for k in first.params:
        first.params[k] = stack.params[k].copy()
        second.params[k] = stack.params[k.replace("_l0", "_l1")].copy()
    x = rng.standard_normal((5, 3, 3))
    h0 = random_state(stack, 3, rng)
    lower = tuple(s[:D] for s in h0) if kind == "lstm" else h0[:D]
    upper = tuple(s[D:] for s in h0) if kind == "lstm" else h0[D:]
    out, h_n, cache = stack.forward(x, h0)
    mid, hn1, c1 = first.forward(x, lower)
    top, hn2, c2 = second.forward(mid, upper)
    np.testing.assert_allclose(out, top, **TOL)
    chained = tuple(np.concatenate([a, b]) for a, b in zip(state_parts(hn1), state_parts(hn2)))
    assert_state_close(h_n, chained if kind == "lstm" else chained[0])
    # and the backward passes chain the same way
    d_out = rng.standard_normal(out.shape)
    grads, dx, _ = stack.backward(cache, d_out)
    g2, dmid, _ = second.backward(c2, d_out)
    g1, dx1, _ = first.backward(c1, dmid)
    np.testing.assert_allclose(dx1, dx, **TOL)
    for k in g1:
        np.testing.assert_allclose(g1[k], grads[k], **TOL)
        np.testing.assert_allclose(g2[k], grads[k.replace("_l0", "_l1")], **TOL)


# ---------------------------------------------------------------------------- T = 0, unbatched, batch_first


@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("num_layers, bidirectional", [(1, False), (2, True)])
def test_empty_sequence_returns_h0(kind, num_layers, bidirectional):
    """A sequence of length 0: output (0, N, D*H) and h_n == h0 (a copy); backward passes d_h_n through."""
    rng = np.random.default_rng(6)
    layer = make_layer(kind, 3, 4, num_layers, bidirectional=bidirectional)
    h0 = random_state(layer, 2, rng)
    x = np.zeros((0, 2, 3))
    out, h_n, cache = layer.forward(x, h0)
    assert out.shape == (0, 2, layer.num_directions * 4)
    assert_state_close(h_n, h0, rtol=0, atol=0)
    for a, b in zip(state_parts(h_n), state_parts(h0)):
        assert not np.shares_memory(a, b)
    d_hn = d_like(h_n, rng)
    grads, dx, dh0 = layer.backward(cache, np.zeros(out.shape), d_hn)
    assert dx.shape == x.shape
    assert_state_close(dh0, d_hn, rtol=0, atol=0)
    assert all(not g.any() for g in grads.values())


@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("num_layers, bidirectional", [(1, False), (2, True)])
def test_unbatched_equals_batch_of_one(kind, num_layers, bidirectional):
    rng = np.random.default_rng(7)
    layer = make_layer(kind, 3, 4, num_layers, bidirectional=bidirectional)
    x = rng.standard_normal((5, 3))
    h0 = random_state(layer, None, rng)  # (L*D, H)
    out, h_n, cache = layer.forward(x, h0)
    h0b = tuple(s[:, None] for s in h0) if kind == "lstm" else h0[:, None]
    outb, h_nb, cacheb = layer.forward(x[:, None], h0b)
    assert out.shape == (5, layer.num_directions * 4)
    np.testing.assert_allclose(out, outb[:, 0], rtol=0, atol=1e-15)
    assert_state_close(h_n, take_rows(h_nb, 0), rtol=0, atol=1e-15)
    d_out = rng.standard_normal(out.shape)
    d_hn = d_like(h_n, rng)
    g, dx, dh0 = layer.backward(cache, d_out, d_hn)
    d_hnb = tuple(s[:, None] for s in d_hn) if kind == "lstm" else d_hn[:, None]
    gb, dxb, dh0b = layer.backward(cacheb, d_out[:, None], d_hnb)
    assert dx.shape == x.shape
    np.testing.assert_allclose(dx, dxb[:, 0], rtol=0, atol=1e-15)
    assert_state_close(dh0, take_rows(dh0b, 0), rtol=0, atol=1e-15)
    for k in g:
        np.testing.assert_allclose(g[k], gb[k], rtol=0, atol=1e-15)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_batch_first_is_the_transpose(kind):
    rng = np.random.default_rng(8)
    tm = make_layer(kind, 3, 4, 2, bidirectional=True)
    bf = make_layer(kind, 3, 4, 2, bidirectional=True, batch_first=True)
    bf.load_state_dict(tm.state_dict())
    x = rng.standard_normal((5, 2, 3))
    h0 = random_state(tm, 2, rng)
    out, h_n, cache = tm.forward(x, h0)
    outb, h_nb, cacheb = bf.forward(x.transpose(1, 0, 2), h0)  # h0 stays (L*D, N, H), as in torch
    np.testing.assert_array_equal(outb, out.transpose(1, 0, 2))
    assert_state_close(h_nb, h_n, rtol=0, atol=0)
    d_out = rng.standard_normal(out.shape)
    g, dx, dh0 = tm.backward(cache, d_out)
    gb, dxb, dh0b = bf.backward(cacheb, d_out.transpose(1, 0, 2))
    np.testing.assert_array_equal(dxb, dx.transpose(1, 0, 2))
    assert_state_close(dh0b, dh0, rtol=0, atol=0)


# ---------------------------------------------------------------------------- lengths and reset


@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("num_layers, bidirectional", [(1, False), (2, True)])
def test_lengths_equal_running_each_row_alone(kind, num_layers, bidirectional):
    rng = np.random.default_rng(9)
    T = 6
    lengths = np.array([6, 2, 4, 1])
    N = len(lengths)
    layer = make_layer(kind, 3, 4, num_layers, bidirectional=bidirectional)
    x = rng.standard_normal((T, N, 3))
    h0 = random_state(layer, N, rng)
    out, h_n, cache = layer.forward(x, h0, lengths=lengths)
    d_out = rng.standard_normal(out.shape)
    grads, dx, dh0 = layer.backward(cache, d_out, d_like(h_n, rng))
    for n, ln in enumerate(lengths):
        o, hn = layer(x[:ln, n:n + 1], take_rows(h0, slice(n, n + 1)))
        np.testing.assert_allclose(out[:ln, n], o[:, 0], **TOL)
        np.testing.assert_array_equal(out[ln:, n], 0.0)  # padding outputs are zero
        assert_state_close(take_rows(h_n, n), take_rows(hn, 0))
        np.testing.assert_array_equal(dx[ln:, n], 0.0)  # padding never influences the loss


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_full_lengths_change_nothing_and_padding_values_do_not_matter(kind):
    rng = np.random.default_rng(10)
    layer = make_layer(kind, 3, 4, 2, bidirectional=True)
    x = rng.standard_normal((5, 3, 3))
    a = layer(x)
    b = layer(x, lengths=np.array([5, 5, 5]))
    np.testing.assert_array_equal(a[0], b[0])
    lengths = np.array([5, 3, 2])
    c = layer(x, lengths=lengths)
    x2 = x.copy()
    x2[3:, 1] = 1e3
    x2[2:, 2] = -7.0
    d = layer(x2, lengths=lengths)
    np.testing.assert_array_equal(c[0], d[0])
    assert_state_close(c[1], d[1], rtol=0, atol=0)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_length_zero_column_keeps_h0(kind):
    rng = np.random.default_rng(11)
    layer = make_layer(kind, 3, 4, 2, bidirectional=True)
    h0 = random_state(layer, 3, rng)
    out, h_n = layer(rng.standard_normal((4, 3, 3)), h0, lengths=np.array([4, 0, 2]))
    np.testing.assert_array_equal(out[:, 1], 0.0)
    assert_state_close(take_rows(h_n, 1), take_rows(h0, 1), rtol=0, atol=0)


@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("num_layers, bidirectional", [(1, False), (2, True)])
def test_reset_splits_the_sequence_into_independent_pieces(kind, num_layers, bidirectional):
    """reset[t, n] = True restarts column n at step t from h0: same as two separate runs."""
    rng = np.random.default_rng(12)
    T, N = 7, 3
    layer = make_layer(kind, 3, 4, num_layers, bidirectional=bidirectional)
    x = rng.standard_normal((T, N, 3))
    h0 = random_state(layer, N, rng)
    reset = np.zeros((T, N), dtype=bool)
    cut = {0: 3, 2: 5}  # column 1 is never reset
    for n, t in cut.items():
        reset[t, n] = True
    out, h_n = layer(x, h0, reset=reset)
    whole_out, whole_hn = layer(x, h0)
    np.testing.assert_allclose(out[:, 1], whole_out[:, 1], **TOL)
    assert_state_close(take_rows(h_n, 1), take_rows(whole_hn, 1))
    D = layer.num_directions
    for n, t in cut.items():
        hn0 = take_rows(h0, slice(n, n + 1))
        o1, s1 = layer(x[:t, n:n + 1], hn0)
        o2, s2 = layer(x[t:, n:n + 1], hn0)
        np.testing.assert_allclose(out[:t, n], o1[:, 0], **TOL)
        np.testing.assert_allclose(out[t:, n], o2[:, 0], **TOL)
        # forward directions end in piece 2, backward directions end in piece 1
        for got, p1, p2 in zip(state_parts(h_n), state_parts(s1), state_parts(s2)):
            for k in range(layer.num_layers * D):
                want = p2[k, 0] if k % D == 0 else p1[k, 0]
                np.testing.assert_allclose(got[k, n], want, **TOL)


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_reset_at_step_zero_changes_nothing(kind):
    rng = np.random.default_rng(13)
    layer = make_layer(kind, 3, 4)
    x = rng.standard_normal((4, 2, 3))
    h0 = random_state(layer, 2, rng)
    reset = np.zeros((4, 2), dtype=bool)
    reset[0] = True
    np.testing.assert_array_equal(layer(x, h0, reset=reset)[0], layer(x, h0)[0])


# ---------------------------------------------------------------------------- learned h0, dropout


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_learned_initial_state_gradient_is_the_batch_sum(kind):
    rng = np.random.default_rng(14)
    layer = make_layer(kind, 3, 4, 2, bidirectional=True, learn_h0=True)
    for k in ("h0", "c0"):
        if k in layer.params:
            layer.params[k][...] = rng.standard_normal(layer.params[k].shape)
    x = rng.standard_normal((5, 3, 3))
    out, h_n, cache = layer.forward(x)
    d_out, d_hn = rng.standard_normal(out.shape), d_like(h_n, rng)
    grads, dx, dh0 = layer.backward(cache, d_out, d_hn)
    explicit = layer.initial_state(3, "learned")
    out2, h_n2, cache2 = layer.forward(x, explicit)
    np.testing.assert_array_equal(out, out2)
    grads2, _, dh0_2 = layer.backward(cache2, d_out, d_hn)
    for part, key in zip(state_parts(dh0_2), ("h0", "c0")):
        np.testing.assert_allclose(grads[key], part.sum(axis=1), rtol=1e-13, atol=1e-15)
        assert not grads2[key].any()  # an explicit h0 is not the parameter


@pytest.mark.parametrize("kind", ["rnn_tanh", "gru", "lstm"])
def test_dropout_only_in_training_and_reproducible(kind):
    rng = np.random.default_rng(15)
    x = rng.standard_normal((5, 2, 3))
    plain = make_layer(kind, 3, 4, 2)
    drop = make_layer(kind, 3, 4, 2, dropout=0.5)
    drop.load_state_dict(plain.state_dict())
    np.testing.assert_array_equal(drop(x)[0], plain(x)[0])
    np.testing.assert_array_equal(drop.forward(x, training=False)[0], plain(x)[0])
    a = drop.forward(x, training=True, rng=np.random.default_rng(1))[0]
    b = drop.forward(x, training=True, rng=np.random.default_rng(1))[0]
    c = drop.forward(x, training=True, rng=np.random.default_rng(2))[0]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c) and not np.array_equal(a, plain(x)[0])
    one = make_layer(kind, 3, 4, 1, dropout=0.5)  # no layer in between: nothing to drop
    np.testing.assert_array_equal(one.forward(x, training=True)[0], one(x)[0])


@pytest.mark.parametrize("kind", KINDS)
def test_weight_drop_is_dropconnect_on_the_recurrent_weights(kind):
    # the same forward as a plain layer whose weight_hh were multiplied by the masks drawn by hand
    rng = np.random.default_rng(17)
    x = rng.standard_normal((6, 3, 4))
    layer = make_layer(kind, 4, 5, 2, bidirectional=True, weight_drop=0.4)
    np.testing.assert_array_equal(layer.forward(x, training=False)[0], layer(x)[0])
    out, h_n, _ = layer.forward(x, training=True, rng=np.random.default_rng(9))
    draw = np.random.default_rng(9)
    masked = make_layer(kind, 4, 5, 2, bidirectional=True)
    masked.load_state_dict(layer.state_dict())
    for sfx in ("_l0", "_l0_reverse", "_l1", "_l1_reverse"):  # the order the layer draws its masks
        w = masked.params["weight_hh" + sfx]
        w *= (draw.random(w.shape) >= 0.4) / 0.6
    expect, expect_hn = masked(x)
    np.testing.assert_allclose(out, expect, rtol=1e-13, atol=1e-15)
    for a, b in zip(state_parts(h_n), state_parts(expect_hn)):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
    assert not np.allclose(out, layer(x)[0])
    assert layer.params["weight_hh_l0"].all()  # the layer's own weights are untouched
    with pytest.raises(ValueError, match="weight_drop must be a number in \\[0, 1\\); got 1.0"):
        make_layer(kind, 4, 5, weight_drop=1.0)


# ---------------------------------------------------------------------------- inputs untouched, reverse_padded


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_forward_and_backward_leave_inputs_untouched(kind):
    rng = np.random.default_rng(16)
    layer = make_layer(kind, 3, 4, 2, bidirectional=True)
    x = rng.standard_normal((4, 2, 3))
    h0 = random_state(layer, 2, rng)
    saved = [a.copy() for a in (x, *state_parts(h0))]
    params = layer.state_dict()
    out, h_n, cache = layer.forward(x, h0)
    d_out = rng.standard_normal(out.shape)
    d_hn = d_like(h_n, rng)
    d_saved = [a.copy() for a in (d_out, *state_parts(d_hn))]
    first = layer.backward(cache, d_out, d_hn)
    second = layer.backward(cache, d_out, d_hn)  # the cache is not consumed
    for a, b in zip(saved, (x, *state_parts(h0))):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(d_saved, (d_out, *state_parts(d_hn))):
        np.testing.assert_array_equal(a, b)
    for k in first[0]:
        np.testing.assert_array_equal(first[0][k], second[0][k])
    np.testing.assert_array_equal(first[1], second[1])
    for k in params:
        np.testing.assert_array_equal(params[k], layer.params[k])
    for a in state_parts(h_n):
        for b in state_parts(h0):
            assert not np.shares_memory(a, b)


def test_reverse_padded_reverses_within_lengths_and_is_an_involution():
    x = np.arange(12.0).reshape(4, 3, 1)
    lengths = np.array([4, 2, 0])
    r = hs.reverse_padded(x, lengths)
    np.testing.assert_array_equal(r[:, 0, 0], x[::-1, 0, 0])
    np.testing.assert_array_equal(r[:, 1, 0], [x[1, 1, 0], x[0, 1, 0], x[2, 1, 0], x[3, 1, 0]])
    np.testing.assert_array_equal(r[:, 2], x[:, 2])
    np.testing.assert_array_equal(hs.reverse_padded(r, lengths), x)


@pytest.mark.parametrize("kind", ["rnn_tanh", "lstm"])
def test_backward_direction_equals_forward_cell_loop_over_the_reversed_rows(kind):
    rng = np.random.default_rng(17)
    layer = make_layer(kind, 2, 3, 1, bidirectional=True)
    lengths = np.array([5, 3])
    x = rng.standard_normal((5, 2, 2))
    out, _ = layer(x, lengths=lengths)
    cell = cell_like(layer, 0, reverse=True)
    xr = hs.reverse_padded(x, lengths)
    for n, ln in enumerate(lengths):
        s = None
        for t in range(ln):
            s = cell(xr[t, n:n + 1], s)
            h = s[0] if kind == "lstm" else s
            np.testing.assert_allclose(out[ln - 1 - t, n, 3:], h[0], **TOL)


# ---------------------------------------------------------------------------- float32 end to end


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_float32_end_to_end(kind):
    rng = np.random.default_rng(18)
    l32 = make_layer(kind, 3, 4, 2, bidirectional=True, dtype=np.float32, learn_h0=True)
    l64 = make_layer(kind, 3, 4, 2, bidirectional=True, learn_h0=True)
    l64.load_state_dict({k: v.astype(np.float64) for k, v in l32.params.items()})
    assert all(v.dtype == np.float32 for v in l32.params.values())
    x = rng.standard_normal((6, 2, 3)).astype(np.float32)
    out32, h32, c32 = l32.forward(x, lengths=np.array([6, 4]))
    out64, h64, c64 = l64.forward(x.astype(np.float64), lengths=np.array([6, 4]))
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, out64, rtol=1e-5, atol=1e-6)
    for a, b in zip(state_parts(h32), state_parts(h64)):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    d_out = rng.standard_normal(out32.shape).astype(np.float32)
    g32, dx32, dh32 = l32.backward(c32, d_out)
    g64, dx64, dh64 = l64.backward(c64, d_out.astype(np.float64))
    assert dx32.dtype == np.float32
    np.testing.assert_allclose(dx32, dx64, rtol=1e-4, atol=1e-5)
    for a in state_parts(dh32):
        assert a.dtype == np.float32
    for k in g32:
        assert g32[k].dtype == np.float32, k
        np.testing.assert_allclose(g32[k], g64[k], rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------- numerics


@pytest.mark.parametrize("kind", KINDS)
def test_long_saturated_sequence_stays_finite(kind):
    """5,000 steps with weights * 50 under np.seterr(all='raise'): no overflow, no NaN, bounded states."""
    rng = np.random.default_rng(19)
    layer = make_layer(kind, 4, 8)
    if kind != "rnn_relu":  # relu is unbounded: scaling it by 50 for 5,000 steps must overflow
        for k in layer.params:
            layer.params[k] *= 50.0
    x = rng.standard_normal((5000, 2, 4))
    out, h_n, cache = layer.forward(x)
    assert np.all(np.isfinite(out))
    if kind != "rnn_relu":
        assert np.all(np.abs(out) <= 1.0)
    grads, dx, dh0 = layer.backward(cache, rng.standard_normal(out.shape))
    assert all(np.all(np.isfinite(g)) for g in grads.values())
    assert np.all(np.isfinite(dx))


@settings(max_examples=20, deadline=None)
@given(kind=st.sampled_from(ALL_KINDS), seed=seeds, L=st.integers(1, 2), bidirectional=st.booleans(),
       batch_first=st.booleans(), T=st.integers(1, 6), N=st.integers(1, 3), p_reset=st.sampled_from([0.0, 0.3]))
def test_lengths_and_resets_equal_separate_runs_property(kind, seed, L, bidirectional, batch_first, T, N, p_reset):
    """Each row == its valid prefix cut at its reset points, every piece run alone from h0."""
    rng = np.random.default_rng(seed)
    layer = make_layer(kind, 2, 3, L, seed=seed, bidirectional=bidirectional)
    lengths = rng.integers(0, T + 1, size=N)
    reset = rng.random((T, N)) < p_reset
    x = rng.standard_normal((T, N, 2))
    h0 = random_state(layer, N, rng)
    if batch_first:
        bf = make_layer(kind, 2, 3, L, seed=seed, bidirectional=bidirectional, batch_first=True)
        out, h_n = bf(x.transpose(1, 0, 2), h0, lengths=lengths, reset=reset.T.copy())
        out = out.transpose(1, 0, 2)
    else:
        out, h_n = layer(x, h0, lengths=lengths, reset=reset)
    D = layer.num_directions
    for n in range(N):
        ln = lengths[n]
        h0n = take_rows(h0, slice(n, n + 1))
        np.testing.assert_array_equal(out[ln:, n], 0.0)
        if ln == 0:
            assert_state_close(take_rows(h_n, n), take_rows(h0n, 0), rtol=0, atol=0)
            continue
        cuts = [0, *[t for t in range(1, ln) if reset[t, n]], ln]
        pieces = [layer(x[a:b, n:n + 1], h0n) for a, b in itertools.pairwise(cuts)]
        for (a, b), (o, _) in zip(itertools.pairwise(cuts), pieces):
            np.testing.assert_allclose(out[a:b, n], o[:, 0], **TOL)
        first, last = state_parts(pieces[0][1]), state_parts(pieces[-1][1])
        for got, p1, p2 in zip(state_parts(h_n), first, last):
            for k in range(L * D):
                np.testing.assert_allclose(got[k, n], (p2 if k % D == 0 else p1)[k, 0], **TOL)


@pytest.mark.parametrize("kind", KINDS)
def test_load_state_dict_writes_into_the_existing_arrays(kind, rng):
    """Every alias of a parameter sees the loaded values (a CharRNN shares its layer's arrays)."""
    from hiddenstate.train.model import CharRNN

    cell = kind.split("_")[0]  # CharRNN's cell names: rnn, gru, lstm
    model = CharRNN(7, 5, cell=cell, rng=np.random.default_rng(0))
    before = {k: v for k, v in model.rnn.params.items()}
    new = {k: rng.normal(size=v.shape) for k, v in model.rnn.params.items()}
    model.rnn.load_state_dict(new)
    for k, v in new.items():
        assert model.rnn.params[k] is before[k]  # the same array object ...
        np.testing.assert_array_equal(model.params["rnn." + k], v.astype(model.dtype))  # ... seen through CharRNN
    ids = rng.integers(0, 7, size=(4, 2))
    fresh = CharRNN(7, 5, cell=cell, rng=np.random.default_rng(1))
    fresh.load_state_dict(model.state_dict())
    np.testing.assert_array_equal(model.forward(ids)[0], fresh.forward(ids)[0])


def test_load_state_dict_loads_nothing_when_one_entry_is_bad(rng):
    layer = hs.GRU(3, 4, rng=rng)
    saved = layer.state_dict()
    bad = {k: np.zeros_like(v) for k, v in saved.items()}
    bad["bias_hh_l0"] = np.full(12, np.nan)
    with pytest.raises(ValueError, match=r"state_dict\['bias_hh_l0'\] must be finite"):
        layer.load_state_dict(bad)
    for k, v in saved.items():
        np.testing.assert_array_equal(layer.params[k], v)


def test_lstm_learned_c0_gets_its_gradient_when_only_h0_is_given(rng):
    """h0=(h, None) with learn_h0=True starts c from the learned c0, so c0 must get the gradient."""
    lstm = hs.LSTM(3, 4, learn_h0=True, rng=rng)
    lstm.params["c0"][...] = rng.normal(size=lstm.params["c0"].shape)
    x = rng.normal(size=(5, 2, 3))
    h = rng.normal(size=(1, 2, 4))
    out, _, cache = lstm.forward(x, (h, None))
    grads, _, (dh0, dc0) = lstm.backward(cache, np.ones_like(out))
    # the same run with the learned c0 passed explicitly: its dc0 summed over the batch is d loss / d c0
    c_explicit = np.repeat(lstm.params["c0"][:, None, :], 2, axis=1)
    out2, _, cache2 = lstm.forward(x, (h, c_explicit))
    _, _, (dh0_2, dc0_2) = lstm.backward(cache2, np.ones_like(out2))
    np.testing.assert_array_equal(out, out2)
    np.testing.assert_allclose(grads["c0"], dc0_2.sum(axis=1), rtol=1e-12)
    np.testing.assert_array_equal(grads["h0"], 0.0)  # h was given, not learned
    assert np.abs(grads["c0"]).max() > 1e-3
