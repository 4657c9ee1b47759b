"""transformers ``Glm5NextForConditionalGeneration`` (GLM-5-Next): Kimi Delta Attention with a safe gate in its text model.

The model is multimodal; its text backbone ``model.language_model`` (a ``Glm5NextTextModel``)
holds the decoder layers, and the vision tower (``model.visual``) is not ours: it does not run on
ids alone, and the layer map lists the text layers only. ``layers[i].self_attn`` is a
``Glm5NextTextLinearAttention`` where ``text_config.layer_types[i]`` is ``"linear_attention"``
and a ``Glm5NextTextAttention`` (DeepSeek-style sparse attention with a top-k indexer) where it is
``"indexed_attention"``; ``mlp`` is a ``Glm5NextTextMoE`` where ``mlp_layer_types[i]`` is
``"sparse"`` (the layer map names it). Around each mixer and feed-forward sit hyper-connections
(``attn_hc``, ``ffn_hc``: the model's own; our block reads the mixer's input after them).

The delta-rule mixer is Kimi Delta Attention: separate q, k, v projections, the rank-D forget
gate ``f_b_proj(f_a_proj(u))`` plus ``dt_bias``, one ``A_log`` per head and, with
``linear_lower_bound`` set (-5 by default), the safe gate ``g = linear_lower_bound *
sigmoid(exp(A_log) (f + dt_bias))``: exactly our
:class:`~hiddenstate.kinds.delta.block.KimiDeltaAttention` with ``layout="glm5_next"`` and
``lower_bound=linear_lower_bound`` when ``hidden_act`` is ``"silu"``.
"""

from __future__ import annotations

from types import SimpleNamespace

from hiddenstate.interop.families.delta_blocks import kda_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config"]


def _role(layer, index: int) -> str:
    return "recurrent" if layer.block_type == "linear_attention" else "attention"


def _mlp(layer, index: int) -> str:
    return "moe" if type(layer.mlp).__name__.endswith("MoE") else "mlp"


def _layers(model) -> list:
    """The layer map of the text backbone, with module paths in the whole model."""
    text = SimpleNamespace(base_model=model.base_model.language_model, named_modules=model.named_modules)
    return decoder_layer_map(text, {"self_attn": _role}, parts={"mlp": _mlp})


def tiny_config():
    """A ``Glm5NextConfig`` with a 4-layer text model (KDA with the safe gate at 0, 1 and 3, indexed attention at 2).

    MoE feed-forwards from layer 1; a one-block vision tower (not run on ids).

    Returns
    -------
    transformers.Glm5NextConfig
        Random weights from it: ``transformers.Glm5NextForConditionalGeneration(tiny_config())``.
    """
    import transformers

    text = dict(vocab_size=50, hidden_size=16, intermediate_size=32, moe_intermediate_size=8, num_hidden_layers=4,
                num_attention_heads=2, num_key_value_heads=2, n_routed_experts=4, num_experts_per_tok=2,
                n_shared_experts=1, kv_lora_rank=8, q_lora_rank=8, qk_rope_head_dim=0, qk_nope_head_dim=8,
                v_head_dim=8, index_topk=4, index_head_dim=8, index_n_heads=2, index_kpool=2, hc_mult=2,
                hc_sinkhorn_iters=3, linear_head_dim=8, linear_num_heads=2, linear_conv_kernel_dim=3,
                layer_types=["linear_attention", "linear_attention", "indexed_attention", "linear_attention"],
                mlp_layer_types=["dense", "sparse", "sparse", "sparse"], pad_token_id=0, bos_token_id=1,
                eos_token_id=2)
    vision = dict(depth=1, hidden_size=16, num_heads=2, intermediate_size=16, out_hidden_size=16,
                  projection_intermediate_size=16, patch_size=2, image_size=8, spatial_merge_size=1)
    return transformers.Glm5NextConfig(text_config=text, vision_config=vision, image_token_id=45, video_token_id=46,
                                       image_start_token_id=47, image_end_token_id=48, video_start_token_id=49,
                                       video_end_token_id=44)


FAMILY = Family(
    name="glm5_next",
    classes=("Glm5NextForConditionalGeneration", "Glm5NextModel"),
    kind="kda",
    layers=_layers,
    to_block=lambda mixer, config: kda_block(mixer, "glm5_next"),
    notes="text backbone only (the vision tower is the model's own and not read); hyper-connections and RMS norm "
          "before each mixer, the MoE or MLP feed-forward: the model's own; transformers computes the delta rule and "
          "the gated norm in float32.",
    tiny_config=tiny_config,
)
