"""Parity with the Mamba-2 mixers of transformers' hybrid families, and the map from each config onto our block.

Each family's model is built from a tiny random config (no download), its first Mamba-2 mixer
taken out and run alone (its pure-torch path, float32, chunk_size 4 so the chunked SSD crosses
chunk boundaries); our :class:`hiddenstate.kinds.ssm.mamba2.Mamba2` with the options the config maps to
and the mixer's state dict (1:1 names) runs in float64. transformers' path computes in float32
(``mamba2_chunk_scan`` casts x, B, C, dt and A to float32, the gated norms compute in float32),
so outputs are held to 1e-5 relative and gradients (torch autograd through that path: every
parameter and the input) to 1e-4 (measured over these cases: outputs at most 3.6e-7,
gradients 2.5e-5, the largest Falcon-H1's ``D``, a small sum of large float32 terms).
"""

import os

import numpy as np
import pytest

from hiddenstate.kinds.ssm.mamba2 import Mamba2
from tests._torch import require_torch, torch_required

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = require_torch()
transformers = pytest.importorskip("transformers") if not torch_required() else __import__("transformers")

RTOL_OUT, RTOL_GRAD = 1e-5, 1e-4
MIXERS = {"bamba": "BambaMixer", "granitemoehybrid": "GraniteMoeHybridMambaLayer", "nemotron_h": "NemotronHMamba2Mixer",
          "zamba2": "Zamba2MambaMixer", "falcon_h1": "FalconH1Mixer"}
SMALL = dict(vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2)


def config(family, **over):
    """A tiny config of ``family`` (two layers: a Mamba-2 one first)."""
    if family in ("bamba", "granitemoehybrid", "falcon_h1"):
        kw = dict(SMALL, num_key_value_heads=1, intermediate_size=32, mamba_n_heads=4, mamba_d_head=8,
                  mamba_n_groups=2, mamba_d_state=4, mamba_d_conv=3, mamba_expand=2, mamba_chunk_size=4)
        if family == "bamba":
            kw.update(attn_layer_indices=[1])
        elif family == "granitemoehybrid":
            kw.update(layer_types=["mamba", "attention"], num_local_experts=2, num_experts_per_tok=1,
                      shared_intermediate_size=16)
        else:
            kw.update(mamba_d_ssm=24, mamba_n_heads=3, mamba_d_head=8, mamba_n_groups=3)
        cls = {"bamba": transformers.BambaConfig, "granitemoehybrid": transformers.GraniteMoeHybridConfig,
               "falcon_h1": transformers.FalconH1Config}[family]
    elif family == "nemotron_h":
        kw = dict(SMALL, num_key_value_heads=1, intermediate_size=32, head_dim=8, mamba_num_heads=3, mamba_head_dim=4,
                  n_groups=3, ssm_state_size=4, conv_kernel=3, chunk_size=4)
        cls = transformers.NemotronHConfig
    else:
        kw = dict(SMALL, mamba_d_state=4, mamba_d_conv=3, mamba_expand=2, mamba_ngroups=2, n_mamba_heads=4,
                  chunk_size=4, layers_block_type=["mamba", "hybrid"])
        cls = transformers.Zamba2Config
    kw.update(over)
    return cls(**kw)


def block_options(family, cfg):
    """What a family's config maps to: the options of our block (the registry's map, written out here)."""
    M = cfg.hidden_size
    if family == "nemotron_h":
        assert cfg.mamba_hidden_act == "silu"
        return dict(d_state=cfg.ssm_state_size, d_conv=cfg.conv_kernel, d_inner=cfg.mamba_num_heads * cfg.mamba_head_dim,
                    head_dim=cfg.mamba_head_dim, n_groups=cfg.n_groups, bias=cfg.use_bias, conv_bias=cfg.use_conv_bias,
                    eps=cfg.layer_norm_epsilon, time_step_limit=cfg.time_step_limit)
    if family == "zamba2":  # SiLU, conv bias and the norm's 1e-5 fixed by the mixer; dt clamped below at time_step_min
        return dict(d_state=cfg.mamba_d_state, d_conv=cfg.mamba_d_conv, d_inner=int(cfg.mamba_expand * M),
                    head_dim=cfg.mamba_headdim, n_groups=cfg.mamba_ngroups, bias=cfg.add_bias_linear, conv_bias=True,
                    eps=1e-5, time_step_limit=(cfg.time_step_min, float("inf")))
    assert cfg.hidden_act == "silu"
    opts = dict(d_state=cfg.mamba_d_state, d_conv=cfg.mamba_d_conv, d_inner=int(cfg.mamba_expand * M),
                head_dim=cfg.mamba_d_head, n_groups=cfg.mamba_n_groups, bias=cfg.mamba_proj_bias,
                conv_bias=cfg.mamba_conv_bias, eps=cfg.rms_norm_eps, time_step_limit=cfg.time_step_limit)
    if family == "falcon_h1":
        opts.update(d_inner=cfg.mamba_d_ssm if cfg.mamba_d_ssm is not None else int(cfg.mamba_expand * M),
                    out_bias=cfg.projectors_bias, rms_norm=cfg.mamba_rms_norm,
                    norm_before_gate=cfg.mamba_norm_before_gate, ssm_multipliers=tuple(cfg.ssm_multipliers),
                    ssm_in_multiplier=cfg.ssm_in_multiplier)
    return opts


def module_options(mixer):
    """The same options read off the built mixer module (a check of :func:`block_options`)."""
    opts = dict(d_state=mixer.ssm_state_size, d_conv=mixer.conv_kernel_size, d_inner=mixer.intermediate_size,
                head_dim=mixer.head_dim, n_groups=mixer.n_groups, bias=mixer.in_proj.bias is not None,
                out_bias=mixer.out_proj.bias is not None, conv_bias=mixer.conv1d.bias is not None,
                time_step_limit=tuple(mixer.time_step_limit), rms_norm=not isinstance(mixer.norm, torch.nn.Identity))
    if opts["rms_norm"]:
        opts.update(eps=mixer.norm.variance_epsilon, norm_before_gate=getattr(mixer.norm, "norm_before_gate", False))
        groups = getattr(mixer.norm, "n_groups", None) or mixer.intermediate_size // mixer.norm.group_size
        assert groups == mixer.n_groups  # every family's gated norm is taken over the n_groups groups
    return opts


def hf_mixer(family, seed=0, **over):
    """The first Mamba-2 mixer of a tiny random ``family`` model, its weights moved off their initial values."""
    torch.manual_seed(seed)
    cfg = config(family, **over)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    mixer = next(m for m in model.modules() if type(m).__name__ == MIXERS[family])
    assert mixer.activation == "silu" and mixer.D.shape == mixer.dt_bias.shape == (mixer.num_heads,)
    with torch.no_grad():
        for p in mixer.parameters():
            p.add_(0.2 * torch.randn_like(p))
        mixer.dt_bias.copy_(torch.empty(mixer.num_heads).uniform_(-1.0, 0.5))  # step sizes around 0.7
    return cfg, mixer


def ours(family, cfg, mixer, scan):
    opts = block_options(family, cfg)
    got = module_options(mixer)
    full = {"out_bias": opts["bias"], "rms_norm": True, "norm_before_gate": False, **opts}  # the block's defaults
    for k, v in got.items():  # the config's map agrees with the built module
        assert full[k] == v, (k, full[k], v)
    b = Mamba2(cfg.hidden_size, scan=scan, batch_first=True, rng=np.random.default_rng(0), **opts)
    b.load_state_dict({k: v.detach().double().numpy() for k, v in mixer.state_dict().items()})
    if b.mup_vector is not None:  # transformers' non-persistent buffer, built from the same five numbers
        np.testing.assert_array_equal(b.mup_vector.astype(np.float32), mixer.mup_vector.reshape(-1).numpy())
    return b


# (family, config overrides): every option each family's config allows to vary
CASES = [("bamba", dict(time_step_limit=(0.3, 1.2), mamba_proj_bias=True)),
         ("bamba", dict(mamba_n_groups=1, rms_norm_eps=1e-3)),
         ("granitemoehybrid", dict(mamba_conv_bias=False, mamba_n_groups=4, mamba_d_head=4, mamba_n_heads=8)),
         ("granitemoehybrid", dict(time_step_limit=(0.0, 0.8))),
         ("nemotron_h", dict(use_bias=True, layer_norm_epsilon=1e-4)),
         ("nemotron_h", dict(time_step_limit=(0.4, 1.0), n_groups=1, use_conv_bias=False)),
         ("zamba2", dict(time_step_min=0.5, add_bias_linear=True)),
         ("zamba2", dict(mamba_ngroups=1)),
         ("falcon_h1", dict(mamba_rms_norm=True, mamba_norm_before_gate=True, ssm_multipliers=[0.5, 1.7, 0.8, 1.3, 0.6],
                            ssm_in_multiplier=0.7, mamba_proj_bias=True, time_step_limit=(0.2, 1.0))),
         ("falcon_h1", dict(mamba_rms_norm=True, mamba_norm_before_gate=False, projectors_bias=True,
                            ssm_multipliers=[1.2, 0.9, 1.1, 0.7, 1.4], mamba_d_ssm=None, mamba_n_heads=4,
                            mamba_n_groups=2)),
         ("falcon_h1", dict(mamba_rms_norm=False, ssm_multipliers=[0.8, 1.3, 0.6, 1.5, 1.1], ssm_in_multiplier=1.25,
                            mamba_proj_bias=True, projectors_bias=True))]


@pytest.mark.parametrize("family, over", CASES)
def test_output_and_every_gradient_equal_the_transformers_mixer(family, over):
    cfg, mixer = hf_mixer(family, **over)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 13, cfg.hidden_size, generator=g, requires_grad=True)  # 13 steps: chunks of 4, 4, 4, 1
    out = mixer(x)
    w = torch.randn(out.shape, generator=g)
    (out * w).sum().backward()
    theirs = dict(mixer.named_parameters())
    for scan in ("parallel", "sequential", "ssd"):
        b = ours(family, cfg, mixer, scan)
        mine, _, cache, rec = b.forward(x.detach().double().numpy(), record=True)
        assert rel(mine, out.detach().numpy()) <= RTOL_OUT
        grads, d_x, _ = b.backward(cache, w.double().numpy())
        assert rel(d_x, x.grad.numpy()) <= RTOL_GRAD
        assert sorted(grads) == sorted(theirs)
        for k, v in grads.items():
            assert rel(v, theirs[k].grad.numpy()) <= RTOL_GRAD, k
    if {"time_step_limit", "time_step_min"} & set(over):  # the clamp is on and cuts somewhere
        assert (rec.dt == b.time_step_limit[0]).any() or (rec.dt == b.time_step_limit[1]).any()


def test_what_each_family_needs_beyond_mamba2mixer():
    # the plain Mamba2Mixer's options for Bamba and GraniteMoeHybrid (no new math beyond the clamp)
    for family in ("bamba", "granitemoehybrid"):
        cfg, mixer = hf_mixer(family)
        opts = module_options(mixer)
        assert opts["d_inner"] == 2 * cfg.hidden_size and opts["rms_norm"] and not opts["norm_before_gate"]
        assert not hasattr(mixer, "mup_vector") and opts["time_step_limit"] == (0.0, float("inf"))
    # NemotronH: Di = heads * head_dim, independent of hidden_size
    cfg, mixer = hf_mixer("nemotron_h")
    assert mixer.intermediate_size == 12 != 2 * cfg.hidden_size
    # Zamba2: dt clamped below at time_step_min by default
    cfg, mixer = hf_mixer("zamba2")
    assert tuple(mixer.time_step_limit) == (cfg.time_step_min, float("inf")) and cfg.time_step_min > 0
    # Falcon-H1: muP buffer (not in the state dict), no norm by default, the norm before the gate when on
    cfg, mixer = hf_mixer("falcon_h1")
    assert "mup_vector" not in mixer.state_dict() and isinstance(mixer.norm, torch.nn.Identity)
    assert cfg.mamba_norm_before_gate and not cfg.mamba_rms_norm


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())
