"""transformers ``Inkling2LoopForCausalLM`` (Inkling 2 with looped layers): Inkling 2's layers, a block run several times.

The decoder layers are Inkling 2's (:mod:`~hiddenstate.interop.families.inkling2_text`), but
layers ``loop_layer_index_start`` to ``loop_layer_index_end - 1`` run ``loop_num_passes`` times
in one forward pass: each later pass restarts from the states before the loop, and each of its
sublayers mixes in a message from the previous pass through an ``Inkling2LoopMessageGate``,
``(1 - tanh(f)) * h + tanh(m) * message`` with gates f, m of a low-rank projection of both.
That gate is a recurrence over the loop's passes (depth), not over time: at every position it
is a fixed number of steps (``loop_num_passes - 1``), and it has no state a step in time
carries. It is named in the layer map and not recorded: our kinds are recurrences over time.

The layers outside the loop are recorded as Inkling 2's (``post_attention_convolution``, a
scaled residual short convolution, our ShortConv). A looped layer's short convolutions run once
per pass (each pass with its own cache copy): its role in the layer map is ``"looped"``, not
recorded, because one recorded state per time step would have to pick one pass.
"""

from __future__ import annotations

from hiddenstate.interop.families.inkling2_text import NOTES, PARTS, inkling2_family, text_kwargs

__all__ = ["FAMILY", "LOOP_NOTE", "LOOP_PARTS", "ROLES", "loop_kwargs", "tiny_config"]

#: The notes' sentences on the loop.
LOOP_NOTE = (" Layers loop_layer_index_start .. loop_layer_index_end - 1 run loop_num_passes times; their message "
             "gates (a recurrence over the passes, not over time) and their short convolutions (once per pass) are "
             "the model's own, not recorded (role 'looped').")


def _role(layer, index: int) -> str:
    return "looped" if hasattr(layer, "q_message_gate") else "recurrent"


#: The layer map's roles: a looped layer's short convolution is shown, not recorded.
ROLES = {"post_attention_convolution": _role}

#: Inkling 2's parts and a looped layer's four message gates.
LOOP_PARTS = {**PARTS, **{f"{w}_message_gate": "loop message gate (over passes)" for w in ("q", "k", "v", "mlp")}}


def loop_kwargs() -> dict:
    """The fields of a tiny 6-layer Inkling 2 loop text config: layers 2 and 3 looped twice.

    Returns
    -------
    dict
        Inkling 2's tiny text fields (:func:`~hiddenstate.interop.families.inkling2_text.text_kwargs`)
        with 6 layers (full attention at 3, looped, and 5), attention-residual blocks of 2, loop
        gates of rank 4.
    """
    return text_kwargs(num_hidden_layers=6, layer_types=["hybrid_sliding"] * 3 + ["hybrid", "hybrid_sliding", "hybrid"],
                       loop_layer_index_start=2, loop_layer_index_end=4, loop_num_passes=2, loop_gate_rank=4)


def tiny_config():
    """A 6-layer ``Inkling2LoopTextConfig`` (:func:`loop_kwargs`).

    Returns
    -------
    transformers.Inkling2LoopTextConfig
        Random weights from it: ``transformers.Inkling2LoopForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.Inkling2LoopTextConfig(**loop_kwargs())


FAMILY = inkling2_family("inkling2_loop_text", ("Inkling2LoopForCausalLM", "Inkling2LoopTextModel"),
                         tiny_config=tiny_config, roles=ROLES, parts=LOOP_PARTS, notes=NOTES + LOOP_NOTE)
