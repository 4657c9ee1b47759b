"""transformers ``Inkling2ForConditionalGeneration`` (Inkling 2, multimodal): read through its text backbone.

``model.vision_tower`` (a patch encoder and its merger) turns images into embeddings of the text
stream; ``model.language_model`` is an ``Inkling2TextModel``, whose scaled residual short
convolutions are the recurrent part (:mod:`~hiddenstate.interop.families.inkling2_text`:
``post_attention_convolution`` recorded). Only the text backbone's layers are in the layer map:
the vision tower is not ours.
"""

from __future__ import annotations

from hiddenstate.interop.families.inkling2_text import NOTES, inkling2_family, text_kwargs

__all__ = ["FAMILY", "VISION", "VISION_NOTE", "tiny_config"]

#: A one-layer vision tower of width 16 (its ``text_hidden_size`` the text backbone's 16).
VISION = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, patch_size=4, posemb_grid_size=4,
              projection_hidden_dim=16, text_hidden_size=16)

#: The notes' sentence on the vision tower.
VISION_NOTE = (" The vision tower (model.vision_tower) is not ours: the layer map is the text backbone's "
               "(model.language_model).")


def tiny_config():
    """An ``Inkling2Config``: the 4-layer text backbone of ``inkling2_text`` and a one-layer vision tower.

    Returns
    -------
    transformers.Inkling2Config
        Random weights from it: ``transformers.Inkling2ForConditionalGeneration(tiny_config())``.
    """
    import transformers

    return transformers.Inkling2Config(text_config=text_kwargs(), vision_config=dict(VISION), image_token_id=47)


FAMILY = inkling2_family("inkling2", ("Inkling2ForConditionalGeneration", "Inkling2Model"),
                         stack="language_model.layers", tiny_config=tiny_config, notes=NOTES + VISION_NOTE)
