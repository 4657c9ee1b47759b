"""Inkling (issue 34): residual depthwise causal convolutions, held to each model's own output and cache.

The tiny random models come from ``Family.tiny_config`` (seeded, float32, no download), their
short convolutions' taps redrawn (0.3 N(0, 1)) so that the window matters against the residual.
What the recomputation is held to comes from the model itself: the output its own forward hook
saw, and the convolution window its own cache keeps (conv state 2 of each layer, ``attn_sconv``)
after a prefill and after a prefill then one token a call.
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
from hiddenstate.interop.families.hooks import recompute_layers, tolerance  # noqa: E402
from hiddenstate.interop.families.inkling_text import inkling_block  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

NAMES = ["inkling_text", "inkling_mm_model"]
PARTS = [("attention", "InklingAttention"), ("short convolution (keys)", "InklingShortConvolution"),
         ("short convolution (values)", "InklingShortConvolution"), ("mlp", "InklingMLP"),
         ("short convolution (MLP output)", "InklingShortConvolution")]


def build(name, seed=0):
    fam = families.family_of(name)
    torch.manual_seed(seed)
    model = getattr(transformers, fam.classes[0])(fam.tiny_config()).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "sconv" in pname:
                p.copy_(0.3 * torch.randn_like(p))
    return model


def ids_for(seed=1, N=2, T=24):
    return torch.from_numpy(np.random.default_rng(seed).integers(3, 45, (N, T)))


def rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


def text_model(model):
    return model.model.language_model if hasattr(model.model, "language_model") else model.model


@pytest.mark.parametrize("name", NAMES)
def test_every_layer_is_recomputed_to_the_models_own_output_and_cache(name):
    model = build(name)
    ids = ids_for()
    rc = recompute_layers(model, ids)
    assert rc.family.name == name and rc.family.kind == "shortconv" and rc.layers == (0, 1, 2, 3)
    assert [(e.role, e.class_name) for e in rc.layer_map] == [("recurrent", "InklingShortConvolution")] * 4
    for e in rc.layer_map:
        assert e.path.endswith(f"layers.{e.index}.attn_sconv")
        ffn = ("moe", "InklingMoE") if e.index >= 2 else ("mlp", "InklingMLP")
        assert [(r, c) for r, c, _ in e.parts] == PARTS[:3] + [ffn] + PARTS[4:]
        for _, cls, path in e.parts:
            assert type(model.get_submodule(path)).__name__ == cls
    assert rc.tolerance == tolerance(torch.float32) and all(0 <= err <= 1e-5 for err in rc.errors), rc.errors
    print(f"{name}: worst recomputed layer {max(rc.errors):.2e}")
    with torch.no_grad():
        cache = text_model(model)(ids, use_cache=True).cache
    for i, rec in zip(rc.layers, rc.records):
        theirs = cache.get_conv_state(i, state_idx=2).double().numpy()[..., 1:]  # attn_sconv's window
        assert rec.conv.shape == (ids.shape[1], ids.shape[0], 16, 3)
        assert rel(rec.conv[-1], theirs) <= 1e-5, i
        assert (rec.B == 1).all() and (rec.C == 1).all()  # the gates fixed open


def test_the_residual_and_the_window_are_both_needed():
    model = build("inkling_text")
    fam = families.family_of(model)
    ids = ids_for()

    def without_residual(mixer, config):
        blk = inkling_block(mixer, config)
        blk.params["conv.weight"][:, 0, -1] -= 1.0
        return blk

    def residual_only(mixer, config):
        blk = inkling_block(mixer, config)
        blk.params["conv.weight"][:] = 0.0
        blk.params["conv.weight"][:, 0, -1] = 1.0
        return blk

    for wrong in (without_residual, residual_only):
        with pytest.MonkeyPatch.context() as mp:
            mp.setitem(registry._REGISTRY, "inkling_text", dataclasses.replace(fam, to_block=wrong))
            with pytest.raises(ValueError, match=r"^layer 0 \(InklingShortConvolution\) recomputed by our ShortConv "
                                                 r"block differs from the model's own output"):
                recompute_layers(model, ids)


def test_the_three_unrecorded_convolutions_are_the_same_recurrence():
    model = build("inkling_text")
    layer = model.model.layers[1]
    seen = {}
    mods = {"k": layer.self_attn.k_sconv, "v": layer.self_attn.v_sconv, "mlp": layer.mlp_sconv}
    hooks = [m.register_forward_hook(lambda mod, a, kw, out, n=n: seen.__setitem__(n, (a[0], out)), with_kwargs=True)
             for n, m in mods.items()]
    with torch.no_grad():
        model(ids_for(), use_cache=False)
    for h in hooks:
        h.remove()
    for n, m in mods.items():
        u, theirs = (t.double().numpy() for t in seen[n])
        ours, _, _ = inkling_block(m, model.config).forward(u)
        assert rel(ours, theirs) <= 1e-5, n


def test_token_by_token_decoding_through_the_cache_equals_our_carried_state():
    model = build("inkling_text")
    fam = families.family_of(model)
    ids = ids_for(T=11)
    mixers = fam.mixers(model)
    calls = {i: [] for i in mixers}
    hooks = [m.register_forward_hook(lambda mod, a, kw, out, i=i: calls[i].append(
        tuple(x.double().numpy() for x in fam.hooked(a, kw, out)[:2])), with_kwargs=True) for i, m in mixers.items()]
    with torch.no_grad():
        cache = model(ids[:, :6], use_cache=True).cache
        for t in range(6, 11):
            cache = model(ids[:, t:t + 1], cache=cache, use_cache=True).cache
    for h in hooks:
        h.remove()
    for i, seen in calls.items():
        assert [u.shape[1] for u, _ in seen] == [6, 1, 1, 1, 1, 1]
        blk, state = fam.block(model, i), None
        for u, theirs in seen:
            ours, state, _ = blk.forward(u, state)
            assert rel(ours, theirs) <= 1e-5, i
        assert rel(state.conv, cache.get_conv_state(i, state_idx=2).double().numpy()[..., 1:]) <= 1e-5, i


def test_the_multimodal_model_is_read_through_its_text_backbone_and_says_the_towers_are_not_ours():
    model = build("inkling_mm_model")
    fam = families.family_of(model)
    assert families.family_of(model.model) is fam
    assert all(e.path.startswith("model.language_model.layers.") for e in fam.layer_map(model))
    assert "vision and audio towers (model.vision_tower, model.audio_tower) are not ours" in fam.notes
    backbone = model.model.language_model
    assert families.family_of(backbone).name == "inkling_text"
    ids = ids_for(T=20)
    a, b = recompute_layers(model, ids), recompute_layers(backbone, ids)
    for x, y in zip(a.records, b.records):
        np.testing.assert_array_equal(x.conv, y.conv)


@pytest.mark.parametrize("name", NAMES)
def test_inspect_model_from_the_object_and_its_directory(name, tmp_path):
    model = build(name)
    model.save_pretrained(tmp_path / "m")
    ids = ids_for(N=1, T=20)
    out = tmp_path / "r.html"
    a = hs.inspect_model(model, ids, out=out, max_lag=5)
    b = hs.inspect_model(tmp_path / "m", ids)
    assert a.meta["kind"] == "shortconv" and [la.layer for la in a.layers] == [0, 1, 2, 3]
    np.testing.assert_array_equal(a.layers[0].record.conv, b.layers[0].record.conv)
    page = out.read_text(encoding="utf-8")
    assert "InklingShortConvolution" in page and "its memory exactly 3 steps" in page
