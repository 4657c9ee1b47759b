"""Our blocks from transformers' mixers: :func:`mamba_block` (Mamba-1), :func:`mamba2_block` (Mamba-2).

Every family whose mixer is transformers' ``MambaMixer`` or ``Mamba2Mixer`` under another name
(Bamba's ``BambaMixer``, NemotronH's ``NemotronHMamba2Mixer``, GraniteMoeHybrid's
``GraniteMoeHybridMambaLayer``, ...) keeps the same attributes (``hidden_size``,
``ssm_state_size``, ``conv_kernel_size``, ``intermediate_size``, ``head_dim``, ``n_groups``,
``activation``, ``time_step_limit``, the gated norm's ``variance_epsilon``) and the same
parameter names as our block, so one function per block reads them all; what a family's mixer
has beyond those attributes (Falcon-H1's muP multipliers, FalconMamba's dt/B/C norms) its module
passes as ``**options``. Each refuses, with the attribute and its value, what our block does not
compute; nothing is approximated. torch is not
imported: the tensors are read through their own methods.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.kinds.ssm.mamba import Mamba
from hiddenstate.kinds.ssm.mamba2 import Mamba2

__all__ = ["bcdt_norm_eps", "mamba2_block", "mamba_block", "mixer_weights", "require_silu", "silu_mamba2_block"]


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


def mamba_block(mixer, **options) -> Mamba:
    """Our :class:`~hiddenstate.Mamba` with the weights of a transformers ``MambaMixer`` (or one of its kind).

    Parameters
    ----------
    mixer : transformers MambaMixer-like module
        ``hidden_size`` M, ``ssm_state_size`` S, ``conv_kernel_size`` K, ``intermediate_size``
        Di, ``time_step_rank`` R, ``activation``, and the parameters of
        :attr:`hiddenstate.Mamba.params` under the same names.
    **options
        More options of :class:`~hiddenstate.Mamba` that the mixer's attributes do not give
        (a family's ``bcdt_norm``, ``norm_eps``, ``num_heads``); they win over what is read.

    Returns
    -------
    Mamba
        float64, ``batch_first=True`` (the mixer's (N, T, M)), ``scan="parallel"``.

    Raises
    ------
    ValueError
        An activation other than SiLU, Di not a multiple of M, a bias on only one projection;
        and :class:`~hiddenstate.Mamba`'s refusals (a weight the options do not expect).
    """
    _silu(mixer)
    has_in, has_out = mixer.in_proj.bias is not None, mixer.out_proj.bias is not None
    if has_in != has_out:
        raise ValueError(f"the {_who(mixer)}'s in_proj and out_proj must both have a bias or neither (our block's "
                         f"bias= covers both); got in_proj {has_in}, out_proj {has_out}.")
    M, Di = int(mixer.hidden_size), int(mixer.intermediate_size)
    if Di % M:
        raise ValueError(f"the {_who(mixer)}'s intermediate_size must be a multiple of its hidden_size (our Mamba "
                         f"block has Di = expand * d_model); got {Di} and {M}.")
    opts = dict(d_state=int(mixer.ssm_state_size), d_conv=int(mixer.conv_kernel_size), expand=Di // M,
                dt_rank=int(mixer.time_step_rank), bias=has_in, conv_bias=mixer.conv1d.bias is not None)
    blk = Mamba(M, **{**opts, **options}, batch_first=True, dtype=np.float64, rng=np.random.default_rng(0))
    blk.load_state_dict(mixer_weights(mixer))
    return blk


def mamba2_block(mixer, **options) -> Mamba2:
    """Our :class:`~hiddenstate.Mamba2` with the weights of a transformers ``Mamba2Mixer`` (or one of its kind).

    Parameters
    ----------
    mixer : transformers Mamba2Mixer-like module
        ``hidden_size`` M, ``ssm_state_size`` S, ``conv_kernel_size`` K, ``intermediate_size``
        Di, ``head_dim`` P, ``n_groups`` G, ``activation``, ``time_step_limit`` (the clamp of
        dt), the gated norm ``norm`` (``variance_epsilon``, groups of Di / G; an
        ``Identity`` for none; ``norm_before_gate``), and the parameters of
        :attr:`hiddenstate.Mamba2.params` under the same names.
    **options
        More options of :class:`~hiddenstate.Mamba2` that the mixer's attributes do not give
        (Falcon-H1's ``ssm_multipliers``, ``ssm_in_multiplier``); they win over what is read.

    Returns
    -------
    Mamba2
        float64, ``batch_first=True``, ``scan="parallel"``.

    Raises
    ------
    ValueError
        An activation other than SiLU, a gated norm over other groups than the mixer's G;
        and :class:`~hiddenstate.Mamba2`'s refusals (sizes that do not divide).
    """
    _silu(mixer)
    Di, G = int(mixer.intermediate_size), int(mixer.n_groups)
    opts = dict(d_state=int(mixer.ssm_state_size), d_conv=int(mixer.conv_kernel_size), d_inner=Di,
                head_dim=int(mixer.head_dim), n_groups=G, bias=mixer.in_proj.bias is not None,
                out_bias=mixer.out_proj.bias is not None, conv_bias=mixer.conv1d.bias is not None,
                time_step_limit=tuple(float(v) for v in (mixer.time_step_limit or (0.0, float("inf")))),
                rms_norm=type(mixer.norm).__name__ != "Identity")
    if opts["rms_norm"]:
        norm = mixer.norm
        groups = getattr(norm, "n_groups", None) or Di // getattr(norm, "group_size", Di // G)
        if groups != G:
            raise ValueError(f"the {_who(mixer)}'s gated norm must normalise its n_groups = {G} groups of channels "
                             f"(as our block does); got {groups} groups.")
        opts.update(eps=float(norm.variance_epsilon), norm_before_gate=bool(getattr(norm, "norm_before_gate", False)))
    blk = Mamba2(int(mixer.hidden_size), **{**opts, **options}, batch_first=True, dtype=np.float64,
                 rng=np.random.default_rng(0))
    blk.load_state_dict(mixer_weights(mixer))
    return blk


def silu_mamba2_block(option: str):
    """The ``to_block`` of a family whose mixer is Mamba-2's own: refuse a non-SiLU ``config.<option>``, then read the mixer.

    Parameters
    ----------
    option : str
        The config's attribute naming the convolution's activation (``"hidden_act"`` of Bamba and
        GraniteMoeHybrid, ``"mamba_hidden_act"`` of NemotronH).

    Returns
    -------
    callable
        ``to_block(mixer, config) -> Mamba2`` (float64, ``batch_first=True``, the mixer's weights);
        it raises ValueError for ``config.<option>`` other than ``"silu"`` (:func:`require_silu`)
        and for what :func:`mamba2_block` refuses.
    """

    def to_block(mixer, config) -> Mamba2:
        require_silu(config, option)
        return mamba2_block(mixer)

    to_block.__doc__ = f"The mixer as our Mamba2, after refusing a ``config.{option}`` other than SiLU."
    return to_block
