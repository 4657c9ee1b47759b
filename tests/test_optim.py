"""Adam, SGD and global-norm clipping, with torch.optim as the float64 oracle."""
import numpy as np
import pytest

from _torch import require_torch
from hiddenstate.train.optim import SGD, Adam, ExponentialMovingAverage, clip_grad_norm

SHAPES = {"weight_ih_l0": (12, 3), "weight_hh_l0": (12, 4), "bias_ih_l0": (12,), "h0": (1, 4)}


def make_params(rng, dtype=np.float64):
    return {k: rng.standard_normal(s).astype(dtype) for k, s in SHAPES.items()}


def make_grads(rng, scale=1.0):
    return {k: scale * rng.standard_normal(s) for k, s in SHAPES.items()}


def torch_run(torch, optimizer_cls, params, grad_seq, **kwargs):
    """Apply the same gradient sequence with a torch optimizer; return the final parameters."""
    tensors = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    opt = optimizer_cls(list(tensors.values()), **kwargs)
    for grads in grad_seq:
        for k, t in tensors.items():
            t.grad = torch.tensor(grads[k], dtype=torch.float64)
        opt.step()
    return {k: t.detach().numpy() for k, t in tensors.items()}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lr": 2e-3},  # our default; torch's is 1e-3
        {"lr": 0.05, "betas": (0.8, 0.99), "eps": 1e-6},
        {"lr": 0.01, "weight_decay": 0.1},
    ],
)
def test_adam_matches_torch(rng, kwargs):
    torch = require_torch()
    params = make_params(rng)
    grad_seq = [make_grads(rng, scale=10.0 ** rng.integers(-4, 2)) for _ in range(7)]
    expected = torch_run(torch, torch.optim.Adam, params, grad_seq, **kwargs)
    ours = {k: v.copy() for k, v in params.items()}
    opt = Adam(ours, **kwargs)
    for grads in grad_seq:
        opt.step(grads)
    assert opt.step_count == 7
    for k in params:
        np.testing.assert_allclose(ours[k], expected[k], rtol=0, atol=1e-12, err_msg=k)
        assert not np.array_equal(ours[k], params[k])


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_matches_torch(rng, momentum):
    torch = require_torch()
    params = make_params(rng)
    grad_seq = [make_grads(rng) for _ in range(5)]
    expected = torch_run(torch, torch.optim.SGD, params, grad_seq, lr=0.1, momentum=momentum)
    ours = {k: v.copy() for k, v in params.items()}
    opt = SGD(ours, lr=0.1, momentum=momentum)
    for grads in grad_seq:
        opt.step(grads)
    for k in params:
        np.testing.assert_allclose(ours[k], expected[k], rtol=0, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("decay", [0.5, 0.999])
def test_ema_matches_torch_averaged_model(rng, decay):
    torch = require_torch()
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    params = make_params(rng)
    grad_seq = [make_grads(rng) for _ in range(6)]
    module = torch.nn.Module()
    for k, v in params.items():
        module.register_parameter(k, torch.nn.Parameter(torch.from_numpy(v.copy())))
    averaged = AveragedModel(module, multi_avg_fn=get_ema_multi_avg_fn(decay))
    ours = {k: v.copy() for k, v in params.items()}
    ema = ExponentialMovingAverage(ours, decay=decay)
    for grads in grad_seq:
        with torch.no_grad():
            for k, p in module.named_parameters():
                p -= 0.1 * torch.from_numpy(grads[k])
        averaged.update_parameters(module)
        for k in ours:
            ours[k] -= 0.1 * grads[k]
        ema.update()
    assert ema.n_averaged == 6 == int(averaged.n_averaged)
    expected = {k.removeprefix("module."): p.detach().numpy() for k, p in averaged.named_parameters()}
    for k in params:
        np.testing.assert_allclose(ema.average[k], expected[k], rtol=0, atol=1e-14, err_msg=k)
        assert not np.allclose(ema.average[k], ours[k])


def test_ema_by_hand_and_state_round_trip():
    params = {"w": np.array([0.0, 4.0])}
    ema = ExponentialMovingAverage(params, decay=0.75)
    ema.update()                      # copies: [0, 4]
    params["w"][:] = [8.0, 0.0]
    ema.update()                      # 0.75 * [0, 4] + 0.25 * [8, 0] = [2, 3]
    np.testing.assert_array_equal(ema.average["w"], [2.0, 3.0])
    other = ExponentialMovingAverage(params, decay=0.75)
    other.load_state_dict(ema.state_dict())
    params["w"][:] = [2.0, 7.0]
    ema.update(), other.update()      # [2, 4]
    np.testing.assert_array_equal(other.average["w"], [2.0, 4.0])
    np.testing.assert_array_equal(other.average["w"], ema.average["w"])
    assert other.n_averaged == 3
    with pytest.raises(ValueError, match=r"decay must be a number in \(0, 1\); got 1.0"):
        ExponentialMovingAverage(params, decay=1.0)
    with pytest.raises(TypeError, match="decay must be a number; got str '0.9'"):
        ExponentialMovingAverage(params, decay="0.9")
    with pytest.raises(ValueError, match="state must have keys"):
        other.load_state_dict({"step": np.array(1)})


def test_adam_first_step_moves_each_weight_by_lr(rng):
    # With bias correction, step 1 is lr * g / (|g| + eps'): every weight moves by almost exactly lr.
    params = make_params(rng)
    before = {k: v.copy() for k, v in params.items()}
    grads = make_grads(rng)
    Adam(params, lr=0.01, eps=0.0).step(grads)
    for k in params:
        np.testing.assert_allclose(before[k] - params[k], 0.01 * np.sign(grads[k]), rtol=1e-12)


def test_adam_updates_in_place_and_leaves_grads_alone(rng):
    params = make_params(rng)
    arrays = dict(params)
    grads = make_grads(rng)
    grads_before = {k: v.copy() for k, v in grads.items()}
    Adam(params, weight_decay=0.1).step(grads)
    for k in params:
        assert params[k] is arrays[k]
        np.testing.assert_array_equal(grads[k], grads_before[k])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_adam_is_bit_for_bit_the_formula_in_torchs_order(rng, dtype, weight_decay):
    # in-place moments and update: every number must be the one the textbook expression in torch's
    # order of operations gives, in float32 as in float64 (the float32 runs are not held to torch)
    params = make_params(rng, dtype)
    ours = {k: v.copy() for k, v in params.items()}
    opt = Adam(ours, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=weight_decay)
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v2 = {k: np.zeros_like(v) for k, v in params.items()}
    for t in range(1, 6):
        grads = {k: g.astype(dtype) for k, g in make_grads(rng, scale=10.0 ** rng.integers(-4, 2)).items()}
        opt.step(grads)
        for k, p in params.items():
            g = grads[k] + weight_decay * p if weight_decay else grads[k]
            m[k] = 0.8 * m[k] + (1 - 0.8) * g
            v2[k] = 0.99 * v2[k] + (1 - 0.99) * g * g
            p -= 0.01 / (1 - 0.8**t) * m[k] / (np.sqrt(v2[k]) / (1 - 0.99**t) ** 0.5 + 1e-6)
    for k in params:
        assert ours[k].dtype == dtype
        np.testing.assert_array_equal(ours[k], params[k], err_msg=k)


def test_adam_float32_stays_float32(rng):
    params = make_params(rng, np.float32)
    opt = Adam(params)
    opt.step({k: g.astype(np.float32) for k, g in make_grads(rng).items()})
    assert all(p.dtype == np.float32 for p in params.values())
    assert all(v.dtype == np.float32 for v in opt.state_dict().values() if v.ndim)


@pytest.mark.parametrize("cls", [Adam, SGD])
def test_state_dict_resumes_exactly(rng, cls):
    kwargs = {"lr": 0.01} if cls is Adam else {"lr": 0.01, "momentum": 0.9}
    params = make_params(rng)
    grad_seq = [make_grads(rng) for _ in range(6)]

    straight = {k: v.copy() for k, v in params.items()}
    opt = cls(straight, **kwargs)
    for grads in grad_seq:
        opt.step(grads)

    first = {k: v.copy() for k, v in params.items()}
    opt1 = cls(first, **kwargs)
    for grads in grad_seq[:3]:
        opt1.step(grads)
    state = opt1.state_dict()
    at_step_3 = {k: v.copy() for k, v in first.items()}
    assert state["step"].shape == () and int(state["step"]) == 3
    opt1.step(grad_seq[3])  # must not leak into the saved state: it holds copies

    resumed = cls(at_step_3, **kwargs)
    resumed.load_state_dict(state)
    for grads in grad_seq[3:]:
        resumed.step(grads)
    for k in params:
        np.testing.assert_array_equal(at_step_3[k], straight[k])


def test_load_state_dict_validates_before_changing_anything(rng):
    params = make_params(rng)
    opt = Adam(params)
    opt.step(make_grads(rng))
    state = opt.state_dict()
    bad_shape = {**state, "exp_avg.h0": np.zeros((2, 4))}
    with pytest.raises(ValueError, match=r"state\['exp_avg.h0'\] must have shape \(1, 4\) and dtype float64"):
        opt.load_state_dict(bad_shape)
    with pytest.raises(ValueError, match=r"missing \['exp_avg_sq.h0'\], unexpected \[\]"):
        opt.load_state_dict({k: v for k, v in state.items() if k != "exp_avg_sq.h0"})
    with pytest.raises(ValueError, match=r"state\['step'\] must be a non-negative integer"):
        opt.load_state_dict({**state, "step": np.array(1.5)})
    with pytest.raises(TypeError, match=r"state must be a dict"):
        opt.load_state_dict(None)
    assert opt.step_count == 1
    for k, v in opt.state_dict().items():
        np.testing.assert_array_equal(v, state[k])


def test_optimizer_argument_errors(rng):
    params = make_params(rng)
    with pytest.raises(ValueError, match=r"lr must be a finite number > 0; got 0"):
        Adam(params, lr=0)
    with pytest.raises(ValueError, match=r"betas\[1\] must be a number in \[0, 1\); got 1.0"):
        Adam(params, betas=(0.9, 1.0))
    with pytest.raises(TypeError, match=r"betas must be a pair of floats"):
        Adam(params, betas=0.9)
    with pytest.raises(ValueError, match=r"eps must be a finite number >= 0; got -1"):
        Adam(params, eps=-1)
    with pytest.raises(ValueError, match=r"momentum must be a number in \[0, 1\); got 1.5"):
        SGD(params, lr=0.1, momentum=1.5)
    with pytest.raises(TypeError, match=r"params\['w'\] must be a floating ndarray; got int64"):
        Adam({"w": np.arange(3)})
    with pytest.raises(TypeError, match=r"params\['w'\] must be a floating ndarray; got list"):
        Adam({"w": [1.0]})
    with pytest.raises(ValueError, match=r"params must not be empty"):
        SGD({}, lr=0.1)
    frozen = np.ones(2)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match=r"params\['w'\] must be writeable"):
        Adam({"w": frozen})


def test_step_checks_grads(rng):
    params = make_params(rng)
    opt = Adam(params)
    grads = make_grads(rng)
    with pytest.raises(ValueError, match=r"missing \['h0'\], unexpected \['h1'\]"):
        opt.step({**{k: v for k, v in grads.items() if k != "h0"}, "h1": grads["h0"]})
    with pytest.raises(ValueError, match=r"grads\['h0'\] must have shape \(1, 4\); got \(4,\)"):
        opt.step({**grads, "h0": grads["h0"].ravel()})
    assert opt.step_count == 0


# ---------------------------------------------------------------- clip_grad_norm


@pytest.mark.parametrize("max_norm", [0.5, 3.0, 1e3])
def test_clip_matches_torch(rng, max_norm):
    torch = require_torch()
    grads = make_grads(rng)
    tensors = [torch.zeros(s, dtype=torch.float64, requires_grad=True) for s in SHAPES.values()]
    for t, g in zip(tensors, grads.values()):
        t.grad = torch.tensor(g)
    expected_norm = torch.nn.utils.clip_grad_norm_(tensors, max_norm)
    total = clip_grad_norm(grads, max_norm)
    assert isinstance(total, float)
    assert total == pytest.approx(float(expected_norm), rel=1e-14)
    for t, g in zip(tensors, grads.values()):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-14, atol=0)


def test_clip_is_global_and_in_place(rng):
    grads = make_grads(rng)
    arrays = dict(grads)
    before = np.concatenate([g.ravel() for g in grads.values()])
    total = clip_grad_norm(grads, 1.0)
    after = np.concatenate([g.ravel() for g in grads.values()])
    assert total == pytest.approx(np.linalg.norm(before), rel=1e-14)
    assert np.linalg.norm(after) == pytest.approx(1.0, rel=1e-5)  # eps=1e-6 below 1
    np.testing.assert_allclose(after / np.linalg.norm(after), before / total, rtol=1e-12)
    assert all(grads[k] is arrays[k] for k in grads)


def test_clip_threshold_is_strict():
    grads = {"g": np.array([3.0, 4.0])}
    assert clip_grad_norm(grads, 5.0) == 5.0
    np.testing.assert_array_equal(grads["g"], [3.0, 4.0])  # norm == max_norm: untouched
    clip_grad_norm(grads, np.nextafter(5.0, 0.0))
    assert np.linalg.norm(grads["g"]) < 5.0


def test_clip_float32_accumulates_in_float64():
    grads = {"g": np.full(10_000, 1e-3, dtype=np.float32)}
    total = clip_grad_norm(grads, 1.0)
    assert total == pytest.approx(np.sqrt(10_000 * float(np.float32(1e-3)) ** 2), rel=1e-12)
    assert grads["g"].dtype == np.float32


def test_clip_errors():
    with pytest.raises(ValueError, match=r"non-finite values in \['b'\]"):
        clip_grad_norm({"a": np.ones(2), "b": np.array([1.0, np.inf])}, 1.0)
    with pytest.raises(ValueError, match=r"the sum of squares overflowed"):
        clip_grad_norm({"a": np.array([1e200, 1e200])}, 1.0)
    with pytest.raises(ValueError, match=r"the sum of squares overflowed"):
        clip_grad_norm({"a": np.array([1.3e154]), "b": np.array([1.3e154])}, 1.0)
    with pytest.raises(ValueError, match=r"max_norm must be a finite number > 0; got 0"):
        clip_grad_norm({"a": np.ones(2)}, 0)
    with pytest.raises(TypeError, match=r"grads\['a'\] must be a floating ndarray; got int64"):
        clip_grad_norm({"a": np.ones(2, dtype=np.int64)}, 1.0)
