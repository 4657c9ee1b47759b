"""transformers ``Mamba2ForCausalLM`` (Dao & Gu 2024): every layer a Mamba-2 mixer (``backbone.layers[i].mixer``).

The mixer is exactly our :class:`~hiddenstate.Mamba2`, its ``time_step_limit`` clamp of dt
included (:func:`~hiddenstate.interop.families.blocks.mamba2_block`).
"""

from __future__ import annotations

from hiddenstate.interop.families.blocks import mamba2_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config"]


def tiny_config():
    """A 2-layer ``Mamba2Config`` (4 heads of 4, 2 groups, ``chunk_size`` 8): builds in milliseconds.

    Returns
    -------
    transformers.Mamba2Config
        Random weights from it: ``transformers.Mamba2ForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.Mamba2Config(vocab_size=50, hidden_size=8, state_size=4, num_hidden_layers=2, expand=2,
                                     head_dim=4, num_heads=4, n_groups=2, conv_kernel=3, chunk_size=8,
                                     initializer_range=0.5)


FAMILY = Family(
    name="mamba2",
    classes=("Mamba2ForCausalLM", "Mamba2Model"),
    kind="mamba2",
    layers=lambda model: decoder_layer_map(model, {"mixer": "recurrent"}),
    to_block=lambda mixer, config: mamba2_block(mixer),
    notes="RMS norm before each mixer and the residual around it stay the model's own.",
    tiny_config=tiny_config,
)
