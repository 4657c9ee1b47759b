"""transformers ``Qwen3_5MoeForCausalLM`` (Qwen3.5-MoE's text backbone): gated DeltaNet in 3 of 4 layers, MoE feed-forwards.

As :mod:`~hiddenstate.interop.families.qwen3_5_text` with a sparse MoE feed-forward in every
layer (``Qwen3_5MoeSparseMoeBlock``: routed experts and a gated shared expert, the layer map's
``"moe"`` part). The recurrent mixer (``Qwen3_5MoeGatedDeltaNet``) is Qwen3.5's: our
:class:`~hiddenstate.kinds.delta.block.GatedDeltaNet` (``layout="qwen3_5"``).
"""

from __future__ import annotations

from hiddenstate.interop.families.qwen3_5_text import qwen3_5_family, text_config

__all__ = ["FAMILY", "MOE", "tiny_config"]

#: The MoE sizes of the tiny Qwen3.5-MoE configs: 4 experts of width 16, 2 a token, a shared expert.
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16)


def tiny_config():
    """A 4-layer ``Qwen3_5MoeTextConfig``: gated DeltaNet at layers 0, 1 and 2, attention at 3, 4-expert MoEs.

    Returns
    -------
    transformers.Qwen3_5MoeTextConfig
        Random weights from it: ``transformers.Qwen3_5MoeForCausalLM(tiny_config())``.
    """
    return text_config("Qwen3_5MoeTextConfig", **MOE)


FAMILY = qwen3_5_family("qwen3_5_moe_text", ("Qwen3_5MoeForCausalLM", "Qwen3_5MoeTextModel"),
                        tiny_config=tiny_config)
