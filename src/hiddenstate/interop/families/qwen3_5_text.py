"""transformers ``Qwen3_5ForCausalLM`` (Qwen3.5's text backbone): gated DeltaNet in 3 of 4 layers, MLP feed-forwards.

``model.layers[i]`` holds ``linear_attn`` (a ``Qwen3_5GatedDeltaNet``, the gated delta rule of
Yang et al. 2024) where ``config.layer_types[i]`` is ``"linear_attention"`` (by default three
layers of every four) and ``self_attn`` (gated full attention) where it is ``"full_attention"``;
every layer's feed-forward is a ``Qwen3_5MLP`` (the layer map's ``"mlp"`` part). The mixer is
Qwen3-Next's with split projections (``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``,
``in_proj_a``): exactly our :class:`~hiddenstate.kinds.delta.block.GatedDeltaNet`
(``layout="qwen3_5"``) when ``hidden_act`` is ``"silu"``. :func:`qwen3_5_family` builds the
records of the Qwen3.5 kin (qwen3_5, qwen3_5_moe and their text backbones, qwen4_exp_text,
lara_mini); :func:`text_config` their tiny text configs.
"""

from __future__ import annotations

from hiddenstate.interop.families.delta_blocks import gated_delta_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "NOTES", "qwen3_5_family", "text_config", "tiny_config"]

#: What surrounds a Qwen3.5 mixer, the model's own (the family records' ``notes`` start with it).
NOTES = ("RMS norm (1 + weight) before each mixer, the residual, and the MLP or MoE feed-forward: the model's own; "
         "transformers computes the delta rule and the gated norm in float32.")

#: The recurrent and attention layers of a four-layer tiny model: three of four recurrent, as the checkpoints.
LAYER_TYPES = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]


def _ffn_role(layer, index: int) -> str:
    return "moe" if hasattr(layer.mlp, "experts") else "mlp"


def qwen3_5_family(name: str, classes: tuple, *, stack: str = "layers", notes: str = NOTES, tiny_config=None,
                   parts: dict | None = None) -> Family:
    """The family record of a model with Qwen3.5's decoder layers (``linear_attn`` or ``self_attn``, then ``mlp``).

    Parameters
    ----------
    name : str
        The ``config.model_type``.
    classes : tuple of str
        The causal LM (or conditional-generation) class and its base model.
    stack : str, default "layers"
        The base model's path to the decoder layers (``"language_model.layers"`` for a
        multimodal model: only its text backbone is read).
    notes : str
        What surrounds the mixer (the report's notes).
    tiny_config : callable, optional
        The family's tiny config.
    parts : dict of str to str or callable, optional
        The layer's other modules the map shows; default its ``mlp`` (``"mlp"`` or ``"moe"``).

    Returns
    -------
    Family
        Kind ``"gated_delta"``; each recurrent mixer onto ``GatedDeltaNet(layout="qwen3_5")``.
    """
    parts = {"mlp": _ffn_role} if parts is None else parts
    return Family(name=name, classes=classes, kind="gated_delta",
                  layers=lambda model: decoder_layer_map(model, {"linear_attn": "recurrent", "self_attn": "attention"},
                                                         stack=stack, parts=parts),
                  to_block=lambda mixer, config: gated_delta_block(mixer, "qwen3_5"), notes=notes,
                  tiny_config=tiny_config)


def text_config(config_class: str, **over):
    """A tiny text config of the Qwen3.5 kin: 4 layers (gated DeltaNet at 0, 1, 2; attention at 3), width 16.

    Parameters
    ----------
    config_class : str
        The transformers config class (``"Qwen3_5TextConfig"``, ``"LaraMiniConfig"``, ...).
    **over
        Fields added or replaced (the MoE sizes of a MoE model).

    Returns
    -------
    transformers config
    """
    import transformers

    cfg = dict(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=4, num_attention_heads=2,
               num_key_value_heads=1, head_dim=8, layer_types=list(LAYER_TYPES), linear_num_key_heads=2,
               linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=6, linear_conv_kernel_dim=3,
               pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return getattr(transformers, config_class)(**{**cfg, **over})


def tiny_config():
    """A 4-layer ``Qwen3_5TextConfig``: gated DeltaNet at layers 0, 1 and 2, attention at 3, MLPs.

    Returns
    -------
    transformers.Qwen3_5TextConfig
        Random weights from it: ``transformers.Qwen3_5ForCausalLM(tiny_config())``.
    """
    return text_config("Qwen3_5TextConfig")


FAMILY = qwen3_5_family("qwen3_5_text", ("Qwen3_5ForCausalLM", "Qwen3_5TextModel"), tiny_config=tiny_config)
