"""transformers ``Qwen3_5ForConditionalGeneration`` (Qwen3.5, multimodal): read through its text backbone.

The checkpoints (Qwen3.5-27B, ...) are this class: a vision tower (``model.visual``, a
``Qwen3_5VisionModel``) whose patch embeddings enter the text stream, and the text backbone
``model.language_model`` (a ``Qwen3_5TextModel``, :mod:`~hiddenstate.interop.families.qwen3_5_text`),
whose ``linear_attn`` layers (``Qwen3_5GatedDeltaNet``, three of every four) are the recurrent
ones. Only the text backbone's layers are in the layer map: the vision tower is not ours (it runs
as the model's own, on the images given to the model; token ids alone never reach it).
"""

from __future__ import annotations

from hiddenstate.interop.families.qwen3_5_text import NOTES, qwen3_5_family, text_config

__all__ = ["FAMILY", "VISION_NOTE", "tiny_config", "tiny_vision"]

#: The notes' sentence on a multimodal model's vision tower.
VISION_NOTE = " The vision tower (model.visual) is not ours: the layer map is the text backbone's (model.language_model)."


def tiny_vision() -> dict:
    """A one-block vision tower of width 16 (the Qwen3.5 kin's ``vision_config``), its output width 16.

    Returns
    -------
    dict
        The ``vision_config`` fields.
    """
    return dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=4, spatial_merge_size=2,
                temporal_patch_size=2, out_hidden_size=16, num_position_embeddings=16)


def tiny_config():
    """A ``Qwen3_5Config``: the 4-layer text backbone of ``qwen3_5_text`` and a one-block vision tower.

    Returns
    -------
    transformers.Qwen3_5Config
        Random weights from it: ``transformers.Qwen3_5ForConditionalGeneration(tiny_config())``.
    """
    import transformers

    return transformers.Qwen3_5Config(text_config=text_config("Qwen3_5TextConfig").to_dict(),
                                      vision_config=tiny_vision(), image_token_id=47, video_token_id=48,
                                      vision_start_token_id=45, vision_end_token_id=46)


FAMILY = qwen3_5_family("qwen3_5", ("Qwen3_5ForConditionalGeneration", "Qwen3_5Model"),
                        stack="language_model.layers", notes=NOTES + VISION_NOTE, tiny_config=tiny_config)
