"""transformers ``Lfm2MoeForCausalLM`` (Liquid AI LFM2-MoE): LFM2's gated short convolutions, sparse MoE feed-forwards.

A decoder layer holds ``conv``, an ``Lfm2MoeShortConv`` (``config.layer_types[i] == "conv"``), or
``self_attn``, an ``Lfm2MoeAttention``; then ``feed_forward``, a dense ``Lfm2MoeMLP`` in the first
``config.num_dense_layers`` layers and an ``Lfm2MoeSparseMoeBlock`` after them (the layer map
names it, role ``"moe"``). The short convolution is LFM2's, line for line, and so our
:class:`~hiddenstate.kinds.shortconv.block.ShortConv` (:func:`~hiddenstate.interop.families.lfm2.shortconv_block`):
``B, C, x = in_proj(u)``, ``out = out_proj(C * conv(B * x))`` with K = ``conv_L_cache`` taps.
"""

from __future__ import annotations

from hiddenstate.interop.families.lfm2 import shortconv_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config"]


def _feed_forward(layer, index: int) -> str:
    return "moe" if type(layer.feed_forward).__name__.endswith("SparseMoeBlock") else "mlp"


def tiny_config():
    """A 4-layer ``Lfm2MoeConfig``: short convolutions of 3 taps at layers 0, 2 and 3, attention at 1; MoE from layer 1.

    Returns
    -------
    transformers.Lfm2MoeConfig
        Random weights from it: ``transformers.Lfm2MoeForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.Lfm2MoeConfig(vocab_size=50, hidden_size=16, intermediate_size=32, moe_intermediate_size=8,
                                      num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
                                      conv_L_cache=3, num_dense_layers=1, num_experts=4, num_experts_per_tok=2,
                                      layer_types=["conv", "full_attention", "conv", "conv"])


FAMILY = Family(
    name="lfm2_moe",
    classes=("Lfm2MoeForCausalLM", "Lfm2MoeModel"),
    kind="shortconv",
    layers=lambda model: decoder_layer_map(model, {"conv": "recurrent", "self_attn": "attention"},
                                           parts={"feed_forward": _feed_forward}),
    to_block=shortconv_block,
    notes="RMS norm (operator_norm) before the mixer, the residual, then RMS norm and the dense MLP or sparse MoE: "
          "the model's own.",
    tiny_config=tiny_config,
)
