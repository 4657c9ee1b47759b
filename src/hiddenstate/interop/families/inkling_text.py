"""transformers ``InklingForCausalLM`` (Inkling's text model): residual depthwise causal convolutions in every layer.

Each decoder layer holds four ``InklingShortConvolution`` modules, all the same math: a residual
depthwise causal convolution of K = ``conv_kernel_size`` taps (no bias, no gate, float32),
``y_t = x_t + sum_k w_k x_{t-K+1+k}``. Two sit inside the attention (``self_attn.k_sconv`` and
``self_attn.v_sconv``, on the keys and values before the attention reads them) and two on the
sublayer outputs before the residual adds them (``attn_sconv`` after the attention,
``mlp_sconv`` after the MLP or MoE). Every layer is recurrent: its state is the window of the last
K - 1 inputs of each of the four. The layer map records one per layer, ``attn_sconv`` (the first
write of the layer into the residual stream; transformers' conv state 2 of the layer); the other
three are the layer's parts, the same recurrence, run as the model's own and not recorded.

The convolution is our :class:`~hiddenstate.kinds.shortconv.block.ShortConv` with its gates
fixed open: ``in_proj`` (weight 0, bias 1) gives B = C = 1 and (weight the identity) x = u, the
residual is one more unit on the newest tap (``w_{K-1} + 1``), ``out_proj`` is the identity. So
the block's window is exactly the model's conv state, and its recorded gates B and C are ones.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.interop.families.registry import Family, decoder_layer_map
from hiddenstate.kinds.shortconv.block import ShortConv

__all__ = ["FAMILY", "NOTES", "PARTS", "inkling_block", "text_kwargs", "tiny_config"]

#: What surrounds the recorded convolution.
NOTES = ("RMS norm before the attention (whose keys and values pass through their own residual short convolutions, "
         "k_sconv and v_sconv), the residual, RMS norm before the MLP or MoE and its residual short convolution "
         "(mlp_sconv): the model's own. The recorded attn_sconv is one of the layer's four short convolutions; "
         "the other three are the same recurrence, not recorded.")


def _ffn_role(layer, index: int) -> str:
    return "moe" if hasattr(layer.mlp, "experts") else "mlp"


#: The layer's other modules the map shows.
PARTS = {"self_attn": "attention", "self_attn.k_sconv": "short convolution (keys)",
         "self_attn.v_sconv": "short convolution (values)", "mlp": _ffn_role,
         "mlp_sconv": "short convolution (MLP output)"}


def inkling_block(mixer, config, scale: float = 1.0) -> ShortConv:
    """Our ShortConv computing a transformers ``InklingShortConvolution``: ``y = scale (x + conv(x))``, exactly.

    Parameters
    ----------
    mixer : transformers InklingShortConvolution or Inkling2ShortConvolution
        ``conv1d``, a depthwise ``Conv1d`` of M channels and K taps, no bias.
    config : transformers InklingTextConfig
        Not read (the mixer has its sizes).
    scale : float, default 1.0
        The output's factor (Inkling 2's ``1 / sqrt(K + 1)``).

    Returns
    -------
    ShortConv
        float64, ``batch_first=True``, ``bias=True``: B = C = 1, x = u, ``out_proj`` ``scale``
        times the identity, the taps the mixer's with 1 added to the newest.

    Raises
    ------
    ValueError
        A convolution with a bias or that is not depthwise (the module has neither).
    """
    conv = mixer.conv1d
    M, K = int(conv.in_channels), int(conv.kernel_size[0])
    if conv.bias is not None or conv.groups != M or conv.out_channels != M:
        raise ValueError(f"the {type(mixer).__name__}'s conv1d must be depthwise without a bias (groups == channels = "
                         f"{M}); got groups={conv.groups}, out_channels={conv.out_channels}, bias="
                         f"{conv.bias is not None}.")
    w = conv.weight.detach().cpu().double().numpy().copy()  # (M, 1, K)
    w[:, 0, K - 1] += 1.0  # the residual: the newest input once more
    eye, zero = np.eye(M), np.zeros((M, M))
    blk = ShortConv(M, kernel_size=K, bias=True, batch_first=True, dtype=np.float64, rng=np.random.default_rng(0))
    blk.load_state_dict({"conv.weight": w, "conv.bias": np.zeros(M),
                         "in_proj.weight": np.concatenate([zero, zero, eye]),
                         "in_proj.bias": np.concatenate([np.ones(2 * M), np.zeros(M)]),
                         "out_proj.weight": scale * eye, "out_proj.bias": np.zeros(M)})
    return blk


def text_kwargs() -> dict:
    """The fields of a tiny 4-layer Inkling text config: width 16, 4 taps, MLPs at 0 and 1, MoEs at 2 and 3.

    Returns
    -------
    dict
        Layers 0, 1, 2 sliding-window attention (window 8), layer 3 full attention.
    """
    return dict(vocab_size=50, hidden_size=16, intermediate_size=32, moe_intermediate_size=16, num_hidden_layers=4,
                num_attention_heads=2, num_key_value_heads=1, head_dim=8, swa_num_attention_heads=2,
                swa_num_key_value_heads=1, swa_head_dim=8, sliding_window_size=8, d_rel=4, rel_extent=16,
                conv_kernel_size=4, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                mlp_layer_types=["dense", "dense", "sparse", "sparse"],
                layer_types=["hybrid_sliding"] * 3 + ["hybrid"], pad_token_id=0, bos_token_id=1, eos_token_id=2)


def tiny_config():
    """A 4-layer ``InklingTextConfig`` (:func:`text_kwargs`).

    Returns
    -------
    transformers.InklingTextConfig
        Random weights from it: ``transformers.InklingForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.InklingTextConfig(**text_kwargs())


def inkling_family(name: str, classes: tuple, *, stack: str = "layers", notes: str = NOTES, tiny_config=None):
    """The family record of a model with Inkling's decoder layers (``attn_sconv`` recorded).

    Parameters
    ----------
    name : str
        The ``config.model_type``.
    classes : tuple of str
        The causal LM (or conditional-generation) class and its base model.
    stack : str, default "layers"
        The base model's path to the decoder layers.
    notes : str
        What surrounds the recorded convolution.
    tiny_config : callable, optional

    Returns
    -------
    Family
        Kind ``"shortconv"``.
    """
    return Family(name=name, classes=classes, kind="shortconv",
                  layers=lambda model: decoder_layer_map(model, {"attn_sconv": "recurrent"}, stack=stack,
                                                         parts=PARTS),
                  to_block=inkling_block, notes=notes, tiny_config=tiny_config)


FAMILY = inkling_family("inkling_text", ("InklingForCausalLM", "InklingTextModel"), tiny_config=tiny_config)
