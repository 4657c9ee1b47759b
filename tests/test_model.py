"""CharRNN: exact gradients of the whole model loss, parity with a torch reimplementation, sampling."""
import numpy as np
import pytest

from _torch import require_torch
from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.core.functional import cross_entropy
from hiddenstate.train.model import CharRNN

V, H, T, N = 7, 5, 6, 3


def make_model(cell, num_layers=2, embedding_dim=None, dtype=np.float64, seed=0):
    return CharRNN(V, H, num_layers, cell=cell, embedding_dim=embedding_dim, dtype=dtype,
                   rng=np.random.default_rng(seed))


def make_batch(rng):
    inputs = rng.integers(0, V, size=(T, N))
    targets = rng.integers(0, V, size=(T, N))
    return inputs, targets


def random_state(model, rng):
    shape = (model.num_layers, N, H)
    if model.cell == "lstm":
        return (0.5 * rng.standard_normal(shape), 0.5 * rng.standard_normal(shape))
    return 0.5 * rng.standard_normal(shape)


@pytest.mark.parametrize("cell", ["gru", "lstm", "rnn"])
@pytest.mark.parametrize("embedding_dim", [None, 4])
def test_gradcheck_full_model_loss_including_decoder(cell, embedding_dim, rng):
    model = make_model(cell, embedding_dim=embedding_dim)
    inputs, targets = make_batch(rng)
    state = random_state(model, rng)  # a carried state from a previous chunk
    loss, grads, _ = model.loss_and_grads(inputs, targets, state)
    assert set(grads) == set(model.params)
    for key, grad in grads.items():
        assert grad.shape == model.params[key].shape, key

    def f():
        return model.loss(inputs, targets, state)[0]

    assert f() == pytest.approx(loss, rel=0, abs=0)
    check_grads(f, model.params, grads, rtol=1e-6, max_entries=24)


@pytest.mark.parametrize("cell,weight_drop", [("gru", 0.0), ("lstm", 0.0), ("gru", 0.4), ("lstm", 0.4)])
def test_gradcheck_with_dropout_masks(cell, weight_drop, rng):
    model = CharRNN(V, H, 2, cell=cell, dropout=0.3, weight_drop=weight_drop, rng=np.random.default_rng(0))
    inputs, targets = make_batch(rng)
    loss, grads, _ = model.loss_and_grads(inputs, targets, training=True, rng=np.random.default_rng(7))

    def f():  # the same masks at every evaluation
        return model.loss(inputs, targets, training=True, rng=np.random.default_rng(7))[0]

    assert f() == loss
    assert loss != model.loss(inputs, targets)[0]  # the masks do something in training ...
    a, _, _ = model.forward(inputs)
    b, _, _ = model.forward(inputs)
    np.testing.assert_array_equal(a, b)  # ... and nothing at evaluation
    check_grads(f, model.params, grads, rtol=1e-6, max_entries=16)


def test_params_are_the_layer_arrays_and_torch_named():
    model = make_model("gru", num_layers=2, embedding_dim=3)
    assert list(model.params) == [
        "encoder.weight",
        "rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0", "rnn.bias_hh_l0",
        "rnn.weight_ih_l1", "rnn.weight_hh_l1", "rnn.bias_ih_l1", "rnn.bias_hh_l1",
        "decoder.weight", "decoder.bias",
    ]
    assert model.params["decoder.weight"].shape == (V, H)  # W_hy, separate from the state
    assert model.params["rnn.weight_ih_l0"].shape == (3 * H, 3)
    for key, value in model.rnn.params.items():
        assert model.params["rnn." + key] is value  # updating params in place updates the layer
    assert model.num_params == sum(p.size for p in model.params.values())
    one_hot = make_model("lstm", num_layers=1)
    assert "encoder.weight" not in one_hot.params
    assert one_hot.params["rnn.weight_ih_l0"].shape == (4 * H, V)


def _torch_model(torch, model):
    """The same network written with torch modules, weights copied by name."""
    kind = {"gru": torch.nn.GRU, "lstm": torch.nn.LSTM, "rnn": torch.nn.RNN}[model.cell]
    input_size = V if model.embedding_dim is None else model.embedding_dim
    rnn = kind(input_size, H, model.num_layers, dtype=torch.float64)
    decoder = torch.nn.Linear(H, V, dtype=torch.float64)
    rnn.load_state_dict({k[4:]: torch.from_numpy(v.copy()) for k, v in model.params.items() if k.startswith("rnn.")})
    decoder.load_state_dict({"weight": torch.from_numpy(model.params["decoder.weight"].copy()),
                             "bias": torch.from_numpy(model.params["decoder.bias"].copy())})
    embedding = None
    if model.embedding_dim is not None:
        embedding = torch.nn.Embedding(V, model.embedding_dim, dtype=torch.float64)
        embedding.weight.data.copy_(torch.from_numpy(model.params["encoder.weight"]))
    return embedding, rnn, decoder


@pytest.mark.parametrize("cell,embedding_dim", [("gru", None), ("lstm", None), ("rnn", None), ("gru", 4)])
def test_loss_and_gradients_match_torch(cell, embedding_dim, rng):
    torch = require_torch()
    model = make_model(cell, embedding_dim=embedding_dim)
    inputs, targets = make_batch(rng)
    state = random_state(model, rng)
    loss, grads, new_state = model.loss_and_grads(inputs, targets, state)

    embedding, rnn, decoder = _torch_model(torch, model)
    x_ids = torch.from_numpy(inputs)
    if embedding is None:
        x = torch.nn.functional.one_hot(x_ids, V).to(torch.float64)
    else:
        x = embedding(x_ids)
    h0 = tuple(torch.from_numpy(s) for s in state) if cell == "lstm" else torch.from_numpy(state)
    out, h_n = rnn(x, h0)
    logits = decoder(out)
    t_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), torch.from_numpy(targets).reshape(-1))
    t_loss.backward()

    assert loss == pytest.approx(t_loss.item(), rel=1e-13)
    named = {"rnn." + k: p for k, p in rnn.named_parameters()}
    named.update({"decoder." + k: p for k, p in decoder.named_parameters()})
    if embedding is not None:
        named["encoder.weight"] = embedding.weight
    assert set(named) == set(grads)
    for key, param in named.items():
        np.testing.assert_allclose(grads[key], param.grad.numpy(), rtol=1e-10, atol=1e-13, err_msg=key)
    if cell == "lstm":
        np.testing.assert_allclose(new_state[0], h_n[0].detach().numpy(), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(new_state[1], h_n[1].detach().numpy(), rtol=1e-12, atol=1e-14)
    else:
        np.testing.assert_allclose(new_state, h_n.detach().numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_chunks_with_carried_state_equal_one_long_run(cell, rng):
    model = make_model(cell)
    inputs = rng.integers(0, V, size=(3 * T, N))
    whole, _, _ = model.forward(inputs)
    state, parts = None, []
    for k in range(3):
        logits, state, _ = model.forward(inputs[k * T:(k + 1) * T], state)
        parts.append(logits)
    np.testing.assert_allclose(np.concatenate(parts), whole, rtol=1e-13, atol=1e-14)


def test_cross_entropy_of_the_model_is_mean_nats_per_character(rng):
    model = make_model("rnn", num_layers=1)
    inputs, targets = make_batch(rng)
    logits, _, _ = model.forward(inputs)
    expected, _ = cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    assert model.loss(inputs, targets)[0] == expected
    # an untrained model is close to uniform: about ln V nats per character
    assert abs(expected - np.log(V)) < 0.5


def test_float32_model_runs_in_float32(rng):
    model = make_model("gru", dtype=np.float32)
    inputs, targets = make_batch(rng)
    loss, grads, state = model.loss_and_grads(inputs, targets)
    assert all(g.dtype == np.float32 for g in grads.values())
    assert state.dtype == np.float32
    assert np.isfinite(loss)


def test_load_state_dict_copies_in_place_and_checks_keys_and_shapes():
    a, b = make_model("lstm", seed=0), make_model("lstm", seed=1)
    arrays = dict(b.params)
    before = {k: id(v) for k, v in a.params.items()}
    a.load_state_dict(b.state_dict())
    for key, value in a.params.items():
        assert id(value) == before[key]
        np.testing.assert_array_equal(value, arrays[key])
    assert a.params["rnn.weight_hh_l0"] is a.rnn.params["weight_hh_l0"]
    bad = b.state_dict()
    bad.pop("decoder.bias")
    with pytest.raises(ValueError, match=r"missing \['decoder.bias'\]"):
        a.load_state_dict(bad)
    bad = b.state_dict()
    bad["decoder.weight"] = np.zeros((V, H + 1))
    with pytest.raises(ValueError, match=r"state\['decoder.weight'\] must have shape"):
        a.load_state_dict(bad)


def test_sample_is_reproducible_and_respects_temperature():
    model = make_model("gru")
    prime = np.array([1, 2, 3])
    a = model.sample(prime, 50, rng=np.random.default_rng(5))
    b = model.sample(prime, 50, rng=np.random.default_rng(5))
    c = model.sample(prime, 50, rng=np.random.default_rng(6))
    assert a.shape == (50,) and a.dtype == np.int64
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert ((a >= 0) & (a < V)).all()
    greedy1 = model.sample(prime, 20, temperature=0, rng=np.random.default_rng(1))
    greedy2 = model.sample(prime, 20, temperature=0, rng=np.random.default_rng(2))
    np.testing.assert_array_equal(greedy1, greedy2)
    # lower temperatures concentrate the draws on fewer characters
    hot = model.sample(prime, 400, temperature=3.0, rng=np.random.default_rng(3))
    cold = model.sample(prime, 400, temperature=0.2, rng=np.random.default_rng(3))
    assert np.bincount(cold, minlength=V).max() > np.bincount(hot, minlength=V).max()
    assert model.sample(prime, 0).shape == (0,)


def test_sample_first_character_follows_the_prime_distribution():
    model = make_model("rnn", num_layers=1)
    prime = np.array([4, 0, 2])
    logits, _, _ = model.forward(prime[:, None])
    p = np.exp(logits[-1, 0] - logits[-1, 0].max())
    p /= p.sum()
    rng = np.random.default_rng(0)
    draws = np.array([model.sample(prime, 1, rng=rng)[0] for _ in range(3000)])
    freq = np.bincount(draws, minlength=V) / draws.size
    assert np.abs(freq - p).max() < 0.04


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(prime=np.array([], dtype=np.int64), length=3), ValueError, "prime must hold at least one"),
    (dict(prime=np.array([V]), length=3), ValueError, r"prime must lie in \[0, V=7\)"),
    (dict(prime=np.array([0.5]), length=3), TypeError, "prime must be an integer array"),
    (dict(prime=np.array([1]), length=-1), ValueError, "length must be a non-negative integer"),
    (dict(prime=np.array([1]), length=3, temperature=-1.0), ValueError, "temperature must be a finite number >= 0"),
])
def test_sample_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_model("gru").sample(**kwargs)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(cell="elman"), ValueError, "cell must be one of gru, lstm, rnn"),
    (dict(embedding_dim=0), ValueError, "embedding_dim must be a positive integer"),
    (dict(dropout=1.0), ValueError, r"dropout must be a number in \[0, 1\)"),
    (dict(dtype=np.int32), TypeError, "dtype must be float32 or float64"),
])
def test_constructor_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        CharRNN(V, H, **kwargs)


def test_forward_rejects_bad_ids():
    model = make_model("gru")
    with pytest.raises(ValueError, match=r"inputs must have shape \(T, N\)"):
        model.forward(np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match=r"inputs must lie in \[0, V=7\)"):
        model.forward(np.full((2, 2), -1))
    with pytest.raises(ValueError, match="targets must have the shape of inputs"):
        model.loss(np.zeros((2, 2), dtype=np.int64), np.zeros((2, 3), dtype=np.int64))
