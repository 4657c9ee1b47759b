"""transformers ``MiniCPMV4_6ForConditionalGeneration`` (MiniCPM-V 4.6): a vision encoder on Qwen3.5's text backbone.

``model.vision_tower`` (a SigLIP-like encoder) and its resampler turn images into embeddings of
the text stream; ``model.language_model`` is an ``AutoModel`` of ``config.text_config``, by
default a ``Qwen3_5TextModel`` whose ``linear_attn`` layers (``Qwen3_5GatedDeltaNet``) are the
recurrent ones (:mod:`~hiddenstate.interop.families.qwen3_5_text`). Only the text backbone's layers
are in the layer map: the vision encoder is not ours. A text backbone without gated DeltaNet
layers has no recurrent layer and is refused by the layer map.
"""

from __future__ import annotations

from hiddenstate.interop.families.qwen3_5_text import NOTES, qwen3_5_family, text_config

__all__ = ["FAMILY", "MINICPM_NOTES", "minicpm_config", "tiny_config"]

#: What surrounds the mixers of a MiniCPM-V model, the model's own.
MINICPM_NOTES = NOTES + (" The vision encoder and its resampler (model.vision_tower, model.merger) are not ours: the "
                         "layer map is the text backbone's (model.language_model).")


def minicpm_config(config_class: str):
    """A tiny MiniCPM-V config: the 4-layer Qwen3.5 text backbone and a 2-layer vision encoder of width 16.

    Parameters
    ----------
    config_class : str
        ``"MiniCPMV4_6Config"``, ``"MiniCPMV4_7Config"`` or ``"MiniCPMOcrConfig"``.

    Returns
    -------
    transformers config
    """
    import transformers

    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=32,
                  patch_size=4, insert_layer_id=1)
    return getattr(transformers, config_class)(text_config=text_config("Qwen3_5TextConfig").to_dict(),
                                                vision_config=vision, insert_layer_id=1, image_size=32)


def tiny_config():
    """A ``MiniCPMV4_6Config``: the 4-layer Qwen3.5 text backbone and a 2-layer vision encoder.

    Returns
    -------
    transformers.MiniCPMV4_6Config
        Random weights from it: ``transformers.MiniCPMV4_6ForConditionalGeneration(tiny_config())``.
    """
    return minicpm_config("MiniCPMV4_6Config")


FAMILY = qwen3_5_family("minicpmv4_6", ("MiniCPMV4_6ForConditionalGeneration", "MiniCPMV4_6Model"),
                        stack="language_model.layers", notes=MINICPM_NOTES, tiny_config=tiny_config)
