"""ZAYA's CCA projection (issue 34): stacked causal convolutions and a delayed value, exact backward, the model's module.

The oracle of the gradients is torch autograd on an independent float64 reimplementation (torch's
own ``conv1d`` with ``groups``, written from the equations); the oracle of the forward pass and of
the state is transformers' ``ZayaCCAProjection`` itself in a tiny random ZAYA model (its hooked
input and outputs, and its cache's conv and recurrent states after a prefill and after one token
a call).
"""

from __future__ import annotations

import numpy as np
import pytest

from hiddenstate.kinds.shortconv.cca import CCAProjection

torch = pytest.importorskip("torch")
F = torch.nn.functional

N, T, M, HQ, HK, D = 2, 7, 6, 4, 2, 4


def block(seed=0, t0=2, t1=3, bias=True):
    blk = CCAProjection(M, HQ, HK, D, cca_time0=t0, cca_time1=t1, bias=bias)
    rng = np.random.default_rng(seed)
    blk.load_state_dict({k: rng.normal(size=s) for k, (s, _) in blk.shapes().items()})
    return blk


def reference(p, u, window, v0):
    """[query | key | value] and the final state from the equations, in torch float64."""
    lin = lambda name, x: x @ p[f"{name}.weight"].T + p.get(f"{name}.bias", 0)
    q, k = lin("q_proj", u), lin("k_proj", u)
    z = torch.cat([q, k], -1)
    zp = torch.cat([window, z.transpose(1, 2)], -1)  # (N, C, W+T)
    C = z.shape[-1]
    a = F.conv1d(zp, p["conv_qk_depthwise.weight"], p["conv_qk_depthwise.bias"], groups=C)
    c = F.conv1d(a, p["conv_qk_grouped.weight"], p["conv_qk_grouped.bias"], groups=HQ + HK).transpose(1, 2)
    Tt = u.shape[1]
    kq = k.reshape(-1, Tt, HK, 1, D).expand(-1, Tt, HK, HQ // HK, D).reshape(-1, Tt, HQ, D)
    rq = (q.reshape(-1, Tt, HQ, D) + kq) / 2
    rk = rq.reshape(-1, Tt, HK, HQ // HK, D).mean(3)
    vd = lin("v_proj_delayed", u)
    out = torch.cat([c[..., :HQ * D] + rq.flatten(2), c[..., HQ * D:] + rk.flatten(2), lin("v_proj_current", u),
                     torch.cat([v0[:, None], vd[:, :-1]], 1)], -1)
    return out, zp[..., Tt:], vd[:, -1]


@pytest.mark.parametrize("t0, t1, bias", [(2, 3, True), (3, 2, False), (1, 1, True), (2, 2, True)])
def test_forward_and_every_gradient_equal_autograd_on_a_float64_reference(t0, t1, bias):
    blk = block(t0=t0, t1=t1, bias=bias)
    rng = np.random.default_rng(1)
    W, C, V = t0 + t1 - 2, (HQ + HK) * D, HK * D // 2
    u, w0, v0 = rng.normal(size=(N, T, M)), rng.normal(size=(N, C, W)), rng.normal(size=(N, V))
    g_out, g_w, g_v = rng.normal(size=(N, T, C + 2 * V)), rng.normal(size=(N, C, W)), rng.normal(size=(N, V))
    out, (wn, vn), cache = blk.forward(u, (w0, v0))
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in blk.params.items()}
    leaves = [torch.tensor(a, requires_grad=True) for a in (u, w0, v0)]
    r_out, r_w, r_v = reference(tp, *leaves)
    np.testing.assert_allclose(out, r_out.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(wn, r_w.detach().numpy(), rtol=1e-13, atol=1e-13)  # matmuls in another order
    np.testing.assert_allclose(vn, r_v.detach().numpy(), rtol=1e-13, atol=1e-13)
    ((r_out * torch.from_numpy(g_out)).sum() + (r_w * torch.from_numpy(g_w)).sum()
     + (r_v * torch.from_numpy(g_v)).sum()).backward()
    grads, du, (dw0, dv0) = blk.backward(cache, g_out, (g_w, g_v))
    assert set(grads) == set(tp)
    for name, t in tp.items():
        np.testing.assert_allclose(grads[name], t.grad.numpy(), rtol=1e-11, atol=1e-11, err_msg=name)
    for ours, leaf in zip((du, dw0, dv0), leaves):
        np.testing.assert_allclose(ours, leaf.grad.numpy(), rtol=1e-11, atol=1e-11)


def test_the_default_state_is_v_proj_delayed_of_zero_and_its_gradient_reaches_the_bias():
    blk = block()
    rng = np.random.default_rng(2)
    u, g = rng.normal(size=(N, T, M)), rng.normal(size=(N, T, (HQ + 2 * HK) * D))
    out, _, cache = blk.forward(u)
    np.testing.assert_array_equal(out[:, 0, -HK * D // 2:], np.broadcast_to(blk.params["v_proj_delayed.bias"],
                                                                           (N, HK * D // 2)))
    grads, _, (_, dv0) = blk.backward(cache, g)
    explicit = blk.backward(blk.forward(u, (np.zeros((N, (HQ + HK) * D, 3)),
                                            np.tile(blk.params["v_proj_delayed.bias"], (N, 1))))[2], g)[0]
    np.testing.assert_allclose(grads["v_proj_delayed.bias"], explicit["v_proj_delayed.bias"] + dv0.sum(0), rtol=1e-13)


def test_two_chunks_carry_what_one_call_gives_and_the_record_is_every_state():
    blk = block()
    u = np.random.default_rng(3).normal(size=(N, T, M))
    out, (wn, vn), _, rec = blk.forward(u, record=True)
    o1, s1, _ = blk.forward(u[:, :4])
    o2, (w2, v2), _ = blk.forward(u[:, 4:], s1)
    np.testing.assert_allclose(np.concatenate([o1, o2], 1), out, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(w2, wn)
    np.testing.assert_array_equal(v2, vn)
    np.testing.assert_array_equal(rec.conv[3], s1[0])
    np.testing.assert_array_equal(rec.v[3], s1[1])
    assert rec.conv.shape == (T, N, (HQ + HK) * D, 3) and rec.v.shape == (T, N, HK * D // 2)


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match=r"^num_key_value_heads must divide num_attention_heads=4; got 3\.$"):
        CCAProjection(M, 4, 3, D)
    with pytest.raises(ValueError, match=r"^head_dim must be even"):
        CCAProjection(M, 4, 2, 5)
    blk = block()
    with pytest.raises(TypeError, match=r"^state must be None or a pair \(window, v\); got ndarray"):
        blk.forward(np.zeros((N, T, M)), np.zeros(3))
    with pytest.raises(ValueError, match=r"^v must have shape \(N=2, Ck/2=4\)"):
        blk.forward(np.zeros((N, T, M)), (np.zeros((N, 24, 3)), np.zeros((N, 5))))
    with pytest.raises(ValueError, match=r"^u must have shape \(N, T, M=6\)"):
        blk.forward(np.zeros((N, T, 5)))
    with pytest.raises(TypeError, match=r"^cache must be what CCAProjection.forward returned; got NoneType"):
        blk.backward(None, np.zeros(1))


def _of(module, config):
    blk = CCAProjection(config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim,
                        cca_time0=config.cca_time0, cca_time1=config.cca_time1, bias=config.attention_bias)
    blk.load_state_dict({k: v.detach().double().numpy() for k, v in module.state_dict().items()})
    return blk


def test_the_models_own_module_and_its_cache():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.ZayaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, head_dim=8, moe_intermediate_size=16, num_experts=2,
                                  router_hidden_size=8, cca_time0=2, cca_time1=3, attention_bias=True)
    torch.manual_seed(0)
    model = transformers.ZayaForCausalLM(cfg).eval()
    module = model.model.layers[1].self_attn.qkv_proj
    calls = []
    h = module.register_forward_hook(lambda mod, a, kw, out: calls.append(
        (a[0].double().numpy(), torch.cat([o.flatten(2) for o in out], -1).double().numpy())), with_kwargs=True)
    ids = torch.from_numpy(np.random.default_rng(4).integers(3, 45, (2, 12)))
    with torch.no_grad():
        cache = model(ids[:, :7], use_cache=True).cache
        for t in range(7, 12):
            cache = model(ids[:, t:t + 1], cache=cache, use_cache=True).cache
    h.remove()
    assert [u.shape[1] for u, _ in calls] == [7, 1, 1, 1, 1, 1]
    blk, state = _of(module, cfg), None
    for u, theirs in calls:
        ours, state, _ = blk.forward(u, state)
        assert np.abs(ours - theirs).max() <= 1e-5 * np.abs(theirs).max()
    conv = cache.get_conv_state(1, state_idx=0).double().numpy()
    held_v = cache.get_recurrent_state(1, state_idx=0).double().numpy()
    W = blk.window
    assert np.abs(state[0] - conv[..., -W:]).max() <= 1e-6 * np.abs(conv).max()
    assert np.abs(state[1] - held_v).max() <= 1e-6 * np.abs(held_v).max()
