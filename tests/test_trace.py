"""The trace reproduces the layer and exposes consistent gates."""

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.core.functional import sigmoid
from hiddenstate.probe.trace import cell_kind, trace

CASES = [
    (hs.RNN, {}),
    (hs.RNN, {"nonlinearity": "relu"}),
    (hs.RNN, {"nonlinearity": "sigmoid"}),
    (hs.GRU, {}),
    (hs.GRU, {"reset_after": True}),
    (hs.LSTM, {}),
]
IDS = ["rnn-tanh", "rnn-relu", "rnn-sigmoid", "gru", "gru-reset-after", "lstm"]


@pytest.mark.parametrize("cls,kw", CASES, ids=IDS)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_trace_reproduces_forward(cls, kw, bidirectional, rng):
    T, N, I, H = 7, 4, 3, 5
    layer = cls(I, H, 2, bidirectional=bidirectional, rng=rng, **kw)
    x = rng.normal(size=(T, N, I))
    lengths = np.array([7, 3, 0, 5])
    reset = rng.random((T, N)) < 0.25
    out, h_n = layer(x, lengths=lengths, reset=reset)
    tr = trace(layer, x, lengths=lengths, reset=reset)
    np.testing.assert_allclose(tr.output, out, rtol=0, atol=1e-13)
    if isinstance(h_n, tuple):
        np.testing.assert_allclose(tr.h_n, h_n[0], rtol=0, atol=1e-13)
        np.testing.assert_allclose(tr.c_n, h_n[1], rtol=0, atol=1e-13)
    else:
        np.testing.assert_allclose(tr.h_n, h_n, rtol=0, atol=1e-13)
    assert len(tr) == 2 * layer.num_directions
    assert tr.mask.tolist() == (np.arange(T)[:, None] < lengths).tolist()
    for lt in tr:
        assert lt.h.shape == (T, N, H)
        assert np.all(lt.h[~tr.mask] == 0.0)  # padding is zero, like the layer's output
        for g in lt.gates.values():
            assert g.shape == (T, N, H)


def test_gru_gates_are_consistent(rng):
    layer = hs.GRU(3, 6, rng=rng)
    x = rng.normal(size=(20, 2, 3))
    lt = trace(layer, x)[0]
    z, n = lt.gates["z"], lt.gates["n"]
    np.testing.assert_allclose(lt.h, z * lt.h_prev + (1 - z) * n, atol=1e-15)
    np.testing.assert_allclose(sigmoid(lt.preacts["z"].copy()), z, atol=1e-15)
    np.testing.assert_allclose(np.tanh(lt.preacts["n"]), n, atol=1e-15)
    np.testing.assert_allclose(lt.h_prev[1:], lt.h[:-1])
    # h_t lies between h_{t-1} and the candidate
    lo, hi = np.minimum(lt.h_prev, n), np.maximum(lt.h_prev, n)
    assert np.all(lt.h >= lo - 1e-15) and np.all(lt.h <= hi + 1e-15)


def test_lstm_gates_are_consistent(rng):
    layer = hs.LSTM(3, 4, rng=rng)
    lt = trace(layer, rng.normal(size=(15, 2, 3)))[0]
    i, f, g, o = (lt.gates[k] for k in "ifgo")
    np.testing.assert_allclose(lt.c, f * lt.c_prev + i * g, atol=1e-15)
    np.testing.assert_allclose(lt.h, o * np.tanh(lt.c), atol=1e-15)


def test_backward_direction_is_a_forward_run_on_reversed_input(rng):
    T, N, I, H = 6, 3, 2, 4
    bi = hs.GRU(I, H, bidirectional=True, rng=rng)
    uni = hs.GRU(I, H, rng=rng)
    uni.load_state_dict({k.replace("_reverse", ""): v for k, v in bi.params.items() if "reverse" in k})
    x = rng.normal(size=(T, N, I))
    lengths = np.array([6, 4, 1])
    back = trace(bi, x, lengths=lengths)[0, 1]
    fwd = trace(uni, hs.reverse_padded(x, lengths), lengths=lengths)[0]
    np.testing.assert_allclose(back.in_processing_order().h, fwd.h, atol=1e-14)
    np.testing.assert_allclose(back.h, hs.reverse_padded(fwd.h, lengths), atol=1e-14)
    np.testing.assert_allclose(back.in_processing_order().gates["z"], fwd.gates["z"], atol=1e-14)


def test_batch_first_and_unbatched_are_time_major(rng):
    layer = hs.LSTM(2, 3, batch_first=True, rng=rng)
    x = rng.normal(size=(4, 5, 2))  # (N, T, I)
    tr = trace(layer, x)
    out, _ = layer(x)
    np.testing.assert_allclose(tr.output, out.transpose(1, 0, 2), atol=1e-14)
    layer2 = hs.GRU(2, 3, rng=rng)
    tr2 = trace(layer2, rng.normal(size=(5, 2)))
    assert tr2[0].h.shape == (5, 1, 3)


def test_gru_with_update_gate_pinned_open_keeps_its_state(rng):
    layer = hs.GRU(2, 4, rng=rng)
    layer.params["bias_hh_l0"][4:8] = 40.0  # z = sigmoid(~40) = 1 - 4e-18: memory mode
    h0 = rng.normal(size=(1, 3, 4)) * 0.5
    lt = trace(layer, rng.normal(size=(30, 3, 2)), h0)[0]
    np.testing.assert_allclose(lt.h, np.broadcast_to(h0[0], lt.h.shape), atol=1e-15)


def test_errors(rng):
    with pytest.raises(TypeError, match="layer must be a hiddenstate RNN, GRU or LSTM"):
        cell_kind(object())
    layer = hs.GRU(2, 3, rng=rng)
    with pytest.raises(ValueError, match="x must have shape"):
        trace(layer, np.zeros((4, 1, 3)))
    tr = trace(layer, np.zeros((4, 1, 2)))
    with pytest.raises(IndexError, match="trace index must be"):
        tr[0, 1]


def test_float32_layer(rng):
    layer = hs.LSTM(3, 4, dtype=np.float32, rng=rng)
    x = rng.normal(size=(8, 2, 3)).astype(np.float32)
    out, _ = layer(x)
    tr = trace(layer, x)
    assert tr.output.dtype == np.float32
    np.testing.assert_allclose(tr.output, out, atol=1e-6)


@pytest.mark.parametrize("cls,kw", CASES, ids=IDS)
def test_trace_gates_are_the_kernels_own(cls, kw, rng):
    """The trace does not re-derive anything: its gates are the values the scan kernel computed."""
    from hiddenstate.classic.cells import kind_of

    layer = cls(3, 4, 2, bidirectional=True, rng=rng, **kw)
    x = rng.normal(size=(6, 3, 3))
    lengths = np.array([6, 2, 4])
    prepared = layer.prepare(x, lengths=lengths)
    _, _, cache = layer.run(prepared, record=True)
    tr = trace(layer, x, lengths=lengths)
    kind = kind_of(layer)
    assert tr.kind == kind.name and set(tr[0].gates) == set(kind.gates) and set(tr[0].preacts) == set(kind.preacts)
    mask = tr.mask[:, :, None]
    for k, lt in enumerate(tr):
        rec = kind.recorded(cache.directions[k].kernel)
        p = lt.in_processing_order()
        for name in kind.gates:
            np.testing.assert_array_equal(p.gates[name], np.where(p.mask[:, :, None], rec.gates[name], 0.0))
        np.testing.assert_array_equal(p.h, np.where(p.mask[:, :, None], rec.h, 0.0))
        assert np.all(lt.h[~mask[:, :, 0]] == 0.0)
    # an independent check of the recorded pre-activations: the nonlinearity of each gives the gate
    valid = tr.mask
    for lt in tr:
        for name, a in lt.preacts.items():
            if name in kind.sigmoid_gates:
                np.testing.assert_allclose(sigmoid(a[valid]), lt.gates[name][valid], atol=1e-15)
            elif name in lt.gates:
                np.testing.assert_allclose(np.tanh(a[valid]), lt.gates[name][valid], atol=1e-15)
        if kind.name == "rnn":
            act = {"tanh": np.tanh, "relu": lambda a: np.maximum(a, 0.0), "sigmoid": sigmoid}
            np.testing.assert_allclose(act[layer.nonlinearity](lt.preacts["a"][valid]), lt.h[valid], atol=1e-15)


def test_recording_does_not_change_the_forward(rng):
    layer = hs.LSTM(3, 5, rng=rng)
    x = rng.normal(size=(9, 2, 3))
    prepared = layer.prepare(x)
    out_plain, _, _ = layer.run(prepared)
    out_rec, _, _ = layer.run(prepared, record=True)
    np.testing.assert_array_equal(out_plain, out_rec)
