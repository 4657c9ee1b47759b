"""transformers ``LaraMiniForCausalLM`` (Lara-mini): Qwen3.5's gated DeltaNet, sliding-window attention, MoEs.

``model.layers[i]`` holds ``linear_attn`` (a ``LaraMiniGatedDeltaNet``) where
``config.layer_types[i]`` is ``"linear_attention"`` and ``self_attn`` where it is not; every
feed-forward is a sparse MoE. The published checkpoints fuse the mixer's input projections into
one ``in_proj`` (rows ``[q | k | v | z | b | a]``) and name its gated norm ``out_norm``:
transformers' weight conversion splits and renames them at load (and restores them at save), so
the module, and our block, hold the split ``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``,
``in_proj_a`` (:class:`~hiddenstate.kinds.delta.block.GatedDeltaNet`, ``layout="qwen3_5"``).
A ``save_pretrained`` directory keeps the fused form, which the directory loader reads back
through the same conversion.
"""

from __future__ import annotations

from hiddenstate.interop.families.qwen3_5_moe_text import MOE
from hiddenstate.interop.families.qwen3_5_text import NOTES, qwen3_5_family, text_config

__all__ = ["FAMILY", "tiny_config"]


def tiny_config():
    """A 4-layer ``LaraMiniConfig``: gated DeltaNet at layers 0, 1 and 2, attention at 3, 4-expert MoEs.

    Returns
    -------
    transformers.LaraMiniConfig
        Random weights from it: ``transformers.LaraMiniForCausalLM(tiny_config())``.
    """
    return text_config("LaraMiniConfig", **MOE)


FAMILY = qwen3_5_family("lara_mini", ("LaraMiniForCausalLM", "LaraMiniModel"), tiny_config=tiny_config,
                        notes=NOTES + " The checkpoints' fused in_proj is split (and out_norm renamed norm) by "
                              "transformers' weight conversion at load.")
