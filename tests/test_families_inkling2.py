"""Inkling 2 and its looped variant (issue 34): scaled residual short convolutions, the loop named, not faked.

The tiny random models come from ``Family.tiny_config`` (seeded, float32, no download), their
short convolutions' taps redrawn (0.3 N(0, 1)). What the recomputation is held to comes from the
model itself: the output its own forward hook saw and the convolution window its own cache keeps
(conv state 2 of each layer, ``post_attention_convolution``). The looped layers run more than
once per forward pass; they are in the layer map as ``"looped"`` with their message gates, and
a request to record one is refused by name.
"""

from __future__ import annotations

import dataclasses
import math
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

#: family -> (recorded layers, looped layers)
EXPECTED = {"inkling2_text": ((0, 1, 2, 3), ()), "inkling2": ((0, 1, 2, 3), ()),
            "inkling2_loop_text": ((0, 1, 4, 5), (2, 3)), "inkling2_loop": ((0, 1, 4, 5), (2, 3))}


def build(name, seed=0):
    fam = families.family_of(name)
    torch.manual_seed(seed)
    model = getattr(transformers, fam.classes[0])(fam.tiny_config()).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "convolution" in pname or "sconv" in pname:
                p.copy_(0.3 * torch.randn_like(p))
    return model


def ids_for(seed=1, N=2, T=24):
    return torch.from_numpy(np.random.default_rng(seed).integers(3, 45, (N, T)))


def rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


def text_model(model):
    return model.model.language_model if hasattr(model.model, "language_model") else model.model


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_layer_outside_the_loop_is_recomputed_to_the_models_own_output_and_cache(name):
    model = build(name)
    ids = ids_for()
    rc = recompute_layers(model, ids)
    recorded, looped = EXPECTED[name]
    assert rc.family.kind == "shortconv" and rc.layers == recorded
    assert [e.index for e in rc.layer_map if e.role == "looped"] == list(looped)
    for e in rc.layer_map:
        assert e.path.endswith(f"layers.{e.index}.post_attention_convolution")
        full = text_model(model).config.layer_types[e.index] == "hybrid"
        roles = [r for r, _, _ in e.parts]
        assert roles[:3] == ["attention"] + [f"{'dynamic ' if full else ''}short convolution ({w})"
                                             for w in ("keys", "values")]
        assert roles[3:5] == ["moe", "short convolution (MoE output)"]
        assert roles[5:] == (["loop message gate (over passes)"] * 4 if e.index in looped else [])
        for _, cls, path in e.parts:
            assert type(model.get_submodule(path)).__name__ == cls
    assert all(0 <= err <= tolerance(torch.float32) for err in rc.errors), rc.errors
    with torch.no_grad():
        cache = text_model(model)(ids, use_cache=True).cache
    for i, rec in zip(rc.layers, rc.records):
        theirs = cache.get_conv_state(i, state_idx=2).double().numpy()[..., 1:]
        assert rel(rec.conv[-1], theirs) <= 1e-6, i


def test_the_output_scale_is_the_models():
    model = build("inkling2_text")
    fam = families.family_of(model)
    blk = fam.block(model, 1)
    np.testing.assert_allclose(blk.params["out_proj.weight"], np.eye(16) / math.sqrt(5), rtol=0, atol=1e-15)
    unscaled = dataclasses.replace(fam, to_block=lambda mixer, config: inkling_block(mixer, config))
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(registry._REGISTRY, "inkling2_text", unscaled)
        with pytest.raises(ValueError, match=r"^layer 0 \(Inkling2ShortConvolution\) recomputed by our ShortConv"):
            recompute_layers(model, ids_for())


def test_a_looped_layer_is_refused_by_name_and_runs_once_per_pass():
    model = build("inkling2_loop_text")
    with pytest.raises(ValueError, match=r"must be a recurrent layer|layers? .*recurrent"):
        recompute_layers(model, ids_for(), layers=[2])
    calls = []
    conv = model.model.layers[2].post_attention_convolution
    h = conv.register_forward_hook(lambda *a: calls.append(1))
    with torch.no_grad():
        model(ids_for(), use_cache=False)
    h.remove()
    assert len(calls) == model.config.loop_num_passes == 2  # one time step, two passes: not one state per step
    assert "recurrence over the passes, not over time" in families.family_of(model).notes


@pytest.mark.parametrize("name", ["inkling2_text", "inkling2_loop"])
def test_inspect_model_from_the_object_and_its_directory(name, tmp_path):
    model = build(name)
    model.save_pretrained(tmp_path / "m")
    ids = ids_for(N=1, T=20)
    a, b = hs.inspect_model(model, ids), hs.inspect_model(tmp_path / "m", ids)
    assert [la.layer for la in a.layers] == [la.layer for la in b.layers] == list(EXPECTED[name][0])
    for x, y in zip(a.layers, b.layers):
        np.testing.assert_array_equal(x.record.conv, y.record.conv)
