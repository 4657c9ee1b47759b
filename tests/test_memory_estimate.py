"""The memory estimate of an inspection against the peak :mod:`tracemalloc` measures around it.

Two families of different kinds (Qwen3-Next's gated delta rule, Mamba-2's selective SSM), random
weights at small but not tiny shapes (a few MiB of records, so that the fixed costs do not
decide), N = 2 sequences: :func:`inspection_bytes` must lie within 20% of the peak of NumPy
allocations while ``inspect_model(model, ids)`` runs (the model's own forward pass, torch's
allocations, is not traced: the estimate covers what the inspection adds to it).
"""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.interop.families.hooks import recompute_layers  # noqa: E402
from hiddenstate.pipelines.family_inspection import inspection_bytes  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
V = 200


def qwen3_next(layers=2):
    kinds = (["linear_attention"] * 3 + ["full_attention"]) * layers
    cfg = transformers.Qwen3NextConfig(
        vocab_size=V, hidden_size=128, intermediate_size=256, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, layer_types=kinds[:layers], num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=64, shared_expert_intermediate_size=64, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4)
    return transformers.Qwen3NextForCausalLM(cfg)


def mamba2(layers=2):
    cfg = transformers.Mamba2Config(vocab_size=V, hidden_size=64, state_size=32, num_hidden_layers=layers, expand=2,
                                    head_dim=16, num_heads=8, n_groups=1, chunk_size=64)
    return transformers.Mamba2ForCausalLM(cfg)


def zaya(layers=2):
    """ZAYA's CCA projection: its hooked output [query | key | value] is wider than the layer (640 + 256 against 128)."""
    cfg = transformers.ZayaConfig(vocab_size=V, hidden_size=128, num_hidden_layers=layers, num_attention_heads=8,
                                  num_key_value_heads=2, head_dim=64, moe_intermediate_size=64, num_experts=2,
                                  router_hidden_size=32, cca_time0=2, cca_time1=3, bos_token_id=1, eos_token_id=2)
    return transformers.ZayaForCausalLM(cfg)


BUILD = {"qwen3_next": qwen3_next, "mamba2": mamba2, "zaya": zaya}


def build(name, **over):
    torch.manual_seed(0)
    return BUILD[name](**over).eval()


def ids_for(N=2, T=128):
    return torch.from_numpy(np.random.default_rng(1).integers(0, V, (N, T)))


def traced(fn, *args, **kwargs):
    """``fn``'s result and the peak bytes tracemalloc saw while it ran."""
    tracemalloc.start()
    try:
        out = fn(*args, **kwargs)
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def kept(fn, *args, **kwargs):
    """``fn``'s result and the bytes still allocated since it started once it returned (what it made)."""
    tracemalloc.start()
    try:
        out = fn(*args, **kwargs)
        return out, tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


def record_bytes(records):
    return sum(a.nbytes for rec in records for a in rec if isinstance(a, np.ndarray))


@pytest.mark.parametrize("name", sorted(BUILD))
def test_the_estimate_is_within_20_percent_of_the_measured_peak(name):
    model, ids = build(name), ids_for()
    estimate = inspection_bytes(model, 128, 2)
    an, peak = traced(hs.inspect_model, model, ids)
    records = record_bytes(la.record for la in an.layers)
    assert records > 4 * 2 ** 20  # several MiB: the measurement is not one of fixed costs
    assert peak > records  # the records, and what is made beside them
    assert 0.8 * peak <= estimate <= 1.2 * peak, (estimate / 2 ** 20, peak / 2 ** 20)


def test_the_analysis_keeps_three_principal_axes_not_one_per_step():
    model = build("mamba2")
    an = hs.inspect_model(model, ids_for())
    for la in an.layers:
        F = la.pca.mean.size
        assert la.pca.components.shape == (3, F) and la.pca.scores.shape == (128, 2, 3)
        assert la.pca.explained_variance_ratio.size == min(256, F)  # every component's variance
        flat = la.record.ssm.reshape(256, -1)
        sv = np.linalg.svd(flat - flat.mean(axis=0), compute_uv=False)
        ratio = sv ** 2 / (sv ** 2).sum()
        assert la.pca.n_components_for(0.9) == int(np.searchsorted(np.cumsum(ratio), 0.9) + 1)
        axes = np.linalg.svd(flat - flat.mean(axis=0), full_matrices=False)[2][:3]
        np.testing.assert_allclose(np.abs(np.sum(axes * la.pca.components, axis=1)), 1.0, rtol=1e-6)


def test_an_inspection_over_this_machines_memory_is_refused_before_the_model_runs(monkeypatch):
    from hiddenstate.core import resources

    model, ids = build("qwen3_next"), ids_for()
    estimate = inspection_bytes(model, 128, 2)
    calls = []
    model.register_forward_pre_hook(lambda module, args: calls.append(1))
    monkeypatch.setattr(resources, "memory_limit", lambda: int(0.99 * estimate))  # (dry runs vary by a few bytes)
    with pytest.raises(ValueError, match=r"^inspecting 2 recurrent layer\(s\) of this Qwen3NextForCausalLM on T=128 "
                                         r"steps of N=2 sequence\(s\) needs about .* of memory; this machine allows "
                                         r".*\. Record fewer layers \(layers=, --layers\)"):
        hs.inspect_model(model, ids)
    assert not calls  # refused before the model ran
    monkeypatch.setattr(resources, "memory_limit", lambda: int(1.01 * estimate))
    hs.inspect_model(model, ids)
    assert calls == [1]


def test_float32_records_give_the_float64_figures_to_float32_round_off_in_half_the_bytes():
    model, ids = build("qwen3_next"), ids_for()
    a64, kept64 = kept(hs.inspect_model, model, ids)  # what the analysis holds once made: mostly its records
    a32, kept32 = kept(hs.inspect_model, model, ids, record_dtype="float32")
    r64, r32 = (record_bytes(la.record for la in a.layers) for a in (a64, a32))
    assert r32 == r64 // 2 and all(a.dtype == np.float32 for la in a32.layers for a in la.record
                                   if isinstance(a, np.ndarray))
    assert 0.45 < kept32 / kept64 < 0.6, kept32 / kept64
    for l64, l32 in zip(a64.layers, a32.layers):
        np.testing.assert_array_equal(l32.record.recurrent, l64.record.recurrent.astype(np.float32))
        np.testing.assert_allclose(l32.time_constants, l64.time_constants, rtol=2e-6)
        np.testing.assert_allclose(l32.flow_spectral, l64.flow_spectral, rtol=2e-6)
        np.testing.assert_allclose(l32.flow_rms, l64.flow_rms, rtol=2e-6)
        np.testing.assert_allclose(l32.pca.explained_variance_ratio[:10], l64.pca.explained_variance_ratio[:10],
                                   rtol=1e-5)
        assert l32.recomputed == l64.recomputed  # the check against the model's output is float64 either way
    assert inspection_bytes(model, 128, 2, record_dtype="float32") < inspection_bytes(model, 128, 2)
    rc = recompute_layers(model, ids, record_dtype="float32")
    assert [r.recurrent.dtype for r in rc.records] == [np.float32] * 2
    with pytest.raises(ValueError, match=r"^record_dtype must be 'float64' or 'float32' \(the records' dtype"):
        recompute_layers(model, ids, record_dtype="float16")


def test_a_window_and_stride_keep_only_those_steps_and_the_estimate_follows():
    from hiddenstate.pipelines.family_inspection import analyze_family_model

    model, ids = build("mamba2"), ids_for()
    full = recompute_layers(model, ids)
    cut = recompute_layers(model, ids, window=(10, 100), stride=3, record_dtype="float32")
    np.testing.assert_array_equal(cut.steps, np.arange(10, 100, 3))
    assert full.steps is None and cut.errors == full.errors
    for a, b in zip(full.records, cut.records):
        np.testing.assert_array_equal(b.ssm, a.ssm[10:100:3].astype(np.float32))
        np.testing.assert_array_equal(b.conv, a.conv[10:100:3].astype(np.float32))
        assert b.ssm.base is None  # a copy: the whole record was freed
    estimate = inspection_bytes(model, 128, 2, kept=30)
    an, peak = traced(analyze_family_model, model, ids, window=(10, 100), stride=3)
    assert an.meta["T"] == 30 and an.layers[0].record.ssm.shape[0] == 30
    assert 0.8 * peak <= estimate <= 1.2 * peak, (estimate / 2 ** 20, peak / 2 ** 20)
    assert estimate < inspection_bytes(model, 128, 2)
    with pytest.raises(ValueError, match=r"^window must be \(start, stop\) with 0 <= start < stop <= T=128; got "
                                         r"\(0, 200\)\. Choose positions inside the input\.$"):
        recompute_layers(model, ids, window=(0, 200))
    with pytest.raises(TypeError, match=r"^window must be \(start, stop\), two step positions \(ints\)"):
        recompute_layers(model, ids, window=(1.0, 5))
