"""MiniMax's lightning attention: a float64 torch-autograd reference, finite differences, chunked == sequential, transformers.

The reference writes the recurrence ``S_t = exp(-lambda) S_{t-1} + k_t^T v_t``, ``o_t = q_t S_t``
one step at a time in torch and differentiates it with autograd; both of our forms (the per-step
loop and the chunked tiling) are held to it at 1e-10 relative. transformers'
``MiniMaxLightningAttention`` computes its RMS norm in float32, so it is held to float32 round-off.
"""

import numpy as np
import pytest

from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.kinds.lightning import kernel
from hiddenstate.kinds.lightning.block import LightningAttention, LightningState, slope_rates
from tests._torch import require_torch

TOL = 1e-10
F32 = 2e-5


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def layer(M=8, H=2, D=None, seed=0, **kw):
    b = LightningAttention(M, H, head_dim=D, rng=np.random.default_rng(seed), **kw)
    rng = np.random.default_rng(seed + 100)
    for v in b.params.values():
        v[...] = 0.5 * rng.standard_normal(v.shape)
    return b


def inputs(b, T, N, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((T, N, b.d_model)), 0.3 * rng.standard_normal((N, b.num_heads, b.head_dim, b.head_dim))


def reference(P, u, S0, slopes, H, D, lengths=None):
    """The layer step by step in torch (float64): out (T, N, M), S_T (N, H, D, D)."""
    torch = require_torch()
    T, N, M = u.shape
    a = torch.nn.functional.silu(u @ P["qkv_proj.weight"].T).reshape(T, N, H, 3 * D)
    q, k, v = a[..., :D], a[..., D:2 * D], a[..., 2 * D:]
    decay = torch.exp(-torch.as_tensor(slopes))[None, :, None, None]
    S, outs = S0, []
    for t in range(T):
        Sn = decay * S + k[t][..., :, None] * v[t][..., None, :]
        if lengths is not None:
            Sn = torch.where(torch.as_tensor(t < np.asarray(lengths))[:, None, None, None], Sn, S)
        S = Sn
        outs.append(torch.einsum("nhd,nhde->nhe", q[t], S).reshape(N, H * D))
    o = torch.stack(outs)
    nrm = o * torch.rsqrt((o * o).mean(-1, keepdim=True) + 1e-6) * P["norm.weight"]
    out = (torch.sigmoid(u @ P["output_gate.weight"].T) * nrm) @ P["out_proj.weight"].T
    if lengths is not None:
        out = out * torch.as_tensor(np.arange(T)[:, None] < np.asarray(lengths))[:, :, None]
    return out, S


@pytest.mark.parametrize("form,chunk", [("sequential", 64), ("chunked", 64), ("chunked", 3)])
@pytest.mark.parametrize("lengths", [None, [9, 5, 0]], ids=["full", "ragged"])
def test_outputs_state_and_every_gradient_equal_a_torch_autograd_reference(form, chunk, lengths):
    torch = require_torch()
    b = layer(12, 3, D=3, form=form, chunk=chunk)
    u, S0 = inputs(b, 9, 3)
    rng = np.random.default_rng(5)
    w_out, w_S = rng.standard_normal((9, 3, 12)), rng.standard_normal(S0.shape)
    out, st, cache = b.forward(u, (S0,), lengths=lengths)
    grads, d_u, (d_S0,) = b.backward(cache, w_out, (w_S,))
    P = {k: torch.tensor(v, requires_grad=True) for k, v in b.params.items()}
    ut, St = torch.tensor(u, requires_grad=True), torch.tensor(S0, requires_grad=True)
    o, ST = reference(P, ut, St, b.slope_rate, 3, 3, lengths)
    assert rel(out, o.detach().numpy()) < TOL and rel(st.kv, ST.detach().numpy()) < TOL
    ((o * torch.tensor(w_out)).sum() + (ST * torch.tensor(w_S)).sum()).backward()
    for k, t in P.items():
        assert rel(grads[k], t.grad.numpy()) < TOL, k
    assert rel(d_u, ut.grad.numpy()) < TOL and rel(d_S0, St.grad.numpy()) < TOL


@pytest.mark.parametrize("form", ["chunked", "sequential"])
def test_gradcheck_every_parameter_the_input_and_the_initial_state(form):
    b = layer(6, 2, form=form, chunk=2)
    u, S0 = inputs(b, 5, 2)
    rng = np.random.default_rng(3)
    w_out, w_S = rng.standard_normal((5, 2, 6)), rng.standard_normal(S0.shape)

    def loss():
        out, (S,), _ = b.forward(u, (S0,), lengths=[5, 3])
        return float((out * w_out).sum() + (S * w_S).sum())

    _, _, cache = b.forward(u, (S0,), lengths=[5, 3])
    grads, d_u, (d_S0,) = b.backward(cache, w_out, (w_S,))
    errs = check_grads(loss, {**b.params, "u": u, "S0": S0}, {**grads, "u": d_u, "S0": d_S0}, rtol=1e-6,
                       max_entries=None)
    assert max(errs.values()) < 1e-6


@pytest.mark.parametrize("chunk", [1, 4, 7, 64])
def test_chunked_equals_sequential_across_chunk_boundaries_kernel_level(chunk):
    rng = np.random.default_rng(chunk)
    T, N, H, D = 23, 2, 3, 4
    q, k, v = (rng.standard_normal((T, N, H, D)) for _ in range(3))
    g = -rng.uniform(0.01, 1.0, (T, N, H))
    g[15:, 1] = 0.0  # a padded tail
    S0 = rng.standard_normal((N, H, D, D))
    d_o, d_S = rng.standard_normal((T, N, H, D)), rng.standard_normal((N, H, D, D))
    o1, s1, c1 = kernel.attention_forward(q, k, v, g, S0, form="sequential")
    o2, s2, c2 = kernel.attention_forward(q, k, v, g, S0, form="chunked", chunk=chunk)
    assert rel(o2, o1) < 1e-13 and rel(s2, s1) < 1e-13
    assert rel(kernel.states(c2), kernel.states(c1)) < 1e-13
    for a, b in zip(kernel.attention_backward(c2, d_o, d_S), kernel.attention_backward(c1, d_o, d_S)):
        assert rel(a, b) < 1e-13


def test_two_chunks_carried_equal_one_call_and_the_record_ends_at_the_final_state():
    b = layer(chunk=4, batch_first=True)
    u, S0 = inputs(b, 11, 2)
    u = u.transpose(1, 0, 2)
    out, st, _, rec = b.forward(u, (S0,), record=True)
    a, s, _ = b.forward(u[:, :6], (S0,))
    c, s, _ = b.forward(u[:, 6:], s)
    np.testing.assert_allclose(np.concatenate([a, c], axis=1), out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s.kv, st.kv, rtol=1e-12, atol=1e-12)
    assert rec.kv.shape == (11, 2, 2, 4, 4)
    np.testing.assert_array_equal(rec.kv[-1], st.kv)
    np.testing.assert_allclose(rec.kv[5], b.forward(u[:, :6], (S0,))[1].kv, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(rec.decay, np.exp(-slope_rates(2)))


def test_bad_inputs_are_refused_with_the_rule():
    b = layer()
    u, S0 = inputs(b, 4, 2)
    with pytest.raises(ValueError, match="reset must be None for LightningAttention"):
        b.forward(u, reset=np.zeros((4, 2), dtype=bool))
    with pytest.raises(ValueError, match=r"slope_rate must have shape \(H=2,\) with every value > 0"):
        LightningAttention(8, 2, slope_rate=[0.1, -0.1])
    with pytest.raises(ValueError, match=r"state.kv must have shape \(N=2, H=2, D=4, D=4\)"):
        b.forward(u, (S0[:1],))
    with pytest.raises(ValueError, match="form must be one of"):
        LightningAttention(8, 2, form="parallel")


# --------------------------------------------------------------------------- transformers' own layer

def hf_layer(b, layer_idx=1, layers=3, block_size=4):
    torch = require_torch()
    transformers = pytest.importorskip("transformers")
    from transformers.models.minimax import modeling_minimax as mm

    cfg = transformers.MiniMaxConfig(hidden_size=b.d_model, num_attention_heads=b.num_heads, head_dim=b.head_dim,
                                     num_hidden_layers=layers, block_size=block_size, vocab_size=11,
                                     num_key_value_heads=b.num_heads, intermediate_size=8,
                                     layer_types=["linear_attention"] * layers)
    m = mm.MiniMaxLightningAttention(cfg, layer_idx).eval()
    missing, unexpected = m.load_state_dict({k: torch.tensor(v, dtype=torch.float32) for k, v in b.params.items()},
                                            strict=False)
    assert not unexpected and set(missing) == {"slope_rate", "query_decay", "key_decay", "diagonal_decay"}
    return m


def test_slopes_and_parity_with_transformers_layer_prefill_and_gradients():
    torch = require_torch()
    b = layer(8, 2, chunk=3, slope_rate=slope_rates(2, 1, 3))
    m = hf_layer(b)
    assert rel(b.slope_rate, m.slope_rate.reshape(-1).numpy()) < 1e-7
    u, _ = inputs(b, 10, 2)  # 10 steps: three of transformers' blocks of 4, four of our chunks of 3
    ut = torch.tensor(u.transpose(1, 0, 2), dtype=torch.float32, requires_grad=True)
    theirs, kv = m(ut, None, None)
    out, st, cache = b.forward(u)
    assert rel(out.transpose(1, 0, 2), theirs.detach().numpy()) < F32
    assert rel(st.kv, kv.detach().numpy()) < F32
    d_out = np.random.default_rng(4).standard_normal(out.shape)
    (theirs * torch.tensor(d_out.transpose(1, 0, 2), dtype=torch.float32)).sum().backward()
    grads, d_u, _ = b.backward(cache, d_out)
    assert rel(d_u.transpose(1, 0, 2), ut.grad.numpy()) < 1e-4
    for k, p in m.named_parameters():
        assert rel(grads[k], p.grad.numpy()) < 1e-4, k


def test_token_by_token_decoding_through_transformers_cache_equals_our_carried_state():
    torch = require_torch()
    from transformers.models.minimax.modeling_minimax import MiniMaxCache

    b = layer(8, 2, chunk=2, slope_rate=slope_rates(2, 1, 3))
    m = hf_layer(b)
    u, _ = inputs(b, 9, 2)
    ut = torch.tensor(u.transpose(1, 0, 2), dtype=torch.float32)
    cache = MiniMaxCache()
    with torch.no_grad():
        got = [m(ut[:, :5], None, None, cache=cache)[0]]
        for t in range(5, 9):
            got.append(m(ut[:, t:t + 1], None, None, cache=cache)[0])
    a, s, _ = b.forward(u[:5])
    outs = [a]
    for t in range(5, 9):
        o, s, _ = b.forward(u[t:t + 1], s)
        outs.append(o)
    assert rel(np.concatenate(outs).transpose(1, 0, 2), torch.cat(got, 1).numpy()) < F32
    assert rel(s.kv, cache.get_linear_cache(1).numpy()) < F32
    full, s_full, _ = b.forward(u)
    np.testing.assert_allclose(np.concatenate(outs), full, rtol=1e-12, atol=1e-12)
    assert isinstance(s_full, LightningState) and rel(s.kv, s_full.kv) < 1e-12


@pytest.mark.parametrize("form", ["chunked", "sequential"])
def test_an_empty_sequence_returns_the_initial_state_and_passes_its_gradient_through(form):
    b = layer(form=form)
    _, S0 = inputs(b, 1, 2)
    out, st, cache = b.forward(np.zeros((0, 2, 8)), (S0,))
    assert out.shape == (0, 2, 8)
    np.testing.assert_array_equal(st.kv, S0)
    grads, d_u, (d_S0,) = b.backward(cache, None, (np.sin(S0),))
    np.testing.assert_array_equal(d_S0, np.sin(S0))
    assert d_u.shape == (0, 2, 8) and all(not g.any() for g in grads.values())
