"""The family registry: every registered transformers family recognised, its recurrent layers recomputed exactly.

Each family's tiny random model is built from a small config on the CPU (seeded, float32, no
download). What the recomputation is held to comes from the model itself, not from our code: the
mixer's output its own forward hook saw (within the float32 tolerance) and the SSM and
convolution states its own cache holds after the same ids (``use_cache=True``). The hybrids'
weights are drawn with ``initializer_range=0.5`` so that the SSM's readout ``C h`` dominates the
mixer's output (at transformers' default 0.02 a tiny model's output is almost all ``D x``, and a
check of the output alone would hardly see the recurrence).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.interop import families  # noqa: E402
from hiddenstate.interop.families import registry  # noqa: E402
from hiddenstate.interop.families.hooks import MAX_BYTES, estimate_bytes, recompute_layers, tolerance  # noqa: E402
from hiddenstate.interop.transformers_io import from_transformers  # noqa: E402
from tests.test_families_mamba1 import build as build_mamba1  # noqa: E402
from tests.test_families_mamba2 import build as build_mamba2  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
V = 50


def mamba():
    return transformers.MambaForCausalLM(transformers.MambaConfig(
        vocab_size=V, hidden_size=8, state_size=4, num_hidden_layers=2, conv_kernel=3))


def mamba2():
    return transformers.Mamba2ForCausalLM(transformers.Mamba2Config(
        vocab_size=V, hidden_size=8, state_size=4, num_hidden_layers=2, expand=2, head_dim=4, num_heads=4, n_groups=2,
        conv_kernel=3, chunk_size=8, initializer_range=0.5))


def bamba(**over):
    cfg = dict(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=4, num_attention_heads=2,
               num_key_value_heads=1, attn_layer_indices=[1], mamba_n_heads=4, mamba_d_head=8, mamba_n_groups=2,
               mamba_d_state=8, mamba_d_conv=3, mamba_expand=2, mamba_chunk_size=8, initializer_range=0.5)
    return transformers.BambaForCausalLM(transformers.BambaConfig(**{**cfg, **over}))


def nemotron_h(**over):
    cfg = dict(vocab_size=V, hidden_size=16, layers_block_type=["linear_attention", "moe", "full_attention", "mlp",
                                                                 "linear_attention"],
               num_attention_heads=2, num_key_value_heads=1, head_dim=8, mamba_num_heads=4, mamba_head_dim=8,
               n_groups=2, ssm_state_size=8, conv_kernel=3, chunk_size=8, intermediate_size=32, n_routed_experts=4,
               num_experts_per_tok=2, moe_intermediate_size=16, moe_shared_expert_intermediate_size=16, n_group=1,
               topk_group=1, initializer_range=0.5)
    return transformers.NemotronHForCausalLM(transformers.NemotronHConfig(**{**cfg, **over}))


def granitemoehybrid(**over):
    cfg = dict(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
               num_key_value_heads=1, layer_types=["linear_attention", "full_attention", "linear_attention"],
               mamba_n_heads=4, mamba_d_head=8, mamba_n_groups=2, mamba_d_state=8, mamba_d_conv=3, mamba_expand=2,
               mamba_chunk_size=8, num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=32,
               initializer_range=0.5)
    return transformers.GraniteMoeHybridForCausalLM(transformers.GraniteMoeHybridConfig(**{**cfg, **over}))


#: family name -> (tiny model builder, its recurrent layers, its layer roles)
BUILDERS = {
    "mamba": (mamba, (0, 1), ["recurrent"] * 2),
    "mamba2": (mamba2, (0, 1), ["recurrent"] * 2),
    "bamba": (bamba, (0, 2, 3), ["recurrent", "attention", "recurrent", "recurrent"]),
    "nemotron_h": (nemotron_h, (0, 4), ["recurrent", "moe", "attention", "mlp", "recurrent"]),
    "granitemoehybrid": (granitemoehybrid, (0, 2), ["recurrent", "attention", "recurrent"]),
    # the Mamba-1 variants (tests/test_families_mamba1.py): dt/B/C norms, Jamba's MoE, Zamba's heads and hybrid layers
    "falcon_mamba": (lambda: build_mamba1("falcon_mamba")[0], (0, 1, 2), ["recurrent"] * 3),
    "jamba": (lambda: build_mamba1("jamba")[0], (0, 1, 3), ["recurrent", "recurrent", "attention", "recurrent"]),
    "zamba": (lambda: build_mamba1("zamba")[0], (0, 1, 2, 3, 4), ["recurrent"] * 5),
    # the Mamba-2 hybrids with shared attention blocks and muP multipliers (tests/test_families_mamba2.py)
    "zamba2": (lambda: build_mamba2("zamba2")[0], (0, 1, 2, 3), ["recurrent"] * 4),
    "falcon_h1": (lambda: build_mamba2("falcon_h1")[0], (0, 1, 2), ["recurrent"] * 3),
}


def build(name, seed=0, **over):
    torch.manual_seed(seed)
    return BUILDERS[name][0](**over).eval()


def ids_for(seed=1, N=2, T=24):
    return torch.from_numpy(np.random.default_rng(seed).integers(0, V, (N, T)))


def test_every_family_is_registered_once_and_documented():
    names = [f.name for f in families.registered()]
    assert names[:len(BUILDERS)] == list(BUILDERS)  # the Mamba kinds' families first; other kinds' after them
    for f in families.registered():
        assert f.kind in families.BLOCKS and f.classes and f.notes
        assert families.family_of(f.name) is f
    assert "How to add a family" in families.__doc__


@pytest.mark.parametrize("name", list(BUILDERS))
def test_every_recurrent_layer_is_recomputed_to_the_models_own_output_and_cache(name):
    model = build(name)
    ids = ids_for()
    rc = recompute_layers(model, ids)
    _, recurrent, roles = BUILDERS[name]
    assert rc.family.name == name and rc.layers == recurrent and rc.dtype == "float32"
    assert [e.role for e in rc.layer_map] == roles and [e.index for e in rc.layer_map] == list(range(len(roles)))
    for e in rc.layer_map:
        assert type(model.get_submodule(e.path)).__name__ == e.class_name
    assert rc.tolerance == tolerance(torch.float32) and all(0 <= err <= rc.tolerance for err in rc.errors)
    with torch.no_grad():
        cache = model(ids, use_cache=True).cache  # the model's own final states after the same ids
    mixers = rc.family.mixers(model)
    for i, rec in zip(rc.layers, rc.records):
        ssm = cache.get_recurrent_state(i).double().numpy()
        conv = cache.get_conv_state(i).double().numpy()  # (N, Dc, K): the last K inputs; ours keeps K - 1
        assert rec.ssm.shape[:2] == (ids.shape[1], ids.shape[0])  # time-major (T, N, ...)
        ssm = ssm.reshape(rec.ssm.shape[1:])  # Zamba's heads: (N, H, Dh, S) is our (N, Di, S)
        assert np.abs(rec.ssm[-1] - ssm).max() <= 1e-5 * np.abs(ssm).max()
        assert np.abs(rec.conv[-1] - conv[..., 1:]).max() <= 1e-5 * np.abs(conv).max()
        A = -np.exp(mixers[i].A_log.detach().double().numpy())  # decay = exp(dt A), from the mixer's own A_log
        A = A.reshape(rec.decay.shape[2:]) if rec.decay.ndim == 4 else A  # Zamba's (H, Dh, S) is our (Di, S)
        decay = np.exp(rec.dt[..., None] * A) if rec.decay.ndim == 4 else np.exp(rec.dt * A)
        np.testing.assert_allclose(rec.decay, decay, rtol=1e-12)


def test_the_check_sees_the_recurrence_not_only_the_skip():
    """At these weights C h dominates the mixer's output (a check of the output tests the SSM)."""
    model = build("bamba")
    rc = recompute_layers(model, ids_for())
    rec, D = rc.records[0], model.model.layers[0].mamba.D.detach().double().numpy()
    skip = D[:, None] * rec.x  # (T, N, H, P)
    assert np.abs(rec.y - skip).max() > 3 * np.abs(skip).max()


def test_a_mapping_that_misses_part_of_the_mixer_is_refused_with_the_layer_and_figure(monkeypatch):
    model = build("bamba")
    good = registry.find_family("bamba")

    def off(mixer, config):  # a norm epsilon ten times the mixer's
        blk = good.to_block(mixer, config)
        blk.eps *= 10
        return blk

    monkeypatch.setitem(registry._REGISTRY, "bamba", dataclasses.replace(good, to_block=off))
    with pytest.raises(ValueError, match=r"^layer 0 \(BambaMixer\) recomputed by our Mamba2 block differs from the "
                                         r"model's own output by [0-9.e-]+ of its largest value, above the tolerance "
                                         r"0.00012 for a float32 model: not analysed"):
        recompute_layers(model, ids_for())


@pytest.mark.parametrize("name, over", [("bamba", dict(time_step_limit=(0.0, 1.2))),  # dt clamped (about 1.3 here)
                                         ("nemotron_h", dict(mamba_num_heads=3, n_groups=3)),  # Di = 24: not a multiple of 16
                                         ("granitemoehybrid", dict(time_step_limit=(0.5, 1.1), mamba_proj_bias=True))])
def test_the_block_options_a_config_varies_are_read_off_the_mixer(name, over):
    model = build(name, **over)
    ids = ids_for()
    rc = recompute_layers(model, ids)
    assert max(rc.errors) <= rc.tolerance
    blk = rc.family.block(model, rc.layers[0])
    mixer = rc.family.mixers(model)[rc.layers[0]]
    assert blk.d_inner == mixer.intermediate_size and tuple(blk.time_step_limit) == tuple(mixer.time_step_limit)
    with torch.no_grad():
        cache = model(ids, use_cache=True).cache
    ssm = cache.get_recurrent_state(rc.layers[-1]).double().numpy()
    assert np.abs(rc.records[-1].ssm[-1] - ssm).max() <= 1e-5 * np.abs(ssm).max()


def test_what_the_block_does_not_compute_is_refused_before_the_model_runs():
    model = build("bamba", hidden_act="gelu")
    calls = []
    model.register_forward_pre_hook(lambda module, args: calls.append(1))
    with pytest.raises(ValueError, match="^config.hidden_act must be 'silu' .*; got 'gelu'.$"):
        recompute_layers(model, ids_for())
    assert not calls


def test_the_registry_recognises_by_class_package_and_model_type_and_refuses_the_rest():
    model = build("bamba")
    assert families.family_of(model).name == "bamba"
    assert families.family_of(model.model).name == "bamba"  # the base model too
    assert families.family_of(model.config).name == "bamba" and families.family_of("nemotron_h").name == "nemotron_h"
    names = r"mamba, mamba2, .*bamba, .*nemotron_h, .*granitemoehybrid.*"
    with pytest.raises(TypeError, match=f"^model must be of a registered recurrent family \\(model_type {names}; their "
                                        r"classes: hiddenstate\.interop\.families\.registered\(\)\); got torch Linear\.$"):
        families.family_of(torch.nn.Linear(2, 2))
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=V, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8))
    with pytest.raises(TypeError, match=r"got transformers LlamaForCausalLM \(model_type 'llama'\)\.$"):
        families.family_of(llama)
    with pytest.raises(TypeError, match="got model_type 'llama'"):
        families.family_of("llama")

    class BambaForCausalLM:  # the right name, from another package
        config = model.config

    assert families.find_family(BambaForCausalLM()) is None
    model.config.model_type = "other"  # the right class, another model type
    assert families.find_family(model) is None


def test_a_family_record_is_checked_and_names_are_unique():
    fam = registry.find_family("bamba")
    with pytest.raises(ValueError, match=r"kind must be one of \[.*'mamba', 'mamba2'.*\] \(our blocks\); got 'lstm'"):
        dataclasses.replace(fam, kind="lstm")
    with pytest.raises(TypeError, match="classes must be a non-empty tuple"):
        dataclasses.replace(fam, classes="BambaForCausalLM")
    with pytest.raises(ValueError, match="'bamba' is registered already"):
        families.register(fam)
    wrong = dataclasses.replace(fam, to_block=lambda mixer, config: hs.Mamba(4))
    with pytest.raises(TypeError, match="to_block must return a Mamba2 \\(kind 'mamba2'\\); got Mamba"):
        wrong.block(build("bamba"), 0)


def test_layers_records_only_those_and_refuses_other_layers():
    model = build("bamba")
    ids = ids_for()
    everything = recompute_layers(model, ids)
    rc = recompute_layers(model, ids, layers=[2])
    assert rc.layers == (2,) and len(rc.records) == 1
    np.testing.assert_array_equal(rc.records[0].ssm, everything.records[1].ssm)
    assert recompute_layers(model, ids, layers=3).layers == (3,)
    with pytest.raises(ValueError, match=r"^layers must be recurrent layers of this bamba model, \[0, 2, 3\]; got "
                                         r"1 \(attention\), 7 \(no such layer\)\.$"):
        recompute_layers(model, ids, layers=[1, 7])
    for mixer in registry.find_family("bamba").mixers(model).values():
        assert not mixer._forward_hooks  # every hook removed


def test_the_memory_estimate_is_what_the_records_take_and_refuses_before_the_model_runs():
    model = build("bamba")
    ids = ids_for(N=2, T=24)
    per = estimate_bytes(model, 24, 2)
    rc = recompute_layers(model, ids)
    M = model.config.hidden_size
    for i, rec in zip(rc.layers, rc.records):  # the record's arrays, plus the hooked input and output (float32),
        # and the output without the skip D x (the state-part check)
        assert per[i] == sum(a.nbytes for a in rec if isinstance(a, np.ndarray)) + 3 * 24 * 2 * M * 4
    calls = []
    model.register_forward_pre_hook(lambda module, args: calls.append(1))
    total = sum(per.values()) + max(per.values())
    with pytest.raises(ValueError, match=r"^max_bytes \(.*\) must cover the records: recording layers \[0, 2, 3\] of "
                                         r"this bamba model on T=24 steps of N=2 sequence\(s\) would take about "
                                         r".*Pass layers=\[\.\.\.\] with fewer recurrent layers"):
        recompute_layers(model, ids, max_bytes=total - 1)
    assert not calls  # refused before the model ran
    recompute_layers(model, ids, max_bytes=total)
    assert calls == [1]
    with pytest.raises(ValueError, match=r"^max_bytes \(1 B\) must cover the records"):
        hs.inspect_model(model, ids_for(N=1, T=24), max_bytes=1)
    assert MAX_BYTES == 4 * 2 ** 30


def test_the_models_mode_and_hooks_are_restored_when_its_forward_fails(monkeypatch):
    model = build("bamba").train()
    fam = registry.find_family("bamba")

    def broken(args, kwargs, output):
        raise RuntimeError("hook failed")

    monkeypatch.setitem(registry._REGISTRY, "bamba", dataclasses.replace(fam, hooked=broken))
    with pytest.raises(RuntimeError, match="hook failed"):
        recompute_layers(model, ids_for())
    assert model.training and not any(m._forward_hooks for m in fam.mixers(model).values())


def test_ids_are_checked():
    model = build("mamba")
    with pytest.raises(TypeError, match="ids must be integer token ids"):
        recompute_layers(model, np.zeros((2, 5)))
    with pytest.raises(ValueError, match=r"ids must lie in \[0, vocab_size=50\); got values in \[0, 50\]"):
        recompute_layers(model, np.array([[0, 50]]))
    with pytest.raises(ValueError, match="ids must have shape"):
        recompute_layers(model, np.zeros((1, 0), dtype=int))
    assert recompute_layers(model, np.arange(6)).records[0].ssm.shape[:2] == (6, 1)  # (T,): one sequence


def test_a_bfloat16_model_is_held_to_its_own_tolerance():
    model = build("bamba").to(torch.bfloat16)
    rc = recompute_layers(model, ids_for())
    assert rc.dtype == "bfloat16" and rc.tolerance == pytest.approx(8 * 2 ** -7 + 1000 * 2 ** -23)
    assert max(rc.errors) <= rc.tolerance and max(rc.errors) > tolerance(torch.float32)  # bf16 rounding shows
    with pytest.raises(TypeError, match="dtype must be a floating torch or NumPy dtype"):
        tolerance(torch.int64)


def test_inspect_model_of_a_hybrid_reports_the_layer_map_and_each_layers_recomputation(tmp_path):
    model = build("bamba")
    ids = ids_for(T=30)
    text = "the cat sat on the mat, and so"
    out = tmp_path / "bamba.html"
    an = hs.inspect_model(model, ids, text=text, out=out, max_lag=5)
    rc = recompute_layers(model, ids)
    assert [la.layer for la in an.layers] == [0, 2, 3] and an.meta["model"] == "transformers BambaForCausalLM"
    assert [la.recomputed for la in an.layers] == list(rc.errors)
    assert [tuple(e) for e in an.layer_map] == [tuple(e) for e in rc.layer_map]
    for la, rec in zip(an.layers, rc.records):
        np.testing.assert_array_equal(la.record.ssm, rec.ssm)
        np.testing.assert_allclose(la.time_constants, 1 / (1 - rec.decay.mean(axis=(0, 1))), rtol=1e-10)
    assert "recomputed: " in an.summary()
    page = out.read_text(encoding="utf-8")
    assert '<section id="layermap"><h2>Layer map</h2>' in page and "3 of its 4 layers are recurrent" in page
    for i, role, cls in ((0, "recurrent", "BambaMixer"), (1, "attention", "BambaAttention"), (2, "recurrent", "BambaMixer")):
        shown = f"<td>{role} + mlp</td><td style=\"text-align:left\">{cls} + BambaMLP</td>"  # the layer's MLP part
        assert shown in page
        assert (f'<a href="#layer{i}">{i}</a>' in page) == (role == "recurrent")
        assert (f'<section id="layer{i}">' in page) == (role == "recurrent")
    for la in an.layers:
        assert f"layer {la.layer} recomputed: {la.recomputed:.2g} of the model's own output" in page
    assert "Inside the recurrent layers of a BambaForCausalLM" in page
    one = hs.inspect_model(model, ids, layers=[3], out=tmp_path / "one.html", max_lag=5)
    page = (tmp_path / "one.html").read_text(encoding="utf-8")
    assert [la.layer for la in one.layers] == [3] and "not recorded (layers= chose others)" in page


def test_inspect_model_of_a_transformers_mamba_equals_the_converted_model_to_float32_round_off():
    """Behaviour unchanged: the per-layer recomputation agrees with the whole-model conversion of before."""
    model = build("mamba")
    ids = ids_for(T=30)
    an = hs.inspect_model(model, ids, max_lag=5)
    ref = hs.inspect_model(from_transformers(model), ids.numpy(), max_lag=5)
    assert an.layer_map is not None and ref.layer_map is None and ref.layers[0].recomputed is None
    for a, b in zip(an.layers, ref.layers):
        scale = np.abs(b.record.ssm).max()
        assert np.abs(a.record.ssm - b.record.ssm).max() <= 1e-5 * scale
        np.testing.assert_allclose(a.time_constants, b.time_constants, rtol=1e-4)
        assert a.memory.capacity == pytest.approx(b.memory.capacity, abs=0.05)


def test_inspect_model_refuses_what_does_not_apply():
    model = build("bamba")
    with pytest.raises(ValueError, match="h0 must be None for a transformers BambaForCausalLM"):
        hs.inspect_model(model, ids_for(), h0=np.zeros(3))
    with pytest.raises(ValueError, match="layers must be None unless model is a transformers model"):
        hs.inspect_model(hs.GRU(2, 3), np.zeros((4, 1, 2)), layers=[0])
    with pytest.raises(ValueError, match="layers must be None for a hiddenstate Mamba"):
        hs.inspect_model(hs.Mamba(4), np.zeros((4, 1, 4)), layers=[0])
    with pytest.raises(ValueError, match="text must hold the characters of sequence 0, one per step: 1 to T=24"):
        hs.inspect_model(model, ids_for(), text="x" * 25)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=V, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8))
    with pytest.raises(TypeError, match=r"^model must be of a registered recurrent family \(model_type mamba, "):
        hs.inspect_model(llama, ids_for())
