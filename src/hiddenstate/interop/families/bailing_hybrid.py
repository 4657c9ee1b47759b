"""transformers ``BailingHybridForCausalLM`` (Ling/Ring hybrid): Kimi Delta Attention with a safe gate, MLA, MoE.

``model.layers[i].self_attn`` is a ``BailingHybridDeltaAttention`` where ``config.layer_types[i]``
is ``"linear_attention"`` and a ``BailingHybridAttention`` (multi-head latent attention) where it
is ``"full_attention"``; ``mlp`` is a ``BailingHybridMoE`` where ``config.mlp_layer_types[i]`` is
``"sparse"`` (the layer map names it). The delta-rule mixer is Kimi Delta Attention with separate
q, k, v projections, full-rank forget-gate and output-gate projections (``forget_gate.f_proj``,
``g_proj``), one ``A_log`` per head, and, with ``config.kda_safe_gate``, the safe gate
``g = kda_lower_bound * sigmoid(exp(A_log) (f_proj(u) + dt_bias))``: exactly our
:class:`~hiddenstate.kinds.delta.block.KimiDeltaAttention` with ``layout="bailing_hybrid"`` and
``lower_bound=kda_lower_bound`` when ``hidden_act`` is ``"silu"``.
"""

from __future__ import annotations

from hiddenstate.interop.families.delta_blocks import kda_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config"]


def _role(layer, index: int) -> str:
    return "recurrent" if layer.block_type == "linear_attention" else "attention"


def _mlp(layer, index: int) -> str:
    return "moe" if type(layer.mlp).__name__.endswith("MoE") else "mlp"


def tiny_config():
    """A 3-layer ``BailingHybridConfig``: KDA with the safe gate at layers 0 and 2, MLA at 1, MoE at 1 and 2.

    Returns
    -------
    transformers.BailingHybridConfig
        Random weights from it: ``transformers.BailingHybridForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.BailingHybridConfig(
        vocab_size=50, hidden_size=16, intermediate_size=32, moe_intermediate_size=8, num_hidden_layers=3,
        num_attention_heads=2, num_key_value_heads=2, head_dim=8, kv_lora_rank=8, q_lora_rank=None,
        qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8, num_local_experts=4, num_experts_per_tok=2,
        n_group=2, topk_group=1, n_shared_experts=1, short_conv_kernel_size=3, num_mtp_layers=0,
        layer_types=["linear_attention", "full_attention", "linear_attention"],
        mlp_layer_types=["dense", "sparse", "sparse"], pad_token_id=0, bos_token_id=1, eos_token_id=2)


FAMILY = Family(
    name="bailing_hybrid",
    classes=("BailingHybridForCausalLM", "BailingHybridModel"),
    kind="kda",
    layers=lambda model: decoder_layer_map(model, {"self_attn": _role}, parts={"mlp": _mlp}),
    to_block=lambda mixer, config: kda_block(mixer, "bailing_hybrid"),
    notes="RMS norm before each mixer, the residual, and the MoE or MLP feed-forward: the model's own; transformers "
          "computes the delta rule and the gated norm in float32.",
    tiny_config=tiny_config,
)
