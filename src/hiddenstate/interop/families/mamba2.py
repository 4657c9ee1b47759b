"""transformers ``Mamba2ForCausalLM`` (Dao & Gu 2024): every layer a Mamba-2 mixer (``backbone.layers[i].mixer``).

The mixer is exactly our :class:`~hiddenstate.Mamba2`, its ``time_step_limit`` clamp of dt
included (:func:`~hiddenstate.interop.families.blocks.mamba2_block`).
"""

from __future__ import annotations

from hiddenstate.interop.families.blocks import mamba2_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY"]

FAMILY = Family(
    name="mamba2",
    classes=("Mamba2ForCausalLM", "Mamba2Model"),
    kind="mamba2",
    layers=lambda model: decoder_layer_map(model, {"mixer": "recurrent"}),
    to_block=lambda mixer, config: mamba2_block(mixer),
    notes="RMS norm before each mixer and the residual around it stay the model's own.",
)
