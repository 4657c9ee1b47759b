"""transformers ``NemotronHForCausalLM`` (NVIDIA): one mixer per layer, Mamba-2, attention, MLP or MoE.

``model.layers[i].mixer`` is a ``NemotronHMamba2Mixer`` where ``config.layers_block_type[i]``
is ``"linear_attention"``, and an attention, MLP or MoE module elsewhere (the layer's role). The
Mamba-2 mixer is our :class:`~hiddenstate.Mamba2` with ``d_inner = mamba_num_heads *
mamba_head_dim`` (not a multiple of ``hidden_size`` in general), head_dim = ``mamba_head_dim``,
n_groups = ``n_groups``, d_state = ``ssm_state_size``, d_conv = ``conv_kernel``, conv_bias =
``use_conv_bias``, eps = ``layer_norm_epsilon``, the clamp ``time_step_limit``, and bias =
``use_bias`` on both projections (the config's ``mamba_proj_bias`` is not read by the mixer);
``config.mamba_hidden_act`` is the convolution's activation
(:func:`~hiddenstate.interop.families.blocks.mamba2_block` reads the sizes off the mixer).
"""

from __future__ import annotations

from hiddenstate.interop.families.blocks import silu_mamba2_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config", "to_block"]


def tiny_config():
    """A 5-layer ``NemotronHConfig``: Mamba-2, MoE, attention, MLP, Mamba-2.

    Returns
    -------
    transformers.NemotronHConfig
        Random weights from it: ``transformers.NemotronHForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.NemotronHConfig(
        vocab_size=50, hidden_size=16, layers_block_type=["linear_attention", "moe", "full_attention", "mlp",
                                                          "linear_attention"],
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, mamba_num_heads=4, mamba_head_dim=8, n_groups=2,
        ssm_state_size=8, conv_kernel=3, chunk_size=8, intermediate_size=32, n_routed_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=16, moe_shared_expert_intermediate_size=16, n_group=1,
        topk_group=1, initializer_range=0.5)


_ROLES = {"linear_attention": "recurrent", "full_attention": "attention", "mlp": "mlp", "moe": "moe"}


#: The mixer as our :class:`~hiddenstate.Mamba2`; ``config.mamba_hidden_act`` (the convolution's activation) must be SiLU.
to_block = silu_mamba2_block("mamba_hidden_act")


FAMILY = Family(
    name="nemotron_h",
    classes=("NemotronHForCausalLM", "NemotronHModel"),
    kind="mamba2",
    layers=lambda model: decoder_layer_map(model, {"mixer": lambda layer, i: _ROLES.get(layer.block_type,
                                                                                           layer.block_type)}),
    to_block=to_block,
    notes="RMS norm before each mixer and the residual around it: the model's own.",
    tiny_config=tiny_config,
)
