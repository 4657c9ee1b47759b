"""transformers ``MambaForCausalLM`` (Gu & Dao 2023): every layer a Mamba-1 mixer (``backbone.layers[i].mixer``).

The layer's RMS norm and residual stay outside the mixer (the hook sees the normed input), so
the mixer is exactly our :class:`~hiddenstate.Mamba` (:func:`~hiddenstate.interop.families.blocks.mamba_block`).
"""

from __future__ import annotations

from hiddenstate.interop.families.blocks import mamba_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY"]

FAMILY = Family(
    name="mamba",
    classes=("MambaForCausalLM", "MambaModel"),
    kind="mamba",
    layers=lambda model: decoder_layer_map(model, {"mixer": "recurrent"}),
    to_block=lambda mixer, config: mamba_block(mixer),
    notes="RMS norm before each mixer and the residual around it stay the model's own.",
)
