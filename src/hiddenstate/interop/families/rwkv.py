"""transformers ``RwkvForCausalLM`` (RWKV-4): every block a time mixing and a channel mixing.

``model.rwkv.blocks[i]`` is an ``RwkvBlock``: ``ln1``, the ``RwkvSelfAttention`` (``attention``,
the time mixing with the WKV recurrence, recorded), the residual, ``ln2``, the
``RwkvFeedForward`` (``feed_forward``, the channel mixing: a token shift and a squared-ReLU
MLP), the residual. The layer map lists one entry per block, its ``attention`` (role
``"recurrent"``); the layer norms (and block 0's ``pre_ln``) and the channel mixing stay the
model's own. The hook reads the time mixing's input (after ``ln1``) and its output (it returns
``(output, state)``).

``RwkvSelfAttention`` is our :class:`~hiddenstate.kinds.rwkv.block.RWKVTimeMix` under the same parameter
names (:func:`time_mix_block`). transformers' CPU path rounds every key to float32 and keeps the
WKV state in float32 whatever the model's dtype; ours runs in float64.

In eval mode ``RwkvModel`` divides block i's ``attention.output.weight`` by ``2 ** (i //
rescale_every)`` in place before its first forward pass (and multiplies it back when it runs in
training mode): the block is built from the weights as they are when it is converted, which
:func:`~hiddenstate.interop.families.hooks.recompute_layers` does after the model's own run, so
it computes what the model computed.
"""

from __future__ import annotations

from hiddenstate.interop.families.blocks import mixer_weights
from hiddenstate.interop.families.registry import Family, decoder_layer_map
from hiddenstate.kinds.rwkv.block import RWKVTimeMix

__all__ = ["FAMILY", "time_mix_block", "tiny_config"]


def tiny_config():
    """A 3-block ``RwkvConfig`` (M = A = 16, channel mixing 32 wide, context 64).

    Returns
    -------
    transformers.RwkvConfig
        Random weights from it: ``transformers.RwkvForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.RwkvConfig(vocab_size=50, hidden_size=16, attention_hidden_size=16, intermediate_size=32,
                                   num_hidden_layers=3, context_length=64)


def time_mix_block(attention, config=None) -> RWKVTimeMix:
    """Our :class:`~hiddenstate.kinds.rwkv.block.RWKVTimeMix` with the weights of a transformers ``RwkvSelfAttention``.

    Parameters
    ----------
    attention : transformers RwkvSelfAttention
        ``config.hidden_size`` M, ``attention_hidden_size`` A and the parameters of
        :attr:`~hiddenstate.kinds.rwkv.block.RWKVTimeMix.params` under the same names.
    config : transformers RwkvConfig, optional
        The model's config (unused: the module carries its own).

    Returns
    -------
    RWKVTimeMix
        float64, ``batch_first=True`` (the module's (N, T, M)), ``scan="parallel"``.
    """
    blk = RWKVTimeMix(int(attention.config.hidden_size), int(attention.attention_hidden_size), batch_first=True)
    blk.load_state_dict(mixer_weights(attention))
    return blk


FAMILY = Family(
    name="rwkv",
    classes=("RwkvForCausalLM", "RwkvModel"),
    kind="rwkv",
    layers=lambda model: decoder_layer_map(model, {"attention": "recurrent"}, stack="blocks"),
    to_block=time_mix_block,
    notes="Layer norms before the time mixing (block 0's pre_ln too), the residual, and the channel mixing "
          "(RwkvFeedForward: token shift, squared-ReLU MLP, its own layer norm and residual) in every block: the "
          "model's own; the halving of the hidden states every rescale_every blocks too.",
    tiny_config=tiny_config,
)
