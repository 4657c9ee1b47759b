"""transformers ``Qwen3NextForCausalLM`` (Qwen3-Next): gated DeltaNet and full attention layers, MoE or MLP feed-forwards.

``model.layers[i]`` holds ``linear_attn`` (a ``Qwen3NextGatedDeltaNet``, the gated delta rule of
Yang et al. 2024) where ``config.layer_types[i]`` is ``"linear_attention"``, and ``self_attn``
(gated full attention) where it is ``"full_attention"``; every layer's feed-forward is a sparse
MoE block (``Qwen3NextSparseMoeBlock``) or an MLP. The recurrent mixer is exactly our
:class:`~hiddenstate.kinds.delta.block.GatedDeltaNet` (``layout="qwen3_next"``) when ``hidden_act`` is
``"silu"`` (:func:`~hiddenstate.interop.families.delta_blocks.gated_delta_block`).
"""

from __future__ import annotations

from hiddenstate.interop.families.delta_blocks import gated_delta_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config"]

def tiny_config():
    """A 3-layer ``Qwen3NextConfig``: gated DeltaNet at layers 0 and 2, attention at 1, 4-expert MoE.

    Returns
    -------
    transformers.Qwen3NextConfig
        Random weights from it: ``transformers.Qwen3NextForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.Qwen3NextConfig(
        vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, layer_types=["linear_attention", "full_attention", "linear_attention"],
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16,
        decoder_sparse_step=1, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=6, linear_conv_kernel_dim=3, pad_token_id=0, bos_token_id=1, eos_token_id=2)


FAMILY = Family(
    name="qwen3_next",
    classes=("Qwen3NextForCausalLM", "Qwen3NextModel"),
    kind="gated_delta",
    layers=lambda model: decoder_layer_map(model, {"linear_attn": "recurrent", "self_attn": "attention"}),
    to_block=lambda mixer, config: gated_delta_block(mixer, "qwen3_next"),
    notes="RMS norm (1 + weight) before each mixer, the residual, and the MoE or MLP feed-forward: the model's own; "
          "transformers computes the delta rule and the gated norm in float32.",
    tiny_config=tiny_config,
)
