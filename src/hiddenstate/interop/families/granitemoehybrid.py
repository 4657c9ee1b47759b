"""transformers ``GraniteMoeHybridForCausalLM`` (IBM Granite 4): Mamba-2 layers and attention, each with MoE.

``model.layers[i].mamba`` is a ``GraniteMoeHybridMambaLayer`` (transformers' Mamba-2 mixer
under another name: our :class:`~hiddenstate.Mamba2`) where ``config.layer_types[i]`` is
``"linear_attention"``, else ``self_attn`` is attention; every layer then has its MoE
(``.block_sparse_moe``, where ``config.num_local_experts > 0``) and shared MLP (``.shared_mlp``),
the layer map's parts. The mixer's options are Bamba's: d_state = ``mamba_d_state``, d_conv =
``mamba_d_conv``, expand = ``mamba_expand``, head_dim = ``mamba_d_head``, n_groups =
``mamba_n_groups``, bias = ``mamba_proj_bias``, conv_bias = ``mamba_conv_bias``, eps =
``rms_norm_eps``, the clamp ``time_step_limit``; ``config.hidden_act`` is the convolution's
activation (and the MLPs'). The muP multipliers (``embedding_multiplier``,
``residual_multiplier``) act outside the mixer, so the hooked recomputation needs none of them.
"""

from __future__ import annotations

from hiddenstate.interop.families.blocks import silu_mamba2_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config", "to_block"]


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


#: The mixer as our :class:`~hiddenstate.Mamba2`; ``config.hidden_act`` (the convolution's activation) must be SiLU.
to_block = silu_mamba2_block("hidden_act")


FAMILY = Family(
    name="granitemoehybrid",
    classes=("GraniteMoeHybridForCausalLM", "GraniteMoeHybridModel"),
    kind="mamba2",
    layers=lambda model: decoder_layer_map(model, {"mamba": "recurrent", "self_attn": "attention"},
                                           parts={"block_sparse_moe": "moe", "shared_mlp": "mlp"}),
    to_block=to_block,
    notes="embedding and residual multipliers, RMS norms, MoE and shared MLP: the model's own, outside the mixer.",
    tiny_config=tiny_config,
)
