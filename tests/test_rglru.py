"""Griffin's recurrent block (RG-LRU): a float64 torch-autograd reference, finite differences, the two scans, transformers.

The reference below writes the block's equations (De et al. 2024, eqs. 1-4 and Fig. 2) one step
at a time in torch and differentiates them with autograd; the kernels are held to it at 1e-10
relative (outputs, both final states, every gradient). transformers' own
``RecurrentGemmaRecurrentBlock`` accumulates the recurrence in float32 whatever its dtype, so it
is held to float32 round-off.
"""

import numpy as np
import pytest

from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.kinds.rglru.block import RGLRUBlock, RGLRUState
from hiddenstate.shared.scan import CHUNK
from tests._torch import require_torch

TOL = 1e-10
F32 = 2e-5


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def block(M=5, W=6, heads=2, K=3, seed=0, **kw):
    b = RGLRUBlock(M, W, num_heads=heads, conv_width=K, rng=np.random.default_rng(seed), **kw)
    rng = np.random.default_rng(seed + 100)
    for k, v in b.params.items():  # off the structured initial values (zero biases, tiny gates)
        if k != "rg_lru.recurrent_param":
            v[...] = 0.5 * rng.standard_normal(v.shape)
    b.params["rg_lru.recurrent_param"][...] = rng.uniform(-2.0, 1.0, W)
    return b


def inputs(b, T, N, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((T, N, b.d_model)), 0.5 * rng.standard_normal((N, b.lru_width)),
            rng.standard_normal((N, b.lru_width, b.conv_width - 1)))


def reference(P, u, h0, conv0, heads, reset=None, lengths=None):
    """The block step by step in torch (float64): out (T, N, M), h_T (N, W), window_T (N, W, K-1)."""
    torch = require_torch()
    T, N, _ = u.shape
    W = h0.shape[1]
    y = torch.nn.functional.gelu(u @ P["linear_y.weight"].T + P["linear_y.bias"], approximate="tanh")
    x = u @ P["linear_x.weight"].T + P["linear_x.bias"]
    w = P["conv_1d.weight"][:, 0, :]
    h, win, outs = h0, conv0, []
    for t in range(T):
        full = torch.cat([win, x[t][:, :, None]], dim=-1)  # (N, W, K)
        c = (full * w).sum(-1) + P["conv_1d.bias"]
        ch = c.reshape(N, heads, W // heads)
        ig = torch.sigmoid(torch.einsum("nhi,hij->nhj", ch, P["rg_lru.input_gate_weight"])
                           + P["rg_lru.input_gate_bias"]).reshape(N, W)
        rg = torch.sigmoid(torch.einsum("nhi,hij->nhj", ch, P["rg_lru.recurrent_gate_weight"])
                           + P["rg_lru.recurrent_gate_bias"]).reshape(N, W)
        a = torch.exp(-8.0 * rg * torch.nn.functional.softplus(P["rg_lru.recurrent_param"]))
        mult = torch.sqrt(1.0 - a * a)
        if reset is not None:
            r = torch.as_tensor(reset[t])[:, None]
            a, mult = torch.where(r, 0.0, a), torch.where(r, 1.0, mult)
        hn = a * h + mult * ig * c
        o = (hn * y[t]) @ P["linear_out.weight"].T + P["linear_out.bias"]
        if lengths is not None:
            keep = torch.as_tensor(t < np.asarray(lengths))[:, None]
            hn, win, o = torch.where(keep, hn, h), torch.where(keep[:, :, None], full[..., 1:], win), o * keep
        else:
            win = full[..., 1:]
        h = hn
        outs.append(o)
    return torch.stack(outs), h, win


RAGGED = dict(lengths=[7, 4, 0], reset=np.array([[1, 0, 0], [0, 0, 1], [0, 1, 0], [0, 0, 0], [1, 0, 0], [0, 0, 0],
                                                 [0, 0, 0]], dtype=bool))


@pytest.mark.parametrize("scan", ["parallel", "sequential"])
@pytest.mark.parametrize("extra", [{}, RAGGED], ids=["plain", "lengths+reset"])
def test_outputs_states_and_every_gradient_equal_a_torch_autograd_reference(scan, extra):
    torch = require_torch()
    b = block(scan=scan)
    u, h0, c0 = inputs(b, 7, 3)
    rng = np.random.default_rng(5)
    w_out, w_h, w_c = rng.standard_normal((7, 3, 5)), rng.standard_normal(h0.shape), rng.standard_normal(c0.shape)
    out, st, cache = b.forward(u, (h0, c0), **extra)
    grads, d_u, d_st = b.backward(cache, w_out, (w_h, w_c))
    P = {k: torch.tensor(v, requires_grad=True) for k, v in b.params.items()}
    ut, ht, ct = (torch.tensor(a, requires_grad=True) for a in (u, h0, c0))
    o, hT, cT = reference(P, ut, ht, ct, b.num_heads, **extra)
    assert rel(out, o.detach().numpy()) < TOL
    assert rel(st.rg, hT.detach().numpy()) < TOL and rel(st.conv, cT.detach().numpy()) < TOL
    loss = (o * torch.tensor(w_out)).sum() + (hT * torch.tensor(w_h)).sum() + (cT * torch.tensor(w_c)).sum()
    loss.backward()
    assert set(grads) == set(P)
    for k, t in P.items():
        assert rel(grads[k], t.grad.numpy()) < TOL, k
    for got, t in ((d_u, ut), (d_st.rg, ht), (d_st.conv, ct)):
        assert rel(got, t.grad.numpy()) < TOL


@pytest.mark.parametrize("extra", [{}, RAGGED], ids=["plain", "lengths+reset"])
def test_gradcheck_every_parameter_the_input_and_both_initial_states(extra):
    b = block(4, 4, heads=2, K=3)
    u, h0, c0 = inputs(b, 7, 3)
    rng = np.random.default_rng(3)
    w_out, w_h, w_c = rng.standard_normal((7, 3, 4)), rng.standard_normal(h0.shape), rng.standard_normal(c0.shape)

    def loss():
        out, (h, c), _ = b.forward(u, (h0, c0), **extra)
        return float((out * w_out).sum() + (h * w_h).sum() + (c * w_c).sum())

    _, _, cache = b.forward(u, (h0, c0), **extra)
    grads, d_u, (d_h0, d_c0) = b.backward(cache, w_out, (w_h, w_c))
    errs = check_grads(loss, {**b.params, "u": u, "h0": h0, "conv0": c0},
                       {**grads, "u": d_u, "h0": d_h0, "conv0": d_c0}, rtol=1e-6, max_entries=None)
    assert max(errs.values()) < 1e-6


def test_parallel_and_sequential_scans_agree_across_chunk_boundaries():
    b = block(3, 4, heads=1, K=4)
    u, h0, c0 = inputs(b, CHUNK + 37, 2)
    res = {}
    for scan in ("parallel", "sequential"):
        b.scan = scan
        out, st, cache = b.forward(u, (h0, c0), lengths=[CHUNK + 37, CHUNK + 3])
        res[scan] = (out, st, b.backward(cache, np.cos(out), (np.sin(st.rg), None)))
    (o1, s1, (g1, du1, d1)), (o2, s2, (g2, du2, d2)) = res["parallel"], res["sequential"]
    assert rel(o1, o2) < 1e-12 and rel(s1.rg, s2.rg) < 1e-12 and rel(s1.conv, s2.conv) == 0
    assert rel(du1, du2) < 1e-11 and rel(d1.rg, d2.rg) < 1e-11 and rel(d1.conv, d2.conv) < 1e-11
    for k in g1:
        assert rel(g1[k], g2[k]) < 1e-11, k


def test_two_chunks_carried_equal_one_call_and_the_record_ends_at_the_final_state():
    b = block(batch_first=True)
    u, h0, c0 = inputs(b, 9, 2)
    u = u.transpose(1, 0, 2)
    out, st, _, rec = b.forward(u, (h0, c0), record=True)
    a, s, _ = b.forward(u[:, :4], (h0, c0))
    c, s, _ = b.forward(u[:, 4:], s)
    np.testing.assert_allclose(np.concatenate([a, c], axis=1), out, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(s.rg, st.rg, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(s.conv, st.conv)
    assert rec.rg.shape == (9, 2, 6) and rec.conv.shape == (9, 2, 6, 2)
    np.testing.assert_array_equal(rec.rg[-1], st.rg)
    np.testing.assert_array_equal(rec.conv[-1], st.conv)
    np.testing.assert_array_equal(rec.conv[3], b.forward(u[:, :4], (h0, c0))[1].conv)
    assert (rec.decay > 0).all() and (rec.decay < 1).all()


def test_a_reset_step_ignores_the_initial_state_and_a_padded_row_keeps_it():
    b = block()
    u, h0, c0 = inputs(b, 5, 2)
    reset = np.zeros((5, 2), dtype=bool)
    reset[0] = True
    out1, s1, _ = b.forward(u, (h0, c0), reset=reset)
    out2, s2, _ = b.forward(u, (np.zeros_like(h0), c0), reset=reset)
    np.testing.assert_array_equal(out1, out2)
    _, s3, _ = b.forward(u, (h0, c0), lengths=[5, 0])
    np.testing.assert_array_equal(s3.rg[1], h0[1])
    np.testing.assert_array_equal(s3.conv[1], c0[1])


def test_bad_inputs_are_refused_with_the_rule():
    b = block()
    u, h0, c0 = inputs(b, 4, 2)
    with pytest.raises(ValueError, match=r"num_heads must divide lru_width=6; got 4"):
        RGLRUBlock(5, 6, num_heads=4)
    with pytest.raises(ValueError, match=r"state.rg must have shape \(N=2, W=6\)"):
        b.forward(u, (h0[:1], c0))
    with pytest.raises(TypeError, match="state must be a RGLRUState"):
        b.forward(u, h0)
    with pytest.raises(ValueError, match=r"u must have shape \(T, N, M\) with M=5"):
        b.forward(u[..., :3])
    with pytest.raises(ValueError, match=r"reset must have shape \(4, 2\)"):
        b.forward(u, reset=np.zeros((2, 4), dtype=bool))
    _, _, cache = b.forward(u)
    with pytest.raises(ValueError, match="cache of another RGLRUBlock"):
        block().backward(cache, None)


# --------------------------------------------------------------------------- transformers' own block

def hf_block(b):
    torch = require_torch()
    transformers = pytest.importorskip("transformers")
    from transformers.models.recurrent_gemma import modeling_recurrent_gemma as mrg

    cfg = transformers.RecurrentGemmaConfig(hidden_size=b.d_model, lru_width=b.lru_width, num_attention_heads=b.num_heads,
                                            conv1d_width=b.conv_width, num_hidden_layers=1, vocab_size=11,
                                            intermediate_size=8, attention_window_size=4)
    m = mrg.RecurrentGemmaRecurrentBlock(cfg, 0).eval()
    m.load_state_dict({k: torch.tensor(v, dtype=torch.float32) for k, v in b.params.items()})
    return m


def test_parity_with_transformers_block_prefill_cache_and_gradients():
    torch = require_torch()
    b = block(6, 6, heads=3, K=4)
    u, _, _ = inputs(b, 11, 2)
    m = hf_block(b)
    ut = torch.tensor(u.transpose(1, 0, 2), dtype=torch.float32, requires_grad=True)
    pos = torch.arange(11)[None].expand(2, 11)
    theirs, _ = m(ut, pos, None, use_cache=True)
    reset = np.zeros((11, 2), dtype=bool)
    reset[0] = True
    out, st, cache = b.forward(u, reset=reset)
    assert rel(out.transpose(1, 0, 2), theirs.detach().numpy()) < F32
    assert rel(st.rg, m.rg_lru.recurrent_states.detach().numpy()) < F32
    assert rel(st.conv, m.conv1d_state.detach().numpy()) < F32
    d_out = np.random.default_rng(4).standard_normal(out.shape)
    (theirs * torch.tensor(d_out.transpose(1, 0, 2), dtype=torch.float32)).sum().backward()
    grads, d_u, _ = b.backward(cache, d_out)
    assert rel(d_u.transpose(1, 0, 2), ut.grad.numpy()) < 1e-4
    for k, p in m.named_parameters():
        assert rel(grads[k], p.grad.numpy()) < 1e-4, k


def test_token_by_token_decoding_through_transformers_cache_equals_our_carried_state():
    torch = require_torch()
    b = block(6, 6, heads=2, K=4)
    u, _, _ = inputs(b, 9, 2)
    m = hf_block(b)
    ut = torch.tensor(u.transpose(1, 0, 2), dtype=torch.float32)
    with torch.no_grad():
        got = [m(ut[:, :5], torch.arange(5)[None].expand(2, 5), None, use_cache=True)[0]]
        for t in range(5, 9):
            got.append(m(ut[:, t:t + 1], torch.full((2, 1), t), None, use_cache=True)[0])
    reset = np.zeros((5, 2), dtype=bool)
    reset[0] = True
    a, s, _ = b.forward(u[:5], reset=reset)
    outs = [a]
    for t in range(5, 9):
        o, s, _ = b.forward(u[t:t + 1], s)
        outs.append(o)
    assert rel(np.concatenate(outs).transpose(1, 0, 2), torch.cat(got, 1).numpy()) < F32
    assert rel(s.rg, m.rg_lru.recurrent_states.numpy()) < F32
    assert rel(s.conv, m.conv1d_state.numpy()) < F32
    full, s_full, _ = b.forward(u, reset=np.concatenate([reset, np.zeros((4, 2), dtype=bool)]))
    np.testing.assert_allclose(np.concatenate(outs), full, rtol=1e-12, atol=1e-12)
    assert isinstance(s_full, RGLRUState) and rel(s.rg, s_full.rg) < 1e-12


def test_an_empty_sequence_returns_the_initial_states_and_passes_their_gradient_through():
    b = block()
    _, h0, c0 = inputs(b, 1, 2)
    out, st, cache = b.forward(np.zeros((0, 2, 5)), (h0, c0))
    assert out.shape == (0, 2, 5)
    np.testing.assert_array_equal(st.rg, h0)
    np.testing.assert_array_equal(st.conv, c0)
    grads, d_u, d_st = b.backward(cache, None, (np.sin(h0), np.cos(c0)))
    np.testing.assert_array_equal(d_st.rg, np.sin(h0))
    np.testing.assert_array_equal(d_st.conv, np.cos(c0))
    assert d_u.shape == (0, 2, 5) and all(not g.any() for g in grads.values())
