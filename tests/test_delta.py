"""The gated delta rule / KDA kernel: a float64 torch-autograd reference, finite differences, sequential == chunked.

The reference below is the per-step recurrence of transformers' ``torch_recurrent_gated_delta_rule``
(and ``recurrent_kimi_delta_attention`` for a per-channel decay) written again in float64 torch;
autograd gives its gradients. Our two forms (the per-step loop and the chunked WY/UT form) are
held to it at 1e-10 relative: outputs, final state, every step's state, every gradient.
"""

import numpy as np
import pytest

from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.kinds.delta.kernel import delta_backward, delta_forward, delta_states
from tests._torch import require_torch

RTOL = 1e-10


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def inputs(rng, T=11, N=2, H=3, Dk=4, Dv=5, *, per_channel=False, strong=False, dtype=np.float64):
    """Random q, k (unit norm, as the layers give them), v, g <= 0, beta in (0, 1), S0."""
    q = rng.standard_normal((T, N, H, Dk)) / np.sqrt(Dk)
    k = rng.standard_normal((T, N, H, Dk))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((T, N, H, Dv))
    gshape = (T, N, H, Dk) if per_channel else (T, N, H)
    g = -rng.uniform(0.0, 30.0 if strong else 0.7, size=gshape)
    beta = rng.uniform(0.05, 1.0, size=(T, N, H))
    S0 = rng.standard_normal((N, H, Dk, Dv))
    return [a.astype(dtype) for a in (q, k, v, g, beta, S0)]


def torch_reference(q, k, v, g, beta, S0, d_o, d_S):
    """Outputs, every state and the gradients by autograd of the per-step recurrence, float64."""
    torch = require_torch()
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v, g, beta, S0)]
    tq, tk, tv, tg, tb, tS = ts
    S, outs, states = tS, [], []
    for t in range(q.shape[0]):
        a = tg[t].exp()
        a = a[..., None, None] if g.ndim == 3 else a[..., None]
        P = a * S
        u = tb[t][..., None] * (tv[t] - (P * tk[t][..., :, None]).sum(-2))
        S = P + tk[t][..., :, None] * u[..., None, :]
        outs.append((S * tq[t][..., :, None]).sum(-2))
        states.append(S)
    o = torch.stack(outs)
    loss = (o * torch.tensor(d_o)).sum() + (S * torch.tensor(d_S)).sum()
    loss.backward()
    return o.detach().numpy(), torch.stack(states).detach().numpy(), [x.grad.numpy() for x in ts]


FORMS = [None, 4, 64]  # sequential; chunks of 4 (crossing boundaries, a ragged last chunk); one chunk


@pytest.mark.parametrize("chunk", FORMS)
@pytest.mark.parametrize("per_channel", [False, True])
def test_outputs_states_and_gradients_equal_a_torch_autograd_reference(rng, chunk, per_channel):
    q, k, v, g, beta, S0 = inputs(rng, per_channel=per_channel)
    d_o, d_S = rng.standard_normal(v.shape), rng.standard_normal(S0.shape)
    o_ref, states_ref, grads_ref = torch_reference(q, k, v, g, beta, S0, d_o, d_S)
    o, S_T, cache = delta_forward(q, k, v, g, beta, S0, chunk=chunk)
    assert rel(o, o_ref) <= RTOL
    assert rel(S_T, states_ref[-1]) <= RTOL
    assert rel(delta_states(cache), states_ref) <= RTOL
    grads = delta_backward(cache, d_o, d_S)
    for name, ours, ref in zip(("q", "k", "v", "g", "beta", "S0"), grads, grads_ref):
        assert ours.shape == ref.shape, name
        assert rel(ours, ref) <= RTOL, (name, rel(ours, ref))


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("T", [1, 7, 8, 9, 33])
def test_chunked_equals_sequential_to_round_off_across_chunk_boundaries(rng, per_channel, T):
    args = inputs(rng, T=T, N=2, H=2, Dk=6, Dv=3, per_channel=per_channel)
    d_o, d_S = rng.standard_normal(args[2].shape), rng.standard_normal(args[5].shape)
    o1, S1, c1 = delta_forward(*args)
    g1 = delta_backward(c1, d_o, d_S)
    for chunk in (1, 3, 8, 16, 40):  # 40: sub-blocks of 16, 16 and 8 rows
        o2, S2, c2 = delta_forward(*args, chunk=chunk)
        assert rel(o2, o1) <= 1e-12 and rel(S2, S1) <= 1e-12
        assert rel(delta_states(c2), delta_states(c1)) <= 1e-12
        for a, b in zip(delta_backward(c2, d_o, d_S), g1):
            assert rel(a, b) <= 1e-11


@pytest.mark.parametrize("limit", [None, 1.0])
def test_a_strong_per_channel_decay_neither_overflows_nor_loses_agreement(rng, monkeypatch, limit):
    # decays down to exp(-30) per step: spans of hundreds inside a chunk, products that must not overflow;
    # limit=1: every diagonal sub-block takes the exact (n, n, Dk) sum instead of the product
    from hiddenstate.kinds.delta import chunked as delta_chunk

    if limit is not None:
        monkeypatch.setitem(delta_chunk.SPAN_LIMIT, np.dtype(np.float64), limit)
    args = inputs(rng, T=70, N=1, H=2, Dk=4, Dv=3, per_channel=True, strong=True)
    d_o, d_S = rng.standard_normal(args[2].shape), rng.standard_normal(args[5].shape)
    o1, S1, c1 = delta_forward(*args)
    o2, S2, c2 = delta_forward(*args, chunk=64)
    assert np.isfinite(o2).all() and rel(o2, o1) <= 1e-12 and rel(S2, S1) <= 1e-12
    for a, b in zip(delta_backward(c2, d_o, d_S), delta_backward(c1, d_o, d_S)):
        assert rel(a, b) <= 1e-11


def test_a_strong_decay_in_float32_stays_finite_and_close(rng):
    args = inputs(rng, T=70, N=1, H=2, Dk=4, Dv=3, per_channel=True, strong=True)
    o64, S64, _ = delta_forward(*args)
    o, S, cache = delta_forward(*[a.astype(np.float32) for a in args], chunk=64)
    assert rel(o, o64) <= 1e-5 and rel(S, S64) <= 1e-5
    assert all(np.isfinite(x).all() for x in delta_backward(cache, np.ones_like(o), np.ones_like(S)))


@pytest.mark.parametrize("chunk", [None, 3])
@pytest.mark.parametrize("per_channel", [False, True])
def test_gradients_equal_finite_differences(rng, chunk, per_channel):
    q, k, v, g, beta, S0 = arrays = inputs(rng, T=7, N=2, H=2, Dk=3, Dv=2, per_channel=per_channel)
    d_o, d_S = rng.standard_normal(v.shape), rng.standard_normal(S0.shape)

    def loss():
        o, S_T, _ = delta_forward(q, k, v, g, beta, S0, chunk=chunk)
        return float((o * d_o).sum() + (S_T * d_S).sum())

    _, _, cache = delta_forward(*arrays, chunk=chunk)
    grads = delta_backward(cache, d_o, d_S)
    names = ("q", "k", "v", "g", "beta", "S0")
    check_grads(loss, dict(zip(names, arrays)), dict(zip(names, grads)), rtol=1e-6)


def test_no_output_gradient_and_no_state_gradient(rng):
    args = inputs(rng, T=5)
    for chunk in (None, 2):
        _, _, cache = delta_forward(*args, chunk=chunk)
        assert all(np.all(x == 0) for x in delta_backward(cache, None, None))


def test_zero_steps_return_the_initial_state(rng):
    q, k, v, g, beta, S0 = inputs(rng, T=0)
    for chunk in (None, 4):
        o, S_T, cache = delta_forward(q, k, v, g, beta, S0, chunk=chunk)
        assert o.shape == (0,) + v.shape[1:] and np.array_equal(S_T, S0) and S_T is not S0
        assert delta_states(cache).shape == (0,) + S0.shape


def test_beta_one_and_no_decay_overwrite_the_key_direction(rng):
    # hand math: with exp(g) = 1 and beta = 1, S_1^T k = v exactly (the delta rule writes v at k)
    q, k, v, g, beta, S0 = inputs(rng, T=1)
    o, S_T, _ = delta_forward(q, k, v, np.zeros_like(g), np.ones_like(beta), S0)
    read = np.einsum("nhkv,nhk->nhv", S_T, k[0])
    assert rel(read, v[0]) <= 1e-14


def test_float32_runs_in_float32(rng):
    args = inputs(rng, dtype=np.float32, per_channel=True)
    for chunk in (None, 4):
        o, S_T, cache = delta_forward(*args, chunk=chunk)
        assert o.dtype == S_T.dtype == np.float32
        assert all(x.dtype == np.float32 for x in delta_backward(cache, np.ones_like(o), None))


@pytest.mark.parametrize("library", ["numpy", "torch"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_the_array_api_reference_step_equals_the_kernels(rng, library, per_channel):
    from hiddenstate.kinds.delta import reference as ref
    from hiddenstate.xp.arrays import namespace

    args = inputs(rng, T=9, per_channel=per_channel)
    d_o, d_S = rng.standard_normal(args[2].shape), rng.standard_normal(args[5].shape)
    conv = (lambda a: a) if library == "numpy" else require_torch().from_numpy
    xs = [conv(a) for a in args]
    xp, _ = namespace(xs[0])
    o, S_T, saved = ref.scan(xp, *xs)
    grads = ref.scan_backward(xp, saved, conv(d_o), conv(d_S))
    for chunk in (None, 4):
        o2, S2, cache = delta_forward(*args, chunk=chunk)
        assert rel(np.asarray(o), o2) <= 1e-12 and rel(np.asarray(S_T), S2) <= 1e-12
        for a, b in zip(grads, delta_backward(cache, d_o, d_S)):
            assert rel(np.asarray(a), b) <= 1e-12
