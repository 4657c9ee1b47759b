"""The Mamba-1 variant families: FalconMamba, Jamba (between attention and MoE) and Zamba (shared attention blocks).

A tiny random model of each (CPU, float32, seeded, no download) runs itself; every recurrent
layer is recomputed by our float64 block from its hooked input (``recompute_layers``) and held to
the model's own output. The references are the model's own: its cache after the whole run and
after a prefix run (every step's state, not only the last), its config (which layers are Mamba,
attention, MoE, hybrid) for the layer map, and its ``A_log`` for the decay. A mapping that misses
the norms is refused (the control).
"""

import dataclasses

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.interop.families import family_of, recompute_layers, registry
from hiddenstate.interop.families.blocks import mamba_block
from tests._torch import require_torch, torch_required

T, N, V = 36, 2, 50  # V as tests/test_families.py (its ids)
TEXT = "the state of a hybrid, step by step!"  # one character per step of sequence 0
assert len(TEXT) == T
F32 = 1e-5  # float32 round-off of the model's own run, 100 times inside the registry's tolerance (1.2e-4)


def _transformers():
    torch = require_torch()
    tr = __import__("transformers") if torch_required() else pytest.importorskip("transformers")
    return torch, tr


def _randomise(torch, model, seed):
    """Every mixer's A_log, D and norm weights off their structured initial values (so a norm's weight matters)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.add_(0.3 * torch.randn_like(p))
            elif name.endswith(".D"):  # a small skip D a: the SSM's C h makes most of the output
                p.copy_(0.3 * torch.randn_like(p))
            elif "layernorm.weight" in name and ("mamba." in name or "mixer." in name):
                p.copy_(1 + 0.3 * torch.randn_like(p))
    return model.eval()


def build(name):
    """A tiny random model of the family ``name`` (float32, eval mode) and token ids (N, T)."""
    torch, tr = _transformers()
    torch.manual_seed(0)
    if name == "falcon_mamba":
        cfg = tr.FalconMambaConfig(vocab_size=V, hidden_size=16, state_size=5, num_hidden_layers=3, time_step_rank=3,
                                   mixer_rms_eps=1e-3, use_bias=True, initializer_range=0.5)
        model = tr.FalconMambaForCausalLM(cfg)
    elif name == "jamba":  # layers: mamba + mlp, mamba + moe, attention + mlp, mamba + moe
        cfg = tr.JambaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=4,
                             num_attention_heads=2, num_key_value_heads=1, mamba_d_state=5, mamba_dt_rank=3,
                             mamba_d_conv=3, attn_layer_period=4, attn_layer_offset=2, expert_layer_period=2,
                             expert_layer_offset=1, num_experts=2, num_experts_per_tok=1, rms_norm_eps=1e-4,
                             mamba_proj_bias=True, initializer_range=0.5)
        model = tr.JambaForCausalLM(cfg)
    else:  # zamba: layers 2 and 4 hybrid (the shared attention block, then the mixer), the others a mixer alone
        cfg = tr.ZambaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=5,
                             num_attention_heads=2, num_key_value_heads=2, n_mamba_heads=2, mamba_d_state=5,
                             mamba_dt_rank=3, attn_layer_period=2, attn_layer_offset=1, initializer_range=0.5)
        model = tr.ZambaForCausalLM(cfg)
    ids = torch.randint(0, V, (N, T), generator=torch.Generator().manual_seed(1))
    return _randomise(torch, model, 2), ids


FAMILIES = ("falcon_mamba", "jamba", "zamba")


@pytest.fixture(scope="module", params=FAMILIES)
def case(request):
    model, ids = build(request.param)
    return request.param, model, ids, recompute_layers(model, ids)


def _expected_map(name, model):
    """The layer map the config says: (index, role, class, path, parts), written from the config's own fields."""
    cfg = model.config
    if name == "falcon_mamba":
        return [(i, "recurrent", "FalconMambaMixer", f"backbone.layers.{i}.mixer", ())
                for i in range(cfg.num_hidden_layers)]
    if name == "jamba":
        out = []
        for i, (kind, experts) in enumerate(zip(cfg.layers_block_type, cfg.layers_num_experts)):
            ffn = (("moe", "JambaSparseMoeBlock") if experts > 1 else ("mlp", "JambaMLP")) + (
                f"model.layers.{i}.feed_forward",)
            mixer = (("recurrent", "JambaMambaMixer", f"model.layers.{i}.mamba") if kind == "mamba" else
                     ("attention", "JambaAttention", f"model.layers.{i}.self_attn"))
            out.append((i, *mixer, (ffn,)))
        return out
    return [(i, "recurrent", "ZambaMambaMixer", f"model.layers.{i}.mamba", ()) if kind != "hybrid" else
            (i, "recurrent", "ZambaMambaMixer", f"model.layers.{i}.mamba_decoder.mamba",
             (("attention", "ZambaAttentionDecoderLayer", f"model.layers.{i}.shared_transf"),))
            for i, kind in enumerate(cfg.layers_block_type)]


def test_the_families_are_registered_and_recognise_their_models_and_configs(case):
    name, model, _, _ = case
    assert family_of(model).name == name and family_of(model.base_model).name == name
    assert family_of(model.config).name == name and family_of(name).kind == "mamba"
    assert name in {f.name for f in registry.registered()}


def test_every_recurrent_layer_recomputed_within_float32_round_off(case):
    name, model, _, rc = case
    recurrent = [i for i, role, *_ in _expected_map(name, model) if role == "recurrent"]
    assert rc.layers == tuple(recurrent) and rc.dtype == "float32" and rc.tolerance == pytest.approx(1.2e-4, rel=0.01)
    print(f"{name}: " + ", ".join(f"layer {i} {e:.2e}" for i, e in zip(rc.layers, rc.errors)))
    assert all(0 < e < F32 for e in rc.errors)
    mixers = family_of(model).mixers(model)
    for i, rec in zip(rc.layers, rc.records):
        assert rec.ssm.shape[:2] == (T, N) and np.isfinite(rec.ssm).all()
        skip = mixers[i].D.detach().double().numpy().reshape(-1) * rec.x  # D a: what the output is without the SSM
        assert np.abs(rec.y - skip).max() > 0.2 * np.abs(skip).max()  # so the output check sees the recurrence


def test_every_recorded_state_is_the_models_cache_after_that_step(case):
    # the model's own cache after the whole run, and after runs of prefixes: every step's state, not only the last
    torch, _ = _transformers()
    name, model, ids, rc = case
    worst = {}
    for t in (1, T // 2, T):
        with torch.no_grad():
            cache = model(input_ids=ids[:, :t], use_cache=True).cache
        # the same run as the hooked one at t = T; a shorter run's attention rounds differently (float32), and a
        # hybrid's later layers see that in their input: held to the registry's tolerance there
        tol = F32 if t == T else rc.tolerance
        for i, rec in zip(rc.layers, rc.records):
            ssm = cache.get_recurrent_state(i).double().numpy()
            conv = cache.get_conv_state(i).double().numpy()
            Di, S = rec.ssm.shape[2:]
            assert ssm.shape == ((N, 2, Di // 2, S) if name == "zamba" else (N, Di, S))  # Zamba's heads
            ssm = ssm.reshape(N, Di, S)
            err = np.abs(rec.ssm[t - 1] - ssm).max() / np.abs(ssm).max()
            worst[t] = max(worst.get(t, 0.0), err)
            assert err <= tol, (name, i, t, err)
            assert np.abs(rec.conv[t - 1] - conv[..., 1:]).max() <= tol * np.abs(conv).max(), (name, i, t)
    print(f"{name}: worst SSM state against the cache after t steps: "
          + ", ".join(f"t={t} {e:.2e}" for t, e in worst.items()))


def test_the_layer_map_lists_recurrent_attention_and_moe_layers_as_the_config_says(case):
    name, model, _, rc = case
    want = _expected_map(name, model)
    assert [tuple(e) for e in rc.layer_map] == want
    base = family_of(model).layer_map(model.base_model)  # the base model: paths without its prefix
    assert [e.path for e in base] == [w[3].split(".", 1)[1] for w in want]
    if name == "jamba":
        assert [e.role for e in rc.layer_map] == ["recurrent", "recurrent", "attention", "recurrent"]
        assert [e.parts[0][0] for e in rc.layer_map] == ["mlp", "moe", "mlp", "moe"]
    for e in rc.layer_map:  # every path is the module the map names
        assert type(model.get_submodule(e.path)).__name__ == e.class_name
        assert all(type(model.get_submodule(p)).__name__ == c for _, c, p in e.parts)


def test_layers_selects_the_recorded_layers_and_refuses_the_others(case):
    name, model, ids, rc = case
    pick = rc.layers[1::2]
    sub = recompute_layers(model, ids, layers=list(pick))
    assert sub.layers == pick and len(sub.records) == len(pick)
    for i, rec in zip(sub.layers, sub.records):
        np.testing.assert_array_equal(rec.ssm, rc.records[rc.layers.index(i)].ssm)
    other = next((e for e in rc.layer_map if e.role != "recurrent"), None)
    bad = other.index if other else len(rc.layer_map)
    what = "attention" if other else "no such layer"
    with pytest.raises(ValueError, match=rf"layers must be recurrent layers of this {name} model.*{bad} \({what}\)"):
        recompute_layers(model, ids, layers=[rc.layers[0], bad])


def test_inspect_model_gives_the_analysis_and_a_report_with_the_layer_map(case, tmp_path):
    torch, _ = _transformers()
    name, model, ids, rc = case
    chosen = list(rc.layers[-2:])
    out = tmp_path / f"{name}.html"
    an = hs.inspect_model(model, ids, text=TEXT, out=out, layers=chosen, max_lag=6)
    assert [la.layer for la in an.layers] == chosen and an.meta["T"] == T and an.meta["N"] == N
    assert [tuple(e) for e in an.layer_map] == _expected_map(name, model)
    la = an.layers[-1]
    assert la.recomputed == rc.errors[-1] and la.units and an.explore is not None and la.memory is not None
    np.testing.assert_array_equal(la.record.ssm, rc.records[-1].ssm)
    # the decay is exp(dt A) with A from the model's own A_log; the time constants are 1 / (1 - its mean)
    mixer = model.get_submodule(an.layer_map[la.layer].path)
    A = -np.exp(mixer.A_log.detach().double().numpy().reshape(la.record.ssm.shape[2:]))
    decay = np.exp(la.record.dt[..., None] * A)  # (T, N, Di, S)
    np.testing.assert_allclose(la.record.decay, decay, rtol=1e-12)
    np.testing.assert_allclose(la.time_constants, 1 / (1 - decay.mean(axis=(0, 1))), rtol=1e-9)
    page = out.read_text(encoding="utf-8")
    assert 'id="layermap"' in page and f"{len(rc.layers)} of its {len(rc.layer_map)} layers are recurrent" in page
    for e in rc.layer_map:
        assert e.class_name in page and f"<code>{e.path}</code>" in page
        linked = f'<a href="#layer{e.index}">{e.index}</a>' in page
        assert linked == (e.index in chosen), e.index
    assert page.count("not recorded (layers= chose others)") == len(rc.layers) - len(chosen)
    assert f"layer {la.layer} recomputed: {la.recomputed:.2g} of the model" in page
    if name == "jamba":
        assert "recurrent + moe" in page and "attention + mlp" in page and "JambaMambaMixer + JambaSparseMoeBlock" in page
    if name == "zamba":
        assert "recurrent + attention" in page and "ZambaMambaMixer + ZambaAttentionDecoderLayer" in page


def test_a_mapping_without_the_norms_is_refused_with_its_figure(monkeypatch):
    # the control: FalconMamba's mixer read as a plain Mamba block (no dt/B/C norms) is another layer
    model, ids = build("falcon_mamba")
    fam = family_of(model)
    plain = dataclasses.replace(fam, to_block=lambda mixer, config: mamba_block(mixer))
    monkeypatch.setitem(registry._REGISTRY, "falcon_mamba", plain)
    with pytest.raises(ValueError, match=r"layer 0 \(FalconMambaMixer\) recomputed by our Mamba block differs from "
                                         r"the model's own output by .* above the tolerance 0.00012"):
        recompute_layers(model, ids)


@pytest.mark.parametrize(("name", "option", "value"), [("falcon_mamba", "hidden_act", "gelu"),
                                                      ("jamba", "hidden_act", "relu"),
                                                      ("zamba", "hidden_mamba_act", "gelu")])
def test_config_options_the_block_does_not_compute_are_refused_by_name(name, option, value, monkeypatch):
    model, ids = build(name)
    fam = family_of(model)
    i = next(e.index for e in fam.layer_map(model) if e.role == "recurrent")
    monkeypatch.setattr(model.config, option, value)
    with pytest.raises(ValueError, match=rf"config.{option} must be 'silu' .*; got '{value}'"):
        fam.block(model, i)
    with pytest.raises(ValueError, match=rf"config.{option} must be 'silu'"):
        recompute_layers(model, ids)
    if name != "zamba":  # the dt, B, C norms must share one epsilon
        monkeypatch.undo()
        mixer = fam.mixers(model)[i]
        monkeypatch.setattr(mixer.b_layernorm, "variance_epsilon", 0.5)
        eps = "mixer_rms_eps" if name == "falcon_mamba" else "rms_norm_eps"
        with pytest.raises(ValueError, match=rf"dt, B and C norms must share one epsilon \(config.{eps}"):
            fam.block(model, i)


def test_our_block_of_each_family_has_the_variant_options():
    for name, want in (("falcon_mamba", dict(bcdt_norm="rms", norm_eps=1e-3, num_heads=None)),
                       ("jamba", dict(bcdt_norm="rms_weight", norm_eps=1e-4, num_heads=None)),
                       ("zamba", dict(bcdt_norm=None, num_heads=2))):
        model, _ = build(name)
        fam = family_of(model)
        i = next(e.index for e in fam.layer_map(model) if e.role == "recurrent")
        blk = fam.block(model, i)
        assert {k: getattr(blk, k) for k in want} == want and blk.batch_first
        assert blk.params["in_proj.weight"].dtype == np.float64
        if name == "jamba":  # the norms' weights are the mixer's
            np.testing.assert_array_equal(blk.params["b_layernorm.weight"],
                                          fam.mixers(model)[i].b_layernorm.weight.detach().double().numpy())
