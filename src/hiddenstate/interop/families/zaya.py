"""transformers ``ZayaForCausalLM`` (Zyphra ZAYA1): compressed convolutional attention, a recurrence in every layer.

Each decoder layer's attention (``ZayaAttention``) builds its queries, keys and values with a
``ZayaCCAProjection`` (``self_attn.qkv_proj``, Figliolia et al. 2025): the queries and keys through
two stacked causal convolutions (depthwise of ``cca_time0`` taps, then grouped by head of
``cca_time1`` taps) with residual paths, and half of each value head from the previous token. Its
state is the window of the last W = (t0 - 1) + (t1 - 1) values of ``[q | k]`` and the last token's
delayed value projection: transformers' conv state 0 and recurrent state 0 of the layer. That
projection is the recorded recurrence (our :class:`~hiddenstate.kinds.shortconv.cca.CCAProjection`,
kind ``"cca"``); the attention that reads its output (QK norm, partial RoPE, softmax attention, the
output projection) and the MoE are the model's own.

The projection returns three tensors, not a sequence of the layer's width: :func:`hooked` reads
them as one view ``[query | key | value]`` flattened, (N, T, Cq + 2 Ck) (the block's output, held
to it), and :func:`rebuild` puts an edited view back as the three, so the interventions edit the
window and the delayed value and the attention sees the change. With an attention mask that pads,
the model zeroes the padded positions of the projection's input (``conv_mask``); the hook reads
the input so masked.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.interop.families.registry import Family, decoder_layer_map
from hiddenstate.kinds.shortconv.cca import CCAProjection

__all__ = ["FAMILY", "cca_block", "hooked", "rebuild", "tiny_config"]


def tiny_config():
    """A 3-layer ``ZayaConfig``: width 16, 4 query heads and 2 key/value heads of 8, taps 2 and 3 (W = 3), 2 experts.

    Returns
    -------
    transformers.ZayaConfig
        Layer 1 sliding-window attention (window 8), layers 0 and 2 full; projections with biases.
        Random weights from it: ``transformers.ZayaForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.ZayaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=3, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=8, moe_intermediate_size=16, num_experts=2,
                                   router_hidden_size=8, cca_time0=2, cca_time1=3, attention_bias=True,
                                   layer_types=["hybrid", "hybrid_sliding", "hybrid"], sliding_window=8,
                                   max_position_embeddings=256, bos_token_id=1,
                                   eos_token_id=2)


def cca_block(mixer, config) -> CCAProjection:
    """Our :class:`~hiddenstate.kinds.shortconv.cca.CCAProjection` with the weights of a ``ZayaCCAProjection``.

    Parameters
    ----------
    mixer : transformers ZayaCCAProjection
        ``hidden_size`` M, ``num_attention_heads`` Hq, ``num_key_value_heads`` Hk, ``head_dim`` D,
        ``depthwise_kernel_size`` t0, ``grouped_kernel_size`` t1, and its parameters under our names.
    config : transformers ZayaConfig
        Not read (the mixer has its sizes).

    Returns
    -------
    CCAProjection
        float64.

    Raises
    ------
    ValueError
        Biases on some of the four projections only (the module has all or none), and what
        :class:`CCAProjection` refuses (an odd D).
    """
    has = {name: getattr(mixer, name).bias is not None for name in ("q_proj", "k_proj", "v_proj_current",
                                                                     "v_proj_delayed")}
    if len(set(has.values())) != 1:
        raise ValueError(f"the {type(mixer).__name__}'s four projections must all have a bias or none (our "
                         f"CCAProjection's bias= covers the four); got {has}.")
    blk = CCAProjection(int(mixer.hidden_size), int(mixer.num_attention_heads), int(mixer.num_key_value_heads),
                        int(mixer.head_dim), cca_time0=int(mixer.depthwise_kernel_size),
                        cca_time1=int(mixer.grouped_kernel_size), bias=has["q_proj"], dtype=np.float64,
                        rng=np.random.default_rng(0))
    blk.load_state_dict({k: v.detach().cpu().double().numpy() for k, v in mixer.state_dict().items()})
    return blk


def hooked(args, kwargs, output):
    """The projection's input (masked as the model masks it) and its ``(query, key, value)`` as one flattened view.

    Parameters
    ----------
    args, kwargs
        ``ZayaCCAProjection.forward(hidden_states, cache, conv_mask=None)``'s arguments.
    output : tuple of torch.Tensor
        ``(query, key, value)``, each (N, T, heads, D).

    Returns
    -------
    u : torch.Tensor of shape (N, T, M)
        ``hidden_states``, times ``conv_mask`` (N, T) where one is given.
    out : torch.Tensor of shape (N, T, Cq + 2 Ck)
        ``[query | key | value]``, each flattened over its heads.
    """
    u = args[0] if args else kwargs["hidden_states"]
    mask = args[2] if len(args) > 2 else kwargs.get("conv_mask")
    if mask is not None:
        u = u * mask[:, :, None].to(u.dtype)
    import torch

    return u, torch.cat([t.flatten(2) for t in output], dim=-1)


def rebuild(output, new):
    """The ``(query, key, value)`` the attention reads, cut from an edited view.

    Parameters
    ----------
    output : tuple of torch.Tensor
        The projection's own ``(query, key, value)``, each (N, T, heads, D).
    new : torch.Tensor of shape (N, T, Cq + 2 Ck)
        The edited ``[query | key | value]``.

    Returns
    -------
    tuple of torch.Tensor
        Of the shapes of ``output``.
    """
    sizes = [t.shape[2] * t.shape[3] for t in output]
    return tuple(part.reshape(t.shape).contiguous() for part, t in zip(new.split(sizes, dim=-1), output))


FAMILY = Family(
    name="zaya",
    classes=("ZayaForCausalLM", "ZayaModel"),
    kind="cca",
    layers=lambda model: decoder_layer_map(model, {"self_attn.qkv_proj": "recurrent"},
                                           parts={"self_attn": "attention", "mlp": "moe"}),
    to_block=cca_block,
    hooked=hooked,
    rebuild=rebuild,
    notes="RMS norm before the attention, whose queries, keys and values the recorded CCA projection makes (its "
          "output, [query | key | value] flattened, is the layer's recorded output); then the attention's QK norm, "
          "partial RoPE, softmax attention and output projection, the scaled residual, RMS norm and the MoE (its "
          "router reading the previous layer's router state): the model's own.",
    tiny_config=tiny_config,
)
