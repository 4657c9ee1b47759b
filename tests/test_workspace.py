"""Reused work buffers (hiddenstate.core.workspace) and the kernels' small-batch paths.

The pool may hand a buffer out again only when nothing references it: outputs a caller kept,
caches a caller holds and views of either must survive every later call of the same shape.
The kernels' paths for one row (the LSTM's fused sigmoid and fused backward step) must give
torch's numbers and pass gradcheck like the general path.
"""
import gc

import numpy as np
import pytest

import hiddenstate
from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.core import workspace as ws
from hiddenstate.core.functional import previous_states
from tests._torch import require_torch

BIG = (8, 64, 128)  # 64 Ki elements: over MIN_BYTES in float32 and float64


def test_a_free_buffer_is_reused_and_a_held_one_is_not():
    ws.clear()
    a = ws.empty(BIG, np.float64)
    b = ws.empty(BIG, np.float64)
    addrs = {a.ctypes.data, b.ctypes.data}
    assert len(addrs) == 2  # a is still held when b is made
    del a, b
    c = ws.empty(BIG, np.float64)
    d = ws.empty(BIG, np.float64)
    assert c.shape == BIG and c.dtype == np.float64 and c.flags.c_contiguous
    assert {c.ctypes.data, d.ctypes.data} == addrs  # both reused, never the same one twice


@pytest.mark.parametrize("hold", ["view", "reshape", "memoryview", "list"])
def test_anything_that_references_a_buffer_keeps_it_out_of_reuse(hold):
    a = ws.empty(BIG, np.float32)
    a[...] = 7.0
    keeper = {"view": lambda b: b[1:], "reshape": lambda b: b.reshape(-1), "memoryview": memoryview,
              "list": lambda b: [b]}[hold](a)
    addr = a.ctypes.data
    del a
    gc.collect()
    others = [ws.empty(BIG, np.float32) for _ in range(3)]
    assert all(o.ctypes.data != addr for o in others)
    for o in others:
        o[...] = -1.0
    held = np.asarray(keeper[0] if hold == "list" else keeper)
    assert (held == 7.0).all()


def test_small_buffers_are_never_pooled_and_clear_releases_free_ones():
    small = ws.empty((4, 4), np.float64)
    assert small.nbytes < ws.MIN_BYTES
    kept = ws.empty((3, 64, 128), np.float64)
    free = ws.empty((5, 64, 128), np.float64)
    del free
    assert ws.idle_bytes() >= 5 * 64 * 128 * 8
    ws.clear()
    assert ws.idle_bytes() == 0
    kept[...] = 1.0  # a buffer in use stays valid through clear()
    again = ws.empty((3, 64, 128), np.float64)
    assert again.ctypes.data != kept.ctypes.data


def _layer(kind, dtype, I=16, H=128, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "rnn":
        return hiddenstate.RNN(I, H, dtype=dtype, rng=rng)
    if kind in ("gru", "gru-cho"):
        return hiddenstate.GRU(I, H, reset_after=(kind == "gru"), dtype=dtype, rng=rng)
    return hiddenstate.LSTM(I, H, dtype=dtype, rng=rng)


@pytest.mark.parametrize("kind", ["rnn", "gru", "gru-cho", "lstm"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_outputs_and_caches_survive_later_calls_of_the_same_shape(kind, dtype):
    """Call 1's output, h_n, cache, gradients and dx are unchanged by calls 2 and 3 (same shapes)."""
    T, N, I = 8, 64, 16
    layer = _layer(kind, dtype, I)
    rng = np.random.default_rng(1)
    x1, x2 = (rng.standard_normal((T, N, I)).astype(dtype) for _ in range(2))
    g1, g2 = (rng.standard_normal((T, N, layer.hidden_size)).astype(dtype) for _ in range(2))
    out1, hn1, cache1 = layer.forward(x1)
    saved_out, saved_hn = out1.copy(), np.copy(hn1[0] if kind == "lstm" else hn1)
    grads1, dx1, _ = layer.backward(cache1, g1)
    saved_grads, saved_dx = {k: v.copy() for k, v in grads1.items()}, dx1.copy()
    for _ in range(2):  # other calls of the same shape, their results dropped at once
        _, _, c2 = layer.forward(x2)
        layer.backward(c2, g2)
        del c2
        gc.collect()
    np.testing.assert_array_equal(out1, saved_out)
    np.testing.assert_array_equal(hn1[0] if kind == "lstm" else hn1, saved_hn)
    np.testing.assert_array_equal(dx1, saved_dx)
    for k in grads1:
        np.testing.assert_array_equal(grads1[k], saved_grads[k])
    grads1b, dx1b, _ = layer.backward(cache1, g1)  # the held cache still gives the same gradients
    np.testing.assert_array_equal(dx1b, saved_dx)
    for k in grads1:
        np.testing.assert_array_equal(grads1b[k], saved_grads[k])
    # and the same numbers as a layer that never shared a pool with anything: a fresh copy
    ws.clear()
    fresh = _layer(kind, dtype, I)
    out_f, _, cache_f = fresh.forward(x1)
    grads_f, dx_f, _ = fresh.backward(cache_f, g1)
    np.testing.assert_array_equal(out_f, saved_out)
    np.testing.assert_array_equal(dx_f, saved_dx)


def test_a_trace_record_survives_later_calls():
    """probe-style records are views into the cache: they keep its buffers too."""
    layer = _layer("gru", np.float64)
    x = np.random.default_rng(2).standard_normal((8, 64, 16))
    _, _, cache = layer.forward(x, training=False)
    rec = layer.kind.recorded(cache.directions[0].kernel)
    z = rec.gates["z"].copy()
    del cache
    gc.collect()
    for _ in range(2):
        layer.forward(-x)
    np.testing.assert_array_equal(rec.gates["z"], z)


def test_previous_states_shifts_and_resets():
    seq = np.arange(24.0).reshape(4, 2, 3)
    first = -np.ones((2, 3))
    out = previous_states(seq, first, None, np.empty_like(seq))
    np.testing.assert_array_equal(out[0], first)
    np.testing.assert_array_equal(out[1:], seq[:-1])
    reset = np.zeros((4, 2, 1), dtype=bool)
    reset[2, 1] = True
    out = previous_states(seq, first, reset, np.empty_like(seq))
    np.testing.assert_array_equal(out[2, 1], first[1])
    np.testing.assert_array_equal(out[2, 0], seq[1, 0])
    np.testing.assert_array_equal(out[3], seq[2])
    assert previous_states(seq[:0], first, None, np.empty((0, 2, 3))).shape == (0, 2, 3)


@pytest.mark.parametrize("N", [1, 3])
def test_lstm_small_batch_paths_match_torch(N):
    """N = 1 runs the fused sigmoid and the fused backward step; N = 3 the fused sigmoid only."""
    torch = require_torch()
    T, I, H = 30, 5, 7
    layer = _layer("lstm", np.float64, I, H, seed=3)
    ref = torch.nn.LSTM(I, H, dtype=torch.float64)
    ref.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in layer.params.items()})
    rng = np.random.default_rng(4)
    x = rng.standard_normal((T, N, I))
    h0, c0 = rng.standard_normal((1, N, H)), rng.standard_normal((1, N, H))
    g, gh, gc_ = rng.standard_normal((T, N, H)), rng.standard_normal((1, N, H)), rng.standard_normal((1, N, H))
    out, (hn, cn), cache = layer.forward(x, (h0, c0))
    grads, dx, (dh0, dc0) = layer.backward(cache, g, (gh, gc_))
    xt, h0t, c0t = (torch.tensor(a, requires_grad=True) for a in (x, h0, c0))
    ot, (hnt, cnt) = ref(xt, (h0t, c0t))
    ((ot * torch.from_numpy(g)).sum() + (hnt * torch.from_numpy(gh)).sum() + (cnt * torch.from_numpy(gc_)).sum()).backward()
    tol = dict(rtol=0, atol=1e-12)
    np.testing.assert_allclose(out, ot.detach().numpy(), **tol)
    np.testing.assert_allclose(hn, hnt.detach().numpy(), **tol)
    np.testing.assert_allclose(cn, cnt.detach().numpy(), **tol)
    np.testing.assert_allclose(dx, xt.grad.numpy(), **tol)
    np.testing.assert_allclose(dh0, h0t.grad.numpy(), **tol)
    np.testing.assert_allclose(dc0, c0t.grad.numpy(), **tol)
    for name, p in ref.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=0, atol=1e-11)


def test_lstm_one_row_path_passes_gradcheck():
    T, I, H = 6, 3, 4
    layer = _layer("lstm", np.float64, I, H, seed=5)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((T, 1, I))
    w = rng.standard_normal((T, 1, H))
    _, _, cache = layer.forward(x)
    grads, dx, _ = layer.backward(cache, w)

    def loss():
        return float((layer.forward(x)[0] * w).sum())

    check_grads(loss, {**layer.params, "x": x}, {**grads, "x": dx}, rtol=1e-6)


def test_lstm_one_row_equals_the_general_path():
    """The same row alone (N = 1, fused) and inside a padded batch (general path): same numbers."""
    T, I, H = 12, 4, 6
    layer = _layer("lstm", np.float64, I, H, seed=7)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((T, 2, I))
    g = rng.standard_normal((T, 2, H))
    _, _, c1 = layer.forward(x[:, :1])
    grads1, dx1, _ = layer.backward(c1, g[:, :1])
    _, _, c2 = layer.forward(x, lengths=[T, T - 3])  # padding: the general backward loop
    _, dx2, _ = layer.backward(c2, g * np.array([1.0, 0.0])[None, :, None])
    np.testing.assert_allclose(dx1[:, 0], dx2[:, 0], rtol=0, atol=1e-13)



def test_gru_one_row_path_matches_torch_and_gradcheck():
    """N = 1 runs one (1, H) x (H, G*H) product per step: torch's GRU for reset_after, gradcheck for both."""
    torch = require_torch()
    T, I, H = 20, 4, 5
    rng = np.random.default_rng(9)
    layer = _layer("gru", np.float64, I, H, seed=10)
    ref = torch.nn.GRU(I, H, dtype=torch.float64)
    ref.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in layer.params.items()})
    x, g = rng.standard_normal((T, 1, I)), rng.standard_normal((T, 1, H))
    out, _, cache = layer.forward(x)
    grads, dx, _ = layer.backward(cache, g)
    xt = torch.tensor(x, requires_grad=True)
    ot = ref(xt)[0]
    (ot * torch.from_numpy(g)).sum().backward()
    np.testing.assert_allclose(out, ot.detach().numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=0, atol=1e-12)
    for name, p in ref.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy(), rtol=0, atol=1e-11)
    for kind in ("gru", "gru-cho"):
        layer = _layer(kind, np.float64, 3, 4, seed=11)
        x, w = rng.standard_normal((6, 1, 3)), rng.standard_normal((6, 1, 4))
        grads, dx, _ = layer.backward(layer.forward(x)[2], w)
        loss = lambda layer=layer, x=x, w=w: float((layer.forward(x)[0] * w).sum())
        check_grads(loss, {**layer.params, "x": x}, {**grads, "x": dx}, rtol=1e-6)
