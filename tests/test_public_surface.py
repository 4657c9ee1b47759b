"""The package's one public surface: every block and layer at the top level, and one ``analyze``.

``hiddenstate.__all__`` is sorted and every name in it resolves (lazily: ``import hiddenstate``
stays NumPy-only, tests/test_architecture.py checks that); :func:`hiddenstate.analyze` hands each
kind of model to the analysis of its kind and returns exactly what that function returns
(compared value by value on tiny float64 models of every kind), and refuses anything else naming
what it takes.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.kinds.delta.analysis import analyze_delta
from hiddenstate.kinds.ssm.mamba2_analysis import analyze_mamba2
from hiddenstate.kinds.ssm.mamba_analysis import analyze_mamba
from hiddenstate.probe.analysis import analyze_model
from hiddenstate.probe.block_analysis import analyze_layer, analyze_recurrence

BLOCKS = ("GatedDeltaNet", "KimiDeltaAttention", "LightningAttention", "MLSTMLayer", "Mamba", "Mamba2", "RGLRUBlock",
          "RWKVTimeMix", "ShortConv")


def isort_style(name):
    """ruff's order of ``__all__`` (RUF022): CONSTANTS, then Classes, then the rest, each alphabetical."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2), name


def test_all_is_sorted_and_every_name_resolves():
    assert hs.__all__ == sorted(hs.__all__, key=isort_style) and len(set(hs.__all__)) == len(hs.__all__)
    for name in hs.__all__:
        assert getattr(hs, name) is not None, name
    assert set(BLOCKS) | {"analyze", "MambaLM", "Mamba2LM", "RNN", "GRU", "LSTM", "MinGRU", "MinLSTM"} <= set(hs.__all__)
    assert {"StateEdit", "EditRun", "intervene", "CausalTrace", "causal_trace", "trace_cost"} <= set(hs.__all__)
    assert {"check_cache", "CacheCheck"} <= set(hs.__all__) and hs.check_cache.__module__ == "hiddenstate.keep.cache_check"
    assert hs.initial_state_gradient is hs.train.initial_state.initial_state_gradient  # dL/dh0 of a char model


def test_the_snapshot_names_are_the_keep_packages():
    # issue 33: the state as an object you keep
    from hiddenstate import keep

    assert {"Snapshot", "snapshot", "snapshot_bytes", "load_snapshot"} <= set(hs.__all__)
    assert hs.Snapshot is keep.Snapshot and hs.snapshot is keep.snapshot
    assert hs.snapshot_bytes is keep.snapshot_bytes and hs.load_snapshot is keep.load_snapshot


def test_every_block_is_the_class_of_its_kinds_folder_and_analyze_a_function():
    from hiddenstate.kinds.delta.block import GatedDeltaNet
    from hiddenstate.kinds.shortconv.block import ShortConv

    assert hs.GatedDeltaNet is GatedDeltaNet and hs.ShortConv is ShortConv
    assert all(isinstance(getattr(hs, name), type) for name in BLOCKS)
    assert callable(hs.analyze) and hs.analyze.__module__ == "hiddenstate.pipelines.analyze"
    code = "import hiddenstate as hs; print(hs.RWKVTimeMix.__name__, hs.analyze.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["RWKVTimeMix", "analyze"]


def same(a, b, where="analysis"):
    """``a`` and ``b`` hold the same values, field by field (timings aside)."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            if f.name != "timings":
                same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b), where
    else:
        assert a == b, where


def rng():
    return np.random.default_rng(0)


M, T, N = 6, 12, 2
U = np.random.default_rng(1).normal(size=(T, N, M))
IDS = np.random.default_rng(2).integers(0, 7, size=(T, N))
CASES = {  # name: (model, x, the per-kind function, its options)
    "GRU": (lambda: hs.GRU(M, 5, rng=rng()), U, analyze_model, {"grad_steps": 4, "n_fixed_point_starts": 2}),
    "LSTM": (lambda: hs.LSTM(M, 4, num_layers=2, rng=rng()), U, analyze_model, {"n_fixed_point_starts": 0}),
    "Mamba": (lambda: hs.Mamba(M, d_state=4, rng=rng()), U, analyze_mamba, {}),
    "MambaLM": (lambda: hs.MambaLM(7, M, 2, d_state=4, rng=rng()), IDS.T, analyze_mamba, {}),
    "Mamba2": (lambda: hs.Mamba2(M, d_state=4, head_dim=4, rng=rng()), U, analyze_mamba2, {}),
    "GatedDeltaNet": (lambda: hs.GatedDeltaNet(M, num_k_heads=2, head_k_dim=3, chunk=4, rng=rng()), U,
                      analyze_delta, {}),
    "KimiDeltaAttention": (lambda: hs.KimiDeltaAttention(M, num_heads=2, head_dim=3, rng=rng()), U, analyze_delta, {}),
    "RGLRUBlock": (lambda: hs.RGLRUBlock(M, 4, rng=rng()), U, analyze_recurrence, {}),
    "LightningAttention": (lambda: hs.LightningAttention(M, 2, chunk=4, rng=rng()), U, analyze_recurrence, {}),
    "ShortConv": (lambda: hs.ShortConv(M, kernel_size=3, rng=rng()), U, analyze_recurrence, {}),
    "MLSTMLayer": (lambda: hs.MLSTMLayer(M, 3, rng=rng()), U, analyze_layer, {}),
    "RWKVTimeMix": (lambda: hs.RWKVTimeMix(M, rng=rng()), U, analyze_layer, {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_analyze_returns_what_the_analysis_of_the_kind_returns(name):
    make, x, func, options = CASES[name]
    model = make()
    text = "abcdefghijkl"
    ours = hs.analyze(model, x, max_lag=3, text=text, **options)
    theirs = func(model, x, max_lag=3, text=text, **options)
    assert type(ours) is type(theirs)
    same(ours, theirs)
    if hasattr(ours, "layers"):  # the kinds' measurements, real values: time constants, gate statistics
        assert ours.layers and all(np.size(la.time_constants) for la in ours.layers)  # NaN: no keep gate (ShortConv)
    else:
        assert ours.gates and ours.trace.layers  # the gate statistics and every step's state, compared above


def test_analyze_passes_the_common_options_and_the_state_through():
    block = hs.RGLRUBlock(M, 4, rng=rng())
    state = block.initial_state(N)._replace(rg=np.full((N, 4), 0.5))
    reset = np.zeros((T, N), dtype=bool)
    reset[5, 1] = True
    ours = hs.analyze(block, U, state, reset=reset, max_lag=4, model_name="mine", tokens=IDS)
    same(ours, analyze_recurrence(block, U, state, reset=reset, max_lag=4, model_name="mine", tokens=IDS))
    assert ours.meta["model"] == "mine" and ours.summary().startswith("mine: ")
    gru = hs.GRU(M, 5, rng=rng())
    an = hs.analyze(gru, U, np.ones((1, N, 5)) * 0.1, model_name="my GRU", n_fixed_point_starts=0, grad_steps=0)
    assert an.meta["model"] == "my GRU"
    same(an, analyze_model(gru, U, np.ones((1, N, 5)) * 0.1, title_meta={"model": "my GRU"}, n_fixed_point_starts=0,
                           grad_steps=0))


@pytest.mark.parametrize("cell", ["gru", "mamba"])
def test_a_char_rnn_is_analysed_as_its_cell_is(cell):
    model = hs.CharRNN(7, 6, cell=cell, rng=rng())
    ids = IDS[:, :1]
    ours = hs.analyze(model, ids, max_lag=3, **({"n_fixed_point_starts": 0} if cell == "gru" else {}))
    if cell == "mamba":
        same(ours, analyze_mamba(model, ids, max_lag=3))
    else:
        same(ours, analyze_model(model.rnn, model.embed(ids), max_lag=3, tokens=ids, n_fixed_point_starts=0))
    with pytest.raises(ValueError, match=r"^x must hold ids in \[0, 7\); got values in \[0, 9\]\.$"):
        hs.analyze(hs.CharRNN(7, 6, rng=rng()), np.array([0, 9]))


def test_anything_else_is_refused_naming_the_argument_what_it_takes_and_what_it_got():
    accepted = "a hiddenstate RNN, GRU, LSTM, MinGRU, MinLSTM or CharRNN; Mamba, MambaLM"
    for bad, got in ((object(), "builtins.object"), ("model_dir", "builtins.str"), (hs.GRUCell(3, 4), "GRUCell")):
        with pytest.raises(TypeError, match=rf"^model must be {accepted}.*; got .*{got}\.$"):
            hs.analyze(bad, U)
    with pytest.raises(TypeError, match=r"^options must be keyword arguments of analyze_delta for a GatedDeltaNet "
                                        r"\(.*max_lag.*\); got reset\.$"):
        hs.analyze(hs.GatedDeltaNet(M, head_k_dim=3, rng=rng()), U, reset=np.zeros((T, N), dtype=bool))


def test_a_transformers_model_goes_to_the_family_analysis():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from hiddenstate.interop import families
    from hiddenstate.pipelines.family_inspection import analyze_family_model

    family = families.find_family("mamba")
    torch.manual_seed(0)
    model = getattr(transformers, family.classes[0])(family.tiny_config()).eval()
    ids = np.arange(10).reshape(1, 10) % 50
    same(hs.analyze(model, ids, layers=[1], max_lag=3), analyze_family_model(model, ids, layers=[1], max_lag=3))
    with pytest.raises(ValueError, match=r"^state must be None for a transformers MambaForCausalLM"):
        hs.analyze(model, ids, np.zeros(3))
