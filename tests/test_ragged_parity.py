"""Ragged batches, both directions, resets and dropout: exact against torch and against the pieces.

* lengths: float64 parity with ``torch.nn.utils.rnn.pack_padded_sequence(enforce_sorted=False)``
  for RNN, GRU (``reset_after=True``, torch's form) and LSTM, two layers, both directions:
  outputs, h_n, c_n and every gradient (parameters, input, h0, c0) to 1e-10.
* length-0 rows (torch cannot pack them): the other rows match torch, ours keep h0.
* reset masks: one run with ``reset`` == running each row's pieces separately, forward and backward.
* dropout: identity at inference; the mask's statistics; exact backward (gradcheck, fixed rng).
"""
import itertools

import numpy as np
import pytest

from hiddenstate import GRU, LSTM, RNN
from hiddenstate.classic.gradcheck import check_grads
from tests._torch import require_torch

KINDS = ["rnn", "gru", "lstm"]
TOL = 1e-10


def make_layer(kind, I, H, L, *, bidirectional=False, rng, **options):
    if kind == "rnn":
        return RNN(I, H, L, bidirectional=bidirectional, rng=rng, **options)
    if kind == "gru":
        return GRU(I, H, L, bidirectional=bidirectional, reset_after=True, rng=rng, **options)
    return LSTM(I, H, L, bidirectional=bidirectional, rng=rng, **options)


def as_tuple(state):
    return state if isinstance(state, tuple) else (state,)


def from_tuple(states, kind):
    return tuple(states) if kind == "lstm" else states[0]


def random_state(kind, shape, rng):
    return from_tuple([rng.standard_normal(shape) for _ in range(2 if kind == "lstm" else 1)], kind)


def torch_twin(torch, layer, kind, nonlinearity="tanh"):
    """A float64 torch module with our layer's weights, copied by name (no interop module involved)."""
    options = {"num_layers": layer.num_layers, "bidirectional": layer.bidirectional, "dtype": torch.float64}
    if kind == "rnn":
        options["nonlinearity"] = nonlinearity
    module = getattr(torch.nn, kind.upper())(layer.input_size, layer.hidden_size, **options)
    module.load_state_dict({k: torch.tensor(v) for k, v in layer.params.items()})
    return module


def torch_packed_run(torch, module, x, s0, lengths, d_out, d_state, kind):
    """Forward with pack_padded_sequence(enforce_sorted=False), backward of <out, d_out> + <state, d_state>."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    xt = torch.tensor(x, requires_grad=True)
    st = [torch.tensor(s, requires_grad=True) for s in as_tuple(s0)]
    packed = pack_padded_sequence(xt, torch.tensor(lengths), enforce_sorted=False)
    out_p, state = module(packed, tuple(st) if kind == "lstm" else st[0])
    out, _ = pad_packed_sequence(out_p, total_length=x.shape[0])
    loss = (out * torch.tensor(d_out)).sum()
    for s, d in zip(as_tuple(state), as_tuple(d_state)):
        loss = loss + (s * torch.tensor(d)).sum()
    loss.backward()
    grads = {k: p.grad.numpy() for k, p in module.named_parameters()}
    return (out.detach().numpy(), [s.detach().numpy() for s in as_tuple(state)], grads, xt.grad.numpy(),
            [s.grad.numpy() for s in st])


def assert_close(ours, theirs, what):
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=TOL, err_msg=what)


# -- lengths vs torch packing -------------------------------------------------------------------------
@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize("kind", KINDS + ["rnn_relu"])
def test_lengths_match_torch_packing(kind, bidirectional):
    torch = require_torch()
    rng = np.random.default_rng(1)
    nonlinearity = "relu" if kind == "rnn_relu" else "tanh"
    kind = kind.replace("_relu", "")
    T, N, I, H, L = 7, 5, 3, 4, 2
    D = 2 if bidirectional else 1
    options = {"nonlinearity": nonlinearity} if kind == "rnn" else {}
    layer = make_layer(kind, I, H, L, bidirectional=bidirectional, rng=rng, **options)
    module = torch_twin(torch, layer, kind, nonlinearity)
    lengths = np.array([5, 2, 7, 1, 7])  # unsorted, with ties
    x = rng.standard_normal((T, N, I))
    s0 = random_state(kind, (L * D, N, H), rng)
    d_out = rng.standard_normal((T, N, D * H))
    d_state = random_state(kind, (L * D, N, H), rng)

    output, state, cache = layer.forward(x, s0, lengths=lengths)
    grads, dx, ds0 = layer.backward(cache, d_out, d_state)
    t_out, t_state, t_grads, t_dx, t_ds0 = torch_packed_run(torch, module, x, s0, lengths, d_out, d_state, kind)

    assert_close(output, t_out, "output")
    assert not output[lengths[3]:, 3].any()
    for ours, theirs, name in zip(as_tuple(state), t_state, ["h_n", "c_n"]):
        assert_close(ours, theirs, name)
    assert set(grads) == set(t_grads)
    for k in grads:
        assert_close(grads[k], t_grads[k], k)
    assert_close(dx, t_dx, "dx")
    for ours, theirs, name in zip(as_tuple(ds0), t_ds0, ["dh0", "dc0"]):
        assert_close(ours, theirs, name)


@pytest.mark.parametrize("kind", KINDS)
def test_length_zero_rows_match_torch_on_the_other_rows_and_keep_h0(kind):
    torch = require_torch()
    rng = np.random.default_rng(2)
    T, N, I, H, L, D = 5, 4, 2, 3, 2, 2
    layer = make_layer(kind, I, H, L, bidirectional=True, rng=rng)
    module = torch_twin(torch, layer, kind)
    lengths = np.array([3, 0, 5, 0])
    live = np.flatnonzero(lengths)
    x = rng.standard_normal((T, N, I))
    s0 = random_state(kind, (L * D, N, H), rng)
    d_out = rng.standard_normal((T, N, D * H))
    d_state = random_state(kind, (L * D, N, H), rng)

    output, state, cache = layer.forward(x, s0, lengths=lengths)
    grads, dx, ds0 = layer.backward(cache, d_out, d_state)
    sub = lambda s: from_tuple([a[:, live] for a in as_tuple(s)], kind)
    t_out, t_state, t_grads, t_dx, t_ds0 = torch_packed_run(
        torch, module, x[:, live], sub(s0), lengths[live], d_out[:, live], sub(d_state), kind)

    assert_close(output[:, live], t_out, "output")
    assert not output[:, lengths == 0].any() and not dx[:, lengths == 0].any()
    for ours, theirs, start, d_s, d_s0 in zip(as_tuple(state), t_state, as_tuple(s0), as_tuple(d_state),
                                              as_tuple(ds0)):
        assert_close(ours[:, live], theirs, "state")
        np.testing.assert_array_equal(ours[:, lengths == 0], start[:, lengths == 0])  # keeps h0 (and c0)
        np.testing.assert_array_equal(d_s0[:, lengths == 0], d_s[:, lengths == 0])  # identity in backward
    for k in grads:  # empty rows add nothing to the parameter gradients
        assert_close(grads[k], t_grads[k], k)
    assert_close(dx[:, live], t_dx, "dx")
    for ours, theirs in zip(as_tuple(ds0), t_ds0):
        assert_close(ours[:, live], theirs, "dh0")


# -- reset == pieces run separately ---------------------------------------------------------------------
def run_pieces(layer, kind, x, s0, lengths, reset, d_out, d_state):
    """Run each row's segments between resets as separate sequences from that row's h0; sum the gradients."""
    T, N, _ = x.shape
    D, LD, H = layer.num_directions, layer.num_layers * layer.num_directions, layer.hidden_size
    s0, d_state = as_tuple(s0), as_tuple(d_state)
    output = np.zeros((T, N, D * H))
    final = [s.copy() for s in s0]  # rows of length 0 keep h0
    ds0 = [d.copy() for d in d_state]  # ... and pass d_h_n straight to dh0
    dx = np.zeros_like(x)
    grads = {k: np.zeros_like(v) for k, v in layer.params.items()}
    for n in range(N):
        cuts = [0] + [t for t in range(1, lengths[n]) if reset[t, n]] + [lengths[n]]
        pieces = list(itertools.pairwise(cuts))
        if pieces:
            for s in ds0:
                s[:, n] = 0.0
        for j, (a, b) in enumerate(pieces):
            first, last = j == 0, j == len(pieces) - 1
            # forward direction's h_n comes from the last piece, the backward direction's from the first
            takes = np.array([(k % D == 0 and last) or (k % D == 1 and first) for k in range(LD)])
            start = from_tuple([s[:, n:n + 1] for s in s0], kind)
            out, st, cache = layer.forward(x[a:b, n:n + 1], start)
            output[a:b, n] = out[:, 0]
            for f, s in zip(final, as_tuple(st)):
                f[takes, n] = s[takes, 0]
            d_st = from_tuple([np.where(takes[:, None, None], d[:, n:n + 1], 0.0) for d in d_state], kind)
            g, dxp, dsp = layer.backward(cache, d_out[a:b, n:n + 1], d_st)
            for k in grads:
                grads[k] += g[k]
            dx[a:b, n] = dxp[:, 0]
            for acc, s in zip(ds0, as_tuple(dsp)):
                acc[:, n] += s[:, 0]
    return output, from_tuple(final, kind), grads, dx, from_tuple(ds0, kind)


@pytest.mark.parametrize("with_lengths", [False, True], ids=["full", "lengths"])
@pytest.mark.parametrize("kind", KINDS)
def test_reset_equals_running_the_pieces_separately(kind, with_lengths):
    rng = np.random.default_rng(3)
    T, N, I, H, L, D = 8, 4, 3, 3, 2, 2
    layer = make_layer(kind, I, H, L, bidirectional=True, rng=rng)
    reset = np.zeros((T, N), dtype=bool)
    reset[[3, 6], 0] = True  # three pieces
    reset[0, 1] = True  # a reset at t=0 changes nothing
    reset[1, 2] = reset[2, 2] = True  # a piece of length one
    reset[7, 3] = True  # past row 3's length when lengths are used: ignored
    lengths = np.array([8, 5, 6, 4]) if with_lengths else np.full(N, T)
    x = rng.standard_normal((T, N, I))
    s0 = random_state(kind, (L * D, N, H), rng)
    d_out = rng.standard_normal((T, N, D * H))
    d_state = random_state(kind, (L * D, N, H), rng)

    output, state, cache = layer.forward(x, s0, lengths=lengths if with_lengths else None, reset=reset)
    grads, dx, ds0 = layer.backward(cache, d_out, d_state)
    p_out, p_state, p_grads, p_dx, p_ds0 = run_pieces(layer, kind, x, s0, lengths, reset, d_out, d_state)

    tol = dict(rtol=0, atol=1e-12)
    np.testing.assert_allclose(output, p_out, **tol)
    for ours, theirs in zip(as_tuple(state), as_tuple(p_state)):
        np.testing.assert_allclose(ours, theirs, **tol)
    for k in grads:
        np.testing.assert_allclose(grads[k], p_grads[k], err_msg=k, **tol)
    np.testing.assert_allclose(dx, p_dx, **tol)
    for ours, theirs in zip(as_tuple(ds0), as_tuple(p_ds0)):
        np.testing.assert_allclose(ours, theirs, **tol)
    # and the reset really did something
    plain, _ = layer(x, s0, lengths=lengths if with_lengths else None)
    assert np.abs(plain[4:, 0] - output[4:, 0]).max() > 1e-3


def test_reset_blocks_gradient_for_that_row_only():
    rng = np.random.default_rng(4)
    layer = GRU(2, 3, rng=rng)
    x = rng.standard_normal((6, 2, 2))
    reset = np.zeros((6, 2), dtype=bool)
    reset[3, 0] = True
    d_out = np.zeros((6, 2, 3))
    d_out[5] = 1.0  # loss on the last step only
    _, _, cache = layer.forward(x, reset=reset)
    _, dx, _ = layer.backward(cache, d_out)
    assert not dx[:3, 0].any()  # steps before the boundary cannot influence row 0's last output
    assert np.abs(dx[:3, 1]).min() > 0  # row 1 has no boundary


# -- dropout ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_dropout_is_identity_at_inference_and_after_the_last_layer(kind):
    rng = np.random.default_rng(5)
    layer = make_layer(kind, 3, 4, 2, bidirectional=True, rng=rng, dropout=0.5)
    plain = make_layer(kind, 3, 4, 2, bidirectional=True, rng=rng)
    plain.load_state_dict(layer.state_dict())
    x = rng.standard_normal((5, 3, 3))
    out, state, _ = layer.forward(x, training=False, rng=np.random.default_rng(0))
    out_p, state_p = plain(x)
    np.testing.assert_array_equal(out, out_p)
    for a, b in zip(as_tuple(state), as_tuple(state_p)):
        np.testing.assert_array_equal(a, b)
    one = make_layer(kind, 3, 4, 1, rng=rng, dropout=0.5)  # one layer: nothing between layers to drop
    np.testing.assert_array_equal(one.forward(x, training=True)[0], one(x)[0])
    out_t, _, _ = layer.forward(x, training=True, rng=np.random.default_rng(0))
    assert np.abs(out_t - out).max() > 1e-3  # training mode does drop


def _dropout_probe(p, rng, T=40, N=25, H=20):
    """A 2-layer ReLU RNN whose second layer is the identity, so output / layer-0 output is the mask."""
    layer = RNN(3, H, 2, nonlinearity="relu", dropout=p, rng=rng)
    par = layer.params
    par["weight_ih_l0"][:] = np.abs(par["weight_ih_l0"])
    par["weight_hh_l0"][:] = 0.0
    par["bias_ih_l0"][:] = 0.1
    par["bias_hh_l0"][:] = 0.2
    par["weight_ih_l1"][:] = np.eye(H)
    for k in ("weight_hh_l1", "bias_ih_l1", "bias_hh_l1"):
        par[k][:] = 0.0
    x = np.abs(rng.standard_normal((T, N, 3)))
    layer0 = x @ par["weight_ih_l0"].T + par["bias_ih_l0"] + par["bias_hh_l0"]  # (T, N, H) > 0: relu is identity
    return layer, x, layer0


def test_dropout_mask_statistics():
    p = 0.3
    layer, x, layer0 = _dropout_probe(p, np.random.default_rng(6))
    masks = [layer.forward(x, training=True, rng=np.random.default_rng(s))[0] / layer0 for s in (0, 0, 1)]
    m = masks[0]
    kept = m != 0
    np.testing.assert_allclose(m[kept], 1.0 / (1.0 - p), rtol=1e-12)  # inverted dropout: E[m] = 1
    n = m.size
    assert abs((~kept).mean() - p) < 5 * np.sqrt(p * (1 - p) / n)
    np.testing.assert_array_equal(masks[0], masks[1])  # same seed, same mask
    assert (masks[0] != masks[2]).mean() > 0.2  # another seed, another mask
    # one independent draw per element: not shared across time, batch or features
    for axis in range(3):
        assert not (kept == kept.take([0], axis=axis)).all()
    default_rng_masks = [layer.forward(x, training=True)[0] / layer0 for _ in range(2)]
    assert (default_rng_masks[0] != default_rng_masks[1]).any()  # the layer's own Generator advances


@pytest.mark.parametrize("kind", KINDS)
def test_dropout_backward_is_exact(kind):
    rng = np.random.default_rng(8)
    layer = make_layer(kind, 2, 3, 2, bidirectional=True, rng=rng, dropout=0.4)
    x = rng.standard_normal((4, 3, 2))
    s0 = random_state(kind, (4, 3, 3), rng)
    w_out = rng.standard_normal((4, 3, 6))
    w_state = random_state(kind, (4, 3, 3), rng)

    def loss():
        out, state, _ = layer.forward(x, s0, training=True, rng=np.random.default_rng(11))
        return float((out * w_out).sum() + sum((s * w).sum() for s, w in zip(as_tuple(state), as_tuple(w_state))))

    _, _, cache = layer.forward(x, s0, training=True, rng=np.random.default_rng(11))
    grads, dx, ds0 = layer.backward(cache, w_out, w_state)
    arrays = dict(layer.params, x=x)
    grads = dict(grads, x=dx)
    for i, (s, d) in enumerate(zip(as_tuple(s0), as_tuple(ds0))):
        arrays[f"s0_{i}"], grads[f"s0_{i}"] = s, d
    check_grads(loss, arrays, grads, rtol=1e-6, max_entries=24)
