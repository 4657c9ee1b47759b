"""RWKV-4's time mixing (Peng et al. 2023): both scans, exact BPTT through the running maximum, every step's state, carry, transformers.

The references are independent of the kernels: the layer's equations written again here in torch
float64 (transformers' per-step WKV loop, differentiated by autograd, the maxima included),
finite differences (:mod:`hiddenstate.classic.gradcheck`), prefix re-runs for the per-step states, and
transformers' own ``RwkvSelfAttention`` from a tiny random config.
"""

import numpy as np
import pytest

from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.kinds.rwkv.block import RWKVState, RWKVTimeMix
from tests._torch import require_torch, torch_required

TOL = 1e-10
SCANS = ("parallel", "sequential")


def layer(M=6, A=None, *, seed=0, jitter=0.5, **options):
    """A layer with its parameters moved off transformers' structured initial values."""
    rng = np.random.default_rng(seed)
    lay = RWKVTimeMix(M, A, rng=rng, **options)
    for v in lay.params.values():
        v += jitter * rng.standard_normal(v.shape)
    lay.params["time_decay"][:] = rng.normal(-0.5, 1.0, lay.attention_hidden_size)  # decays from fast to slow
    return lay


def inputs(lay, T, N, seed=1, *, fresh=False):
    rng = np.random.default_rng(seed)
    u = 2 * rng.standard_normal((T, N, lay.hidden_size))
    A = lay.attention_hidden_size
    if fresh:
        return u, lay.initial_state(N)
    s0 = RWKVState(rng.standard_normal((N, lay.hidden_size)), rng.standard_normal((N, A)),
                   np.abs(rng.standard_normal((N, A))) + 0.2, rng.standard_normal((N, A)))
    return u, s0


def torch_reference(torch, P, u, shift, num, den, mx):
    """The layer in transformers' form: token shift, time mixes, then the WKV loop of rwkv_linear_attention_cpu."""
    sx = torch.cat([shift[None], u[:-1]])
    xk, xv, xr = (u * P[m][0] + sx * (1 - P[m][0]) for m in ("time_mix_key", "time_mix_value", "time_mix_receptance"))
    k, v = xk @ P["key.weight"].T, xv @ P["value.weight"].T
    r = torch.sigmoid(xr @ P["receptance.weight"].T)
    w, uu = -torch.exp(P["time_decay"]), P["time_first"]
    outs = []
    for t in range(u.shape[0]):
        q = torch.maximum(mx, k[t] + uu)
        e1, e2 = torch.exp(mx - q), torch.exp(k[t] + uu - q)
        outs.append((e1 * num + e2 * v[t]) / (e1 * den + e2))
        p = torch.maximum(mx + w, k[t])
        e1, e2 = torch.exp(mx + w - p), torch.exp(k[t] - p)
        num, den, mx = e1 * num + e2 * v[t], e1 * den + e2, p
    wkv = torch.stack(outs)
    return (r * wkv) @ P["output.weight"].T, u[-1], num, den, mx


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max(initial=0.0) / max(np.abs(b).max(initial=0.0), 1e-300))


@pytest.mark.parametrize("scan", SCANS)
@pytest.mark.parametrize("M,A,fresh", [(6, None, False), (5, 7, False), (6, None, True)])
def test_outputs_states_and_every_gradient_equal_torch_autograd(M, A, fresh, scan):
    torch = require_torch()
    lay = layer(M, A, scan=scan)
    u, s0 = inputs(lay, 9, 3, fresh=fresh)
    out, s_T, cache = lay.forward(u, s0)
    rng = np.random.default_rng(5)
    R = rng.standard_normal(out.shape)
    RS = tuple(rng.standard_normal(a.shape) for a in s_T)
    grads, d_u, d_s0 = lay.backward(cache, R, RS)
    P = {k: torch.tensor(v, requires_grad=True) for k, v in lay.params.items()}
    U = torch.tensor(u, requires_grad=True)
    S0 = [torch.tensor(a, requires_grad=True) for a in s0]
    o, *ref = torch_reference(torch, P, U, *S0)
    assert rel(out, o.detach()) <= TOL
    for ours, r in zip(s_T, ref):
        assert rel(ours, r.detach()) <= TOL
    loss = (o * torch.tensor(R)).sum() + sum((r * torch.tensor(x)).sum() for r, x in zip(ref, RS))
    loss.backward()
    for k in lay.params:
        assert rel(grads[k], P[k].grad) <= TOL, k
    assert rel(d_u, U.grad) <= TOL
    for ours, r in zip(d_s0, S0):
        assert rel(ours, r.grad) <= TOL


def test_both_maxima_switch_sides_in_the_tests():
    lay = layer(6)
    u, s0 = inputs(lay, 9, 3)
    *_, cache = lay.forward(u, s0)
    k, w, pprev, ku = cache.kernel[7][0], cache.kernel[7][2], cache.kernel[7][5], cache.kernel[7][11]
    assert ((pprev > ku).any() and (pprev < ku).any() and (pprev + w > k).any() and (pprev + w < k).any())


def test_the_two_scans_agree_over_long_sequences():
    a, b = layer(5, scan="parallel"), layer(5, scan="sequential")
    u, s0 = inputs(a, 300, 2)
    ra, rb = a.forward(u, s0), b.forward(u, s0)
    assert rel(ra[0], rb[0]) <= 1e-12
    for x, y in zip(ra[1], rb[1]):
        assert rel(x, y) <= 1e-12
    R = np.random.default_rng(2).standard_normal(ra[0].shape)
    ga, gb = a.backward(ra[2], R, tuple(np.ones_like(x) for x in ra[1])), \
        b.backward(rb[2], R, tuple(np.ones_like(x) for x in rb[1]))
    for k in a.params:
        assert rel(ga[0][k], gb[0][k]) <= 1e-11, k
    assert rel(ga[1], gb[1]) <= 1e-11
    for x, y in zip(ga[2], gb[2]):
        assert rel(x, y) <= 1e-11


@pytest.mark.parametrize("scan", SCANS)
def test_gradients_equal_finite_differences(scan):
    lay = layer(4, 3, jitter=0.3, scan=scan)
    u, s0 = inputs(lay, 6, 2)
    rng = np.random.default_rng(7)
    R = rng.standard_normal((6, 2, 4))
    RS = tuple(rng.standard_normal(a.shape) for a in s0)

    def loss():
        out, s, _ = lay.forward(u, s0)
        return float((out * R).sum() + sum((a * b).sum() for a, b in zip(s, RS)))

    out, s, cache = lay.forward(u, s0)
    grads, d_u, d_s0 = lay.backward(cache, R, RS)
    arrays = dict(lay.params, u=u, **{f"{k}0": v for k, v in s0._asdict().items()})
    check_grads(loss, arrays, dict(grads, u=d_u, **{f"{k}0": v for k, v in d_s0._asdict().items()}), rtol=1e-6,
                max_entries=12)


def test_record_carry_and_batch_first():
    lay = layer(6)
    u, s0 = inputs(lay, 11, 2)
    out, s_T, cache, states = lay.forward(u, s0, record=True)
    assert states.shift.shape == (11, 2, 6) and states.max.shape == (11, 2, 6)
    for t in (0, 5, 10):
        _, s_t, _ = lay.forward(u[:t + 1], s0)
        for a, b in zip(states, s_t):
            assert rel(a[t], b) <= 1e-13
    a, s = lay(u[:4], s0)
    b, s = lay(u[4:], s)
    assert rel(np.concatenate([a, b]), out) <= 1e-13
    for x, y in zip(s, s_T):
        assert rel(x, y) <= 1e-13
    o2, _ = layer(6, batch_first=True)(u.transpose(1, 0, 2), s0)
    np.testing.assert_allclose(o2.transpose(1, 0, 2), out, rtol=1e-13, atol=1e-13)
    empty, s_e, c_e = lay.forward(u[:0], s0)
    assert empty.shape == (0, 2, 6) and all(np.array_equal(x, y) for x, y in zip(s_e, s0))
    g, d_u, d_s = lay.backward(c_e, None, (np.ones((2, 6)), None, np.ones((2, 6)), None))
    assert np.array_equal(d_s.shift, np.ones((2, 6))) and np.array_equal(d_s.den, np.ones((2, 6)))
    assert not d_s.num.any() and not g["key.weight"].any()


def test_float32_runs_end_to_end():
    lay = layer(6, dtype=np.float32)
    u, s0 = inputs(lay, 5, 2, fresh=True)
    out, s, cache = lay.forward(u, s0)
    grads, d_u, d_s = lay.backward(cache, np.ones_like(out))
    assert out.dtype == s.num.dtype == d_u.dtype == grads["key.weight"].dtype == np.float32
    assert np.isfinite(out).all() and np.isfinite(grads["time_decay"]).all()


def test_bad_input_is_refused_clearly():
    lay = layer(6)
    u, s0 = inputs(lay, 3, 2)
    with pytest.raises(ValueError, match=r"u must have shape \(T, N, M\) with M=6; got \(3, 2, 5\)"):
        lay.forward(u[:, :, :5])
    with pytest.raises(ValueError, match=r"state.max must have shape \(N=2, A=6\); got \(6,\)"):
        lay.forward(u, s0._replace(max=s0.max[0]))
    with pytest.raises(TypeError, match=r"state must be a RWKVState \(shift, num, den, max\); got tuple of length 3"):
        lay.forward(u, s0[1:])
    with pytest.raises(ValueError, match="reset must be None for RWKVTimeMix; got ndarray. RWKVTimeMix takes whole sequences"):
        lay.forward(u, reset=np.zeros((3, 2), bool))
    with pytest.raises(ValueError, match="scan must be one of"):
        RWKVTimeMix(6, scan="chunkwise")
    *_, cache = lay.forward(u)
    with pytest.raises(ValueError, match="cache of another RWKVTimeMix"):
        layer(6).backward(cache, None)


# ----------------------------------------------------------------------------- transformers' RwkvSelfAttention


def transformers_or_skip():
    torch = require_torch()
    transformers = pytest.importorskip("transformers") if not torch_required() else __import__("transformers")
    return torch, transformers


def hf_layer(torch, transformers, lay, dtype):
    from transformers.models.rwkv.modeling_rwkv import RwkvSelfAttention

    cfg = transformers.RwkvConfig(hidden_size=lay.hidden_size, attention_hidden_size=lay.attention_hidden_size,
                                  num_hidden_layers=1, vocab_size=11, context_length=64)
    hf = RwkvSelfAttention(cfg, 0).to(dtype).eval()
    hf.load_state_dict({k: torch.tensor(v) for k, v in lay.params.items()})
    return hf


def hf_state(torch, s, dtype):
    """transformers' five-part state for one layer: (N, M or A, 1) each; part 0 (the feed-forward's shift) unused."""
    parts = [np.zeros_like(s.shift), s.shift, s.num, s.den, s.max]
    return [torch.tensor(a[..., None], dtype=dtype) for a in parts]


@pytest.mark.parametrize("M,A", [(6, None), (5, 7)])
@pytest.mark.parametrize("float64", [False, True])
def test_outputs_and_final_state_equal_transformers_rwkv_self_attention(M, A, float64):
    torch, transformers = transformers_or_skip()
    dt = torch.float64 if float64 else torch.float32
    lay = layer(M, A, batch_first=True)
    hf = hf_layer(torch, transformers, lay, dt)
    u, s0 = inputs(lay, 13, 3)
    u = u.transpose(1, 0, 2)
    state = hf_state(torch, s0, dt)
    with torch.no_grad():
        y, state = hf(torch.tensor(u, dtype=dt), state=state, use_cache=True)
    out, s_T, _ = lay.forward(u, s0)
    tol = 1e-5  # rwkv_linear_attention_cpu rounds every key to float32 (key.float()), whatever the dtype
    assert rel(out, y.numpy()) <= tol
    for ours, ref in zip(s_T, state[1:]):
        assert rel(ours, ref[..., 0].numpy()) <= tol


def test_token_by_token_decoding_equals_our_carried_state():
    # transformers' one-token path (the shift read straight from the state) from a fresh cache (max -1e30).
    # One row: in transformers 5.25 that path broadcasts the (N, M) shift against the (N, 1, M) input into
    # (N, N, M) for N > 1 (RwkvForCausalLM decoding a batch with a cache returns (N, N, V) logits)
    torch, transformers = transformers_or_skip()
    lay = layer(6, batch_first=True)
    hf = hf_layer(torch, transformers, lay, torch.float32)
    u, s0 = inputs(lay, 9, 1, fresh=True)
    u = u.transpose(1, 0, 2)
    full, s_T, _ = lay.forward(u)
    state, got = hf_state(torch, s0, torch.float32), []
    with torch.no_grad():
        for t in range(9):
            y, state = hf(torch.tensor(u[:, t:t + 1], dtype=torch.float32), state=state, use_cache=True)
            got.append(y)
    assert rel(full, torch.cat(got, 1).numpy()) <= 1e-5
    for ours, ref in zip(s_T, state[1:]):
        assert rel(ours, ref[..., 0].numpy()) <= 1e-5
    s = None
    for t in range(9):
        _, s = lay(u[:, t:t + 1], s)
    for a, b in zip(s, s_T):
        assert rel(a, b) <= 1e-13
