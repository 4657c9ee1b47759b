"""transformers ``KimiLinearForCausalLM`` (Kimi Linear): Kimi Delta Attention and MLA layers, MoE or MLP feed-forwards.

``model.layers[i].self_attn`` is a ``KimiLinearDeltaAttention`` (Kimi Delta Attention, the gated
delta rule with one decay per key channel) where ``config.layer_types[i]`` is
``"linear_attention"`` and a ``KimiLinearAttention`` (multi-head latent attention) where it is
``"full_attention"``; the feed-forward is a MoE (``KimiLinearMoE``) where
``config.mlp_layer_types[i]`` is ``"sparse"``. The recurrent mixer is exactly our
:class:`~hiddenstate.gated_delta.KimiDeltaAttention` when ``hidden_act`` is ``"silu"``.
"""

from __future__ import annotations

from hiddenstate.interop.families.delta_blocks import kda_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY"]


def _role(layer, index: int) -> str:
    return "recurrent" if layer.block_type == "linear_attention" else "attention"


FAMILY = Family(
    name="kimi_linear",
    classes=("KimiLinearForCausalLM", "KimiLinearModel"),
    kind="kda",
    layers=lambda model: decoder_layer_map(model, {"self_attn": _role}),
    to_block=lambda mixer, config: kda_block(mixer),
    notes="RMS norm before each mixer, the residual, and the MoE or MLP feed-forward: the model's own; transformers "
          "computes the delta rule and the gated norm in float32.",
)
