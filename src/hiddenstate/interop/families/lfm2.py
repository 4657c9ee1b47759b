"""transformers ``Lfm2ForCausalLM`` (Liquid AI LFM2): gated short convolutions between attention layers.

A decoder layer holds ``conv``, an ``Lfm2ShortConv`` (``config.layer_types[i] == "conv"``), or
``self_attn``, an ``Lfm2Attention``; then a SwiGLU MLP. The short convolution is our
:class:`~hiddenstate.kinds.shortconv.block.ShortConv`: ``B, C, x = in_proj(u)``, ``out = out_proj(C * conv(B * x))``
with K = ``conv_L_cache`` taps. Its state is a finite window, the last K - 1 values of
``B * x`` (transformers' conv cache keeps K, the oldest of which no later step reads).
"""

from __future__ import annotations

import numpy as np

from hiddenstate.interop.families.blocks import mixer_weights
from hiddenstate.interop.families.registry import Family, decoder_layer_map
from hiddenstate.kinds.shortconv.block import ShortConv

__all__ = ["FAMILY", "shortconv_block", "tiny_config"]


def tiny_config():
    """A 3-layer ``Lfm2Config`` (short convolutions of 3 taps at layers 0 and 2, attention at layer 1).

    Returns
    -------
    transformers.Lfm2Config
        Random weights from it: ``transformers.Lfm2ForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.Lfm2Config(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                                   num_attention_heads=2, num_key_value_heads=1, conv_L_cache=3,
                                   layer_types=["conv", "full_attention", "conv"])


def shortconv_block(mixer, config) -> ShortConv:
    """Our :class:`~hiddenstate.kinds.shortconv.block.ShortConv` with the weights of a transformers ``Lfm2ShortConv``.

    Parameters
    ----------
    mixer : transformers Lfm2ShortConv
        ``conv_kernel_size`` K, ``bias`` (``conv_bias``: all three biases or none), and
        ``in_proj`` (3 M, M), ``conv`` (M, 1, K), ``out_proj`` (M, M) under our names.
    config : transformers Lfm2Config
        Its ``hidden_size`` M.

    Returns
    -------
    ShortConv
        float64, ``batch_first=True``.

    Raises
    ------
    ValueError
        Biases on some of the three modules only (our block has all or none).
    """
    has = {name: getattr(mixer, name).bias is not None for name in ("in_proj", "conv", "out_proj")}
    if len(set(has.values())) != 1:
        raise ValueError(f"the {type(mixer).__name__}'s in_proj, conv and out_proj must all have a bias or none (our "
                         f"ShortConv's bias= covers the three); got {has}.")
    blk = ShortConv(int(config.hidden_size), kernel_size=int(mixer.conv_kernel_size), bias=has["conv"],
                    batch_first=True, dtype=np.float64, rng=np.random.default_rng(0))
    blk.load_state_dict(mixer_weights(mixer))
    return blk


FAMILY = Family(
    name="lfm2",
    classes=("Lfm2ForCausalLM", "Lfm2Model"),
    kind="shortconv",
    layers=lambda model: decoder_layer_map(model, {"conv": "recurrent", "self_attn": "attention"}),
    to_block=shortconv_block,
    notes="RMS norm (operator_norm) before the mixer, the residual, then RMS norm and a SwiGLU MLP: the model's own.",
    tiny_config=tiny_config,
)
