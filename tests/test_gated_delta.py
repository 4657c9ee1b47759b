"""GatedDeltaNet and KimiDeltaAttention: a float64 torch-autograd reference of the block, finite differences, carry.

The reference re-implements the block's equations in float64 torch from transformers' module
code (the fused ``in_proj_qkvz`` split per key head as ``fix_query_key_value_ordering`` does it,
Qwen3.5's ``in_proj_qkv`` split into key, key and value widths, Qwen4-Exp's sigmoid output gate,
the conv, the L2 norm, the decay, the per-step delta rule, the gated norm); autograd gives every
gradient. Our layers (both forms of the rule) are held to it at 1e-10 relative.
"""

import numpy as np
import pytest

from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.kinds.delta.block import DeltaState, GatedDeltaNet, KimiDeltaAttention
from tests._torch import require_torch

RTOL = 1e-10


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def make(kind, *, chunk=4, rng=None, **kw):
    rng = np.random.default_rng(0) if rng is None else rng
    if kind == "kimi":
        layer = KimiDeltaAttention(6, num_heads=2, head_dim=3, chunk=chunk, rng=rng, **kw)
    else:  # "qwen3_5-sigmoid": Qwen3.5's split projections with Qwen4-Exp's sigmoid output gate
        layout, _, gate = kind.partition("-")
        layer = GatedDeltaNet(6, num_k_heads=2, num_v_heads=4, head_k_dim=3, head_v_dim=2, layout=layout, chunk=chunk,
                              allow_neg_eigval=kind == "olmo_hybrid", gate=gate or "silu", rng=rng, **kw)
    for k, v in layer.params.items():  # off the structured initial values
        if not k.endswith("A_log"):
            v += 0.3 * rng.standard_normal(v.shape)
    return layer


def torch_block(layer, p, u, S0, conv0):
    """The block in float64 torch, from transformers' module code (not from ours)."""
    torch = require_torch()
    F = torch.nn.functional
    s = layer.spec
    T, N, M = u.shape
    Hk, Hv, Dk, Dv, K = s.Hk, s.Hv, s.Dk, s.Dv, s.K
    r = Hv // Hk
    if s.layout == "qwen3_next":
        qkvz = (u @ p["in_proj_qkvz.weight"].T).view(T, N, Hk, 2 * Dk + 2 * r * Dv)
        q, k, v, z = torch.split(qkvz, [Dk, Dk, r * Dv, r * Dv], dim=3)
        ba = (u @ p["in_proj_ba.weight"].T).view(T, N, Hk, 2 * r)
        b, a = torch.split(ba, [r, r], dim=3)
        q, k, v, z = q.reshape(T, N, -1), k.reshape(T, N, -1), v.reshape(T, N, -1), z.reshape(T, N, Hv, Dv)
        b, a = b.reshape(T, N, Hv), a.reshape(T, N, Hv)
        names = ("dt_bias", "A_log", "norm.weight", "out_proj.weight")
    elif s.layout == "qwen3_5":  # Qwen3_5GatedDeltaNet: in_proj_qkv split [key_dim, key_dim, value_dim]
        q, k, v = torch.split(u @ p["in_proj_qkv.weight"].T, [Hk * Dk, Hk * Dk, Hv * Dv], dim=-1)
        z = (u @ p["in_proj_z.weight"].T).view(T, N, Hv, Dv)
        b, a = u @ p["in_proj_b.weight"].T, u @ p["in_proj_a.weight"].T
        names = ("dt_bias", "A_log", "norm.weight", "out_proj.weight")
    else:
        q, k, v = (u @ p[f"{n}_proj.weight"].T for n in "qkv")
        b = u @ p["b_proj.weight"].T
        if s.layout == "olmo_hybrid":
            z, a = (u @ p["g_proj.weight"].T).view(T, N, Hv, Dv), u @ p["a_proj.weight"].T
            names = ("dt_bias", "A_log", "o_norm.weight", "o_proj.weight")
        else:
            z = (u @ p["g_a_proj.weight"].T @ p["g_b_proj.weight"].T).view(T, N, Hv, Dv)
            a = u @ p["forget_gate.f_a_proj.weight"].T @ p["forget_gate.f_b_proj.weight"].T
            names = ("forget_gate.dt_bias", "forget_gate.A_log", "o_norm.weight", "o_proj.weight")
    x = torch.cat([q, k, v], dim=-1).permute(1, 2, 0)  # (N, Dc, T)
    x = torch.cat([conv0, x], dim=-1)
    c = F.silu(F.conv1d(x, p["conv1d.weight"], groups=x.shape[1]))  # (N, Dc, T)
    c = c.permute(2, 0, 1)
    q, k, v = torch.split(c, [Hk * Dk, Hk * Dk, Hv * Dv], dim=-1)
    l2 = lambda t: t / torch.sqrt((t * t).sum(-1, keepdim=True) + 1e-6)
    q = l2(q.reshape(T, N, Hk, Dk)).repeat_interleave(r, dim=2) / Dk ** 0.5
    k = l2(k.reshape(T, N, Hk, Dk)).repeat_interleave(r, dim=2)
    v = v.reshape(T, N, Hv, Dv)
    beta = torch.sigmoid(b) * (2.0 if s.allow_neg_eigval else 1.0)
    dt_bias, A_log, norm_w, out_w = (p[n] for n in names)
    if s.layout == "kimi":
        g = -A_log.view(Hv, 1).exp() * torch.logaddexp(torch.zeros(()), a.view(T, N, Hv, Dk) + dt_bias.view(Hv, Dk))
    else:
        g = -A_log.exp() * torch.logaddexp(torch.zeros(()), a + dt_bias)
    S, outs = S0, []
    for t in range(T):
        dec = g[t].exp()
        P = (dec[..., None] if s.layout == "kimi" else dec[..., None, None]) * S
        uu = beta[t][..., None] * (v[t] - (P * k[t][..., :, None]).sum(-2))
        S = P + k[t][..., :, None] * uu[..., None, :]
        outs.append((S * q[t][..., :, None]).sum(-2))
    o = torch.stack(outs)  # (T, N, Hv, Dv)
    y = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + s.eps) * norm_w
    y = y * (torch.sigmoid(z) if s.layout == "kimi" or s.gate == "sigmoid" else F.silu(z))
    return y.reshape(T, N, Hv * Dv) @ out_w.T, S, x[..., -(K - 1):]


KINDS = ["qwen3_next", "olmo_hybrid", "qwen3_5", "qwen3_5-sigmoid", "kimi"]


@pytest.mark.parametrize("chunk", [None, 4])
@pytest.mark.parametrize("kind", KINDS)
def test_outputs_states_and_every_gradient_equal_a_float64_torch_reference(kind, chunk):
    torch = require_torch()
    rng = np.random.default_rng(1)
    layer = make(kind, chunk=chunk)
    T, N = 11, 2
    u = rng.standard_normal((T, N, 6))
    st0 = DeltaState(rng.standard_normal(layer.initial_state(N).recurrent.shape),
                     rng.standard_normal(layer.initial_state(N).conv.shape))
    d_out = rng.standard_normal((T, N, 6))
    d_S, d_conv = rng.standard_normal(st0.recurrent.shape), rng.standard_normal(st0.conv.shape)
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in layer.params.items()}
    tu, tS, tc = (torch.tensor(a, requires_grad=True) for a in (u, st0.recurrent, st0.conv))
    out_ref, S_ref, conv_ref = torch_block(layer, tp, tu, tS, tc)
    loss = (out_ref * torch.tensor(d_out)).sum() + (S_ref * torch.tensor(d_S)).sum() + (
        conv_ref * torch.tensor(d_conv)).sum()
    loss.backward()
    out, st, cache = layer.forward(u, st0)
    assert rel(out, out_ref.detach().numpy()) <= RTOL
    assert rel(st.recurrent, S_ref.detach().numpy()) <= RTOL
    assert rel(st.conv, conv_ref.detach().numpy()) <= RTOL
    grads, d_u, d_st = layer.backward(cache, d_out, (d_S, d_conv))
    assert set(grads) == set(layer.params)
    for k, g in grads.items():
        assert g.shape == layer.params[k].shape and rel(g, tp[k].grad.numpy()) <= RTOL, k
    assert rel(d_u, tu.grad.numpy()) <= RTOL
    assert rel(d_st.recurrent, tS.grad.numpy()) <= RTOL
    assert rel(d_st.conv, tc.grad.numpy()) <= RTOL


@pytest.mark.parametrize("kind", KINDS)
def test_gradients_equal_finite_differences(kind):
    rng = np.random.default_rng(2)
    layer = make(kind, chunk=3)
    u = rng.standard_normal((5, 2, 6))
    st0 = layer.initial_state(2)
    st0 = DeltaState(rng.standard_normal(st0.recurrent.shape), rng.standard_normal(st0.conv.shape))
    d_out = rng.standard_normal(u.shape)
    d_S = rng.standard_normal(st0.recurrent.shape)

    def loss():
        out, st, _ = layer.forward(u, st0)
        return float((out * d_out).sum() + (st.recurrent * d_S).sum())

    _, _, cache = layer.forward(u, st0)
    grads, d_u, d_st = layer.backward(cache, d_out, (d_S, None))
    arrays = dict(layer.params, u=u, S0=st0.recurrent, conv0=st0.conv)
    check_grads(loss, arrays, dict(grads, u=d_u, S0=d_st.recurrent, conv0=d_st.conv), rtol=1e-6, max_entries=12)


@pytest.mark.parametrize("kind", KINDS)
def test_two_calls_carrying_the_state_equal_one_long_call(kind):
    rng = np.random.default_rng(3)
    layer = make(kind, chunk=4)
    u = rng.standard_normal((2, 13, 6))
    layer.batch_first = True
    out, st, _ = layer.forward(u)
    a, st_a, _ = layer.forward(u[:, :6])
    b, st_b, _ = layer.forward(u[:, 6:], st_a)
    assert rel(np.concatenate([a, b], axis=1), out) <= 1e-13
    assert rel(st_b.recurrent, st.recurrent) <= 1e-13 and rel(st_b.conv, st.conv) <= 1e-13
    for t in range(13):  # one token at a time (decoding)
        o_t, st_a, _ = layer.forward(u[:, t:t + 1], None if t == 0 else st_a)
        assert rel(o_t[:, 0], out[:, t]) <= 1e-12
    assert rel(st_a.recurrent, st.recurrent) <= 1e-12


@pytest.mark.parametrize("kind", KINDS)
def test_sequential_and_chunked_forms_agree_and_the_record_holds_every_state(kind):
    rng = np.random.default_rng(4)
    u = rng.standard_normal((20, 3, 6))
    d_out = rng.standard_normal(u.shape)
    results = []
    for chunk in (None, 1, 5, 64):
        layer = make(kind, chunk=chunk)
        out, st, cache, rec = layer.forward(u, record=True)
        grads, d_u, _ = layer.backward(cache, d_out)
        results.append((out, st.recurrent, rec.recurrent, grads, d_u))
        assert np.array_equal(rec.recurrent[-1], st.recurrent) or rel(rec.recurrent[-1], st.recurrent) <= 1e-13
        assert rel(rec.conv[-1], st.conv) == 0.0
        s = layer.spec
        assert rec.decay.shape == ((20, 3, s.Hv, s.Dk) if kind == "kimi" else (20, 3, s.Hv))
        assert rec.q.shape == rec.k.shape == (20, 3, s.Hv, s.Dk) and rec.gate.shape == rec.o.shape
        assert np.all((rec.decay > 0) & (rec.decay <= 1))
        np.testing.assert_allclose(np.linalg.norm(rec.k, axis=-1), 1.0, rtol=1e-4)
        # the record's states reproduce the outputs of the rule: o_t = S_t^T q_t
        assert rel(np.einsum("tnhkv,tnhk->tnhv", rec.recurrent, rec.q), rec.o) <= 1e-12
    base = results[0]
    for other in results[1:]:
        for a, b in zip(other[:3], base[:3]):
            assert rel(a, b) <= 1e-12
        for k in base[3]:
            assert rel(other[3][k], base[3][k]) <= 1e-11, k
        assert rel(other[4], base[4]) <= 1e-11


@pytest.mark.parametrize("chunk", [None, 4])
@pytest.mark.parametrize("kind", KINDS)
def test_a_right_padded_batch_equals_each_row_run_alone(kind, chunk):
    rng = np.random.default_rng(7)
    layer = make(kind, chunk=chunk)
    T, lengths = 9, np.array([9, 5, 0, 1])
    N = len(lengths)
    u = rng.standard_normal((T, N, 6))
    st0 = layer.initial_state(N)
    st0 = DeltaState(rng.standard_normal(st0.recurrent.shape), rng.standard_normal(st0.conv.shape))
    d_out = rng.standard_normal(u.shape)
    d_S, d_conv = rng.standard_normal(st0.recurrent.shape), rng.standard_normal(st0.conv.shape)
    out, st, cache, rec = layer.forward(u, st0, lengths=lengths, record=True)
    grads, d_u, d_st = layer.backward(cache, d_out, (d_S, d_conv))
    total = {k: np.zeros_like(v) for k, v in grads.items()}
    for n, L in enumerate(lengths):
        row = DeltaState(st0.recurrent[n:n + 1], st0.conv[n:n + 1])
        o, s, c = layer.forward(u[:L, n:n + 1], row)
        assert (L == 0 or rel(out[:L, n], o[:, 0]) <= 1e-13) and np.all(out[L:, n] == 0)
        assert rel(st.recurrent[n], s.recurrent[0]) <= 1e-13 and rel(st.conv[n], s.conv[0]) <= 1e-13
        assert rel(rec.recurrent[-1, n], s.recurrent[0]) <= 1e-13 and rel(rec.conv[-1, n], s.conv[0]) <= 1e-13
        g, du, ds = layer.backward(c, d_out[:L, n:n + 1], (d_S[n:n + 1], d_conv[n:n + 1]))
        assert (L == 0 or rel(d_u[:L, n], du[:, 0]) <= 1e-12) and np.all(d_u[L:, n] == 0)
        assert rel(d_st.recurrent[n], ds.recurrent[0]) <= 1e-12 and rel(d_st.conv[n], ds.conv[0]) <= 1e-12
        for k in total:
            total[k] += g[k]
    for k in grads:
        assert rel(grads[k], total[k]) <= 1e-12, k


def test_record_refuses_a_size_that_cannot_fit_and_says_the_bytes(monkeypatch):
    import hiddenstate.core.resources as resources

    layer = make("qwen3_next")
    monkeypatch.setattr(resources, "memory_limit", lambda: 10_000)
    u = np.zeros((40, 2, 6))
    with pytest.raises(ValueError, match=r"record=True over T=40, N=2.*\(15360 bytes\).*this machine allows"):
        layer.forward(u, record=True)
    layer.forward(u)  # 40 * 2 * Hv=4 * Dk=3 * Dv=2 * 8 bytes above; the chunked form keeps no per-step state


def test_float32_layer_runs_in_float32():
    rng = np.random.default_rng(5)
    for kind in KINDS:
        layer = make(kind, dtype=np.float32)
        u = rng.standard_normal((9, 2, 6)).astype(np.float32)
        out, st, cache = layer.forward(u)
        assert out.dtype == st.recurrent.dtype == st.conv.dtype == np.float32
        grads, d_u, _ = layer.backward(cache, np.ones_like(out))
        assert d_u.dtype == np.float32 and all(g.dtype == np.float32 for g in grads.values())
        ref = make(kind)
        ref.load_state_dict(layer.state_dict())
        assert rel(out, ref.forward(u.astype(np.float64))[0]) <= 1e-4


def test_bad_input_is_refused_with_the_rule_and_the_value():
    layer = make("kimi")
    with pytest.raises(ValueError, match=r"u must have shape \(T, N, M\) with M=6; got \(3, 2, 5\)"):
        layer.forward(np.zeros((3, 2, 5)))
    with pytest.raises(ValueError, match=r"state.recurrent must have shape \(N=2, Hv=2, Dk=3, Dv=3\); got \(2, 2, 3\)"):
        layer.forward(np.zeros((3, 2, 6)), (np.zeros((2, 2, 3)), np.zeros((2, 18, 3))))
    with pytest.raises(TypeError, match="state must be a pair"):
        layer.forward(np.zeros((3, 2, 6)), np.zeros((2, 2, 3, 3)))
    with pytest.raises(ValueError, match="num_v_heads must be a multiple of num_k_heads=2; got 3"):
        GatedDeltaNet(6, num_k_heads=2, num_v_heads=3)
    with pytest.raises(ValueError, match="layout"):
        GatedDeltaNet(6, layout="kimi")
    _, _, cache = make("qwen3_next").forward(np.zeros((3, 2, 6)))
    with pytest.raises(ValueError, match="cache must come from this layer"):
        layer.backward(cache, None)
    with pytest.raises(ValueError, match="reset must be None for KimiDeltaAttention"):
        layer.forward(np.zeros((3, 2, 6)), reset=np.zeros((3, 2), dtype=bool))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=3\]; got values in \[2, 4\]"):
        layer.forward(np.zeros((3, 2, 6)), lengths=[4, 2])


def test_state_dict_round_trip_and_zero_initial_state():
    layer = make("olmo_hybrid")
    other = GatedDeltaNet(6, num_k_heads=2, num_v_heads=4, head_k_dim=3, head_v_dim=2, layout="olmo_hybrid",
                          allow_neg_eigval=True, chunk=4, rng=np.random.default_rng(9))
    other.load_state_dict(layer.state_dict())
    u = np.random.default_rng(6).standard_normal((7, 2, 6))
    a, sa, _ = layer.forward(u)
    b, sb, _ = other.forward(u, layer.initial_state(2))
    assert np.array_equal(a, b) and np.array_equal(sa.recurrent, sb.recurrent)
