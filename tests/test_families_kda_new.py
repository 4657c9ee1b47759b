"""GLM-5-Next and Bailing-hybrid (issue 34): Kimi Delta Attention with the safe gate, held to each model's own output and cache.

Each family's tiny random model comes from its ``Family.tiny_config`` (seeded, float32, no
download; MoE feed-forwards, MLA / indexed attention, GLM-5-Next's hyper-connections and vision
tower included), the recurrent mixers' weights redrawn so that their decays lie mostly between
0.5 and 1 (for the safe gate ``lb sigmoid(exp(A_log) x)`` with lb = -5 that needs ``x`` well
below 0). What the recomputation is held to comes from the model itself: the mixer's output its
own forward hook saw (within the float32 tolerance: transformers computes the delta rule and the
gated norm in float32), the matrix and convolution states its own cache holds after the same ids
(a prefill of T = 150, crossing the 64-step chunks, and a prefill then one token a call), and the
safe gate's bound the model's config sets.
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
from hiddenstate.kinds.delta.block import KimiDeltaAttention  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: family -> (layout, recurrent layers, roles, the recurrent class, the attention class, the safe-gate config field)
EXPECTED = {
    "glm5_next": ("glm5_next", (0, 1, 3), ["recurrent", "recurrent", "attention", "recurrent"],
                  "Glm5NextTextLinearAttention", "Glm5NextTextAttention", "linear_lower_bound"),
    "bailing_hybrid": ("bailing_hybrid", (0, 2), ["recurrent", "attention", "recurrent"],
                       "BailingHybridDeltaAttention", "BailingHybridAttention", "kda_lower_bound"),
}


def text_config(cfg):
    return cfg.text_config if hasattr(cfg, "text_config") else cfg


def build(name, seed=0, **over):
    """The tiny model (``over`` set on its text config), its mixers redrawn so that their state remembers."""
    fam = families.family_of(name)
    cfg = fam.tiny_config()
    for k, v in over.items():
        setattr(text_config(cfg), k, v)
    torch.manual_seed(seed)
    model = getattr(transformers, fam.classes[0])(cfg).eval()
    safe = _bound(model, name) is not None
    with torch.no_grad():
        for mixer in fam.mixers(model).values():
            for pname, p in mixer.named_parameters():
                if pname.endswith("A_log"):
                    p.copy_(torch.empty_like(p).uniform_(0.5, 1.5).log() if safe else
                            torch.empty_like(p).uniform_(0.02, 0.3).log())
                elif pname.endswith("dt_bias"):
                    p.copy_((-3.0 if safe else 0.0) + 0.5 * torch.randn_like(p))
                elif "norm" in pname:
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                else:
                    p.copy_(0.3 * torch.randn_like(p))
    return model


def _bound(model, name):
    cfg = text_config(model.config)
    if name == "bailing_hybrid":
        return cfg.kda_lower_bound if cfg.kda_safe_gate else None
    return cfg.linear_lower_bound


def ids_for(seed=1, N=2, T=150):
    return torch.from_numpy(np.random.default_rng(seed).integers(3, 40, (N, T)))


def rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


def test_the_two_families_are_registered_as_kda_with_their_layout_and_safe_gate():
    for name, (layout, recurrent, *_) in EXPECTED.items():
        fam = families.family_of(name)
        assert fam.kind == "kda" and "float32" in fam.notes and name in families.__doc__
        model = build(name)
        assert families.family_of(model) is fam and families.family_of(model.model) is fam
        blk = fam.block(model, recurrent[0])
        assert type(blk) is KimiDeltaAttention and blk.spec.layout == layout and blk.spec.lower_bound == -5.0
        mixer = fam.mixers(model)[recurrent[0]]
        for k, v in blk.params.items():  # every weight the mixer's own, under its own name
            np.testing.assert_array_equal(v, mixer.get_parameter(k).detach().double().numpy(), err_msg=k)
        assert set(blk.params) == {k for k, _ in mixer.named_parameters()}


@pytest.mark.parametrize("safe", [True, False])
@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_kda_layer_is_recomputed_to_the_models_own_output_and_cache(name, safe):
    over = {} if safe else ({"kda_safe_gate": False} if name == "bailing_hybrid" else {"linear_lower_bound": None})
    model = build(name, **over)
    ids = ids_for()
    rc = recompute_layers(model, ids)
    _, recurrent, roles, rec_cls, att_cls, _ = EXPECTED[name]
    assert rc.family.name == name and rc.layers == recurrent and rc.dtype == "float32"
    assert [e.role for e in rc.layer_map] == roles
    assert {e.class_name for e in rc.layer_map} == {rec_cls, att_cls}
    for e in rc.layer_map:
        assert type(model.get_submodule(e.path)).__name__ == e.class_name
        assert [type(model.get_submodule(path)).__name__.endswith("MoE") for r, _, path in e.parts] == [
            r == "moe" for r, _, _ in e.parts] and len(e.parts) == 1
    assert rc.tolerance == tolerance(torch.float32) and all(0 <= err <= rc.tolerance for err in rc.errors)
    print(f"{name} (safe gate {safe}): worst recomputed layer {max(rc.errors):.2e} (T={ids.shape[1]})")
    with torch.no_grad():
        cache = model(ids, use_cache=True).cache  # the model's own final states after the same ids
    lb = _bound(model, name)
    for i, rec in zip(rc.layers, rc.records):
        S = cache.get_recurrent_state(i).double().numpy()  # (N, H, D, D)
        conv = cache.get_conv_state(i).double().numpy()  # (N, 3 H D, K): the last K inputs; ours keeps K - 1
        assert rec.recurrent.shape[:2] == (ids.shape[1], ids.shape[0]) and rec.recurrent.shape[1:] == S.shape
        print(f"  layer {i}: S_T vs cache {rel(rec.recurrent[-1], S):.2e}, conv {rel(rec.conv[-1], conv[..., 1:]):.2e}")
        assert rel(rec.recurrent[-1], S) <= 2e-5 and rel(rec.conv[-1], conv[..., 1:]) <= 2e-5
        assert 0.5 < rec.decay.mean() < 0.99  # the decays of these weights neither erase nor freeze the state
        if lb is not None:  # the safe gate bounds every log decay to (lb, 0)
            assert np.exp(lb) < rec.decay.min() and rec.decay.max() < 1


@pytest.mark.parametrize("name", list(EXPECTED))
def test_token_by_token_decoding_through_the_cache_equals_our_carried_state(name):
    model = build(name)
    fam = families.family_of(model)
    ids = ids_for(T=12)
    mixers = fam.mixers(model)
    calls = {i: [] for i in mixers}
    hooks = [m.register_forward_hook(lambda mod, a, kw, out, i=i: calls[i].append(
        tuple(x.double().numpy() for x in fam.hooked(a, kw, out)[:2])), with_kwargs=True) for i, m in mixers.items()]
    with torch.no_grad():
        cache = model(ids[:, :7], use_cache=True).cache
        for t in range(7, 12):
            cache = model(ids[:, t:t + 1], cache=cache, use_cache=True).cache
    for h in hooks:
        h.remove()
    for i, seen in calls.items():
        assert [u.shape[1] for u, _ in seen] == [7, 1, 1, 1, 1, 1]
        blk, state = fam.block(model, i), None
        for u, theirs in seen:
            ours, state, _ = blk.forward(u, state)
            assert rel(ours, theirs) <= 1e-5, i
        assert rel(state.recurrent, cache.get_recurrent_state(i).double().numpy()) <= 2e-5, i


@pytest.mark.parametrize("name", list(EXPECTED))
@pytest.mark.parametrize("what", ["act", "bound"])
def test_what_the_block_does_not_compute_is_refused_by_name_before_the_model_runs(name, what):
    field, cls = EXPECTED[name][5], EXPECTED[name][3]
    model = build(name, **({"hidden_act": "gelu"} if what == "act" else {field: 0.5}))
    calls = []
    model.register_forward_pre_hook(lambda module, args: calls.append(1))
    message = (rf"^the {cls}'s activation \(hidden_act\) must be 'silu'.*got 'gelu'\.$" if what == "act" else
               rf"^config\.{field} must be a finite negative number .*; got 0\.5\. Set it below 0, or turn the safe "
               r"gate off\.$")
    with pytest.raises(ValueError, match=message):
        recompute_layers(model, ids_for(T=8))
    assert not calls


@pytest.mark.parametrize("name", list(EXPECTED))
def test_inspect_model_gives_the_delta_analysis_with_the_layer_map(name, tmp_path):
    model = build(name)
    out = tmp_path / f"{name}.html"
    an = hs.inspect_model(model, ids_for(T=40), text="the cat sat on the mat, and the dog sat!", out=out, max_lag=5)
    _, recurrent, roles, rec_cls, att_cls, _ = EXPECTED[name]
    assert an.meta["kind"] == "kda" and [la.layer for la in an.layers] == list(recurrent)
    page = out.read_text(encoding="utf-8")
    assert f"{len(recurrent)} of its {len(roles)} layers are recurrent" in page
    assert f"Inside the recurrent layers of a {type(model).__name__}" in page and "effective rank of S_T" in page
    for la in an.layers:  # the time constants from the record's decays (the safe gate's)
        np.testing.assert_allclose(la.time_constants, 1 / (1 - la.record.decay.mean(axis=(0, 1))), rtol=1e-10)


def test_a_glm5_next_directory_checks_layers_and_ids_against_its_text_config_before_building(tmp_path):
    from hiddenstate.interop.families.directory import load_model_dir

    build("glm5_next").save_pretrained(tmp_path)
    where = f"from '{tmp_path / 'config.json'}'"
    with pytest.raises(ValueError, match=r"^layers must be layer indices with 0 <= i < num_hidden_layers=4 \("
                                         + f"{where}".replace("(", r"\(").replace(")", r"\)")):
        load_model_dir(tmp_path, layers=[1, 9])
    with pytest.raises(ValueError, match=r"vocab_size=50"):
        hs.inspect_model(tmp_path, np.array([[3, 60]]))
