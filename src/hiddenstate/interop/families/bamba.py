"""transformers ``BambaForCausalLM`` (IBM): Mamba-2 mixers (``model.layers[i].mamba``) between attention layers.

A decoder layer holds either a ``BambaMixer`` (``config.layers_block_type[i] ==
"linear_attention"``) or a ``BambaAttention`` (the indices in ``config.attn_layer_indices``),
then an MLP; the norms, the MLP and attention stay the model's own. The mixer is transformers'
Mamba-2 mixer under another name: our :class:`~hiddenstate.Mamba2`.
"""

from __future__ import annotations

from hiddenstate.interop.families.blocks import mamba2_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY"]

FAMILY = Family(
    name="bamba",
    classes=("BambaForCausalLM", "BambaModel"),
    kind="mamba2",
    layers=lambda model: decoder_layer_map(model, {"mamba": "recurrent", "self_attn": "attention"}),
    to_block=lambda mixer, config: mamba2_block(mixer),
    notes="input RMS norm before the mixer, residual, then RMS norm and a SwiGLU MLP: the model's own.",
)
