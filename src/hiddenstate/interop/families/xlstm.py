"""transformers ``xLSTMForCausalLM`` (NX-AI): every block an mLSTM layer and a gated feed-forward.

``model.backbone.blocks[i]`` is an ``xLSTMBlock``: an RMS norm, the ``xLSTMLayer`` (``mlstm_layer``,
recorded), the residual, an RMS norm and the ``xLSTMFeedForward`` (``ffn``), the residual. The
layer map lists one entry per block, its ``mlstm_layer`` (role ``"recurrent"``); the norms and
the feed-forward stay the model's own. The hook reads the layer's input (after ``norm_mlstm``)
and its output ``y`` (it returns ``(y, state)``).

The ``xLSTMLayer`` is our :class:`~hiddenstate.kinds.mlstm.block.MLSTMLayer` with the layer's own sizes
(``qk_dim = int(hidden_size * qk_dim_factor)``, ``v_dim``), ``weight_mode``, ``use_bias``,
``gate_soft_cap``, the multi-head norm's ``eps`` and the backend's ``eps``
(:func:`mlstm_layer_block`). transformers keeps the recurrent state in
``config.inference_state_dtype`` (float32 by default) and reduces the norms in float32 whatever
the model's dtype; ours runs in float64.

Not recomputed: a model whose forward runs the layers on chunks of ``max_inference_chunksize``
steps (T above it, eval mode): each layer then runs once per chunk, which
:func:`~hiddenstate.interop.families.hooks.recompute_layers` refuses in one line (record fewer
steps, or raise ``config.max_inference_chunksize``).
"""

from __future__ import annotations

from hiddenstate.interop.families.blocks import mixer_weights
from hiddenstate.interop.families.registry import Family, decoder_layer_map
from hiddenstate.kinds.mlstm.block import MLSTMLayer

__all__ = ["FAMILY", "mlstm_layer_block", "tiny_config"]


def tiny_config():
    """A 2-block ``xLSTMConfig`` (M = 64, 2 heads, qk and v dims 64, chunks of 8 steps).

    Returns
    -------
    transformers.xLSTMConfig
        Random weights from it: ``transformers.xLSTMForCausalLM(tiny_config())``. M times
        ``qk_dim_factor`` is a multiple of 64 (transformers' cache sizes); inputs longer than
        ``max_inference_chunksize`` (16384) run in chunks, which the recomputation refuses.
    """
    import transformers

    return transformers.xLSTMConfig(vocab_size=50, hidden_size=64, num_heads=2, qk_dim_factor=1.0, v_dim_factor=1.0,
                                    num_hidden_layers=2, chunk_size=8)


def mlstm_layer_block(layer, config=None) -> MLSTMLayer:
    """Our :class:`~hiddenstate.kinds.mlstm.block.MLSTMLayer` with the weights and sizes of a transformers ``xLSTMLayer``.

    Parameters
    ----------
    layer : transformers xLSTMLayer
        Its ``config`` (``hidden_size``, ``num_heads``, ``weight_mode``, ``use_bias``,
        ``gate_soft_cap``, ``eps``), ``qk_dim``, ``v_dim``, ``multihead_norm.eps`` and parameters
        under the names of :attr:`~hiddenstate.kinds.mlstm.block.MLSTMLayer.params`.
    config : transformers xLSTMConfig, optional
        The model's config (unused: the layer carries its own).

    Returns
    -------
    MLSTMLayer
        float64, ``batch_first=True`` (the layer's (N, T, M)), ``scan="chunkwise"``.

    Raises
    ------
    ValueError
        Sizes that ``int(hidden_size * factor)`` does not give back (our layer's rule).
    """
    cfg = layer.config
    M = int(cfg.hidden_size)
    blk = MLSTMLayer(M, int(cfg.num_heads), qk_dim_factor=layer.qk_dim / M, v_dim_factor=layer.v_dim / M,
                     use_bias=bool(cfg.use_bias), weight_mode=cfg.weight_mode, gate_soft_cap=cfg.gate_soft_cap,
                     norm_eps=float(layer.multihead_norm.eps), eps=float(cfg.eps), batch_first=True)
    if (blk.qk_dim, blk.v_dim) != (layer.qk_dim, layer.v_dim):
        raise ValueError(f"the {type(layer).__name__}'s qk_dim and v_dim must be int(hidden_size * factor) of "
                         f"themselves; got {layer.qk_dim} and {layer.v_dim}, which give {blk.qk_dim} and {blk.v_dim}.")
    blk.load_state_dict(mixer_weights(layer))
    return blk


FAMILY = Family(
    name="xlstm",
    classes=("xLSTMForCausalLM", "xLSTMModel"),
    kind="mlstm",
    layers=lambda model: decoder_layer_map(model, {"mlstm_layer": "recurrent"}, stack="blocks"),
    to_block=mlstm_layer_block,
    notes="RMS norm before the mLSTM layer, the residual, and the gated feed-forward (its own RMS norm and "
          "residual) in every block: the model's own.",
    tiny_config=tiny_config,
)
