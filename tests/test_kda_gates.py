"""KDA's new gates (issue 34): the safe gate ``lower_bound sigmoid(exp(A_log) x)`` and Bailing-hybrid's full-rank gates.

The reference re-implements the block in float64 torch from transformers' module code
(``Glm5NextTextForgetGate`` / ``BailingHybridForgetGate``: ``f_b_proj(f_a_proj(u))`` or
``f_proj(u)``, plus ``dt_bias``, then ``lower_bound * sigmoid(exp(A_log) * g)`` or ``-exp(A_log)
softplus(g)``; the conv, the L2 norms, the per-step delta rule with one decay per key channel,
the sigmoid-gated norm); autograd gives every gradient. Our layer (both forms of the rule) is
held to it at 1e-10 relative, and its gradients to central finite differences.
"""

import numpy as np
import pytest

from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.kinds.delta.block import DeltaState, KimiDeltaAttention
from tests._torch import require_torch

RTOL = 1e-10
#: (layout, lower_bound): the two new layouts with and without the safe gate, and the safe gate on Kimi's layout
CASES = [("glm5_next", -5.0), ("glm5_next", None), ("bailing_hybrid", -5.0), ("bailing_hybrid", None), ("kimi", -2.5)]


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def make(layout, lower_bound, *, chunk=4, seed=0, **kw):
    rng = np.random.default_rng(seed)
    layer = KimiDeltaAttention(6, num_heads=2, head_dim=3, layout=layout, lower_bound=lower_bound, chunk=chunk,
                               rng=rng, **kw)
    for k, v in layer.params.items():  # off the structured initial values
        if k.endswith("A_log"):
            v[...] = np.log(rng.uniform(0.2, 1.5, v.shape))  # sigmoid(exp(A_log) x) in its curved range
        else:
            v += 0.3 * rng.standard_normal(v.shape)
    return layer


def torch_kda(layout, lower_bound, eps, p, u, S0, conv0, H=2, D=3):
    """The block in float64 torch, from transformers' Glm5Next / BailingHybrid module code (not from ours)."""
    torch = require_torch()
    F = torch.nn.functional
    T, N, M = u.shape
    q, k, v = (u @ p[f"{n}_proj.weight"].T for n in "qkv")
    if layout == "bailing_hybrid":
        f, z = u @ p["forget_gate.f_proj.weight"].T, u @ p["g_proj.weight"].T
    else:
        f = u @ p["forget_gate.f_a_proj.weight"].T @ p["forget_gate.f_b_proj.weight"].T
        z = u @ p["g_a_proj.weight"].T @ p["g_b_proj.weight"].T
    x = f.view(T, N, H, D) + p["forget_gate.dt_bias"].view(H, D)
    rate = p["forget_gate.A_log"].exp().view(H, 1)
    g = lower_bound * torch.sigmoid(rate * x) if lower_bound is not None else -rate * F.softplus(x)
    beta = torch.sigmoid(u @ p["b_proj.weight"].T)  # (T, N, H)
    xc = torch.cat([conv0, torch.cat([q, k, v], dim=-1).permute(1, 2, 0)], dim=-1)  # (N, 3 H D, K - 1 + T)
    c = F.silu(F.conv1d(xc, p["conv1d.weight"], groups=xc.shape[1])).permute(2, 0, 1)
    q, k, v = (t.reshape(T, N, H, D) for t in torch.split(c, [H * D] * 3, dim=-1))
    l2 = lambda t: t / torch.sqrt((t * t).sum(-1, keepdim=True) + 1e-6)
    q, k = l2(q) / D ** 0.5, l2(k)
    S, outs = S0, []
    for t in range(T):  # recurrent_kimi_delta_attention
        S = S * g[t].exp()[..., None]
        delta = (v[t] - (S * k[t][..., None]).sum(-2)) * beta[t][..., None]
        S = S + k[t][..., None] * delta[..., None, :]
        outs.append((S * q[t][..., None]).sum(-2))
    o = torch.stack(outs)
    y = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + eps) * p["o_norm.weight"] * torch.sigmoid(z.view(T, N, H, D))
    return y.reshape(T, N, H * D) @ p["o_proj.weight"].T, S, xc[..., -(xc.shape[-1] - T):], g


@pytest.mark.parametrize("chunk", [None, 4])
@pytest.mark.parametrize("layout, lower_bound", CASES)
def test_outputs_states_and_every_gradient_equal_a_float64_torch_reference(layout, lower_bound, chunk):
    torch = require_torch()
    rng = np.random.default_rng(1)
    layer = make(layout, lower_bound, chunk=chunk)
    T, N = 11, 2
    u = rng.standard_normal((T, N, 6))
    st0 = layer.initial_state(N)
    st0 = DeltaState(rng.standard_normal(st0.recurrent.shape), rng.standard_normal(st0.conv.shape))
    d_out, d_S, d_conv = (rng.standard_normal(a.shape) for a in (u, st0.recurrent, st0.conv))
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in layer.params.items()}
    tu, tS, tc = (torch.tensor(a, requires_grad=True) for a in (u, st0.recurrent, st0.conv))
    out_ref, S_ref, conv_ref, g_ref = torch_kda(layout, lower_bound, layer.eps, tp, tu, tS, tc)
    ((out_ref * torch.tensor(d_out)).sum() + (S_ref * torch.tensor(d_S)).sum()
     + (conv_ref * torch.tensor(d_conv)).sum()).backward()
    out, st, cache, rec = layer.forward(u, st0, record=True)
    assert rel(out, out_ref.detach().numpy()) <= RTOL
    assert rel(st.recurrent, S_ref.detach().numpy()) <= RTOL and rel(st.conv, conv_ref.detach().numpy()) <= RTOL
    assert rel(rec.decay, g_ref.detach().exp().numpy()) <= RTOL
    if lower_bound is not None:  # the safe gate: every log decay in (lower_bound, 0), and the range is used
        lg = np.log(rec.decay)
        assert lower_bound < lg.min() and lg.max() < 0 and lg.max() - lg.min() > 0.4 * -lower_bound
    grads, d_u, d_st = layer.backward(cache, d_out, (d_S, d_conv))
    assert set(grads) == set(layer.params) == set(tp)
    for k, g in grads.items():
        assert g.shape == layer.params[k].shape and rel(g, tp[k].grad.numpy()) <= RTOL, k
    assert rel(d_u, tu.grad.numpy()) <= RTOL
    assert rel(d_st.recurrent, tS.grad.numpy()) <= RTOL and rel(d_st.conv, tc.grad.numpy()) <= RTOL


@pytest.mark.parametrize("layout, lower_bound", CASES)
def test_gradients_equal_finite_differences(layout, lower_bound):
    rng = np.random.default_rng(2)
    layer = make(layout, lower_bound, chunk=3)
    u = rng.standard_normal((5, 2, 6))
    st0 = layer.initial_state(2)
    st0 = DeltaState(rng.standard_normal(st0.recurrent.shape), rng.standard_normal(st0.conv.shape))
    d_out, d_S = rng.standard_normal(u.shape), rng.standard_normal(st0.recurrent.shape)

    def loss():
        out, st, _ = layer.forward(u, st0)
        return float((out * d_out).sum() + (st.recurrent * d_S).sum())

    _, _, cache = layer.forward(u, st0)
    grads, d_u, d_st = layer.backward(cache, d_out, (d_S, None))
    arrays = dict(layer.params, u=u, S0=st0.recurrent, conv0=st0.conv)
    check_grads(loss, arrays, dict(grads, u=d_u, S0=d_st.recurrent, conv0=d_st.conv), rtol=1e-6, max_entries=None)


@pytest.mark.parametrize("layout, lower_bound", CASES[::2])
def test_forms_padding_and_carry_agree_with_the_safe_gate(layout, lower_bound):
    rng = np.random.default_rng(4)
    u = rng.standard_normal((13, 3, 6))
    base = make(layout, lower_bound, chunk=None).forward(u)
    for chunk in (1, 5, 64):
        out, st, _ = make(layout, lower_bound, chunk=chunk).forward(u)
        assert rel(out, base[0]) <= 1e-12 and rel(st.recurrent, base[1].recurrent) <= 1e-12
    layer = make(layout, lower_bound)
    a, st_a, _ = layer.forward(u[:6])
    b, st_b, _ = layer.forward(u[6:], st_a)
    assert rel(np.concatenate([a, b]), base[0]) <= 1e-12 and rel(st_b.recurrent, base[1].recurrent) <= 1e-12
    out, st, _ = layer.forward(u, lengths=[13, 4, 0])  # a padded step neither decays nor writes
    row, st_row, _ = layer.forward(u[:4, 1:2])
    assert rel(out[:4, 1], row[:, 0]) <= 1e-13 and np.all(out[4:, 1] == 0)
    assert rel(st.recurrent[1], st_row.recurrent[0]) <= 1e-13 and np.all(st.recurrent[2] == 0)


def test_the_layouts_name_and_shape_the_parameters_as_transformers_does():
    shapes = {lay: {k: v.shape for k, v in make(lay, None).params.items()} for lay in ("kimi", "glm5_next",
                                                                                       "bailing_hybrid")}
    assert shapes["kimi"]["forget_gate.A_log"] == (1, 1, 2, 1) and shapes["glm5_next"]["forget_gate.A_log"] == (2,)
    assert set(shapes["kimi"]) == set(shapes["glm5_next"])
    assert shapes["bailing_hybrid"]["forget_gate.f_proj.weight"] == shapes["bailing_hybrid"]["g_proj.weight"] == (6, 6)
    assert set(shapes["glm5_next"]) - set(shapes["bailing_hybrid"]) == {
        "forget_gate.f_a_proj.weight", "forget_gate.f_b_proj.weight", "g_a_proj.weight", "g_b_proj.weight"}
    assert repr(make("bailing_hybrid", -5)) == ("KimiDeltaAttention(6, num_heads=2, head_dim=3, d_conv=4, "
                                                "layout='bailing_hybrid', lower_bound=-5.0)")


@pytest.mark.parametrize("bound, error, message", [
    (0.0, ValueError, r"lower_bound must be .*< 0.*; got 0.0"), (2, ValueError, r"lower_bound must be .*; got 2"),
    (float("nan"), ValueError, "lower_bound must be"), (True, TypeError, "lower_bound must be"),
    ("-5", TypeError, "lower_bound must be")])
def test_a_lower_bound_that_is_not_a_finite_negative_number_is_refused(bound, error, message):
    with pytest.raises(error, match=message):
        KimiDeltaAttention(6, num_heads=2, head_dim=3, lower_bound=bound)
    with pytest.raises(ValueError, match="layout must be one of kimi, glm5_next, bailing_hybrid; got 'qwen3_next'"):
        KimiDeltaAttention(6, layout="qwen3_next")
