"""transformers ``Qwen3NextForCausalLM`` (Qwen3-Next): gated DeltaNet and full attention layers, MoE or MLP feed-forwards.

``model.layers[i]`` holds ``linear_attn`` (a ``Qwen3NextGatedDeltaNet``, the gated delta rule of
Yang et al. 2024) where ``config.layer_types[i]`` is ``"linear_attention"``, and ``self_attn``
(gated full attention) where it is ``"full_attention"``; every layer's feed-forward is a sparse
MoE block (``Qwen3NextSparseMoeBlock``) or an MLP. The recurrent mixer is exactly our
:class:`~hiddenstate.gated_delta.GatedDeltaNet` (``layout="qwen3_next"``) when ``hidden_act`` is
``"silu"`` (:func:`~hiddenstate.interop.families.delta_blocks.gated_delta_block`).
"""

from __future__ import annotations

from hiddenstate.interop.families.delta_blocks import gated_delta_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY"]

FAMILY = Family(
    name="qwen3_next",
    classes=("Qwen3NextForCausalLM", "Qwen3NextModel"),
    kind="gated_delta",
    layers=lambda model: decoder_layer_map(model, {"linear_attn": "recurrent", "self_attn": "attention"}),
    to_block=lambda mixer, config: gated_delta_block(mixer, "qwen3_next"),
    notes="RMS norm (1 + weight) before each mixer, the residual, and the MoE or MLP feed-forward: the model's own; "
          "transformers computes the delta rule and the gated norm in float32.",
)
