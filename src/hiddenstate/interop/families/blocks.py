"""Our blocks from transformers' mixers: :func:`mamba_block` (Mamba-1 and its variants), :func:`mamba2_block` (Mamba-2).

Every family whose mixer is transformers' ``MambaMixer`` or ``Mamba2Mixer`` under another name
(Bamba's ``BambaMixer``, NemotronH's ``NemotronHMamba2Mixer``, GraniteMoeHybrid's
``GraniteMoeHybridMambaLayer``, ...) keeps the same attributes (``hidden_size``,
``ssm_state_size``, ``conv_kernel_size``, ``intermediate_size``, ``head_dim``, ``n_groups``,
``activation``, ``time_step_limit``, the gated norm's ``variance_epsilon``) and the same
parameter names as our block, so one function per block reads them all. Each refuses, with the
attribute and its value, what our block does not compute; nothing is approximated. torch is not
imported: the tensors are read through their own methods.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.mamba import Mamba
from hiddenstate.mamba2 import Mamba2

__all__ = ["bcdt_norm_eps", "mamba2_block", "mamba_block", "mixer_weights", "require_silu"]


def mixer_weights(mixer) -> dict:
    """A mixer's parameters as float64 NumPy arrays under their own names (its ``state_dict``).

    Parameters
    ----------
    mixer : torch.nn.Module

    Returns
    -------
    dict of str to ndarray
        Copies, float64 (bfloat16 and float16 weights are exact in float64).
    """
    return {k: v.detach().cpu().double().numpy() for k, v in mixer.state_dict().items()}


def _who(mixer) -> str:
    return type(mixer).__name__


def _expand(mixer) -> int:
    """``intermediate_size / hidden_size`` as our block's integer ``expand``, or a ValueError."""
    M, Di = int(mixer.hidden_size), int(mixer.intermediate_size)
    if Di % M:
        raise ValueError(f"the {_who(mixer)}'s intermediate_size must be a multiple of its hidden_size (our blocks "
                         f"have Di = expand * d_model); got {Di} and {M}.")
    return Di // M


def _biases(mixer) -> bool:
    """Whether ``in_proj`` and ``out_proj`` have biases (our block has both or neither)."""
    has_in, has_out = mixer.in_proj.bias is not None, mixer.out_proj.bias is not None
    if has_in != has_out:
        raise ValueError(f"the {_who(mixer)}'s in_proj and out_proj must both have a bias or neither (our block's "
                         f"bias= covers both); got in_proj {has_in}, out_proj {has_out}.")
    return has_in


def _silu(mixer) -> None:
    if mixer.activation != "silu":
        raise ValueError(f"the {_who(mixer)}'s activation must be 'silu' (Mamba's); got {mixer.activation!r}.")


def require_silu(config, option: str) -> None:
    """Refuse a config whose activation ``option`` is not SiLU (the convolution's activation our blocks compute).

    Parameters
    ----------
    config : transformers config
    option : str
        The config's attribute naming the mixer's activation (``"hidden_act"`` of FalconMamba and
        Jamba, ``"hidden_mamba_act"`` of Zamba); absent counts as SiLU.

    Raises
    ------
    ValueError
        ``config.<option>`` is not ``"silu"`` (the message names the option and its value).
    """
    act = getattr(config, option, "silu")
    if act != "silu":
        raise ValueError(f"config.{option} must be 'silu' (the activation of the convolution our Mamba block "
                         f"computes); got {act!r}.")


def bcdt_norm_eps(mixer, option: str) -> float:
    """The one epsilon of a mixer's RMS norms of dt, B and C (``dt_layernorm``, ``b_layernorm``, ``c_layernorm``).

    Parameters
    ----------
    mixer : transformers FalconMambaMixer or JambaMambaMixer
        Its three norms' ``variance_epsilon``.
    option : str
        The config option they come from (``"mixer_rms_eps"``, ``"rms_norm_eps"``), for the message.

    Returns
    -------
    float
        Our block's ``norm_eps``.

    Raises
    ------
    ValueError
        The three norms have different epsilons (our block has one).
    """
    eps = {float(getattr(mixer, f"{k}_layernorm").variance_epsilon) for k in ("dt", "b", "c")}
    if len(eps) != 1:
        raise ValueError(f"the {_who(mixer)}'s dt, B and C norms must share one epsilon (config.{option}; our block has "
                         f"one norm_eps); got {sorted(eps)}.")
    return eps.pop()


def mamba_block(mixer, *, bcdt_norm=None, norm_eps: float = 1e-6, num_heads=None) -> Mamba:
    """Our :class:`~hiddenstate.Mamba` with the weights of a transformers ``MambaMixer`` (or one of its kind).

    Parameters
    ----------
    mixer : transformers MambaMixer-like module
        ``hidden_size`` M, ``ssm_state_size`` S, ``conv_kernel_size`` K, ``intermediate_size``
        Di, ``time_step_rank`` R, ``activation``, and the parameters of
        :attr:`hiddenstate.Mamba.params` under the same names.
    bcdt_norm : {None, "rms", "rms_weight"}, default None
        The block's RMS norms of dt, B, C: ``"rms"`` for ``FalconMambaMixer``'s weightless ones,
        ``"rms_weight"`` for ``JambaMambaMixer``'s (their weights are then in the state dict).
    norm_eps : float, default 1e-6
        Their epsilon (unused without ``bcdt_norm``).
    num_heads : int, optional
        ``ZambaMambaMixer``'s ``n_mamba_heads`` (its per-head ``x_proj_weight``, ``dt_proj_weight``).

    Returns
    -------
    Mamba
        float64, ``batch_first=True`` (the mixer's (N, T, M)), ``scan="parallel"``.

    Raises
    ------
    ValueError
        An activation other than SiLU, Di not a multiple of M, a bias on only one projection; a
        state dict whose names or shapes are not the block's with these options.
    """
    _silu(mixer)
    blk = Mamba(int(mixer.hidden_size), d_state=int(mixer.ssm_state_size), d_conv=int(mixer.conv_kernel_size),
                expand=_expand(mixer), dt_rank=int(mixer.time_step_rank), bias=_biases(mixer),
                conv_bias=mixer.conv1d.bias is not None, batch_first=True, dtype=np.float64,
                rng=np.random.default_rng(0), bcdt_norm=bcdt_norm, norm_eps=norm_eps, num_heads=num_heads)
    blk.load_state_dict(mixer_weights(mixer))
    return blk


def mamba2_block(mixer) -> Mamba2:
    """Our :class:`~hiddenstate.Mamba2` with the weights of a transformers ``Mamba2Mixer`` (or one of its kind).

    Parameters
    ----------
    mixer : transformers Mamba2Mixer-like module
        ``hidden_size`` M, ``ssm_state_size`` S, ``conv_kernel_size`` K, ``intermediate_size``
        Di, ``head_dim`` P, ``n_groups`` G, ``activation``, ``time_step_limit``, the gated norm
        ``norm`` (``variance_epsilon``, ``group_size`` = Di / G), and the parameters of
        :attr:`hiddenstate.Mamba2.params` under the same names.

    Returns
    -------
    Mamba2
        float64, ``batch_first=True``, ``scan="parallel"``.

    Raises
    ------
    ValueError
        An activation other than SiLU, a ``time_step_limit`` other than (0, inf) (a clamp of dt
        our block does not apply), Di not a multiple of M, a norm group other than Di / G, a
        bias on only one projection.
    """
    _silu(mixer)
    limit = tuple(float(v) for v in (mixer.time_step_limit or (0.0, float("inf"))))
    if limit != (0.0, float("inf")):
        raise ValueError(f"the {_who(mixer)}'s time_step_limit must be (0.0, inf) (no clamp of dt, which our Mamba2 "
                         f"block does not apply); got {limit}.")
    Di, G = int(mixer.intermediate_size), int(mixer.n_groups)
    group = getattr(mixer.norm, "group_size", Di // G)
    if group * G != Di:
        raise ValueError(f"the {_who(mixer)}'s gated norm must normalise groups of Di / n_groups = {Di // G} "
                         f"channels (as our block does); got group_size {group}.")
    blk = Mamba2(int(mixer.hidden_size), d_state=int(mixer.ssm_state_size), d_conv=int(mixer.conv_kernel_size),
                 expand=_expand(mixer), head_dim=int(mixer.head_dim), n_groups=G, bias=_biases(mixer),
                 conv_bias=mixer.conv1d.bias is not None, eps=float(mixer.norm.variance_epsilon), batch_first=True,
                 dtype=np.float64, rng=np.random.default_rng(0))
    blk.load_state_dict(mixer_weights(mixer))
    return blk
