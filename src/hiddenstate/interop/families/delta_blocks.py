"""Our delta-rule layers from transformers' mixers: :func:`gated_delta_block`, :func:`kda_block`.

transformers' ``Qwen3NextGatedDeltaNet``, ``OlmoHybridGatedDeltaNet`` and
``KimiLinearDeltaAttention`` keep their sizes as attributes (``hidden_size``, ``num_k_heads``,
``num_v_heads``, ``head_k_dim``, ``head_v_dim`` or ``num_heads``, ``head_dim``,
``conv_kernel_size``, ``activation``, OLMo-hybrid's ``allow_neg_eigval``, the gated norm's
``variance_epsilon``) and their parameters under the names our
:class:`~hiddenstate.kinds.delta.block.GatedDeltaNet` (``layout="qwen3_next"`` or ``"olmo_hybrid"``)
and :class:`~hiddenstate.kinds.delta.block.KimiDeltaAttention` use, so one function per layer reads
them. The convolution's activation must be SiLU (``hidden_act``); anything else is refused with
its value. transformers computes these layers in float32 whatever the model's dtype (its
``torch_chunk_gated_delta_rule`` / ``chunk_kimi_delta_attention`` cast q, k, v, g and beta to
float32; the gated norms compute in float32); ours are float64.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.interop.families.blocks import mixer_weights
from hiddenstate.kinds.delta.block import GatedDeltaNet, KimiDeltaAttention

__all__ = ["gated_delta_block", "kda_block"]


def _silu(mixer) -> None:
    if mixer.activation != "silu":
        raise ValueError(f"the {type(mixer).__name__}'s activation (hidden_act) must be 'silu' (the convolution's "
                         f"activation our layer computes); got {mixer.activation!r}.")


def gated_delta_block(mixer, layout: str) -> GatedDeltaNet:
    """Our :class:`~hiddenstate.kinds.delta.block.GatedDeltaNet` with the weights of a transformers gated-delta-rule mixer.

    Parameters
    ----------
    mixer : Qwen3NextGatedDeltaNet or OlmoHybridGatedDeltaNet
        ``hidden_size`` M, ``num_k_heads`` Hk, ``num_v_heads`` Hv, ``head_k_dim`` Dk,
        ``head_v_dim`` Dv, ``conv_kernel_size`` K, ``activation``, the gated norm (``norm`` or
        ``o_norm``) with its ``variance_epsilon``, OLMo-hybrid's ``allow_neg_eigval``.
    layout : {"qwen3_next", "olmo_hybrid"}
        Whose parameter names.

    Returns
    -------
    GatedDeltaNet
        float64, ``batch_first=True``, the chunked form (64 steps).

    Raises
    ------
    ValueError
        An activation other than SiLU.
    """
    _silu(mixer)
    norm = mixer.norm if layout == "qwen3_next" else mixer.o_norm
    blk = GatedDeltaNet(int(mixer.hidden_size), num_k_heads=int(mixer.num_k_heads), num_v_heads=int(mixer.num_v_heads),
                        head_k_dim=int(mixer.head_k_dim), head_v_dim=int(mixer.head_v_dim),
                        d_conv=int(mixer.conv_kernel_size), eps=float(norm.variance_epsilon), layout=layout,
                        allow_neg_eigval=bool(getattr(mixer, "allow_neg_eigval", False)), batch_first=True,
                        dtype=np.float64, rng=np.random.default_rng(0))
    blk.load_state_dict(mixer_weights(mixer))
    return blk


def kda_block(mixer) -> KimiDeltaAttention:
    """Our :class:`~hiddenstate.kinds.delta.block.KimiDeltaAttention` with the weights of a ``KimiLinearDeltaAttention``.

    Parameters
    ----------
    mixer : KimiLinearDeltaAttention
        ``hidden_size`` M, ``num_heads`` H, ``head_dim`` D, ``conv_kernel_size`` K,
        ``activation``, ``o_norm.variance_epsilon``.

    Returns
    -------
    KimiDeltaAttention
        float64, ``batch_first=True``, the chunked form (64 steps).

    Raises
    ------
    ValueError
        An activation other than SiLU.
    """
    _silu(mixer)
    blk = KimiDeltaAttention(int(mixer.hidden_size), num_heads=int(mixer.num_heads), head_dim=int(mixer.head_dim),
                             d_conv=int(mixer.conv_kernel_size), eps=float(mixer.o_norm.variance_epsilon),
                             batch_first=True, dtype=np.float64, rng=np.random.default_rng(0))
    blk.load_state_dict(mixer_weights(mixer))
    return blk
