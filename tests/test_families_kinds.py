"""The registry's families beyond Mamba: RecurrentGemma (RG-LRU), MiniMax (lightning attention), LFM2 (short conv).

Each family's tiny random model is built from a small config on the CPU (seeded, float32, no
download), every recurrent layer recomputed from its hooked input by our block and held to the
model's own output (:func:`recompute_layers`, float32 tolerance), and the last recorded state
compared with what the model itself keeps after the same ids (``use_cache=True``): RecurrentGemma's
``rg_lru.recurrent_states`` and ``conv1d_state`` on the block, MiniMax's
``cache.get_linear_cache(i)``, LFM2's ``cache.get_conv_state(i)`` (its last K - 1 columns). The
transformers weights are the models' own initialisation: every one of these mixers' outputs
passes through its recurrence (RG-LRU: ``linear_out(h * y)``; lightning: ``q S``; short conv:
``C * conv(B x)``), and the negative controls below show the check sees a wrong decay or a
missed reset.
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
from hiddenstate.interop.families import minimax, recurrent_gemma, registry  # noqa: E402
from hiddenstate.interop.families.hooks import recompute_layers, tolerance  # noqa: E402
from hiddenstate.kinds.lightning.kernel import slope_rates  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
V = 50


def recurrent_gemma_model(**over):
    cfg = dict(vocab_size=V, hidden_size=16, lru_width=24, num_attention_heads=2, num_key_value_heads=1,
               intermediate_size=32, num_hidden_layers=4, block_types=["recurrent", "recurrent", "attention"],
               conv1d_width=4, attention_window_size=8)
    return transformers.RecurrentGemmaForCausalLM(transformers.RecurrentGemmaConfig(**{**cfg, **over}))


def minimax_model(**over):
    cfg = dict(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=4, num_attention_heads=2,
               num_key_value_heads=1, head_dim=8, num_local_experts=4, num_experts_per_tok=2, block_size=8,
               layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"])
    return transformers.MiniMaxForCausalLM(transformers.MiniMaxConfig(**{**cfg, **over}))


def lfm2_model(**over):
    cfg = dict(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
               num_key_value_heads=1, conv_L_cache=3, layer_types=["conv", "full_attention", "conv"])
    return transformers.Lfm2ForCausalLM(transformers.Lfm2Config(**{**cfg, **over}))


#: family name -> (tiny model builder, its recurrent layers, its layer roles, its mixer classes)
BUILDERS = {
    "recurrent_gemma": (recurrent_gemma_model, (0, 1, 3), ["recurrent", "recurrent", "attention", "recurrent"],
                        ("RecurrentGemmaRecurrentBlock", "RecurrentGemmaSdpaAttention")),
    "minimax": (minimax_model, (0, 2, 3), ["recurrent", "attention", "recurrent", "recurrent"],
                ("MiniMaxLightningAttention", "MiniMaxAttention")),
    "lfm2": (lfm2_model, (0, 2), ["recurrent", "attention", "recurrent"], ("Lfm2ShortConv", "Lfm2Attention")),
}


def build(name, seed=0, **over):
    torch.manual_seed(seed)
    return BUILDERS[name][0](**over).eval()


def ids_for(seed=1, N=2, T=24):
    return torch.from_numpy(np.random.default_rng(seed).integers(0, V, (N, T)))


def rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


def cached_states(name, model, ids):
    """The model's own final states after ``ids``, per recurrent layer, in our state's fields."""
    with torch.no_grad():
        out = model(ids, use_cache=True)
    _, recurrent, _, _ = BUILDERS[name]
    got = {}
    for i in recurrent:
        if name == "recurrent_gemma":
            blk = model.model.layers[i].temporal_block
            got[i] = {"rg": blk.rg_lru.recurrent_states, "conv": blk.conv1d_state}
        elif name == "minimax":
            got[i] = {"kv": out.cache.get_linear_cache(i)}
        else:  # the conv cache keeps K inputs; the oldest is read by no later step, ours keeps K - 1
            got[i] = {"conv": out.cache.get_conv_state(i)[..., 1:]}
    return {i: {k: v.double().numpy() for k, v in d.items()} for i, d in got.items()}


def test_the_three_families_are_registered_with_their_kinds():
    kinds = {f.name: f.kind for f in families.registered()}
    assert {n: kinds[n] for n in BUILDERS} == {"recurrent_gemma": "rglru", "minimax": "lightning", "lfm2": "shortconv"}
    for name in BUILDERS:
        f = families.family_of(name)
        assert f.notes and f.name in families.__doc__
        assert families.family_of(build(name)) is f


@pytest.mark.parametrize("name", list(BUILDERS))
def test_every_recurrent_layer_is_recomputed_to_the_models_own_output_and_cache(name):
    model = build(name)
    ids = ids_for()
    rc = recompute_layers(model, ids)
    _, recurrent, roles, classes = BUILDERS[name]
    assert rc.family.name == name and rc.layers == recurrent and rc.dtype == "float32"
    assert [e.role for e in rc.layer_map] == roles
    for e in rc.layer_map:
        assert type(model.get_submodule(e.path)).__name__ == e.class_name
        assert e.class_name.startswith(classes[0] if e.role == "recurrent" else classes[1][:8])
    assert rc.tolerance == tolerance(torch.float32) and all(0 <= err <= 1e-5 for err in rc.errors), rc.errors
    cache = cached_states(name, model, ids)
    for i, rec in zip(rc.layers, rc.records):
        for field, theirs in cache[i].items():
            ours = getattr(rec, field)
            assert ours.shape[:2] == (ids.shape[1], ids.shape[0])  # time-major (T, N, ...)
            assert rel(ours[-1], theirs) <= 1e-5, (i, field)


def test_recurrent_gemmas_decay_is_the_blocks_own_and_the_reset_at_position_0_is_the_models():
    model = build("recurrent_gemma")
    ids = ids_for()
    rc = recompute_layers(model, ids)
    for i, rec in zip(rc.layers, rc.records):  # a_t = exp(-8 r_t softplus(Lambda)), Lambda from the model's parameter
        lam = model.model.layers[i].temporal_block.rg_lru.recurrent_param.detach().double().numpy()
        a = np.exp(-8 * rec.recurrent_gate * np.logaddexp(0, lam))
        np.testing.assert_allclose(rec.decay[1:], a[1:], rtol=1e-12)
        assert not rec.decay[0].any()  # position 0: the reset keeps nothing
    fam = registry.find_family("recurrent_gemma")
    no_reset = dataclasses.replace(fam, hooked=lambda args, kwargs, output: fam.hooked(args, kwargs, output)[:2])
    try:  # without the reset, step 0's input would be scaled by sqrt(1 - a_0^2): far off
        registry._REGISTRY["recurrent_gemma"] = no_reset
        with pytest.raises(ValueError, match=r"^layer 0 \(RecurrentGemmaRecurrentBlock\) recomputed by our RGLRUBlock "
                                             r"block differs from the model's own output by 0\.[0-9]+ of its largest"):
            recompute_layers(model, ids)
    finally:
        registry._REGISTRY["recurrent_gemma"] = fam
    u, out = torch.zeros(2, 6, 16), torch.ones(2, 6, 16)
    pos = torch.tensor([[0, 1, 2, 0, 1, 2]])  # two packed documents: a reset at each position 0, every row
    got_u, got_out, forward = recurrent_gemma.hooked((u,), {"position_ids": pos}, (out, None))
    assert got_u is u and got_out is out
    np.testing.assert_array_equal(forward["reset"], [[1, 0, 0, 1, 0, 0]] * 2)


def test_minimax_slopes_are_each_layers_own_and_the_decay_buffers_are_dropped():
    model = build("minimax")
    ids = ids_for()
    rc = recompute_layers(model, ids)
    H, L = model.config.num_attention_heads, model.config.num_hidden_layers
    for i, rec in zip(rc.layers, rc.records):  # smaller rates in deeper layers, transformers' float32 buffer
        np.testing.assert_allclose(-np.log(rec.decay), slope_rates(H, i, L), rtol=1e-7)
    fam = registry.find_family("minimax")
    mixer = fam.mixers(model)[2]
    assert set(minimax.BUFFERS) <= set(mixer.state_dict()) and not set(minimax.BUFFERS) & set(fam.block(model, 2).params)

    def layer0(mixer, config):  # the first layer's slopes everywhere
        blk = fam.to_block(mixer, config)
        blk.slope_rate = slope_rates(H, 0, L)
        return blk

    try:
        registry._REGISTRY["minimax"] = dataclasses.replace(fam, to_block=layer0)
        with pytest.raises(ValueError, match=r"^layer 2 \(MiniMaxLightningAttention\) recomputed by our "
                                             r"LightningAttention block differs .* by 0\.[0-9]+ of its largest"):
            recompute_layers(model, ids)
    finally:
        registry._REGISTRY["minimax"] = fam


def test_what_our_blocks_do_not_compute_is_refused_naming_the_option():
    with pytest.raises(ValueError, match=r"RecurrentGemmaRecurrentBlock's hidden_activation must be the tanh GELU .* "
                                         r"got 'relu'"):
        recompute_layers(build("recurrent_gemma", hidden_activation="relu"), ids_for())
    with pytest.raises(ValueError, match=r"MiniMaxLightningAttention's hidden_act must be 'silu' .* got 'gelu'"):
        recompute_layers(build("minimax", hidden_act="gelu"), ids_for())
    model = build("lfm2", conv_bias=True)
    assert max(recompute_layers(model, ids_for()).errors) <= 1e-5  # all three biases: ours too
    model.model.layers[2].conv.out_proj.bias = None
    with pytest.raises(ValueError, match=r"Lfm2ShortConv's in_proj, conv and out_proj must all have a bias or none .* "
                                         r"got \{'in_proj': True, 'conv': True, 'out_proj': False\}"):
        recompute_layers(model, ids_for())


def decode(name, model, ids, T0):
    """A prefill of T0 steps, then one token a call through the model's own cache; every mixer call hooked."""
    fam = families.family_of(model)
    mixers = fam.mixers(model)
    calls = {i: [] for i in mixers}

    def keep(i):
        def hook(module, args, kwargs, output):
            got = fam.hooked(args, kwargs, output)
            calls[i].append((got[0].double().numpy(), got[1].double().numpy(), got[2] if len(got) == 3 else {}))
        return hook

    handles = [m.register_forward_hook(keep(i), with_kwargs=True) for i, m in mixers.items()]
    T = ids.shape[1]
    try:
        with torch.no_grad():
            if name == "recurrent_gemma":  # its states live on the blocks; the cache serves the attention layers
                cache = transformers.DynamicCache(config=model.config)
                model(ids[:, :T0], position_ids=torch.arange(T0)[None], cache=cache, use_cache=True)
                for t in range(T0, T):
                    model(ids[:, t:t + 1], position_ids=torch.tensor([[t]]), cache=cache, use_cache=True)
            else:
                cache = model(ids[:, :T0], use_cache=True).cache
                for t in range(T0, T):
                    cache = model(ids[:, t:t + 1], cache=cache, use_cache=True).cache
    finally:
        for h in handles:
            h.remove()
    return calls


@pytest.mark.parametrize("name", list(BUILDERS))
def test_token_by_token_decoding_through_the_cache_equals_our_carried_state(name):
    model = build(name)
    ids = ids_for(T=12)
    calls = decode(name, model, ids, T0=7)
    final = cached_states(name, build(name), ids)  # the same weights, one prefill of all 12 steps
    fam = families.family_of(model)
    for i, seen in calls.items():
        assert [u.shape[1] for u, _, _ in seen] == [7, 1, 1, 1, 1, 1]
        blk = fam.block(model, i)
        state = None
        for u, theirs, extra in seen:  # our block, its state carried from call to call
            ours, state, _ = blk.forward(u, state, **extra)
            assert rel(ours, theirs) <= 1e-5, i
        for field, theirs in final[i].items():
            assert rel(getattr(state, field), theirs) <= 1e-5, (i, field)


KIND = {"recurrent_gemma": "rglru", "minimax": "lightning", "lfm2": "shortconv"}


@pytest.mark.parametrize("name", list(BUILDERS))
def test_inspect_model_reports_the_layer_map_and_each_kinds_measurements(name, tmp_path):
    model = build(name)
    ids = ids_for(T=30)
    text = "the cat sat on the mat, and so"
    out = tmp_path / f"{name}.html"
    an = hs.inspect_model(model, ids, text=text, out=out, max_lag=5)
    rc = recompute_layers(model, ids)
    assert [la.layer for la in an.layers] == list(rc.layers) and [la.recomputed for la in an.layers] == list(rc.errors)
    assert an.meta["kind"] == KIND[name] and an.meta["model"] == f"transformers {type(model).__name__}"
    page = out.read_text(encoding="utf-8")
    n_rec = len(rc.layers)
    assert (f'<section id="layermap"><h2>Layer map</h2><p>Every layer of the model: {n_rec} of its '
            f"{len(rc.layer_map)} layers are recurrent") in page
    for e in rc.layer_map:
        roles, classes = (" + ".join(p[k] for p in ((e.role, e.class_name), *e.parts)) for k in range(2))
        assert f"<td>{roles}</td><td style=\"text-align:left\">{classes}</td>" in page
        assert (f'<a href="#layer{e.index}">{e.index}</a>' in page) == (e.role == "recurrent")
        assert (f'<section id="layer{e.index}">' in page) == (e.role == "recurrent")
    for la in an.layers:
        assert f"layer {la.layer} recomputed: {la.recomputed:.2g} of the model's own output" in page
    assert f"Inside the recurrent layers of a {type(model).__name__}" in page and "Explore the units" in page
    H = getattr(model.config, "num_attention_heads", None)
    if name == "recurrent_gemma":  # a_t from the model's own Lambda, the document start (position 0) left out
        for la in an.layers:
            lam = model.model.layers[la.layer].temporal_block.rg_lru.recurrent_param.detach().double().numpy()
            a = np.exp(-8 * la.record.recurrent_gate[1:] * np.logaddexp(0, lam))
            np.testing.assert_allclose(la.time_constants, 1 / (1 - a.mean(axis=(0, 1))), rtol=1e-10)
        assert "mean channel decay a_t" in page
    elif name == "minimax":  # transformers' per-layer slopes; the rank of the state its own cache holds
        L = model.config.num_hidden_layers
        cache = cached_states(name, build(name), ids)
        for la in an.layers:
            np.testing.assert_allclose(la.time_constants, 1 / (1 - np.exp(-slope_rates(H, la.layer, L))), rtol=1e-6)
            sv = np.linalg.svd(cache[la.layer]["kv"], compute_uv=False)  # (N, H, D)
            p = sv / sv.sum(axis=-1, keepdims=True)
            np.testing.assert_allclose(la.effective_rank[-1], np.exp(-(p * np.log(p)).sum(axis=-1)).mean(axis=0),
                                       rtol=1e-4)
        assert "effective rank of S_t at the last step" in page and "How full the matrix memory is" in page
    else:  # no keep gate: said so, a memory of exactly K - 1 steps
        K = model.config.conv_L_cache
        for la in an.layers:
            assert la.decay is None and la.time_constants is None
            np.testing.assert_array_equal(la.flow_spectral, np.arange(6) < K - 1)
        assert "<b>keep gate and time constants</b>: a short convolution" in page
        assert f"its memory exactly {K - 1} steps" in page


@pytest.mark.parametrize("name", ["minimax", "lfm2"])
def test_a_bfloat16_model_is_held_to_its_own_tolerance(name):
    """(A bfloat16 RecurrentGemma is not: transformers computes its decays in bfloat16, see its module.)"""
    rc = recompute_layers(build(name).to(torch.bfloat16), ids_for(T=150))
    assert rc.dtype == "bfloat16" and tolerance(torch.float32) < max(rc.errors) <= rc.tolerance
