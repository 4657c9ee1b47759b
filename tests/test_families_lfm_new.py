"""LFM2-MoE and LFM3 (issue 34): LFM2's gated short convolution in two more families, held to each model's own output and cache.

Each family's tiny random model comes from its ``Family.tiny_config`` (seeded, float32, no
download; the MoE feed-forwards and the sliding-window attention included). What the
recomputation is held to comes from the model itself: the mixer's output its own forward hook
saw, the convolution window its own cache keeps after the same ids (a prefill, and a prefill
then one token a call through the cache), and the layer map names the parts the model has.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.interop import families  # noqa: E402
from hiddenstate.interop.families.hooks import recompute_layers, tolerance  # noqa: E402
from hiddenstate.kinds.shortconv.block import ShortConv  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: family -> (recurrent layers, each layer's (role, class), each layer's parts as (role, class))
EXPECTED = {
    "lfm2_moe": ((0, 2, 3),
                 [("recurrent", "Lfm2MoeShortConv"), ("attention", "Lfm2MoeAttention"),
                  ("recurrent", "Lfm2MoeShortConv"), ("recurrent", "Lfm2MoeShortConv")],
                 [[("mlp", "Lfm2MoeMLP")]] + [[("moe", "Lfm2MoeSparseMoeBlock")]] * 3),
    "lfm3": ((0, 3),
             [("recurrent", "Lfm3ShortConv"), ("attention", "Lfm3Attention"), ("attention", "Lfm3Attention"),
              ("recurrent", "Lfm3ShortConv")],
             [[("mlp", "Lfm3MLP")]] * 4),  # a family that names no parts: its feed-forward found
}


def build(name, seed=0, **over):
    fam = families.family_of(name)
    cfg = fam.tiny_config()
    for k, v in over.items():
        setattr(cfg, k, v)
    torch.manual_seed(seed)
    return getattr(transformers, fam.classes[0])(cfg).eval()


def ids_for(seed=1, N=2, T=24):
    return torch.from_numpy(np.random.default_rng(seed).integers(3, 50, (N, T)))


def rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


def test_the_two_families_are_registered_as_short_convolutions():
    for name in EXPECTED:
        fam = families.family_of(name)
        assert fam.kind == "shortconv" and fam.notes and name in families.__doc__
        model = build(name)
        assert families.family_of(model) is fam and families.family_of(model.model) is fam
        assert isinstance(fam.block(model, EXPECTED[name][0][0]), ShortConv)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_short_convolution_is_recomputed_to_the_models_own_output_and_cache(name):
    model = build(name)
    ids = ids_for()
    rc = recompute_layers(model, ids)
    recurrent, roles, parts = EXPECTED[name]
    assert rc.family.name == name and rc.layers == recurrent and rc.dtype == "float32"
    assert [(e.role, e.class_name) for e in rc.layer_map] == roles
    assert [[(r, c) for r, c, _ in e.parts] for e in rc.layer_map] == parts
    for e in rc.layer_map:
        assert type(model.get_submodule(e.path)).__name__ == e.class_name
        for _, cls, path in e.parts:
            assert type(model.get_submodule(path)).__name__ == cls
    assert rc.tolerance == tolerance(torch.float32) and all(0 <= err <= 1e-5 for err in rc.errors), rc.errors
    print(f"{name}: worst recomputed layer {max(rc.errors):.2e}")
    with torch.no_grad():
        cache = model(ids, use_cache=True).cache
    for i, rec in zip(rc.layers, rc.records):
        theirs = cache.get_conv_state(i).double().numpy()[..., 1:]  # K inputs kept; the oldest is read by no step
        assert rec.conv.shape[:2] == (ids.shape[1], ids.shape[0]) and rec.conv.shape[2:] == theirs.shape[1:]
        assert rel(rec.conv[-1], theirs) <= 1e-5, i
        print(f"{name} layer {i}: conv state vs cache {rel(rec.conv[-1], theirs):.2e}")


@pytest.mark.parametrize("name", list(EXPECTED))
def test_token_by_token_decoding_through_the_cache_equals_our_carried_state(name):
    model = build(name)
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
        assert rel(state.conv, cache.get_conv_state(i).double().numpy()[..., 1:]) <= 1e-5, i


@pytest.mark.parametrize("name", list(EXPECTED))
def test_biases_are_read_and_a_partial_set_is_refused_before_the_model_runs(name):
    model = build(name, conv_bias=True)
    assert max(recompute_layers(model, ids_for()).errors) <= 1e-5  # all three biases: ours too
    layer = EXPECTED[name][0][-1]
    model.model.layers[layer].conv.in_proj.bias = None
    calls = []
    model.register_forward_pre_hook(lambda module, args: calls.append(1))
    cls = EXPECTED[name][1][layer][1]
    with pytest.raises(ValueError, match=rf"^the {cls}'s in_proj, conv and out_proj must all have a bias or none .* "
                                         r"got \{'in_proj': False, 'conv': True, 'out_proj': True\}\.$"):
        recompute_layers(model, ids_for())
    assert not calls


@pytest.mark.parametrize("name", list(EXPECTED))
def test_inspect_model_reports_the_layer_map_with_its_parts(name, tmp_path):
    model = build(name)
    out = tmp_path / f"{name}.html"
    an = hs.inspect_model(model, ids_for(T=30), text="the cat sat on the mat, and so", out=out, max_lag=5)
    assert an.meta["kind"] == "shortconv" and [la.layer for la in an.layers] == list(EXPECTED[name][0])
    page = out.read_text(encoding="utf-8")
    assert f"Inside the recurrent layers of a {type(model).__name__}" in page
    for (role, cls), parts in zip(EXPECTED[name][1], EXPECTED[name][2]):  # each part shown beside its mixer
        roles, classes = " + ".join([role] + [r for r, _ in parts]), " + ".join([cls] + [c for _, c in parts])
        assert f"<td>{roles}</td><td style=\"text-align:left\">{classes}</td>" in page
    K = model.config.conv_L_cache
    assert f"its memory exactly {K - 1} steps" in page
