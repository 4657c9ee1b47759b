"""transformers ``RecurrentGemmaForCausalLM`` (Google, Griffin): RG-LRU recurrent blocks between local attention blocks.

``model.layers[i].temporal_block`` is a ``RecurrentGemmaRecurrentBlock`` where
``config.layers_block_type[i]`` is ``"linear_attention"`` (``block_types`` "recurrent", repeated
over the layers) and a ``RecurrentGemmaAttention`` (sliding-window) where it is
``"sliding_attention"``. The recurrent block is our :class:`~hiddenstate.kinds.rglru.block.RGLRUBlock` (De et al.
2024, Fig. 2), parameter for parameter.

**Document starts.** The block reads ``position_ids``: at ``position_ids == 0`` the RG-LRU drops
the state and its input is not scaled by ``sqrt(1 - a_t^2)``. A prefill (positions 0, 1, ...)
is therefore our call with ``reset`` True at step 0, and :func:`hooked` passes the model's own
``position_ids == 0`` as ``reset`` to the recomputation, so a call with shifted positions or
several documents is recomputed as the model ran it.

**bfloat16.** transformers computes the gates and ``a_t`` in the model's dtype (only the
recurrence is accumulated in float32), so a bfloat16 model's own output is off its float32 self
by several percent on long inputs (6.6e-2 at T = 512 on the tests' model), past the bfloat16
bound of :func:`~hiddenstate.interop.families.hooks.tolerance`: recompute a float32 copy.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.interop.families.blocks import mixer_weights
from hiddenstate.interop.families.registry import Family, decoder_layer_map
from hiddenstate.kinds.rglru.block import RGLRUBlock

__all__ = ["FAMILY", "hooked", "rglru_block", "tiny_config"]

_ROLES = {"linear_attention": "recurrent", "sliding_attention": "attention"}
_GELU_TANH = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")  # transformers' names of tanh-approximated GELU


def tiny_config():
    """A 4-layer ``RecurrentGemmaConfig`` (recurrent, recurrent, attention, recurrent; RG-LRU width 16, 2 heads).

    Returns
    -------
    transformers.RecurrentGemmaConfig
        Random weights from it: ``transformers.RecurrentGemmaForCausalLM(tiny_config())``.
    """
    import transformers

    return transformers.RecurrentGemmaConfig(vocab_size=50, hidden_size=16, lru_width=16, num_attention_heads=2,
                                             num_key_value_heads=1, intermediate_size=32, num_hidden_layers=4,
                                             block_types=["recurrent", "recurrent", "attention"], conv1d_width=4,
                                             attention_window_size=8)


def rglru_block(mixer, config) -> RGLRUBlock:
    """Our :class:`~hiddenstate.kinds.rglru.block.RGLRUBlock` with the weights of a transformers ``RecurrentGemmaRecurrentBlock``.

    Parameters
    ----------
    mixer : transformers RecurrentGemmaRecurrentBlock
        ``hidden_size`` M, ``lru_width`` W, ``conv1d_width`` K, ``rg_lru.num_attention_heads``
        Hh, and the parameters of :attr:`hiddenstate.kinds.rglru.block.RGLRUBlock.params` under the same names.
    config : transformers RecurrentGemmaConfig
        Its ``hidden_activation`` (the y branch's activation).

    Returns
    -------
    RGLRUBlock
        float64, ``batch_first=True``, ``scan="parallel"``.

    Raises
    ------
    ValueError
        A ``hidden_activation`` other than the tanh-approximated GELU (our block's).
    """
    act = getattr(config, "hidden_activation", "gelu_pytorch_tanh")
    if act not in _GELU_TANH:
        raise ValueError(f"the {type(mixer).__name__}'s hidden_activation must be the tanh GELU "
                         f"({', '.join(_GELU_TANH)}; our RGLRUBlock's y branch); got {act!r}.")
    blk = RGLRUBlock(int(mixer.hidden_size), int(mixer.lru_width), num_heads=int(mixer.rg_lru.num_attention_heads),
                     conv_width=int(mixer.conv1d_width), batch_first=True, dtype=np.float64,
                     rng=np.random.default_rng(0))
    blk.load_state_dict(mixer_weights(mixer))
    return blk


def hooked(args, kwargs, output):
    """The block's input, its output and its document starts from what its forward hook sees.

    Parameters
    ----------
    args : tuple
        ``(input_states, position_ids, ...)`` as far as passed positionally.
    kwargs : dict
        The rest (the decoder layer passes ``position_ids=`` by keyword).
    output : tuple
        ``(hidden_states, None)``.

    Returns
    -------
    u : torch.Tensor of shape (N, T, M)
    out : torch.Tensor of shape (N, T, M)
    forward : dict
        ``{"reset": ndarray of bool, shape (N, T)}``: ``position_ids == 0``, broadcast over the
        batch (the block's own reset).
    """
    u = args[0] if args else kwargs["input_states"]
    pos = args[1] if len(args) > 1 else kwargs["position_ids"]
    reset = (pos == 0).detach().cpu().numpy()
    N, T = u.shape[:2]
    return u, output[0], {"reset": np.ascontiguousarray(np.broadcast_to(reset, (N, T)))}


FAMILY = Family(
    name="recurrent_gemma",
    classes=("RecurrentGemmaForCausalLM", "RecurrentGemmaModel"),
    kind="rglru",
    layers=lambda model: decoder_layer_map(
        model, {"temporal_block": lambda layer, i: _ROLES.get(model.config.layers_block_type[i],
                                                              model.config.layers_block_type[i])}),
    to_block=rglru_block,
    hooked=hooked,
    notes="RMS norm (1 + weight) before the temporal block, the residual, then a gated GELU MLP; the embedding "
          "scaled by sqrt(M) in bfloat16: the model's own. The reset at position 0 is taken from the model's "
          "position_ids.",
    tiny_config=tiny_config,
)
