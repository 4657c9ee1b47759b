"""transformers ``MiniCPMV4_7ForConditionalGeneration`` (MiniCPM-V 4.7): a vision encoder on Qwen3.5's text backbone.

As :mod:`~hiddenstate.interop.families.minicpmv4_6`: ``model.language_model`` (by default a
``Qwen3_5TextModel``) holds the recurrent ``linear_attn`` layers; the vision encoder is not ours.
"""

from __future__ import annotations

from hiddenstate.interop.families.minicpmv4_6 import MINICPM_NOTES, minicpm_config
from hiddenstate.interop.families.qwen3_5_text import qwen3_5_family

__all__ = ["FAMILY", "tiny_config"]


def tiny_config():
    """A ``MiniCPMV4_7Config``: the 4-layer Qwen3.5 text backbone and a 2-layer vision encoder.

    Returns
    -------
    transformers.MiniCPMV4_7Config
        Random weights from it: ``transformers.MiniCPMV4_7ForConditionalGeneration(tiny_config())``.
    """
    return minicpm_config("MiniCPMV4_7Config")


FAMILY = qwen3_5_family("minicpmv4_7", ("MiniCPMV4_7ForConditionalGeneration", "MiniCPMV4_7Model"), stack="language_model.layers",
                        notes=MINICPM_NOTES, tiny_config=tiny_config)
