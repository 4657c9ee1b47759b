"""Our torch modules: the Cho-form GRU torch lacks, and whole character models both ways.

``ChoGRU`` is written with plain torch operations, so torch's autograd differentiating it is an
independent check of our hand-written BPTT of the Cho-form GRU, outputs and every gradient.
"""

from __future__ import annotations

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.interop import charrnn_from_torch, charrnn_to_torch, from_torch, to_torch
from tests._torch import require_torch


@pytest.mark.parametrize("num_layers,bidirectional,batch_first,bias", [(1, False, False, True), (2, True, False, True),
                                                                       (2, False, True, False)])
def test_cho_gru_module_matches_ours_and_its_autograd_our_bptt(num_layers, bidirectional, batch_first, bias):
    torch = require_torch()
    rng = np.random.default_rng(0)
    ours = hs.GRU(3, 4, num_layers, bidirectional=bidirectional, batch_first=batch_first, bias=bias, rng=rng)
    module = to_torch(ours)
    assert type(module).__name__ == "ChoGRU"
    assert set(module.state_dict()) == set(ours.params)
    T, N, D = 6, 2, 2 if bidirectional else 1
    x = rng.normal(size=(N, T, 3) if batch_first else (T, N, 3))
    h0 = rng.normal(size=(num_layers * D, N, 4))
    out, h_n, cache = ours.forward(x, h0)
    d_out, d_h_n = rng.normal(size=out.shape), rng.normal(size=h_n.shape)
    grads, dx, dh0 = ours.backward(cache, d_out, d_h_n)
    xt = torch.tensor(x, requires_grad=True)
    ht = torch.tensor(h0, requires_grad=True)
    out_t, h_n_t = module(xt, ht)
    np.testing.assert_allclose(out_t.detach().numpy(), out, rtol=0, atol=1e-12)
    np.testing.assert_allclose(h_n_t.detach().numpy(), h_n, rtol=0, atol=1e-12)
    ((out_t * torch.tensor(d_out)).sum() + (h_n_t * torch.tensor(d_h_n)).sum()).backward()
    np.testing.assert_allclose(xt.grad.numpy(), dx, rtol=0, atol=1e-10)
    np.testing.assert_allclose(ht.grad.numpy(), dh0, rtol=0, atol=1e-10)
    for name, p in module.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), grads[name], rtol=0, atol=1e-10, err_msg=name)


def test_cho_gru_round_trip_and_unbatched_input():
    torch = require_torch()
    ours = hs.GRU(2, 3, 2, dropout=0.25, rng=np.random.default_rng(1))
    back = from_torch(to_torch(ours))
    assert back.reset_after is False and back.dropout == 0.25 and back.num_layers == 2
    for k, v in ours.params.items():
        np.testing.assert_array_equal(back.params[k], v)
    x = np.random.default_rng(2).normal(size=(5, 2))  # unbatched (T, I)
    out, h_n = to_torch(ours).eval()(torch.tensor(x))  # eval: no inter-layer dropout, as torch.nn.GRU
    ref_out, ref_h = ours(x)
    np.testing.assert_allclose(out.detach().numpy(), ref_out, atol=1e-12)
    np.testing.assert_allclose(h_n.detach().numpy(), ref_h, atol=1e-12)
    with pytest.raises(ValueError, match="source is a ChoGRU; kind='lstm'"):
        from_torch(to_torch(ours), kind="lstm")


@pytest.mark.parametrize("cell", ["gru", "lstm", "rnn"])
@pytest.mark.parametrize("embedding_dim", [None, 5])
def test_charrnn_to_torch_gives_the_same_logits_and_back(cell, embedding_dim):
    torch = require_torch()
    model = hs.CharRNN(9, 6, 2, cell=cell, embedding_dim=embedding_dim, rng=np.random.default_rng(3))
    module = charrnn_to_torch(model)
    assert set(module.state_dict()) == set(model.params)
    ids = np.random.default_rng(4).integers(0, 9, size=(7, 3))
    state = model.rnn.initial_state(3, "normal", std=0.3, rng=np.random.default_rng(5))
    logits, final, _ = model.forward(ids, state)
    ts = tuple(torch.tensor(s) for s in state) if cell == "lstm" else torch.tensor(state)
    with torch.no_grad():
        logits_t, final_t = module(torch.tensor(ids), ts)
    np.testing.assert_allclose(logits_t.numpy(), logits, rtol=0, atol=1e-12)
    for a, b in zip(final_t if cell == "lstm" else (final_t,), final if cell == "lstm" else (final,), strict=True):
        np.testing.assert_allclose(a.numpy(), b, rtol=0, atol=1e-12)
    again = charrnn_from_torch(module)
    assert (again.cell, again.embedding_dim, again.num_layers, again.vocab_size) == (cell, embedding_dim, 2, 9)
    for k, v in model.params.items():
        np.testing.assert_array_equal(again.params[k], v)


def test_charrnn_conversion_errors():
    torch = require_torch()
    with pytest.raises(TypeError, match="model must be a hiddenstate CharRNN"):
        charrnn_to_torch(hs.GRU(2, 3))
    with pytest.raises(TypeError, match="module must have a recurrent `rnn` and a Linear `decoder`"):
        charrnn_from_torch(torch.nn.Linear(2, 3))
    module = charrnn_to_torch(hs.CharRNN(5, 4, rng=np.random.default_rng(0)))
    module.decoder = torch.nn.Linear(4, 7, dtype=torch.float64)  # one-hot input of 5 no longer fits V = 7
    with pytest.raises(ValueError, match=r"module.rnn.input_size must be 7 \(the one-hot vocabulary size\); got 5"):
        charrnn_from_torch(module)
