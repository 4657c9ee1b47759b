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

__all__ = ["FAMILY"]

FAMILY = Family(
    name="granitemoehybrid",
    classes=("GraniteMoeHybridForCausalLM", "GraniteMoeHybridModel"),
    kind="mamba2",
    layers=lambda model: decoder_layer_map(model, {"mamba": "recurrent", "self_attn": "attention"}),
    to_block=lambda mixer, config: mamba2_block(mixer),
    notes="embedding and residual multipliers, RMS norms, MoE and shared MLP: the model's own, outside the mixer.",
)
