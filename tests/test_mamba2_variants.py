"""The hybrid families' variants of the Mamba-2 block: the clamp of dt, muP multipliers, the norm's place, d_inner, biases.

Three independent references: the variant equations written again here in torch float64 (one
loop over time, differentiated by autograd; outputs, every step's state and every gradient at
1e-10 across SSD chunk boundaries), finite differences (:mod:`hiddenstate.classic.gradcheck`), and the
five transformers mixers themselves (``BambaMixer``, ``NemotronHMamba2Mixer``,
``Zamba2MambaMixer``, ``FalconH1Mixer``, ``GraniteMoeHybridMambaLayer``) built from tiny random
configs. Their CPU path computes the SSM (``mamba2_chunk_scan`` casts x, B, C, dt and A to
float32) and the gated norm in float32 whatever the module's dtype, so they are held to float32
round-off: outputs 1e-5 relative, gradients (torch autograd through that path) 1e-4.
"""

import math

import numpy as np
import pytest

from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.kinds.ssm.mamba2 import Mamba2
from hiddenstate.shared import ssd
from tests._torch import require_torch

TOL = 1e-10


def block(M=5, *, seed=0, jitter=0.3, **options):
    """A block with its parameters moved off their structured initial values, its step sizes around 0.7."""
    rng = np.random.default_rng(seed)
    b = Mamba2(M, rng=rng, **options)
    for v in b.params.values():
        v += jitter * rng.standard_normal(v.shape).astype(v.dtype)
    b.params["dt_bias"][:] = rng.uniform(-1.0, 0.5, b.num_heads)
    return b


def inputs(b, T, N, seed=1):
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((T, N, b.d_model))
    h0 = rng.standard_normal((N, b.num_heads, b.head_dim, b.d_state))
    c0 = rng.standard_normal((N, b.conv_dim, b.d_conv - 1))
    return u, h0, c0


def torch_reference(torch, P, u, h0, c0, b):
    """The variant block's equations, one step per iteration; returns out, every state, every dt, the final conv."""
    F = torch.nn.functional
    G, eps, (lo, hi) = b.n_groups, b.eps, b.time_step_limit
    H, Di = P["A_log"].shape[0], P["out_proj.weight"].shape[1]
    Dc, _, K = P["conv1d.weight"].shape
    S, T, N = (Dc - Di) // (2 * G), u.shape[0], u.shape[1]
    zxr = (u * b.ssm_in_multiplier) @ P["in_proj.weight"].T
    if "in_proj.bias" in P:
        zxr = zxr + P["in_proj.bias"]
    if b.ssm_multipliers is not None:  # built here from the five numbers, not from the block's vector
        m = b.ssm_multipliers
        zxr = torch.cat([zxr[..., :Di] * m[0], zxr[..., Di:2 * Di] * m[1], zxr[..., 2 * Di:2 * Di + G * S] * m[2],
                         zxr[..., 2 * Di + G * S:2 * Di + 2 * G * S] * m[3], zxr[..., Di + Dc:] * m[4]], -1)
    z, xbc, r = zxr[..., :Di], zxr[..., Di:Di + Dc], zxr[..., Di + Dc:]
    window = torch.cat([c0.permute(2, 0, 1), xbc], 0)  # (K-1+T, N, Dc)
    A = -torch.exp(P["A_log"])

    def rms(v, w):
        g = v.reshape(N, G, -1)
        return (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps)).reshape(N, Di) * w

    h, outs, hs, dts = h0, [], [], []
    for t in range(T):
        c = sum(P["conv1d.weight"][:, 0, k] * window[t + k] for k in range(K))
        if "conv1d.bias" in P:
            c = c + P["conv1d.bias"]
        a = F.silu(c)
        x = a[:, :Di].reshape(N, H, -1)
        B = a[:, Di:Di + G * S].reshape(N, G, S).repeat_interleave(H // G, dim=1)
        C = a[:, Di + G * S:].reshape(N, G, S).repeat_interleave(H // G, dim=1)
        dt = torch.clamp(F.softplus(r[t] + P["dt_bias"]), lo, hi)  # (N, H)
        h = torch.exp(dt * A)[..., None, None] * h + (dt[..., None] * x)[..., None] * B[:, :, None, :]
        y = ((h * C[:, :, None, :]).sum(-1) + P["D"][:, None] * x).reshape(N, Di)
        if not b.rms_norm:
            n = y * F.silu(z[t])
        elif b.norm_before_gate:
            n = rms(y, P["norm.weight"]) * F.silu(z[t])
        else:
            n = rms(y * F.silu(z[t]), P["norm.weight"])
        o = n @ P["out_proj.weight"].T
        outs.append(o + P["out_proj.bias"] if "out_proj.bias" in P else o)
        hs.append(h)
        dts.append(dt)
    out = torch.stack(outs) if outs else u.new_zeros(u.shape[:2] + (P["out_proj.weight"].shape[0],))
    return out, hs, dts, h, window[T:].permute(1, 2, 0)


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max(initial=0.0) / max(np.abs(b).max(initial=0.0), 1e-300))


MULT = (0.5, 1.7, 0.8, 1.3, 0.6)
# (M, options): each variant alone, then the families' combinations
VARIANTS = {
    "clamp both sides": (5, dict(d_state=4, d_conv=3, head_dim=2, n_groups=1, time_step_limit=(0.4, 1.1))),
    "clamp below (Zamba2)": (4, dict(d_state=3, d_conv=4, head_dim=2, n_groups=2, time_step_limit=(0.6, math.inf))),
    "d_inner (NemotronH)": (4, dict(d_state=3, d_conv=2, d_inner=9, head_dim=3, n_groups=3, bias=True)),
    "no norm": (4, dict(d_state=3, d_conv=3, head_dim=2, rms_norm=False)),
    "norm before gate": (4, dict(d_state=3, d_conv=3, head_dim=2, n_groups=2, norm_before_gate=True, eps=1e-3)),
    "muP": (4, dict(d_state=3, d_conv=3, head_dim=4, n_groups=2, ssm_multipliers=MULT, ssm_in_multiplier=0.7,
                    bias=True)),
    "Falcon-H1": (4, dict(d_state=3, d_conv=3, d_inner=6, head_dim=2, n_groups=3, bias=True, out_bias=False,
                          norm_before_gate=True, ssm_multipliers=MULT, ssm_in_multiplier=1.3,
                          time_step_limit=(0.3, 1.0))),
    "Falcon-H1, no norm, out bias": (4, dict(d_state=2, d_conv=2, head_dim=4, rms_norm=False, out_bias=True,
                                             ssm_multipliers=MULT, ssm_in_multiplier=0.9, conv_bias=False)),
}


@pytest.mark.parametrize("scan", ["parallel", "sequential", "ssd"])
@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("T", [0, 1, 9])
def test_outputs_states_and_every_gradient_equal_torch_autograd_float64(scan, name, T, monkeypatch):
    torch = require_torch()
    monkeypatch.setattr(ssd, "SSD_CHUNK", 4)  # T = 9: SSD's chunks of 4, 4 and 1 steps
    M, options = VARIANTS[name]
    b = block(M, scan=scan, **options)
    u, h0, c0 = inputs(b, T, 3)
    out, (hT, cT), cache, rec = b.forward(u, (h0, c0), record=True)
    rng = np.random.default_rng(2)
    d_out, d_h, d_c = rng.standard_normal(out.shape), rng.standard_normal(hT.shape), rng.standard_normal(cT.shape)
    grads, d_u, (d_h0, d_c0) = b.backward(cache, d_out, (d_h, d_c))

    P = {k: torch.tensor(v, requires_grad=True) for k, v in b.params.items()}
    ut, h0t, c0t = (torch.tensor(a, requires_grad=True) for a in (u, h0, c0))
    o, hs, dts, h, c = torch_reference(torch, P, ut, h0t, c0t, b)
    for got, want in ((out, o), (hT, h), (cT, c)):
        assert rel(got, want.detach().numpy()) < TOL
    if T:
        assert rel(rec.ssm, torch.stack(hs).detach().numpy()) < TOL
        dt = torch.stack(dts).detach().numpy()
        assert rel(rec.dt, dt) < TOL
        lo, hi = b.time_step_limit
        if T == 9 and lo > 0:  # the clamp cut somewhere (else the test would not test it)
            assert (dt == lo).any() and (dt > lo).any()
        if T == 9 and hi < math.inf:
            assert (dt == hi).any()
    loss = (o * torch.tensor(d_out)).sum() + (h * torch.tensor(d_h)).sum() + (c * torch.tensor(d_c)).sum()
    loss.backward()
    assert list(grads) == list(b.params)
    for k, t in P.items():
        assert rel(grads[k], np.zeros(t.shape) if t.grad is None else t.grad.numpy()) < TOL, k
    for got, t in ((d_u, ut), (d_h0, h0t), (d_c0, c0t)):
        assert rel(got, np.zeros(t.shape) if t.grad is None else t.grad.numpy()) < TOL


@pytest.mark.parametrize("name, scan", [("Falcon-H1", "parallel"), ("Falcon-H1", "ssd"),
                                        ("clamp both sides", "sequential"), ("no norm", "ssd"),
                                        ("d_inner (NemotronH)", "parallel")])
def test_gradcheck_every_parameter_the_input_and_both_initial_states(name, scan, monkeypatch):
    monkeypatch.setattr(ssd, "SSD_CHUNK", 4)
    M, options = VARIANTS[name]
    b = block(M, scan=scan, **options)
    u, h0, c0 = inputs(b, 6, 2)
    rng = np.random.default_rng(3)
    w_out, w_h, w_c = rng.standard_normal(u.shape[:2] + (b.d_model,)), rng.standard_normal(h0.shape), \
        rng.standard_normal(c0.shape)

    def loss():
        out, (h, c), _ = b.forward(u, (h0, c0))
        return float((out * w_out).sum() + (h * w_h).sum() + (c * w_c).sum())

    _, _, cache = b.forward(u, (h0, c0))
    grads, d_u, (d_h0, d_c0) = b.backward(cache, w_out, (w_h, w_c))
    errs = check_grads(loss, {**b.params, "u": u, "h0": h0, "conv0": c0}, {**grads, "u": d_u, "h0": d_h0, "conv0": d_c0},
                       rtol=1e-6, max_entries=None)
    assert max(errs.values()) < 1e-6


def test_the_clamp_passes_no_gradient_where_it_cuts_and_the_defaults_change_nothing():
    b = block(4, d_state=3, d_conv=3, head_dim=2, time_step_limit=(0.5, 0.9))
    u, h0, c0 = inputs(b, 7, 2)
    _, _, cache, rec = b.forward(u, (h0, c0), record=True)
    cut = (rec.dt == 0.5) | (rec.dt == 0.9)
    assert cut.any() and not cut.all()
    # a head whose dt is cut at every step gets no gradient on dt_bias
    b.params["dt_bias"][0] = 30.0  # softplus = 30 > 0.9 everywhere
    _, _, cache = b.forward(u, (h0, c0))
    grads, _, _ = b.backward(cache, np.ones((7, 2, 4)), (np.ones_like(h0), np.ones_like(c0)))
    assert grads["dt_bias"][0] == 0.0 and grads["dt_bias"][1] != 0.0
    # the default options are the plain block, bit for bit
    plain, same = block(4, d_state=3, head_dim=2, seed=5), block(4, d_state=3, head_dim=2, seed=5,
                                                                 time_step_limit=(0.0, math.inf), rms_norm=True,
                                                                 ssm_multipliers=None, ssm_in_multiplier=1.0)
    o1, s1, k1 = plain.forward(u)
    o2, s2, k2 = same.forward(u)
    np.testing.assert_array_equal(o1, o2)
    g1, g2 = plain.backward(k1, np.cos(o1))[0], same.backward(k2, np.cos(o2))[0]
    for k in g1:
        np.testing.assert_array_equal(g1[k], g2[k])


def test_parameters_buffers_and_options_are_transformers_shaped_and_validated():
    b = Mamba2(4, d_state=3, d_inner=6, head_dim=2, n_groups=3, bias=True, out_bias=False, rms_norm=False,
               ssm_multipliers=MULT, rng=np.random.default_rng(0))
    assert b.d_inner == 6 and b.num_heads == 3 and b.conv_dim == 6 + 2 * 3 * 3
    assert "norm.weight" not in b.params and "in_proj.bias" in b.params and "out_proj.bias" not in b.params
    assert repr(b).startswith("Mamba2(4, d_state=3, d_conv=4, d_inner=6")
    W = 6 + b.conv_dim + 3
    assert b.mup_vector.shape == (W,) and b.params["in_proj.weight"].shape == (W, 4)
    np.testing.assert_array_equal(b.mup_vector, np.repeat(MULT, (6, 6, 9, 9, 3)))
    assert Mamba2(4, head_dim=2).mup_vector is None and "out_proj.bias" in Mamba2(4, head_dim=2, bias=True).params
    with pytest.raises(ValueError, match=r"time_step_limit must be a pair \(lo, hi\) with 0 <= lo <= hi .*; got \(1, 0.5\)"):
        Mamba2(4, head_dim=2, time_step_limit=(1, 0.5))
    with pytest.raises(ValueError, match=r"time_step_limit must be .*; got \(-0.1, 1\)"):
        Mamba2(4, head_dim=2, time_step_limit=(-0.1, 1))
    with pytest.raises(TypeError, match=r"time_step_limit must be a pair \(lo, hi\) of numbers; got None"):
        Mamba2(4, head_dim=2, time_step_limit=None)
    with pytest.raises(ValueError, match=r"ssm_multipliers must be 5 numbers .*; got \[1, 2\]"):
        Mamba2(4, head_dim=2, ssm_multipliers=[1, 2])
    with pytest.raises(ValueError, match=r"ssm_multipliers\[2\] must be a finite number; got nan"):
        Mamba2(4, head_dim=2, ssm_multipliers=[1, 1, float("nan"), 1, 1])
    with pytest.raises(ValueError, match="head_dim must divide d_inner = 9; got 2"):
        Mamba2(4, d_inner=9, head_dim=2)
    with pytest.raises(TypeError, match="norm_before_gate must be a bool"):
        Mamba2(4, head_dim=2, norm_before_gate=1)
    with pytest.raises(TypeError, match="out_bias must be a bool"):
        Mamba2(4, head_dim=2, out_bias="yes")
    with pytest.raises(ValueError, match="ssm_in_multiplier must be a finite number"):
        Mamba2(4, head_dim=2, ssm_in_multiplier=math.inf)


def test_carrying_the_state_across_calls_equals_one_long_call_with_every_variant():
    b = block(4, **VARIANTS["Falcon-H1"][1])
    u, h0, c0 = inputs(b, 10, 2)
    out, final, cache = b.forward(u, (h0, c0))
    o1, s1, k1 = b.forward(u[:4], (h0, c0))
    o2, s2, k2 = b.forward(u[4:], s1)
    np.testing.assert_allclose(np.concatenate([o1, o2]), out, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(s2.ssm, final.ssm, rtol=1e-13, atol=1e-14)
    d_out = np.random.default_rng(4).standard_normal(out.shape)
    g, d_u, d0 = b.backward(cache, d_out)
    g2, d_u2, mid = b.backward(k2, d_out[4:])
    g1, d_u1, d01 = b.backward(k1, d_out[:4], mid)
    np.testing.assert_allclose(np.concatenate([d_u1, d_u2]), d_u, rtol=1e-12, atol=1e-13)
    for k in g:
        np.testing.assert_allclose(g1[k] + g2[k], g[k], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(d01.ssm, d0.ssm, rtol=1e-12, atol=1e-13)


def test_float32_blocks_keep_their_dtype_through_every_variant():
    b64 = block(4, **VARIANTS["Falcon-H1"][1])
    b32 = block(4, dtype=np.float32, **VARIANTS["Falcon-H1"][1])
    assert b32.mup_vector.dtype == np.float32
    u, h0, c0 = inputs(b64, 9, 2)
    o64, s64, k64 = b64.forward(u, (h0, c0))
    o32, s32, k32 = b32.forward(u, (h0, c0))
    assert o32.dtype == s32.ssm.dtype == np.float32 and rel(o32, o64) < 1e-5
    g32, d32, _ = b32.backward(k32, np.cos(o64))
    g64, d64, _ = b64.backward(k64, np.cos(o64))
    assert d32.dtype == np.float32 and all(g32[k].dtype == np.float32 for k in g32)
    assert max(rel(g32[k], g64[k]) for k in g64) < 1e-4 and rel(d32, d64) < 1e-4
