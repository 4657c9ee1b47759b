"""transformers ``Qwen4ExpForCausalLM`` (Qwen4-Exp's text backbone): gated DeltaNet with a configurable output gate.

``model.layers[i]`` holds ``linear_attn`` (a ``Qwen4ExpTextGatedDeltaNet``) where
``config.layer_types[i]`` is ``"linear_attention"`` and ``self_attn`` (``Qwen4ExpTextAttention``,
with a QSA token indexer when ``indexer_n_heads`` is set) where it is ``"indexed_attention"``; each
layer's feed-forward is a sparse MoE, and hyper-connections (``attn_hyper_connection``,
``mlp_hyper_connection``) mix ``hc_count`` residual streams into each sublayer's input and its
output back into them. The mixer is Qwen3.5's (``layout="qwen3_5"``) but its gated norm's
activation is ``config.output_gate_type`` (or ``hidden_act``): SiLU or sigmoid, both computed by
our :class:`~hiddenstate.kinds.delta.block.GatedDeltaNet` (``gate=``) with an exact backward;
any other is refused by name.
"""

from __future__ import annotations

from hiddenstate.interop.families.qwen3_5_moe_text import MOE
from hiddenstate.interop.families.qwen3_5_text import NOTES, qwen3_5_family, text_config

__all__ = ["FAMILY", "PARTS", "tiny_config"]


def _ffn_role(layer, index: int) -> str:
    return "moe"


#: The layer map's parts of a Qwen4-Exp layer: its MoE, its two hyper-connections, its per-layer embedding.
PARTS = {"mlp": _ffn_role, "attn_hyper_connection": "hyper-connection", "mlp_hyper_connection": "hyper-connection",
         "ple": "per-layer embedding"}

#: What surrounds the mixer.
QWEN4_NOTES = NOTES.replace("RMS norm (1 + weight) before each mixer, the residual,",
                            "The hyper-connections around each mixer (hc_count residual streams mixed in and out), "
                            "the per-layer embeddings (PLE, with their own short convolution),")


def tiny_config():
    """A 4-layer ``Qwen4ExpTextConfig``: gated DeltaNet (sigmoid output gate) at 0, 1, 2, indexed attention at 3.

    Returns
    -------
    transformers.Qwen4ExpTextConfig
        Random weights from it: ``transformers.Qwen4ExpForCausalLM(tiny_config())``; two
        hyper-connection streams of rank 8, 4-expert MoEs, a QSA indexer of 2 heads (budget 8,
        blocks of 4), no per-layer embedding.
    """
    types = ["linear_attention"] * 3 + ["indexed_attention"]
    return text_config("Qwen4ExpTextConfig", layer_types=types, output_gate_type="sigmoid", hc_count=2,
                       hc_lowrank=8, indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=8, indexer_budget=8,
                       indexer_compress_ratio=4, **MOE)


FAMILY = qwen3_5_family("qwen4_exp_text", ("Qwen4ExpForCausalLM", "Qwen4ExpTextModel"), notes=QWEN4_NOTES,
                        tiny_config=tiny_config, parts=PARTS)
