"""The Qwen3.5 kin of the gated delta rule: qwen3_5(_text), qwen3_5_moe(_text), qwen4_exp_text, lara_mini.

Each family's tiny random model (its ``tiny_config``: 4 layers, gated DeltaNet at 0, 1, 2 and
attention at 3, as the checkpoints' three of four; CPU, float32, seeded, no download) has its
recurrent mixers' weights redrawn so that their decays lie mostly between 0.5 and 1 (as
``tests/test_families_delta.py``). What the recomputation is held to comes from the model itself:
the mixer's output its forward hook saw (within the float32 tolerance) and the matrix and
convolution states its own cache holds after the same ids. T = 150 crosses the 64-step chunks.
The multimodal classes are read through their text backbone (the vision tower is not ours);
Qwen4-Exp's sigmoid output gate is the model's (a SiLU gate on the same weights misses it);
Lara-mini's fused ``in_proj`` is what its ``save_pretrained`` directory holds.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.cli import main  # noqa: E402
from hiddenstate.interop import families  # noqa: E402
from hiddenstate.interop.families import registry  # noqa: E402
from hiddenstate.interop.families.directory import load_model_dir  # noqa: E402
from hiddenstate.interop.families.hooks import recompute_layers, tolerance  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: family -> (recurrent class, attention class, feed-forward role and class)
FAMILIES = {
    "qwen3_5_text": ("Qwen3_5GatedDeltaNet", "Qwen3_5Attention", ("mlp", "Qwen3_5MLP")),
    "qwen3_5": ("Qwen3_5GatedDeltaNet", "Qwen3_5Attention", ("mlp", "Qwen3_5MLP")),
    "qwen3_5_moe_text": ("Qwen3_5MoeGatedDeltaNet", "Qwen3_5MoeAttention", ("moe", "Qwen3_5MoeSparseMoeBlock")),
    "qwen3_5_moe": ("Qwen3_5MoeGatedDeltaNet", "Qwen3_5MoeAttention", ("moe", "Qwen3_5MoeSparseMoeBlock")),
    "qwen4_exp_text": ("Qwen4ExpTextGatedDeltaNet", "Qwen4ExpTextAttention", ("moe", "Qwen4ExpTextSparseMoeBlock")),
    "qwen4_exp": ("Qwen4ExpTextGatedDeltaNet", "Qwen4ExpTextAttention", ("moe", "Qwen4ExpTextSparseMoeBlock")),
    "lara_mini": ("LaraMiniGatedDeltaNet", "LaraMiniAttention", ("moe", "LaraMiniSparseMoeBlock")),
    "minicpmv4_6": ("Qwen3_5GatedDeltaNet", "Qwen3_5Attention", ("mlp", "Qwen3_5MLP")),
    "minicpmv4_7": ("Qwen3_5GatedDeltaNet", "Qwen3_5Attention", ("mlp", "Qwen3_5MLP")),
    "minicpm_ocr": ("Qwen3_5GatedDeltaNet", "Qwen3_5Attention", ("mlp", "Qwen3_5MLP")),
}
WORST = {}  # family -> worst relative error of a recomputed layer (printed with -s)


def build(name, seed=0, config=None):
    """The tiny model, its recurrent mixers redrawn so that their state remembers (decays mostly 0.5 to 1)."""
    fam = families.family_of(name)
    torch.manual_seed(seed)
    model = getattr(transformers, fam.classes[0])(fam.tiny_config() if config is None else config).eval()
    with torch.no_grad():
        for mixer in fam.mixers(model).values():
            for pname, p in mixer.named_parameters():
                if pname.endswith("A_log"):
                    p.copy_(torch.empty_like(p).uniform_(0.02, 0.3).log())
                elif pname.endswith("dt_bias"):
                    p.copy_(0.5 * torch.randn_like(p))
                elif "norm" in pname:
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                else:
                    p.copy_(0.3 * torch.randn_like(p))
    return model


def ids_for(seed=1, N=2, T=150):
    return torch.from_numpy(np.random.default_rng(seed).integers(3, 45, (N, T)))


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_recurrent_layer_is_recomputed_to_the_models_own_output_and_cache(name):
    model = build(name)
    ids = ids_for()
    rc = recompute_layers(model, ids)
    rec_cls, att_cls, (ffn_role, ffn_cls) = FAMILIES[name]
    assert rc.family.name == name and rc.family.kind == "gated_delta" and rc.layers == (0, 1, 2)
    assert [(e.role, e.class_name) for e in rc.layer_map] == [("recurrent", rec_cls)] * 3 + [("attention", att_cls)]
    for e in rc.layer_map:
        assert type(model.get_submodule(e.path)).__name__ == e.class_name
        assert e.parts[0] == (ffn_role, ffn_cls, e.path.rsplit(".", 1)[0] + ".mlp")
        assert type(model.get_submodule(e.parts[0][2])).__name__ == ffn_cls
    assert rc.tolerance == tolerance(torch.float32) and all(0 <= err <= rc.tolerance for err in rc.errors)
    WORST[name] = max(rc.errors)
    print(f"{name}: worst recomputed layer {max(rc.errors):.2e} (T={ids.shape[1]}, N={ids.shape[0]})")
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values  # the model's own final states after the same ids
    for i, rec in zip(rc.layers, rc.records):
        S = cache.get_recurrent_state(i).double().numpy()  # (N, Hv, Dk, Dv)
        conv = cache.get_conv_state(i).double().numpy()  # (N, Dc, K): the last K inputs; ours keeps K - 1
        assert rec.recurrent.shape[:2] == (ids.shape[1], ids.shape[0]) and rec.recurrent.shape[1:] == S.shape
        assert np.abs(rec.recurrent[-1] - S).max() <= 2e-5 * np.abs(S).max()
        assert np.abs(rec.conv[-1] - conv[..., 1:]).max() <= 2e-5 * np.abs(conv).max()
        assert 0.5 < rec.decay.mean() < 0.99


@pytest.mark.parametrize("name, text", [("qwen3_5", "qwen3_5_text"), ("qwen3_5_moe", "qwen3_5_moe_text"),
                                        ("minicpmv4_6", "qwen3_5_text"), ("minicpmv4_7", "qwen3_5_text"),
                                        ("minicpm_ocr", "qwen3_5_text"), ("qwen4_exp", "qwen4_exp_text")])
def test_a_multimodal_model_is_read_through_its_text_backbone_and_says_the_vision_tower_is_not_ours(name, text):
    model = build(name)
    fam = families.family_of(model)
    assert fam.name == name and families.family_of(model.model).name == name  # the base model too
    assert all(e.path.startswith("model.language_model.layers.") for e in fam.layer_map(model))
    assert not any("visual" in e.path or any("visual" in p[2] for p in e.parts) for e in fam.layer_map(model))
    tower = "vision tower (model.visual) is not ours" if name.startswith("qwen") else \
        "vision encoder and its resampler (model.vision_tower, model.merger) are not ours"
    assert tower in fam.notes and "the layer map is the text backbone's (model.language_model)" in fam.notes
    for attr in ("visual",) if name.startswith("qwen") else ("vision_tower", "merger"):
        assert isinstance(getattr(model.model, attr), torch.nn.Module)
    backbone = model.model.language_model  # its text model alone: the same layers, the same records
    assert families.family_of(backbone).name == text
    ids = ids_for(T=70)
    a, b = recompute_layers(model, ids), recompute_layers(backbone, ids)
    assert a.layers == b.layers == (0, 1, 2)
    for x, y in zip(a.records, b.records):
        for field in x._fields:
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field), err_msg=field)


def test_qwen4_exp_s_sigmoid_output_gate_is_computed_and_a_silu_gate_on_the_same_weights_misses_it(monkeypatch):
    model = build("qwen4_exp_text")
    fam = families.family_of(model)
    mixer = fam.mixers(model)[0]
    assert mixer.norm.activation == "sigmoid" and fam.block(model, 0).spec.gate == "sigmoid"
    ids = ids_for(T=40)
    assert max(recompute_layers(model, ids).errors) <= tolerance(torch.float32)

    def silu(mixer, config):
        blk = fam.to_block(mixer, config)
        blk.spec = blk.spec._replace(gate="silu")
        return blk

    monkeypatch.setitem(registry._REGISTRY, "qwen4_exp_text", dataclasses.replace(fam, to_block=silu))
    with pytest.raises(ValueError, match=r"^layer 0 \(Qwen4ExpTextGatedDeltaNet\) recomputed by our GatedDeltaNet "
                                         r"block differs from the model's own output"):
        recompute_layers(model, ids)


def test_qwen4_exp_without_output_gate_type_gates_with_hidden_act():
    config = families.family_of("qwen4_exp_text").tiny_config()
    config.output_gate_type = None
    model = build("qwen4_exp_text", config=config)
    assert families.family_of(model).block(model, 1).spec.gate == "silu"
    assert max(recompute_layers(model, ids_for(T=40)).errors) <= tolerance(torch.float32)


def test_an_output_gate_or_a_conv_activation_the_layer_does_not_compute_is_refused_by_name():
    model = build("qwen4_exp_text")
    families.family_of(model).mixers(model)[2].norm.activation = "gelu"  # the config refuses it; a module may not
    with pytest.raises(ValueError, match=r"^the Qwen4ExpTextGatedDeltaNet's output gate activation \(output_gate_type "
                                         r"or hidden_act\) must be one of 'silu', 'sigmoid' .*; got 'gelu'\.$"):
        recompute_layers(model, ids_for(T=8))
    config = families.family_of("qwen3_5_text").tiny_config()
    config.hidden_act = "gelu"
    with pytest.raises(ValueError, match=r"Qwen3_5GatedDeltaNet's activation \(hidden_act\) must be 'silu'.*'gelu'"):
        recompute_layers(build("qwen3_5_text", config=config), ids_for(T=8))


def test_lara_mini_s_directory_holds_the_fused_in_proj_and_loads_split(tmp_path):
    model = build("lara_mini")
    model.save_pretrained(tmp_path)
    from safetensors.torch import load_file

    stored = {k: v for k, v in load_file(tmp_path / "model.safetensors").items()
              if k.startswith("model.layers.0.linear_attn.")}
    assert {"model.layers.0.linear_attn.in_proj.weight", "model.layers.0.linear_attn.out_norm.weight"} <= set(stored)
    assert not any("in_proj_" in k for k in stored)
    mixer = model.model.layers[0].linear_attn
    split = [mixer.in_proj_qkv.weight, mixer.in_proj_z.weight, mixer.in_proj_b.weight, mixer.in_proj_a.weight]
    assert torch.equal(stored["model.layers.0.linear_attn.in_proj.weight"], torch.cat(split))  # rows [q|k|v|z|b|a]
    loaded = load_model_dir(tmp_path)
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    ids = ids_for(T=30)
    a, b = hs.inspect_model(model, ids), hs.inspect_model(tmp_path, ids)
    assert [la.recomputed for la in a.layers] == [la.recomputed for la in b.layers]
    np.testing.assert_array_equal(a.layers[0].record.recurrent, b.layers[0].record.recurrent)


def test_the_cli_inspects_a_qwen3_5_directory(tmp_path, capsys):
    model = build("qwen3_5")
    model.save_pretrained(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["model_type"] == "qwen3_5" and config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    np.save(tmp_path / "ids.npy", ids_for(N=1, T=20)[0].numpy())
    out = tmp_path / "r.html"
    assert main(["inspect", os.fspath(tmp_path / "m"), "--ids", os.fspath(tmp_path / "ids.npy"),
                 "--out", os.fspath(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == f"report: {out}"
    assert [line.split(":")[0] for line in lines if line.startswith("layer ")] == ["layer 0", "layer 1", "layer 2"]
    page = out.read_text(encoding="utf-8")
    assert "3 of its 4 layers are recurrent" in page and "Qwen3_5GatedDeltaNet" in page
    np.save(tmp_path / "bad.npy", np.array([3, 50]))  # vocab_size 50 is the text config's
    assert main(["inspect", os.fspath(tmp_path / "m"), "--ids", os.fspath(tmp_path / "bad.npy")]) == 2
    assert "0 <= id < vocab_size=50" in capsys.readouterr().err
