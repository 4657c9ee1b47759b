"""The delta-rule families (qwen3_next, olmo_hybrid, kimi_linear): every recurrent layer recomputed exactly, then inspected.

Each family's tiny random model is built from a small config on the CPU (seeded, float32, no
download; MoE feed-forwards and the attention layers included), the recurrent mixers' weights
redrawn so that their decays lie mostly between 0.5 and 1 (at transformers' initialisation of a
tiny model many decays are near 0 and the state keeps little beyond its last write). What the recomputation is held
to comes from the model itself: the mixer's output its own forward hook saw (within the float32
tolerance; transformers computes these layers in float32 internally whatever the model's
dtype: its ``torch_chunk_gated_delta_rule`` / ``chunk_kimi_delta_attention`` cast q, k, v, g and
beta to float32, and the gated norms compute in float32) and the matrix and convolution states
its own cache holds after the same ids (``use_cache=True``). T = 150 crosses their 64-step
chunks (and ours). The delta rule's output has no skip term: all of it passes through ``S_t``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.interop import families  # noqa: E402
from hiddenstate.interop.families.hooks import estimate_bytes, recompute_layers, tolerance  # noqa: E402
from hiddenstate.kinds.delta.analysis import DeltaAnalysis  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
V = 50
TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
LINEAR = dict(linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=6,
              linear_conv_kernel_dim=3)


def qwen3_next(**over):
    cfg = dict(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
               num_key_value_heads=1, head_dim=8, layer_types=["linear_attention", "full_attention", "linear_attention"],
               num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16,
               decoder_sparse_step=1, **LINEAR, **TOKENS)
    return transformers.Qwen3NextForCausalLM(transformers.Qwen3NextConfig(**{**cfg, **over}))


def olmo_hybrid(**over):
    cfg = dict(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
               num_key_value_heads=2, layer_types=["linear_attention", "linear_attention", "full_attention"],
               linear_allow_neg_eigval=True, **LINEAR, **TOKENS)
    return transformers.OlmoHybridForCausalLM(transformers.OlmoHybridConfig(**{**cfg, **over}))


def kimi_linear(**over):
    cfg = dict(vocab_size=V, hidden_size=16, intermediate_size=32, moe_intermediate_size=16, num_hidden_layers=3,
               num_attention_heads=2, num_key_value_heads=2, kv_lora_rank=8, q_lora_rank=None, qk_rope_head_dim=4,
               v_head_dim=8, qk_nope_head_dim=4, num_local_experts=4, num_experts_per_tok=2, n_shared_experts=1,
               layer_types=["linear_attention", "full_attention", "linear_attention"],
               mlp_layer_types=["dense", "sparse", "sparse"], linear_num_heads=2, linear_head_dim=8,
               linear_conv_kernel_dim=3, **TOKENS)
    return transformers.KimiLinearForCausalLM(transformers.KimiLinearConfig(**{**cfg, **over}))


#: family -> (builder, kind, recurrent layers, roles, recurrent class, attention class)
BUILDERS = {
    "qwen3_next": (qwen3_next, "gated_delta", (0, 2), ["recurrent", "attention", "recurrent"],
                   "Qwen3NextGatedDeltaNet", "Qwen3NextAttention"),
    "olmo_hybrid": (olmo_hybrid, "gated_delta", (0, 1), ["recurrent", "recurrent", "attention"],
                    "OlmoHybridGatedDeltaNet", "OlmoHybridAttention"),
    "kimi_linear": (kimi_linear, "kda", (0, 2), ["recurrent", "attention", "recurrent"],
                    "KimiLinearDeltaAttention", "KimiLinearAttention"),
}
WORST = {}  # family -> worst relative error of a recomputed layer (printed with -s)


def build(name, seed=0, **over):
    """The tiny model, its recurrent mixers redrawn so that their state remembers (decays mostly 0.5 to 1)."""
    torch.manual_seed(seed)
    model = BUILDERS[name][0](**over).eval()
    with torch.no_grad():
        for mixer in families.family_of(name).mixers(model).values():
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
    return torch.from_numpy(np.random.default_rng(seed).integers(3, V, (N, T)))


def test_the_delta_families_are_registered_with_their_kinds():
    names = [f.name for f in families.registered()]
    for name, (_, kind, *_) in BUILDERS.items():
        fam = families.family_of(name)
        assert name in names and fam.kind == kind and fam.notes and "float32" in fam.notes
        assert families.BLOCKS[kind] is type(fam.block(build(name), BUILDERS[name][2][0]))


@pytest.mark.parametrize("name", list(BUILDERS))
def test_every_recurrent_layer_is_recomputed_to_the_models_own_output_and_cache(name):
    model = build(name)
    ids = ids_for()
    rc = recompute_layers(model, ids)
    _, kind, recurrent, roles, rec_cls, att_cls = BUILDERS[name]
    assert rc.family.name == name and rc.layers == recurrent and rc.dtype == "float32"
    assert [e.role for e in rc.layer_map] == roles
    assert {e.class_name for e in rc.layer_map} == {rec_cls, att_cls}
    for e in rc.layer_map:
        assert type(model.get_submodule(e.path)).__name__ == e.class_name
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
        assert 0.5 < rec.decay.mean() < 0.99  # the decays of these weights neither erase nor freeze the state
    per = estimate_bytes(model, ids.shape[1], ids.shape[0])
    M = model.config.hidden_size
    for i, rec in zip(rc.layers, rc.records):  # the record's arrays, plus the hooked input and output (float32)
        assert per[i] == sum(a.nbytes for a in rec if isinstance(a, np.ndarray)) + 2 * ids.numel() * M * 4


@pytest.mark.parametrize("name", list(BUILDERS))
def test_inspect_model_gives_the_delta_analysis_with_the_effective_rank_and_the_layer_map(name, tmp_path):
    model = build(name)
    ids = ids_for(T=60)
    text = "the cat sat on the mat, and the dog sat on the log, and so on"[:60]
    out = tmp_path / f"{name}.html"
    an = hs.inspect_model(model, ids, text=text, out=out, max_lag=5)
    rc = recompute_layers(model, ids)
    _, kind, recurrent, roles, rec_cls, att_cls = BUILDERS[name]
    assert isinstance(an, DeltaAnalysis) and an.meta["kind"] == kind
    assert [la.layer for la in an.layers] == list(recurrent) and [la.recomputed for la in an.layers] == list(rc.errors)
    for la, rec in zip(an.layers, rc.records):
        np.testing.assert_array_equal(la.record.recurrent, rec.recurrent)
        sv = np.linalg.svd(rec.recurrent, compute_uv=False)  # (T, N, Hv, min(Dk, Dv))
        p = sv / sv.sum(axis=-1, keepdims=True)
        plogp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)  # 0 log 0 = 0 (a rank-1 first state)
        erank = np.exp(-plogp.sum(axis=-1)).mean(axis=1)  # (T, Hv)
        np.testing.assert_allclose(la.effective_rank, erank, rtol=1e-10)
        assert la.effective_rank.shape == (60, rec.recurrent.shape[2]) and la.effective_rank.min() >= 1
        assert la.effective_rank[-1].mean() > la.effective_rank[0].mean()  # the memory fills as it reads
        np.testing.assert_allclose(la.time_constants, 1 / (1 - rec.decay.mean(axis=(0, 1))), rtol=1e-10)
        assert la.flow_spectral[0] == 1.0 and la.flow_spectral.shape == (6,)
    assert an.explore is not None and "recomputed: " in an.summary()
    page = out.read_text(encoding="utf-8")
    assert '<section id="layermap"><h2>Layer map</h2>' in page and f"{len(recurrent)} of its 3 layers are recurrent" in page
    for i, role in enumerate(roles):
        cls = rec_cls if role == "recurrent" else att_cls
        ffn = an.layer_map[i].parts  # every layer's MLP or MoE, listed after its mixer (Qwen3-Next's MoE was missing)
        assert ffn and ffn[0][0] in ("mlp", "moe")
        assert f"<td>{role} + {ffn[0][0]}</td><td style=\"text-align:left\">{cls} + {ffn[0][1]}</td>" in page
        assert (f'<section id="layer{i}">' in page) == (role == "recurrent")
    assert "How full the associative memory is" in page and "effective rank of S_T" in page
    assert f"Inside the recurrent layers of a {type(model).__name__}" in page


def test_a_conv_activation_other_than_silu_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match=r"Qwen3NextGatedDeltaNet's activation \(hidden_act\) must be 'silu'.*got "
                                         r"'gelu'"):
        recompute_layers(build("qwen3_next", hidden_act="gelu"), ids_for(T=8))
