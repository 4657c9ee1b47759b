"""The Mamba block on torch tensors (hiddenstate.kinds.ssm.reference): forward and exact BPTT in torch, equal to the NumPy kernels.

Every check is a function of the torch device, so ``tests/test_gpu.py`` runs the same checks on
CUDA. The references are independent of the array-API adjoint: our NumPy kernels (whole-sequence
products and the Brent-Kung scan, :mod:`hiddenstate.kinds.ssm.mamba_kernel`), and torch autograd through the
array-API forward loop (:func:`hiddenstate.kinds.ssm.reference.run`), both in float64, with lengths, resets,
both initial states and ``batch_first``.
"""

import numpy as np
import pytest

from hiddenstate.kinds.ssm import reference as xp_mamba
from hiddenstate.kinds.ssm.mamba_kernel import MambaState
from hiddenstate.kinds.ssm.reference import MambaXPCache
from hiddenstate.xp import to_numpy
from tests._torch import require_torch
from tests.test_mamba import block, inputs, rel

torch = require_torch()

TOL = 1e-12
CONFIGS = [dict(d_state=4, d_conv=4, expand=2), dict(d_state=8, d_conv=3, expand=2, bias=True, scan="sequential"),
           dict(d_state=4, d_conv=1, conv_bias=False), dict(d_state=3, d_conv=2, expand=1, dt_rank=2)]


@pytest.fixture(autouse=True)
def _torch_one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def tensor(a, device):
    return torch.from_numpy(np.array(a)).to(device)


def assert_close_tensor(t, reference, device, dtype=torch.float64, tol=TOL, what=""):
    assert isinstance(t, torch.Tensor), (what, type(t))
    assert t.device.type == torch.device(device).type and t.dtype == dtype, (what, t.device, t.dtype)
    assert tuple(t.shape) == tuple(np.shape(reference)), (what, tuple(t.shape), np.shape(reference))
    assert rel(to_numpy(t), reference) < tol, (what, rel(to_numpy(t), reference))


def ragged_case(b, seed, T=7, N=4):
    """Inputs of a block, random lengths (0 and T included) and resets, in the block's layout."""
    rng = np.random.default_rng(seed)
    u, h0, c0 = inputs(b, T, N, seed=seed)
    lengths = np.array([T, 0, *rng.integers(1, T + 1, size=N - 2)])
    reset = rng.random((T, N)) < 0.25
    reset[3, 0] = True  # row 0 restarts mid-sequence for sure
    if b.batch_first:
        u, reset = u.transpose(1, 0, 2), reset.T
    return u, h0, c0, lengths, reset


def check_equals_the_numpy_kernels(device, config, batch_first, seed=0):
    """Forward (output, both final states) and backward (every parameter, d_u, d_h0, d_conv0) equal the kernels."""
    b = block(4, seed=seed, batch_first=batch_first, **config)
    u, h0, c0, lengths, reset = ragged_case(b, seed + 1)
    out, final, cache = b.forward(u, (h0, c0), lengths=lengths, reset=reset)
    o_t, f_t, c_t = b.forward(tensor(u, device), (tensor(h0, device), tensor(c0, device)),
                              lengths=tensor(lengths, device), reset=tensor(reset, device))
    assert isinstance(c_t, MambaXPCache) and isinstance(f_t, MambaState)
    assert_close_tensor(o_t, out, device, what="out")
    assert_close_tensor(f_t.ssm, final.ssm, device, what="ssm")
    assert_close_tensor(f_t.conv, final.conv, device, what="conv")
    rng = np.random.default_rng(seed + 2)
    d_out, d_h, d_c = (rng.standard_normal(a.shape) for a in (out, final.ssm, final.conv))
    grads, d_u, d0 = b.backward(cache, d_out, (d_h, d_c))
    g_t, du_t, d0_t = b.backward(c_t, tensor(d_out, device), (tensor(d_h, device), tensor(d_c, device)))
    assert list(g_t) == list(b.params)
    for k in grads:
        assert_close_tensor(g_t[k], grads[k], device, what=k)
    assert_close_tensor(du_t, d_u, device, what="d_u")
    assert_close_tensor(d0_t.ssm, d0.ssm, device, what="d_h0")
    assert_close_tensor(d0_t.conv, d0.conv, device, what="d_conv0")


def check_autograd_through_the_forward_loop(device, seed=3):
    """torch autograd through xp.mamba.run (lengths and resets as masks) gives what the array-API adjoint gives."""
    import array_api_compat.torch as xt

    b = block(4, seed=seed, d_state=3, d_conv=3, expand=2, bias=True)
    u, h0, c0, lengths, reset = ragged_case(b, seed, T=6, N=3)
    T = u.shape[0]
    keep = np.arange(T)[:, None] < lengths[None, :]
    rng = np.random.default_rng(seed + 1)
    P = {k: tensor(v, device).requires_grad_(True) for k, v in b.params.items()}
    ut, h0t, c0t = (tensor(a, device).requires_grad_(True) for a in (u, h0, c0))
    o, h, c = xp_mamba.run(xt, P, ut, h0t, c0t, tensor(keep, device), tensor(reset, device))
    d_out, d_h, d_c = (rng.standard_normal(tuple(a.shape)) for a in (o, h, c))
    ((o * tensor(d_out, device)).sum() + (h * tensor(d_h, device)).sum() + (c * tensor(d_c, device)).sum()).backward()
    out, final, cache = b.forward(tensor(u, device), (tensor(h0, device), tensor(c0, device)), lengths=lengths,
                                  reset=reset)
    assert_close_tensor(out, o.detach().cpu().numpy(), device, what="out")
    grads, d_u, d0 = b.backward(cache, tensor(d_out, device), (tensor(d_h, device), tensor(d_c, device)))
    for k in P:
        assert_close_tensor(grads[k], P[k].grad.cpu().numpy(), device, what=k)
    assert_close_tensor(d_u, ut.grad.cpu().numpy(), device, what="d_u")
    assert_close_tensor(d0.ssm, h0t.grad.cpu().numpy(), device, what="d_h0")
    assert_close_tensor(d0.conv, c0t.grad.cpu().numpy(), device, what="d_conv0")


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("config", CONFIGS)
def test_forward_and_backward_on_torch_equal_the_numpy_kernels(config, batch_first):
    check_equals_the_numpy_kernels("cpu", config, batch_first)


def test_torch_autograd_through_the_reference_loop_equals_the_array_api_adjoint():
    check_autograd_through_the_forward_loop("cpu")


def test_the_array_api_backward_without_lengths_resets_or_states_and_carried_chunks():
    b = block(4, d_state=4, d_conv=3)
    u, _, _ = inputs(b, 6, 2)
    out, final, cache = b.forward(u)
    o_t, f_t, c_t = b.forward(torch.from_numpy(u))
    grads, d_u, d0 = b.backward(cache, np.ones_like(out))  # d_state_n None: the final states take no gradient
    g_t, du_t, d0_t = b.backward(c_t, torch.ones_like(o_t))
    for k in grads:
        assert_close_tensor(g_t[k], grads[k], "cpu", what=k)
    assert_close_tensor(du_t, d_u, "cpu")
    assert_close_tensor(d0_t.ssm, d0.ssm, "cpu")
    assert_close_tensor(d0_t.conv, d0.conv, "cpu")
    g_t, du_t, d0_t = b.backward(c_t, None, (None, torch.ones_like(f_t.conv)))  # only the conv state's gradient
    grads, d_u, d0 = b.backward(cache, None, (None, np.ones_like(final.conv)))
    for k in grads:
        assert_close_tensor(g_t[k], grads[k], "cpu", what=k)
    assert_close_tensor(d0_t.conv, d0.conv, "cpu")
    # two chunks with the state carried (as torch tensors) give one call
    a, s = b(torch.from_numpy(u[:4]))
    c, s = b(torch.from_numpy(u[4:]), s)
    assert_close_tensor(torch.cat([a, c]), out, "cpu")
    assert_close_tensor(s.ssm, final.ssm, "cpu")
    # T = 0: the initial states come back, the gradients are zeros of the right shapes
    o0, f0, k0 = b.forward(torch.zeros(0, 2, 4, dtype=torch.float64))
    g0, du0, d00 = b.backward(k0, torch.zeros(0, 2, 4, dtype=torch.float64), (torch.ones_like(f0.ssm), None))
    assert tuple(o0.shape) == (0, 2, 4) and tuple(du0.shape) == (0, 2, 4) and not f0.ssm.any()
    assert all(not g.any() and g.shape == b.params[k].shape for k, g in g0.items())
    assert bool((d00.ssm == 1).all()) and not d00.conv.any()


def test_a_float32_block_gives_float32_tensors():
    b = block(3, d_state=2, d_conv=2, dtype=np.float32)
    u = np.random.default_rng(0).standard_normal((5, 2, 3))
    out, final, cache = b.forward(u.astype(np.float32), lengths=[5, 2])
    o_t, f_t, c_t = b.forward(torch.from_numpy(u), lengths=[5, 2])  # float64 input: cast to the block's dtype
    assert_close_tensor(o_t, out, "cpu", torch.float32, tol=1e-5)
    g_t, du_t, d0_t = b.backward(c_t, torch.ones_like(o_t))
    grads, d_u, d0 = b.backward(cache, np.ones_like(out))
    for k in grads:
        assert_close_tensor(g_t[k], grads[k], "cpu", torch.float32, tol=1e-4, what=k)
    assert d0_t.ssm.dtype == torch.float32


def test_bad_input_on_the_array_api_path_is_refused_with_the_rule():
    b = block(4, d_state=3, d_conv=3, batch_first=True)
    u = torch.zeros(2, 5, 4, dtype=torch.float64)  # (N, T, M)
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=5\]"):
        b.forward(u, lengths=[6, 1])
    with pytest.raises(ValueError, match=r"lengths must have shape \(N=2,\)"):
        b.forward(u, lengths=[1, 2, 3])
    with pytest.raises(TypeError, match="lengths must be an integer array"):
        b.forward(u, lengths=torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"reset must have shape \(2, 5\); got \(5, 2\)"):
        b.forward(u, reset=torch.zeros(5, 2, dtype=torch.bool))  # batch_first: (N, T)
    with pytest.raises(TypeError, match="reset must be a bool array"):
        b.forward(u, reset=torch.zeros(2, 5))
    with pytest.raises(ValueError, match="record must be False for an input of another array library"):
        b.forward(u, record=True)
    with pytest.raises(ValueError, match=r"state.ssm must have shape \(N, Di, S\)=\(2, 8, 3\)"):
        b.forward(u, (torch.zeros(1, 8, 3, dtype=torch.float64), torch.zeros(2, 8, 2, dtype=torch.float64)))
    out, _, cache = b.forward(u)
    with pytest.raises(ValueError, match=r"d_out must have shape \(N, T, M\)=\(2, 5, 4\); got \(5, 2, 4\)"):
        b.backward(cache, torch.zeros(5, 2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"d_state_n.conv must have shape \(N, Di, K-1\)=\(2, 8, 2\)"):
        b.backward(cache, None, (None, torch.zeros(2, 8, 3, dtype=torch.float64)))
    with pytest.raises(TypeError, match="d_state_n must be a pair"):
        b.backward(cache, None, torch.zeros(2, 8, 3))
    with pytest.raises(ValueError, match="d_out must be finite"):
        b.backward(cache, torch.full((2, 5, 4), float("nan"), dtype=torch.float64))
    with pytest.raises(ValueError, match="cache must come from this layer's forward"):
        block(4, d_state=3, d_conv=3, batch_first=True).backward(cache, None)
