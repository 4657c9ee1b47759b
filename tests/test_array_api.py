"""The array-API path (hiddenstate.xp) on torch tensors: equal to torch.nn, to torch autograd and to our NumPy kernels.

Every check here is a function of the torch device, so ``tests/test_gpu.py`` runs the very same
checks on CUDA. On CPU (always, in CI): float64 to 1e-10 against ``torch.nn.RNN/GRU/LSTM`` (outputs,
``h_n``, ``c_n``) and against torch autograd (every parameter, the input, the initial state), for
random configurations (kind, options, layers, directions, h0, batch_first, bias); against our own
NumPy kernels for what torch has no counterpart of (the Cho-form GRU, the sigmoid RNN, minGRU,
minLSTM, lengths, resets, learned initial states, dropout and DropConnect, unbatched input); the
cells and the step maps with their Jacobians; results of the input's type, dtype and device; the
parameter cache never stale; bad input refused with the NumPy path's messages.
"""

import numpy as np
import pytest

from hiddenstate.xp import is_foreign, to_numpy
from tests._torch import require_torch
from tests.strategies import ALL_KINDS, TORCH_KINDS, make_cell, make_layer, state_parts
from tests.test_torch_parity import torch_cell, torch_layer

torch = require_torch()

TOL = {"rtol": 1e-10, "atol": 1e-10}
SEEDS = range(6)


@pytest.fixture(autouse=True)
def _torch_one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def as_torch(a, device):
    """A NumPy array (or a tuple of them, or None) as float64 torch tensors on ``device``."""
    if a is None:
        return None
    if isinstance(a, tuple):
        return tuple(as_torch(p, device) for p in a)
    return torch.from_numpy(np.array(a)).to(device)


def assert_tensor_like(t, reference, device, dtype=torch.float64):
    assert isinstance(t, torch.Tensor), type(t)
    assert t.device.type == torch.device(device).type and t.dtype == dtype
    np.testing.assert_allclose(to_numpy(t), reference, **TOL)


def random_config(rng, kinds):
    """A random layer configuration (kind, sizes, options) and its inputs."""
    kind = kinds[rng.integers(len(kinds))]
    L, bidir, batch_first = int(rng.integers(1, 3)), bool(rng.integers(2)), bool(rng.integers(2))
    T, N, I, H = int(rng.integers(1, 6)), int(rng.integers(1, 4)), int(rng.integers(1, 5)), int(rng.integers(1, 5))
    layer = make_layer(kind, I, H, L, seed=int(rng.integers(1000)), bidirectional=bidir, batch_first=batch_first,
                       bias=bool(rng.integers(4)))  # bias off one time in four
    x = rng.standard_normal((N, T, I) if batch_first else (T, N, I))
    h0 = None
    if rng.integers(3):
        LD = L * layer.num_directions
        h0 = rng.standard_normal((LD, N, H))
        h0 = (h0, rng.standard_normal((LD, N, H))) if layer.is_lstm else h0
    return layer, x, h0


def check_torch_parity(seed, device):
    """Outputs and final states equal torch.nn's; every gradient equals torch autograd's (float64, 1e-10)."""
    rng = np.random.default_rng(seed)
    layer, x, h0 = random_config(rng, TORCH_KINDS)
    mod = torch_layer(layer).to(device)
    out, h_n, cache = layer.forward(as_torch(x, device), as_torch(h0, device))
    tx = torch.tensor(x, requires_grad=True, device=device)
    th = None if h0 is None else tuple(torch.tensor(p, requires_grad=True, device=device) for p in state_parts(h0))
    t_out, t_hn = mod(tx, None if th is None else (th if layer.is_lstm else th[0]))
    assert_tensor_like(out, t_out.detach().cpu().numpy(), device)
    for ours, theirs in zip(state_parts(h_n), state_parts(t_hn)):
        assert_tensor_like(ours, theirs.detach().cpu().numpy(), device)
    d_out = rng.standard_normal(tuple(out.shape))
    d_hn = tuple(rng.standard_normal(tuple(p.shape)) for p in state_parts(h_n))
    loss = (t_out * as_torch(d_out, device)).sum() + sum((p * as_torch(d, device)).sum()
                                                         for p, d in zip(state_parts(t_hn), d_hn))
    loss.backward()
    grads, dx, dh0 = layer.backward(cache, as_torch(d_out, device),
                                    as_torch(d_hn if layer.is_lstm else d_hn[0], device))
    for name, p in mod.named_parameters():
        assert_tensor_like(grads[name], p.grad.cpu().numpy(), device)
    assert_tensor_like(dx, tx.grad.cpu().numpy(), device)
    if th is not None:
        for ours, theirs in zip(state_parts(dh0), th):
            assert_tensor_like(ours, theirs.grad.cpu().numpy(), device)


def check_numpy_parity(seed, device, kinds=ALL_KINDS):
    """Forward and backward equal our NumPy kernels, with lengths, resets, learned h0, dropout, unbatched input."""
    rng = np.random.default_rng(seed)
    layer, x, h0 = random_config(rng, kinds)
    T, N = (x.shape[1], x.shape[0]) if layer.batch_first else x.shape[:2]
    kw = {}
    if rng.integers(2):
        kw["lengths"] = rng.integers(0, T + 1, size=N)
    if rng.integers(2):
        r = rng.random((T, N)) < 0.3
        kw["reset"] = r.T if layer.batch_first else r
    if rng.integers(2) and layer.num_layers > 1:
        layer.dropout = 0.3
    if rng.integers(2) and layer.kind.recurrent:
        layer.weight_drop = 0.25
    if rng.integers(3) == 0 and h0 is None:  # a learned initial state (set to non-zero values)
        layer.learn_h0 = True
        LD = layer.num_layers * layer.num_directions
        for name in ("h0", "c0") if layer.is_lstm else ("h0",):
            layer.params[name] = rng.standard_normal((LD, layer.hidden_size))
        layer.__dict__.pop("_param_spec", None)
    training = bool(layer.dropout or layer.weight_drop)
    results = []
    for convert in (lambda a: a, lambda a: as_torch(a, device)):
        out, h_n, cache = layer.forward(convert(x), convert(h0), training=training, rng=np.random.default_rng(seed),
                                        **kw)
        d_out = np.random.default_rng(seed + 1).standard_normal(tuple(out.shape))
        d_hn = tuple(np.random.default_rng(seed + 2).standard_normal(tuple(p.shape)) for p in state_parts(h_n))
        grads, dx, dh0 = layer.backward(cache, convert(d_out), convert(d_hn if layer.is_lstm else d_hn[0]))
        results.append((out, *state_parts(h_n), dx, *state_parts(dh0), *grads.values()))
    ours, theirs = results[1], results[0]
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert_tensor_like(a, b, device)


@pytest.mark.parametrize("seed", SEEDS)
def test_layers_equal_torch_nn_and_autograd(seed):
    check_torch_parity(seed, "cpu")


@pytest.mark.parametrize("seed", range(12))
def test_layers_equal_the_numpy_kernels(seed):
    check_numpy_parity(seed, "cpu")


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_every_kind_with_lengths_and_resets_equals_numpy(kind):
    for seed in range(2):
        check_numpy_parity(100 + seed, "cpu", kinds=(kind,))


def check_unbatched(device):
    rng = np.random.default_rng(3)
    for kind in ("lstm", "gru", "mingru"):
        layer = make_layer(kind, 3, 4, 2, bidirectional=True, seed=5)
        x = rng.standard_normal((5, 3))
        out, h_n, cache = layer.forward(x)
        t_out, t_hn, t_cache = layer.forward(as_torch(x, device))
        assert tuple(t_out.shape) == (5, 8)
        assert_tensor_like(t_out, out, device)
        for a, b in zip(state_parts(t_hn), state_parts(h_n)):
            assert_tensor_like(a, b, device)
        d = rng.standard_normal((5, 8))
        g, dx, _ = layer.backward(cache, d)
        tg, tdx, _ = layer.backward(t_cache, as_torch(d, device))
        assert_tensor_like(tdx, dx, device)
        for k in g:
            assert_tensor_like(tg[k], g[k], device)


def test_unbatched_input():
    check_unbatched("cpu")


def check_cells_and_step_maps(device):
    """The cells equal torch.nn.*Cell (where torch has the kind) and our NumPy cells; the step map and its Jacobian equal NumPy's."""
    rng = np.random.default_rng(7)
    for kind in ALL_KINDS:
        cell = make_cell(kind, 3, 4, seed=11)
        x, h = rng.standard_normal((2, 3)), rng.standard_normal((2, 4))
        state = (h, rng.standard_normal((2, 4))) if cell.is_lstm else h
        new, cache = cell.forward(x, state)
        t_new, t_cache = cell.forward(as_torch(x, device), as_torch(state, device))
        for a, b in zip(state_parts(t_new), state_parts(new)):
            assert_tensor_like(a, b, device)
        if kind in TORCH_KINDS:
            mod = torch_cell(cell).to(device)
            ref = mod(as_torch(x, device), as_torch(state, device))
            for a, b in zip(state_parts(t_new), state_parts(ref)):
                assert_tensor_like(a, b.detach().cpu().numpy(), device)
        d = tuple(rng.standard_normal((2, 4)) for _ in state_parts(new))
        d = d if cell.is_lstm else d[0]
        grads, dx, dh = cell.backward(cache, d)
        t_grads, t_dx, t_dh = cell.backward(t_cache, as_torch(d, device))
        assert_tensor_like(t_dx, dx, device)
        for a, b in zip(state_parts(t_dh), state_parts(dh)):
            assert_tensor_like(a, b, device)
        for k in grads:
            assert_tensor_like(t_grads[k], grads[k], device)
        S = cell.kind.state_size(4)
        s = rng.standard_normal((2, S))
        ref_step = cell.kind.step(cell.params, x, s, **cell.options)
        step = cell.kind.step(cell.params, as_torch(x, device), as_torch(s, device), **cell.options)
        assert_tensor_like(step.state, ref_step.state, device)
        assert_tensor_like(step.jacobian, ref_step.jacobian, device)
        assert step.record is None
        alone = cell.kind.step(cell.params, as_torch(x, device), as_torch(s, device), jacobian=False, **cell.options)
        assert alone.jacobian is None
        assert_tensor_like(alone.state, ref_step.state, device)


def test_cells_and_step_maps():
    check_cells_and_step_maps("cpu")


def test_the_step_jacobian_equals_finite_differences():
    cell = make_cell("lstm", 3, 2, seed=2)
    x, s = torch.randn(1, 3, dtype=torch.float64), torch.randn(1, 4, dtype=torch.float64)
    J = to_numpy(cell.kind.step(cell.params, x, s).jacobian)[0]
    eps = 1e-6
    for j in range(4):
        e = torch.zeros(1, 4, dtype=torch.float64)
        e[0, j] = eps
        plus = to_numpy(cell.kind.step(cell.params, x, s + e, jacobian=False).state)[0]
        minus = to_numpy(cell.kind.step(cell.params, x, s - e, jacobian=False).state)[0]
        np.testing.assert_allclose(J[:, j], (plus - minus) / (2 * eps), rtol=1e-6, atol=1e-8)


def test_float32_layer_gives_float32_tensors():
    layer = make_layer("gru_after", 3, 4, dtype=np.float32)
    x = np.random.default_rng(0).standard_normal((5, 2, 3))
    out, h_n, _ = layer.forward(torch.from_numpy(x))  # float64 input, float32 layer: computed in float32
    ref, ref_h, _ = layer.forward(x)
    assert out.dtype == torch.float32 and h_n.dtype == torch.float32
    np.testing.assert_allclose(to_numpy(out), ref, rtol=1e-5, atol=1e-6)


def test_the_converted_parameters_are_never_stale():
    layer = make_layer("lstm", 3, 4, seed=1)
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((4, 2, 3)))
    first, _ = layer(x)
    layer.params["weight_hh_l0"] *= 0.5  # in place: the same array object
    second, _ = layer(x)
    np.testing.assert_allclose(to_numpy(second), layer(x.numpy())[0], **TOL)
    assert not np.allclose(to_numpy(first), to_numpy(second))
    layer.load_state_dict({k: np.zeros_like(v) for k, v in layer.params.items()})
    np.testing.assert_array_equal(to_numpy(layer(x)[0]), 0.0)


def test_inputs_are_never_kept_by_reference():
    layer = make_layer("gru", 3, 4, seed=1)
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((4, 2, 3)))
    _, _, cache = layer.forward(x)
    d = torch.ones(4, 2, 4, dtype=torch.float64)
    g1, dx1, _ = layer.backward(cache, d)
    x.mul_(3.0)  # the caller's tensor changes after forward
    g2, dx2, _ = layer.backward(cache, d)
    np.testing.assert_array_equal(to_numpy(g1["weight_ih_l0"]), to_numpy(g2["weight_ih_l0"]))


def test_bad_input_is_refused_with_the_numpy_paths_messages():
    layer = make_layer("gru", 3, 4, seed=1)
    good = torch.zeros(4, 2, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"x must have shape \(T, N, I=3\); got \(4, 2, 5\)"):
        layer(torch.zeros(4, 2, 5, dtype=torch.float64))
    with pytest.raises(TypeError, match="x must be a floating-point array.*torch.bool"):
        layer(torch.zeros(4, 2, 3, dtype=torch.bool))
    bad = good.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="x must be finite; got 1 NaN or Inf"):
        layer(bad)
    with pytest.raises(ValueError, match=r"h0 must have shape .*=\(1, 2, 4\); got \(1, 3, 4\)"):
        layer(good, torch.zeros(1, 3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"lengths"):
        layer(good, lengths=[5, 1])
    _, _, cache = layer.forward(good)
    with pytest.raises(ValueError, match=r"d_output must have shape \(T, N, D\*H\)=\(4, 2, 4\); got \(4, 2, 3\)"):
        layer.backward(cache, torch.zeros(4, 2, 3, dtype=torch.float64))
    other = make_layer("gru", 3, 4, seed=1)
    with pytest.raises(ValueError, match="cache must come from this layer's forward"):
        other.backward(cache, None)
    lstm = make_layer("lstm", 3, 4, seed=1)
    with pytest.raises(TypeError, match=r"h0 must be None or a pair \(h0, c0\)"):
        lstm(good, torch.zeros(1, 2, 4, dtype=torch.float64))


def test_host_arrays_may_be_mixed_in_and_are_copied_over():
    layer = make_layer("lstm", 3, 4, seed=1)
    rng = np.random.default_rng(2)
    x, h, c = rng.standard_normal((4, 2, 3)), rng.standard_normal((1, 2, 4)), rng.standard_normal((1, 2, 4))
    out, (h_n, c_n) = layer(torch.from_numpy(x), (h, torch.from_numpy(c)))
    ref, (ref_h, ref_c) = layer(x, (h, c))
    assert_tensor_like(out, ref, "cpu")
    assert_tensor_like(c_n, ref_c, "cpu")


def test_dispatch_recognises_only_foreign_arrays():
    assert is_foreign(torch.zeros(2))
    assert not any(is_foreign(v) for v in (np.zeros(2), [1.0, 2.0], 3.0, None, np.float64(1.0)))


# -- training on the array-API path --------------------------------------------------------------
def _train_config(tmp_path, cell, **kw):
    data = tmp_path / "text.txt"
    if not data.exists():
        data.write_text("the quick brown fox jumps over the lazy dog; " * 60, encoding="utf-8")
    return {"data": str(data), "cell": cell, "steps": 4, "hidden_size": 10, "num_layers": 2, "seq_len": 8,
            "batch_size": 4, "dtype": "float64", "lr": 3e-2, "eval_every": 2, "save_every": 2, **kw}


def check_training(tmp_path, device, cell, **kw):
    """A few steps on ``device`` give the NumPy run's losses, gradient norms, validation losses and weights (1e-10)."""
    from hiddenstate.train import train

    cfg = _train_config(tmp_path, cell, **kw)
    ref = train({**cfg, "out": str(tmp_path / f"{cell}-numpy")}, progress=False, verbose=False)
    got = train({**cfg, "out": str(tmp_path / f"{cell}-{device}")}, progress=False, verbose=False, device=device)
    for key in ("train_loss", "grad_norm", "val_loss"):
        np.testing.assert_allclose(got.history[key], ref.history[key], **TOL)
    assert got.step == ref.step == cfg["steps"]
    for k, v in ref.model.params.items():
        np.testing.assert_allclose(got.model.params[k], v, **TOL, err_msg=k)
    return ref, got


@pytest.mark.parametrize(("cell", "options"), [
    ("gru", {}),
    ("lstm", {"dropout": 0.2, "weight_drop": 0.1, "embedding_dim": 5, "ema": 0.9}),
    ("rnn", {"clip": 0.05}),  # every step clipped
])
def test_training_on_torch_cpu_follows_the_numpy_run(tmp_path, cell, options):
    check_training(tmp_path, "torch:cpu", cell, **options)


def test_a_cpu_checkpoint_resumes_on_the_device(tmp_path):
    from hiddenstate.train import train

    cfg = _train_config(tmp_path, "gru", dropout=0.1)
    whole = train({**cfg, "out": str(tmp_path / "whole")}, progress=False, verbose=False)
    part = train({**cfg, "out": str(tmp_path / "part")}, progress=False, verbose=False,
                 callback=lambda record: record["step"] == 2)  # stopped after step 2 of 4
    assert part.step == 2
    resumed = train(resume=tmp_path / "part", progress=False, verbose=False, device="torch:cpu")
    np.testing.assert_allclose(resumed.history["train_loss"], whole.history["train_loss"], **TOL)
    for k, v in whole.model.params.items():
        np.testing.assert_allclose(resumed.model.params[k], v, **TOL, err_msg=k)


def test_device_training_refuses_what_it_does_not_train(tmp_path):
    from hiddenstate.train import train

    with pytest.raises(ValueError, match="cell must be gru, lstm or rnn to train on a device other than cpu"):
        train(_train_config(tmp_path, "mingru", out=str(tmp_path / "m")), progress=False, verbose=False,
              device="torch:cpu")
    assert not (tmp_path / "m" / "checkpoint").exists()
    with pytest.raises(ValueError, match="device must be one of"):
        train(_train_config(tmp_path, "gru", out=str(tmp_path / "g")), progress=False, verbose=False, device="tpu")


def test_cli_device_cuda_without_a_gpu_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    from hiddenstate.cli import main

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: tests/test_gpu.py trains on it")
    monkeypatch.setitem(__import__("sys").modules, "cupy", None)  # as if CuPy were not installed
    status = main(["train", "--device", "cuda", "--steps", "2", "--quiet", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1 and err.startswith("hiddenstate: error: --device must name a GPU"), err
    assert not (tmp_path / "run").exists()
