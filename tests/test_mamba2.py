"""The Mamba-2 block (Dao & Gu 2024, SSD): both scans, exact BPTT, both initial states, every step's state, carry.

The references are independent of the kernels: the block's equations written again here in torch
float64 (one loop over time, the heads' B and C by ``repeat_interleave``, differentiated by
autograd), finite differences (:mod:`hiddenstate.classic.gradcheck`), and prefix re-runs for the
per-step states.
"""

import numpy as np
import pytest

from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.kinds.ssm.mamba2 import Mamba2
from hiddenstate.shared import ssd
from hiddenstate.shared.scan import CHUNK
from tests._ssm import jittered, ssm_inputs
from tests._torch import require_torch

TOL = 1e-10


def block(M=5, **options):
    return jittered(Mamba2, M, **options)


inputs = ssm_inputs


def torch_reference(torch, P, u, h0, c0, *, G, eps):
    """Mamba-2's equations in transformers' layout, one step per iteration."""
    F = torch.nn.functional
    H, Di = P["A_log"].shape[0], P["out_proj.weight"].shape[1]
    Dc, _, K = P["conv1d.weight"].shape
    S, T, N = (Dc - Di) // (2 * G), u.shape[0], u.shape[1]
    zxr = u @ P["in_proj.weight"].T
    if "in_proj.bias" in P:
        zxr = zxr + P["in_proj.bias"]
    z, xbc, r = zxr[..., :Di], zxr[..., Di:Di + Dc], zxr[..., Di + Dc:]
    window = torch.cat([c0.permute(2, 0, 1), xbc], 0)  # (K-1+T, N, Dc)
    A = -torch.exp(P["A_log"])  # (H,)
    h, outs = h0, []
    for t in range(T):
        c = sum(P["conv1d.weight"][:, 0, k] * window[t + k] for k in range(K))
        if "conv1d.bias" in P:
            c = c + P["conv1d.bias"]
        a = F.silu(c)
        x = a[:, :Di].reshape(N, H, -1)
        B = a[:, Di:Di + G * S].reshape(N, G, S).repeat_interleave(H // G, dim=1)  # (N, H, S)
        C = a[:, Di + G * S:].reshape(N, G, S).repeat_interleave(H // G, dim=1)
        dt = F.softplus(r[t] + P["dt_bias"])  # (N, H)
        h = torch.exp(dt * A)[..., None, None] * h + (dt[..., None] * x)[..., None] * B[:, :, None, :]
        y = (h * C[:, :, None, :]).sum(-1) + P["D"][:, None] * x  # (N, H, P)
        g = (y.reshape(N, Di) * F.silu(z[t])).reshape(N, G, -1)
        n = (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps)).reshape(N, Di) * P["norm.weight"]
        o = n @ P["out_proj.weight"].T
        outs.append(o + P["out_proj.bias"] if "out_proj.bias" in P else o)
    out = torch.stack(outs) if outs else u.new_zeros(u.shape[:2] + (P["out_proj.weight"].shape[0],))
    return out, h, window[T:].permute(1, 2, 0)


def rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max(initial=0.0) / max(np.abs(b).max(initial=0.0), 1e-300))


# (M, options): one group; two heads per group; three groups with biases; no conv bias, K = 1
CONFIGS = [(5, dict(d_state=4, d_conv=4, expand=2, head_dim=2)),
           (4, dict(d_state=3, d_conv=2, expand=2, head_dim=2, n_groups=2)),
           (6, dict(d_state=5, d_conv=3, expand=2, head_dim=4, n_groups=3, bias=True, eps=1e-3)),
           (5, dict(d_state=4, d_conv=1, expand=2, head_dim=5, conv_bias=False))]


@pytest.mark.parametrize("scan", ["parallel", "sequential", "ssd"])
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("T", [0, 1, 2, 9])
def test_forward_and_every_gradient_equal_torch_autograd_float64(scan, config, T, monkeypatch):
    torch = require_torch()
    monkeypatch.setattr(ssd, "SSD_CHUNK", 4)  # T = 9: SSD's chunks of 4, 4 and 1 steps
    b = block(config[0], scan=scan, **config[1])
    u, h0, c0 = inputs(b, T, 3)
    out, (hT, cT), cache = b.forward(u, (h0, c0))
    rng = np.random.default_rng(2)
    d_out, d_h, d_c = rng.standard_normal(out.shape), rng.standard_normal(hT.shape), rng.standard_normal(cT.shape)
    grads, d_u, (d_h0, d_c0) = b.backward(cache, d_out, (d_h, d_c))

    P = {k: torch.tensor(v, requires_grad=True) for k, v in b.params.items()}
    ut, h0t, c0t = (torch.tensor(a, requires_grad=True) for a in (u, h0, c0))
    o, h, c = torch_reference(torch, P, ut, h0t, c0t, G=b.n_groups, eps=b.eps)
    assert out.shape == (T, 3, b.d_model) and hT.shape == h0.shape and cT.shape == c0.shape
    for got, want in ((out, o), (hT, h), (cT, c)):
        assert rel(got, want.detach().numpy()) < TOL
    loss = (o * torch.tensor(d_out)).sum() + (h * torch.tensor(d_h)).sum() + (c * torch.tensor(d_c)).sum()
    loss.backward()
    assert list(grads) == list(b.params)
    for k, t in P.items():
        assert rel(grads[k], np.zeros(t.shape) if t.grad is None else t.grad.numpy()) < TOL, k
    for got, t in ((d_u, ut), (d_h0, h0t), (d_c0, c0t)):
        assert rel(got, np.zeros(t.shape) if t.grad is None else t.grad.numpy()) < TOL


@pytest.mark.parametrize("config, scan", [(CONFIGS[1], "parallel"), (CONFIGS[2], "parallel"), (CONFIGS[1], "ssd")])
def test_gradcheck_every_parameter_the_input_and_both_initial_states(config, scan, monkeypatch):
    monkeypatch.setattr(ssd, "SSD_CHUNK", 4)
    b = block(config[0], scan=scan, **config[1])
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


@pytest.mark.parametrize("scan", ["parallel", "ssd"])
def test_each_scan_agrees_with_the_sequential_one_across_chunk_boundaries(scan):
    b = block(4, d_state=3, d_conv=3, expand=2, head_dim=2, n_groups=2)
    u, h0, c0 = inputs(b, CHUNK + 37, 2)  # 5 SSD chunks (the last of 37 steps), 2 scan chunks
    res = {}
    for s in (scan, "sequential"):
        b.scan = s
        out, st, cache, rec = b.forward(u, (h0, c0), record=True)
        res[s] = (out, st, b.backward(cache, np.cos(out), (np.sin(st.ssm), None)), rec.ssm)
    (o1, s1, (g1, du1, d1), r1), (o2, s2, (g2, du2, d2), r2) = res[scan], res["sequential"]
    assert rel(o1, o2) < 1e-12 and rel(s1.ssm, s2.ssm) < 1e-12 and rel(r1, r2) < 1e-12
    assert max(rel(g1[k], g2[k]) for k in g1) < 1e-12
    assert rel(du1, du2) < 1e-12 and rel(d1.ssm, d2.ssm) < 1e-12 and rel(d1.conv, d2.conv) < 1e-12


def test_every_step_state_equals_the_final_state_of_its_prefix():
    b = block(4, d_state=3, d_conv=4, head_dim=2, n_groups=2)
    u, h0, c0 = inputs(b, 7, 2)
    out, final, _, rec = b.forward(u, (h0, c0), record=True)
    H, P, G = b.num_heads, b.head_dim, b.n_groups
    assert rec.ssm.shape == (7, 2, H, P, 3) and rec.conv.shape == (7, 2, b.conv_dim, 3)
    assert rec.dt.shape == rec.decay.shape == (7, 2, H) and rec.B.shape == rec.C.shape == (7, 2, G, 3)
    for t in range(7):
        _, st = b(u[:t + 1], (h0, c0))
        np.testing.assert_allclose(rec.ssm[t], st.ssm, rtol=1e-13, atol=1e-14)
        np.testing.assert_array_equal(rec.conv[t], st.conv)
    np.testing.assert_array_equal(rec.ssm[-1], final.ssm)
    A = -np.exp(b.params["A_log"])
    np.testing.assert_allclose(rec.decay, np.exp(rec.dt * A), rtol=1e-15)
    assert (rec.decay > 0).all() and (rec.decay <= 1).all() and (rec.dt > 0).all()
    # the state update with the recorded quantities, by hand: a scalar decay per (row, head)
    prev = np.concatenate([h0[None], rec.ssm[:-1]])
    Bh = np.repeat(rec.B, H // G, axis=2)  # (T, N, H, S)
    want = rec.decay[..., None, None] * prev + (rec.dt[..., None] * rec.x)[..., None] * Bh[:, :, :, None, :]
    np.testing.assert_allclose(rec.ssm, want, rtol=1e-12, atol=1e-13)


def test_zero_initial_states_rows_batch_first_and_float32():
    b = block(4, d_state=4, head_dim=2, n_groups=2)
    u, h0, c0 = inputs(b, 5, 3)
    zero = b.initial_state(3)
    assert zero.ssm.shape == (3, 4, 2, 4) and zero.conv.shape == (3, b.conv_dim, 3)
    np.testing.assert_array_equal(b(u)[0], b(u, zero)[0])
    out, st = b(u, (h0, c0))
    for n in range(3):  # rows are independent
        o, s = b(u[:, n:n + 1], (h0[n:n + 1], c0[n:n + 1]))
        np.testing.assert_allclose(o[:, 0], out[:, n], rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(s.ssm[0], st.ssm[n], rtol=1e-13, atol=1e-14)
    bf = block(4, d_state=4, head_dim=2, n_groups=2, batch_first=True)
    np.testing.assert_array_equal(bf(u.transpose(1, 0, 2))[0], b(u)[0].transpose(1, 0, 2))
    f32 = block(4, d_state=4, head_dim=2, n_groups=2, dtype=np.float32)
    o32, s32 = f32(u)
    assert o32.dtype == np.float32 and s32.ssm.dtype == np.float32
    assert rel(o32, b(u)[0]) < 1e-5


def test_bad_sizes_states_and_inputs_are_refused_with_the_rule():
    with pytest.raises(ValueError, match="head_dim must divide d_inner = expand \\* d_model = 8; got 3"):
        Mamba2(4, head_dim=3)
    with pytest.raises(ValueError, match="n_groups must divide the number of heads H = d_inner / head_dim = 4; got 3"):
        Mamba2(4, head_dim=2, n_groups=3)
    with pytest.raises(ValueError, match="eps must be a finite number > 0; got 0"):
        Mamba2(4, head_dim=2, eps=0)
    with pytest.raises(ValueError, match="scan must be one of parallel, sequential"):
        Mamba2(4, head_dim=2, scan="fast")
    b = block(4, d_state=4, d_conv=3, head_dim=2)
    u, h0, c0 = inputs(b, 3, 2)
    with pytest.raises(ValueError, match=r"state\.ssm must have shape \(N=2, H=4, P=2, S=4\); got \(4, 2, 4\)"):
        b(u, (h0[0], c0))
    with pytest.raises(ValueError, match=r"state\.conv must have shape \(N=2, Dc=16, K-1=2\)"):
        b(u, (h0, c0[..., :1]))


def test_a_torch_tensor_is_refused_clearly():
    torch = require_torch()
    with pytest.raises(TypeError, match="u must be a NumPy array for Mamba2 .*; got Tensor"):
        block(4, head_dim=2)(torch.zeros(3, 2, 4))


def test_lm_gradients_equal_finite_differences_and_carry_states():
    from hiddenstate.kinds.ssm.lm import Mamba2LM, MambaLM
    from hiddenstate.kinds.ssm.mamba_kernel import MambaState

    rng = np.random.default_rng(5)
    lm = Mamba2LM(7, 4, 2, d_state=3, d_conv=3, expand=2, head_dim=2, n_groups=2, eps=1e-3, rng=rng)
    assert not isinstance(lm, MambaLM) and all(isinstance(b, Mamba2) and b.eps == 1e-3 for b in lm.layers)
    assert "lm_head.weight" in lm.params and repr(lm).startswith("Mamba2LM(7, 4, 2, Mamba2(4, d_state=3")
    for v in lm.params.values():
        v += 0.3 * rng.standard_normal(v.shape)
    ids = rng.integers(0, 7, (2, 5))
    w = rng.standard_normal((2, 5, 7))
    w_h = [rng.standard_normal((2, 4, 2, 3)) for _ in range(2)]

    def loss():
        logits, states, _ = lm.forward(ids)
        return float((logits * w).sum() + sum((s.ssm * wh).sum() for s, wh in zip(states, w_h)))

    _, _, cache = lm.forward(ids)
    grads, _ = lm.backward(cache, w, [MambaState(wh, None) for wh in w_h])
    check_grads(loss, dict(lm.params), grads, rtol=1e-6, max_entries=32)
    full, fin = lm(ids)
    a, s = lm(ids[:, :3])
    b, s2 = lm(ids[:, 3:], s)
    np.testing.assert_allclose(np.concatenate([a, b], axis=1), full, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(s2[1].ssm, fin[1].ssm, rtol=1e-12, atol=1e-13)
    _, _, _, records = lm.forward(ids, record=True)
    assert records[1].ssm.shape == (5, 2, 4, 2, 3)


def test_mamba2lm_refuses_lengths_and_reset_in_one_message():
    from hiddenstate import Mamba2LM

    lm = Mamba2LM(11, 16, 1, d_state=4, head_dim=8, rng=np.random.default_rng(0))
    ids = np.zeros((2, 4), dtype=np.int64)
    with pytest.raises(ValueError, match=r"must be None for a Mamba2LM .* got lengths\. "):
        lm.forward(ids, lengths=[4, 2])
    with pytest.raises(ValueError, match=r"got lengths and reset\. "):
        lm(ids, lengths=[4, 2], reset=np.zeros((2, 4), dtype=bool))
