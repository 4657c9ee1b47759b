"""transformers ``JambaForCausalLM`` (AI21): Mamba-1 mixers with RMS norms of dt, B, C, between attention and MoE.

``model.layers[i]`` is a ``JambaMambaDecoderLayer`` where ``config.layers_block_type[i]`` is
``"mamba"`` (its mixer ``.mamba``, a ``JambaMambaMixer``) and a ``JambaAttentionDecoderLayer``
elsewhere (``.self_attn``); every layer then has a feed-forward, a ``JambaSparseMoeBlock`` where
``config.layers_num_experts[i] > 1`` (role ``"moe"``) and a ``JambaMLP`` elsewhere (``"mlp"``),
shown in the layer map as the layer's part. The mixer is transformers' ``MambaMixer`` whose dt
(before ``dt_proj``), B and C each pass a weighted RMS norm (``dt_layernorm``, ``b_layernorm``,
``c_layernorm``, epsilon ``config.rms_norm_eps``): our :class:`~hiddenstate.Mamba` with
``bcdt_norm="rms_weight"``, the norms' weights read from the state dict. ``config.hidden_act``
is the convolution's activation. The norms around the mixer, the residuals, attention, the MLP
and the MoE stay the model's own.
"""

from __future__ import annotations

from hiddenstate.interop.families.blocks import bcdt_norm_eps, mamba_block, require_silu
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config", "to_block"]


def _feed_forward(layer, index) -> str:
    """``"moe"`` for a ``JambaSparseMoeBlock`` (several experts), else ``"mlp"``."""
    return "moe" if type(layer.feed_forward).__name__.endswith("SparseMoeBlock") else "mlp"


def to_block(mixer, config):
    """A ``JambaMambaMixer`` as our :class:`~hiddenstate.Mamba` (``bcdt_norm="rms_weight"``, ``norm_eps=rms_norm_eps``).

    Parameters
    ----------
    mixer : transformers JambaMambaMixer
        d_model = ``hidden_size`` M, d_state = ``mamba_d_state`` S, d_conv = ``mamba_d_conv``
        K, expand = ``mamba_expand``, dt_rank = ``mamba_dt_rank`` R, bias = ``mamba_proj_bias``,
        conv_bias = ``mamba_conv_bias``; the norms' weights (R,), (S,), (S,).
    config : transformers JambaConfig

    Returns
    -------
    Mamba
        float64, ``batch_first=True``, the mixer's weights.

    Raises
    ------
    ValueError
        ``config.hidden_act`` other than ``"silu"``; norms of different epsilons; what
        :func:`~hiddenstate.interop.families.blocks.mamba_block` refuses.
    """
    require_silu(config, "hidden_act")
    return mamba_block(mixer, bcdt_norm="rms_weight", norm_eps=bcdt_norm_eps(mixer, "rms_norm_eps"))


def tiny_config():
    """A 4-layer ``JambaConfig``: Mamba-1 mixers, attention at layer 2, 2-expert MoE at layers 1 and 3.

    Returns
    -------
    transformers.JambaConfig
        Random weights from it: ``transformers.JambaForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.JambaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=4,
                                    num_attention_heads=2, num_key_value_heads=1, mamba_d_state=5, mamba_dt_rank=3,
                                    mamba_d_conv=3, attn_layer_period=4, attn_layer_offset=2, expert_layer_period=2,
                                    expert_layer_offset=1, num_experts=2, num_experts_per_tok=1, rms_norm_eps=1e-4,
                                    mamba_proj_bias=True, initializer_range=0.5)


FAMILY = Family(
    name="jamba",
    classes=("JambaForCausalLM", "JambaModel"),
    kind="mamba",
    layers=lambda model: decoder_layer_map(model, {"mamba": "recurrent", "self_attn": "attention"},
                                           parts={"feed_forward": _feed_forward}),
    to_block=to_block,
    notes="weighted RMS norms of dt, B, C inside the mixer (ours: bcdt_norm='rms_weight'); the RMS norms, residuals, "
          "attention, MLP and sparse MoE around it stay the model's own.",
    tiny_config=tiny_config,
)
