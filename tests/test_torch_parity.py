"""Parity with torch.nn (the reference): weights copied by name, outputs, states and every gradient.

float64 to 1e-10: tanh and relu RNN, GRU (reset_after=True; torch has no Cho form), LSTM; one
and two layers; batch_first on and off; bidirectional; ragged batches against
pack_padded_sequence; the cells against torch.nn.*Cell. float32 end to end at ~1e-5.
Skipped without torch, except where HIDDENSTATE_REQUIRE_TORCH is set (CI): there it fails.
"""

import numpy as np
import pytest

from tests._torch import require_torch
from tests.strategies import TORCH_KINDS, make_cell, make_layer, state_parts

torch = require_torch()

TOL64 = {"rtol": 1e-10, "atol": 1e-10}
TOL32 = {"rtol": 1e-5, "atol": 1e-5}


@pytest.fixture(autouse=True)
def _torch_one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _torch_dtype(dtype):
    return torch.float64 if np.dtype(dtype) == np.float64 else torch.float32


def torch_layer(layer):
    """The torch.nn module equivalent to ``layer``, with its weights copied by name."""
    kw = dict(num_layers=layer.num_layers, bias=layer.bias, batch_first=layer.batch_first,
              bidirectional=layer.bidirectional, dtype=_torch_dtype(layer.dtype))
    if layer.is_lstm:
        mod = torch.nn.LSTM(layer.input_size, layer.hidden_size, **kw)
    elif layer.num_gates == 3:
        assert layer.reset_after, "torch implements only the reset_after=True GRU"
        mod = torch.nn.GRU(layer.input_size, layer.hidden_size, **kw)
    else:
        mod = torch.nn.RNN(layer.input_size, layer.hidden_size, nonlinearity=layer.nonlinearity, **kw)
    _copy_params(mod, layer.params)
    return mod


def torch_cell(cell):
    kw = dict(bias=cell.bias, dtype=_torch_dtype(cell.dtype))
    if cell.num_gates == 4:
        mod = torch.nn.LSTMCell(cell.input_size, cell.hidden_size, **kw)
    elif cell.num_gates == 3:
        mod = torch.nn.GRUCell(cell.input_size, cell.hidden_size, **kw)
    else:
        mod = torch.nn.RNNCell(cell.input_size, cell.hidden_size, nonlinearity=cell.nonlinearity, **kw)
    _copy_params(mod, cell.params)
    return mod


def _copy_params(mod, params):
    names = dict(mod.named_parameters())
    assert set(names) == set(params), (sorted(names), sorted(params))
    with torch.no_grad():
        for name, p in names.items():
            assert tuple(p.shape) == params[name].shape, name
            p.copy_(torch.from_numpy(params[name]))


def _leaf(a):
    return torch.tensor(a, requires_grad=True)


def _np(t):
    return t.detach().numpy()


# ---------------------------------------------------------------------------- layers

LAYER_CONFIGS = [
    pytest.param({"num_layers": 1}, id="1layer"),
    pytest.param({"num_layers": 2}, id="2layers"),
    pytest.param({"num_layers": 1, "batch_first": True}, id="1layer-batch_first"),
    pytest.param({"num_layers": 2, "batch_first": True}, id="2layers-batch_first"),
    pytest.param({"num_layers": 1, "bidirectional": True}, id="1layer-bidirectional"),
    pytest.param({"num_layers": 2, "bidirectional": True, "batch_first": True}, id="2layers-bidirectional-batch_first"),
    pytest.param({"num_layers": 2, "bias": False}, id="2layers-nobias"),
]


def _compare_layer(layer, x, h0, dtype=np.float64, tol=TOL64, lengths=None):
    """Run ours and torch's on the same input and loss; compare outputs, final states, all gradients."""
    rng = np.random.default_rng(99)
    mod = torch_layer(layer)
    out, h_n, cache = layer.forward(x, h0, lengths=lengths)
    w_out = rng.standard_normal(out.shape).astype(dtype)
    w_hn = tuple(rng.standard_normal(s.shape).astype(dtype) for s in state_parts(h_n))
    grads, dx, dh0 = layer.backward(cache, w_out, w_hn if layer.is_lstm else w_hn[0])

    tx = _leaf(x)
    th0 = None if h0 is None else tuple(_leaf(s) for s in state_parts(h0))
    t_state = None if th0 is None else (th0 if layer.is_lstm else th0[0])
    if lengths is None:
        t_out, t_hn = mod(tx, t_state)
    else:
        packed = torch.nn.utils.rnn.pack_padded_sequence(tx, torch.as_tensor(lengths), batch_first=layer.batch_first,
                                                         enforce_sorted=False)
        t_out, t_hn = mod(packed, t_state)
        T = x.shape[1] if layer.batch_first else x.shape[0]
        t_out, _ = torch.nn.utils.rnn.pad_packed_sequence(t_out, batch_first=layer.batch_first, total_length=T)
    t_hn = t_hn if layer.is_lstm else (t_hn,)
    loss = (t_out * torch.from_numpy(w_out)).sum() + sum((a * torch.from_numpy(w)).sum() for a, w in zip(t_hn, w_hn))
    loss.backward()

    assert out.dtype == dtype and dx.dtype == dtype
    np.testing.assert_allclose(out, _np(t_out), **tol)
    for a, b in zip(state_parts(h_n), t_hn):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, _np(b), **tol)
    for name, p in mod.named_parameters():
        assert grads[name].dtype == dtype, name
        np.testing.assert_allclose(grads[name], p.grad.numpy(), err_msg=name, **tol)
    np.testing.assert_allclose(dx, tx.grad.numpy(), **tol)
    if th0 is not None:
        for a, b in zip(state_parts(dh0), th0):
            assert a.dtype == dtype
            np.testing.assert_allclose(a, b.grad.numpy(), **tol)


def _inputs(layer, rng, T=5, N=3, dtype=np.float64, unbatched=False):
    I, H, LD = layer.input_size, layer.hidden_size, layer.num_layers * layer.num_directions
    if unbatched:
        x, sshape = rng.standard_normal((T, I)), (LD, H)
    else:
        x = rng.standard_normal((N, T, I) if layer.batch_first else (T, N, I))
        sshape = (LD, N, H)
    h0 = tuple(0.5 * rng.standard_normal(sshape).astype(dtype) for _ in range(2 if layer.is_lstm else 1))
    return x.astype(dtype), (h0 if layer.is_lstm else h0[0])


@pytest.mark.parametrize("kind", TORCH_KINDS)
@pytest.mark.parametrize("config", LAYER_CONFIGS)
def test_layer_parity_float64(kind, config):
    rng = np.random.default_rng(0)
    layer = make_layer(kind, 3, 4, seed=1, **config)
    x, h0 = _inputs(layer, rng)
    _compare_layer(layer, x, h0)


@pytest.mark.parametrize("kind", TORCH_KINDS)
def test_layer_parity_default_h0(kind):
    rng = np.random.default_rng(2)
    layer = make_layer(kind, 3, 4, 2, seed=3)
    x, _ = _inputs(layer, rng)
    _compare_layer(layer, x, None)


@pytest.mark.parametrize("kind", TORCH_KINDS)
def test_layer_parity_unbatched(kind):
    rng = np.random.default_rng(4)
    layer = make_layer(kind, 3, 4, 2, bidirectional=True, seed=5)
    x, h0 = _inputs(layer, rng, unbatched=True)
    _compare_layer(layer, x, h0)


@pytest.mark.parametrize("kind", TORCH_KINDS)
@pytest.mark.parametrize("config", [pytest.param({"num_layers": 1}, id="1layer"),
                                    pytest.param({"num_layers": 2, "bidirectional": True}, id="2layers-bidirectional"),
                                    pytest.param({"num_layers": 2, "bidirectional": True, "batch_first": True},
                                                 id="2layers-bidirectional-batch_first")])
def test_layer_parity_with_lengths_against_pack_padded_sequence(kind, config):
    rng = np.random.default_rng(6)
    layer = make_layer(kind, 3, 4, seed=7, **config)
    x, h0 = _inputs(layer, rng, T=6, N=4)
    _compare_layer(layer, x, h0, lengths=np.array([3, 6, 1, 4]))  # unsorted, like enforce_sorted=False


@pytest.mark.parametrize("kind", TORCH_KINDS)
@pytest.mark.parametrize("config", [pytest.param({"num_layers": 2}, id="2layers"),
                                    pytest.param({"num_layers": 2, "bidirectional": True, "batch_first": True},
                                                 id="2layers-bidirectional-batch_first")])
def test_layer_parity_float32_end_to_end(kind, config):
    rng = np.random.default_rng(8)
    layer = make_layer(kind, 3, 4, seed=9, dtype=np.float32, **config)
    assert all(p.dtype == np.float32 for p in layer.params.values())
    x, h0 = _inputs(layer, rng, dtype=np.float32)
    _compare_layer(layer, x, h0, dtype=np.float32, tol=TOL32)


def test_relu_parity_with_large_weights():
    """relu is unbounded: values grow, the comparison stays relative."""
    rng = np.random.default_rng(10)
    layer = make_layer("rnn_relu", 3, 5, 2, seed=11)
    for k in layer.params:
        layer.params[k] *= 3.0
    x, h0 = _inputs(layer, rng, T=8)
    _compare_layer(layer, x, h0)


def test_our_state_dict_loads_into_torch():
    layer = make_layer("lstm", 3, 4, 2, bidirectional=True)
    mod = torch.nn.LSTM(3, 4, 2, bidirectional=True, dtype=torch.float64)
    mod.load_state_dict({k: torch.from_numpy(v) for k, v in layer.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((4, 2, 3))
    np.testing.assert_allclose(layer(x)[0], _np(mod(torch.from_numpy(x))[0]), **TOL64)


# ---------------------------------------------------------------------------- cells


@pytest.mark.parametrize("kind", TORCH_KINDS)
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cell_parity(kind, batched, dtype):
    rng = np.random.default_rng(12)
    cell = make_cell(kind, 3, 4, seed=13, dtype=dtype)
    mod = torch_cell(cell)
    tol = TOL64 if dtype == np.float64 else TOL32
    shape_x, shape_h = ((5, 3), (5, 4)) if batched else ((3,), (4,))
    x = rng.standard_normal(shape_x).astype(dtype)
    state = tuple(0.5 * rng.standard_normal(shape_h).astype(dtype) for _ in range(2 if kind == "lstm" else 1))
    out, cache = cell.forward(x, state if kind == "lstm" else state[0])
    w = tuple(rng.standard_normal(shape_h).astype(dtype) for _ in state)
    grads, dx, dh = cell.backward(cache, w if kind == "lstm" else w[0])

    tx = _leaf(x)
    ts = tuple(_leaf(s) for s in state)
    t_out = mod(tx, ts if kind == "lstm" else ts[0])
    t_out = t_out if kind == "lstm" else (t_out,)
    sum((a * torch.from_numpy(b)).sum() for a, b in zip(t_out, w)).backward()

    for a, b in zip(state_parts(out), t_out):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, _np(b), **tol)
    for name, p in mod.named_parameters():
        assert grads[name].dtype == dtype
        np.testing.assert_allclose(grads[name], p.grad.numpy(), err_msg=name, **tol)
    np.testing.assert_allclose(dx, tx.grad.numpy(), **tol)
    for a, b in zip(state_parts(dh), ts):
        np.testing.assert_allclose(a, b.grad.numpy(), **tol)
