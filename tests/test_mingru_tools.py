"""The hidden-state tools on minGRU/minLSTM, and the character model built from them (MinStack).

For a linear recurrence the step Jacobian is ``diag(keep)``, so every gradient-flow quantity has
a closed form in the recorded keep gates, computed here by hand; the character model's stack is
checked against finite differences and against the same equations written in torch.
"""

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.probe.gatestats import gate_statistics
from hiddenstate.probe.gradflow import hidden_gradient_norms, jacobian_flow, step_jacobians
from hiddenstate.train.blocks import MinStack
from hiddenstate.train.model import CharRNN
from tests._torch import require_torch

LAYERS = [(hs.MinGRU, False), (hs.MinGRU, True), (hs.MinLSTM, False), (hs.MinLSTM, True)]


@pytest.mark.parametrize("cls, log_space", LAYERS)
def test_trace_records_the_kernels_gates_per_layer_and_direction(cls, log_space):
    rng = np.random.default_rng(0)
    net = cls(3, 4, 2, log_space=log_space, bidirectional=True, rng=rng)
    x = rng.standard_normal((7, 2, 3))
    tr = hs.trace(net, x, lengths=[7, 5])
    out, _ = net(x, lengths=[7, 5])
    np.testing.assert_allclose(tr.output, out, rtol=0, atol=1e-15)
    assert tr.kind == net.kind.name and len(tr) == 4
    for lt in tr:
        assert set(lt.gates) == set(net.kind.gates) and set(lt.preacts) == set(net.kind.preacts)
        W, b = lt.weights["weight_ih"], lt.weights["bias_ih"]
        pre = lt.x @ W.T + b  # (T, N, G*H): what the kernel read, recomputed from the trace's input
        valid = lt.mask[:, :, None]
        sig = 1.0 / (1.0 + np.exp(-pre))
        first = "z" if net.kind.name == "mingru" else "f"
        np.testing.assert_allclose(lt.gates[first], np.where(valid, sig[..., :4], 0.0), rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(lt.preacts[first], np.where(valid, pre[..., :4], 0.0), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(tr[1, 0].x, np.concatenate([tr[0, 0].h, tr[0, 1].h], axis=2), rtol=0, atol=0)


@pytest.mark.parametrize("cls, log_space", LAYERS)
def test_the_jacobian_product_is_the_product_of_the_keep_gates(cls, log_space):
    rng = np.random.default_rng(1)
    net = cls(3, 5, log_space=log_space, rng=rng)
    x = rng.standard_normal((12, 4, 3))
    lt = hs.trace(net, x)[0]
    keep = lt.gates["keep"]  # (T, N, H)
    J = step_jacobians(lt)
    np.testing.assert_array_equal(J, np.eye(5) * keep[..., None, :])
    flow = jacobian_flow(lt, max_lag=12)
    for k in range(13):
        prod = np.prod(keep[12 - k:], axis=0)  # (N, H): dh_T/dh_{T-k} = diag(prod of the last k keeps)
        np.testing.assert_allclose(flow.spectral[k], prod.max(axis=1).mean(), rtol=1e-12)
        np.testing.assert_allclose(flow.frobenius[k], np.sqrt((prod ** 2).sum(axis=1)).mean(), rtol=1e-12)


@pytest.mark.parametrize("cls, log_space", LAYERS)
def test_bptt_gradient_norms_against_lag_are_the_products_of_the_keep_gates(cls, log_space):
    rng = np.random.default_rng(2)
    net = cls(3, 4, log_space=log_space, rng=rng)
    x = rng.standard_normal((10, 3, 3))
    v = rng.standard_normal((3, 4))
    gn = hidden_gradient_norms(net, x, dh_last=v)
    keep = hs.trace(net, x)[0].gates["keep"]
    for t in range(10):
        expect = np.linalg.norm(v * np.prod(keep[t + 1:], axis=0), axis=1)  # dL/dh_t = v * prod_{s>t} keep_s
        np.testing.assert_allclose(gn.per_sequence[0, t], expect, rtol=1e-12, atol=1e-15)


def test_gate_statistics_time_constants_and_the_unique_fixed_point():
    rng = np.random.default_rng(3)
    net = hs.MinGRU(3, 6, rng=rng)
    x = rng.standard_normal((50, 4, 3))
    lt = hs.trace(net, x)[0]
    stats = gate_statistics(lt.gates["keep"], mask=lt.mask, name="layer 0 keep")
    np.testing.assert_allclose(stats.time_constant, 1.0 / (1.0 - lt.gates["keep"].mean(axis=(0, 1))), rtol=1e-12)
    from hiddenstate.probe.fixedpoints import find_fixed_points, layer_map

    u = rng.standard_normal(3)
    F, J = layer_map(net, u)
    pre = net.params["weight_ih_l0"] @ u + net.params["bias_ih_l0"]
    z, cand = 1.0 / (1.0 + np.exp(-pre[:6])), pre[6:]
    fps = find_fixed_points(F, J, rng.standard_normal((4, 6)))
    for fp in fps:  # h = (1 - z) h + z h~ has the one fixed point h~, stable with eigenvalues 1 - z
        np.testing.assert_allclose(fp.h, cand, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.sort(np.abs(fp.eigenvalues)), np.sort(1.0 - z), rtol=1e-6)


@pytest.mark.parametrize("cls", [hs.MinGRU, hs.MinLSTM])
def test_analyze_model_and_the_report_on_a_linear_recurrence(cls, tmp_path):
    rng = np.random.default_rng(4)
    net = cls(5, 8, 2, log_space=cls is hs.MinLSTM, rng=rng)
    ids = rng.integers(0, 5, (80, 3))
    text = "".join("abcde"[i] for i in ids[:, 0])
    an = hs.analyze_model(net, np.eye(5)[ids], tokens=ids, text=text, n_fixed_point_starts=4)
    assert [g.name for g in an.gates] == ["layer 0 keep", "layer 1 keep"]
    assert an.bounds == [] and an.memory is not None and an.jacobian is not None
    assert an.gradient_norms.norm.shape == (2, 80) and len(an.fixed_points) >= 1
    assert any("keep gate of unit" in k for k in an.text_units)
    path = hs.build_report(tmp_path / "report.html", an)
    html = path.read_text(encoding="utf-8")
    assert "keep gate of unit" in html and html.count("data:image/png") >= 4  # the keep gate's row in the text view


# ---------------------------------------------------------------------------- the character model's stack

def stack_reference(torch, stack, x, h0):
    """MinStack's equations in torch: minGRU/minLSTM per the paper, the state shift, RMS norms, GELU (tanh) MLPs."""
    F = torch.nn.functional
    p = {k: torch.tensor(v, requires_grad=True) for k, v in stack.params.items()}
    rms = lambda v, g: v / torch.sqrt((v * v).mean(-1, keepdim=True) + 1e-6) * g
    H, finals, s = stack.hidden_size, [], None
    for k in range(stack.num_layers):
        u = x if k == 0 else rms(s, p[f"norm_l{k}"])
        pre = u @ p[f"weight_ih_l{k}"].T + p[f"bias_ih_l{k}"]
        if stack.cell == "mingru":
            z, cand = torch.sigmoid(pre[..., :H]), pre[..., H:]
        else:
            f, i, cand = torch.sigmoid(pre[..., :H]), torch.sigmoid(pre[..., H:2 * H]), pre[..., 2 * H:]
            z = i / (f + i)
        h, hs_, prev = h0[k], [], []
        for t in range(x.shape[0]):
            prev.append(h)
            h = (1 - z[t]) * h + z[t] * cand[t]
            hs_.append(h)
        finals.append(h)
        branch = torch.stack(hs_) + torch.stack(prev) @ p[f"shift_weight_l{k}"].T  # h_t + S h_{t-1}
        s = branch if k == 0 else s + branch
        a = rms(s, p[f"ff_norm_l{k}"]) @ p[f"ff_in_weight_l{k}"].T + p[f"ff_in_bias_l{k}"]
        s = s + F.gelu(a, approximate="tanh") @ p[f"ff_out_weight_l{k}"].T + p[f"ff_out_bias_l{k}"]
    return rms(s, p["norm_out"]), torch.stack(finals), p


@pytest.mark.parametrize("cell", ["mingru", "minlstm"])
def test_the_stack_matches_its_equations_in_torch_outputs_and_every_gradient(cell):
    torch = require_torch()
    rng = np.random.default_rng(5)
    stack = MinStack(4, 6, 3, cell=cell, rng=rng)
    x, h0 = rng.standard_normal((9, 2, 4)), rng.standard_normal((3, 2, 6))
    W_out, W_fin = rng.standard_normal((9, 2, 6)), rng.standard_normal((3, 2, 6))
    out, h_n, cache = stack.forward(x, h0)
    grads, dx, dh0 = stack.backward(cache, W_out, W_fin)
    tx, th0 = torch.tensor(x, requires_grad=True), torch.tensor(h0, requires_grad=True)
    t_out, t_fin, tp = stack_reference(torch, stack, tx, th0)
    ((t_out * torch.tensor(W_out)).sum() + (t_fin * torch.tensor(W_fin)).sum()).backward()
    np.testing.assert_allclose(out, t_out.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h_n, t_fin.detach().numpy(), rtol=1e-10, atol=1e-12)
    for k in stack.params:
        np.testing.assert_allclose(grads[k], tp[k].grad.numpy(), rtol=1e-10, atol=1e-11, err_msg=k)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(dh0, th0.grad.numpy(), rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("cell", ["mingru", "minlstm"])
@pytest.mark.parametrize("log_space, scan", [(False, "sequential"), (True, "parallel")])
def test_gradcheck_the_stack_with_dropout_lengths_and_resets(cell, log_space, scan):
    rng = np.random.default_rng(6)
    stack = MinStack(3, 4, 2, cell=cell, log_space=log_space, scan=scan, dropout=0.3, rng=rng)
    x, h0 = rng.standard_normal((6, 3, 3)), rng.standard_normal((2, 3, 4))
    reset = rng.random((6, 3)) < 0.3
    W_out, W_fin = rng.standard_normal((6, 3, 4)), rng.standard_normal((2, 3, 4))

    def run():
        return stack.forward(x, h0, lengths=[6, 2, 5], reset=reset, training=True, rng=np.random.default_rng(1))

    def loss():
        out, h_n, _ = run()
        return float((out * W_out).sum() + (h_n * W_fin).sum())

    out, _, cache = run()
    assert np.all(out[2:, 1] == 0.0)  # padding
    grads, dx, dh0 = stack.backward(cache, W_out, W_fin)
    errors = check_grads(loss, {**stack.params, "x": x, "h0": h0}, {**grads, "x": dx, "h0": dh0})
    assert max(errors.values()) < 1e-6, errors


@pytest.mark.parametrize("cell", ["mingru", "minlstm"])
def test_char_model_gradcheck_carried_state_and_sampling(cell):
    rng = np.random.default_rng(7)
    model = CharRNN(7, 5, 2, cell=cell, embedding_dim=4, dropout=0.2, rng=np.random.default_rng(0))
    assert isinstance(model.rnn, MinStack) and "rnn.ff_in_weight_l1" in model.params and model.weight_drop == 0.0
    inputs, targets = rng.integers(0, 7, (6, 3)), rng.integers(0, 7, (6, 3))
    state = 0.5 * rng.standard_normal((2, 3, 5))
    loss, grads, _ = model.loss_and_grads(inputs, targets, state, training=True, rng=np.random.default_rng(2))

    def f():
        return model.loss(inputs, targets, state, training=True, rng=np.random.default_rng(2))[0]

    check_grads(f, model.params, grads, rtol=1e-6, max_entries=24)
    whole, s_whole, _ = model.forward(inputs)
    first, s, _ = model.forward(inputs[:4])
    second, s, _ = model.forward(inputs[4:], s)
    np.testing.assert_allclose(np.concatenate([first, second]), whole, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(s, s_whole, rtol=1e-12, atol=1e-13)
    a = model.sample(np.array([1, 2]), 20, rng=np.random.default_rng(3))
    assert np.array_equal(a, model.sample(np.array([1, 2]), 20, rng=np.random.default_rng(3)))
    with pytest.raises(ValueError, match=f"weight_drop must be 0 for cell='{cell}', which has no recurrent weights"):
        CharRNN(7, 5, cell=cell, weight_drop=0.2)


def test_inspecting_a_char_model_of_min_blocks_sees_what_each_layer_read(tmp_path):
    rng = np.random.default_rng(8)
    model = CharRNN(6, 8, 2, cell="mingru", rng=np.random.default_rng(0))
    ids = rng.integers(0, 6, (40, 1))
    tr = hs.trace(model.rnn, model.embed(ids))
    logits, _, _ = model.forward(ids)
    np.testing.assert_allclose(tr[0].x, model.embed(ids), rtol=0, atol=0)
    assert not np.allclose(tr[1].x, tr[0].h)  # layer 1 reads the normalised residual stream, not layer 0's state
    out, _ = model.rnn(model.embed(ids))
    np.testing.assert_allclose(out @ model.params["decoder.weight"].T + model.params["decoder.bias"], logits,
                               rtol=1e-12, atol=1e-12)
    an = hs.analyze_model(model.rnn, model.embed(ids), tokens=ids, n_fixed_point_starts=2)
    assert [g.name for g in an.gates] == ["layer 0 keep", "layer 1 keep"] and an.gradient_norms.norm.shape == (2, 40)
    hs.build_report(tmp_path / "r.html", an)
