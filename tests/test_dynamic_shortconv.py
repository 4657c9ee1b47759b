"""Inkling 2's dynamic short convolution (issue 34): the kernel, its exact backward, and the model's own module.

The oracle of the gradients is torch autograd on an independent float64 reimplementation (a loop
over the lags with ``torch.roll``-free shifts, written from the equations); the oracle of the
forward pass and of the window is transformers' ``Inkling2DynamicShortConvolution`` itself, in
the tiny Inkling 2 model's full-attention layer (its hooked inputs and output, its cache after a
prefill and after one token a call).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from hiddenstate.kinds.shortconv.dynamic import DynamicShortConv

torch = pytest.importorskip("torch")

N, T, C, M, H, K = 2, 9, 8, 6, 2, 4


def block(seed=0, K=K):
    rng = np.random.default_rng(seed)
    blk = DynamicShortConv(C, M, H, kernel_size=K, rng=rng)
    blk.load_state_dict({"static_weight": rng.normal(size=(K, C)), "weight_proj.weight": rng.normal(size=(H * K, M))})
    return blk


def reference(static, proj, x, d, window, scale):
    """y and the final window from the equations, in torch float64 (autograd through it)."""
    Kk = static.shape[0]
    xp = torch.cat([window.transpose(1, 2), x], dim=1)  # (N, K-1+T, C)
    Tt = x.shape[1]
    P = (d @ proj.T).reshape(x.shape[0], Tt, H, Kk)
    y = x.clone()
    for j in range(Kk):
        lagged = xp[:, Kk - 1 - j:Kk - 1 - j + Tt]  # x_{t-j}
        tap = static[j].reshape(1, 1, C) + P[..., j].repeat_interleave(C // H, dim=-1)
        y = y + tap * lagged
    return scale * y, xp[:, Tt:].transpose(1, 2)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_forward_and_every_gradient_equal_autograd_on_a_float64_reference(k):
    blk = block(K=k)
    rng = np.random.default_rng(1)
    x, d, w0 = rng.normal(size=(N, T, C)), rng.normal(size=(N, T, M)), rng.normal(size=(N, C, k - 1))
    gy, gw = rng.normal(size=(N, T, C)), rng.normal(size=(N, C, k - 1))
    y, wn, cache = blk.forward(x, d, w0)
    leaves = [torch.tensor(a, requires_grad=True) for a in (blk.params["static_weight"],
                                                            blk.params["weight_proj.weight"], x, d, w0)]
    ry, rw = reference(*leaves, blk.scale)
    np.testing.assert_allclose(y, ry.detach().numpy(), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(wn, rw.detach().numpy(), rtol=0, atol=0)
    ((ry * torch.from_numpy(gy)).sum() + (rw * torch.from_numpy(gw)).sum()).backward()
    grads, dx, dd, dw0 = blk.backward(cache, gy, gw)
    for ours, leaf in zip([grads["static_weight"], grads["weight_proj.weight"], dx, dd, dw0], leaves):
        np.testing.assert_allclose(ours, leaf.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert blk.scale == 1 / math.sqrt(2 * k + 1)


def test_two_chunks_carry_what_one_call_gives_and_the_record_is_every_window():
    blk = block()
    rng = np.random.default_rng(2)
    x, d = rng.normal(size=(N, T, C)), rng.normal(size=(N, T, M))
    y, wn, _, rec = blk.forward(x, d, record=True)
    y1, w1, _ = blk.forward(x[:, :5], d[:, :5])
    y2, w2, _ = blk.forward(x[:, 5:], d[:, 5:], w1)
    np.testing.assert_allclose(np.concatenate([y1, y2], 1), y, rtol=1e-14, atol=1e-14)
    np.testing.assert_array_equal(w2, wn)
    assert rec.conv.shape == (T, N, C, K - 1) and rec.taps.shape == (T, N, C, K)
    np.testing.assert_array_equal(rec.conv[-1], wn)
    np.testing.assert_array_equal(rec.conv[4], w1)  # the window after step 4 is what the first chunk ends with
    np.testing.assert_array_equal(rec.conv[6, :, :, -1], x[:, 6])  # the newest slot is the step's input


def test_bad_arguments_are_refused_by_name():
    blk = block()
    x, d = np.zeros((N, T, C)), np.zeros((N, T, M))
    with pytest.raises(ValueError, match=r"^num_heads must divide hidden_size=8; got 3\.$"):
        DynamicShortConv(8, 6, 3)
    with pytest.raises(ValueError, match=r"^d must have shape \(N=2, T=9, M=6\); got \(2, 9, 5\)"):
        blk.forward(x, np.zeros((N, T, 5)))
    with pytest.raises(ValueError, match=r"^window must have shape \(N=2, C=8, K-1=3\)"):
        blk.forward(x, d, np.zeros((N, C, 4)))
    with pytest.raises(ValueError, match=r"^x must have shape \(N, T, C=8\)"):
        blk.forward(np.zeros((T, C)), d)
    with pytest.raises(ValueError, match=r"^state must hold exactly \['static_weight', 'weight_proj.weight'\]"):
        blk.load_state_dict({"static_weight": np.zeros((K, C))})
    with pytest.raises(ValueError, match=r"^static_weight must have shape \(K=4, C=8\)"):
        blk.load_state_dict({"static_weight": np.zeros((C, K)), "weight_proj.weight": np.zeros((H * K, M))})
    with pytest.raises(TypeError, match=r"^cache must be what DynamicShortConv.forward returned; got tuple"):
        blk.backward((1, 2), np.zeros((N, T, C)))


def _of(module):
    """Our block with the weights of a transformers Inkling2DynamicShortConvolution."""
    H_, K_ = module.num_heads, module.conv_kernel_size
    C_, M_ = module.static_weight.shape[1], module.weight_proj.in_features
    blk = DynamicShortConv(C_, M_, H_, kernel_size=K_)
    blk.load_state_dict({"static_weight": module.static_weight.detach().double().numpy(),
                         "weight_proj.weight": module.weight_proj.weight.detach().double().numpy()})
    return blk


def test_the_models_own_module_and_its_cache():
    transformers = pytest.importorskip("transformers")
    from hiddenstate.interop.families.inkling2_text import tiny_config

    torch.manual_seed(0)
    model = transformers.Inkling2ForCausalLM(tiny_config()).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "sconv" in name:
                p.copy_(0.3 * torch.randn_like(p))
    attn = model.model.layers[3].self_attn  # the full-attention layer: dynamic convolutions on keys and values
    mods = {"k": attn.k_proj.sconv, "v": attn.v_proj.sconv}
    assert all(type(m).__name__ == "Inkling2DynamicShortConvolution" for m in mods.values())
    calls = {n: [] for n in mods}
    hooks = [m.register_forward_hook(lambda mod, a, kw, out, n=n: calls[n].append(
        (a[0].double().numpy(), a[1].double().numpy(), out.double().numpy())), with_kwargs=True)
        for n, m in mods.items()]
    ids = torch.from_numpy(np.random.default_rng(3).integers(3, 45, (2, 12)))
    with torch.no_grad():
        cache = model(ids[:, :7], use_cache=True).cache
        for t in range(7, 12):
            cache = model(ids[:, t:t + 1], cache=cache, use_cache=True).cache
    for h in hooks:
        h.remove()
    for k, (n, m) in enumerate(mods.items()):
        blk, window = _of(m), None
        assert [x.shape[1] for x, _, _ in calls[n]] == [7, 1, 1, 1, 1, 1]
        for x, d, theirs in calls[n]:
            ours, window, _ = blk.forward(x, d, window)
            assert np.abs(ours - theirs).max() <= 1e-5 * np.abs(theirs).max(), n
        held = cache.get_conv_state(3, state_idx=k).double().numpy()[..., 1:]  # K inputs kept; the oldest unread
        assert np.abs(window - held).max() <= 1e-6 * np.abs(held).max(), n
