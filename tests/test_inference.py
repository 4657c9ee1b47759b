"""The forward pass that no backward follows (``forward(..., need_cache=False)``, ``layer(x)``).

It must give exactly the results of the forward that keeps its cache (the same operations in
the same order: the tests compare bit for bit), for every cell kind and every input feature
(padding, resets, both directions, stacked layers, batch_first, unbatched, no bias); torch is
the independent oracle of the values. Its outputs, like every other result, must survive
later calls of the same shape (hiddenstate.core.workspace reuses buffers only when nothing
references them).
"""
import itertools

import numpy as np
import pytest

import hiddenstate
from hiddenstate.core import workspace as ws
from hiddenstate.train import evaluate
from tests._torch import require_torch

KINDS = ["rnn-tanh", "rnn-relu", "rnn-sigmoid", "gru", "gru-cho", "lstm", "mingru", "minlstm"]


def make(kind, I, H, *, dtype=np.float64, seed=0, **kw):
    rng = np.random.default_rng(seed)
    if kind.startswith("rnn"):
        return hiddenstate.RNN(I, H, nonlinearity=kind.split("-")[1], dtype=dtype, rng=rng, **kw)
    if kind in ("gru", "gru-cho"):
        return hiddenstate.GRU(I, H, reset_after=(kind == "gru"), dtype=dtype, rng=rng, **kw)
    if kind == "lstm":
        return hiddenstate.LSTM(I, H, dtype=dtype, rng=rng, **kw)
    kw.pop("bias", None)
    return (hiddenstate.MinGRU if kind == "mingru" else hiddenstate.MinLSTM)(I, H, dtype=dtype, rng=rng, **kw)


def parts(h):
    return h if isinstance(h, tuple) else (h,)


def assert_same(a, b):
    out_a, h_a = a
    out_b, h_b = b
    np.testing.assert_array_equal(out_a, out_b)
    for x, y in zip(parts(h_a), parts(h_b), strict=True):
        np.testing.assert_array_equal(x, y)


LAYOUTS = ("plain", "ragged+reset", "bidirectional-2-layers", "batch_first", "no-bias", "unbatched")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("kind", "layout"), [(k, lay) for k in KINDS for lay in LAYOUTS
                                              if not (k.startswith("min") and lay == "no-bias")])  # no bias option
def test_no_cache_forward_is_bit_identical_to_the_cached_one(kind, dtype, layout):
    T, N, I, H = 9, 5, 3, 6
    kw = {"bidirectional-2-layers": {"bidirectional": True, "num_layers": 2}, "batch_first": {"batch_first": True},
          "no-bias": {"bias": False}}.get(layout, {})
    layer = make(kind, I, H, dtype=dtype, **kw)
    rng = np.random.default_rng(1)
    shape = (T, I) if layout == "unbatched" else (N, T, I) if layout == "batch_first" else (T, N, I)
    x = rng.standard_normal(shape).astype(dtype)
    opts = {}
    if layout == "ragged+reset":
        opts = {"lengths": np.array([9, 4, 0, 7, 1]), "reset": rng.random((T, N)) < 0.25}
    h0 = None
    if layout == "plain":  # a given initial state (LSTM: a pair)
        h0 = rng.standard_normal((1, N, H)).astype(dtype)
        h0 = (h0, 0.5 * h0) if layer.is_lstm else h0
    out, h_n, cache = layer.forward(x, h0, **opts)
    assert cache is not None
    lean_out, lean_h, none = layer.forward(x, h0, need_cache=False, **opts)
    assert none is None
    assert_same((lean_out, lean_h), (out, h_n))
    assert_same(layer(x, h0, **opts), (out, h_n))
    assert lean_out.dtype == dtype and lean_out.shape == out.shape


@pytest.mark.parametrize("kind", ["rnn-tanh", "gru", "lstm"])
def test_no_cache_forward_matches_torch(kind):
    torch = require_torch()
    T, N, I, H = 12, 4, 5, 7
    layer = make(kind, I, H, num_layers=2, bidirectional=True)
    module = {"rnn-tanh": torch.nn.RNN, "gru": torch.nn.GRU, "lstm": torch.nn.LSTM}[kind](
        I, H, num_layers=2, bidirectional=True, dtype=torch.float64)
    module.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in layer.params.items()})
    x = np.random.default_rng(2).standard_normal((T, N, I))
    out, h_n = layer(x)
    with torch.no_grad():
        t_out, t_h = module(torch.from_numpy(x))
    np.testing.assert_allclose(out, t_out.numpy(), rtol=0, atol=1e-12)
    for a, b in zip(parts(h_n), t_h if isinstance(t_h, tuple) else (t_h,), strict=True):
        np.testing.assert_allclose(a, b.numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["rnn-tanh", "gru", "gru-cho", "lstm"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_no_cache_outputs_survive_later_calls_of_the_same_shape(kind, dtype):
    """The output buffers come from the workspace pool: later calls must never write into them."""
    T, N, I, H = 8, 64, 16, 128  # (T, N, H) over workspace.MIN_BYTES, so the output is pooled
    assert T * N * H * np.dtype(dtype).itemsize >= ws.MIN_BYTES
    layer = make(kind, I, H, dtype=dtype)
    rng = np.random.default_rng(3)
    x1, x2, x3 = (rng.standard_normal((T, N, I)).astype(dtype) for _ in range(3))
    out1, h1 = layer(x1)
    want_out, want_h = out1.copy(), tuple(p.copy() for p in parts(h1))
    view = out1[2:]  # a view keeps the buffer too, once out1 itself is gone
    out2, _ = layer(x2)
    _, _, cache = layer.forward(x3)  # the cached path, same shapes
    del out1
    out4, _ = layer(x3)
    assert not np.shares_memory(view, out2) and not np.shares_memory(view, out4)
    np.testing.assert_array_equal(view, want_out[2:])
    for p, w in zip(parts(h1), want_h, strict=True):
        np.testing.assert_array_equal(p, w)
    del out2
    out5, _ = layer(x1)  # a free buffer may be reused, and then holds exactly the new result
    np.testing.assert_array_equal(out5, want_out)
    assert cache is not None


@pytest.mark.parametrize("kind", ["gru", "lstm", "rnn-tanh"])
def test_training_dropout_without_cache_draws_the_same_masks(kind):
    layer = make(kind, 4, 5, num_layers=3, dropout=0.3, weight_drop=0.2)
    x = np.random.default_rng(4).standard_normal((6, 3, 4))
    cached = layer.forward(x, training=True, rng=np.random.default_rng(9))
    lean = layer.forward(x, training=True, rng=np.random.default_rng(9), need_cache=False)
    assert lean[2] is None
    assert_same(lean[:2], cached[:2])
    plain = layer.forward(x)  # without dropout the results differ: the masks were applied
    assert not np.array_equal(plain[0], cached[0])


def test_need_cache_is_checked():
    layer = make("gru", 3, 4)
    x = np.zeros((2, 1, 3))
    with pytest.raises(TypeError, match="need_cache"):
        layer.forward(x, need_cache="no")
    with pytest.raises(ValueError, match="need_cache=True"):
        layer.run(layer.prepare(x), record=True, need_cache=False)
    out, h_n, cache = layer.run(layer.prepare(x), need_cache=False)
    assert cache is None and out.shape == (2, 1, 4) and h_n.shape == (1, 1, 4)


@pytest.mark.parametrize("cell", ["gru", "lstm", "rnn", "mingru"])
def test_charrnn_forward_without_cache_and_evaluate(cell):
    V, H = 7, 16
    model = hiddenstate.CharRNN(V, H, num_layers=2, cell=cell, rng=np.random.default_rng(5))
    ids = np.random.default_rng(6).integers(0, V, size=(11, 3))
    logits, state, cache = model.forward(ids)
    lean_logits, lean_state, none = model.forward(ids, need_cache=False)
    assert cache is not None and none is None
    np.testing.assert_array_equal(lean_logits, logits)
    for a, b in zip(parts(lean_state), parts(state), strict=True):
        np.testing.assert_array_equal(a, b)
    # evaluate (which reads without a cache) against the cross-entropy computed here from the
    # cached forward, chunk by chunk with the state carried, from log-softmax written out
    stream = np.random.default_rng(7).integers(0, V, size=400)
    got = evaluate(model, stream, batch_size=4, seq_len=30)
    rows = stream[: 4 * 100].reshape(4, 100).T
    total, count, st = 0.0, 0, None
    for start in range(0, 99, 30):
        stop = min(start + 30, 99)
        lg, st, _ = model.forward(rows[start:stop], st)
        z = lg.astype(np.float64)
        m = z.max(axis=-1, keepdims=True)
        logp = z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))
        y = rows[start + 1: stop + 1]
        total -= np.take_along_axis(logp, y[..., None], axis=-1).sum()
        count += y.size
    assert got == pytest.approx(total / count, rel=1e-12)


def test_every_combination_of_options_on_one_small_layer():
    """A sweep over the options the engine combines (L, D, lengths, reset, bias) for the three fast kernels."""
    rng = np.random.default_rng(8)
    for kind, L, bi, ragged, bias in itertools.product(["rnn-tanh", "gru", "gru-cho", "lstm"], [1, 2], [False, True],
                                                       [False, True], [False, True]):
        layer = make(kind, 2, 3, num_layers=L, bidirectional=bi, bias=bias)
        x = rng.standard_normal((5, 4, 2))
        opts = {"lengths": np.array([5, 2, 0, 3]), "reset": rng.random((5, 4)) < 0.3} if ragged else {}
        out, h_n, _ = layer.forward(x, **opts)
        assert_same(layer(x, **opts), (out, h_n))
