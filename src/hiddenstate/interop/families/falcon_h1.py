"""transformers ``FalconH1ForCausalLM`` (TII): attention and a Mamba-2 mixer side by side in every layer, muP multipliers.

Every decoder layer of ``model.layers`` runs its RMS-normed input through a ``FalconH1Mixer``
(``.mamba``) and a ``FalconH1Attention`` (``.self_attn``) side by side, adds the two (the
mixer's output times ``config.ssm_out_multiplier``, attention's times
``attention_out_multiplier``, its input times ``attention_in_multiplier``) to the residual, then
an MLP (``.feed_forward``). The layer map shows each layer as recurrent, its attention and MLP
as its parts. The forward hook sees the mixer's output before ``ssm_out_multiplier``: the
decoder layer's own, so the recomputation needs none of the multipliers outside the mixer.

Inside the mixer: its input times ``config.ssm_in_multiplier``, ``in_proj``'s output times the
muP vector (``config.ssm_multipliers``: five factors of its z, x, B, C and dt parts; a
non-persistent buffer ``mup_vector`` built from the config), ``d_inner = mamba_d_ssm`` (or
``int(mamba_expand * hidden_size)`` when None), ``out_proj``'s bias ``projectors_bias`` apart
from ``in_proj``'s ``mamba_proj_bias``, the gated norm optional (``mamba_rms_norm``; without
it ``y silu(z)``) and before or after the gate (``mamba_norm_before_gate``), dt clamped by
``time_step_limit``, ``config.hidden_act`` the convolution's activation (and the MLP's): our
:class:`~hiddenstate.Mamba2` with ``ssm_multipliers`` and ``ssm_in_multiplier``.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.interop.families.blocks import mamba2_block, require_silu
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config", "to_block"]


def to_block(mixer, config):
    """A ``FalconH1Mixer`` as our :class:`~hiddenstate.Mamba2` with its muP multipliers.

    Parameters
    ----------
    mixer : transformers FalconH1Mixer
        d_model = ``hidden_size`` M, d_state = ``mamba_d_state`` S, d_conv = ``mamba_d_conv``
        K, Di = ``mamba_d_ssm`` (or ``int(mamba_expand * M)``), head_dim = ``mamba_d_head``,
        n_groups = ``mamba_n_groups``, bias = ``mamba_proj_bias``, out_bias =
        ``projectors_bias``, conv_bias = ``mamba_conv_bias``, eps = ``rms_norm_eps``,
        rms_norm = ``mamba_rms_norm``, norm_before_gate = ``mamba_norm_before_gate``,
        ``time_step_limit`` (None: no clamp), ``ssm_in_multiplier``; its buffer ``mup_vector``
        (1, 1, 2 Di + 2 G S + H).
    config : transformers FalconH1Config
        ``hidden_act`` and ``ssm_multipliers`` (5 floats).

    Returns
    -------
    Mamba2
        float64, ``batch_first=True``, the mixer's weights; its ``mup_vector`` equals the mixer's.

    Raises
    ------
    ValueError
        ``config.hidden_act`` other than ``"silu"``; a mixer's ``mup_vector`` that is not the
        one ``config.ssm_multipliers`` gives (changed after the model was built); what
        :func:`~hiddenstate.interop.families.blocks.mamba2_block` refuses.
    """
    require_silu(config, "hidden_act")
    blk = mamba2_block(mixer, ssm_multipliers=tuple(float(v) for v in config.ssm_multipliers),
                       ssm_in_multiplier=float(mixer.ssm_in_multiplier))
    theirs = getattr(mixer, "mup_vector", None)
    if theirs is not None:
        theirs = theirs.detach().cpu().double().numpy().reshape(-1)
        if theirs.shape != blk.mup_vector.shape or not np.allclose(theirs, blk.mup_vector, rtol=1e-6, atol=0.0):
            raise ValueError(f"the {type(mixer).__name__}'s mup_vector must be the one config.ssm_multipliers = "
                             f"{list(config.ssm_multipliers)} gives (z, x, B, C, dt parts of in_proj's output); "
                             f"got other values.")
    return blk


def tiny_config():
    """A 3-layer ``FalconH1Config``: attention and a Mamba-2 mixer side by side, with its muP multipliers.

    Returns
    -------
    transformers.FalconH1Config
        Random weights from it: ``transformers.FalconH1ForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.FalconH1Config(
        vocab_size=50, hidden_size=16, num_attention_heads=2, initializer_range=0.5, intermediate_size=32,
        num_hidden_layers=3, num_key_value_heads=1, mamba_d_ssm=24, mamba_n_heads=3, mamba_d_head=8,
        mamba_n_groups=3, mamba_d_state=8, mamba_d_conv=3, mamba_chunk_size=8, mamba_rms_norm=True,
        ssm_multipliers=[0.5, 1.7, 0.8, 1.3, 0.6], ssm_in_multiplier=0.7, ssm_out_multiplier=0.9)


FAMILY = Family(
    name="falcon_h1",
    classes=("FalconH1ForCausalLM", "FalconH1Model"),
    kind="mamba2",
    layers=lambda model: decoder_layer_map(model, {"mamba": "recurrent"},
                                           parts={"self_attn": "attention", "feed_forward": "mlp"}),
    to_block=to_block,
    notes="attention side by side with the mixer in every layer, ssm_out_multiplier after the mixer, the attention "
          "and embedding multipliers, RMS norms, residuals and MLP stay the model's own; ssm_in_multiplier and the "
          "muP vector of ssm_multipliers inside the mixer are ours.",
    tiny_config=tiny_config,
)
