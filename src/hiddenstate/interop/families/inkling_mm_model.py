"""transformers ``InklingForConditionalGeneration`` (Inkling, multimodal): read through its text backbone.

``model.vision_tower`` (a patch encoder) and ``model.audio_tower`` (embeddings of quantised mel
frames) turn images and audio into embeddings of the text stream; ``model.language_model`` is an
``InklingTextModel`` whose four residual short convolutions per layer are the recurrent part
(:mod:`~hiddenstate.interop.families.inkling_text`: ``attn_sconv`` recorded). Only the text
backbone's layers are in the layer map: the vision and audio towers are not ours.
"""

from __future__ import annotations

from hiddenstate.interop.families.inkling_text import NOTES, inkling_family, text_kwargs

__all__ = ["FAMILY", "tiny_config"]


def tiny_config():
    """An ``InklingConfig``: the 4-layer text backbone of ``inkling_text``, a 1-layer vision tower, 8 mel bins.

    Returns
    -------
    transformers.InklingConfig
        Random weights from it: ``transformers.InklingForConditionalGeneration(tiny_config())``.
    """
    import transformers

    vision = dict(patch_size=4, hidden_size=16, num_hidden_layers=1, num_attention_heads=2)
    return transformers.InklingConfig(text_config=text_kwargs(), vision_config=vision,
                                      audio_config=dict(n_mel_bins=8, mel_vocab_size=16), image_token_id=47,
                                      audio_token_id=48, image_bos_token_id=45, audio_bos_token_id=46)


FAMILY = inkling_family("inkling_mm_model", ("InklingForConditionalGeneration", "InklingModel"),
                        stack="language_model.layers", tiny_config=tiny_config,
                        notes=NOTES + " The vision and audio towers (model.vision_tower, model.audio_tower) are not "
                                      "ours: the layer map is the text backbone's (model.language_model).")
