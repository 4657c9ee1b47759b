"""transformers ``GraniteMoeHybridForCausalLM`` (IBM Granite 4): Mamba-2 layers and attention, each with MoE.

``model.layers[i].mamba`` is a ``GraniteMoeHybridMambaLayer`` (transformers' Mamba-2 mixer
under another name: our :class:`~hiddenstate.Mamba2`) where ``config.layer_types[i]`` is
``"linear_attention"``, else ``self_attn`` is attention; every layer then has its MoE and shared
MLP. The muP multipliers (``embedding_multiplier``, ``residual_multiplier``) act outside the
mixer, so the hooked recomputation needs none of them.
"""

from __future__ import annotations

from hiddenstate.interop.families.blocks import mamba2_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config"]


def tiny_config():
    """A 3-layer ``GraniteMoeHybridConfig``: Mamba-2, attention, Mamba-2, each with a 4-expert MoE.

    Returns
    -------
    transformers.GraniteMoeHybridConfig
        Random weights from it: ``transformers.GraniteMoeHybridForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.GraniteMoeHybridConfig(
        vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, layer_types=["linear_attention", "full_attention", "linear_attention"],
        mamba_n_heads=4, mamba_d_head=8, mamba_n_groups=2, mamba_d_state=8, mamba_d_conv=3, mamba_expand=2,
        mamba_chunk_size=8, num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=32,
        initializer_range=0.5)


FAMILY = Family(
    name="granitemoehybrid",
    classes=("GraniteMoeHybridForCausalLM", "GraniteMoeHybridModel"),
    kind="mamba2",
    layers=lambda model: decoder_layer_map(model, {"mamba": "recurrent", "self_attn": "attention"}),
    to_block=lambda mixer, config: mamba2_block(mixer),
    notes="embedding and residual multipliers, RMS norms, MoE and shared MLP: the model's own, outside the mixer.",
    tiny_config=tiny_config,
)
