"""The xlstm and rwkv families: every mLSTM layer and RWKV time mixing recomputed from the model's own run.

Each family's tiny random model is built from a small config on the CPU (seeded, float32, no
download). What the recomputation is held to comes from the model itself: the layer's output its
own forward hook saw (within the float32 tolerance), the state its own cache holds after the same
ids (``xLSTMCache.rnn_state``, RWKV's five-part ``state``), also when the last ids are decoded one
token at a time through that cache, and the gates computed by the model's own modules from the
hooked input. The views' lag norms are held to the Jacobian the layers' hand-written backward
pass (BPTT) gives.

The xLSTM model keeps ``hidden_size * qk_dim_factor`` a multiple of 64 (``xLSTMCache`` sizes
its state from the config's dims rounded up to 64, the layer from ``int(M * factor)``), and its
gate weights are drawn (transformers zeroes them, and sets the input gate's bias to -10, at
which the stabiliser never switches to the input gate). RWKV's cache test keeps
``attention_hidden_size == hidden_size`` (transformers 5.25 sizes the WKV cache by
``hidden_size``) and decodes one row (its one-token path is wrong for a batch of several).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate import kinds  # noqa: E402
from hiddenstate.interop import families  # noqa: E402
from hiddenstate.interop.families import registry  # noqa: E402
from hiddenstate.interop.families.hooks import recompute_layers, tolerance  # noqa: E402
from hiddenstate.kinds.mlstm.block import MLSTMLayer  # noqa: E402
from hiddenstate.kinds.rwkv.block import RWKVTimeMix  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
V = 50


def xlstm(**over):
    cfg = dict(vocab_size=V, hidden_size=64, num_heads=2, qk_dim_factor=1.0, v_dim_factor=1.0, num_hidden_layers=2,
               chunk_size=8)
    model = transformers.xLSTMForCausalLM(transformers.xLSTMConfig(**{**cfg, **over}))
    with torch.no_grad():
        for block in model.backbone.blocks:
            layer = block.mlstm_layer
            gates = [layer.ifgate_preact] if layer.config.weight_mode == "fused" else [layer.igate_preact,
                                                                                      layer.fgate_preact]
            for g in gates:
                g.weight.normal_(0.0, 0.5)
            (gates[0].bias[:2] if len(gates) == 1 else gates[0].bias).normal_(0.0, 1.0)  # the input gate's bias
    return model


def rwkv(**over):
    cfg = dict(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=3, context_length=64)
    return transformers.RwkvForCausalLM(transformers.RwkvConfig(**{**cfg, **over}))


BUILDERS = {"xlstm": (xlstm, "mlstm", "xLSTMLayer"), "rwkv": (rwkv, "rwkv", "RwkvSelfAttention")}


def build(name, seed=0, **over):
    torch.manual_seed(seed)
    return BUILDERS[name][0](**over).eval()


def ids_for(seed=1, N=2, T=24):
    return torch.from_numpy(np.random.default_rng(seed).integers(0, V, (N, T)))


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def cached_states(name, model, out, i):
    """Layer i's final state in the model's own cache, in the order of our record's states."""
    if name == "xlstm":
        return [s.double().numpy() for s in out.cache.rnn_state[i]]
    return [s[:, :, i].double().numpy() for s in out.state[1:]]


def test_the_families_are_registered_with_their_kinds():
    for name, (_, kind, _) in BUILDERS.items():
        fam = families.family_of(name)
        assert fam.kind == kind and fam.notes and fam in families.registered()
    assert kinds.BLOCKS["mlstm"] is MLSTMLayer and kinds.BLOCKS["rwkv"] is RWKVTimeMix
    assert families.family_of(build("xlstm").backbone).name == "xlstm"  # the base model too
    assert families.family_of(build("rwkv").rwkv).name == "rwkv"
    assert "xlstm (kind ``mlstm``)" in families.__doc__ and "rwkv (kind ``rwkv``)" in families.__doc__


@pytest.mark.parametrize("name, over", [("xlstm", {}), ("xlstm", dict(use_bias=True)),
                                        ("rwkv", {}), ("rwkv", dict(rescale_every=1))])
def test_every_recurrent_layer_is_recomputed_to_the_models_own_output_and_cache(name, over):
    model = build(name, **over)
    ids = ids_for()
    rc = recompute_layers(model, ids)
    L = model.config.num_hidden_layers
    _, kind, cls = BUILDERS[name]
    assert rc.family.name == name and rc.layers == tuple(range(L)) and rc.dtype == "float32"
    assert [e.role for e in rc.layer_map] == ["recurrent"] * L
    for e in rc.layer_map:
        assert type(model.get_submodule(e.path)).__name__ == e.class_name == cls
    assert rc.tolerance == tolerance(torch.float32) and all(0 <= err <= 2e-5 for err in rc.errors)
    with torch.no_grad():
        out = model(ids, use_cache=True)  # the model's own final states after the same ids
    for i, rec in zip(rc.layers, rc.records):
        states = kinds.get_kind(kind).states(rec)
        assert next(iter(states.values())).shape[:2] == (ids.shape[1], ids.shape[0])  # time-major (T, N, ...)
        for (what, ours), theirs in zip(states.items(), cached_states(name, model, out, i)):
            assert ours[-1].shape == theirs.shape
            assert rel(ours[-1], theirs) <= 1e-5, what


def test_rwkv_reads_the_rescaled_weights_the_model_ran_with():
    # in eval mode RwkvModel halves block i's output weight i // rescale_every times before it runs (in place)
    model = build("rwkv", rescale_every=1).train()
    before = model.rwkv.blocks[2].attention.output.weight.detach().clone()
    rc = recompute_layers(model, ids_for())
    assert model.training and max(rc.errors) <= 2e-5
    blk = rc.family.block(model, 2)
    np.testing.assert_array_equal(blk.params["output.weight"], before.double().numpy() / 4)


def test_rwkv_of_another_attention_width_is_recomputed():
    # attention_hidden_size != hidden_size: the output only (transformers' cache is hidden_size wide)
    model = build("rwkv", attention_hidden_size=12)
    rc = recompute_layers(model, ids_for())
    assert max(rc.errors) <= 2e-5 and rc.records[0].num.shape[-1] == 12


@pytest.mark.parametrize("name", list(BUILDERS))
def test_token_by_token_decoding_through_the_cache_equals_the_recorded_state(name):
    N = 2 if name == "xlstm" else 1  # transformers 5.25's RWKV one-token path is wrong for N > 1
    ids = ids_for(N=N, T=20)
    model = build(name)
    rc = recompute_layers(model, ids)
    with torch.no_grad():
        out = model(ids[:, :16], use_cache=True)
        for t in range(16, 20):
            carry = dict(cache=out.cache) if name == "xlstm" else dict(state=out.state)
            out = model(ids[:, t:t + 1], use_cache=True, **carry)
    for i, rec in zip(rc.layers, rc.records):
        states = kinds.get_kind(rc.family.kind).states(rec)
        for (what, ours), theirs in zip(states.items(), cached_states(name, model, out, i)):
            assert rel(ours[-1], theirs) <= 1e-5, what


def hooked_inputs(model, modules):
    seen = {}
    handles = [m.register_forward_hook(lambda mod, args, out, i=i: seen.__setitem__(i, args[0].detach()))
               for i, m in modules.items()]
    return seen, handles


def test_the_recorded_gates_are_the_models_own():
    from transformers.models.xlstm.modeling_xlstm import soft_cap

    model = build("xlstm")
    ids = ids_for()
    fam = families.family_of(model)
    seen, handles = hooked_inputs(model, fam.mixers(model))
    rc = recompute_layers(model, ids)
    for h in handles:
        h.remove()
    for i, rec in zip(rc.layers, rc.records):
        layer = fam.mixers(model)[i]
        with torch.no_grad():
            f = soft_cap(layer.fgate_preact(seen[i]), layer.config.gate_soft_cap)
            i_gate = soft_cap(layer.igate_preact(seen[i]), layer.config.gate_soft_cap)
            o = torch.sigmoid(layer.ogate_preact(seen[i]))
        np.testing.assert_allclose(rec.forget, torch.sigmoid(f).double().numpy().transpose(1, 0, 2), atol=1e-6)
        np.testing.assert_allclose(rec.igate, i_gate.double().numpy().transpose(1, 0, 2), atol=1e-5)
        np.testing.assert_allclose(rec.ogate, o.double().numpy().transpose(1, 0, 2), atol=1e-6)
        assert (rec.m[..., 0] == rec.igate).any()  # the stabiliser switches to the input gate at these weights
    model = build("rwkv")
    fam = families.family_of(model)
    seen, handles = hooked_inputs(model, fam.mixers(model))
    rc = recompute_layers(model, ids)
    for h in handles:
        h.remove()
    for i, rec in zip(rc.layers, rc.records):
        attn = fam.mixers(model)[i]
        with torch.no_grad():
            r, k, _, _ = attn.extract_key_value(seen[i])
        np.testing.assert_allclose(rec.r, r.double().numpy().transpose(1, 0, 2), atol=1e-6)
        np.testing.assert_allclose(rec.k, k.double().numpy().transpose(1, 0, 2), atol=1e-5)
        w = np.exp(-np.exp(attn.time_decay.detach().double().numpy()))
        np.testing.assert_array_equal(rec.decay, np.broadcast_to(w, rec.k.shape))


def random_gates_mlstm(seed=0):
    blk = MLSTMLayer(8, 2, rng=np.random.default_rng(seed))
    rng = np.random.default_rng(seed + 1)
    blk.params["igate_preact.weight"] = rng.normal(0.0, 0.5, (2, 8))
    blk.params["igate_preact.bias"] = rng.normal(0.0, 1.0, 2)
    blk.params["fgate_preact.weight"] = rng.normal(0.0, 0.5, (2, 8))
    return blk


@pytest.mark.parametrize("kind", ["mlstm", "rwkv"])
def test_the_views_lag_norms_are_the_jacobian_bptt_gives(kind):
    """The memory's dS~_T/dS~_{T-k}: BPTT's gradient of the stored state at T-k, times exp(m_T - m_{T-k})."""
    blk = random_gates_mlstm() if kind == "mlstm" else RWKVTimeMix(6, 5, rng=np.random.default_rng(0))
    T, N = 12, 3
    rng = np.random.default_rng(2)
    s0 = blk.forward(rng.normal(size=(5, N, blk.d_model)))[1]  # a warm state (RWKV's fresh max is -1e30)
    u = rng.normal(size=(T, N, blk.d_model))
    k_ = kinds.get_kind(kind)
    out, rec = k_.run(blk, u, state=s0)
    np.testing.assert_array_equal(out, blk.forward(u, s0)[0])
    lag = k_.view(rec).lag_norms(T)
    states = list(k_.states(rec).values())
    scale = rec.m[..., 0] if kind == "mlstm" else rec.max  # (T, N, G): the stabiliser of the stored state
    gates = rec.forget if kind == "mlstm" else rec.decay
    which = 0 if kind == "mlstm" else 1  # C, or num
    for k in range(1, T + 1):
        start = s0 if k == T else blk.state_type(*(s[T - k - 1] for s in states))
        _, _, cache = blk.forward(u[T - k:], start)
        d_final = [None] * len(start)
        d_final[which] = np.ones_like(start[which])
        d0 = blk.backward(cache, None, blk.state_type(*d_final))[2][which]
        d0 = d0[..., 0, 0] if kind == "mlstm" else d0  # every entry of a head's C gets its head's factor
        before = start[2][..., 0] if kind == "mlstm" else start[3]
        prod = d0 * np.exp(scale[-1] - before)  # (N, G): the unstabilised memory's factor
        np.testing.assert_allclose(prod, gates[T - k:].prod(axis=0), rtol=1e-10)
        np.testing.assert_allclose(lag.spectral[k], prod.max(axis=1).mean(), rtol=1e-10)
        np.testing.assert_allclose(lag.rms[k], np.sqrt((prod ** 2).mean(axis=1)).mean(), rtol=1e-10)
        if kind == "mlstm":
            np.testing.assert_allclose(lag.heads[k], prod.mean(axis=0), rtol=1e-10)
    assert lag.spectral[0] == 1.0 and lag.spectral[-1] < 1.0


def test_the_views_read_the_records():
    blk = random_gates_mlstm()
    u = np.random.default_rng(2).normal(size=(10, 2, 8))
    _, rec = kinds.get_kind("mlstm").run(blk, u)
    view = kinds.get_kind("mlstm").view(rec)
    T, N, H, Dk, Dv = rec.C.shape
    assert view.state.shape == (T, N, H * Dk * Dv + H * Dk) and view.matrix is rec.C
    assert view.keep is rec.forget and view.keep_shape == (H,) and view.units.shape == (T, N, H * Dv)
    np.testing.assert_array_equal(view.unit_keep[..., Dv:2 * Dv], np.repeat(rec.forget[..., 1:2], Dv, axis=-1))
    assert view.out_gate is rec.ogate and list(kinds.get_kind("mlstm").states(rec)) == ["C", "n", "m"]
    blk = RWKVTimeMix(6, 5, rng=np.random.default_rng(0))
    u = np.random.default_rng(2).normal(size=(10, 2, 6))
    _, rec = kinds.get_kind("rwkv").run(blk, u)
    view = kinds.get_kind("rwkv").view(rec)
    assert view.state.shape == (10, 2, 10) and view.keep_shape == (5,) and view.matrix is None
    np.testing.assert_array_equal(view.state[..., 5:], rec.den)
    assert view.units is rec.wkv and view.out_gate is rec.r
    assert list(kinds.get_kind("rwkv").states(rec)) == ["shift", "num", "den", "max"]


def test_a_mapping_that_misses_part_of_the_layer_is_refused(monkeypatch):
    for name, spoil in (("xlstm", lambda blk: setattr(blk, "gate_soft_cap", 30.0)),
                        ("rwkv", lambda blk: blk.params["time_first"].__iadd__(0.05))):
        good = registry.find_family(name)

        def off(mixer, config, good=good, spoil=spoil):
            blk = good.to_block(mixer, config)
            spoil(blk)
            return blk

        monkeypatch.setitem(registry._REGISTRY, name, dataclasses.replace(good, to_block=off))
        with pytest.raises(ValueError, match=r"^layer 0 \(.*\) recomputed by our .* block differs from the model's "
                                             r"own output by [0-9.e-]+ of its largest value"):
            recompute_layers(build(name), ids_for())


@pytest.mark.parametrize("name", list(BUILDERS))
def test_inspect_model_measures_each_family_and_writes_its_report(name, tmp_path):
    model = build(name)
    text = "the cat sat on the mat, and so on"
    ids = ids_for(N=2, T=len(text))
    out = tmp_path / f"{name}.html"
    an = hs.inspect_model(model, ids, text=text, out=out, max_lag=5)
    rc = recompute_layers(model, ids)
    kind = BUILDERS[name][1]
    assert [la.layer for la in an.layers] == list(rc.layers) and an.meta["kind"] == kind
    assert [la.recomputed for la in an.layers] == list(rc.errors)
    mixers = rc.family.mixers(model)
    for la, rec in zip(an.layers, rc.records):
        if kind == "mlstm":
            np.testing.assert_array_equal(la.record.C, rec.C)
            np.testing.assert_allclose(la.time_constants, 1 / (1 - rec.forget.mean(axis=(0, 1))), rtol=1e-10)
            sv = np.linalg.svd(rec.C, compute_uv=False)  # (T, N, H, min(Dk, Dv))
            p = sv / sv.sum(axis=-1, keepdims=True)
            np.testing.assert_allclose(la.effective_rank, np.exp(-(p * np.log(p)).sum(-1)).mean(axis=1), rtol=1e-10)
            assert la.effective_rank.shape == (len(text), rec.C.shape[2]) and la.effective_rank[-1].min() > 1.5
            np.testing.assert_allclose(la.head_flow[3], rec.forget[-3:].prod(axis=0).mean(axis=0), rtol=1e-12)
            assert 0 < la.input_wins.mean() < 1 and la.gate is not None
        else:
            w = np.exp(-np.exp(mixers[la.layer].time_decay.detach().double().numpy()))  # from the model's own weight
            np.testing.assert_allclose(la.time_constants, 1 / (1 - w), rtol=1e-10)
            np.testing.assert_allclose(la.flow_spectral[4], (w ** 4).max(), rtol=1e-10)
            assert np.all((la.current_share > 0) & (la.current_share <= 1))
        assert la.memory is not None and la.units
    assert an.explore is not None and f"layer {rc.layers[-1]}" in an.summary() and "recomputed: " in an.summary()
    page = out.read_text(encoding="utf-8")
    assert '<section id="layermap"><h2>Layer map</h2>' in page and "Explore the channels" in page
    assert f"Inside the recurrent layers of a {type(model).__name__}" in page
    for la in an.layers:
        assert f'<section id="layer{la.layer}">' in page
    if kind == "mlstm":
        assert "How full the associative memory is" in page and "forget gate sigmoid(f)" in page
    else:
        assert "current token&#x27;s share of the readout" in page and "receptance sigmoid(r)" in page


@pytest.mark.parametrize("kind", ["mlstm", "rwkv"])
def test_analyze_layer_of_our_own_layers(kind, tmp_path):
    from hiddenstate.kinds.mlstm.analysis import MLSTMAnalysis
    from hiddenstate.kinds.rwkv.analysis import RWKVAnalysis
    from hiddenstate.probe.block_analysis import analyze_layer
    from hiddenstate.report.family_page import build_mamba_report

    blk = random_gates_mlstm() if kind == "mlstm" else RWKVTimeMix(6, 5, rng=np.random.default_rng(0))
    u = np.random.default_rng(4).normal(size=(30, 2, blk.d_model))
    text = "to be or not to be, that is it"
    an = analyze_layer(blk, u, max_lag=5, text=text)
    assert isinstance(an, MLSTMAnalysis if kind == "mlstm" else RWKVAnalysis) and an.meta["kind"] == kind
    _, rec = kinds.get_kind(kind).run(blk, u)
    la = an.layers[0]
    keep = rec.forget if kind == "mlstm" else rec.decay
    np.testing.assert_allclose(la.time_constants, 1 / (1 - keep.mean(axis=(0, 1))), rtol=1e-10)
    assert an.explore["signals"]["y"].shape[0] == len(text) and "fixed points" in an.not_measured
    page = build_mamba_report(tmp_path / "p.html", an, title=kind).read_text(encoding="utf-8")
    assert "Explore the channels" in page and '<section id="layer0">' in page
    with pytest.raises(TypeError, match="block must be a hiddenstate MLSTMLayer or RWKVTimeMix; got Mamba"):
        analyze_layer(hs.Mamba(4), u)


def test_an_xlstm_model_in_float64_agrees_to_float64_round_off():
    # what separates ours from a float32 model is transformers' float32 arithmetic, not the mapping: in float64
    # (state dtype too; the config's validator allows float32/bfloat16/float16 only) it agrees to 1e-14
    model = build("xlstm", norm_reduction_force_float32=False)
    object.__setattr__(model.config, "inference_state_dtype", "float64")
    for block in model.backbone.blocks:
        block.mlstm_layer.mlstm_backend.__init__(model.config)  # its kernels bound to the state dtype
    rc = recompute_layers(model.double(), ids_for())
    assert rc.dtype == "float64" and max(rc.errors) <= 1e-12


def test_an_xlstm_model_that_runs_its_layers_on_chunks_is_refused_in_one_line():
    # T above config.max_inference_chunksize: each layer runs once per chunk of steps (module docstring)
    model = build("xlstm", max_inference_chunksize=10)
    with pytest.raises(ValueError, match=r"^layer 0 \(xLSTMLayer\) must run once in the model's forward pass to be "
                                         r"recomputed; it ran 3 times\.$"):
        recompute_layers(model, ids_for(T=24))
    assert max(recompute_layers(model, ids_for(T=10)).errors) <= 2e-5
