"""transformers ``Qwen3_5MoeForConditionalGeneration`` (Qwen3.5-MoE, multimodal): read through its text backbone.

The checkpoints (Qwen3.5-35B-A3B, ...) are this class: a vision tower (``model.visual``) and the
text backbone ``model.language_model`` (a ``Qwen3_5MoeTextModel``,
:mod:`~hiddenstate.interop.families.qwen3_5_moe_text`), whose ``linear_attn`` layers
(``Qwen3_5MoeGatedDeltaNet``) are the recurrent ones and whose feed-forwards are sparse MoEs.
The vision tower is not ours: the layer map is the text backbone's.
"""

from __future__ import annotations

from hiddenstate.interop.families.qwen3_5 import VISION_NOTE, tiny_vision
from hiddenstate.interop.families.qwen3_5_moe_text import MOE
from hiddenstate.interop.families.qwen3_5_text import NOTES, qwen3_5_family, text_config

__all__ = ["FAMILY", "tiny_config"]


def tiny_config():
    """A ``Qwen3_5MoeConfig``: the 4-layer MoE text backbone of ``qwen3_5_moe_text`` and a one-block vision tower.

    Returns
    -------
    transformers.Qwen3_5MoeConfig
        Random weights from it: ``transformers.Qwen3_5MoeForConditionalGeneration(tiny_config())``.
    """
    import transformers

    return transformers.Qwen3_5MoeConfig(text_config=text_config("Qwen3_5MoeTextConfig", **MOE).to_dict(),
                                         vision_config=tiny_vision(), image_token_id=47, video_token_id=48,
                                         vision_start_token_id=45, vision_end_token_id=46)


FAMILY = qwen3_5_family("qwen3_5_moe", ("Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeModel"),
                        stack="language_model.layers", notes=NOTES + VISION_NOTE, tiny_config=tiny_config)
