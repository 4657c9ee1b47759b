"""transformers ``Inkling2ForCausalLM`` (Inkling 2's text model): scaled residual short convolutions in every layer.

Each decoder layer (``Inkling2SlidingDecoderLayer`` where ``config.layer_types[i]`` is
``"hybrid_sliding"``, ``Inkling2FullDecoderLayer`` where it is ``"hybrid"``) holds two
``Inkling2ShortConvolution`` modules on its sublayer outputs, ``post_attention_convolution`` and
``post_mlp_convolution``: ``y_t = (x_t + sum_k w_k x_{t-K+1+k}) / sqrt(K + 1)`` with K =
``conv_kernel_size`` taps, float32 (Inkling's residual convolution with an output scale). The
layer map records ``post_attention_convolution`` (transformers' conv state 2 of the layer) as our
:class:`~hiddenstate.kinds.shortconv.block.ShortConv` with its gates open and ``out_proj``
``1 / sqrt(K + 1)`` times the identity (:func:`~hiddenstate.interop.families.inkling_text.inkling_block`).

The keys and values pass through their own short convolutions (``self_attn.k_proj.sconv``,
``self_attn.v_proj.sconv``): static ones, the same math, in the sliding-window layers, and in the
full-attention layers ``Inkling2DynamicShortConvolution``, whose taps are input-dependent
(``static_weight + weight_proj(hidden_states)`` per token and key/value head, output scaled by
``1 / sqrt(2 K + 1)``). Those are the layer's parts, run as the model's own and not recorded: our
ShortConv has fixed taps, and the dynamic convolution is not one of our kinds yet.
"""

from __future__ import annotations

import math

from hiddenstate.interop.families.inkling_text import inkling_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "NOTES", "PARTS", "inkling2_block", "inkling2_family", "text_kwargs", "tiny_config"]

#: What surrounds the recorded convolution.
NOTES = ("The block attention residuals (attention_input, mlp_input), RMS norms, the sliding-window or full "
         "attention (its keys and values through their own short convolutions: dynamic, input-dependent taps in the "
         "full-attention layers), the soft-capped MoE and its scaled residual short convolution "
         "(post_mlp_convolution): the model's own. The recorded post_attention_convolution is one of the layer's "
         "four short convolutions; the other three are not recorded.")


def _sconv_role(what: str):
    def role(layer, index: int) -> str:
        dynamic = type(getattr(layer.self_attn, f"{what[0]}_proj").sconv).__name__.endswith("DynamicShortConvolution")
        return f"{'dynamic ' if dynamic else ''}short convolution ({what})"
    return role


#: The layer's other modules the map shows.
PARTS = {"self_attn": "attention", "self_attn.k_proj.sconv": _sconv_role("keys"),
         "self_attn.v_proj.sconv": _sconv_role("values"), "mlp": "moe",
         "post_mlp_convolution": "short convolution (MoE output)"}


def inkling2_block(mixer, config):
    """Our ShortConv computing a transformers ``Inkling2ShortConvolution``: ``(x + conv(x)) / sqrt(K + 1)``.

    Parameters
    ----------
    mixer : transformers Inkling2ShortConvolution
    config : transformers Inkling2TextConfig
        Not read.

    Returns
    -------
    ShortConv
        As :func:`~hiddenstate.interop.families.inkling_text.inkling_block` with ``scale`` ``1 / sqrt(K + 1)``.

    Raises
    ------
    ValueError
        A convolution with a bias or that is not depthwise.
    """
    return inkling_block(mixer, config, scale=1.0 / math.sqrt(int(mixer.conv_kernel_size) + 1))


def text_kwargs(**over) -> dict:
    """The fields of a tiny 4-layer Inkling 2 text config: width 16, 4 taps, 4-expert MoEs.

    Parameters
    ----------
    **over
        Fields added or replaced.

    Returns
    -------
    dict
        Layers 0, 1, 2 sliding-window attention (window 8), layer 3 full attention (dynamic
        short convolutions on its keys and values); attention-residual blocks of 2 layers.
    """
    cfg = dict(vocab_size=50, unpadded_vocab_size=50, hidden_size=16, num_hidden_layers=4, num_attention_heads=2,
               num_key_value_heads=1, head_dim=8, swa_num_attention_heads=2, swa_num_key_value_heads=1,
               swa_head_dim=8, sliding_window_size=8, d_rel=4, rel_extent=16, log_scaling_n_floor=8,
               conv_kernel_size=4, moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2,
               n_layers_per_attn_res_block=2, layer_types=["hybrid_sliding"] * 3 + ["hybrid"], pad_token_id=0,
               bos_token_id=1, eos_token_id=2)
    return {**cfg, **over}


def tiny_config():
    """A 4-layer ``Inkling2TextConfig`` (:func:`text_kwargs`).

    Returns
    -------
    transformers.Inkling2TextConfig
        Random weights from it: ``transformers.Inkling2ForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.Inkling2TextConfig(**text_kwargs())


def inkling2_family(name: str, classes: tuple, *, stack: str = "layers", notes: str = NOTES, tiny_config=None,
                    roles: dict | None = None, parts: dict | None = None) -> Family:
    """The family record of a model with Inkling 2's decoder layers (``post_attention_convolution`` recorded).

    Parameters
    ----------
    name : str
        The ``config.model_type``.
    classes : tuple of str
        The causal LM (or conditional-generation) class and its base model.
    stack : str, default "layers"
        The base model's path to the decoder layers.
    notes : str
        What surrounds the recorded convolution.
    tiny_config : callable, optional
    roles : dict, optional
        The layer map's roles (default ``{"post_attention_convolution": "recurrent"}``).
    parts : dict, optional
        The layer's other modules the map shows (default :data:`PARTS`).

    Returns
    -------
    Family
        Kind ``"shortconv"``.
    """
    roles = {"post_attention_convolution": "recurrent"} if roles is None else roles
    parts = PARTS if parts is None else parts
    return Family(name=name, classes=classes, kind="shortconv",
                  layers=lambda model: decoder_layer_map(model, roles, stack=stack, parts=parts),
                  to_block=inkling2_block, notes=notes, tiny_config=tiny_config)


FAMILY = inkling2_family("inkling2_text", ("Inkling2ForCausalLM", "Inkling2TextModel"), tiny_config=tiny_config)
