"""transformers ``Inkling2LoopForConditionalGeneration`` (Inkling 2 with looped layers, multimodal): its text backbone.

``model.vision_tower`` turns images into embeddings of the text stream; ``model.language_model``
is an ``Inkling2LoopTextModel`` (:mod:`~hiddenstate.interop.families.inkling2_loop_text`: the
layers outside the loop recorded, the looped ones and their message gates named, not recorded).
Only the text backbone's layers are in the layer map: the vision tower is not ours.
"""

from __future__ import annotations

from hiddenstate.interop.families.inkling2 import VISION, VISION_NOTE
from hiddenstate.interop.families.inkling2_loop_text import LOOP_NOTE, LOOP_PARTS, ROLES, loop_kwargs
from hiddenstate.interop.families.inkling2_text import NOTES, inkling2_family

__all__ = ["FAMILY", "tiny_config"]


def tiny_config():
    """An ``Inkling2LoopConfig``: the 6-layer text backbone of ``inkling2_loop_text`` and a one-layer vision tower.

    Returns
    -------
    transformers.Inkling2LoopConfig
        Random weights from it: ``transformers.Inkling2LoopForConditionalGeneration(tiny_config())``.
    """
    import transformers

    return transformers.Inkling2LoopConfig(text_config=loop_kwargs(), vision_config=dict(VISION), image_token_id=47)


FAMILY = inkling2_family("inkling2_loop", ("Inkling2LoopForConditionalGeneration", "Inkling2LoopModel"),
                         stack="language_model.layers", tiny_config=tiny_config, roles=ROLES, parts=LOOP_PARTS,
                         notes=NOTES + LOOP_NOTE + VISION_NOTE)
