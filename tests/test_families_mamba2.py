"""The Mamba-2 hybrid families: Bamba, NemotronH, GraniteMoeHybrid, Zamba2 (shared attention) and Falcon-H1 (muP).

A tiny random model of each (CPU, float32, seeded, no download) runs itself; every recurrent
layer is recomputed by our float64 block from its hooked input (``recompute_layers``) and held to
the model's own output. The references are the model's own: its cache after the whole run and
after a prefix run (every step's state, not only the last), its config (which layers are Mamba,
attention, MLP, MoE, hybrid) for the layer map, its ``A_log`` for the decay, and the map from
each config onto our block written out independently in
``tests/test_mamba2_hybrid_mixers.py::block_options``. The weights are drawn so that the SSM's
readout ``C h`` outweighs the skip ``D x`` (asserted), and each config sets the options its
family varies (a clamp of dt that cuts, biases, Falcon-H1's multipliers, NemotronH's Di that is
not a multiple of the width). Mappings that miss the clamp or the multipliers are refused.
"""

import dataclasses
import math

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.interop.families import family_of, recompute_layers, registry
from hiddenstate.interop.families.blocks import mamba2_block
from tests._torch import require_torch, torch_required

T, N, V = 36, 2, 50  # V as tests/test_families.py (its ids)
TEXT = "the state of a hybrid, step by step!"  # one character per step of sequence 0
assert len(TEXT) == T
F32 = 1e-5  # float32 round-off of the model's own run, 12 times inside the registry's tolerance (1.2e-4)
FAMILIES = ("bamba", "nemotron_h", "granitemoehybrid", "zamba2", "falcon_h1")


def _transformers():
    torch = require_torch()
    tr = __import__("transformers") if torch_required() else pytest.importorskip("transformers")
    return torch, tr


def _randomise(torch, model, seed):
    """Every mixer's A_log, D, dt_bias and gated norm weight off their structured initial values."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.add_(0.3 * torch.randn_like(p))
            elif name.endswith(".D"):  # a small skip D x: the SSM's C h makes most of the output
                p.copy_(0.3 * torch.randn_like(p))
            elif name.endswith("dt_bias"):  # step sizes around 0.3 to 1: a clamp at 0.4 or 1.2 cuts some
                p.copy_(torch.empty_like(p).uniform_(-1.0, 0.8))
            elif name.endswith("norm.weight") and ("mamba." in name or "mixer." in name):
                p.copy_(1 + 0.3 * torch.randn_like(p))
    return model.eval()


def build(name, **over):
    """A tiny random model of the family ``name`` (float32, eval mode) and token ids (N, T)."""
    torch, tr = _transformers()
    torch.manual_seed(0)
    common = dict(vocab_size=V, hidden_size=16, num_attention_heads=2, initializer_range=0.5)
    if name == "bamba":  # layers: mamba, attention, mamba, mamba; dt clamped above; biases on both projections
        cfg = tr.BambaConfig(**common, **{**dict(
            intermediate_size=32, num_hidden_layers=4, num_key_value_heads=1, attn_layer_indices=[1], mamba_n_heads=4,
            mamba_d_head=8, mamba_n_groups=2, mamba_d_state=5, mamba_d_conv=3, mamba_expand=2, mamba_chunk_size=8,
            mamba_proj_bias=True, time_step_limit=(0.0, 1.2), rms_norm_eps=1e-4), **over})
        model = tr.BambaForCausalLM(cfg)
    elif name == "nemotron_h":  # Di = 3 * 8 = 24, not a multiple of 16; bias from use_bias, not mamba_proj_bias
        cfg = tr.NemotronHConfig(**common, **{**dict(
            layers_block_type=["linear_attention", "moe", "full_attention", "mlp", "linear_attention"],
            num_key_value_heads=1, head_dim=8, mamba_num_heads=3, mamba_head_dim=8, n_groups=3, ssm_state_size=5,
            conv_kernel=3, chunk_size=8, intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=16, moe_shared_expert_intermediate_size=16, n_group=1, topk_group=1, use_bias=True,
            mamba_proj_bias=False, time_step_limit=(0.4, math.inf), layer_norm_epsilon=1e-4), **over})
        model = tr.NemotronHForCausalLM(cfg)
    elif name == "granitemoehybrid":  # layers: mamba, attention, mamba; each with its MoE and shared MLP
        cfg = tr.GraniteMoeHybridConfig(**common, **{**dict(
            intermediate_size=32, num_hidden_layers=3, num_key_value_heads=1,
            layer_types=["linear_attention", "full_attention", "linear_attention"], mamba_n_heads=8, mamba_d_head=4,
            mamba_n_groups=4, mamba_d_state=5, mamba_d_conv=3, mamba_expand=2, mamba_chunk_size=8,
            mamba_conv_bias=False, num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=32,
            time_step_limit=(0.4, 1.2)), **over})
        model = tr.GraniteMoeHybridForCausalLM(cfg)
    elif name == "zamba2":  # layers 1 and 3 hybrid (one shared attention block); dt clamped below at time_step_min
        cfg = tr.Zamba2Config(**common, **{**dict(
            intermediate_size=32, num_hidden_layers=4, num_key_value_heads=2, mamba_d_state=5, mamba_d_conv=3,
            mamba_expand=2, mamba_ngroups=2, n_mamba_heads=4, chunk_size=8, time_step_min=0.4,
            add_bias_linear=True, layers_block_type=["mamba", "hybrid", "mamba", "hybrid"]), **over})
        model = tr.Zamba2ForCausalLM(cfg)
    else:  # falcon_h1: attention and the mixer side by side in 3 layers; Di = mamba_d_ssm = 24; muP multipliers
        cfg = tr.FalconH1Config(**common, **{**dict(
            intermediate_size=32, num_hidden_layers=3, num_key_value_heads=1, mamba_d_ssm=24, mamba_n_heads=3,
            mamba_d_head=8, mamba_n_groups=3, mamba_d_state=5, mamba_d_conv=3, mamba_chunk_size=8,
            mamba_rms_norm=True, mamba_norm_before_gate=True, projectors_bias=True, time_step_limit=(0.0, 1.0),
            ssm_multipliers=[0.5, 1.7, 0.8, 1.3, 0.6], ssm_in_multiplier=0.7, ssm_out_multiplier=0.9), **over})
        model = tr.FalconH1ForCausalLM(cfg)
    ids = torch.randint(0, V, (N, T), generator=torch.Generator().manual_seed(1))
    return _randomise(torch, model, 2), ids


@pytest.fixture(scope="module", params=FAMILIES)
def case(request):
    model, ids = build(request.param)
    return request.param, model, ids, recompute_layers(model, ids)


def _expected_map(name, model):
    """The layer map the config says: (index, role, class, path, parts), written from the config's own fields."""
    cfg = model.config
    out = []
    if name == "bamba":
        for i in range(cfg.num_hidden_layers):
            mixer = (("attention", "BambaAttention", f"model.layers.{i}.self_attn") if i in cfg.attn_layer_indices
                     else ("recurrent", "BambaMixer", f"model.layers.{i}.mamba"))
            out.append((i, *mixer, (("mlp", "BambaMLP", f"model.layers.{i}.feed_forward"),)))
    elif name == "nemotron_h":
        cls = {"linear_attention": ("recurrent", "NemotronHMamba2Mixer"), "full_attention": ("attention",
                                                                                            "NemotronHAttention"),
               "mlp": ("mlp", "NemotronHMLP"), "moe": ("moe", "NemotronHMoE")}
        out = [(i, *cls[kind], f"model.layers.{i}.mixer", ()) for i, kind in enumerate(cfg.layers_block_type)]
    elif name == "granitemoehybrid":
        for i, kind in enumerate(cfg.layer_types):
            mixer = (("recurrent", "GraniteMoeHybridMambaLayer", f"model.layers.{i}.mamba") if kind == "linear_attention"
                     else ("attention", "GraniteMoeHybridAttention", f"model.layers.{i}.self_attn"))
            out.append((i, *mixer, (("moe", "GraniteMoeHybridMoE", f"model.layers.{i}.block_sparse_moe"),
                                    ("mlp", "GraniteMoeHybridMLP", f"model.layers.{i}.shared_mlp"))))
    elif name == "zamba2":
        out = [(i, "recurrent", "Zamba2MambaMixer", f"model.layers.{i}.mamba", ()) if kind != "hybrid" else
               (i, "recurrent", "Zamba2MambaMixer", f"model.layers.{i}.mamba_decoder.mamba",
                (("attention", "Zamba2AttentionDecoderLayer", f"model.layers.{i}.shared_transformer"),))
               for i, kind in enumerate(cfg.layers_block_type)]
    else:
        out = [(i, "recurrent", "FalconH1Mixer", f"model.layers.{i}.mamba",
                (("attention", "FalconH1Attention", f"model.layers.{i}.self_attn"),
                 ("mlp", "FalconH1MLP", f"model.layers.{i}.feed_forward"))) for i in range(cfg.num_hidden_layers)]
    return out


def _options(blk):
    """Our block's options, as :func:`tests.test_mamba2_hybrid_mixers.block_options` names them."""
    return dict(d_state=blk.d_state, d_conv=blk.d_conv, d_inner=blk.d_inner, head_dim=blk.head_dim,
                n_groups=blk.n_groups, bias=blk.bias, out_bias=blk.out_bias, conv_bias=blk.conv_bias, eps=blk.eps,
                time_step_limit=tuple(blk.time_step_limit), rms_norm=blk.rms_norm,
                norm_before_gate=blk.norm_before_gate, ssm_multipliers=blk.ssm_multipliers,
                ssm_in_multiplier=blk.ssm_in_multiplier)


def test_the_families_are_registered_and_recognise_their_models_and_configs(case):
    name, model, _, _ = case
    assert family_of(model).name == name and family_of(model.base_model).name == name
    assert family_of(model.config).name == name and family_of(name).kind == "mamba2"
    assert name in {f.name for f in registry.registered()} and family_of(name).notes


def test_every_recurrent_layer_recomputed_within_float32_round_off(case):
    name, model, _, rc = case
    recurrent = [i for i, role, *_ in _expected_map(name, model) if role == "recurrent"]
    assert rc.layers == tuple(recurrent) and rc.dtype == "float32" and rc.tolerance == pytest.approx(1.2e-4, rel=0.01)
    print(f"{name}: " + ", ".join(f"layer {i} {e:.2e}" for i, e in zip(rc.layers, rc.errors)))
    assert all(0 < e < F32 for e in rc.errors)
    mixers = family_of(model).mixers(model)
    for i, rec in zip(rc.layers, rc.records):
        assert rec.ssm.shape[:2] == (T, N) and np.isfinite(rec.ssm).all()
        skip = mixers[i].D.detach().double().numpy()[:, None] * rec.x  # D x: what y is without the SSM
        assert np.abs(rec.y - skip).max() > 2 * np.abs(skip).max()  # so the output check sees the recurrence


def test_our_block_has_the_options_the_config_maps_to(case):
    # the map written out independently (tests/test_mamba2_hybrid_mixers.py), against each recurrent layer's block
    from tests.test_mamba2_hybrid_mixers import block_options

    name, model, _, rc = case
    fam = family_of(model)
    want = block_options(name, model.config)
    want = {"out_bias": want["bias"], "rms_norm": True, "norm_before_gate": False, "ssm_multipliers": None,
            "ssm_in_multiplier": 1.0, **want}  # the block's defaults where a family leaves them
    want["time_step_limit"] = tuple(float(v) for v in want["time_step_limit"])
    for i, rec in zip(rc.layers, rc.records):
        blk = fam.block(model, i)
        got = _options(blk)
        assert {k: got[k] for k in want} == want, (name, i)
        assert blk.batch_first and blk.params["in_proj.weight"].dtype == np.float64
        lo, hi = blk.time_step_limit
        if lo > 0 or hi < math.inf:  # the clamp is on and cuts some steps, so the output check sees it
            assert ((rec.dt == lo) | (rec.dt == hi)).any() and ((rec.dt > lo) & (rec.dt < hi)).any()
    if name == "nemotron_h":  # the bias is use_bias's (the config's mamba_proj_bias is False), Di not a multiple of M
        assert got["bias"] and not model.config.mamba_proj_bias and got["d_inner"] == 24
    if name == "falcon_h1":  # in_proj's bias is mamba_proj_bias's, out_proj's projectors_bias's
        assert not got["bias"] and got["out_bias"] and got["norm_before_gate"]
    if name == "zamba2":  # config.hidden_act is the MLP's: not the mixer's, not refused
        assert model.config.hidden_act == "gelu" and got["time_step_limit"] == (0.4, math.inf)


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
            conv = cache.get_conv_state(i).double().numpy()  # (N, Dc, K): the last K inputs; ours keeps K - 1
            assert ssm.shape == rec.ssm.shape[1:]  # (N, H, P, S)
            err = np.abs(rec.ssm[t - 1] - ssm).max() / np.abs(ssm).max()
            worst[t] = max(worst.get(t, 0.0), err)
            assert err <= tol, (name, i, t, err)
            assert np.abs(rec.conv[t - 1] - conv[..., 1:]).max() <= tol * np.abs(conv).max(), (name, i, t)
    print(f"{name}: worst SSM state against the cache after t steps: "
          + ", ".join(f"t={t} {e:.2e}" for t, e in worst.items()))


def test_the_layer_map_lists_recurrent_attention_mlp_and_moe_as_the_config_says(case):
    name, model, _, rc = case
    want = _expected_map(name, model)
    assert [tuple(e) for e in rc.layer_map] == want
    base = family_of(model).layer_map(model.base_model)  # the base model: paths without its prefix
    assert [e.path for e in base] == [w[3].split(".", 1)[1] for w in want]
    for e in rc.layer_map:  # every path is the module the map names
        assert type(model.get_submodule(e.path)).__name__ == e.class_name
        assert all(type(model.get_submodule(p)).__name__ == c for _, c, p in e.parts)
    roles = {"bamba": ["recurrent", "attention", "recurrent", "recurrent"],
             "nemotron_h": ["recurrent", "moe", "attention", "mlp", "recurrent"],
             "granitemoehybrid": ["recurrent", "attention", "recurrent"], "zamba2": ["recurrent"] * 4,
             "falcon_h1": ["recurrent"] * 3}[name]
    assert [e.role for e in rc.layer_map] == roles


def test_layers_selects_the_recorded_layers_and_refuses_the_others(case):
    name, model, ids, rc = case
    pick = rc.layers[1::2]
    sub = recompute_layers(model, ids, layers=list(pick))
    assert sub.layers == pick and len(sub.records) == len(pick)
    for i, rec in zip(sub.layers, sub.records):
        np.testing.assert_array_equal(rec.ssm, rc.records[rc.layers.index(i)].ssm)
    other = next((e for e in rc.layer_map if e.role != "recurrent"), None)
    bad = other.index if other else len(rc.layer_map)
    what = other.role if other else "no such layer"
    with pytest.raises(ValueError, match=rf"layers must be recurrent layers of this {name} model.*{bad} \({what}\)"):
        recompute_layers(model, ids, layers=[rc.layers[0], bad])


def test_inspect_model_gives_the_analysis_and_a_report_with_the_layer_map(case, tmp_path):
    name, model, ids, rc = case
    chosen = list(rc.layers[-2:])
    out = tmp_path / f"{name}.html"
    an = hs.inspect_model(model, ids, text=TEXT, out=out, layers=chosen, max_lag=6)
    assert [la.layer for la in an.layers] == chosen and an.meta["T"] == T and an.meta["N"] == N
    assert an.meta["kind"] == "mamba2" and [tuple(e) for e in an.layer_map] == _expected_map(name, model)
    la = an.layers[-1]
    assert la.recomputed == rc.errors[-1] and la.units and an.explore is not None and la.memory is not None
    np.testing.assert_array_equal(la.record.ssm, rc.records[-1].ssm)
    # the decay is exp(dt A) with A from the model's own A_log; the time constants are 1 / (1 - its mean)
    mixer = model.get_submodule(an.layer_map[la.layer].path)
    decay = np.exp(la.record.dt * -np.exp(mixer.A_log.detach().double().numpy()))  # (T, N, H)
    np.testing.assert_allclose(la.record.decay, decay, rtol=1e-12)
    np.testing.assert_allclose(la.time_constants, 1 / (1 - decay.mean(axis=(0, 1))), rtol=1e-9)
    page = out.read_text(encoding="utf-8")
    assert 'id="layermap"' in page and f"{len(rc.layers)} of its {len(rc.layer_map)} layers are recurrent" in page
    for e in rc.layer_map:
        assert e.class_name in page and f"<code>{e.path}</code>" in page
        assert all(f"<code>{p}</code>" in page for _, _, p in e.parts)
        linked = f'<a href="#layer{e.index}">{e.index}</a>' in page
        assert linked == (e.index in chosen), e.index
    assert page.count("not recorded (layers= chose others)") == len(rc.layers) - len(chosen)
    assert f"layer {la.layer} recomputed: {la.recomputed:.2g} of the model" in page
    shown = {"bamba": ("recurrent + mlp", "BambaMixer + BambaMLP"),
             "nemotron_h": ("moe", "NemotronHMoE"),
             "granitemoehybrid": ("attention + moe + mlp", "GraniteMoeHybridAttention + GraniteMoeHybridMoE + "
                                                           "GraniteMoeHybridMLP"),
             "zamba2": ("recurrent + attention", "Zamba2MambaMixer + Zamba2AttentionDecoderLayer"),
             "falcon_h1": ("recurrent + attention + mlp", "FalconH1Mixer + FalconH1Attention + FalconH1MLP")}[name]
    assert f'<td>{shown[0]}</td><td style="text-align:left">{shown[1]}</td>' in page


@pytest.mark.parametrize(("name", "drop"), [("zamba2", "the clamp of dt at time_step_min"),
                                            ("falcon_h1", "the muP multipliers"),
                                            ("nemotron_h", "the clamp of dt at time_step_limit")])
def test_a_mapping_that_misses_part_of_the_mixer_is_refused_with_its_figure(name, drop, monkeypatch):
    # the controls: each family's mixer read as a plain Mamba-2 block without what it adds
    model, ids = build(name)
    fam = family_of(model)
    if "clamp" in drop:
        plain = dataclasses.replace(fam, to_block=lambda mixer, config: mamba2_block(mixer, time_step_limit=(0.0,
                                                                                                             math.inf)))
    else:
        plain = dataclasses.replace(fam, to_block=lambda mixer, config: mamba2_block(mixer))
    monkeypatch.setitem(registry._REGISTRY, name, plain)
    cls = fam.layer_map(model)[0].class_name
    with pytest.raises(ValueError, match=rf"layer 0 \({cls}\) recomputed by our Mamba2 block differs from the model's "
                                         r"own output by .* above the tolerance 0.00012"):
        recompute_layers(model, ids)


@pytest.mark.parametrize(("name", "option", "value"), [("bamba", "hidden_act", "gelu"),
                                                      ("granitemoehybrid", "hidden_act", "relu"),
                                                      ("nemotron_h", "mamba_hidden_act", "relu"),
                                                      ("falcon_h1", "hidden_act", "gelu")])
def test_an_activation_the_block_does_not_compute_is_refused_by_its_config_option(name, option, value, monkeypatch):
    model, ids = build(name)
    fam = family_of(model)
    i = next(e.index for e in fam.layer_map(model) if e.role == "recurrent")
    monkeypatch.setattr(model.config, option, value)
    with pytest.raises(ValueError, match=rf"^config.{option} must be 'silu' .*; got '{value}'.$"):
        fam.block(model, i)
    calls = []
    model.register_forward_pre_hook(lambda module, args: calls.append(1))
    with pytest.raises(ValueError, match=rf"config.{option} must be 'silu'"):
        recompute_layers(model, ids)
    assert not calls  # refused before the model ran


def test_zamba2_heads_that_do_not_cover_the_channels_are_refused_by_name():
    # n_mamba_heads = 3 with Di = 32: the config gives mamba_headdim = 10, and 3 heads of 10 leave 2 channels out
    model, ids = build("zamba2", n_mamba_heads=3, mamba_ngroups=1)
    assert model.config.mamba_headdim == 10
    with pytest.raises(ValueError, match=r"^config.n_mamba_heads must divide Di = int\(mamba_expand \* hidden_size\) "
                                         r"= 32 into heads of mamba_headdim = 10 channels .*; got 3.$"):
        recompute_layers(model, ids)


def test_falcon_h1_mup_vector_other_than_its_config_is_refused():
    torch, _ = _transformers()
    model, _ = build("falcon_h1")
    fam = family_of(model)
    blk = fam.block(model, 0)
    mixer = fam.mixers(model)[0]
    np.testing.assert_array_equal(blk.mup_vector.astype(np.float32), mixer.mup_vector.reshape(-1).numpy())
    with torch.no_grad():
        mixer.mup_vector[..., 0] *= 2
    with pytest.raises(ValueError, match=r"mup_vector must be the one config.ssm_multipliers = \[0.5, 1.7, 0.8, 1.3, "
                                         r"0.6\] gives"):
        fam.block(model, 0)


@pytest.mark.parametrize(("name", "over"), [
    ("falcon_h1", dict(mamba_rms_norm=False, mamba_d_ssm=None, mamba_n_heads=4, mamba_d_head=8, mamba_n_groups=2,
                       mamba_proj_bias=True, projectors_bias=False)),  # its default: no norm, y silu(z); Di = 2 M
    ("falcon_h1", dict(mamba_norm_before_gate=False, time_step_limit=(0.4, math.inf))),
    ("nemotron_h", dict(use_bias=False, mamba_proj_bias=True, n_groups=1, use_conv_bias=False)),
    ("bamba", dict(mamba_proj_bias=False, mamba_conv_bias=False, mamba_n_groups=1, time_step_limit=(0.4, 1.2))),
    ("zamba2", dict(add_bias_linear=False, mamba_ngroups=4, time_step_min=0.001)),
])
def test_the_variants_each_config_allows_are_recomputed_and_mapped(name, over):
    from tests.test_mamba2_hybrid_mixers import block_options

    model, ids = build(name, **over)
    rc = recompute_layers(model, ids)
    print(f"{name} {sorted(over)}: worst layer {max(rc.errors):.2e}")
    assert max(rc.errors) < F32
    want = block_options(name, model.config)
    if not want.get("rms_norm", True):  # no norm: before or after the gate means nothing (the block keeps its default)
        del want["norm_before_gate"]
    got = _options(rc.family.block(model, rc.layers[0]))
    assert {k: got[k] for k in want} == {**want, "time_step_limit": tuple(float(v) for v in want["time_step_limit"])}
    assert got["rms_norm"] == (type(rc.family.mixers(model)[rc.layers[0]].norm).__name__ != "Identity")


@pytest.mark.parametrize("name", ["bamba", "granitemoehybrid", "falcon_h1"])
def test_a_time_step_limit_of_none_is_no_clamp(name):
    # the configs accept None (transformers' torch path then cannot run the model); our block reads it as (0, inf)
    model, _ = build(name, time_step_limit=None)
    assert model.config.time_step_limit is None
    fam = family_of(model)
    assert fam.block(model, fam.layer_map(model)[0].index).time_step_limit == (0.0, math.inf)
