"""The Mamba-1 mixers of the other families: RMS norms of dt, B, C (FalconMamba, Jamba) and Zamba's heads.

The references are independent of the kernels: the equations of each variant written again here in
torch float64 (one loop over time, per-head einsums, differentiated by autograd), finite
differences (:mod:`hiddenstate.classic.gradcheck`) with lengths and resets, the array-API path, prefix
re-runs for the per-step states, and transformers' own ``FalconMambaMixer``, ``JambaMambaMixer``,
``ZambaMambaMixer`` and ``FalconMambaForCausalLM`` (tiny random configurations, float32: our float64
results are held to float32 round-off).
"""

import numpy as np
import pytest

from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.kinds.ssm.mamba import Mamba
from hiddenstate.xp import to_numpy
from tests._torch import require_torch
from tests.test_mamba import block, inputs, rel

TOL = 1e-10
RTOL_F32 = 1e-5  # transformers' mixers run in float32 here

VARIANTS = {
    "falcon": dict(bcdt_norm="rms"),
    "jamba": dict(bcdt_norm="rms_weight", norm_eps=1e-3),
    "zamba": dict(num_heads=2),
    "zamba1": dict(num_heads=1, bias=True),
    "zamba-norms": dict(num_heads=4, bcdt_norm="rms_weight", conv_bias=False),
}


def variant(name, M=4, **extra):
    return block(M, d_state=3, d_conv=3, dt_rank=3, **VARIANTS[name], **extra)


def torch_reference(torch, P, u, h0, c0, *, eps=None, heads=None):
    """One step per iteration, in transformers' layouts: ``heads`` None is MambaMixer's, else ZambaMambaMixer's."""
    F = torch.nn.functional
    T, N = u.shape[:2]
    Di, _, K = P["conv1d.weight"].shape
    H = heads or 1
    Dh, S = Di // H, P["A_log"].shape[-1]
    Wx, Wdt, bdt = ((P["x_proj_weight"], P["dt_proj_weight"], P["dt_proj_bias"]) if heads else
                    (P["x_proj.weight"][None], P["dt_proj.weight"][None], P["dt_proj.bias"][None]))
    R = Wdt.shape[-1]
    xz = u @ P["in_proj.weight"].T
    if "in_proj.bias" in P:
        xz = xz + P["in_proj.bias"]
    if heads:  # rows 2i, 2i+1 of in_proj are x_i, z_i
        x, z = xz.reshape(T, N, Di, 2)[..., 0], xz.reshape(T, N, Di, 2)[..., 1]
    else:
        x, z = xz[..., :Di], xz[..., Di:]
    window = torch.cat([c0.permute(2, 0, 1), x], 0)  # (K-1+T, N, Di)
    A = -torch.exp(P["A_log"]).reshape(H, Dh, S)
    D = P["D"].reshape(H, Dh)

    def norm(v, key):
        v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
        return v * P[key] if key in P else v

    h, outs = h0.reshape(N, H, Dh, S), []
    for t in range(T):
        c = sum(P["conv1d.weight"][:, 0, k] * window[t + k] for k in range(K))
        if "conv1d.bias" in P:
            c = c + P["conv1d.bias"]
        a = F.silu(c).reshape(N, H, Dh)
        dbc = torch.einsum("nhd,hkd->nhk", a, Wx)
        r, B, C = dbc[..., :R], dbc[..., R:R + S], dbc[..., R + S:]
        if eps is not None:
            r, B, C = norm(r, "dt_layernorm.weight"), norm(B, "b_layernorm.weight"), norm(C, "c_layernorm.weight")
        dt = F.softplus(torch.einsum("nhr,hdr->nhd", r, Wdt) + bdt)  # (N, H, Dh)
        h = torch.exp(dt[..., None] * A) * h + (dt * a)[..., None] * B[:, :, None, :]
        y = (h * C[:, :, None, :]).sum(-1) + D * a
        o = (y.reshape(N, Di) * F.silu(z[t])) @ P["out_proj.weight"].T
        outs.append(o + P["out_proj.bias"] if "out_proj.bias" in P else o)
    out = torch.stack(outs) if outs else u.new_zeros(u.shape[:2] + (P["out_proj.weight"].shape[0],))
    return out, h.reshape(N, Di, S), window[T:].permute(1, 2, 0)


@pytest.mark.parametrize("scan", ["parallel", "sequential"])
@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("T", [0, 1, 9])
def test_forward_and_every_gradient_equal_torch_autograd_float64(scan, name, T):
    torch = require_torch()
    b = variant(name, scan=scan)
    u, h0, c0 = inputs(b, T, 3)
    out, (hT, cT), cache = b.forward(u, (h0, c0))
    rng = np.random.default_rng(2)
    d_out, d_h, d_c = rng.standard_normal(out.shape), rng.standard_normal(hT.shape), rng.standard_normal(cT.shape)
    grads, d_u, (d_h0, d_c0) = b.backward(cache, d_out, (d_h, d_c))

    P = {k: torch.tensor(v, requires_grad=True) for k, v in b.params.items()}
    ut, h0t, c0t = (torch.tensor(a, requires_grad=True) for a in (u, h0, c0))
    o, h, c = torch_reference(torch, P, ut, h0t, c0t, eps=b.norm_eps if b.bcdt_norm else None, heads=b.num_heads)
    for got, want in ((out, o), (hT, h), (cT, c)):
        assert rel(got, want.detach().numpy()) < TOL
    loss = (o * torch.tensor(d_out)).sum() + (h * torch.tensor(d_h)).sum() + (c * torch.tensor(d_c)).sum()
    if loss.requires_grad:
        loss.backward()
    assert set(grads) == set(b.params)
    for k, t in P.items():
        assert grads[k].shape == b.params[k].shape
        assert rel(grads[k], np.zeros(t.shape) if t.grad is None else t.grad.numpy()) < TOL, k
    for got, t in ((d_u, ut), (d_h0, h0t), (d_c0, c0t)):
        assert rel(got, np.zeros(t.shape) if t.grad is None else t.grad.numpy()) < TOL


@pytest.mark.parametrize("name", ["falcon", "jamba", "zamba-norms"])
def test_gradcheck_every_parameter_the_input_and_both_initial_states_with_lengths_and_resets(name):
    b = variant(name, bias=True)
    u, h0, c0 = inputs(b, 6, 2)
    rng = np.random.default_rng(3)
    w_out, w_h, w_c = rng.standard_normal((6, 2, 4)), rng.standard_normal(h0.shape), rng.standard_normal(c0.shape)
    extra = dict(lengths=[6, 4], reset=np.array([[0, 0], [0, 0], [0, 1], [1, 0], [0, 0], [0, 0]], dtype=bool))

    def loss():
        out, (h, c), _ = b.forward(u, (h0, c0), **extra)
        return float((out * w_out).sum() + (h * w_h).sum() + (c * w_c).sum())

    _, _, cache = b.forward(u, (h0, c0), **extra)
    grads, d_u, (d_h0, d_c0) = b.backward(cache, w_out, (w_h, w_c))
    errs = check_grads(loss, {**b.params, "u": u, "h0": h0, "conv0": c0}, {**grads, "u": d_u, "h0": d_h0, "conv0": d_c0},
                       rtol=1e-6, max_entries=None)
    assert max(errs.values()) < 1e-6


@pytest.mark.parametrize("name", list(VARIANTS))
def test_ragged_rows_equal_each_row_run_alone(name):
    b = variant(name)
    u, h0, c0 = inputs(b, 7, 3)
    lengths = np.array([7, 3, 0])
    out, st, _ = b.forward(u, (h0, c0), lengths=lengths)
    for n, L in enumerate(lengths):
        o, s = b(u[:L, n:n + 1], (h0[n:n + 1], c0[n:n + 1]))
        np.testing.assert_allclose(out[:L, n], o[:, 0], rtol=1e-13, atol=1e-14)
        assert not out[L:, n].any()
        np.testing.assert_allclose(st.ssm[n], s.ssm[0], rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(st.conv[n], s.conv[0], rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_the_array_api_path_equals_the_kernels_with_lengths_and_resets(name):
    torch = require_torch()
    from tests.test_mamba_array_api import ragged_case

    b = variant(name, seed=5)
    u, h0, c0, lengths, reset = ragged_case(b, 6)
    out, final, cache = b.forward(u, (h0, c0), lengths=lengths, reset=reset)
    t = torch.from_numpy
    o_t, f_t, c_t = b.forward(t(u), (t(h0), t(c0)), lengths=t(lengths), reset=t(reset))
    for got, want in ((o_t, out), (f_t.ssm, final.ssm), (f_t.conv, final.conv)):
        assert isinstance(got, torch.Tensor) and rel(to_numpy(got), want) < 1e-12
    rng = np.random.default_rng(7)
    d_out, d_h, d_c = (rng.standard_normal(a.shape) for a in (out, final.ssm, final.conv))
    grads, d_u, d0 = b.backward(cache, d_out, (d_h, d_c))
    g_t, du_t, d0_t = b.backward(c_t, t(d_out), (t(d_h), t(d_c)))
    assert list(g_t) == list(b.params)
    for k in grads:
        assert tuple(g_t[k].shape) == grads[k].shape and rel(to_numpy(g_t[k]), grads[k]) < 1e-12, k
    for got, want in ((du_t, d_u), (d0_t.ssm, d0.ssm), (d0_t.conv, d0.conv)):
        assert rel(to_numpy(got), want) < 1e-12


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_step_state_equals_the_final_state_of_its_prefix(name):
    b = variant(name)
    u, h0, c0 = inputs(b, 6, 2)
    out, final, _, rec = b.forward(u, (h0, c0), record=True)
    H = b.num_heads
    assert rec.ssm.shape == (6, 2, b.d_inner, 3)
    assert rec.B.shape == rec.C.shape == ((6, 2, 3) if H is None else (6, 2, H, 3))
    for t in range(6):
        _, st = b(u[:t + 1], (h0, c0))
        np.testing.assert_allclose(rec.ssm[t], st.ssm, rtol=1e-13, atol=1e-14)
        np.testing.assert_array_equal(rec.conv[t], st.conv)
    np.testing.assert_array_equal(rec.ssm[-1], final.ssm)
    A = -np.exp(b.params["A_log"].reshape(b.d_inner, 3))
    np.testing.assert_allclose(rec.decay, np.exp(rec.dt[..., None] * A), rtol=1e-15)
    if b.bcdt_norm == "rms":  # weightless: every step's B and C have unit RMS (up to eps = 1e-6)
        for v in (rec.B, rec.C):
            assert np.all(np.abs(np.mean(v ** 2, axis=-1) - 1) < 1e-4)


def test_variants_carry_their_state_across_calls():
    b = variant("zamba-norms")
    u, h0, c0 = inputs(b, 8, 2)
    out, final = b(u, (h0, c0))
    o1, s1 = b(u[:2], (h0, c0))
    o2, s2 = b(u[2:], s1)
    np.testing.assert_allclose(np.concatenate([o1, o2]), out, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(s2.ssm, final.ssm, rtol=1e-13, atol=1e-14)


def test_variant_options_are_checked_with_the_rule():
    with pytest.raises(ValueError, match="bcdt_norm must be one of rms, rms_weight; got 'layer'"):
        Mamba(4, bcdt_norm="layer")
    with pytest.raises(ValueError, match=r"num_heads must divide d_inner = expand \* d_model = 8; got 3"):
        Mamba(4, num_heads=3)
    with pytest.raises(TypeError, match="num_heads must be a positive integer"):
        Mamba(4, num_heads=2.0)
    with pytest.raises(ValueError, match="norm_eps"):
        Mamba(4, bcdt_norm="rms", norm_eps=0.0)
    b = Mamba(4, num_heads=2, bcdt_norm="rms_weight", d_state=3, dt_rank=2)
    assert {k: v.shape for k, v in b.params.items() if "proj_" in k or "layernorm" in k or k in ("A_log", "D")} == {
        "x_proj_weight": (2, 8, 4), "dt_proj_weight": (2, 4, 2), "dt_proj_bias": (2, 4), "A_log": (2, 4, 3),
        "D": (2, 4), "dt_layernorm.weight": (2,), "b_layernorm.weight": (3,), "c_layernorm.weight": (3,)}
    assert "num_heads=2" in repr(b) and "bcdt_norm='rms_weight'" in repr(b)
    with pytest.raises(ValueError, match="x_proj_weight"):
        b.load_state_dict({k: v for k, v in b.params.items() if k != "x_proj_weight"})


# --- parity with transformers' own mixers -------------------------------------------------------------------------


def _transformers():
    torch = require_torch()
    from tests._torch import torch_required

    tr = __import__("transformers") if torch_required() else pytest.importorskip("transformers")
    return torch, tr


def _randomise(torch, module, seed):
    """Every parameter off its structured initial value (A_log = log(1..S) + noise, D = 1 + noise, ...)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("A_log"):  # FalconMambaMixer(initialize_mixer_weights=False) leaves it empty
                base = torch.log(torch.arange(1, p.shape[-1] + 1, dtype=p.dtype)).expand(p.shape)
            elif name.endswith(".D") or name == "D" or name.endswith("layernorm.weight"):
                base = torch.ones_like(p)
            else:  # linear layers as their constructors drew them (Zamba's x_proj_weight starts at 0)
                base = p.clone()
            p.copy_(base + 0.3 * torch.randn_like(p))
    return module.eval()


def _mixer_parity(torch, mixer, ours, plain, seed=1, T=11, N=3):
    """Our float64 block's worst error relative to the float32 mixer's output, and a plain Mamba block's (the control)."""
    sd = {k: v.detach().double().numpy() for k, v in mixer.state_dict().items()}
    ours.load_state_dict(sd)
    x = torch.randn(N, T, ours.d_model, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        want = mixer(x).numpy()
    assert 1e-3 < np.abs(want).max() < 1e3  # a mixer in its normal range
    got, _ = ours(x.double().numpy())
    if "x_proj_weight" in sd:  # the control: Zamba's heads read as one head, x and z as two blocks of in_proj
        H, _, Dh = sd["x_proj_weight"].shape
        sd = {**{k: v for k, v in sd.items() if "proj_" not in k}, "A_log": sd["A_log"].reshape(H * Dh, -1),
              "D": sd["D"].reshape(-1), "x_proj.weight": sd["x_proj_weight"][0].repeat(H, axis=1) / H,
              "dt_proj.weight": sd["dt_proj_weight"].reshape(H * Dh, -1), "dt_proj.bias": sd["dt_proj_bias"].reshape(-1)}
    plain.load_state_dict({k: v for k, v in sd.items() if "layernorm" not in k})
    return rel(got, want), rel(plain(x.double().numpy())[0], want)


def test_falcon_mamba_mixer_equals_transformers():
    torch, tr = _transformers()
    from transformers.models.falcon_mamba.modeling_falcon_mamba import FalconMambaMixer

    cfg = tr.FalconMambaConfig(hidden_size=16, state_size=5, num_hidden_layers=1, time_step_rank=3, mixer_rms_eps=1e-3,
                               use_bias=True)
    mixer = _randomise(torch, FalconMambaMixer(cfg, 0, initialize_mixer_weights=False), 0)
    ours = Mamba(16, d_state=5, d_conv=cfg.conv_kernel, expand=cfg.expand, dt_rank=3, bias=True, bcdt_norm="rms",
                 norm_eps=cfg.mixer_rms_eps, batch_first=True)
    plain = Mamba(16, d_state=5, d_conv=cfg.conv_kernel, expand=cfg.expand, dt_rank=3, bias=True, batch_first=True)
    err, control = _mixer_parity(torch, mixer, ours, plain)
    print(f"FalconMambaMixer: {err:.2e} of the float32 mixer's output (without the norms: {control:.2e})")
    assert err < RTOL_F32 and control > 1e-2


def test_jamba_mamba_mixer_equals_transformers():
    torch, tr = _transformers()
    from transformers.models.jamba.modeling_jamba import JambaMambaMixer

    cfg = tr.JambaConfig(hidden_size=16, mamba_d_state=5, mamba_dt_rank=3, mamba_d_conv=3, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, intermediate_size=32, attn_layer_period=2,
                         attn_layer_offset=1, expert_layer_period=2, num_experts=2, vocab_size=40, rms_norm_eps=1e-4)
    mixer = _randomise(torch, JambaMambaMixer(cfg, 0), 0)
    ours = Mamba(16, d_state=5, d_conv=3, expand=cfg.mamba_expand, dt_rank=3, bias=cfg.mamba_proj_bias,
                 conv_bias=cfg.mamba_conv_bias, bcdt_norm="rms_weight", norm_eps=cfg.rms_norm_eps, batch_first=True)
    plain = Mamba(16, d_state=5, d_conv=3, expand=cfg.mamba_expand, dt_rank=3, batch_first=True)
    err, control = _mixer_parity(torch, mixer, ours, plain)
    print(f"JambaMambaMixer: {err:.2e} of the float32 mixer's output (without the norms: {control:.2e})")
    assert err < RTOL_F32 and control > 1e-2


@pytest.mark.parametrize("heads", [1, 2, 4])
def test_zamba_mamba_mixer_equals_transformers(heads):
    torch, tr = _transformers()
    from transformers.models.zamba.modeling_zamba import ZambaMambaMixer

    cfg = tr.ZambaConfig(hidden_size=16, mamba_d_state=5, mamba_dt_rank=3, num_hidden_layers=3, num_attention_heads=2,
                         n_mamba_heads=heads, vocab_size=40, intermediate_size=32)
    mixer = _randomise(torch, ZambaMambaMixer(cfg, 0), 0)
    ours = Mamba(16, d_state=5, d_conv=cfg.mamba_d_conv, expand=cfg.mamba_expand, dt_rank=3, bias=cfg.mamba_proj_bias,
                 conv_bias=cfg.mamba_conv_bias, num_heads=cfg.n_mamba_heads, batch_first=True)
    plain = Mamba(16, d_state=5, d_conv=cfg.mamba_d_conv, expand=cfg.mamba_expand, dt_rank=3, batch_first=True)
    err, control = _mixer_parity(torch, mixer, ours, plain)
    print(f"ZambaMambaMixer ({heads} heads): {err:.2e} of the float32 mixer's output (as one head: {control:.2e})")
    assert err < RTOL_F32 and control > 1e-2


def test_from_transformers_falcon_mamba_gives_a_trainable_model_with_its_logits_and_states():
    torch, tr = _transformers()
    from hiddenstate.interop.transformers_io import from_transformers, states_from_cache, to_transformers
    from hiddenstate.kinds.ssm.lm import MambaLM

    cfg = tr.FalconMambaConfig(vocab_size=30, hidden_size=8, state_size=4, num_hidden_layers=2, time_step_rank=2,
                               mixer_rms_eps=1e-3)
    torch.manual_seed(0)
    model = _randomise(torch, tr.FalconMambaForCausalLM(cfg), 0)
    ids = torch.randint(0, 30, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(ids, use_cache=True)
    lm = from_transformers(model)
    assert all(b.bcdt_norm == "rms" and b.norm_eps == 1e-3 for b in lm.layers)
    logits, states, cache = lm.forward(ids.numpy())
    err = rel(logits, out.logits.numpy())
    print(f"FalconMambaForCausalLM logits: {err:.2e}")
    assert err < RTOL_F32
    for ours, ref in zip(states, states_from_cache(out.cache, 2)):
        assert rel(ours.ssm, ref.ssm) < RTOL_F32 and rel(ours.conv, ref.conv) < RTOL_F32
    for b in lm.layers:  # the control: the same weights without the norms are another model
        b.bcdt_norm = None
    assert rel(lm(ids.numpy())[0], out.logits.numpy()) > 1e-2
    for b in lm.layers:
        b.bcdt_norm = "rms"
    # trainable: the exact gradient of a loss of the logits is the finite differences' (every parameter)
    w = np.random.default_rng(2).standard_normal(logits.shape)
    grads, _ = lm.backward(cache, w)

    def loss():
        return float((lm.forward(ids.numpy())[0] * w).sum())

    errs = check_grads(loss, lm.params, grads, rtol=1e-6)
    assert max(errs.values()) < 1e-6
    # and back: a FalconMambaForCausalLM with the same weights, bit for bit
    back = to_transformers(lm)
    assert type(back).__name__ == "FalconMambaForCausalLM" and back.config.mixer_rms_eps == 1e-3
    theirs = model.state_dict()
    assert all(torch.equal(t, theirs[k]) for k, t in back.state_dict().items())
    with pytest.raises(ValueError, match="lm's blocks must be MambaMixer's or FalconMambaMixer's"):
        to_transformers(MambaLM(30, 8, 1, bcdt_norm="rms_weight"))


def test_a_zamba_layer_recomputed_from_its_input_gives_its_output_and_its_cache_states():
    # the states map onto transformers' cache: ssm (N, H, Dh, S) is ours (N, Di, S) reshaped; conv keeps K, we K - 1
    torch, tr = _transformers()
    cfg = tr.ZambaConfig(hidden_size=16, mamba_d_state=5, mamba_dt_rank=3, num_hidden_layers=4, attn_layer_period=1,
                         attn_layer_offset=0, num_attention_heads=2, num_key_value_heads=2, n_mamba_heads=2,
                         vocab_size=40, intermediate_size=32)
    torch.manual_seed(0)
    model = _randomise(torch, tr.ZambaForCausalLM(cfg), 0)
    mixer = model.model.layers[0].mamba
    seen = {}
    mixer.register_forward_hook(lambda mod, args, kwargs, out: seen.update(x=args[0] if args else kwargs["hidden_states"], y=out),
                                 with_kwargs=True)
    ids = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(ids, use_cache=True)
    ours = Mamba(16, d_state=5, dt_rank=3, num_heads=2, batch_first=True)
    ours.load_state_dict({k: v.detach().double().numpy() for k, v in mixer.state_dict().items()})
    y, st = ours(seen["x"].double().numpy())
    assert rel(y, seen["y"].numpy()) < RTOL_F32
    ssm, conv = (t.double().numpy() for t in (out.cache.get_recurrent_state(0), out.cache.get_conv_state(0)))
    assert ssm.shape == (2, 2, 16, 5) and conv.shape == (2, 32, 4)
    assert rel(st.ssm, ssm.reshape(2, 32, 5)) < RTOL_F32 and rel(st.conv, conv[..., 1:]) < RTOL_F32
