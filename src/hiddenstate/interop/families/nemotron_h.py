"""transformers ``NemotronHForCausalLM`` (NVIDIA): one mixer per layer, Mamba-2, attention, MLP or MoE.

``model.layers[i].mixer`` is a ``NemotronHMamba2Mixer`` where ``config.layers_block_type[i]``
is ``"linear_attention"``, and an attention, MLP or MoE module elsewhere. The Mamba-2 mixer is
our :class:`~hiddenstate.Mamba2` with ``d_inner = mamba_num_heads * mamba_head_dim`` (not a
multiple of ``hidden_size`` in general) and its ``time_step_limit``
(:func:`~hiddenstate.interop.families.blocks.mamba2_block`).
"""

from __future__ import annotations

from hiddenstate.interop.families.blocks import mamba2_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY"]

_ROLES = {"linear_attention": "recurrent", "full_attention": "attention", "mlp": "mlp", "moe": "moe"}

FAMILY = Family(
    name="nemotron_h",
    classes=("NemotronHForCausalLM", "NemotronHModel"),
    kind="mamba2",
    layers=lambda model: decoder_layer_map(model, {"mixer": lambda layer, i: _ROLES.get(layer.block_type,
                                                                                           layer.block_type)}),
    to_block=lambda mixer, config: mamba2_block(mixer),
    notes="RMS norm before each mixer and the residual around it: the model's own.",
)
