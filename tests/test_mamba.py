"""The Mamba block (Gu & Dao 2023): both scans, exact BPTT, both initial states, every step's state, carry.

The references are independent of the kernels: the block's equations written again here in torch
float64 (one loop over time, differentiated by autograd), finite differences
(:mod:`hiddenstate.classic.gradcheck`), and prefix re-runs for the per-step states.
"""

import itertools

import numpy as np
import pytest

from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.kinds.ssm.lm import MambaLM
from hiddenstate.kinds.ssm.mamba import Mamba
from hiddenstate.kinds.ssm.mamba_kernel import MambaState
from hiddenstate.shared.scan import CHUNK
from tests._ssm import jittered, ssm_inputs
from tests._torch import require_torch

TOL = 1e-10


def block(M=5, **options):
    return jittered(Mamba, M, **options)


inputs = ssm_inputs


def torch_reference(torch, P, u, h0, c0):
    """The equations of Gu & Dao (2023), Algorithm 2, in transformers' layout, one step per iteration."""
    F = torch.nn.functional
    Di, S = P["A_log"].shape
    K, R = P["conv1d.weight"].shape[-1], P["dt_proj.weight"].shape[1]
    T = u.shape[0]
    xz = u @ P["in_proj.weight"].T
    if "in_proj.bias" in P:
        xz = xz + P["in_proj.bias"]
    x, z = xz[..., :Di], xz[..., Di:]
    window = torch.cat([c0.permute(2, 0, 1), x], 0)  # (K-1+T, N, Di)
    A = -torch.exp(P["A_log"])
    h, outs = h0, []
    for t in range(T):
        c = sum(P["conv1d.weight"][:, 0, k] * window[t + k] for k in range(K))
        if "conv1d.bias" in P:
            c = c + P["conv1d.bias"]
        a = F.silu(c)
        dbc = a @ P["x_proj.weight"].T
        r, B, C = dbc[:, :R], dbc[:, R:R + S], dbc[:, R + S:]
        dt = F.softplus(r @ P["dt_proj.weight"].T + P["dt_proj.bias"])  # (N, Di)
        h = torch.exp(dt[..., None] * A) * h + (dt * a)[..., None] * B[:, None, :]
        y = (h * C[:, None, :]).sum(-1) + P["D"] * a
        o = (y * F.silu(z[t])) @ P["out_proj.weight"].T
        outs.append(o + P["out_proj.bias"] if "out_proj.bias" in P else o)
    out = torch.stack(outs) if outs else u.new_zeros(u.shape[:2] + (P["out_proj.weight"].shape[0],))
    return out, h, window[T:].permute(1, 2, 0)


def rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max(initial=0.0) / max(np.abs(b).max(initial=0.0), 1e-300))


CONFIGS = [dict(d_state=4, d_conv=4, expand=2), dict(d_state=16, d_conv=2, expand=1, dt_rank=3),
           dict(d_state=8, d_conv=3, expand=2, bias=True), dict(d_state=4, d_conv=1, conv_bias=False)]


@pytest.mark.parametrize("scan", ["parallel", "sequential"])
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("T", [0, 1, 2, 9])
def test_forward_and_every_gradient_equal_torch_autograd_float64(scan, config, T):
    torch = require_torch()
    b = block(scan=scan, **config)
    u, h0, c0 = inputs(b, T, 3)
    out, (hT, cT), cache = b.forward(u, (h0, c0))
    rng = np.random.default_rng(2)
    d_out, d_h, d_c = rng.standard_normal(out.shape), rng.standard_normal(hT.shape), rng.standard_normal(cT.shape)
    grads, d_u, (d_h0, d_c0) = b.backward(cache, d_out, (d_h, d_c))

    P = {k: torch.tensor(v, requires_grad=True) for k, v in b.params.items()}
    ut, h0t, c0t = (torch.tensor(a, requires_grad=True) for a in (u, h0, c0))
    o, h, c = torch_reference(torch, P, ut, h0t, c0t)
    for got, want in ((out, o), (hT, h), (cT, c)):
        assert rel(got, want.detach().numpy()) < TOL
    loss = (o * torch.tensor(d_out)).sum() + (h * torch.tensor(d_h)).sum() + (c * torch.tensor(d_c)).sum()
    if loss.requires_grad:
        loss.backward()
    assert set(grads) == set(b.params)
    for k, t in P.items():
        assert rel(grads[k], np.zeros(t.shape) if t.grad is None else t.grad.numpy()) < TOL, k
    for got, t in ((d_u, ut), (d_h0, h0t), (d_c0, c0t)):
        assert rel(got, np.zeros(t.shape) if t.grad is None else t.grad.numpy()) < TOL


@pytest.mark.parametrize("ragged", [False, True])
def test_gradcheck_every_parameter_the_input_and_both_initial_states(ragged):
    b = block(4, d_state=3, d_conv=3, expand=2, bias=True)
    u, h0, c0 = inputs(b, 6, 2)
    rng = np.random.default_rng(3)
    w_out, w_h, w_c = rng.standard_normal((6, 2, 4)), rng.standard_normal(h0.shape), rng.standard_normal(c0.shape)
    extra = dict(lengths=[6, 4], reset=np.array([[0, 0], [0, 0], [0, 1], [1, 0], [0, 0], [0, 0]], dtype=bool)) \
        if ragged else {}

    def loss():
        out, (h, c), _ = b.forward(u, (h0, c0), **extra)
        return float((out * w_out).sum() + (h * w_h).sum() + (c * w_c).sum())

    _, _, cache = b.forward(u, (h0, c0), **extra)
    grads, d_u, (d_h0, d_c0) = b.backward(cache, w_out, (w_h, w_c))
    errs = check_grads(loss, {**b.params, "u": u, "h0": h0, "conv0": c0}, {**grads, "u": d_u, "h0": d_h0, "conv0": d_c0},
                       rtol=1e-6, max_entries=None)
    assert max(errs.values()) < 1e-6


def test_parallel_and_sequential_scans_agree_across_chunk_boundaries():
    b = block(3, d_state=4, d_conv=3, expand=1)
    u, h0, c0 = inputs(b, CHUNK + 37, 2)
    res = {}
    for scan in ("parallel", "sequential"):
        b.scan = scan
        out, st, cache = b.forward(u, (h0, c0))
        res[scan] = (out, st, b.backward(cache, np.cos(out), (np.sin(st.ssm), None)))
    (o1, s1, (g1, du1, d1)), (o2, s2, (g2, du2, d2)) = res["parallel"], res["sequential"]
    assert rel(o1, o2) < 1e-12 and rel(s1.ssm, s2.ssm) < 1e-12
    assert max(rel(g1[k], g2[k]) for k in g1) < 1e-12
    assert rel(du1, du2) < 1e-12 and rel(d1.ssm, d2.ssm) < 1e-12 and rel(d1.conv, d2.conv) < 1e-12


def test_every_step_state_equals_the_final_state_of_its_prefix():
    # what users of the reference kernels do by re-running prefixes (state-spaces/mamba#518), in one call
    b = block(4, d_state=5, d_conv=4)
    u, h0, c0 = inputs(b, 7, 2)
    out, final, _, rec = b.forward(u, (h0, c0), record=True)
    assert rec.ssm.shape == (7, 2, b.d_inner, 5) and rec.conv.shape == (7, 2, b.d_inner, 3)
    for t in range(7):
        _, st = b(u[:t + 1], (h0, c0))
        np.testing.assert_allclose(rec.ssm[t], st.ssm, rtol=1e-13, atol=1e-14)
        np.testing.assert_array_equal(rec.conv[t], st.conv)
    np.testing.assert_array_equal(rec.ssm[-1], final.ssm)
    A = -np.exp(b.params["A_log"])
    np.testing.assert_allclose(rec.decay, np.exp(rec.dt[..., None] * A), rtol=1e-15)
    assert (rec.decay > 0).all() and (rec.decay <= 1).all() and (rec.dt > 0).all()


def test_zero_initial_states_and_batch_first_and_float32():
    b = block(4, d_state=4)
    u, _, _ = inputs(b, 5, 2)
    zero = b.initial_state(2)
    np.testing.assert_array_equal(b(u)[0], b(u, zero)[0])
    bf = block(4, d_state=4, batch_first=True)
    np.testing.assert_array_equal(bf(u.transpose(1, 0, 2))[0], b(u)[0].transpose(1, 0, 2))
    f32 = block(4, d_state=4, dtype=np.float32)
    out, st = f32(u)
    assert out.dtype == np.float32 and st.ssm.dtype == np.float32
    assert rel(out, b(u)[0]) < 1e-5


def test_rows_are_independent():
    b = block(4, d_state=4)
    u, h0, c0 = inputs(b, 6, 3)
    out, st = b(u, (h0, c0))
    for n in range(3):
        o, s = b(u[:, n:n + 1], (h0[n:n + 1], c0[n:n + 1]))
        np.testing.assert_allclose(o[:, 0], out[:, n], rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(s.ssm[0], st.ssm[n], rtol=1e-13, atol=1e-14)


def test_bad_states_and_inputs_are_refused_with_the_rule():
    b = block(4, d_state=4, d_conv=3)
    u, h0, c0 = inputs(b, 3, 2)
    with pytest.raises(ValueError, match=r"state\.ssm must have shape \(N=2, Di=8, S=4\); got \(8, 4\)"):
        b(u, (h0[0], c0))
    with pytest.raises(ValueError, match=r"state\.conv must have shape \(N=2, Di=8, K-1=2\)"):
        b(u, (h0, c0[..., :1]))
    with pytest.raises(ValueError, match="scan must be one of parallel, sequential"):
        Mamba(4, scan="fast")


def test_lm_gradients_equal_finite_differences_and_carry_states():
    rng = np.random.default_rng(5)
    lm = MambaLM(7, 4, 2, d_state=3, d_conv=3, expand=2, rng=rng)
    for v in lm.params.values():
        v += 0.3 * rng.standard_normal(v.shape)
    ids = rng.integers(0, 7, (2, 5))
    w = rng.standard_normal((2, 5, 7))
    w_h = [rng.standard_normal((2, 8, 3)) for _ in range(2)]

    def loss():
        logits, states, _ = lm.forward(ids)
        return float((logits * w).sum() + sum((s.ssm * wh).sum() for s, wh in zip(states, w_h)))

    _, _, cache = lm.forward(ids)
    grads, _ = lm.backward(cache, w, [MambaState(wh, None) for wh in w_h])
    check_grads(loss, dict(lm.params), grads, rtol=1e-6, max_entries=32)
    # two calls with the states carried give the logits of one
    full, fin = lm(ids)
    a, s = lm(ids[:, :3])
    b, s2 = lm(ids[:, 3:], s)
    np.testing.assert_allclose(np.concatenate([a, b], axis=1), full, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(s2[1].ssm, fin[1].ssm, rtol=1e-12, atol=1e-13)


# ---------------------------------------------------------------------------- the array-API reference step

@pytest.mark.parametrize("config", CONFIGS)
def test_the_array_api_reference_loop_equals_the_kernels(config):
    import array_api_compat.numpy as xnp

    from hiddenstate.kinds.ssm import reference as xp_mamba

    b = block(**config)
    u, h0, c0 = inputs(b, 8, 2)
    out, final, _ = b.forward(u, (h0, c0))
    o, h, c = xp_mamba.run(xnp, b.params, u, h0, c0)
    assert rel(o, out) < 1e-13 and rel(h, final.ssm) < 1e-13
    np.testing.assert_array_equal(c, final.conv)


def test_torch_tensors_run_in_torch_and_autograd_through_the_reference_equals_our_bptt():
    torch = require_torch()
    b = block(5, d_state=4, d_conv=3, batch_first=True)
    u, h0, c0 = inputs(b, 6, 2)
    ub = u.transpose(1, 0, 2)
    out, final, cache = b.forward(ub, (h0, c0))
    got, st, _ = b.forward(torch.tensor(ub), (torch.tensor(h0), torch.tensor(c0)))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
    assert rel(got.numpy(), out) < 1e-13 and rel(st.ssm.numpy(), final.ssm) < 1e-13
    assert rel(st.conv.numpy(), final.conv) < 1e-13  # torch's matmul rounds its own way
    # autograd through the readable one-step form: the same gradients as the kernels' BPTT
    import array_api_compat.torch as xt

    from hiddenstate.kinds.ssm import reference as xp_mamba

    P = {k: torch.tensor(v, requires_grad=True) for k, v in b.params.items()}
    ut, h0t, c0t = (torch.tensor(a, requires_grad=True) for a in (u, h0, c0))
    o, h, c = xp_mamba.run(xt, P, ut, h0t, c0t)
    (o.sum() + (h ** 2).sum()).backward()
    grads, d_u, d0 = b.backward(cache, np.ones_like(out), (2 * final.ssm, None))
    for k in P:
        assert rel(grads[k], P[k].grad.numpy()) < TOL, k
    assert rel(d_u.transpose(1, 0, 2), ut.grad.numpy()) < TOL
    assert rel(d0.ssm, h0t.grad.numpy()) < TOL and rel(d0.conv, c0t.grad.numpy()) < TOL
    with pytest.raises(ValueError, match="record must be False for an input of another array library"):
        b.forward(torch.tensor(ub), record=True)


# ---------------------------------------------------------------------------- ragged batches

@pytest.mark.parametrize("scan", ["parallel", "sequential"])
def test_a_ragged_batch_equals_each_row_run_alone_to_its_length_with_its_gradients(scan):
    b = block(4, d_state=3, d_conv=4, scan=scan)
    T, lengths = 7, [7, 2, 0, 5]
    u, h0, c0 = inputs(b, T, 4)
    out, final, cache, rec = b.forward(u, (h0, c0), lengths=lengths, record=True)
    rng = np.random.default_rng(6)
    d_out, d_h, d_c = rng.standard_normal(out.shape), rng.standard_normal(final.ssm.shape), rng.standard_normal(final.conv.shape)
    grads, d_u, d0 = b.backward(cache, d_out, (d_h, d_c))
    total = {k: np.zeros_like(v) for k, v in b.params.items()}
    for n, L in enumerate(lengths):
        sl = slice(n, n + 1)
        o, st, k1, r1 = b.forward(u[:L, sl], (h0[sl], c0[sl]), record=True)
        np.testing.assert_allclose(out[:L, n], o[:, 0], rtol=1e-12, atol=1e-13)
        assert not out[L:, n].any()  # zero past the length
        np.testing.assert_allclose(final.ssm[n], st.ssm[0], rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(final.conv[n], st.conv[0], rtol=1e-13, atol=1e-14)  # one row's matmul rounds alike
        np.testing.assert_allclose(rec.ssm[L:, n], np.broadcast_to(st.ssm[0], rec.ssm[L:, n].shape), rtol=1e-12, atol=1e-13)
        np.testing.assert_array_equal(rec.conv[L:, n], np.broadcast_to(final.conv[n], rec.conv[L:, n].shape))
        g, du, d = b.backward(k1, d_out[:L, sl], (d_h[sl], d_c[sl]))
        for k in total:
            total[k] += g[k]
        np.testing.assert_allclose(d_u[:L, n], du[:, 0], rtol=1e-11, atol=1e-12)
        assert not d_u[L:, n].any()
        np.testing.assert_allclose(d0.ssm[n], d.ssm[0], rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(d0.conv[n], d.conv[0], rtol=1e-11, atol=1e-12)
    for k in total:
        np.testing.assert_allclose(grads[k], total[k], rtol=1e-11, atol=1e-12)
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=7\]"):
        b.forward(u, lengths=[8, 1, 1, 1])


def test_the_lm_refuses_bad_ids_and_gradients_with_the_rule():
    m = MambaLM(7, 4, 1, d_state=2, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"ids must lie in \[0, V=7\); got values in \[0, 7\]"):
        m(np.array([[0, 7]]))
    with pytest.raises(TypeError, match="ids must be an array of integer token ids; got dtype float64"):
        m(np.zeros((1, 2)))
    with pytest.raises(ValueError, match=r"ids must have shape \(N, T\); got \(3,\)"):
        m(np.zeros(3, dtype=int))
    with pytest.raises(ValueError, match="states must hold one state per layer"):
        m(np.zeros((1, 2), dtype=int), [None, None])
    _, _, cache = m.forward(np.zeros((2, 3), dtype=int))
    with pytest.raises(ValueError, match=r"d_logits must have the logits' shape \(2, 3, 7\); got \(3, 2, 7\)"):
        m.backward(cache, np.zeros((3, 2, 7)))


@pytest.mark.parametrize("scan", ["parallel", "sequential"])
def test_resets_restart_both_states_and_equal_separate_runs_with_their_gradients(scan):
    b = block(4, d_state=3, d_conv=4, scan=scan)
    T = 9
    u, h0, c0 = inputs(b, T, 3)
    reset = np.zeros((T, 3), dtype=bool)
    reset[[3, 0, 5, 8], [0, 1, 1, 2]] = True  # row 2's reset lies past its length: ignored
    lengths = [9, 8, 6]
    out, final, cache, rec = b.forward(u, (h0, c0), lengths=lengths, reset=reset, record=True)
    rng = np.random.default_rng(7)
    d_out, d_h, d_c = rng.standard_normal(out.shape), rng.standard_normal(final.ssm.shape), rng.standard_normal(final.conv.shape)
    grads, d_u, d0 = b.backward(cache, d_out, (d_h, d_c))
    total = {k: np.zeros_like(v) for k, v in b.params.items()}
    for n, L in enumerate(lengths):
        cuts = [0] + [t for t in range(1, L) if reset[t, n]] + [L]
        sl = slice(n, n + 1)
        dh0, dc0 = np.zeros_like(h0[sl]), np.zeros_like(c0[sl])
        for i, (s0, s1) in enumerate(itertools.pairwise(cuts)):
            o, st, k1, r1 = b.forward(u[s0:s1, sl], (h0[sl], c0[sl]), record=True)
            np.testing.assert_allclose(out[s0:s1, n], o[:, 0], rtol=1e-12, atol=1e-13)
            np.testing.assert_allclose(rec.conv[s0:s1, n], r1.conv[:, 0], rtol=1e-13, atol=1e-14)
            last = i == len(cuts) - 2
            g, du, d = b.backward(k1, d_out[s0:s1, sl], (d_h[sl], d_c[sl]) if last else None)
            for k in total:
                total[k] += g[k]
            np.testing.assert_allclose(d_u[s0:s1, n], du[:, 0], rtol=1e-11, atol=1e-12)
            dh0 += d.ssm
            dc0 += d.conv
        np.testing.assert_allclose(final.ssm[n], st.ssm[0], rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(final.conv[n], st.conv[0], rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(d0.ssm[n], dh0[0], rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(d0.conv[n], dc0[0], rtol=1e-11, atol=1e-12)
    for k in total:
        np.testing.assert_allclose(grads[k], total[k], rtol=1e-11, atol=1e-12)
    with pytest.raises(TypeError, match="reset"):
        b.forward(u, reset=np.zeros((T, 3)))
