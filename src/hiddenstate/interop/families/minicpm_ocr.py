"""transformers ``MiniCPMOcrForConditionalGeneration`` (MiniCPM-OCR): a vision encoder on Qwen3.5's text backbone.

As :mod:`~hiddenstate.interop.families.minicpmv4_6`: ``model.language_model`` (by default a
``Qwen3_5TextModel``) holds the recurrent ``linear_attn`` layers; the vision encoder is not ours.
"""

from __future__ import annotations

from hiddenstate.interop.families.minicpmv4_6 import MINICPM_NOTES, minicpm_config
from hiddenstate.interop.families.qwen3_5_text import qwen3_5_family

__all__ = ["FAMILY", "tiny_config"]


def tiny_config():
    """A ``MiniCPMOcrConfig``: the 4-layer Qwen3.5 text backbone and a 2-layer vision encoder.

    Returns
    -------
    transformers.MiniCPMOcrConfig
        Random weights from it: ``transformers.MiniCPMOcrForConditionalGeneration(tiny_config())``.
    """
    return minicpm_config("MiniCPMOcrConfig")


FAMILY = qwen3_5_family("minicpm_ocr", ("MiniCPMOcrForConditionalGeneration", "MiniCPMOcrModel"), stack="language_model.layers",
                        notes=MINICPM_NOTES, tiny_config=tiny_config)
