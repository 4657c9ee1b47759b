"""transformers ``FalconMambaForCausalLM`` (TII): every layer a Mamba-1 mixer with weightless RMS norms of dt, B, C.

``backbone.layers[i].mixer`` is a ``FalconMambaMixer``: transformers' ``MambaMixer`` whose dt
(before ``dt_proj``), B and C each pass a weightless RMS norm of epsilon ``config.mixer_rms_eps``
(its ``FalconMambaWeightlessRMSNorm``; the ``weight`` it carries is a non-persistent buffer the
forward never reads, so the state dict has none). That is our :class:`~hiddenstate.Mamba` with
``bcdt_norm="rms"``. The layer's RMS norm before the mixer and the residual around it stay the
model's own (the hook sees the normed input). ``config.use_mambapy`` and
``config.use_associative_scan`` choose how transformers computes the same scan, and the
``time_step_*`` options only its initial weights. The whole model is recurrent:
:func:`hiddenstate.from_transformers` gives it as a trainable :class:`~hiddenstate.MambaLM`.
"""

from __future__ import annotations

from hiddenstate.interop.families.blocks import bcdt_norm_eps, mamba_block, require_silu
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config", "to_block"]


def to_block(mixer, config):
    """A ``FalconMambaMixer`` as our :class:`~hiddenstate.Mamba` (``bcdt_norm="rms"``, ``norm_eps=mixer_rms_eps``).

    Parameters
    ----------
    mixer : transformers FalconMambaMixer
        d_model = ``hidden_size`` M, d_state = ``state_size`` S, d_conv = ``conv_kernel`` K,
        expand, dt_rank = ``time_step_rank`` R, bias = ``use_bias``, conv_bias =
        ``use_conv_bias``.
    config : transformers FalconMambaConfig

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
    return mamba_block(mixer, bcdt_norm="rms", norm_eps=bcdt_norm_eps(mixer, "mixer_rms_eps"))


def tiny_config():
    """A 3-layer ``FalconMambaConfig`` (``hidden_size`` 16, ``state_size`` 5, dt rank 3, biased projections).

    Returns
    -------
    transformers.FalconMambaConfig
        Random weights from it: ``transformers.FalconMambaForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.FalconMambaConfig(vocab_size=50, hidden_size=16, state_size=5, num_hidden_layers=3,
                                          time_step_rank=3, mixer_rms_eps=1e-3, use_bias=True, initializer_range=0.5)


FAMILY = Family(
    name="falcon_mamba",
    classes=("FalconMambaForCausalLM", "FalconMambaModel"),
    kind="mamba",
    layers=lambda model: decoder_layer_map(model, {"mixer": "recurrent"}),
    to_block=to_block,
    notes="weightless RMS norms of dt, B, C inside the mixer (ours: bcdt_norm='rms'); the RMS norm before each "
          "mixer and the residual around it stay the model's own.",
    tiny_config=tiny_config,
)
