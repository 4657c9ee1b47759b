"""Mamba models of Hugging Face ``transformers`` in and out: :func:`from_transformers`, :func:`to_transformers`.

A ``MambaForCausalLM`` (or a ``FalconMambaForCausalLM``: Mamba blocks with weightless RMS
norms of dt, B, C) becomes a :class:`hiddenstate.MambaLM`, a ``Mamba2ForCausalLM`` a
:class:`hiddenstate.kinds.ssm.lm.Mamba2LM`, with the same weights under the same names (its state
dict without the ``backbone.`` prefix), and back. transformers and torch are imported inside the
functions only, so ``import hiddenstate`` loads neither.

The states: transformers' cache keeps, per layer, the SSM state (N, Di, S) for Mamba, (N, H,
P, S) for Mamba-2, and the last K inputs of the convolution (N, Di, K) or (N, Dc, K); ours
keeps the K - 1 the next step reads (:class:`hiddenstate.MambaState`), which are the cache's
last K - 1 columns (:func:`states_from_cache`).
"""

from __future__ import annotations

import numpy as np

from hiddenstate.core.validation import choice, float_dtype
from hiddenstate.kinds.ssm.lm import Mamba2LM, MambaLM
from hiddenstate.kinds.ssm.mamba_kernel import MambaState

__all__ = ["from_transformers", "is_transformers_falcon_mamba", "is_transformers_mamba", "is_transformers_mamba2",
           "states_from_cache", "to_transformers"]

_PREFIX = "backbone."


def is_transformers_mamba(model) -> bool:
    """Whether ``model`` is a transformers ``MambaForCausalLM`` (told by its class, without importing transformers).

    Parameters
    ----------
    model : object

    Returns
    -------
    bool
    """
    cls = type(model)
    return cls.__name__ == "MambaForCausalLM" and cls.__module__.split(".")[0] == "transformers"


def is_transformers_mamba2(model) -> bool:
    """Whether ``model`` is a transformers ``Mamba2ForCausalLM`` (told by its class, without importing transformers).

    Parameters
    ----------
    model : object

    Returns
    -------
    bool
    """
    cls = type(model)
    return cls.__name__ == "Mamba2ForCausalLM" and cls.__module__.split(".")[0] == "transformers"


def is_transformers_falcon_mamba(model) -> bool:
    """Whether ``model`` is a transformers ``FalconMambaForCausalLM`` (told by its class, without importing transformers).

    Parameters
    ----------
    model : object

    Returns
    -------
    bool
    """
    cls = type(model)
    return cls.__name__ == "FalconMambaForCausalLM" and cls.__module__.split(".")[0] == "transformers"


def from_transformers(model, *, dtype=np.float64, scan: str = "parallel") -> MambaLM | Mamba2LM:
    """A :class:`~hiddenstate.MambaLM` (or :class:`~hiddenstate.kinds.ssm.lm.Mamba2LM`) with a transformers model's weights.

    Parameters
    ----------
    model : transformers.MambaForCausalLM, FalconMambaForCausalLM or Mamba2ForCausalLM
        Any dtype; its weights are copied (the model is not changed). A FalconMamba gives a
        MambaLM whose blocks have ``bcdt_norm="rms"``, ``norm_eps=config.mixer_rms_eps``.
    dtype : {float64, float32}, default float64
        Our model's dtype (float32 weights are exact in float64).
    scan : {"parallel", "sequential", "ssd"}, default "parallel"
        How our blocks run the SSM recurrence (``"ssd"``, the chunked matrix form, for Mamba-2
        only).

    Returns
    -------
    MambaLM or Mamba2LM
        ``batch_first=True`` (ids (N, T), as transformers takes them), the head tied to the
        embedding when the model's is.

    Raises
    ------
    TypeError
        ``model`` is not a ``MambaForCausalLM``, ``FalconMambaForCausalLM`` or ``Mamba2ForCausalLM``.
    ValueError
        A configuration this package does not compute (an activation other than SiLU; for
        Mamba-2 a ``time_step_limit`` that is not a pair 0 <= lo <= hi).
    """
    mamba2, falcon = is_transformers_mamba2(model), is_transformers_falcon_mamba(model)
    if not (mamba2 or falcon or is_transformers_mamba(model)):
        raise TypeError(f"model must be a transformers MambaForCausalLM (or FalconMambaForCausalLM, "
                        f"Mamba2ForCausalLM); got {type(model).__name__}.")
    dtype = float_dtype("dtype", dtype)
    scan = choice("scan", scan, ("parallel", "sequential", "ssd") if mamba2 else ("parallel", "sequential"))
    cfg = model.config
    if cfg.hidden_act != "silu":
        raise ValueError(f"model.config.hidden_act must be 'silu' (Mamba's activation); got {cfg.hidden_act!r}.")
    sd = {k: v.detach().cpu().float().numpy() if v.dtype.is_floating_point and v.dtype.itemsize < 4 else
          v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    emb = model.get_input_embeddings().weight
    tied = model.lm_head.weight is emb or model.lm_head.weight.data_ptr() == emb.data_ptr()
    common = dict(eps=cfg.layer_norm_epsilon, tie_embeddings=tied, batch_first=True, dtype=dtype, d_state=cfg.state_size,
                  d_conv=cfg.conv_kernel, expand=cfg.expand, bias=cfg.use_bias, conv_bias=cfg.use_conv_bias, scan=scan,
                  rng=np.random.default_rng(0))
    if mamba2:
        limit = cfg.time_step_limit
        pair = isinstance(limit, (list, tuple)) and len(limit) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in limit)
        if not pair or not 0.0 <= limit[0] <= limit[1]:
            raise ValueError(f"model.config.time_step_limit must be a pair (lo, hi) with 0 <= lo <= hi (the clamp of "
                             f"dt; (0.0, inf) clamps nothing); got {limit!r}.")
        lm = Mamba2LM(cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers, head_dim=cfg.head_dim,
                      n_groups=cfg.n_groups, time_step_limit=tuple(float(v) for v in limit), **common)
    else:
        norms = dict(bcdt_norm="rms", norm_eps=cfg.mixer_rms_eps) if falcon else {}
        lm = MambaLM(cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers, dt_rank=int(cfg.time_step_rank),
                     **norms, **common)
    for key, arr in lm.params.items():
        src = "lm_head.weight" if key == "lm_head.weight" else _PREFIX + key
        if src not in sd:
            raise ValueError(f"model's state dict must have {src!r} (a {type(model).__name__}'s layout); it has none.")
        if sd[src].shape != arr.shape:
            raise ValueError(f"model's {src!r} must have shape {arr.shape} for its config; got {sd[src].shape}.")
        arr[...] = sd[src]
    return lm


def to_transformers(lm: MambaLM | Mamba2LM, *, torch_dtype=None):
    """A transformers ``MambaForCausalLM`` (``Mamba2ForCausalLM``) with the weights of a MambaLM (Mamba2LM), bit for bit.

    A MambaLM whose blocks have ``bcdt_norm="rms"`` becomes a ``FalconMambaForCausalLM``.

    Parameters
    ----------
    lm : MambaLM or Mamba2LM
    torch_dtype : torch.dtype, optional
        The model's dtype; default float32 (transformers' CPU path computes in float32). Our
        float64 weights that came from a float32 model go back unchanged.

    Returns
    -------
    transformers.MambaForCausalLM, FalconMambaForCausalLM or Mamba2ForCausalLM
        In eval mode.

    Raises
    ------
    TypeError
        ``lm`` is neither a MambaLM nor a Mamba2LM; ``torch_dtype`` is not a floating torch dtype.
    ValueError
        Blocks with ``bcdt_norm="rms_weight"`` or ``num_heads`` (mixers of hybrid models, with no
        whole-model transformers class of their own); Mamba-2 blocks with an option
        ``Mamba2Config`` cannot hold (a hybrid family's variant: ``d_inner`` other than
        ``expand * d_model``, ``out_bias`` other than ``bias``, no or a pre-gate norm, muP
        multipliers).
    """
    if not isinstance(lm, (MambaLM, Mamba2LM)):
        raise TypeError(f"lm must be a hiddenstate MambaLM (or Mamba2LM); got {type(lm).__name__}.")
    blk = lm.layers[0]
    if isinstance(lm, Mamba2LM):
        odd = {"d_inner": blk.d_inner != blk.expand * blk.d_model, "out_bias": blk.out_bias != blk.bias,
               "rms_norm": not blk.rms_norm, "norm_before_gate": blk.norm_before_gate,
               "ssm_multipliers": blk.ssm_multipliers is not None, "ssm_in_multiplier": blk.ssm_in_multiplier != 1.0}
        if any(odd.values()):
            raise ValueError(f"lm's Mamba-2 blocks must be Mamba2Mixer's own for a Mamba2ForCausalLM; got blocks with "
                             f"{', '.join(k for k, v in odd.items() if v)} set (a hybrid family's variant).")
    if isinstance(lm, MambaLM) and (blk.bcdt_norm == "rms_weight" or blk.num_heads is not None):
        raise ValueError(f"lm's blocks must be MambaMixer's or FalconMambaMixer's (bcdt_norm None or 'rms', num_heads "
                         f"None) to become a transformers model; got {blk!r}. Save its params instead.")
    import torch
    import transformers

    if torch_dtype is not None and torch_dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise TypeError(f"torch_dtype must be None or a floating torch dtype (torch.float32, torch.float64, "
                        f"torch.float16, torch.bfloat16); got {type(torch_dtype).__name__} {torch_dtype!r:.60}.")
    common = dict(vocab_size=lm.vocab_size, hidden_size=lm.d_model, state_size=blk.d_state,
                  num_hidden_layers=lm.num_layers, layer_norm_epsilon=lm.eps, expand=blk.expand,
                  conv_kernel=blk.d_conv, use_bias=blk.bias, use_conv_bias=blk.conv_bias,
                  tie_word_embeddings=lm.tie_embeddings)
    if isinstance(lm, Mamba2LM):
        cfg = transformers.Mamba2Config(num_heads=blk.num_heads, head_dim=blk.head_dim, n_groups=blk.n_groups,
                                        time_step_limit=blk.time_step_limit, **common)
        model = transformers.Mamba2ForCausalLM(cfg)
    else:
        falcon = blk.bcdt_norm == "rms"
        kind = "FalconMamba" if falcon else "Mamba"
        norms = dict(mixer_rms_eps=blk.norm_eps) if falcon else {}
        cfg = getattr(transformers, f"{kind}Config")(time_step_rank=blk.dt_rank, **norms, **common)
        model = getattr(transformers, f"{kind}ForCausalLM")(cfg)
    model = model.to(torch_dtype or torch.float32)
    state = {(k if k == "lm_head.weight" else _PREFIX + k): torch.from_numpy(np.ascontiguousarray(v))
             for k, v in lm.params.items()}
    if lm.tie_embeddings:
        state["lm_head.weight"] = state[_PREFIX + "embeddings.weight"]
    with torch.no_grad():
        for k, t in model.state_dict().items():
            t.copy_(state[k].to(t.dtype))
    return model.eval()


def states_from_cache(cache, num_layers: int) -> list[MambaState]:
    """Every layer's states from a transformers cache, in our layout (NumPy float64).

    Parameters
    ----------
    cache : transformers.Cache
        The ``cache`` of a ``MambaForCausalLM`` or ``Mamba2ForCausalLM`` output (``use_cache=True``).
    num_layers : int
        L.

    Returns
    -------
    list of MambaState
        ``ssm`` (N, Di, S) (Mamba-2: (N, H, P, S)) = the cache's recurrent state; ``conv``
        (N, Di, K-1) (Mamba-2: (N, Dc, K-1)) = the last K - 1 columns of its conv state.

    Raises
    ------
    TypeError
        ``cache`` is not a transformers cache with recurrent states (None, a tensor, a string),
        ``num_layers`` is not an int.
    ValueError
        ``num_layers`` is not in ``[1, the cache's layers]``.
    """
    if not all(callable(getattr(cache, m, None)) for m in ("get_recurrent_state", "get_conv_state")):
        raise TypeError(f"cache must be a transformers cache with recurrent states (the cache of a Mamba or Mamba-2 "
                        f"model's output, use_cache=True); got {type(cache).__name__}.")
    if isinstance(num_layers, bool) or not isinstance(num_layers, (int, np.integer)):
        raise TypeError(f"num_layers must be an int; got {type(num_layers).__name__} {num_layers!r:.40}.")
    held = getattr(cache, "layers", None)
    held = len(held) if isinstance(held, (list, tuple)) else None
    if num_layers < 1 or (held is not None and num_layers > held):
        raise ValueError(f"num_layers must be in [1, {held if held is not None else 'the layers of the cache'}] (the "
                         f"layers the cache holds); got {num_layers}. Pass the model's config.num_hidden_layers.")
    out = []
    for i in range(num_layers):
        ssm = cache.get_recurrent_state(i).detach().cpu().double().numpy()
        conv = cache.get_conv_state(i).detach().cpu().double().numpy()
        out.append(MambaState(ssm, np.ascontiguousarray(conv[..., 1:])))
    return out
