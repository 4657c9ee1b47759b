"""Our delta-rule layers from transformers' mixers: :func:`gated_delta_block`, :func:`kda_block`.

transformers' ``Qwen3NextGatedDeltaNet``, ``OlmoHybridGatedDeltaNet``, ``Qwen3_5GatedDeltaNet`` (and
Qwen3.5-MoE's, Qwen4-Exp's, Lara-mini's copies of it) and ``KimiLinearDeltaAttention`` (and GLM-5-Next's
``Glm5NextTextLinearAttention``, Bailing-hybrid's ``BailingHybridDeltaAttention``) keep their sizes as
attributes (``hidden_size``, ``num_k_heads``,
``num_v_heads``, ``head_k_dim``, ``head_v_dim`` or ``num_heads``, ``head_dim``,
``conv_kernel_size``, ``activation``, OLMo-hybrid's ``allow_neg_eigval``, the gated norm's
``variance_epsilon``) and their parameters under the names our
:class:`~hiddenstate.kinds.delta.block.GatedDeltaNet` (``layout="qwen3_next"`` or ``"olmo_hybrid"``)
and :class:`~hiddenstate.kinds.delta.block.KimiDeltaAttention` use (``layout="qwen3_5"`` for the Qwen3.5 kin), so one function per layer reads
them. The convolution's activation must be SiLU (``hidden_act``); anything else is refused with
its value. transformers computes these layers in float32 whatever the model's dtype (its
``torch_chunk_gated_delta_rule`` / ``chunk_kimi_delta_attention`` cast q, k, v, g and beta to
float32; the gated norms compute in float32); ours are float64.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.interop.families.blocks import mixer_weights
from hiddenstate.kinds.delta.block import GatedDeltaNet, KimiDeltaAttention
from hiddenstate.kinds.delta.block_kernel import GATES

__all__ = ["gated_delta_block", "kda_block"]


def _silu(mixer) -> None:
    if mixer.activation != "silu":
        raise ValueError(f"the {type(mixer).__name__}'s activation (hidden_act) must be 'silu' (the convolution's "
                         f"activation our layer computes); got {mixer.activation!r}.")


def _gate(mixer) -> str:
    """The output gate's activation of a Qwen3.5-like mixer (its gated norm's ``activation``), or a named refusal."""
    act = getattr(mixer.norm, "activation", "silu")
    if act not in GATES:
        raise ValueError(f"the {type(mixer).__name__}'s output gate activation (output_gate_type or hidden_act) must be "
                         f"one of {', '.join(map(repr, GATES))} (the gates our layer computes); got {act!r}.")
    return act


def gated_delta_block(mixer, layout: str) -> GatedDeltaNet:
    """Our :class:`~hiddenstate.kinds.delta.block.GatedDeltaNet` with the weights of a transformers gated-delta-rule mixer.

    Parameters
    ----------
    mixer : Qwen3NextGatedDeltaNet or OlmoHybridGatedDeltaNet
        ``hidden_size`` M, ``num_k_heads`` Hk, ``num_v_heads`` Hv, ``head_k_dim`` Dk,
        ``head_v_dim`` Dv, ``conv_kernel_size`` K, ``activation``, the gated norm (``norm`` or
        ``o_norm``) with its ``variance_epsilon``, OLMo-hybrid's ``allow_neg_eigval``.
    layout : {"qwen3_next", "olmo_hybrid", "qwen3_5"}
        Whose parameter names (``"qwen3_5"``: ``Qwen3_5GatedDeltaNet``, ``Qwen3_5MoeGatedDeltaNet``,
        ``Qwen4ExpTextGatedDeltaNet``, ``LaraMiniGatedDeltaNet``, whose gated norm's
        ``activation`` is the output gate's, SiLU or sigmoid).

    Returns
    -------
    GatedDeltaNet
        float64, ``batch_first=True``, the chunked form (64 steps).

    Raises
    ------
    ValueError
        A convolution activation other than SiLU; an output gate activation other than SiLU or
        sigmoid (``"qwen3_5"``).
    """
    _silu(mixer)
    gate = _gate(mixer) if layout == "qwen3_5" else "silu"
    norm = mixer.o_norm if layout == "olmo_hybrid" else mixer.norm
    blk = GatedDeltaNet(int(mixer.hidden_size), num_k_heads=int(mixer.num_k_heads), num_v_heads=int(mixer.num_v_heads),
                        head_k_dim=int(mixer.head_k_dim), head_v_dim=int(mixer.head_v_dim),
                        d_conv=int(mixer.conv_kernel_size), eps=float(norm.variance_epsilon), layout=layout,
                        allow_neg_eigval=bool(getattr(mixer, "allow_neg_eigval", False)), gate=gate, batch_first=True,
                        dtype=np.float64, rng=np.random.default_rng(0))
    blk.load_state_dict(mixer_weights(mixer))
    return blk


def _lower_bound(mixer, field: str):
    """The safe gate's bound of a KDA mixer's ``forget_gate`` (None: the softplus gate), refused unless negative."""
    gate = mixer.forget_gate
    if hasattr(gate, "safe_gate"):  # BailingHybridForgetGate: kda_safe_gate and kda_lower_bound
        bound = gate.lower_bound if gate.safe_gate else None
    else:  # Glm5NextTextForgetGate: linear_lower_bound, None for the softplus gate
        bound = getattr(gate, "safe_gate_lower_bound", None)
    if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float)) or not bound < 0
                              or not np.isfinite(bound)):
        raise ValueError(f"config.{field} must be a finite negative number (the safe gate lower_bound * "
                         f"sigmoid(exp(A_log) g) our KimiDeltaAttention computes bounds each log decay to "
                         f"(lower_bound, 0)); got {bound!r}. Set it below 0, or turn the safe gate off.")
    return None if bound is None else float(bound)


def kda_block(mixer, layout: str = "kimi") -> KimiDeltaAttention:
    """Our :class:`~hiddenstate.kinds.delta.block.KimiDeltaAttention` with the weights of a transformers KDA mixer.

    Parameters
    ----------
    mixer : KimiLinearDeltaAttention, Glm5NextTextLinearAttention or BailingHybridDeltaAttention
        ``hidden_size`` M, ``num_heads`` H, ``head_dim`` D, ``conv_kernel_size`` K,
        ``activation``, ``o_norm.variance_epsilon``; GLM-5-Next's and Bailing-hybrid's
        ``forget_gate`` with its safe gate (``safe_gate_lower_bound``, or ``safe_gate`` and
        ``lower_bound``).
    layout : {"kimi", "glm5_next", "bailing_hybrid"}, default "kimi"
        Whose parameter names and shapes (our block's ``layout``).

    Returns
    -------
    KimiDeltaAttention
        float64, ``batch_first=True``, the chunked form (64 steps); ``lower_bound`` the mixer's
        safe gate, or None.

    Raises
    ------
    ValueError
        An activation other than SiLU; a safe-gate bound that is not a finite negative number
        (``config.linear_lower_bound`` / ``config.kda_lower_bound``).
    """
    _silu(mixer)
    field = {"kimi": None, "glm5_next": "linear_lower_bound", "bailing_hybrid": "kda_lower_bound"}[layout]
    bound = None if field is None else _lower_bound(mixer, field)
    blk = KimiDeltaAttention(int(mixer.hidden_size), num_heads=int(mixer.num_heads), head_dim=int(mixer.head_dim),
                             d_conv=int(mixer.conv_kernel_size), eps=float(mixer.o_norm.variance_epsilon),
                             layout=layout, lower_bound=bound, batch_first=True, dtype=np.float64,
                             rng=np.random.default_rng(0))
    blk.load_state_dict(mixer_weights(mixer))
    return blk
