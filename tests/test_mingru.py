"""minGRU and minLSTM (Feng et al. 2024): the scans, the two modes, exact gradients, torch parity.

The references are independent of the kernels: a per-step loop written here, the paper's
equations in torch (differentiated by autograd), finite differences, and the seeds' update
``hidden_state_update``.
"""

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.classic.cells import mingru, minlstm
from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.shared.scan import linear_scan, log_space_scan
from tests._torch import require_torch

KINDS = {"mingru": (hs.MinGRU, mingru), "minlstm": (hs.MinLSTM, minlstm)}
FORMS = [(k, log) for k in KINDS for log in (False, True)]


def loop(a, b, h):
    """h_t = a_t h_{t-1} + b_t, one step at a time."""
    out = np.empty_like(b)
    for t in range(a.shape[0]):
        h = a[t] * h + b[t]
        out[t] = h
    return out


def layer(kind, I, H, L=1, *, seed=0, **options):
    return KINDS[kind][0](I, H, L, rng=np.random.default_rng(seed), **options)


# ---------------------------------------------------------------------------- the scans themselves

@pytest.mark.parametrize("chunk", [1, 5, 16, 256])
def test_linear_scan_equals_the_loop_for_every_length(chunk):
    rng = np.random.default_rng(0)
    for T in [*range(0, 40), 255, 256, 257, 600]:
        a, b, h = rng.uniform(0, 1, (T, 2, 3)), rng.standard_normal((T, 2, 3)), rng.standard_normal((2, 3))
        ref = loop(a, b, h)
        np.testing.assert_allclose(linear_scan(a, b, h, chunk=chunk), ref, rtol=0, atol=1e-14)
        np.testing.assert_allclose(linear_scan(a, b, h, parallel=False), ref, rtol=0, atol=0)
        with np.errstate(under="ignore"):
            pos = np.abs(b) + 1e-3
            got = log_space_scan(np.log(a), np.log(pos), h, chunk=chunk)
        np.testing.assert_allclose(got, loop(a, pos, h), rtol=1e-13, atol=1e-14)


def test_linear_scan_on_time_reversed_views_writes_in_place():
    rng = np.random.default_rng(1)
    a, b, h = rng.uniform(0, 1, (300, 2, 3)), rng.standard_normal((300, 2, 3)), rng.standard_normal((2, 3))
    out = b.copy()
    rev = out[::-1]
    assert linear_scan(a[::-1], rev, h, out=rev, chunk=64) is rev
    np.testing.assert_allclose(out[::-1], loop(a[::-1], b[::-1], h), rtol=0, atol=1e-14)


# ---------------------------------------------------------------------------- the paper's update and ours

@pytest.mark.parametrize("kind, log_space", FORMS)
def test_the_papers_formula_and_the_seeds_update_agree(kind, log_space):
    """h_t = (1 - z) h_{t-1} + z h~ (the paper) = hidden_state_update(keep, h_{t-1}, h~) (the seeds)."""
    rng = np.random.default_rng(2)
    net = layer(kind, 3, 5, log_space=log_space)
    x = rng.standard_normal((6, 2, 3))
    h0 = rng.standard_normal((1, 2, 5))
    lt = hs.trace(net, x, h0)[0]
    gates = lt.gates
    W, b = net.params["weight_ih_l0"], net.params["bias_ih_l0"]
    pre = x @ W.T + b  # (T, N, G*H), independent of the kernel
    sig = lambda a: 1.0 / (1.0 + np.exp(-a))
    act = (lambda p: np.where(p >= 0, p + 0.5, sig(p))) if log_space else (lambda p: p)
    if kind == "mingru":
        z, cand = sig(pre[..., :5]), act(pre[..., 5:])
        np.testing.assert_allclose(gates["z"], z, rtol=1e-14, atol=1e-15)
        paper = (1.0 - z) * lt.h_prev + z * cand  # Feng et al. 2024: z weights the candidate
    else:
        f, i, cand = sig(pre[..., :5]), sig(pre[..., 5:10]), act(pre[..., 10:])
        np.testing.assert_allclose(gates["f"], f, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(gates["i"], i, rtol=1e-14, atol=1e-15)
        z = i / (f + i)
        paper = f / (f + i) * lt.h_prev + z * cand
    np.testing.assert_allclose(gates["keep"], 1.0 - z, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(gates["h_tilde"], cand, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(lt.h, paper, rtol=1e-13, atol=1e-14)
    seeds = np.stack([hs.hidden_state_update(gates["keep"][t], lt.h_prev[t], gates["h_tilde"][t]) for t in range(6)])
    np.testing.assert_allclose(lt.h, seeds, rtol=1e-13, atol=1e-14)
    np.testing.assert_array_equal(lt.h_prev[1:], lt.h[:-1])


# ---------------------------------------------------------------------------- two modes, one function

@pytest.mark.parametrize("kind, log_space", FORMS)
@pytest.mark.parametrize("T", [1, 7, 255, 256, 257, 1000, 10_000])
def test_parallel_equals_sequential_to_1e_12(kind, log_space, T):
    rng = np.random.default_rng(T)
    x = rng.standard_normal((T, 2, 3))
    h0 = rng.standard_normal((1, 2, 4))
    runs = [layer(kind, 3, 4, log_space=log_space, scan=s, seed=1)(x, h0) for s in ("parallel", "sequential")]
    (out_p, hn_p), (out_s, hn_s) = runs
    scale = max(1.0, np.abs(out_s).max())
    assert np.abs(out_p - out_s).max() <= 1e-12 * scale
    assert np.abs(hn_p - hn_s).max() <= 1e-12 * scale


@pytest.mark.parametrize("kind, log_space", FORMS)
def test_parallel_equals_sequential_with_lengths_resets_and_both_directions(kind, log_space):
    rng = np.random.default_rng(3)
    T, N = 700, 4
    x = rng.standard_normal((T, N, 3))
    h0 = rng.standard_normal((4, N, 5))
    lengths = [700, 300, 0, 513]
    reset = rng.random((T, N)) < 0.01
    d_out = rng.standard_normal((T, N, 10))
    res = []
    for scan in ("parallel", "sequential"):
        net = layer(kind, 3, 5, 2, log_space=log_space, scan=scan, bidirectional=True, seed=2)
        out, h_n, cache = net.forward(x, h0, lengths=lengths, reset=reset)
        res.append((out, h_n, *net.backward(cache, d_out, h_n)))
    (o1, n1, g1, dx1, dh1), (o2, n2, g2, dx2, dh2) = res
    for a, b in [(o1, o2), (n1, n2), (dx1, dx2), (dh1, dh2), *((g1[k], g2[k]) for k in g1)]:
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("log_space", [False, True])
def test_100k_steps_with_gates_near_0_and_near_1_stay_finite_and_match(kind, log_space):
    """Products over 100,000 gates of 1e-9 and 1 - 1e-9 underflow to 0 or stay near 1, never overflow."""
    rng = np.random.default_rng(4)
    T, N, H = 100_000, 2, 3
    module = KINDS[kind][1]
    G = 2 if kind == "mingru" else 3
    xw = rng.standard_normal((T, N, G * H))
    edge = np.where(rng.random((T, N, H)) < 0.5, 20.0, -20.0)  # sigmoid(+-20): 2e-9 from 0 or 1
    edge[:, 0, 0] = -20.0 if kind == "mingru" else 20.0  # one unit that keeps its state ~all the time
    if kind == "mingru":
        xw[..., :H] = edge
    else:
        xw[..., :H], xw[..., H:2 * H] = edge, -edge
    h0 = rng.standard_normal((N, H))
    d_hs = rng.standard_normal((T, N, H))
    out = {}
    for scan in ("parallel", "sequential"):
        hs_, final, cache = module.scan_forward(xw, h0, log_space=log_space, scan=scan)
        out[scan] = (hs_, final, *module.scan_backward(cache, d_hs, None))
    for a in out["parallel"]:
        assert a is None or np.all(np.isfinite(a))
    p, s = out["parallel"], out["sequential"]
    for a, b in [(p[0], s[0]), (p[1], s[1]), (p[2], s[2]), (p[5], s[5])]:
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10 * max(1.0, np.abs(b).max()))
    assert abs(p[0][-1, 0, 0] - h0[0, 0]) < 1e-3  # the kept unit still holds h0 after 100,000 steps


# ---------------------------------------------------------------------------- exact gradients

OPTIONS = {
    "plain": {},
    "lengths": {"lengths": [6, 3, 0]},
    "resets": {"reset": True},
    "bidirectional": {"bidirectional": True, "lengths": [6, 2, 5]},
    "two_layers": {"num_layers": 2, "dropout": 0.3},
    "learn_h0": {"learn_h0": True, "reset": True},
    "batch_first": {"batch_first": True},
}


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("kind, log_space", FORMS)
@pytest.mark.parametrize("scan", ["parallel", "sequential"])
def test_gradcheck_parameters_inputs_and_h0(kind, log_space, scan, option):
    rng = np.random.default_rng(5)
    spec = dict(OPTIONS[option])
    lengths, reset = spec.pop("lengths", None), spec.pop("reset", False)
    L = spec.pop("num_layers", 1)
    net = layer(kind, 3, 4, L, log_space=log_space, scan=scan, seed=3, **spec)
    T, N = 6, 3
    x = rng.standard_normal((N, T, 3) if net.batch_first else (T, N, 3))
    LD = L * net.num_directions
    h0 = None if net.learn_h0 else rng.standard_normal((LD, N, 4))
    if net.learn_h0:
        net.params["h0"][...] = rng.standard_normal((LD, 4))
    rmask = (rng.random((T, N)) < 0.3) if reset else None
    if rmask is not None and net.batch_first:
        rmask = rmask.T
    W_out = rng.standard_normal((N, T, 4 * net.num_directions) if net.batch_first else (T, N, 4 * net.num_directions))
    W_fin = rng.standard_normal((LD, N, 4))
    drng = lambda: np.random.default_rng(7)

    def run():
        return net.forward(x, h0, lengths=lengths, reset=rmask, training=True, rng=drng())

    def loss():
        out, h_n, _ = run()
        return float((out * W_out).sum() + (h_n * W_fin).sum())

    _, _, cache = run()
    grads, dx, dh0 = net.backward(cache, W_out, W_fin)
    arrays, analytic = dict(net.params), dict(grads)
    arrays["x"], analytic["x"] = x, dx
    if h0 is not None:
        arrays["h0_in"], analytic["h0_in"] = h0, dh0
    errors = check_grads(loss, arrays, analytic)
    assert max(errors.values()) < 1e-6, errors


@pytest.mark.parametrize("kind, log_space", FORMS)
def test_float32_forward_and_backward_stay_float32_and_close_to_float64(kind, log_space):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((300, 2, 3))
    nets = [layer(kind, 3, 4, 2, log_space=log_space, dtype=dt, seed=4) for dt in (np.float32, np.float64)]
    (o32, h32, c32), (o64, h64, c64) = (n.forward(x) for n in nets)
    g32, dx32, _ = nets[0].backward(c32, np.ones_like(o32))
    g64, dx64, _ = nets[1].backward(c64, np.ones_like(o64))
    assert o32.dtype == h32.dtype == dx32.dtype == np.float32 and all(g.dtype == np.float32 for g in g32.values())
    np.testing.assert_allclose(o32, o64, rtol=1e-4, atol=1e-5)
    for k in g64:
        np.testing.assert_allclose(g32[k], g64[k], rtol=1e-3, atol=1e-3 * max(1.0, np.abs(g64[k]).max()))


# ---------------------------------------------------------------------------- parity with the paper in torch

def torch_reference(torch, kind, log_space, params, x, h0, L):
    """The paper's equations (Feng et al. 2024, Sec. 3 and App. B), one layer after another, in torch.

    Plain form: the sequential mode ``h_t = (1 - z_t) h_{t-1} + z_t h~_t``. Log space: the paper's
    parallel mode, ``parallel_scan_log`` (Heinsen's cumulative sums) of ``log_coeffs`` and
    ``log_values`` with ``log_h0 = log_g(h0)``; our layer is then given ``g(h0)`` as its state.
    """
    F = torch.nn.functional
    log_g = lambda v: torch.where(v >= 0, (F.relu(v) + 0.5).log(), -F.softplus(-v))
    inp, finals = x, []
    for k in range(L):
        W, b = params[f"weight_ih_l{k}"], params[f"bias_ih_l{k}"]
        pre = inp @ W.T + b  # (T, N, G*H)
        H = W.shape[0] // (2 if kind == "mingru" else 3)
        if kind == "mingru":
            k_z, p = pre[..., :H], pre[..., H:]
            log_keep, log_z = -F.softplus(k_z), -F.softplus(-k_z)
        else:
            k_f, k_i, p = pre[..., :H], pre[..., H:2 * H], pre[..., 2 * H:]
            diff = F.softplus(-k_f) - F.softplus(-k_i)  # log i - log f
            log_keep, log_z = -F.softplus(diff), -F.softplus(-diff)  # log f', log i'
        if log_space:
            log_values = torch.cat([log_g(h0[k])[None], log_z + log_g(p)], dim=0)  # (T+1, N, H)
            a_star = F.pad(torch.cumsum(log_keep, dim=0), (0, 0, 0, 0, 1, 0))
            hs_ = torch.exp(a_star + torch.logcumsumexp(log_values - a_star, dim=0))[1:]
        else:
            keep, z, h, outs = torch.exp(log_keep), torch.exp(log_z), h0[k], []
            for t in range(pre.shape[0]):
                h = keep[t] * h + z[t] * p[t]
                outs.append(h)
            hs_ = torch.stack(outs)
        finals.append(hs_[-1])
        inp = hs_
    return inp, torch.stack(finals)


@pytest.mark.parametrize("kind, log_space", FORMS)
@pytest.mark.parametrize("scan", ["parallel", "sequential"])
def test_outputs_and_every_gradient_match_the_papers_equations_in_torch(kind, log_space, scan):
    torch = require_torch()
    rng = np.random.default_rng(8)
    L, T, N = 2, 40, 3
    net = layer(kind, 3, 5, L, log_space=log_space, scan=scan, seed=5)
    x = rng.standard_normal((T, N, 3))
    u = rng.standard_normal((L, N, 5))  # the paper's h_0 (before g in log space)
    h0 = np.where(u >= 0, u + 0.5, 1.0 / (1.0 + np.exp(-u))) if log_space else u
    W_out, W_fin = rng.standard_normal((T, N, 5)), rng.standard_normal((L, N, 5))
    out, h_n, cache = net.forward(x, h0)
    grads, dx, dh0 = net.backward(cache, W_out, W_fin)

    tp = {k: torch.tensor(v, requires_grad=True) for k, v in net.params.items()}
    tx, tu = torch.tensor(x, requires_grad=True), torch.tensor(u, requires_grad=True)
    t_out, t_fin = torch_reference(torch, kind, log_space, tp, tx, tu, L)
    ((t_out * torch.tensor(W_out)).sum() + (t_fin * torch.tensor(W_fin)).sum()).backward()
    np.testing.assert_allclose(out, t_out.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h_n, t_fin.detach().numpy(), rtol=1e-10, atol=1e-12)
    for k in net.params:
        np.testing.assert_allclose(grads[k], tp[k].grad.numpy(), rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-10, atol=1e-11)
    g_prime = np.where(u >= 0, 1.0, h0 * (1.0 - h0)) if log_space else 1.0  # dh0/du through g
    np.testing.assert_allclose(dh0 * g_prime, tu.grad.numpy(), rtol=1e-10, atol=1e-11)


# ---------------------------------------------------------------------------- cells, options, errors

@pytest.mark.parametrize("kind, log_space", FORMS)
def test_the_cell_is_one_step_of_the_layer(kind, log_space):
    rng = np.random.default_rng(9)
    net = layer(kind, 3, 4, log_space=log_space)
    cell_cls = hs.MinGRUCell if kind == "mingru" else hs.MinLSTMCell
    cell = cell_cls(3, 4, log_space=log_space, rng=np.random.default_rng(0))
    cell.params["weight_ih"][...] = net.params["weight_ih_l0"]
    cell.params["bias_ih"][...] = net.params["bias_ih_l0"]
    assert set(cell.params) == {"weight_ih", "bias_ih"} and repr(cell).endswith(f"log_space={log_space}, scan='parallel')")
    x, h = rng.standard_normal((5, 2, 3)), rng.standard_normal((2, 4))
    out, _ = net(x, h[None])
    for t in range(5):
        h = cell(x[t], h)
        np.testing.assert_allclose(h, out[t], rtol=1e-14, atol=1e-15)


def test_options_are_checked_and_the_formats_without_such_layers_refuse():
    with pytest.raises(ValueError, match="scan must be one of"):
        hs.MinGRU(3, 4, scan="cumsum")
    with pytest.raises(TypeError, match="log_space must be a bool"):
        hs.MinLSTM(3, 4, log_space=1)
    with pytest.raises(TypeError, match="weight_drop"):
        hs.MinGRU(3, 4, weight_drop=0.1)
    net = hs.MinGRU(3, 4, rng=np.random.default_rng(0))
    assert net.options == {"log_space": False, "scan": "parallel"} and set(net.params) == {"weight_ih_l0", "bias_ih_l0"}
    from hiddenstate.interop import from_torch, to_keras_weights, to_torch

    with pytest.raises(ValueError, match=r"layer must be an RNN, GRU or LSTM to become a torch module; got a MinGRU"):
        to_torch(net)
    with pytest.raises(ValueError, match=r"to become Keras weights; got a MinLSTM, which has no weight_hh"):
        to_keras_weights(hs.MinLSTM(3, 4))
    with pytest.raises(ValueError, match=r"kind must be a kind with recurrent weights \('rnn', 'gru', 'lstm'\); got"):
        from_torch({}, kind="mingru")


@pytest.mark.parametrize("kind", KINDS)
def test_safetensors_round_trip_rebuilds_the_layer_and_its_options(kind, tmp_path):
    pytest.importorskip("safetensors")
    from hiddenstate.interop import load_safetensors, save_safetensors

    net = layer(kind, 3, 4, 2, log_space=True, scan="sequential", bidirectional=True, learn_h0=True, seed=6)
    net.params["h0"][...] = 0.25
    again = load_safetensors(save_safetensors(net, tmp_path / "min.safetensors"))
    assert type(again) is type(net) and again.options == net.options and again.learn_h0
    assert set(again.params) == set(net.params) and all(np.array_equal(again.params[k], v) for k, v in net.params.items())
    other = layer(kind, 3, 4, 2, log_space=True, bidirectional=True, learn_h0=True, seed=7)  # scan may differ
    load_safetensors(tmp_path / "min.safetensors", other)
    x = np.random.default_rng(0).standard_normal((5, 2, 3))
    np.testing.assert_allclose(other(x)[0], net(x)[0], rtol=1e-13, atol=1e-14)
    with pytest.raises(ValueError, match="was saved with log_space=True; the layer has log_space=False"):
        load_safetensors(tmp_path / "min.safetensors", layer(kind, 3, 4, 2, bidirectional=True, learn_h0=True))
