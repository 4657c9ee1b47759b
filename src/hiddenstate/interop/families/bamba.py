"""transformers ``BambaForCausalLM`` (IBM): Mamba-2 mixers (``model.layers[i].mamba``) between attention layers.

A decoder layer holds either a ``BambaMixer`` (``config.layers_block_type[i] ==
"linear_attention"``) or a ``BambaAttention`` (the indices in ``config.attn_layer_indices``),
then an MLP (``.feed_forward``, the layer map's part); the norms, the MLP and attention stay the
model's own. The mixer is transformers' Mamba-2 mixer under another name: our
:class:`~hiddenstate.Mamba2` with d_state = ``mamba_d_state``, d_conv = ``mamba_d_conv``,
expand = ``mamba_expand``, head_dim = ``mamba_d_head``, n_groups = ``mamba_n_groups``, bias =
``mamba_proj_bias`` (both projections), conv_bias = ``mamba_conv_bias``, eps = ``rms_norm_eps``
and the clamp ``time_step_limit`` (None, which the config accepts: no clamp). ``config.hidden_act``
is the convolution's activation (and the MLP's).
"""

from __future__ import annotations

from hiddenstate.interop.families.blocks import silu_mamba2_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config", "to_block"]


def tiny_config():
    """A 4-layer ``BambaConfig`` (attention at layer 1, Mamba-2 mixers of 4 heads of 8 elsewhere).

    Returns
    -------
    transformers.BambaConfig
        Random weights from it: ``transformers.BambaForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.BambaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=4,
                                    num_attention_heads=2, num_key_value_heads=1, attn_layer_indices=[1],
                                    mamba_n_heads=4, mamba_d_head=8, mamba_n_groups=2, mamba_d_state=8,
                                    mamba_d_conv=3, mamba_expand=2, mamba_chunk_size=8, initializer_range=0.5)


#: The mixer as our :class:`~hiddenstate.Mamba2`; ``config.hidden_act`` (the convolution's activation) must be SiLU.
to_block = silu_mamba2_block("hidden_act")


FAMILY = Family(
    name="bamba",
    classes=("BambaForCausalLM", "BambaModel"),
    kind="mamba2",
    layers=lambda model: decoder_layer_map(model, {"mamba": "recurrent", "self_attn": "attention"},
                                           parts={"feed_forward": "mlp"}),
    to_block=to_block,
    notes="input RMS norm before the mixer, residual, then RMS norm and a SwiGLU MLP: the model's own.",
    tiny_config=tiny_config,
)
