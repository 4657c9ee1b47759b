"""LFM2's gated short convolution: a float64 torch-autograd reference, finite differences, the step form, transformers.

The reference writes ``out_t = out_proj(C_t * conv(B * x)_t)`` one step at a time in torch with
an explicit window and differentiates it with autograd (1e-10 relative). transformers'
``Lfm2ShortConv`` (its pure-torch ``causal_conv1d`` fallback) is held to float32 round-off.
"""

import numpy as np
import pytest

from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.kinds.shortconv import kernel
from hiddenstate.kinds.shortconv.block import ShortConv, ShortConvState
from tests._torch import require_torch

TOL = 1e-10
F32 = 2e-5


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def block(M=5, K=3, bias=False, seed=0, **kw):
    b = ShortConv(M, kernel_size=K, bias=bias, rng=np.random.default_rng(seed), **kw)
    rng = np.random.default_rng(seed + 100)
    for v in b.params.values():
        v[...] = 0.5 * rng.standard_normal(v.shape)
    return b


def inputs(b, T, N, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((T, N, b.d_model)), rng.standard_normal((N, b.d_model, b.kernel_size - 1))


def reference(P, u, conv0, lengths=None):
    torch = require_torch()
    T, N, M = u.shape
    bcx = u @ P["in_proj.weight"].T + P.get("in_proj.bias", 0.0)
    win, outs = conv0, []
    for t in range(T):
        B, C, x = bcx[t, :, :M], bcx[t, :, M:2 * M], bcx[t, :, 2 * M:]
        full = torch.cat([win, (B * x)[:, :, None]], dim=-1)
        c = (full * P["conv.weight"][:, 0, :]).sum(-1) + P.get("conv.bias", 0.0)
        o = (C * c) @ P["out_proj.weight"].T + P.get("out_proj.bias", 0.0)
        if lengths is not None:
            keep = torch.as_tensor(t < np.asarray(lengths))[:, None]
            win, o = torch.where(keep[:, :, None], full[..., 1:], win), o * keep
        else:
            win = full[..., 1:]
        outs.append(o)
    return torch.stack(outs), win


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("lengths", [None, [6, 2, 0]], ids=["full", "ragged"])
def test_outputs_window_and_every_gradient_equal_a_torch_autograd_reference(bias, lengths):
    torch = require_torch()
    b = block(bias=bias, K=4)
    u, c0 = inputs(b, 6, 3)
    rng = np.random.default_rng(5)
    w_out, w_c = rng.standard_normal((6, 3, 5)), rng.standard_normal(c0.shape)
    out, st, cache = b.forward(u, (c0,), lengths=lengths)
    grads, d_u, (d_c0,) = b.backward(cache, w_out, (w_c,))
    P = {k: torch.tensor(v, requires_grad=True) for k, v in b.params.items()}
    ut, ct = torch.tensor(u, requires_grad=True), torch.tensor(c0, requires_grad=True)
    o, cT = reference(P, ut, ct, lengths)
    assert rel(out, o.detach().numpy()) < TOL and rel(st.conv, cT.detach().numpy()) < TOL
    ((o * torch.tensor(w_out)).sum() + (cT * torch.tensor(w_c)).sum()).backward()
    assert set(grads) == set(P)
    for k, t in P.items():
        assert rel(grads[k], t.grad.numpy()) < TOL, k
    assert rel(d_u, ut.grad.numpy()) < TOL and rel(d_c0, ct.grad.numpy()) < TOL


def test_gradcheck_every_parameter_the_input_and_the_initial_window():
    b = block(4, K=3, bias=True)
    u, c0 = inputs(b, 5, 2)
    rng = np.random.default_rng(3)
    w_out, w_c = rng.standard_normal((5, 2, 4)), rng.standard_normal(c0.shape)

    def loss():
        out, (c,), _ = b.forward(u, (c0,), lengths=[5, 1])
        return float((out * w_out).sum() + (c * w_c).sum())

    _, _, cache = b.forward(u, (c0,), lengths=[5, 1])
    grads, d_u, (d_c0,) = b.backward(cache, w_out, (w_c,))
    errs = check_grads(loss, {**b.params, "u": u, "conv0": c0}, {**grads, "u": d_u, "conv0": d_c0}, rtol=1e-6,
                       max_entries=None)
    assert max(errs.values()) < 1e-6


@pytest.mark.parametrize("K", [1, 2, 4])
def test_the_per_token_step_equals_the_whole_sequence_pass(K):
    b = block(K=K, bias=True)
    u, c0 = inputs(b, 7, 2)
    out, st, _, rec = b.forward(u, (c0,), record=True)
    win = c0
    for t in range(7):
        o, win = kernel.step(b.params, u[t], win)
        assert rel(o, out[t]) < 1e-13
        np.testing.assert_array_equal(win, rec.conv[t])
    np.testing.assert_array_equal(rec.conv[-1], st.conv)
    np.testing.assert_array_equal(win, st.conv)


def test_two_chunks_carried_equal_one_call():
    b = block(batch_first=True)
    u, c0 = inputs(b, 9, 2)
    u = u.transpose(1, 0, 2)
    out, st, _ = b.forward(u, (c0,))
    a, s, _ = b.forward(u[:, :1], (c0,))
    c, s, _ = b.forward(u[:, 1:], s)
    np.testing.assert_allclose(np.concatenate([a, c], axis=1), out, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(s.conv, st.conv)


def test_bad_inputs_are_refused_with_the_rule():
    b = block()
    u, c0 = inputs(b, 4, 2)
    with pytest.raises(ValueError, match="reset must be None for ShortConv"):
        b.forward(u, reset=np.zeros((4, 2), dtype=bool))
    with pytest.raises(ValueError, match=r"state.conv must have shape \(N=2, M=5, K-1=2\)"):
        b.forward(u, (c0[..., :1],))
    with pytest.raises(TypeError, match="bias must be"):
        ShortConv(5, bias=1)


# --------------------------------------------------------------------------- transformers' own layer

def hf_layer(b, idx=1):
    torch = require_torch()
    transformers = pytest.importorskip("transformers")
    from transformers.models.lfm2 import modeling_lfm2 as ml

    cfg = transformers.Lfm2Config(hidden_size=b.d_model, conv_L_cache=b.kernel_size, conv_bias=b.bias,
                                  num_hidden_layers=2, vocab_size=11, intermediate_size=8, num_attention_heads=1,
                                  num_key_value_heads=1, layer_types=["conv", "conv"])
    m = ml.Lfm2ShortConv(cfg, idx).eval()
    m.load_state_dict({k: torch.tensor(v, dtype=torch.float32) for k, v in b.params.items()})
    return m, cfg


@pytest.mark.parametrize("bias", [False, True])
def test_parity_with_transformers_layer_and_gradients(bias):
    torch = require_torch()
    b = block(6, K=3, bias=bias)
    m, _ = hf_layer(b)
    u, _ = inputs(b, 10, 2)
    ut = torch.tensor(u.transpose(1, 0, 2), dtype=torch.float32, requires_grad=True)
    theirs = m(ut)
    out, st, cache = b.forward(u)
    assert rel(out.transpose(1, 0, 2), theirs.detach().numpy()) < F32
    d_out = np.random.default_rng(4).standard_normal(out.shape)
    (theirs * torch.tensor(d_out.transpose(1, 0, 2), dtype=torch.float32)).sum().backward()
    grads, d_u, _ = b.backward(cache, d_out)
    assert rel(d_u.transpose(1, 0, 2), ut.grad.numpy()) < 1e-4
    for k, p in m.named_parameters():
        assert rel(grads[k], p.grad.numpy()) < 1e-4, k


def test_token_by_token_decoding_through_transformers_cache_equals_our_carried_state():
    torch = require_torch()
    from transformers import DynamicCache

    b = block(6, K=4, bias=True)
    m, cfg = hf_layer(b)
    u, _ = inputs(b, 9, 2)
    ut = torch.tensor(u.transpose(1, 0, 2), dtype=torch.float32)
    cache = DynamicCache(config=cfg)
    with torch.no_grad():
        got = [m(ut[:, :2], cache=cache)]  # a prefill shorter than the window
        their_prefill = cache.get_conv_state(1).clone()
        for t in range(2, 9):
            got.append(m(ut[:, t:t + 1], cache=cache))
    a, s, _ = b.forward(u[:2])
    assert rel(s.conv, their_prefill[..., 1:].numpy()) < F32  # their cache keeps K, the oldest never read
    outs = [a]
    for t in range(2, 9):
        o, s, _ = b.forward(u[t:t + 1], s)
        outs.append(o)
    assert rel(np.concatenate(outs).transpose(1, 0, 2), torch.cat(got, 1).numpy()) < F32
    assert rel(s.conv, cache.get_conv_state(1)[..., 1:].numpy()) < F32
    full, s_full, _ = b.forward(u)
    np.testing.assert_allclose(np.concatenate(outs), full, rtol=1e-12, atol=1e-12)
    assert isinstance(s_full, ShortConvState) and rel(s.conv, s_full.conv) < 1e-13


def test_an_empty_sequence_returns_the_initial_window_and_passes_its_gradient_through():
    b = block(bias=True)
    _, c0 = inputs(b, 1, 2)
    out, st, cache = b.forward(np.zeros((0, 2, 5)), (c0,))
    assert out.shape == (0, 2, 5)
    np.testing.assert_array_equal(st.conv, c0)
    grads, d_u, (d_c0,) = b.backward(cache, None, (np.sin(c0),))
    np.testing.assert_array_equal(d_c0, np.sin(c0))
    assert d_u.shape == (0, 2, 5) and all(not g.any() for g in grads.values())
