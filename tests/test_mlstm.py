"""xLSTM's mLSTM layer (Beck et al. 2024): three scans, exact BPTT through the stabiliser, every step's state, carry, transformers.

The references are independent of the kernels: the layer's equations written again here in torch
float64 (one loop over time in transformers' step form, differentiated by autograd, the max of
the stabiliser included), finite differences (:mod:`hiddenstate.classic.gradcheck`), prefix re-runs for
the per-step states, and transformers' own ``xLSTMLayer`` from a tiny random config.
"""

import numpy as np
import pytest

from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.core import resources
from hiddenstate.kinds.mlstm.block import MLSTMLayer, MLSTMState
from hiddenstate.shared import ssd
from tests._torch import require_torch, torch_required

TOL = 1e-10
SCANS = ("chunkwise", "parallel", "sequential")


def layer(M=8, H=2, *, seed=0, jitter=0.5, **options):
    """A layer with its parameters moved off transformers' structured initial values (zero gate weights)."""
    rng = np.random.default_rng(seed)
    lay = MLSTMLayer(M, H, rng=rng, **options)
    for v in lay.params.values():
        v += jitter * rng.standard_normal(v.shape)
    H = lay.num_heads  # the input gate's bias from -10 to about 0: the stabiliser's max takes both sides
    lay.params["igate_preact.bias" if "igate_preact.bias" in lay.params else "ifgate_preact.bias"][:H] += 10.0
    return lay


def inputs(lay, T, N, seed=1):
    rng = np.random.default_rng(seed)
    H, Dk, Dv = lay.num_heads, lay.qk_dim // lay.num_heads, lay.v_dim // lay.num_heads
    u = rng.standard_normal((T, N, lay.hidden_size))
    s0 = MLSTMState(rng.standard_normal((N, H, Dk, Dv)), rng.standard_normal((N, H, Dk)),
                    rng.standard_normal((N, H, 1)))
    return u, s0


def torch_reference(torch, lay, P, u, C, n, m):
    """The layer in transformers' step form, one step per iteration (time-major u (T, N, M))."""
    F = torch.nn.functional
    H, Qk, V = lay.num_heads, lay.qk_dim, lay.v_dim
    T, N, _ = u.shape
    if lay.weight_mode == "single":
        W = torch.cat([P[f"{k}.weight"] for k in ("q", "k", "v", "ogate_preact")])
        b = torch.cat([P[f"{k}.bias"] for k in ("q", "k", "v", "ogate_preact")]) if lay.use_bias else 0.0
        Wg = torch.cat([P["igate_preact.weight"], P["fgate_preact.weight"]])
        bg = torch.cat([P["igate_preact.bias"], P["fgate_preact.bias"]])
    else:
        W, b = P["qkv_opreact.weight"], P.get("qkv_opreact.bias", 0.0)
        Wg, bg = P["ifgate_preact.weight"], P["ifgate_preact.bias"]
    proj = u @ W.T + b
    gates = u @ Wg.T + bg
    if lay.gate_soft_cap is not None:
        gates = lay.gate_soft_cap * torch.tanh(gates / lay.gate_soft_cap)
    q, k = proj[..., :Qk].reshape(T, N, H, -1), proj[..., Qk:2 * Qk].reshape(T, N, H, -1)
    v, o = proj[..., 2 * Qk:2 * Qk + V].reshape(T, N, H, -1), proj[..., 2 * Qk + V:]
    Dk = q.shape[-1]
    m = m[..., 0]
    hs = []
    for t in range(T):
        lf = F.logsigmoid(gates[t, :, H:])
        m_new = torch.maximum(lf + m, gates[t, :, :H])
        fa, ia = torch.exp(lf + m - m_new), torch.exp(gates[t, :, :H] - m_new)
        C = fa[..., None, None] * C + ia[..., None, None] * (k[t][..., :, None] * v[t][..., None, :])
        n = fa[..., None] * n + ia[..., None] * k[t]
        m = m_new
        qs = q[t] * Dk ** -0.5
        num = (qs[..., :, None] * C).sum(-2)
        den = torch.maximum((qs * n).sum(-1).abs(), torch.exp(-m)) + lay.eps
        hs.append(num / den[..., None])
    h = torch.stack(hs)  # (T, N, H, Dv)
    hn = (h - h.mean(-1, keepdim=True)) * torch.rsqrt(h.var(-1, keepdim=True, unbiased=False) + lay.norm_eps)
    hn = hn.reshape(T, N, V) * P["multihead_norm.weight"]
    if lay.use_bias:
        hn = hn + P["multihead_norm.bias"]
    out = (torch.sigmoid(o) * hn) @ P["out_proj.weight"].T
    if lay.use_bias:
        out = out + P["out_proj.bias"]
    return out, C, n, m[..., None]


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max(initial=0.0) / max(np.abs(b).max(initial=0.0), 1e-300))


CONFIGS = [(8, 2, dict()), (6, 3, dict(use_bias=True, weight_mode="fused", qk_dim_factor=1.0, v_dim_factor=0.5)),
           (8, 4, dict(gate_soft_cap=None, eps=0.0, norm_eps=1e-3, v_dim_factor=1.5))]


@pytest.mark.parametrize("scan", SCANS)
@pytest.mark.parametrize("M,H,options", CONFIGS)
def test_outputs_states_and_every_gradient_equal_torch_autograd(M, H, options, scan, monkeypatch):
    torch = require_torch()
    monkeypatch.setattr(ssd, "SSD_CHUNK", 3)  # T = 7: the chunkwise form's chunks of 3, 3 and 1 steps
    lay = layer(M, H, scan=scan, **options)
    u, s0 = inputs(lay, 7, 3)
    out, s_T, cache = lay.forward(u, s0)
    rng = np.random.default_rng(5)
    R = rng.standard_normal(out.shape)
    RC, Rn, Rm = (rng.standard_normal(a.shape) for a in s_T)
    grads, d_u, d_s0 = lay.backward(cache, R, (RC, Rn, Rm))
    P = {k: torch.tensor(v, requires_grad=True) for k, v in lay.params.items()}
    U = torch.tensor(u, requires_grad=True)
    S0 = [torch.tensor(a, requires_grad=True) for a in s0]
    o, C, n, m = torch_reference(torch, lay, P, U, *S0)
    assert rel(out, o.detach()) <= TOL
    for ours, ref in zip(s_T, (C, n, m)):
        assert rel(ours, ref.detach()) <= TOL
    loss = (o * torch.tensor(R)).sum() + (C * torch.tensor(RC)).sum() + (n * torch.tensor(Rn)).sum() \
        + (m * torch.tensor(Rm)).sum()
    loss.backward()
    for k in lay.params:
        assert rel(grads[k], P[k].grad) <= TOL, k
    assert rel(d_u, U.grad) <= TOL
    for ours, ref in zip(d_s0, S0):
        assert rel(ours, ref.grad) <= TOL


def test_the_stabiliser_switches_sides_in_the_tests():
    # the gradient test above must cover both branches of m_t = max(a_t, i_t)
    lay = layer(8, 2)
    u, s0 = inputs(lay, 7, 3)
    *_, cache = lay.forward(u, s0)
    a, i = cache.kernel[5][7], cache.kernel[5][3]
    assert (a > i).any() and (a < i).any()


def test_the_three_scans_agree_across_chunk_boundaries():
    lay = {s: layer(8, 2, scan=s) for s in SCANS}
    u, s0 = inputs(lay["chunkwise"], 150, 2)  # the chunkwise form's chunks are 64 steps
    res = {s: lay[s].forward(u, s0) for s in SCANS}
    R = np.random.default_rng(3).standard_normal(res["chunkwise"][0].shape)
    back = {s: lay[s].backward(res[s][2], R, tuple(np.ones_like(a) for a in res[s][1])) for s in SCANS}
    for s in ("parallel", "sequential"):
        assert rel(res[s][0], res["chunkwise"][0]) <= 1e-12
        for a, b in zip(res[s][1], res["chunkwise"][1]):
            assert rel(a, b) <= 1e-12
        for k in lay[s].params:
            assert rel(back[s][0][k], back["chunkwise"][0][k]) <= 1e-11, k
        assert rel(back[s][1], back["chunkwise"][1]) <= 1e-11
        for a, b in zip(back[s][2], back["chunkwise"][2]):
            assert rel(a, b) <= 1e-11


@pytest.mark.parametrize("scan", SCANS)
def test_gradients_equal_finite_differences(scan):
    lay = layer(4, 2, jitter=0.3, scan=scan, v_dim_factor=1.0)
    u, s0 = inputs(lay, 5, 2)
    s0 = MLSTMState(*(np.array(a) for a in s0))
    rng = np.random.default_rng(7)
    R = rng.standard_normal((5, 2, 4))
    RC, Rn, Rm = (rng.standard_normal(a.shape) for a in s0)

    def loss():
        out, s, _ = lay.forward(u, s0)
        return float((out * R).sum() + (s.C * RC).sum() + (s.n * Rn).sum() + (s.m * Rm).sum())

    out, s, cache = lay.forward(u, s0)
    grads, d_u, d_s0 = lay.backward(cache, R, (RC, Rn, Rm))
    arrays = dict(lay.params, u=u, C0=s0.C, n0=s0.n, m0=s0.m)
    check_grads(loss, arrays, dict(grads, u=d_u, C0=d_s0.C, n0=d_s0.n, m0=d_s0.m), rtol=1e-6, max_entries=12)


def test_record_carry_and_batch_first():
    lay = layer(8, 2)
    u, s0 = inputs(lay, 9, 2)
    out, s_T, cache, states = lay.forward(u, s0, record=True)
    assert states.C.shape == (9, 2, 2, 2, 4) and states.m.shape == (9, 2, 2, 1)
    for t in (0, 4, 8):  # every step's state is the final state of the prefix
        _, s_t, _ = lay.forward(u[:t + 1], s0)
        for a, b in zip(states, s_t):
            assert rel(a[t], b) <= 1e-13
    for a, b in zip(states, s_T):  # the chunkwise form's final state vs the scan's record: round-off
        assert rel(a[-1], b) <= 1e-14
    a, s = lay(u[:4], s0)
    b, s = lay(u[4:], s)
    assert rel(np.concatenate([a, b]), out) <= 1e-13
    for x, y in zip(s, s_T):
        assert rel(x, y) <= 1e-13
    bf = layer(8, 2, batch_first=True)
    o2, s2 = bf(u.transpose(1, 0, 2), s0)
    np.testing.assert_allclose(o2.transpose(1, 0, 2), out, rtol=1e-13, atol=1e-13)
    empty, s_e, c_e = lay.forward(u[:0], s0)
    assert empty.shape == (0, 2, 8) and all(np.array_equal(x, y) for x, y in zip(s_e, s0))
    g, d_u, d_s = lay.backward(c_e, None, (np.ones_like(s0.C), None, np.ones_like(s0.m)))
    assert np.array_equal(d_s.C, np.ones_like(s0.C)) and not d_s.n.any() and not g["out_proj.weight"].any()


def test_float32_runs_end_to_end():
    lay = layer(8, 2, dtype=np.float32)
    u, s0 = inputs(lay, 5, 2)
    out, s, cache = lay.forward(u, s0)
    grads, d_u, d_s = lay.backward(cache, np.ones_like(out))
    assert out.dtype == s.C.dtype == d_u.dtype == grads["q.weight"].dtype == np.float32


def test_memory_is_checked_before_the_states_are_formed(monkeypatch):
    monkeypatch.setattr(resources, "memory_limit", lambda: 10_000)
    lay = layer(8, 2)
    u, s0 = inputs(lay, 40, 2)
    lay.forward(u, s0)  # the chunkwise form forms no per-step state: 40 * 2 * 2 * (2 * 5 + 1) * 8 bytes would not fit
    with pytest.raises(ValueError, match=r"the mLSTM record \(40 steps of 2 x 2 heads of \(2, 4\) matrices, "
                                         r"13\.8 KiB\) needs about 13\.8 KiB of memory; this machine allows 9\.8 KiB"):
        lay.forward(u, s0, record=True)
    with pytest.raises(ValueError, match=r"mLSTM scan='parallel' \(40 steps.*needs about 13\.8 KiB"):
        layer(8, 2, scan="parallel").forward(u, s0)


def test_bad_input_is_refused_clearly():
    lay = layer(8, 2)
    u, s0 = inputs(lay, 3, 2)
    with pytest.raises(ValueError, match=r"u must have shape \(T, N, M\) with M=8; got \(3, 2\)"):
        lay.forward(u[:, :, 0])
    with pytest.raises(ValueError, match=r"state.C must have shape \(N=2, H=2, Dk=2, Dv=4\); got \(1, 2, 2, 4\)"):
        lay.forward(u, MLSTMState(s0.C[:1], s0.n, s0.m))
    with pytest.raises(TypeError, match=r"state must be a MLSTMState \(C, n, m\); got tuple of length 2"):
        lay.forward(u, s0[:2])
    with pytest.raises(ValueError, match="lengths must be None for MLSTMLayer; got list. MLSTMLayer takes whole sequences"):
        lay.forward(u, lengths=[3, 2])
    with pytest.raises(ValueError, match="qk_dim = int.* must be a positive multiple of num_heads=4; got 3"):
        MLSTMLayer(6, 4)
    with pytest.raises(ValueError, match="scan must be one of"):
        MLSTMLayer(8, 2, scan="fast")
    other = layer(8, 2)
    *_, cache = lay.forward(u)
    with pytest.raises(ValueError, match="cache of another MLSTMLayer"):
        other.backward(cache, None)


# ----------------------------------------------------------------------------- transformers' xLSTMLayer


def hf_layer(torch, transformers, lay, *, float64=False):
    """transformers' ``xLSTMLayer`` from a tiny config, with our layer's weights."""
    cfg = transformers.xLSTMConfig(hidden_size=lay.hidden_size, num_heads=lay.num_heads,
                                   qk_dim_factor=lay.qk_dim / lay.hidden_size,
                                   v_dim_factor=lay.v_dim / lay.hidden_size, use_bias=lay.use_bias,
                                   weight_mode=lay.weight_mode, gate_soft_cap=lay.gate_soft_cap,
                                   norm_eps=lay.norm_eps, eps=lay.eps, chunk_size=16, num_hidden_layers=1,
                                   vocab_size=11, norm_reduction_force_float32=not float64)
    if float64:  # the config's validator allows float32/bfloat16/float16 only; the kernels take any torch dtype
        object.__setattr__(cfg, "inference_state_dtype", "float64")
    from transformers.models.xlstm.modeling_xlstm import xLSTMLayer

    hf = xLSTMLayer(cfg).to(torch.float64 if float64 else torch.float32).eval()
    hf.load_state_dict({k: torch.tensor(v) for k, v in lay.params.items()})
    return hf


def transformers_or_skip():
    torch = require_torch()
    transformers = pytest.importorskip("transformers") if not torch_required() else __import__("transformers")
    return torch, transformers


def torch_state(torch, s, dtype):
    return tuple(torch.tensor(a, dtype=dtype) for a in s)


@pytest.mark.parametrize("M,H,options", CONFIGS[:2])
@pytest.mark.parametrize("float64", [False, True])
def test_outputs_and_final_state_equal_transformers_xlstm_layer(M, H, options, float64):
    # T = 13 < chunk_size: transformers' recurrent path (mlstm_recurrent_sequence_native), the same stabiliser
    torch, transformers = transformers_or_skip()
    lay = layer(M, H, batch_first=True, **options)
    hf = hf_layer(torch, transformers, lay, float64=float64)
    u, s0 = inputs(lay, 13, 3)
    u = u.transpose(1, 0, 2)
    dt = torch.float64 if float64 else torch.float32
    with torch.no_grad():
        y, st = hf(torch.tensor(u, dtype=dt), torch_state(torch, s0, dt))
    out, s_T, _ = lay.forward(u, s0)
    tol = 1e-12 if float64 else 1e-5
    assert rel(out, y.numpy()) <= tol
    for ours, ref in zip(s_T, st):
        assert ours.shape == tuple(ref.shape) and rel(ours, ref.numpy()) <= tol


def test_the_chunkwise_path_of_transformers_gives_the_same_outputs_and_state():
    # T = 40 > chunk_size 16: transformers runs two chunks of 16 in its chunkwise form, then 8 recurrent steps;
    # its chunk stabiliser max(g + m_prev, max_j (b_last - b_j + i_j)) is the sequential m written as a
    # segment maximum, so even the stabilised state agrees to round-off
    torch, transformers = transformers_or_skip()
    lay = layer(8, 2, batch_first=True)
    hf = hf_layer(torch, transformers, lay, float64=True)
    u, s0 = inputs(lay, 40, 2)
    u = u.transpose(1, 0, 2)
    with torch.no_grad():
        y, st = hf(torch.tensor(u), torch_state(torch, s0, torch.float64))
    out, s_T, _ = lay.forward(u, s0)
    assert rel(out, y.numpy()) <= 1e-12
    for ours, ref in zip(s_T, st):
        assert rel(ours, ref.numpy()) <= 1e-12


def test_token_by_token_decoding_equals_our_carried_state():
    # transformers' single-step path (mlstm_recurrent_step_native), fed its own returned state
    torch, transformers = transformers_or_skip()
    lay = layer(8, 2, batch_first=True)
    hf = hf_layer(torch, transformers, lay)
    u, _ = inputs(lay, 9, 2)
    u = u.transpose(1, 0, 2)
    full, s_T, _ = lay.forward(u)
    state, got = None, []
    with torch.no_grad():
        for t in range(9):
            y, state = hf(torch.tensor(u[:, t:t + 1], dtype=torch.float32), state)
            got.append(y)
    assert rel(full, torch.cat(got, 1).numpy()) <= 1e-5
    for ours, ref in zip(s_T, state):
        assert rel(ours, ref.numpy()) <= 1e-5
    s = None
    for t in range(9):
        _, s = lay(u[:, t:t + 1], s)
    for a, b in zip(s, s_T):
        assert rel(a, b) <= 1e-13
