"""Initial states: init_hidden's contract, initial_state's strategies, the layers' initial_state."""

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.state import init_hidden, initial_state
from tests.strategies import make_layer

# ---------------------------------------------------------------------------- init_hidden


def test_init_hidden_seed_example_step_1():
    """The seed's Step 1: B=2, H=3 gives a (2, 3) float64 matrix of zeros."""
    h0 = init_hidden(2, 3)
    assert h0.shape == (2, 3)
    assert h0.dtype == np.float64
    np.testing.assert_array_equal(h0, np.zeros((2, 3)))


@pytest.mark.parametrize("b, h", [(1, 1), (2, 3), (7, 1), (1, 64)])
def test_init_hidden_contract(b, h):
    h0 = init_hidden(b, h)
    assert h0.shape == (b, h)
    assert h0.dtype == np.float64
    assert h0.flags.c_contiguous
    assert h0.flags.owndata and h0.base is None
    assert h0.flags.writeable
    assert not h0.any()


def test_init_hidden_returns_a_new_array_every_call():
    a = init_hidden(2, 3)
    b = init_hidden(2, 3)
    assert a is not b and not np.shares_memory(a, b)
    a[0, 0] = 5.0
    a += 1.0
    np.testing.assert_array_equal(b, 0.0)
    np.testing.assert_array_equal(init_hidden(2, 3), 0.0)


@pytest.mark.parametrize("size", [np.int8(3), np.int16(3), np.int32(3), np.int64(3), np.uint8(3), np.uint64(3)])
def test_init_hidden_accepts_numpy_integers(size):
    h0 = init_hidden(size, size)
    assert h0.shape == (3, 3)
    assert type(h0.shape[0]) is int


@pytest.mark.parametrize("arg", ["batch_size", "hidden_dim"])
@pytest.mark.parametrize(
    "bad, exc",
    [
        (True, TypeError),
        (False, TypeError),
        (np.bool_(True), TypeError),
        (2.0, TypeError),
        (np.float64(2.0), TypeError),
        ("2", TypeError),
        (None, TypeError),
        ([2], TypeError),
        (np.array(2.0), TypeError),
        (0, ValueError),
        (-1, ValueError),
        (np.int64(-3), ValueError),
    ],
)
def test_init_hidden_rejects_bad_sizes(arg, bad, exc):
    kwargs = {"batch_size": 2, "hidden_dim": 3, arg: bad}
    with pytest.raises(exc, match=rf"^{arg} must be a positive integer; got "):
        init_hidden(**kwargs)


def test_init_hidden_is_exported_at_top_level():
    assert hs.init_hidden is init_hidden
    assert "init_hidden" in hs.__all__


# ---------------------------------------------------------------------------- initial_state


@pytest.mark.parametrize("shape", [(2, 3), (4, 2, 3), 5])
def test_initial_state_zeros(shape):
    h = initial_state(shape)
    want = (shape,) if isinstance(shape, int) else shape
    assert h.shape == want and h.dtype == np.float64
    assert not h.any()


def test_initial_state_constant():
    h = initial_state((2, 3), "constant", value=0.5)
    np.testing.assert_array_equal(h, np.full((2, 3), 0.5))


def test_initial_state_normal_is_reproducible_and_has_the_asked_std():
    a = initial_state((200, 50), "normal", std=0.1, rng=np.random.default_rng(3))
    b = initial_state((200, 50), "normal", std=0.1, rng=np.random.default_rng(3))
    c = initial_state((200, 50), "normal", std=0.1, rng=np.random.default_rng(4))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert abs(a.mean()) < 0.01
    assert abs(a.std() - 0.1) < 0.005


def test_initial_state_normal_never_touches_the_global_generator():
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    initial_state((3, 4), "normal", rng=np.random.default_rng(0))
    np.testing.assert_array_equal(np.random.get_state()[1], before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["zeros", "normal", "constant"])
def test_initial_state_dtype(kind, dtype):
    h = initial_state((2, 3), kind, rng=np.random.default_rng(0), dtype=dtype)
    assert h.dtype == dtype


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"kind": "ones"}, ValueError, r"^kind must be one of"),
        ({"kind": "normal"}, ValueError, r"^rng must be a numpy.random.Generator for kind='normal'; got None"),
        ({"kind": "normal", "rng": np.random.RandomState(0)}, TypeError, r"^rng must be a numpy.random.Generator"),
        ({"kind": "normal", "rng": 0}, TypeError, r"^rng must be a numpy.random.Generator"),
        ({"kind": "normal", "rng": np.random.default_rng(0), "std": -1.0}, ValueError, r"^std must be"),
        ({"kind": "normal", "rng": np.random.default_rng(0), "std": np.nan}, ValueError, r"^std must be"),
        ({"kind": "constant", "value": np.inf}, ValueError, r"^value must be finite"),
        ({"dtype": np.int64}, TypeError, r"^dtype must be float32 or float64"),
        ({"dtype": np.float16}, TypeError, r"^dtype must be float32 or float64"),
    ],
)
def test_initial_state_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        initial_state((2, 3), **kwargs)


@pytest.mark.parametrize("shape, exc, match", [((2, 0), ValueError, r"shape\[1\] must be a positive integer"),
                                                ((-1, 3), ValueError, r"shape\[0\] must be a positive integer"),
                                                ((2, 3.0), TypeError, r"shape\[1\] must be a positive integer")])
def test_initial_state_rejects_bad_shapes(shape, exc, match):
    with pytest.raises(exc, match=match):
        initial_state(shape)


# ---------------------------------------------------------------------------- layer.initial_state


@pytest.mark.parametrize("kind", ["rnn_tanh", "gru", "lstm"])
@pytest.mark.parametrize("num_layers, bidirectional", [(1, False), (2, True)])
def test_layer_initial_state_has_the_torch_structure(kind, num_layers, bidirectional):
    layer = make_layer(kind, 3, 5, num_layers, bidirectional=bidirectional)
    LD = num_layers * (2 if bidirectional else 1)
    state = layer.initial_state(4)
    parts = state if kind == "lstm" else (state,)
    assert isinstance(state, tuple) == (kind == "lstm")
    for p in parts:
        assert p.shape == (LD, 4, 5) and p.dtype == np.float64 and not p.any()
    if kind == "lstm":
        assert not np.shares_memory(state[0], state[1])
    # the state it builds is accepted as h0 and equals the default
    x = np.random.default_rng(0).standard_normal((3, 4, 3))
    out_a, hn_a = layer(x, state)
    out_b, hn_b = layer(x)
    np.testing.assert_array_equal(out_a, out_b)


def test_layer_initial_state_normal_and_constant():
    layer = make_layer("lstm", 3, 5, 2)
    h, c = layer.initial_state(4, "normal", std=0.2, rng=np.random.default_rng(1))
    assert h.shape == c.shape == (2, 4, 5)
    assert not np.array_equal(h, c)  # two independent draws
    h = make_layer("gru", 3, 5).initial_state(2, "constant", value=0.25)
    np.testing.assert_array_equal(h, np.full((1, 2, 5), 0.25))


@pytest.mark.parametrize("kind", ["rnn_tanh", "lstm"])
def test_layer_initial_state_learned_broadcasts_the_parameter(kind):
    layer = make_layer(kind, 3, 4, 2, bidirectional=True, learn_h0=True)
    assert layer.params["h0"].shape == (4, 4)
    if kind == "lstm":
        assert layer.params["c0"].shape == (4, 4)
    rng = np.random.default_rng(0)
    for k in ("h0", "c0"):
        if k in layer.params:
            layer.params[k][...] = rng.standard_normal(layer.params[k].shape)
    state = layer.initial_state(3, "learned")
    parts = state if kind == "lstm" else (state,)
    for p, key in zip(parts, ("h0", "c0")):
        assert p.shape == (4, 3, 4)
        for n in range(3):
            np.testing.assert_array_equal(p[:, n], layer.params[key])
    # h0=None uses the learned state: the same result as passing it explicitly
    x = rng.standard_normal((5, 3, 3))
    out_a, _ = layer(x)
    out_b, _ = layer(x, state)
    np.testing.assert_allclose(out_a, out_b, rtol=0, atol=1e-15)


def test_layer_initial_state_learned_needs_learn_h0():
    with pytest.raises(ValueError, match=r"kind='learned' needs a layer built with learn_h0=True"):
        make_layer("gru", 3, 4).initial_state(2, "learned")


def test_layer_initial_state_rejects_bad_batch_size():
    layer = make_layer("gru", 3, 4)
    with pytest.raises(ValueError, match=r"^batch_size must be a positive integer"):
        layer.initial_state(0)
    with pytest.raises(TypeError, match=r"^batch_size must be a positive integer"):
        layer.initial_state(2.0)
