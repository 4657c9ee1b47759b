"""transformers ``MambaForCausalLM`` (Gu & Dao 2023): every layer a Mamba-1 mixer (``backbone.layers[i].mixer``).

The layer's RMS norm and residual stay outside the mixer (the hook sees the normed input), so
the mixer is exactly our :class:`~hiddenstate.Mamba` (:func:`~hiddenstate.interop.families.blocks.mamba_block`).
"""

from __future__ import annotations

from hiddenstate.interop.families.blocks import mamba_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config"]


def tiny_config():
    """A 2-layer ``MambaConfig`` (``hidden_size`` 8, ``state_size`` 4, vocabulary 50): builds in milliseconds.

    Returns
    -------
    transformers.MambaConfig
        Random weights from it: ``transformers.MambaForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.MambaConfig(vocab_size=50, hidden_size=8, state_size=4, num_hidden_layers=2, conv_kernel=3)


FAMILY = Family(
    name="mamba",
    classes=("MambaForCausalLM", "MambaModel"),
    kind="mamba",
    layers=lambda model: decoder_layer_map(model, {"mixer": "recurrent"}),
    to_block=lambda mixer, config: mamba_block(mixer),
    notes="RMS norm before each mixer and the residual around it stay the model's own.",
    tiny_config=tiny_config,
)
