"""Exact BPTT against finite differences (hiddenstate.classic.gradcheck), float64, relative error < 1e-6.

Every cell and every layer configuration: RNN tanh/relu, GRU reset_after False/True, LSTM;
1 and 2 layers; bidirectional; lengths; reset masks; learned initial state; batch_first;
unbatched; no bias; inter-layer dropout with a fixed mask. The checked arrays are every
parameter, the input and the initial state (h0 and c0). Sizes are tiny to keep this fast.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hiddenstate.classic import gradcheck
from hiddenstate.classic.gradcheck import GradcheckError, check_grads
from tests.strategies import ALL_KINDS, KINDS, make_cell, make_layer, random_state, seeds, state_parts

RTOL = 1e-6
T, N, I, H = 4, 2, 3, 2


# ---------------------------------------------------------------------------- cells


@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("batched", [True, False])
def test_cell_gradients(kind, batched):
    rng = np.random.default_rng(0)
    cell = make_cell(kind, I, H, seed=1)
    shape_x, shape_h = ((N, I), (N, H)) if batched else ((I,), (H,))
    x = rng.standard_normal(shape_x)
    state = {"h": 0.5 * rng.standard_normal(shape_h)}
    if kind == "lstm":
        state["c"] = 0.5 * rng.standard_normal(shape_h)
    weights = {k: rng.standard_normal(shape_h) for k in state}

    def run():
        s = (state["h"], state["c"]) if kind == "lstm" else state["h"]
        return cell.forward(x, s)

    def loss():
        out, _ = run()
        return float(sum((o * weights[k]).sum() for o, k in zip(state_parts(out), state)))

    _, cache = run()
    d = tuple(weights[k] for k in state)
    grads, dx, dh = cell.backward(cache, d if kind == "lstm" else d[0])
    arrays = {**cell.params, "x": x, **{k + "_in": v for k, v in state.items()}}
    analytic = {**grads, "x": dx, **{k + "_in": g for k, g in zip(state, state_parts(dh))}}
    check_grads(loss, arrays, analytic, rtol=RTOL)


# ---------------------------------------------------------------------------- layers

CONFIGS = {
    "one_layer": ({}, {}),
    "two_layers": ({"num_layers": 2}, {}),
    "bidirectional": ({"bidirectional": True}, {}),
    "two_layers_bidirectional": ({"num_layers": 2, "bidirectional": True}, {}),
    "lengths": ({}, {"lengths": np.array([4, 2])}),
    "lengths_two_layers_bidirectional": ({"num_layers": 2, "bidirectional": True}, {"lengths": np.array([2, 4])}),
    "lengths_with_zero": ({"bidirectional": True}, {"lengths": np.array([0, 3])}),
    "reset": ({"num_layers": 2}, {"reset": np.array([[0, 0], [0, 1], [1, 0], [0, 0]], dtype=bool)}),
    "reset_bidirectional_lengths": ({"bidirectional": True},
                                    {"reset": np.array([[0, 0], [1, 1], [0, 0], [0, 1]], dtype=bool),
                                     "lengths": np.array([4, 3])}),
    "learn_h0": ({"num_layers": 2, "bidirectional": True, "learn_h0": True}, {}),
    "learn_h0_lengths": ({"learn_h0": True}, {"lengths": np.array([3, 0])}),
    "batch_first": ({"num_layers": 2, "batch_first": True}, {}),
    "unbatched": ({"num_layers": 2, "bidirectional": True}, {"unbatched": True}),
    "no_bias": ({"num_layers": 2, "bias": False}, {}),
    "dropout": ({"num_layers": 2, "dropout": 0.4}, {"dropout_seed": 3}),
    "weight_drop": ({"num_layers": 2, "dropout": 0.3, "weight_drop": 0.5}, {"dropout_seed": 4}),
    "weight_drop_bidirectional": ({"bidirectional": True, "weight_drop": 0.3}, {"dropout_seed": 6}),
    "learn_h0_reset": ({"num_layers": 2, "learn_h0": True}, {"reset": np.array([[0, 1], [1, 0], [0, 0], [1, 1]], dtype=bool)}),
    "dropout_bidirectional_lengths": ({"num_layers": 2, "bidirectional": True, "dropout": 0.3},
                                      {"dropout_seed": 5, "lengths": np.array([3, 4])}),
    "batch_first_lengths_reset": ({"batch_first": True, "bidirectional": True},
                                  {"lengths": np.array([4, 2]), "reset": np.array([[0, 0, 1, 0], [0, 1, 0, 1]], dtype=bool)}),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("config", list(CONFIGS))
def test_layer_gradients(kind, config):
    build, call = CONFIGS[config]
    call = dict(call)
    rng = np.random.default_rng(2)
    layer = make_layer(kind, I, H, seed=3, **build)
    unbatched = call.pop("unbatched", False)
    dropout_seed = call.pop("dropout_seed", None)
    if unbatched:
        x = rng.standard_normal((T, I))
    elif layer.batch_first:
        x = rng.standard_normal((N, T, I))
    else:
        x = rng.standard_normal((T, N, I))
    learned = layer.learn_h0
    if learned:
        for k in ("h0", "c0"):
            if k in layer.params:
                layer.params[k][...] = 0.5 * rng.standard_normal(layer.params[k].shape)
        state = None
    else:
        state = random_state(layer, None if unbatched else N, rng)
    parts = {} if state is None else dict(zip(("h0_in", "c0_in"), state_parts(state)))

    def run():
        h0 = None if state is None else ((parts["h0_in"], parts["c0_in"]) if layer.is_lstm else parts["h0_in"])
        kw = dict(call)
        if dropout_seed is not None:
            kw.update(training=True, rng=np.random.default_rng(dropout_seed))  # the same mask every call
        return layer.forward(x, h0, **kw)

    out, h_n, cache = run()
    w_out = rng.standard_normal(out.shape)
    w_hn = tuple(rng.standard_normal(s.shape) for s in state_parts(h_n))

    def loss():
        o, hn, _ = run()
        return float((o * w_out).sum() + sum((a * w).sum() for a, w in zip(state_parts(hn), w_hn)))

    grads, dx, dh0 = layer.backward(cache, w_out, w_hn if layer.is_lstm else w_hn[0])
    assert set(grads) == set(layer.params)
    arrays = {**layer.params, "x": x, **parts}
    analytic = {**grads, "x": dx, **dict(zip(parts, state_parts(dh0)))}
    errors = check_grads(loss, arrays, analytic, rtol=RTOL)
    assert set(errors) == set(arrays) | {"<directional>"}


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_layer_gradients_with_respect_to_the_final_state_only(kind):
    """d_output=None: a loss on h_n (and c_n) alone, as in an encoder."""
    rng = np.random.default_rng(4)
    layer = make_layer(kind, I, H, 2, bidirectional=True, seed=5)
    x = rng.standard_normal((T, N, I))
    out, h_n, cache = layer.forward(x)
    w = rng.standard_normal(state_parts(h_n)[0].shape)

    def loss():
        return float((state_parts(layer.forward(x)[1])[0] * w).sum())

    grads, dx, _ = layer.backward(cache, None, (w, None) if kind == "lstm" else w)
    check_grads(loss, {**layer.params, "x": x}, {**grads, "x": dx}, rtol=RTOL)


# ---------------------------------------------------------------------------- the checker itself


def _sin_problem():
    a = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
    b = np.array([0.3, -0.7])
    f = lambda: float(np.sin(a).sum() + (b ** 3).sum())
    return a, b, f


def test_check_grads_accepts_a_correct_gradient_and_restores_the_arrays():
    a, b, f = _sin_problem()
    a0, b0 = a.copy(), b.copy()
    errs = check_grads(f, {"a": a, "b": b}, {"a": np.cos(a), "b": 3 * b ** 2})
    assert set(errs) == {"a", "b", "<directional>"}
    assert max(errs.values()) < 1e-8
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


def test_check_grads_rejects_a_wrong_gradient():
    a, b, f = _sin_problem()
    wrong = np.cos(a)
    wrong[1, 2] *= 1.001
    with pytest.raises(GradcheckError, match=r"gradient check failed \(rtol=1e-06\).*'a'"):
        check_grads(f, {"a": a, "b": b}, {"a": wrong, "b": 3 * b ** 2})
    assert issubclass(GradcheckError, AssertionError)


def test_elementwise_check_finds_a_single_wrong_entry():
    a, b, f = _sin_problem()
    wrong = np.cos(a)
    wrong[2, 3] += 1e-3
    errs = gradcheck.elementwise_check(f, {"a": a}, {"a": wrong}, max_entries=None)
    assert errs["a"] > 1e-4


def test_directional_check_sees_every_entry_at_once():
    a, b, f = _sin_problem()
    good = gradcheck.directional_check(f, {"a": a, "b": b}, {"a": np.cos(a), "b": 3 * b ** 2})
    bad = gradcheck.directional_check(f, {"a": a, "b": b}, {"a": np.cos(a), "b": 3 * b ** 2 + 0.1})
    assert good < 1e-8 < 1e-3 < bad


def test_relative_error():
    assert gradcheck.relative_error([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert abs(gradcheck.relative_error([1.0, 2.0], [1.0, 2.2]) - 0.2 / 2.2) < 1e-15
    assert gradcheck.relative_error([0.0], [0.0]) == 0.0


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: check_grads(1.0, {"a": np.zeros(2)}, {"a": np.zeros(2)}), TypeError, r"^f must be callable; got float"),
        (lambda: check_grads(lambda: 0.0, [np.zeros(2)], {"a": np.zeros(2)}), TypeError, r"^arrays must be a mapping"),
        (lambda: check_grads(lambda: 0.0, {"a": np.zeros(2, np.float32)}, {"a": np.zeros(2)}), TypeError,
         r"^arrays\['a'\] must be a float64 ndarray.*got float32"),
        (lambda: check_grads(lambda: 0.0, {"a": [0.0, 1.0]}, {"a": np.zeros(2)}), TypeError, r"^arrays\['a'\] must be a float64 ndarray"),
        (lambda: check_grads(lambda: 0.0, {"a": np.zeros(2)}, {"a": np.zeros(3)}), ValueError,
         r"^grads\['a'\] must have shape \(2,\); got \(3,\)"),
        (lambda: check_grads(lambda: 0.0, {"a": np.zeros((3, 4)).T}, {"a": np.zeros((4, 3))}), ValueError,
         r"^arrays\['a'\] must be C-contiguous"),
    ],
)
def test_checker_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# ---------------------------------------------------------------------------- random configurations



@settings(max_examples=15, deadline=None)
@given(kind=st.sampled_from(ALL_KINDS), seed=seeds, L=st.integers(1, 2), bidirectional=st.booleans(),
       batch_first=st.booleans(), learn_h0=st.booleans(), use_lengths=st.booleans(), use_reset=st.booleans(),
       Tn=st.integers(1, 4), Nn=st.integers(1, 3), In=st.integers(1, 3), Hn=st.integers(1, 3))
def test_layer_gradients_random_configuration(kind, seed, L, bidirectional, batch_first, learn_h0, use_lengths,
                                              use_reset, Tn, Nn, In, Hn):
    rng = np.random.default_rng(seed)
    layer = make_layer(kind, In, Hn, L, seed=seed, bidirectional=bidirectional, batch_first=batch_first,
                       learn_h0=learn_h0)
    x = rng.standard_normal((Nn, Tn, In) if batch_first else (Tn, Nn, In))
    kw = {}
    if use_lengths:
        kw["lengths"] = rng.integers(0, Tn + 1, size=Nn)
    if use_reset:
        r = rng.random((Tn, Nn)) < 0.3
        kw["reset"] = r.T.copy() if batch_first else r
    if learn_h0:
        for k in ("h0", "c0"):
            if k in layer.params:
                layer.params[k][...] = 0.5 * rng.standard_normal(layer.params[k].shape)
        parts = {}
    else:
        parts = dict(zip(("h0_in", "c0_in"), state_parts(random_state(layer, Nn, rng))))

    def run():
        h0 = None if not parts else ((parts["h0_in"], parts["c0_in"]) if layer.is_lstm else parts["h0_in"])
        return layer.forward(x, h0, **kw)

    out, h_n, cache = run()
    w_out = rng.standard_normal(out.shape)
    w_hn = tuple(rng.standard_normal(s.shape) for s in state_parts(h_n))

    def loss():
        o, hn, _ = run()
        return float((o * w_out).sum() + sum((a * w).sum() for a, w in zip(state_parts(hn), w_hn)))

    grads, dx, dh0 = layer.backward(cache, w_out, w_hn if layer.is_lstm else w_hn[0])
    arrays = {**layer.params, "x": x, **parts}
    analytic = {**grads, "x": dx, **dict(zip(parts, state_parts(dh0)))}
    # Random sizes can make a whole array's gradient tiny (e.g. 2e-5 with a loss of 1, H = 1);
    # then the central difference's rounding noise (~1e-16 |f| / eps = 1e-10) alone exceeds a
    # relative 1e-6. Accept such an array when its absolute error is below 1e-9 as well.
    errors = gradcheck.elementwise_check(loss, arrays, analytic, max_entries=16)
    for name, rel in errors.items():
        scale = float(np.abs(analytic[name]).max(initial=0.0))
        assert rel <= RTOL or rel * scale <= 1e-9, (name, rel, scale, errors)
    assert _directional_error_vs_gradient_norm(loss, arrays, analytic) <= RTOL


def _directional_error_vs_gradient_norm(f, arrays, grads, eps=1e-6, num_directions=3):
    """Directional central differences, error relative to the gradient's norm.

    gradcheck.directional_check divides by |<g, v>|, which random sizes can make tiny by
    cancellation (|<g, v>| = 2e-4 for |g| = 3 was seen), so rounding noise alone fails 1e-6.
    Dividing by |g| (>= |<g, v>| for a unit v) keeps the check scale-free without that.
    """
    rng = np.random.default_rng(0)
    gnorm = np.sqrt(sum(float((np.asarray(grads[k]) ** 2).sum()) for k in arrays))
    worst = 0.0
    for _ in range(num_directions):
        vs = {k: rng.standard_normal(a.shape) for k, a in arrays.items()}
        norm = np.sqrt(sum(float((v * v).sum()) for v in vs.values()))
        ana = sum(float((grads[k] * v).sum()) for k, v in vs.items()) / norm
        olds = {k: a.copy() for k, a in arrays.items()}
        for sign in (1.0, -1.0):
            for k, a in arrays.items():
                a[...] = olds[k] + sign * eps * vs[k] / norm
            if sign > 0:
                fp = f()
            else:
                fm = f()
        for k, a in arrays.items():
            a[...] = olds[k]
        worst = max(worst, abs((fp - fm) / (2 * eps) - ana) / max(gnorm, 1e-12))
    return worst
