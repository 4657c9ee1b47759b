"""transformers ``OlmoHybridForCausalLM`` (OLMo-hybrid): gated DeltaNet layers and at least one full attention layer.

``model.layers[i]`` is an ``OlmoHybridLinearAttentionDecoderLayer`` whose ``linear_attn`` is an
``OlmoHybridGatedDeltaNet`` where ``config.layer_types[i]`` is ``"linear_attention"``, and an
``OlmoHybridAttentionDecoderLayer`` (``self_attn``) elsewhere; transformers needs at least one
attention layer. The recurrent mixer is exactly our :class:`~hiddenstate.gated_delta.GatedDeltaNet`
(``layout="olmo_hybrid"``, ``allow_neg_eigval`` as configured, the gated norm's epsilon fixed at
1e-5 as fla's) when ``hidden_act`` is ``"silu"``.
"""

from __future__ import annotations

from hiddenstate.interop.families.delta_blocks import gated_delta_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY"]

FAMILY = Family(
    name="olmo_hybrid",
    classes=("OlmoHybridForCausalLM", "OlmoHybridModel"),
    kind="gated_delta",
    layers=lambda model: decoder_layer_map(model, {"linear_attn": "recurrent", "self_attn": "attention"}),
    to_block=lambda mixer, config: gated_delta_block(mixer, "olmo_hybrid"),
    notes="RMS norm before each mixer, the residual and the MLP: the model's own; transformers computes the delta "
          "rule and the gated norm in float32.",
)
