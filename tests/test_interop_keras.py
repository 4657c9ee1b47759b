"""hiddenstate.interop, Keras 3 side: weights to and from keras.layers.SimpleRNN/GRU/LSTM, exact.

Keras runs on its torch backend at float64, so its gradients come from torch autograd through
Keras's own cell code. Keras ``GRU(reset_after=False)`` is the Cho et al. (2014) form: an
oracle for our default GRU that shares no code with torch. Masks (right-padded) stand in for
our ``lengths``; ``Bidirectional`` for ``bidirectional=True``; two chained Keras layers for
``num_layers=2``. The error tests need neither Keras nor torch.
"""
import os
import sys

import numpy as np
import pytest

from hiddenstate import GRU, LSTM, RNN
from hiddenstate.core.ragged import mask_from_lengths
from hiddenstate.interop import from_keras_weights, to_keras_weights
from tests._torch import require_torch, torch_required

TOL = 1e-10


def require_keras():
    """Keras 3 on the torch backend; skipped if missing unless HIDDENSTATE_REQUIRE_TORCH is set."""
    if "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = "torch"
    require_torch()
    if torch_required():
        import keras
    else:
        keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":
        msg = f"keras was imported with the {keras.backend.backend()!r} backend; these tests need 'torch'."
        if torch_required():
            pytest.fail(msg + " (HIDDENSTATE_REQUIRE_TORCH is set, so this is an error)")
        pytest.skip(msg)
    return keras


@pytest.fixture
def keras(monkeypatch):
    """Keras computing in float64 for the duration of one test.

    ``set_floatx("float64")`` is not enough: on every backend but TensorFlow, Keras 3's type
    promotion (``keras.src.backend.common.dtypes.result_type``, aligned with JAX's default
    x64-off behaviour) maps float64 to float32, so ``ops.matmul`` of two float64 tensors runs
    in float32 and parity stalls at ~1e-7. We turn that mapping off for the test; Keras's cell
    code (the formulas under test) is untouched.
    """
    keras = require_keras()
    import torch
    from keras.src.backend.common import dtypes

    if "float64" in getattr(dtypes, "BIT64_TO_BIT32_DTYPE", {}):
        monkeypatch.setitem(dtypes.BIT64_TO_BIT32_DTYPE, "float64", "float64")
    old = keras.config.floatx(), keras.config.dtype_policy()
    keras.config.set_floatx("float64")  # the global policy may already be cached as float32: set both
    keras.config.set_dtype_policy("float64")
    try:
        one = torch.ones((2, 2), dtype=torch.float64)
        if keras.ops.matmul(one, one).dtype != torch.float64:
            pytest.fail("keras.ops.matmul(float64, float64) does not compute in float64 with this Keras version; "
                        "the float64 parity tests need it.")
        yield keras
    finally:
        keras.config.set_floatx(old[0])
        keras.config.set_dtype_policy(old[1])


def our_layer(kind, I, H, L=1, *, reset_after=None, nonlinearity="tanh", bidirectional=False, seed=0, **options):
    rng = np.random.default_rng(seed)
    if kind == "gru":
        return GRU(I, H, L, reset_after=reset_after, bidirectional=bidirectional, rng=rng, **options)
    if kind == "lstm":
        return LSTM(I, H, L, bidirectional=bidirectional, rng=rng, **options)
    return RNN(I, H, L, nonlinearity=nonlinearity, bidirectional=bidirectional, rng=rng, **options)


def keras_layer(keras, kind, H, *, reset_after, nonlinearity, bidirectional):
    options = {"return_sequences": True, "return_state": True, "dtype": "float64"}
    if kind == "gru":
        layer = keras.layers.GRU(H, reset_after=reset_after, **options)
    elif kind == "lstm":
        layer = keras.layers.LSTM(H, **options)
    else:
        layer = keras.layers.SimpleRNN(H, activation=nonlinearity, **options)
    return keras.layers.Bidirectional(layer, dtype="float64") if bidirectional else layer


def keras_run(keras, ours, kind, x, s0, lengths, d_out, d_state, *, reset_after, nonlinearity):
    """Our layer's weights in a stack of Keras layers; forward, then torch autograd for the gradients."""
    import torch

    T, N, I = x.shape
    L, D, H = ours.num_layers, ours.num_directions, ours.hidden_size
    weights = to_keras_weights(ours)
    weights = weights if L > 1 else [weights]
    xt = torch.tensor(x.transpose(1, 0, 2).copy(), requires_grad=True)  # Keras is batch-first
    st = [torch.tensor(s, requires_grad=True) for s in s0]  # (L*D, N, H) each: h (and c)
    mask = None if lengths is None else torch.tensor(mask_from_lengths(lengths, T, batch_first=True))
    finals = [[None] * (L * D) for _ in st]
    layers, inp = [], xt
    for k in range(L):
        layer = keras_layer(keras, kind, H, reset_after=reset_after, nonlinearity=nonlinearity,
                            bidirectional=D == 2)
        layer.build((None, T, I if k == 0 else D * H))
        layer.set_weights(weights[k])
        assert all(v.value.dtype == torch.float64 for v in layer.weights)
        init = [s[k * D + d] for d in range(D) for s in st]  # [h_f, (c_f), h_b, (c_b)]
        inp, *states = layer(inp, mask=mask, initial_state=init)
        for j, s in enumerate(states):
            finals[j % len(st)][k * D + j // len(st)] = s
        layers.append(layer)
    out = inp.permute(1, 0, 2)  # (T, N, D*H)
    loss = (out * torch.tensor(d_out)).sum()
    for f, d in zip(finals, d_state):
        loss = loss + (torch.stack(f) * torch.tensor(d)).sum()
    loss.backward()
    grads = [[v.value.grad.numpy() for v in layer.weights] for layer in layers]
    return (out.detach().numpy(), [torch.stack(f).detach().numpy() for f in finals],
            grads if L > 1 else grads[0], xt.grad.numpy().transpose(1, 0, 2), [s.grad.numpy() for s in st])


CASES = [("gru", False, "tanh"), ("gru", True, "tanh"), ("lstm", None, "tanh"), ("rnn", None, "tanh"),
         ("rnn", None, "relu"), ("rnn", None, "sigmoid")]


@pytest.mark.parametrize("setup", ["plain", "ragged_bidirectional_2layers"])
@pytest.mark.parametrize("kind, reset_after, nonlinearity", CASES,
                         ids=["gru_cho", "gru_reset_after", "lstm", "simple_rnn", "simple_rnn_relu",
                              "simple_rnn_sigmoid"])
def test_parity_with_keras_float64(keras, kind, reset_after, nonlinearity, setup):
    """Outputs, h_n, c_n and every gradient (weights, inputs, initial state) to 1e-10."""
    rng = np.random.default_rng(1)
    ragged = setup != "plain"
    T, N, I, H = 6, 4, 3, 5
    L, D = (2, 2) if ragged else (1, 1)
    ours = our_layer(kind, I, H, L, reset_after=reset_after, nonlinearity=nonlinearity, bidirectional=D == 2)
    lengths = np.array([6, 2, 5, 1]) if ragged else None
    x = rng.standard_normal((T, N, I))
    n_states = 2 if kind == "lstm" else 1
    s0 = [rng.standard_normal((L * D, N, H)) for _ in range(n_states)]
    d_out = rng.standard_normal((T, N, D * H))
    if ragged:
        d_out *= mask_from_lengths(lengths, T)[:, :, None]  # Keras repeats states on masked steps; ours are 0
    d_state = [rng.standard_normal((L * D, N, H)) for _ in range(n_states)]

    state0 = tuple(s0) if kind == "lstm" else s0[0]
    output, state, cache = ours.forward(x, state0, lengths=lengths)
    grads, dx, ds0 = ours.backward(cache, d_out, tuple(d_state) if kind == "lstm" else d_state[0])
    k_out, k_state, k_grads, k_dx, k_ds0 = keras_run(keras, ours, kind, x, s0, lengths, d_out, d_state,
                                                     reset_after=reset_after, nonlinearity=nonlinearity)
    valid = np.ones((T, N), dtype=bool) if lengths is None else mask_from_lengths(lengths, T)
    np.testing.assert_allclose(output[valid], k_out[valid], rtol=0, atol=TOL)
    for a, b in zip(state if kind == "lstm" else [state], k_state):
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL)
    # Keras gradients in our layout: the mapping is linear, so from_keras_weights maps gradients too
    k_g = from_keras_weights(kind, k_grads, reset_after=reset_after, bidirectional=D == 2,
                             nonlinearity=nonlinearity).params
    single_bias = not (kind == "gru" and reset_after)
    for key in grads:
        want = k_g[key.replace("bias_hh", "bias_ih")] if single_bias and key.startswith("bias_hh") else k_g[key]
        np.testing.assert_allclose(grads[key], want, rtol=0, atol=TOL, err_msg=key)
    np.testing.assert_allclose(dx, k_dx, rtol=0, atol=TOL)
    for a, b in zip(ds0 if kind == "lstm" else [ds0], k_ds0):
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL)


def test_weights_straight_from_a_keras_layer(keras):
    """Keras variables are accepted as they are; Keras's own initialisation; batch-first data."""
    import torch

    layer = keras.layers.GRU(4, reset_after=False, return_sequences=True, return_state=True, dtype="float64")
    layer.build((None, 5, 3))
    layer.set_weights([w + 0.1 for w in to_keras_weights(our_layer("gru", 3, 4, reset_after=True))[:2]] +
                      [np.linspace(-1, 1, 12)])  # a bias that is not zero
    ours = from_keras_weights("gru", layer.weights, batch_first=True)
    assert not ours.reset_after and ours.batch_first
    x = np.random.default_rng(2).standard_normal((2, 5, 3))
    with torch.no_grad():
        k_out, k_h = layer(torch.tensor(x))
    out, h_n = ours(x)
    np.testing.assert_allclose(out, k_out.numpy(), rtol=0, atol=TOL)
    np.testing.assert_allclose(h_n[0], k_h.numpy(), rtol=0, atol=TOL)


# -- round trips (numpy only) ---------------------------------------------------------------------------
def keras_shaped(rng, kind, I, H, *, reset_after=None, layers=1, bidirectional=False, bias=True):
    G = {"rnn": 1, "gru": 3, "lstm": 4}[kind]
    D = 2 if bidirectional else 1
    stack = []
    for k in range(layers):
        group = []
        for _ in range(D):
            group += [rng.standard_normal((I if k == 0 else D * H, G * H)), rng.standard_normal((H, G * H))]
            if bias:
                group.append(rng.standard_normal((2, G * H) if reset_after else (G * H,)))
        stack.append(group)
    return stack if layers > 1 else stack[0]


def flat(weights):
    return [a for w in weights for a in (w if isinstance(w, list) else [w])]


@pytest.mark.parametrize("kind, options", [
    ("gru", {"reset_after": False}),
    ("gru", {"reset_after": True}),
    ("gru", {"reset_after": True, "layers": 2, "bidirectional": True}),
    ("gru", {"reset_after": False, "bias": False}),
    ("lstm", {"layers": 3}),
    ("lstm", {"bidirectional": True, "bias": False}),
    ("rnn", {"layers": 2, "bidirectional": True}),
])
def test_to_keras_of_from_keras_is_exact(kind, options):
    weights = keras_shaped(np.random.default_rng(3), kind, 3, 4, **options)
    reset_after = options.get("reset_after") if kind == "gru" else None
    layer = from_keras_weights(kind, weights, bidirectional=options.get("bidirectional", False),
                               reset_after=reset_after if not options.get("bias", True) else None)
    assert layer.num_layers == options.get("layers", 1) and layer.bias == options.get("bias", True)
    back = to_keras_weights(layer)
    assert len(back) == len(weights) and [a.shape for a in flat(back)] == [a.shape for a in flat(weights)]
    for a, b in zip(flat(back), flat(weights)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kind, reset_after", [("gru", False), ("gru", True), ("lstm", None), ("rnn", None)])
def test_from_keras_of_to_keras_computes_the_same_function(kind, reset_after):
    layer = our_layer(kind, 3, 4, 2, reset_after=reset_after, bidirectional=True)
    again = from_keras_weights(kind, to_keras_weights(layer), bidirectional=True)
    x = np.random.default_rng(4).standard_normal((5, 2, 3))
    out, state = layer(x)
    out2, state2 = again(x)
    np.testing.assert_allclose(out2, out, rtol=0, atol=1e-14)
    if kind == "gru" and reset_after:  # two Keras biases: bit for bit
        for k in layer.params:
            np.testing.assert_array_equal(again.params[k], layer.params[k])
    else:  # one Keras bias: bias_ih + bias_hh folded into bias_ih
        np.testing.assert_array_equal(again.params["bias_ih_l1"], layer.params["bias_ih_l1"] +
                                      layer.params["bias_hh_l1"])
        assert not again.params["bias_hh_l1"].any()


def test_gru_gate_blocks_are_swapped_and_lstm_blocks_are_not():
    layer = our_layer("gru", 2, 3, reset_after=True)
    kernel, recurrent, bias = to_keras_weights(layer)
    W = layer.params["weight_ih_l0"]
    np.testing.assert_array_equal(kernel[:, :3], W[3:6].T)  # Keras z == our rows 3:6 (z)
    np.testing.assert_array_equal(kernel[:, 3:6], W[:3].T)  # Keras r == our rows 0:3 (r)
    np.testing.assert_array_equal(recurrent[:, 6:], layer.params["weight_hh_l0"][6:].T)  # candidate unchanged
    np.testing.assert_array_equal(bias[1, :3], layer.params["bias_hh_l0"][3:6])
    lstm = our_layer("lstm", 2, 3)
    k, _, b = to_keras_weights(lstm)
    np.testing.assert_array_equal(k, lstm.params["weight_ih_l0"].T)
    np.testing.assert_array_equal(b, lstm.params["bias_ih_l0"] + lstm.params["bias_hh_l0"])


def test_keras_kind_may_be_a_layer_class_or_a_cell_kind_and_cells_raise():
    from hiddenstate import LSTMCell
    from hiddenstate.classic.cells import KINDS

    layer = our_layer("gru", 2, 3, 2, reset_after=False, bidirectional=True)
    weights = to_keras_weights(layer)
    for kind in (GRU, KINDS["gru"], "GRU"):
        again = from_keras_weights(kind, weights, bidirectional=True)
        assert isinstance(again, GRU) and again.reset_after is False
        for k, v in layer.params.items():  # Cho-form GRU: one Keras bias, our bias_hh comes back as zeros
            expect = v + layer.params[k.replace("bias_ih", "bias_hh")] if k.startswith("bias_ih") else (
                np.zeros_like(v) if k.startswith("bias_hh") else v)
            np.testing.assert_array_equal(again.params[k], expect, err_msg=k)
    rnn = from_keras_weights("SimpleRNN", to_keras_weights(our_layer("rnn", 2, 3, nonlinearity="relu")),
                             nonlinearity="relu")
    assert isinstance(rnn, RNN) and rnn.nonlinearity == "relu"
    with pytest.raises(TypeError, match=r"layer must be a hiddenstate RNN, GRU or LSTM layer; got LSTMCell \(a one-step"):
        to_keras_weights(LSTMCell(2, 3, rng=np.random.default_rng(0)))


# -- conversions that do not fit (numpy only) -----------------------------------------------------------
def test_lstm_weights_given_as_a_gru_raise_with_names_and_shapes():
    weights = keras_shaped(np.random.default_rng(5), "lstm", 3, 4)
    with pytest.raises(ValueError, match=r"weights\[1\] \(recurrent_kernel\) must have shape \(H, 3\*H\) = \(4, 12\) "
                                         r"for a Keras GRU; got \(4, 16\), the 4\*H columns of an LSTM"):
        from_keras_weights("gru", weights)


@pytest.mark.parametrize("kind, weights, options, match", [
    ("gru", lambda r: keras_shaped(r, "gru", 3, 4, reset_after=True), {"reset_after": False},
     r"weights\[2\] \(bias\) has shape \(2, 12\), the bias of a reset_after=True GRU; got reset_after=False"),
    ("gru", lambda r: keras_shaped(r, "gru", 3, 4, bias=False), {},
     "reset_after must be given for a Keras GRU without bias"),
    ("gru", lambda r: keras_shaped(r, "gru", 3, 4)[:2] + [np.zeros(9)], {},
     r"weights\[2\] \(bias\) must have shape \(12,\) \(reset_after=False\) or \(2, 12\)"),
    ("lstm", lambda r: keras_shaped(r, "lstm", 3, 4) + [np.zeros(2)], {},
     r"weights must hold 3 \(kernel, recurrent_kernel, bias\) arrays for a Keras LSTM; got 4 of shapes"),
    ("lstm", lambda r: keras_shaped(r, "lstm", 3, 4), {"bidirectional": True},
     r"must hold 6 \(forward then backward kernel, recurrent_kernel, bias\) arrays .* Bidirectional; got 3"),
    ("lstm", lambda r: [keras_shaped(r, "lstm", 3, 4), keras_shaped(r, "lstm", 3, 4)], {},
     r"weights\[1\]\[0\] \(kernel\) must have shape \(D\*H=4, 4\*H=16\); got \(3, 16\)"),
    ("lstm", lambda r: [keras_shaped(r, "lstm", 3, 4), keras_shaped(r, "lstm", 4, 5)], {},
     r"weights\[1\]\[1\] \(recurrent_kernel\) must have shape \(H=4, 4\*H=16\); got \(5, 20\)"),
    ("rnn", lambda r: keras_shaped(r, "rnn", 3, 4)[:2] + [np.zeros((4, 1))], {},
     r"weights\[2\] \(bias\) must have shape \(1\*H=4,\) for a Keras SimpleRNN; got \(4, 1\)"),
    ("rnn", lambda r: [np.zeros((3, 4)), np.zeros((4, 4)), np.zeros(4, dtype=bool)], {},  # ints are promoted
     r"weights\[2\] must be a floating-point array"),
    ("lstm", lambda r: keras_shaped(r, "lstm", 3, 4), {"reset_after": True}, "reset_after must be None"),
    ("conv", lambda r: [], {}, "kind must be one of"),
])
def test_bad_keras_weights_raise(kind, weights, options, match):
    with pytest.raises((ValueError, TypeError), match=match):
        from_keras_weights(kind, weights(np.random.default_rng(6)), **options)


def test_to_keras_refuses_a_learned_h0_unless_told():
    layer = our_layer("lstm", 2, 3, learn_h0=True)
    with pytest.raises(ValueError, match=r"learned initial state .*Keras weights cannot hold; got strict=True"):
        to_keras_weights(layer)
    assert len(to_keras_weights(layer, strict=False)) == 3
