"""transformers ``ZambaForCausalLM`` (Zyphra): a multi-head Mamba-1 mixer in every layer, shared attention blocks.

Every layer of ``model.layers`` holds a ``ZambaMambaMixer``: a ``ZambaMambaDecoderLayer``'s
``.mamba`` where ``config.layers_block_type[i]`` is ``"linear_attention"``, and in a
``ZambaHybridLayer`` (``"hybrid"``) ``.mamba_decoder.mamba``, after the shared transformer block
``.shared_transf`` (attention and MLP on the hidden state joined to the embeddings, weights tied
across the hybrid layers) and its ``.linear`` whose output is added to the mixer's input before
the layer's RMS norm. The layer map shows that block as the hybrid layer's part (role
``"attention"``). The mixer splits Di into ``config.n_mamba_heads`` heads, each with its own
``x_proj`` and ``dt_proj`` (``x_proj_weight`` (H, R + 2S, Dh), ``dt_proj_weight`` (H, Dh, R)),
no norms, and reads ``in_proj``'s rows as interleaved (x, z) pairs: our
:class:`~hiddenstate.Mamba` with ``num_heads``. Its cache's SSM state (N, H, Dh, S) is ours
(N, Di, S) reshaped; of its convolution state (N, Di, K), ours is the last K - 1 columns.
``config.hidden_mamba_act`` is the convolution's activation (``config.hidden_act`` is the MLP's).
"""

from __future__ import annotations

from hiddenstate.interop.families.blocks import mamba_block, require_silu
from hiddenstate.interop.families.registry import Family, decoder_layer_map

__all__ = ["FAMILY", "tiny_config", "to_block"]


def to_block(mixer, config):
    """A ``ZambaMambaMixer`` as our :class:`~hiddenstate.Mamba` (``num_heads=n_mamba_heads``, no norms).

    Parameters
    ----------
    mixer : transformers ZambaMambaMixer
        d_model = ``hidden_size`` M, d_state = ``mamba_d_state`` S, d_conv = ``mamba_d_conv``
        K, expand = ``mamba_expand``, dt_rank = ``mamba_dt_rank`` R, bias = ``mamba_proj_bias``,
        conv_bias = ``mamba_conv_bias``, H = ``n_mamba_heads`` heads of Dh = Di / H channels.
    config : transformers ZambaConfig

    Returns
    -------
    Mamba
        float64, ``batch_first=True``, the mixer's weights.

    Raises
    ------
    ValueError
        ``config.hidden_mamba_act`` other than ``"silu"``; ``n_mamba_heads`` not dividing Di;
        what :func:`~hiddenstate.interop.families.blocks.mamba_block` refuses.
    """
    require_silu(config, "hidden_mamba_act")
    H, Di = int(mixer.n_mamba_heads), int(mixer.intermediate_size)
    if H < 1 or Di % H:
        raise ValueError(f"config.n_mamba_heads must divide the mixer's Di = mamba_expand * hidden_size = {Di} (our "
                         f"block's heads have Di / H channels each); got {H}.")
    return mamba_block(mixer, num_heads=H)


def tiny_config():
    """A 5-layer ``ZambaConfig``: 2-head Mamba-1 mixers, layers 2 and 4 hybrid (the shared attention block).

    Returns
    -------
    transformers.ZambaConfig
        Random weights from it: ``transformers.ZambaForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.ZambaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=5,
                                    num_attention_heads=2, num_key_value_heads=2, n_mamba_heads=2, mamba_d_state=5,
                                    mamba_dt_rank=3, attn_layer_period=2, attn_layer_offset=1, initializer_range=0.5)


FAMILY = Family(
    name="zamba",
    classes=("ZambaForCausalLM", "ZambaModel"),
    kind="mamba",
    layers=lambda model: decoder_layer_map(model, {"mamba": "recurrent", "mamba_decoder.mamba": "recurrent"},
                                           parts={"shared_transf": "attention"}),
    to_block=to_block,
    notes="the shared attention block of each hybrid layer, its linear map added to the mixer's input, the RMS norm "
          "and the residual stay the model's own.",
    tiny_config=tiny_config,
)
