"""hiddenstate.core.ragged: padding, masks, last valid step; ragged batch == rows run one by one (no torch)."""
import numpy as np
import pytest

import hiddenstate
from hiddenstate import GRU, LSTM, RNN
from hiddenstate.core.ragged import (
    last_valid,
    last_valid_backward,
    lengths_from_mask,
    mask_from_lengths,
    pad_sequences,
    reverse_padded,
)

KINDS = [RNN, GRU, LSTM]


# -- pad_sequences ---------------------------------------------------------------------------------
def test_pad_sequences_values_lengths_and_layouts(rng):
    seqs = [rng.standard_normal((t, 3)) for t in (4, 0, 2, 4)]
    x, lengths = pad_sequences(seqs, padding_value=-1.5)
    assert x.shape == (4, 4, 3) and x.dtype == np.float64
    assert lengths.dtype == np.int64 and lengths.tolist() == [4, 0, 2, 4]
    for n, s in enumerate(seqs):
        np.testing.assert_array_equal(x[: len(s), n], s)
        assert (x[len(s):, n] == -1.5).all()
    xb, lb = pad_sequences(seqs, batch_first=True, padding_value=-1.5)
    assert xb.shape == (4, 4, 3) and xb.flags.c_contiguous
    np.testing.assert_array_equal(xb, x.transpose(1, 0, 2))
    np.testing.assert_array_equal(lb, lengths)


def test_pad_sequences_token_ids_keep_integer_dtype():
    x, lengths = pad_sequences([np.array([3, 1, 2]), [5]], padding_value=0)
    assert x.dtype.kind == "i" and x.shape == (3, 2)
    assert x[:, 1].tolist() == [5, 0, 0] and lengths.tolist() == [3, 1]


def test_pad_sequences_all_empty_and_float32():
    x, lengths = pad_sequences([np.zeros((0, 2), np.float32)] * 3)
    assert x.shape == (0, 3, 2) and x.dtype == np.float32 and lengths.tolist() == [0, 0, 0]


@pytest.mark.parametrize("seqs, exc, match", [
    ([], ValueError, "at least one array"),
    (np.zeros((3, 2)), TypeError, "list or tuple"),
    ([np.zeros((2, 3)), np.zeros((2, 4))], ValueError, r"sequences\[1\] must have trailing shape \(3,\)"),
    ([np.zeros((2, 3)), np.float64(1.0)], ValueError, r"sequences\[1\] must have shape \(T_n, \.\.\.\); got a scalar"),
    ([np.array(["a", "b"])], TypeError, "real or bool"),
])
def test_pad_sequences_errors(seqs, exc, match):
    with pytest.raises(exc, match=match):
        pad_sequences(seqs)


def test_pad_sequences_rejects_unrepresentable_padding():
    with pytest.raises(ValueError, match="padding_value must be representable in the batch dtype int64; got 0.5"):
        pad_sequences([np.array([1, 2])], padding_value=0.5)
    with pytest.raises(ValueError, match="representable"):
        pad_sequences([np.array([1, 2])], padding_value=float("nan"))
    with pytest.raises(TypeError, match="padding_value must be a real scalar"):
        pad_sequences([np.zeros(2)], padding_value="0")
    x, _ = pad_sequences([np.zeros(1), np.zeros(2)], padding_value=float("nan"))
    assert np.isnan(x[1, 0])


# -- masks ------------------------------------------------------------------------------------------
def test_mask_and_lengths_round_trip():
    lengths = np.array([3, 0, 5, 1])
    mask = mask_from_lengths(lengths)
    assert mask.shape == (5, 4) and mask.dtype == bool
    assert mask[:, 0].tolist() == [True] * 3 + [False] * 2
    np.testing.assert_array_equal(lengths_from_mask(mask), lengths)
    mb = mask_from_lengths(lengths, 7, batch_first=True)
    assert mb.shape == (4, 7)
    np.testing.assert_array_equal(lengths_from_mask(mb, batch_first=True), lengths)


def test_mask_errors():
    with pytest.raises(ValueError, match=r"mask must be right-padded .* got row 1 = \[0, 1, 1\]"):
        lengths_from_mask(np.array([[1, 0], [1, 1], [0, 1]], dtype=bool))
    with pytest.raises(TypeError, match="mask must be a bool array; got dtype int64"):
        lengths_from_mask(np.ones((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match=r"mask must have shape \(T, N\); got \(4,\)"):
        lengths_from_mask(np.ones(4, dtype=bool))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=2\]"):
        mask_from_lengths([1, 3], 2)
    with pytest.raises(ValueError, match="T must be a non-negative integer"):
        mask_from_lengths([1, 3], -1)


# -- last_valid -------------------------------------------------------------------------------------
def test_last_valid_gathers_each_rows_own_step_and_zeros_empty_rows(rng):
    out = rng.standard_normal((5, 4, 3))
    lengths = np.array([5, 1, 0, 3])
    last = last_valid(out, lengths)
    assert last.shape == (4, 3)
    np.testing.assert_array_equal(last[0], out[4, 0])
    np.testing.assert_array_equal(last[1], out[0, 1])
    np.testing.assert_array_equal(last[2], 0.0)
    np.testing.assert_array_equal(last[3], out[2, 3])
    np.testing.assert_array_equal(last_valid(out.transpose(1, 0, 2), lengths, batch_first=True), last)
    assert last_valid(np.zeros((0, 2, 3)), [0, 0]).shape == (2, 3)
    last[:] = 7.0  # a copy, never a view into output
    assert not (out == 7.0).any()


def test_last_valid_backward_is_the_adjoint(rng):
    out = rng.standard_normal((6, 5, 2))
    lengths = np.array([6, 0, 2, 1, 4])
    g = rng.standard_normal((5, 2))
    d_out = last_valid_backward(g, lengths, 6)
    assert d_out.shape == out.shape
    np.testing.assert_allclose((last_valid(out, lengths) * g).sum(), (out * d_out).sum(), rtol=1e-14)
    assert not d_out[:, 1].any()
    db = last_valid_backward(g, lengths, 6, batch_first=True)
    np.testing.assert_array_equal(db, d_out.transpose(1, 0, 2))


def test_last_valid_errors(rng):
    with pytest.raises(ValueError, match=r"output must have shape \(T, N, \.\.\.\); got \(3,\)"):
        last_valid(np.zeros(3), [1])
    with pytest.raises(ValueError, match=r"lengths must have shape \(N=2,\); got \(3,\)"):
        last_valid(np.zeros((3, 2, 1)), [1, 1, 1])
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=3\]"):
        last_valid(np.zeros((3, 2, 1)), [1, 4])
    with pytest.raises(TypeError, match="lengths must be an integer array"):
        last_valid(np.zeros((3, 2, 1)), [1.0, 2.0])
    with pytest.raises(ValueError, match="d_last must be a float array"):
        last_valid_backward(np.float64(1.0), [1, 1], 3)  # a scalar (integer arrays are promoted: the dtype rule)
    with pytest.raises(TypeError, match="d_last must be a floating-point array"):
        last_valid_backward(np.zeros((2, 1), dtype=bool), [1, 1], 3)
    np.testing.assert_array_equal(last_valid_backward(np.ones((2, 1), dtype=np.int64), [1, 2], 3),
                                  last_valid_backward(np.ones((2, 1)), [1, 2], 3))


def test_reverse_padded_is_reexported_and_an_involution(rng):
    assert reverse_padded is hiddenstate.reverse_padded
    x = rng.standard_normal((4, 3, 2))
    lengths = np.array([4, 2, 0])
    r = reverse_padded(x, lengths)
    np.testing.assert_array_equal(r[:2, 1], x[1::-1, 1])
    np.testing.assert_array_equal(r[2:, 1], x[2:, 1])
    np.testing.assert_array_equal(r[:, 2], x[:, 2])
    np.testing.assert_array_equal(reverse_padded(r, lengths), x)


# -- the helpers with the layers --------------------------------------------------------------------
@pytest.mark.parametrize("cls", KINDS)
def test_padded_batch_equals_rows_run_one_by_one(cls, rng):
    """pad + lengths == each sequence alone (both directions, two layers); last_valid == h_n forward."""
    layer = cls(3, 4, 2, bidirectional=True, rng=rng)
    seqs = [rng.standard_normal((t, 3)) for t in (5, 2, 4)]
    x, lengths = pad_sequences(seqs)
    output, state = layer(x, lengths=lengths)
    h_n = state[0] if cls is LSTM else state
    for n, s in enumerate(seqs):
        out_n, state_n = layer(s[:, None, :])
        h_n_n = state_n[0] if cls is LSTM else state_n
        np.testing.assert_allclose(output[: len(s), n], out_n[:, 0], rtol=0, atol=1e-14)
        assert not output[len(s):, n].any()
        np.testing.assert_allclose(h_n[:, n], h_n_n[:, 0], rtol=0, atol=1e-14)
    fwd = layer.split_directions(h_n).forward[-1]  # (N, H)
    np.testing.assert_allclose(last_valid(output, lengths)[:, :4], fwd, rtol=0, atol=1e-15)


@pytest.mark.parametrize("cls", KINDS)
def test_length_zero_row_keeps_h0_and_passes_its_gradient_through(cls, rng):
    layer = cls(2, 3, 2, bidirectional=True, rng=rng)
    x = rng.standard_normal((4, 3, 2))
    lengths = np.array([4, 0, 2])
    h0 = rng.standard_normal((4, 3, 3))
    s0 = (h0, rng.standard_normal((4, 3, 3))) if cls is LSTM else h0
    output, state, cache = layer.forward(x, s0, lengths=lengths)
    assert not output[:, 1].any()
    if cls is LSTM:
        np.testing.assert_array_equal(state[0][:, 1], s0[0][:, 1])
        np.testing.assert_array_equal(state[1][:, 1], s0[1][:, 1])
        d_state = (rng.standard_normal((4, 3, 3)), rng.standard_normal((4, 3, 3)))
    else:
        np.testing.assert_array_equal(state[:, 1], h0[:, 1])
        d_state = rng.standard_normal((4, 3, 3))
    _, dx, ds0 = layer.backward(cache, rng.standard_normal(output.shape), d_state)
    assert not dx[:, 1].any()
    pairs = zip(ds0, d_state) if cls is LSTM else [(ds0, d_state)]
    for got, want in pairs:  # identity map from h0 to h_n on the empty row
        np.testing.assert_array_equal(got[:, 1], want[:, 1])
