"""ONNX export: the standard RNN/GRU/LSTM operators give our outputs and final states.

float32 graphs run in onnxruntime (whose CPU kernels for these operators are float32 only) and
match to 1e-5; float64 graphs run in onnx's reference evaluator and match to 1e-10 (it ignores
``sequence_lens`` and knows only the Tanh activation, so the ragged cases and the relu/sigmoid RNN
are checked in onnxruntime only).
"""

from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.interop import charrnn_to_onnx, to_onnx
from tests._torch import torch_required


def _require(name):
    """The module, or a skip with the reason; in CI (HIDDENSTATE_REQUIRE_TORCH=1) a missing one is an error."""
    return importlib.import_module(name) if torch_required() else pytest.importorskip(name)


onnx = _require("onnx")
ort = _require("onnxruntime")
ReferenceEvaluator = _require("onnx.reference").ReferenceEvaluator

KINDS = [(hs.RNN, {}), (hs.RNN, {"nonlinearity": "relu"}), (hs.RNN, {"nonlinearity": "sigmoid"}),
         (hs.GRU, {}), (hs.GRU, {"reset_after": True}), (hs.LSTM, {})]
IDS = ["rnn-tanh", "rnn-relu", "rnn-sigmoid", "gru-cho", "gru-reset-after", "lstm"]
OPTIONS = list(itertools.product([1, 2], [False, True], [False, True], [True, False]))  # L, bidirectional, batch_first, bias


def run_ours(layer, x, state, lengths):
    out, h_n = layer(x, state, lengths=lengths)
    return (out, *h_n) if isinstance(h_n, tuple) else (out, h_n)


def feeds_for(layer, x, rng, lengths, initial_state=True):
    LD, N, H = layer.num_layers * layer.num_directions, x.shape[0 if layer.batch_first else 1], layer.hidden_size
    feeds, state = {"x": x}, None
    if initial_state:
        h0 = rng.normal(size=(LD, N, H)).astype(layer.dtype)
        feeds["h0"], state = h0, h0
        if layer.is_lstm:
            c0 = rng.normal(size=(LD, N, H)).astype(layer.dtype)
            feeds["c0"], state = c0, (h0, c0)
    if lengths is not None:
        feeds["lengths"] = lengths.astype(np.int32)
    return feeds, state


@pytest.mark.parametrize("cls,kw", KINDS, ids=IDS)
@pytest.mark.parametrize("L,bidirectional,batch_first,bias", OPTIONS)
def test_float32_matches_in_onnxruntime(cls, kw, L, bidirectional, batch_first, bias, tmp_path):
    rng = np.random.default_rng(L * 8 + 4 * bidirectional + 2 * batch_first + bias)
    layer = cls(3, 5, L, bidirectional=bidirectional, batch_first=batch_first, bias=bias, dtype=np.float32,
                rng=rng, **kw)
    T, N = 7, 4
    x = rng.normal(size=(N, T, 3) if batch_first else (T, N, 3)).astype(np.float32)
    lengths = np.array([7, 3, 0, 5])
    feeds, state = feeds_for(layer, x, rng, lengths)
    session = ort.InferenceSession(str(to_onnx(layer, tmp_path / "m.onnx", lengths=True)))
    got = session.run(None, feeds)
    want = run_ours(layer, x, state, lengths)
    assert [o.name for o in session.get_outputs()] == ["output", "h_n"] + (["c_n"] if layer.is_lstm else [])
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)


# the reference evaluator's RNN knows only Tanh among the activations we use
@pytest.mark.parametrize("cls,kw", [k for k, i in zip(KINDS, IDS) if i not in ("rnn-relu", "rnn-sigmoid")],
                         ids=[i for i in IDS if i not in ("rnn-relu", "rnn-sigmoid")])
@pytest.mark.parametrize("L,bidirectional", [(1, False), (2, True)])
def test_float64_matches_in_the_reference_evaluator(cls, kw, L, bidirectional, tmp_path):
    rng = np.random.default_rng(7)
    layer = cls(3, 4, L, bidirectional=bidirectional, rng=rng, **kw)
    x = rng.normal(size=(6, 3, 3))
    feeds, state = feeds_for(layer, x, rng, None)
    got = ReferenceEvaluator(str(to_onnx(layer, tmp_path / "m.onnx"))).run(None, feeds)
    for g, w in zip(got, run_ours(layer, x, state, None), strict=True):
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-10)


@pytest.mark.parametrize("cls", [hs.GRU, hs.LSTM])
def test_learned_or_zero_initial_state(cls, tmp_path):
    rng = np.random.default_rng(3)
    layer = cls(2, 3, 2, learn_h0=True, dtype=np.float32, rng=rng)
    layer.params["h0"][...] = rng.normal(size=layer.params["h0"].shape)
    if cls is hs.LSTM:
        layer.params["c0"][...] = rng.normal(size=layer.params["c0"].shape)
    x = rng.normal(size=(5, 2, 2)).astype(np.float32)
    session = ort.InferenceSession(str(to_onnx(layer, tmp_path / "m.onnx", initial_state=False)))
    assert [i.name for i in session.get_inputs()] == ["x"]
    for g, w in zip(session.run(None, {"x": x}), run_ours(layer, x, None, None), strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5)
    plain = cls(2, 3, dtype=np.float32, rng=rng)  # no learned state: zeros
    session = ort.InferenceSession(str(to_onnx(plain, tmp_path / "z.onnx", initial_state=False)))
    for g, w in zip(session.run(None, {"x": x}), run_ours(plain, x, None, None), strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5)


@pytest.mark.parametrize("cell", ["gru", "lstm", "rnn"])
@pytest.mark.parametrize("embedding_dim", [None, 6])
def test_charrnn_logits_and_state(cell, embedding_dim, tmp_path):
    model = hs.CharRNN(11, 8, 2, cell=cell, embedding_dim=embedding_dim, dtype=np.float32,
                       rng=np.random.default_rng(1))
    rng = np.random.default_rng(2)
    ids = rng.integers(0, 11, size=(9, 3))
    state = model.rnn.initial_state(3, "normal", std=0.5, rng=rng)
    logits, final, _ = model.forward(ids, state)
    feeds = {"ids": ids.astype(np.int64)}
    if cell == "lstm":
        feeds["h0"], feeds["c0"] = state
    else:
        feeds["h0"] = state
    got = ort.InferenceSession(str(charrnn_to_onnx(model, tmp_path / "c.onnx"))).run(None, feeds)
    np.testing.assert_allclose(got[0], logits, atol=1e-5)
    for g, w in zip(got[1:], final if isinstance(final, tuple) else (final,), strict=True):
        np.testing.assert_allclose(g, w, atol=1e-5)


def test_the_file_is_valid_onnx_and_written_atomically(tmp_path):
    layer = hs.GRU(2, 3, rng=np.random.default_rng(0))
    path = to_onnx(layer, tmp_path / "sub" / "g.onnx")
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node].count("GRU") == 1
    assert {n.op_type for n in model.graph.node} <= {"GRU", "Slice", "Transpose", "Reshape", "Identity"}
    gru = next(n for n in model.graph.node if n.op_type == "GRU")
    assert {a.name: onnx.helper.get_attribute_value(a) for a in gru.attribute}["linear_before_reset"] == 0
    assert sorted(p.name for p in path.parent.iterdir()) == ["g.onnx"]  # no temporary file left


def test_errors(tmp_path):
    with pytest.raises(TypeError, match="layer must be"):
        to_onnx(hs.GRUCell(2, 3), tmp_path / "x.onnx")
    with pytest.raises(TypeError, match="lengths must be a bool"):
        to_onnx(hs.GRU(2, 3), tmp_path / "x.onnx", lengths="yes")
    with pytest.raises(TypeError, match="model must be a hiddenstate CharRNN"):
        charrnn_to_onnx(hs.GRU(2, 3), tmp_path / "x.onnx")
    assert not (tmp_path / "x.onnx").exists()
