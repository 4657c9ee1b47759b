"""transformers ``Qwen4ExpForConditionalGeneration`` (Qwen4-Exp, multimodal): read through its text backbone.

A vision tower (``model.visual``, a ``Qwen4ExpVisionModel``) whose patch embeddings enter the
text stream, and the text backbone ``model.language_model`` (a ``Qwen4ExpTextModel``,
:mod:`~hiddenstate.interop.families.qwen4_exp_text`), whose ``linear_attn`` layers
(``Qwen4ExpTextGatedDeltaNet``, gated DeltaNet with a SiLU or sigmoid output gate) are the
recurrent ones. Only the text backbone's layers are in the layer map: the vision tower is not ours
(it runs as the model's own, on the images given to the model; token ids alone never reach it).
"""

from __future__ import annotations

from hiddenstate.interop.families.qwen3_5 import VISION_NOTE, tiny_vision
from hiddenstate.interop.families.qwen3_5_text import qwen3_5_family
from hiddenstate.interop.families.qwen4_exp_text import PARTS, QWEN4_NOTES
from hiddenstate.interop.families.qwen4_exp_text import tiny_config as text_tiny

__all__ = ["FAMILY", "tiny_config"]


def tiny_config():
    """A ``Qwen4ExpConfig``: the 4-layer text backbone of ``qwen4_exp_text`` and a one-block vision tower.

    Returns
    -------
    transformers.Qwen4ExpConfig
        Random weights from it: ``transformers.Qwen4ExpForConditionalGeneration(tiny_config())``.
    """
    import transformers

    return transformers.Qwen4ExpConfig(text_config=text_tiny().to_dict(), vision_config=tiny_vision(),
                                       image_token_id=47, video_token_id=48, vision_start_token_id=45,
                                       vision_end_token_id=46)


FAMILY = qwen3_5_family("qwen4_exp", ("Qwen4ExpForConditionalGeneration", "Qwen4ExpModel"),
                        stack="language_model.layers", notes=QWEN4_NOTES + VISION_NOTE, tiny_config=tiny_config,
                        parts=PARTS)
