"""Bad input at the public boundary: every error is a ValueError/TypeError naming the argument.

Each case checks the message with ``match=``: the argument's name, the expected shape with
symbols and numbers where there is one, and what was received.
"""

import numpy as np
import pytest

import hiddenstate as hs
from tests.strategies import make_layer

X = np.zeros((5, 2, 3))  # (T=5, N=2, I=3)


def gru():
    """GRU(3, 4, num_layers=2, bidirectional=True): L*D = 4."""
    return make_layer("gru", 3, 4, 2, bidirectional=True)


def lstm():
    return make_layer("lstm", 3, 4)


# ---------------------------------------------------------------------------- layer inputs

LAYER_VALUE_ERRORS = {
    "x rank 1": (lambda: gru()(np.zeros(3)), r"^x must have shape \(T, N, I\) or unbatched \(T, I\); got \(3,\)"),
    "x rank 4": (lambda: gru()(np.zeros((1, 5, 2, 3))), r"^x must have shape \(T, N, I\) or unbatched \(T, I\); got \(1, 5, 2, 3\)"),
    "x wrong I": (lambda: gru()(np.zeros((5, 2, 4))), r"^x must have shape \(T, N, I=3\); got \(5, 2, 4\)"),
    "x unbatched wrong I": (lambda: gru()(np.zeros((5, 4))), r"^x must have shape \(T, I=3\) when unbatched; got \(5, 4\)"),
    "x batch_first wrong I": (lambda: make_layer("gru", 3, 4, batch_first=True)(np.zeros((2, 5, 4))),
                              r"^x must have shape \(N, T, I=3\); got \(2, 5, 4\)"),
    "x NaN": (lambda: gru()(np.full((5, 2, 3), np.nan)), r"^x must be finite; got 30 NaN or Inf"),
    "x Inf": (lambda: gru()(np.where(np.eye(3)[None, :2] > 0, np.inf, 0.0)), r"^x must be finite; got 2 NaN or Inf"),
    "h0 (1, H) would broadcast": (lambda: gru()(X, np.zeros((1, 4))),
                                  r"^h0 must have shape \(num_layers\*num_directions=4, N=2, H=4\); got \(1, 4\)\. .*broadcast"),
    "h0 (H,) would broadcast": (lambda: gru()(X, np.zeros(4)),
                                r"^h0 must have shape \(num_layers\*num_directions=4, N=2, H=4\); got \(4,\)\. .*broadcast"),
    "h0 (L*D, 1, H) would broadcast": (lambda: gru()(X, np.zeros((4, 1, 4))),
                                       r"^h0 must have shape \(num_layers\*num_directions=4, N=2, H=4\); got \(4, 1, 4\)"),
    "h0 (N, H) for a layer": (lambda: gru()(X, np.zeros((2, 4))), r"^h0 must have shape \(num_layers\*num_directions=4, N=2, H=4\); got \(2, 4\)"),
    "h0 wrong H": (lambda: gru()(X, np.zeros((4, 2, 5))), r"^h0 must have shape .*H=4\); got \(4, 2, 5\)"),
    "h0 wrong L*D": (lambda: gru()(X, np.zeros((2, 2, 4))), r"^h0 must have shape \(num_layers\*num_directions=4, .*got \(2, 2, 4\)"),
    "h0 NaN": (lambda: gru()(X, np.full((4, 2, 4), np.nan)), r"^h0 must be finite"),
    "h0 Inf": (lambda: gru()(X, np.full((4, 2, 4), -np.inf)), r"^h0 must be finite"),
    "unbatched x with batched h0": (lambda: gru()(np.zeros((5, 3)), np.zeros((4, 1, 4))), r"^h0 must have shape \(L\*D=4, H=4\); got \(4, 1, 4\)"),
    "lstm c0 (1, H)": (lambda: lstm()(X, (np.zeros((1, 2, 4)), np.zeros((1, 4)))),
                       r"^c0 must have shape \(num_layers\*num_directions=1, N=2, H=4\); got \(1, 4\)"),
    "lstm h0 wrong N": (lambda: lstm()(X, (np.zeros((1, 3, 4)), np.zeros((1, 2, 4)))), r"^h0 must have shape .*N=2.*got \(1, 3, 4\)"),
    "lengths wrong shape": (lambda: gru()(X, lengths=np.array([1, 2, 3])), r"^lengths must have shape \(N=2,\); got \(3,\)"),
    "lengths too long": (lambda: gru()(X, lengths=np.array([1, 6])), r"^lengths must lie in \[0, T=5\]; got values in \[1, 6\]"),
    "lengths negative": (lambda: gru()(X, lengths=np.array([-1, 2])), r"^lengths must lie in \[0, T=5\]; got values in \[-1, 2\]"),
    "lengths with unbatched x": (lambda: gru()(np.zeros((5, 3)), lengths=np.array([3])), r"^lengths must be None for unbatched"),
    "reset wrong shape": (lambda: gru()(X, reset=np.zeros((2, 5), dtype=bool)), r"^reset must have shape \(T, N\)=\(5, 2\); got \(2, 5\)"),
    "reset batch_first shape": (lambda: make_layer("gru", 3, 4, batch_first=True)(np.zeros((2, 5, 3)), reset=np.zeros((5, 2), dtype=bool)),
                                r"^reset must have shape \(N, T\)=\(2, 5\); got \(5, 2\)"),
    "reset unbatched shape": (lambda: gru()(np.zeros((5, 3)), reset=np.zeros((5, 1), dtype=bool)), r"^reset must have shape \(T,\)=\(5,\); got \(5, 1\)"),
}


@pytest.mark.parametrize("case", list(LAYER_VALUE_ERRORS))
def test_layer_value_errors(case):
    call, match = LAYER_VALUE_ERRORS[case]
    with pytest.raises(ValueError, match=match):
        call()


LAYER_TYPE_ERRORS = {
    "x bool": (lambda: gru()(np.zeros((5, 2, 3), dtype=bool)), r"^x must be a floating-point array .*got dtype bool"),
    "x object": (lambda: gru()(np.zeros((5, 2, 3), dtype=object)), r"^x must be a floating-point array .*got dtype object"),
    "x complex": (lambda: gru()(np.zeros((5, 2, 3), dtype=complex)), r"^x must be a floating-point array .*got dtype complex128"),
    "x string": (lambda: gru()("abc"), r"^x must be a floating-point array"),
    "x ragged list": (lambda: gru()([[[1.0, 2.0, 3.0]], [[1.0, 2.0]]]), r"^x must be a floating-point array; got list"),
    "x list of bools": (lambda: gru()([[[True, False, True]]]), r"^x must be a floating-point array .*got dtype bool"),
    "h0 complex": (lambda: gru()(X, np.zeros((4, 2, 4), dtype=complex)), r"^h0 must be a floating-point array .*got dtype complex128"),
    "x strings": (lambda: gru()(np.full((5, 2, 3), "1")), r"^x must be a floating-point array .*got dtype <U1"),
    "h0 bool": (lambda: gru()(X, np.zeros((4, 2, 4), dtype=bool)), r"^h0 must be a floating-point array .*got dtype bool"),
    "h0 object": (lambda: gru()(X, np.zeros((4, 2, 4), dtype=object)), r"^h0 must be a floating-point array .*got dtype object"),
    "lstm h0 not a pair": (lambda: lstm()(X, np.zeros((1, 2, 4))), r"^h0 must be None or a pair \(h0, c0\) for an LSTM; got ndarray"),
    "lstm h0 list": (lambda: lstm()(X, [np.zeros((1, 2, 4))] * 2), r"^h0 must be None or a pair \(h0, c0\) for an LSTM; got list"),
    "lstm c0 bool": (lambda: lstm()(X, (np.zeros((1, 2, 4)), np.zeros((1, 2, 4), dtype=bool))), r"^c0 must be a floating-point array"),
    "lengths float": (lambda: gru()(X, lengths=np.array([1.0, 2.0])), r"^lengths must be an integer array of shape \(N=2,\); got dtype float64"),
    "lengths bool": (lambda: gru()(X, lengths=np.array([True, False])), r"^lengths must be an integer array of shape \(N=2,\); got dtype bool"),
    "reset int": (lambda: gru()(X, reset=np.zeros((5, 2), dtype=int)), r"^reset must be a bool array; got dtype int64"),
    "reset float": (lambda: gru()(X, reset=np.zeros((5, 2))), r"^reset must be a bool array; got dtype float64"),
}


@pytest.mark.parametrize("case", list(LAYER_TYPE_ERRORS))
def test_layer_type_errors(case):
    call, match = LAYER_TYPE_ERRORS[case]
    with pytest.raises(TypeError, match=match):
        call()


@pytest.mark.parametrize("kind", ["rnn_tanh", "gru", "lstm"])
def test_carried_state_with_another_batch_size_is_rejected_not_sliced(kind):
    """Truncated BPTT with a batch of 3, then a batch of 2: the carried h_n must not be sliced or broadcast."""
    layer = make_layer(kind, 3, 4, 2)
    _, h_n = layer(np.zeros((4, 3, 3)))
    with pytest.raises(ValueError, match=r"^h0 must have shape \(num_layers\*num_directions=2, N=2, H=4\); got \(2, 3, 4\)"):
        layer(np.zeros((4, 2, 3)), h_n)
    _, h_1 = layer(np.zeros((4, 1, 3)))
    with pytest.raises(ValueError, match=r"^h0 must have shape \(num_layers\*num_directions=2, N=2, H=4\); got \(2, 1, 4\)"):
        layer(np.zeros((4, 2, 3)), h_1)


def test_accepted_conversions():
    """The one dtype rule: lists of numbers, integer arrays (promoted to float64) and float16/float32 arrays."""
    layer = make_layer("gru", 3, 4)
    out, _ = layer([[[1, 2, 3]]])
    assert out.dtype == np.float64 and out.shape == (1, 1, 4)
    for ints in (np.array([[[1, 2, 3]]]), np.array([[[1, 2, 3]]], dtype=np.uint8), np.array([[[1, 2, 3]]], dtype=np.int32)):
        np.testing.assert_array_equal(layer(ints)[0], out)  # an int64 array is promoted like a list of ints
    h0 = np.ones((1, 1, 4), dtype=int)
    np.testing.assert_array_equal(layer(ints, h0)[0], layer(ints, h0.astype(float))[0])
    out16, _ = layer(np.ones((1, 1, 3), dtype=np.float16))
    np.testing.assert_array_equal(out16, layer(np.ones((1, 1, 3)))[0])


# ---------------------------------------------------------------------------- constructors

CONSTRUCTOR_ERRORS = {
    "input_size 0": (lambda: hs.GRU(0, 4), ValueError, r"^input_size must be a positive integer; got 0"),
    "hidden_size -1": (lambda: hs.LSTM(3, -1), ValueError, r"^hidden_size must be a positive integer; got -1"),
    "num_layers 0": (lambda: hs.RNN(3, 4, 0), ValueError, r"^num_layers must be a positive integer; got 0"),
    "hidden_size float": (lambda: hs.GRU(3, 4.0), TypeError, r"^hidden_size must be a positive integer; got float 4.0"),
    "hidden_size bool": (lambda: hs.GRU(3, True), TypeError, r"^hidden_size must be a positive integer; got bool True"),
    "input_size str": (lambda: hs.GRU("3", 4), TypeError, r"^input_size must be a positive integer; got str"),
    "num_layers float": (lambda: hs.GRU(3, 4, 2.0), TypeError, r"^num_layers must be a positive integer; got float"),
    "bias int": (lambda: hs.GRU(3, 4, bias=1), TypeError, r"^bias must be a bool; got int 1"),
    "batch_first str": (lambda: hs.GRU(3, 4, batch_first="yes"), TypeError, r"^batch_first must be a bool; got str"),
    "bidirectional None": (lambda: hs.GRU(3, 4, bidirectional=None), TypeError, r"^bidirectional must be a bool; got NoneType"),
    "learn_h0 int": (lambda: hs.LSTM(3, 4, learn_h0=1), TypeError, r"^learn_h0 must be a bool; got int"),
    "reset_after int": (lambda: hs.GRU(3, 4, reset_after=1), TypeError, r"^reset_after must be a bool; got int"),
    "dropout 1": (lambda: hs.GRU(3, 4, 2, dropout=1.0), ValueError, r"^dropout must be a number in \[0, 1\); got 1.0"),
    "dropout negative": (lambda: hs.GRU(3, 4, 2, dropout=-0.1), ValueError, r"^dropout must be a number in \[0, 1\); got -0.1"),
    "dropout nan": (lambda: hs.GRU(3, 4, 2, dropout=float("nan")), ValueError, r"^dropout must be a number in \[0, 1\); got nan"),
    "dtype int": (lambda: hs.GRU(3, 4, dtype=np.int32), TypeError, r"^dtype must be float32 or float64; got int32"),
    "dtype float16": (lambda: hs.RNN(3, 4, dtype=np.float16), TypeError, r"^dtype must be float32 or float64; got float16"),
    "rng RandomState": (lambda: hs.GRU(3, 4, rng=np.random.RandomState(0)), TypeError,
                        r"^rng must be a numpy.random.Generator or None; got RandomState"),
    "rng seed": (lambda: hs.LSTM(3, 4, rng=0), TypeError, r"^rng must be a numpy.random.Generator or None; got int"),
    "nonlinearity": (lambda: hs.RNN(3, 4, nonlinearity="softplus"), ValueError, r"^nonlinearity must be .*got 'softplus'"),
    "cell nonlinearity": (lambda: hs.RNNCell(3, 4, nonlinearity="softplus"), ValueError, r"^nonlinearity must be .*got 'softplus'"),
    "cell hidden_size 0": (lambda: hs.RNNCell(3, 0), ValueError, r"^hidden_size must be a positive integer; got 0"),
    "cell input_size bool": (lambda: hs.LSTMCell(False, 4), TypeError, r"^input_size must be a positive integer; got bool"),
    "cell reset_after int": (lambda: hs.GRUCell(3, 4, reset_after=0), TypeError, r"^reset_after must be a bool; got int"),
    "cell bias int": (lambda: hs.GRUCell(3, 4, bias=0), TypeError, r"^bias must be a bool; got int 0"),
    "cell dtype": (lambda: hs.GRUCell(3, 4, dtype="int8"), TypeError, r"^dtype must be float32 or float64; got int8"),
    "cell rng": (lambda: hs.GRUCell(3, 4, rng=42), TypeError, r"^rng must be a numpy.random.Generator or None; got int"),
}


@pytest.mark.parametrize("case", list(CONSTRUCTOR_ERRORS))
def test_constructor_errors(case):
    call, exc, match = CONSTRUCTOR_ERRORS[case]
    with pytest.raises(exc, match=match):
        call()


# ---------------------------------------------------------------------------- cells

CELL_ERRORS = {
    "x rank 3": (lambda: hs.GRUCell(3, 4)(np.zeros((1, 2, 3))), ValueError, r"^x must have shape \(N, I=3\) or \(I=3,\); got \(1, 2, 3\)"),
    "x wrong I": (lambda: hs.GRUCell(3, 4)(np.zeros((2, 4))), ValueError, r"^x must have shape \(N, I=3\) or \(I=3,\); got \(2, 4\)"),
    "h (H,) would broadcast": (lambda: hs.GRUCell(3, 4)(np.zeros((2, 3)), np.zeros(4)), ValueError,
                               r"^h must have shape \(N=2, H=4\); got \(4,\)\. .*broadcast"),
    "h (1, H) would broadcast": (lambda: hs.RNNCell(3, 4)(np.zeros((2, 3)), np.zeros((1, 4))), ValueError,
                                 r"^h must have shape \(N=2, H=4\); got \(1, 4\)"),
    "h batch mismatch": (lambda: hs.RNNCell(3, 4)(np.zeros((2, 3)), np.zeros((3, 4))), ValueError,
                         r"^h must have shape \(N=2, H=4\); got \(3, 4\)"),
    "h batched for unbatched x": (lambda: hs.GRUCell(3, 4)(np.zeros(3), np.zeros((1, 4))), ValueError,
                                  r"^h must have shape \(H=4,\); got \(1, 4\)"),
    "lstm c (1, H)": (lambda: hs.LSTMCell(3, 4)(np.zeros((2, 3)), (np.zeros((2, 4)), np.zeros((1, 4)))), ValueError,
                      r"^c must have shape \(N=2, H=4\); got \(1, 4\)"),
    "x NaN": (lambda: hs.GRUCell(3, 4)(np.full((2, 3), np.nan)), ValueError, r"^x must be finite; got 6 NaN or Inf"),
    "h Inf": (lambda: hs.GRUCell(3, 4)(np.zeros((2, 3)), np.full((2, 4), np.inf)), ValueError, r"^h must be finite; got 8 NaN or Inf"),
    "x complex": (lambda: hs.GRUCell(3, 4)(np.zeros((2, 3), dtype=complex)), TypeError,
                  r"^x must be a floating-point array .*got dtype complex128"),
    "h bool": (lambda: hs.RNNCell(3, 4)(np.zeros((2, 3)), np.zeros((2, 4), dtype=bool)), TypeError,
               r"^h must be a floating-point array .*got dtype bool"),
    "x object": (lambda: hs.LSTMCell(3, 4)(np.zeros((2, 3), dtype=object)), TypeError, r"^x must be a floating-point array .*got dtype object"),
    "lstm state not a pair": (lambda: hs.LSTMCell(3, 4)(np.zeros((2, 3)), np.zeros((2, 4))), TypeError,
                              r"^state must be a pair \(h, c\) for an LSTM cell; got ndarray"),
}


@pytest.mark.parametrize("case", list(CELL_ERRORS))
def test_cell_errors(case):
    call, exc, match = CELL_ERRORS[case]
    with pytest.raises(exc, match=match):
        call()


# ---------------------------------------------------------------------------- backward, state_dict, helpers


def test_backward_gradient_shapes_are_checked():
    g = gru()
    _, _, cache = g.forward(X)
    with pytest.raises(ValueError, match=r"^d_output must have the shape of the forward result; got \(5, 2, 4\).*expected \(5, 2, 8\)"):
        g.backward(cache, np.zeros((5, 2, 4)))
    with pytest.raises(ValueError, match=r"^d_h_n must have the shape of the forward result; got \(1, 2, 4\).*expected \(4, 2, 4\)"):
        g.backward(cache, None, np.zeros((1, 2, 4)))
    with pytest.raises(ValueError, match=r"^d_output must be finite"):
        g.backward(cache, np.full((5, 2, 8), np.nan))
    with pytest.raises(TypeError, match=r"^d_output must be a floating-point array"):
        g.backward(cache, np.zeros((5, 2, 8), dtype=bool))
    np.testing.assert_array_equal(g.backward(cache, np.ones((5, 2, 8), dtype=int))[1],
                                  g.backward(cache, np.ones((5, 2, 8)))[1])  # integers are promoted
    layer = lstm()
    _, _, cache = layer.forward(X)
    with pytest.raises(ValueError, match=r"^d_c_n must have the shape of the forward result; got \(2, 4\).*expected \(1, 2, 4\)"):
        layer.backward(cache, None, (None, np.zeros((2, 4))))


def test_load_state_dict_is_strict_and_atomic():
    g = gru()
    before = g.state_dict()
    with pytest.raises(ValueError, match=r"^state_dict keys do not match GRU: missing \['bias_hh_l0'"):
        g.load_state_dict({})
    extra = {**before, "h0": np.zeros((4, 4))}
    with pytest.raises(ValueError, match=r"^state_dict keys do not match GRU: missing \[\], unexpected \['h0'\]"):
        g.load_state_dict(extra)
    bad = {k: v + 1.0 for k, v in before.items()}
    bad["weight_hh_l1"] = np.zeros((3, 3))
    with pytest.raises(ValueError, match=r"^state_dict\['weight_hh_l1'\] must have shape \(12, 4\); got \(3, 3\)"):
        g.load_state_dict(bad)
    bad["weight_hh_l1"] = np.zeros((12, 4), dtype=complex)
    with pytest.raises(TypeError, match=r"^state_dict\['weight_hh_l1'\] must be a floating-point array"):
        g.load_state_dict(bad)
    bad["weight_hh_l1"] = np.full((12, 4), np.nan)
    with pytest.raises(ValueError, match=r"^state_dict\['weight_hh_l1'\] must be finite"):
        g.load_state_dict(bad)
    for k in before:  # nothing was loaded by the failed calls
        np.testing.assert_array_equal(g.params[k], before[k])


def test_split_directions_and_reverse_padded_errors():
    with pytest.raises(ValueError, match=r"^h_n must have shape \(L\*D=4, N, H\); got \(3, 2, 4\)"):
        gru().split_directions(np.zeros((3, 2, 4)))
    with pytest.raises(ValueError, match=r"^x must have shape \(T, N, \.\.\.\); got \(3,\)"):
        hs.reverse_padded(np.zeros(3), [1])
    with pytest.raises(ValueError, match=r"^lengths must lie in \[0, T=3\]"):
        hs.reverse_padded(np.zeros((3, 2)), [1, 4])
    with pytest.raises(TypeError, match=r"^lengths must be an integer array"):
        hs.reverse_padded(np.zeros((3, 2)), [1.0, 2.0])
