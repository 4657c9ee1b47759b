"""transformers ``Lfm3ForCausalLM`` (Liquid AI LFM3): LFM2's gated short convolutions, sliding and full attention.

A decoder layer holds ``conv``, an ``Lfm3ShortConv`` (``config.layer_types[i] == "conv"``), or
``self_attn``, an ``Lfm3Attention`` (``"sliding_attention"`` or ``"full_attention"``); then a
SwiGLU MLP, with sandwich RMS norms after the mixer and the MLP when ``use_sandwich_norm``. The
short convolution is LFM2's, line for line, and so our
:class:`~hiddenstate.kinds.shortconv.block.ShortConv` (:func:`~hiddenstate.interop.families.lfm2.shortconv_block`):
``B, C, x = in_proj(u)``, ``out = out_proj(C * conv(B * x))`` with K = ``conv_L_cache`` taps.
"""

from __future__ import annotations

from hiddenstate.interop.families.lfm2 import shortconv_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config"]


def tiny_config():
    """A 4-layer ``Lfm3Config``: short convolutions of 4 taps at 0 and 3, full attention at 1, sliding attention at 2.

    Returns
    -------
    transformers.Lfm3Config
        Random weights from it: ``transformers.Lfm3ForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.Lfm3Config(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=4,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=8, conv_L_cache=4,
                                   sliding_window=8, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                   layer_types=["conv", "full_attention", "sliding_attention", "conv"])


FAMILY = Family(
    name="lfm3",
    classes=("Lfm3ForCausalLM", "Lfm3Model"),
    kind="shortconv",
    layers=lambda model: decoder_layer_map(model, {"conv": "recurrent", "self_attn": "attention"}),
    to_block=shortconv_block,
    notes="RMS norm (operator_norm) before the mixer, the sandwich RMS norm after it, the residual, then the SwiGLU "
          "MLP: the model's own.",
    tiny_config=tiny_config,
)
