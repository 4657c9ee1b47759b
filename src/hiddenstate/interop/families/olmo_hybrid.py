"""transformers ``OlmoHybridForCausalLM`` (OLMo-hybrid): gated DeltaNet layers and at least one full attention layer.

``model.layers[i]`` is an ``OlmoHybridLinearAttentionDecoderLayer`` whose ``linear_attn`` is an
``OlmoHybridGatedDeltaNet`` where ``config.layer_types[i]`` is ``"linear_attention"``, and an
``OlmoHybridAttentionDecoderLayer`` (``self_attn``) elsewhere; transformers needs at least one
attention layer. The recurrent mixer is exactly our :class:`~hiddenstate.kinds.delta.block.GatedDeltaNet`
(``layout="olmo_hybrid"``, ``allow_neg_eigval`` as configured, the gated norm's epsilon fixed at
1e-5 as fla's) when ``hidden_act`` is ``"silu"``.
"""

from __future__ import annotations

from hiddenstate.interop.families.delta_blocks import gated_delta_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config"]

def tiny_config():
    """A 3-layer ``OlmoHybridConfig``: gated DeltaNet at layers 0 and 1 (negative eigenvalues allowed), attention at 2.

    Returns
    -------
    transformers.OlmoHybridConfig
        Random weights from it: ``transformers.OlmoHybridForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.OlmoHybridConfig(
        vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=2, layer_types=["linear_attention", "linear_attention", "full_attention"],
        linear_allow_neg_eigval=True, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=6, linear_conv_kernel_dim=3, pad_token_id=0, bos_token_id=1, eos_token_id=2)


FAMILY = Family(
    name="olmo_hybrid",
    classes=("OlmoHybridForCausalLM", "OlmoHybridModel"),
    kind="gated_delta",
    layers=lambda model: decoder_layer_map(model, {"linear_attn": "recurrent", "self_attn": "attention"}),
    to_block=lambda mixer, config: gated_delta_block(mixer, "olmo_hybrid"),
    notes="RMS norm before each mixer, the residual and the MLP: the model's own; transformers computes the delta "
          "rule and the gated norm in float32.",
    tiny_config=tiny_config,
)
