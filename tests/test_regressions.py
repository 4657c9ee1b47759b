"""Inputs that once failed, kept so they never fail again (cf. opt_einsum's regression list).

Each test names the input, what went wrong, and where.
"""

import numpy as np
import pytest

from hiddenstate.core import functional as F
from tests.strategies import KINDS, make_layer, random_state, state_parts


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "shape, options",
    [
        pytest.param((0, 2, 3), {}, id="time_major"),
        pytest.param((2, 0, 3), {"batch_first": True}, id="batch_first"),
        pytest.param((0, 3), {}, id="unbatched"),
        pytest.param((0, 2, 3), {"num_layers": 2, "bidirectional": True}, id="two_layers_bidirectional"),
    ],
)
def test_sequence_of_length_zero(kind, shape, options):
    """T = 0 raised "ValueError: cannot reshape array of size 0 into shape (0,newaxis)" from
    ``xin.reshape(T * N, -1)`` in layers._RecurrentLayer.forward (and backward). The final state
    of an empty sequence is h0 (issue 2, section 3)."""
    rng = np.random.default_rng(0)
    layer = make_layer(kind, 3, 4, **options)
    unbatched = len(shape) == 2
    h0 = random_state(layer, None if unbatched else 2, rng)
    out, h_n, cache = layer.forward(np.zeros(shape), h0)
    assert out.shape == shape[:-1] + (layer.num_directions * 4,)
    for a, b in zip(state_parts(h_n), state_parts(h0)):
        np.testing.assert_array_equal(a, b)
    d_hn = tuple(rng.standard_normal(s.shape) for s in state_parts(h_n))
    grads, dx, dh0 = layer.backward(cache, np.zeros(out.shape), d_hn if layer.is_lstm else d_hn[0])
    assert dx.shape == shape
    for a, b in zip(state_parts(dh0), d_hn):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_sequence_of_length_zero_with_learned_h0_and_lengths(kind):
    """T = 0 with lengths all 0 and a learned initial state: h_n is the learned state (same bug)."""
    layer = make_layer(kind, 3, 4, learn_h0=True)
    layer.params["h0"][...] = 0.25
    out, h_n = layer(np.zeros((0, 2, 3)), lengths=np.array([0, 0]))
    np.testing.assert_array_equal(state_parts(h_n)[0], np.full((1, 2, 4), 0.25))


@pytest.mark.parametrize("kind", ["rnn_tanh", "gru_after", "lstm"])
def test_empty_batch(kind):
    """N = 0 (torch accepts an empty batch) hit the same ``reshape(T * N, -1)`` error as T = 0."""
    layer = make_layer(kind, 3, 4, 2)
    out, h_n, cache = layer.forward(np.zeros((5, 0, 3)))
    assert out.shape == (5, 0, 4)
    assert state_parts(h_n)[0].shape == (2, 0, 4)
    _, dx, _ = layer.backward(cache, np.zeros(out.shape))
    assert dx.shape == (5, 0, 3)


def test_cross_entropy_of_a_confident_model_under_seterr_raise():
    """Logits 2,000 apart made ``np.exp`` underflow to 0 in functional.log_softmax /
    softmax / cross_entropy; the suite runs under np.seterr(all="raise"), so the exact answer
    (a probability of 0) became FloatingPointError("underflow encountered in exp")."""
    logits = np.array([[1000.0, -1000.0, 0.0], [-1000.0, 1000.0, 0.0]])
    loss, dlogits = F.cross_entropy(logits, np.array([0, 1]))
    assert loss == 0.0
    np.testing.assert_array_equal(dlogits, 0.0)
    np.testing.assert_array_equal(F.softmax(logits)[:, 2], 0.0)
    assert np.all(np.isfinite(F.log_softmax(logits)))


def test_gru_blend_writing_into_the_candidate():
    """functional.gru_blend documents that ``out`` may alias ``n``, but it computes
    ``out = h - n`` first, which overwrites ``n`` before ``out += n`` reads it: the result was
    ``2 * z * (h - n)`` instead of ``z * h + (1 - z) * n``."""
    z, h, n = np.array([0.0, 0.5]), np.array([3.0, 3.0]), np.array([1.0, 1.0])
    out = n.copy()
    F.gru_blend(z, h, out, out=out)
    np.testing.assert_array_equal(out, [1.0, 2.0])
