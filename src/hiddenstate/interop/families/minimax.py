"""transformers ``MiniMaxForCausalLM`` (MiniMax-Text-01): lightning attention layers between softmax attention, MoE MLPs.

``model.layers[i].self_attn`` is a ``MiniMaxLightningAttention`` where ``config.layer_types[i]``
is ``"linear_attention"`` (the checkpoints' ``attn_type_list`` 0) and a ``MiniMaxAttention``
where it is ``"full_attention"``; every layer's MLP is a sparse mixture of experts. The lightning
layer is our :class:`~hiddenstate.kinds.lightning.block.LightningAttention`: its decay rates differ per layer
(``slope_rates(H, i, L)``, smaller in deeper layers) and are read from the layer's own
``slope_rate`` buffer, what the model computes with; transformers' other decay buffers
(``query_decay``, ``key_decay``, ``diagonal_decay``, the chunked form's tiles of the same
rates) are not parameters of ours and are dropped.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.interop.families.blocks import mixer_weights
from hiddenstate.interop.families.registry import Family, decoder_layer_map
from hiddenstate.kinds.lightning.block import LightningAttention

__all__ = ["BUFFERS", "FAMILY", "lightning_block", "tiny_config"]

#: transformers' buffers of ``MiniMaxLightningAttention`` that are no parameters of ours.
BUFFERS = ("slope_rate", "query_decay", "key_decay", "diagonal_decay")

_ROLES = {"linear_attention": "recurrent", "full_attention": "attention"}


def tiny_config():
    """A 4-layer ``MiniMaxConfig`` (softmax attention at layer 1, lightning attention elsewhere; 4 experts, 2 a token).

    Returns
    -------
    transformers.MiniMaxConfig
        Random weights from it: ``transformers.MiniMaxForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.MiniMaxConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=4,
                                      num_attention_heads=2, num_key_value_heads=1, head_dim=8, num_local_experts=4,
                                      num_experts_per_tok=2, block_size=8,
                                      layer_types=["linear_attention", "full_attention", "linear_attention",
                                                   "linear_attention"])


def lightning_block(mixer, config) -> LightningAttention:
    """Our :class:`~hiddenstate.kinds.lightning.block.LightningAttention` with the weights and slopes of a ``MiniMaxLightningAttention``.

    Parameters
    ----------
    mixer : transformers MiniMaxLightningAttention
        ``num_attention_heads`` H, ``head_dim`` D, the buffer ``slope_rate`` (H, 1, 1), the
        RMS norm ``norm`` (``variance_epsilon``), and ``qkv_proj``, ``output_gate``,
        ``out_proj``, ``norm`` weights under our names.
    config : transformers MiniMaxConfig
        Its ``hidden_size`` M and ``hidden_act`` (the activation of q, k, v).

    Returns
    -------
    LightningAttention
        float64, ``batch_first=True``, the chunked form, ``slope_rate`` the layer's own.

    Raises
    ------
    ValueError
        An activation other than SiLU, a norm epsilon other than 1e-6 (our layer's).
    """
    who = type(mixer).__name__
    if config.hidden_act != "silu":
        raise ValueError(f"the {who}'s hidden_act must be 'silu' (our lightning attention's); got {config.hidden_act!r}.")
    eps = float(mixer.norm.variance_epsilon)
    if eps != 1e-6:
        raise ValueError(f"the {who}'s norm.variance_epsilon must be 1e-06 (our layer's); got {eps!r}.")
    H, D = int(mixer.num_attention_heads), int(mixer.head_dim)
    slope = mixer.slope_rate.detach().cpu().double().numpy().reshape(H)
    blk = LightningAttention(int(config.hidden_size), H, head_dim=D, slope_rate=slope, batch_first=True,
                             dtype=np.float64, rng=np.random.default_rng(0))
    blk.load_state_dict({k: v for k, v in mixer_weights(mixer).items() if k not in BUFFERS})
    return blk


FAMILY = Family(
    name="minimax",
    classes=("MiniMaxForCausalLM", "MiniMaxModel"),
    kind="lightning",
    layers=lambda model: decoder_layer_map(
        model, {"self_attn": lambda layer, i: _ROLES.get(model.config.layer_types[i], model.config.layer_types[i])}),
    to_block=lightning_block,
    notes="RMS norm before the mixer, the residual weighted by linear_attn_alpha/beta_factor, then RMS norm and the "
          "sparse MoE MLP: the model's own. Slopes from each layer's slope_rate buffer.",
    tiny_config=tiny_config,
)
