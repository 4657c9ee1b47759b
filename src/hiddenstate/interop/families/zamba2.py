"""transformers ``Zamba2ForCausalLM`` (Zyphra): a Mamba-2 mixer in every layer, shared attention blocks in some.

Every layer of ``model.layers`` holds a ``Zamba2MambaMixer``: a ``Zamba2MambaDecoderLayer``'s
``.mamba`` where ``config.layers_block_type[i]`` is ``"mamba"``, and in a ``Zamba2HybridLayer``
(``"hybrid"``) ``.mamba_decoder.mamba``, after the shared transformer block
``.shared_transformer`` (attention and MLP on the hidden state joined to the embeddings, weights
tied across the hybrid layers every ``num_mem_blocks``) and its ``.linear``, whose output is
added to the mixer's input before the layer's RMS norm. The layer map shows that block as the
hybrid layer's part (role ``"attention"``).

The mixer is transformers' Mamba-2 mixer with its options fixed by the mixer, not the config:
SiLU, a convolution bias (``config.use_conv_bias`` is not read), the gated norm's epsilon 1e-5,
and dt clamped below at ``config.time_step_min`` (``time_step_limit = (time_step_min, inf)``);
``d_inner = int(mamba_expand * hidden_size)``, ``head_dim = mamba_headdim``, ``n_groups =
mamba_ngroups``, ``bias = add_bias_linear`` (both projections): our :class:`~hiddenstate.Mamba2`
(:func:`~hiddenstate.interop.families.blocks.mamba2_block` reads them off the mixer).
``config.hidden_act`` is the shared block's MLP's activation, not the mixer's.
"""

from __future__ import annotations

from hiddenstate.interop.families.blocks import mamba2_block
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config", "to_block"]


def to_block(mixer, config):
    """A ``Zamba2MambaMixer`` as our :class:`~hiddenstate.Mamba2` (dt clamped at ``time_step_min``, norm eps 1e-5).

    Parameters
    ----------
    mixer : transformers Zamba2MambaMixer
        d_model = ``hidden_size`` M, d_state = ``mamba_d_state`` S, d_conv = ``mamba_d_conv``
        K, Di = ``int(mamba_expand * hidden_size)``, head_dim = ``mamba_headdim`` P, n_groups
        = ``mamba_ngroups`` G, H = ``n_mamba_heads`` = Di / P heads.
    config : transformers Zamba2Config

    Returns
    -------
    Mamba2
        float64, ``batch_first=True``, the mixer's weights.

    Raises
    ------
    ValueError
        ``config.n_mamba_heads`` times ``config.mamba_headdim`` other than Di (the mixer's
        heads would not cover its channels); what
        :func:`~hiddenstate.interop.families.blocks.mamba2_block` refuses.
    """
    H, P, Di = int(mixer.num_heads), int(mixer.head_dim), int(mixer.intermediate_size)
    if Di != H * P:
        raise ValueError(f"config.n_mamba_heads must divide Di = int(mamba_expand * hidden_size) = {Di} into heads of "
                         f"mamba_headdim = {P} channels (our block has H = Di / head_dim heads); got {H}.")
    return mamba2_block(mixer)


def tiny_config():
    """A 4-layer ``Zamba2Config``: Mamba-2 layers, layers 1 and 3 hybrid (one shared attention block).

    Returns
    -------
    transformers.Zamba2Config
        Random weights from it: ``transformers.Zamba2ForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.Zamba2Config(
        vocab_size=50, hidden_size=16, num_attention_heads=2, initializer_range=0.5, intermediate_size=32,
        num_hidden_layers=4, num_key_value_heads=2, mamba_d_state=8, mamba_d_conv=3, mamba_expand=2, mamba_ngroups=2,
        n_mamba_heads=4, chunk_size=8, layers_block_type=["mamba", "hybrid", "mamba", "hybrid"])


FAMILY = Family(
    name="zamba2",
    classes=("Zamba2ForCausalLM", "Zamba2Model"),
    kind="mamba2",
    layers=lambda model: decoder_layer_map(model, {"mamba": "recurrent", "mamba_decoder.mamba": "recurrent"},
                                           parts={"shared_transformer": "attention"}),
    to_block=to_block,
    notes="the shared attention block (attention and MLP) of each hybrid layer, its linear map added to the mixer's "
          "input, the RMS norm and the residual stay the model's own; dt clamped below at time_step_min inside the "
          "mixer (ours: time_step_limit).",
    tiny_config=tiny_config,
)
