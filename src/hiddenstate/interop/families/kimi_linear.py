"""transformers ``KimiLinearForCausalLM`` (Kimi Linear): Kimi Delta Attention and MLA layers, MoE or MLP feed-forwards.

``model.layers[i].self_attn`` is a ``KimiLinearDeltaAttention`` (Kimi Delta Attention, the gated
delta rule with one decay per key channel) where ``config.layer_types[i]`` is
``"linear_attention"`` and a ``KimiLinearAttention`` (multi-head latent attention) where it is
``"full_attention"``; the feed-forward is a MoE (``KimiLinearMoE``) where
``config.mlp_layer_types[i]`` is ``"sparse"``. The recurrent mixer is exactly our
:class:`~hiddenstate.kinds.delta.block.KimiDeltaAttention` when ``hidden_act`` is ``"silu"``.
"""

from __future__ import annotations

from hiddenstate.interop.families.delta_blocks import kda_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config"]


def _role(layer, index: int) -> str:
    return "recurrent" if layer.block_type == "linear_attention" else "attention"


def tiny_config():
    """A 3-layer ``KimiLinearConfig``: Kimi Delta Attention at layers 0 and 2, MLA at 1, MoE at 1 and 2.

    Returns
    -------
    transformers.KimiLinearConfig
        Random weights from it: ``transformers.KimiLinearForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.KimiLinearConfig(
        vocab_size=50, hidden_size=16, intermediate_size=32, moe_intermediate_size=16, num_hidden_layers=3,
        num_attention_heads=2, num_key_value_heads=2, kv_lora_rank=8, q_lora_rank=None, qk_rope_head_dim=4,
        v_head_dim=8, qk_nope_head_dim=4, num_local_experts=4, num_experts_per_tok=2, n_shared_experts=1,
        layer_types=["linear_attention", "full_attention", "linear_attention"],
        mlp_layer_types=["dense", "sparse", "sparse"], linear_num_heads=2, linear_head_dim=8,
        linear_conv_kernel_dim=3, pad_token_id=0, bos_token_id=1, eos_token_id=2)


FAMILY = Family(
    name="kimi_linear",
    classes=("KimiLinearForCausalLM", "KimiLinearModel"),
    kind="kda",
    layers=lambda model: decoder_layer_map(model, {"self_attn": _role}),
    to_block=lambda mixer, config: kda_block(mixer),
    notes="RMS norm before each mixer, the residual, and the MoE or MLP feed-forward: the model's own; transformers "
          "computes the delta rule and the gated norm in float32.",
    tiny_config=tiny_config,
)
