"""Issue 11, the Python API: nothing a cache keeps is shared, caches know their owner, every argument is checked.

One section per item of the issue's "Python API" list; each case checks the exception and its
message with ``match=``, or that the result equals an independent reference.
"""

import math
from decimal import Decimal, getcontext

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.classic import gradcheck
from hiddenstate.classic.textbook import candidate, elman_step, gru_step, reset_gate, update_gate
from hiddenstate.core import functional as F
from hiddenstate.core import ragged
from hiddenstate.core.validation import float_array
from hiddenstate.probe.analysis import analyze_model, memory_sweep
from hiddenstate.probe.fixedpoints import classify_point, find_fixed_points, layer_map
from hiddenstate.probe.gatestats import gate_statistics, time_constant
from hiddenstate.probe.gradflow import GradientNorms, hidden_gradient_norms, jacobian_flow, sensitivity, spectral_bounds
from hiddenstate.probe.memory import memory_curve, ridge_fit
from hiddenstate.probe.pca import pca
from hiddenstate.probe.textfeatures import bracket_depth, inside_quotes
from hiddenstate.probe.trace import trace
from hiddenstate.probe.unitfeatures import best_units, unit_feature_correlation
from tests.strategies import KINDS, make_cell, make_layer

LAYER_KINDS = [k for k in KINDS if k != "rnn_relu"] + ["rnn_relu"]


def _parts(s):
    return s if isinstance(s, tuple) else (s,)


def _like(s, rng):
    return tuple(rng.standard_normal(p.shape) for p in s) if isinstance(s, tuple) else rng.standard_normal(s.shape)


def _fb(layer, x, d_out, d_hn, **kw):
    out, h_n, cache = layer.forward(x, **kw)
    return layer.backward(cache, d_out, d_hn)


def _assert_same_grads(a, b):
    ga, dxa, dha = a
    gb, dxb, dhb = b
    assert ga.keys() == gb.keys()
    for k in ga:
        np.testing.assert_array_equal(ga[k], gb[k], err_msg=k)
    np.testing.assert_array_equal(dxa, dxb)
    for p, q in zip(_parts(dha), _parts(dhb)):
        np.testing.assert_array_equal(p, q)


# ---------------------------------------------------------------------------- 1. caches alias nothing


@pytest.mark.parametrize("kind", LAYER_KINDS)
@pytest.mark.parametrize("batch_first", [False, True])
def test_x_changed_in_place_after_forward_does_not_change_the_gradients(kind, batch_first, rng):
    layer = make_layer(kind, 3, 4, 2, batch_first=batch_first)
    x = rng.standard_normal((2, 5, 3) if batch_first else (5, 2, 3))
    out, h_n, cache = layer.forward(x)
    d_out, d_hn = rng.standard_normal(out.shape), _like(h_n, rng)
    want = _fb(layer, x.copy(), d_out, d_hn)
    x *= 3.0  # the caller reuses its buffer
    _assert_same_grads(layer.backward(cache, d_out, d_hn), want)


@pytest.mark.parametrize("kind", LAYER_KINDS)
def test_unbatched_x_and_reset_changed_in_place_do_not_change_the_gradients(kind, rng):
    layer = make_layer(kind, 3, 4)
    x = rng.standard_normal((5, 3))
    reset = np.zeros(5, dtype=bool)
    reset[2] = True
    out, h_n, cache = layer.forward(x, reset=reset)
    d_out, d_hn = rng.standard_normal(out.shape), _like(h_n, rng)
    want = _fb(layer, x.copy(), d_out, d_hn, reset=reset.copy())
    x[...] = 0.0
    reset[...] = False
    _assert_same_grads(layer.backward(cache, d_out, d_hn), want)


@pytest.mark.parametrize("kind", LAYER_KINDS)
def test_the_output_is_not_the_array_backward_reads(kind, rng):
    """``out *= 0.5`` after forward used to halve the Elman RNN's activations in its cache."""
    layer = make_layer(kind, 3, 4)
    x = rng.standard_normal((6, 2, 3))
    out, h_n, cache = layer.forward(x)
    d_out, d_hn = rng.standard_normal(out.shape), _like(h_n, rng)
    want = _fb(layer, x, d_out, d_hn)
    out *= 0.5
    for s in _parts(h_n):
        s *= 0.5
    _assert_same_grads(layer.backward(cache, d_out, d_hn), want)


@pytest.mark.parametrize("kind", LAYER_KINDS)
@pytest.mark.parametrize("change", ["load_state_dict", "in place"])
def test_weights_changed_between_forward_and_backward_do_not_mix(kind, change, rng):
    """The backward is the exact gradient of the forward that was run, whatever happened to params since."""
    layer = make_layer(kind, 3, 4, 2, bidirectional=True, learn_h0=True)
    x = rng.standard_normal((5, 2, 3))
    out, h_n, cache = layer.forward(x)
    d_out, d_hn = rng.standard_normal(out.shape), _like(h_n, rng)
    want = _fb(layer, x, d_out, d_hn)
    new = {k: v + 0.25 for k, v in layer.state_dict().items()}
    if change == "load_state_dict":
        layer.load_state_dict(new)
    else:  # an optimizer step
        for v in layer.params.values():
            v -= 0.1
    _assert_same_grads(layer.backward(cache, d_out, d_hn), want)


@pytest.mark.parametrize("kind", LAYER_KINDS)
def test_cell_caches_alias_nothing(kind, rng):
    cell = make_cell(kind, 3, 4)
    x = rng.standard_normal((2, 3))
    h = tuple(rng.standard_normal((2, 4)) for _ in range(2)) if kind == "lstm" else rng.standard_normal((2, 4))
    new, cache = cell.forward(x, h)
    d = _like(new, rng)
    want_g, want_dx, want_dh = cell.backward(cell.forward(x.copy(), h)[1], d)
    x *= 2.0
    for s in _parts(h):
        s *= 2.0
    for s in _parts(new):
        s *= 2.0
    for v in cell.params.values():
        v += 1.0
    g, dx, dh = cell.backward(cache, d)
    for k in g:
        np.testing.assert_array_equal(g[k], want_g[k])
    np.testing.assert_array_equal(dx, want_dx)
    for p, q in zip(_parts(dh), _parts(want_dh)):
        np.testing.assert_array_equal(p, q)


# ---------------------------------------------------------------------------- 2. a cache knows its layer


def test_a_cache_of_another_layer_of_the_same_shape_is_refused(rng):
    a, b = make_layer("gru", 3, 4, seed=1), make_layer("gru", 3, 4, seed=2)
    out, _, cache = a.forward(rng.standard_normal((5, 2, 3)))
    with pytest.raises(ValueError, match=r"^cache must come from this layer's forward \(GRU\(3, 4.*got a cache of another "
                                         r"layer \(GRU\(3, 4"):
        b.backward(cache, np.ones_like(out))


def test_caches_of_other_kinds_and_shapes_are_refused(rng):
    gru, lstm = make_layer("gru", 3, 4), make_layer("lstm", 3, 4)
    out, _, cache = gru.forward(rng.standard_normal((5, 2, 3)))
    with pytest.raises(ValueError, match=r"^cache must come from this layer's forward \(LSTM"):
        lstm.backward(cache, np.ones_like(out))
    cell = make_cell("gru", 3, 4)
    _, cell_cache = cell.forward(np.ones((2, 3)))
    with pytest.raises(TypeError, match=r"^cache must be the LayerCache that GRU.forward returned; got CellCache"):
        gru.backward(cell_cache, np.ones_like(out))
    with pytest.raises(TypeError, match=r"^cache must be the LayerCache that GRU.forward returned; got tuple"):
        gru.backward((1, 2, 3), np.ones_like(out))
    with pytest.raises(TypeError, match=r"^cache must be the cache that GRUCell.forward returned; got LayerCache"):
        cell.backward(cache, np.ones((2, 4)))
    other = make_cell("gru", 3, 4, seed=5)
    with pytest.raises(ValueError, match=r"^cache must come from this cell's forward"):
        other.backward(cell_cache, np.ones((2, 4)))
    # the same layer, another call shape: the gradient must fit the call the cache is from
    _, _, c2 = gru.forward(rng.standard_normal((5, 3, 3)))
    with pytest.raises(ValueError, match=r"^d_output must have the shape of the forward result; got \(5, 2, 4\).*"
                                         r"expected \(5, 3, 4\) = \(T, N, D\*H\)"):
        gru.backward(c2, np.ones_like(out))


def test_prepared_from_another_layer_is_refused(rng):
    a, b = make_layer("gru", 3, 4), make_layer("gru", 5, 4)
    with pytest.raises(ValueError, match=r"^prepared must come from this layer's prepare \(x of shape \(T, N, I=5\)"):
        b.run(a.prepare(np.zeros((4, 2, 3))))
    with pytest.raises(TypeError, match=r"^prepared must be the Prepared that GRU.prepare returned; got ndarray"):
        b.run(np.zeros((4, 2, 5)))


def test_lstm_layer_d_h_n_must_be_a_pair(rng):
    layer = make_layer("lstm", 3, 4)
    out, (h, c), cache = layer.forward(np.zeros((5, 2, 3)))
    with pytest.raises(TypeError, match=r"^d_h_n must be None or a pair \(dh_n, dc_n\) for an LSTM; got ndarray"):
        layer.backward(cache, None, np.stack([h, c]))


# ---------------------------------------------------------------------------- 3. cell backward shapes


@pytest.mark.parametrize("kind", ["rnn_tanh", "gru", "gru_after"])
def test_cell_backward_never_broadcasts_the_upstream_gradient(kind):
    cell = make_cell(kind, 3, 4)
    _, cache = cell.forward(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"^d_out must have shape \(N=2, H=4\), the shape of the new state; got \(4,\)\. "
                                         r"A gradient is never broadcast"):
        cell.backward(cache, np.ones(4))
    with pytest.raises(ValueError, match=r"^d_out must have shape \(N=2, H=4\).*got \(1, 4\)"):
        cell.backward(cache, np.ones((1, 4)))
    _, cache1 = cell.forward(np.ones(3))
    with pytest.raises(ValueError, match=r"^d_out must have shape \(H=4,\).*got \(1, 4\)"):
        cell.backward(cache1, np.ones((1, 4)))
    with pytest.raises(TypeError, match=r"^d_out must be a floating-point array"):
        cell.backward(cache, np.ones((2, 4), dtype=bool))
    g, dx, dh = cell.backward(cache, None)  # None: a zero gradient
    assert not np.any(dx) and not any(np.any(v) for v in g.values())


def test_lstm_cell_backward_refuses_a_stacked_array_for_the_pair():
    cell = make_cell("lstm", 3, 4)
    _, cache = cell.forward(np.ones(3))
    with pytest.raises(TypeError, match=r"^d_out must be None or a pair \(dh, dc\) for an LSTM cell; got ndarray \(2, 4\)"):
        cell.backward(cache, np.ones((2, 4)))
    with pytest.raises(TypeError, match=r"^d_out must be None or a pair \(dh, dc\) for an LSTM cell; got list"):
        cell.backward(cache, [np.ones(4), np.ones(4)])
    with pytest.raises(ValueError, match=r"^d_out\[1\] must have shape \(H=4,\)"):
        cell.backward(cache, (np.ones(4), np.ones((2, 4))))


# ---------------------------------------------------------------------------- 4. booleans are bool


BOOL_CASES = {
    "forward training str": lambda: make_layer("gru", 3, 4, dropout=0.5, num_layers=2).forward(np.zeros((2, 1, 3)), training="False"),
    "forward training int": lambda: make_layer("gru", 3, 4).forward(np.zeros((2, 1, 3)), training=1),
    "run record str": lambda: make_layer("gru", 3, 4).run(make_layer("gru", 3, 4).prepare(np.zeros((2, 1, 3))), record="yes"),
    "layer learn_h0 None": lambda: hs.LSTM(3, 4, learn_h0=None),
    "layer reset_after str": lambda: hs.GRU(3, 4, reset_after="True"),
    "cell bias str": lambda: hs.RNNCell(3, 4, bias="False"),
    "cell reset_after int": lambda: hs.GRUCell(3, 4, reset_after=1),
    "pad_sequences batch_first": lambda: ragged.pad_sequences([np.zeros((2, 1))], batch_first="no"),
    "mask_from_lengths batch_first": lambda: ragged.mask_from_lengths([1, 2], batch_first=0),
    "lengths_from_mask batch_first": lambda: ragged.lengths_from_mask(np.ones((2, 2), dtype=bool), batch_first="True"),
    "last_valid batch_first": lambda: ragged.last_valid(np.zeros((2, 1, 3)), [1], batch_first=None),
    "last_valid_backward batch_first": lambda: ragged.last_valid_backward(np.zeros((1, 3)), [1], 2, batch_first=[]),
    "kind step jacobian": lambda: make_layer("gru", 3, 4).kind.step(make_layer("gru", 3, 4).weights(0, 0), np.zeros((1, 3)),
                                                                    np.zeros((1, 4)), jacobian="no"),
}


@pytest.mark.parametrize("case", list(BOOL_CASES))
def test_flags_are_bool_only(case):
    with pytest.raises(TypeError, match=r"must be a bool; got"):
        BOOL_CASES[case]()


def test_rnn_layer_nonlinearity_array_is_a_clear_error():
    with pytest.raises(ValueError, match=r"^nonlinearity must be one of"):
        hs.RNN(3, 4, nonlinearity=np.array([]))


def test_rnn_cell_nonlinearity_array_is_a_clear_error():
    with pytest.raises(ValueError, match=r"^nonlinearity must be one of"):
        hs.RNNCell(3, 4, nonlinearity=np.array([]))


def test_char_model_training_flag_is_bool_only():
    from hiddenstate.train.model import CharRNN

    model = CharRNN(5, 4, rng=np.random.default_rng(0))
    with pytest.raises(TypeError, match=r"^training must be a bool; got str 'False'"):
        model.forward(np.zeros((3, 2), dtype=int), training="False")


# ---------------------------------------------------------------------------- 5. parameters changed by hand


PARAM_CASES = {
    "NaN": (lambda p: p["weight_hh_l0"].__setitem__((0, 0), np.nan), ValueError,
            r"^params\['weight_hh_l0'\] must be finite; got 1 NaN or Inf value\(s\)"),
    "Inf bias": (lambda p: p["bias_ih_l1"].__setitem__(2, np.inf), ValueError, r"^params\['bias_ih_l1'\] must be finite"),
    "wrong shape": (lambda p: p.__setitem__("weight_hh_l0", np.zeros((4, 4))), ValueError,
                    r"^params\['weight_hh_l0'\] must have shape \(G\*H=12, H=4\); got \(4, 4\)"),
    "wrong input width": (lambda p: p.__setitem__("weight_ih_l1", np.zeros((12, 3))), ValueError,
                          r"^params\['weight_ih_l1'\] must have shape \(G\*H=12, I_1=4\); got \(12, 3\)"),
    "a list": (lambda p: p.__setitem__("bias_hh_l0", [0.0] * 12), TypeError,
               r"^params\['bias_hh_l0'\] must be an ndarray of shape \(G\*H=12,\) and dtype float64; got list"),
    "float32 in a float64 layer": (lambda p: p.__setitem__("weight_ih_l0", p["weight_ih_l0"].astype(np.float32)), TypeError,
                                   r"^params\['weight_ih_l0'\] must have dtype float64 \(the owner's dtype\); got float32"),
    "key removed": (lambda p: p.pop("bias_hh_l1"), ValueError, r"^GRU.params must hold exactly the keys .*missing \['bias_hh_l1'\]"),
    "key added": (lambda p: p.__setitem__("extra", np.zeros(1)), ValueError, r"^GRU.params must hold exactly .*unexpected \['extra'\]"),
}


@pytest.mark.parametrize("case", list(PARAM_CASES))
def test_parameters_changed_by_hand_are_checked_at_forward(case):
    change, exc, match = PARAM_CASES[case]
    layer = make_layer("gru", 3, 4, 2)
    change(layer.params)
    for call in (lambda: layer(np.zeros((2, 1, 3))), lambda: trace(layer, np.zeros((2, 1, 3)))):
        with pytest.raises(exc, match=match):
            call()


def test_replaced_params_dict_and_cell_params_are_checked():
    layer = make_layer("rnn_tanh", 3, 4)
    layer.params = list(layer.params.values())
    with pytest.raises(TypeError, match=r"^RNN.params must be a dict"):
        layer(np.zeros((2, 1, 3)))
    cell = make_cell("lstm", 3, 4)
    cell.params["weight_hh"][1, 1] = np.nan
    with pytest.raises(ValueError, match=r"^params\['weight_hh'\] must be finite"):
        cell(np.zeros(3))
    cell.params["weight_hh"] = np.zeros((16, 3))
    with pytest.raises(ValueError, match=r"^params\['weight_hh'\] must have shape \(G\*H=16, H=4\); got \(16, 3\)"):
        cell(np.zeros(3))
    layer = make_layer("gru", 3, 4)
    layer.params["weight_hh_l0"][0, 0] = np.inf
    with pytest.raises(ValueError, match=r"^params\['weight_hh_l0'\] must be finite"):
        layer_map(layer)
    with pytest.raises(ValueError, match=r"^params\['weight_hh_l0'\] must be finite"):
        spectral_bounds(layer)


def test_an_infinite_cell_weight_is_named_when_it_reaches_a_result():
    """A cell checks its result (one array, not four): NaN is named at forward; an Inf that only saturates a gate
    gives the exact limit, and its NaN gradient is named at backward."""
    cell = make_cell("gru", 3, 4)
    cell.params["weight_ih"][0, 0] = np.inf  # saturates r for unit 0 when x[0] > 0
    new, cache = cell.forward(np.array([1.0, 0.5, -0.5]))
    assert np.isfinite(new).all()
    with pytest.raises(ValueError, match=r"^params\['weight_ih'\] must be finite; got 1 NaN or Inf"):
        cell.backward(cache, np.ones(4))
    cell.params["weight_ih"][0, 0] = 0.0
    cell.params["bias_hh"][5] = np.nan
    with pytest.raises(ValueError, match=r"^params\['bias_hh'\] must be finite"):
        cell.forward(np.ones(3))


# ---------------------------------------------------------------------------- 6. gradcheck


def _problem():
    a = np.linspace(-1.0, 1.0, 6).reshape(3, 2)
    return a, (lambda: float(np.sin(a).sum())), np.cos(a)


GRADCHECK_CASES = {
    "eps 0": (lambda a, f, g: gradcheck.check_grads(f, {"a": a}, {"a": g}, eps=0), ValueError, r"^eps must be a number in \(0, 1\); got 0"),
    "eps NaN": (lambda a, f, g: gradcheck.directional_check(f, {"a": a}, {"a": g}, eps=np.nan), ValueError, r"^eps must be"),
    "eps huge": (lambda a, f, g: gradcheck.check_grads(f, {"a": a}, {"a": g}, eps=1e308), ValueError, r"^eps must be a number in \(0, 1\)"),
    "eps str": (lambda a, f, g: gradcheck.elementwise_check(f, {"a": a}, {"a": g}, eps="1e-6"), TypeError, r"^eps must be a number"),
    "max_entries 0": (lambda a, f, g: gradcheck.elementwise_check(f, {"a": a}, {"a": g * 1.1}, max_entries=0), ValueError,
                      r"^max_entries must be a positive integer; got 0"),
    "max_entries 2.5": (lambda a, f, g: gradcheck.check_grads(f, {"a": a}, {"a": g}, max_entries=2.5), TypeError,
                        r"^max_entries must be a positive integer; got float"),
    "num_directions 0": (lambda a, f, g: gradcheck.directional_check(f, {"a": a}, {"a": g}, num_directions=0), ValueError,
                         r"^num_directions must be a positive integer; got 0"),
    "rtol NaN": (lambda a, f, g: gradcheck.check_grads(f, {"a": a}, {"a": g * 1.1}, rtol=np.nan), ValueError,
                 r"^rtol must be a finite number >= 0; got nan"),
    "rtol negative": (lambda a, f, g: gradcheck.check_grads(f, {"a": a}, {"a": g}, rtol=-1e-6), ValueError, r"^rtol must be"),
    "grad that broadcasts": (lambda a, f, g: gradcheck.directional_check(f, {"a": a}, {"a": g[:1]}), ValueError,
                             r"^grads\['a'\] must have shape \(3, 2\); got \(1, 2\)"),
    "grad missing": (lambda a, f, g: gradcheck.check_grads(f, {"a": a}, {}), ValueError, r"^grads must have an entry for every name"),
    "grads not a mapping": (lambda a, f, g: gradcheck.check_grads(f, {"a": a}, [g]), TypeError, r"^grads must be a mapping"),
    "grad NaN": (lambda a, f, g: gradcheck.check_grads(f, {"a": a}, {"a": g * np.nan}), ValueError, r"^grads\['a'\] must be finite"),
    "no arrays": (lambda a, f, g: gradcheck.check_grads(f, {}, {}), ValueError, r"^arrays must name at least one array"),
    "shared memory": (lambda a, f, g: gradcheck.check_grads(f, {"a": a, "b": a[0]}, {"a": g, "b": g[0]}), ValueError,
                      r"^arrays\['a'\] and arrays\['b'\] must not share memory"),
    "read-only": (lambda a, f, g: gradcheck.check_grads(f, {"a": np.broadcast_to(a, a.shape)}, {"a": g}), ValueError,
                  r"^arrays\['a'\] must be writable"),
    "f returns None": (lambda a, f, g: gradcheck.check_grads(lambda: None, {"a": a}, {"a": g}), TypeError,
                       r"^f must return a real number \(the loss\); got NoneType"),
    "f returns an array": (lambda a, f, g: gradcheck.directional_check(lambda: np.sin(a), {"a": a}, {"a": g}), TypeError,
                           r"^f must return a real number"),
    "f returns NaN": (lambda a, f, g: gradcheck.elementwise_check(lambda: float("nan"), {"a": a}, {"a": g}), ValueError,
                      r"^f must return a finite number; got nan at a\[0\] \+ eps"),
    "rng seed": (lambda a, f, g: gradcheck.directional_check(f, {"a": a}, {"a": g}, rng=0), TypeError, r"^rng must be a numpy"),
}


@pytest.mark.parametrize("case", list(GRADCHECK_CASES))
def test_gradcheck_validates_every_argument(case):
    call, exc, match = GRADCHECK_CASES[case]
    a, f, g = _problem()
    a0 = a.copy()
    with pytest.raises(exc, match=match):
        call(a, f, g)
    np.testing.assert_array_equal(a, a0)  # restored even when f failed mid-way


def test_relative_error_never_broadcasts():
    with pytest.raises(ValueError, match=r"^b must have the shape of a \(3, 1\); got \(4,\)\. .*never broadcast"):
        gradcheck.relative_error(np.zeros((3, 1)), np.ones(4))
    with pytest.raises(ValueError, match=r"^a must be finite"):
        gradcheck.relative_error([np.nan], [0.0])
    with pytest.raises(TypeError, match=r"^b must be a floating-point array"):
        gradcheck.relative_error([1.0], [True])
    assert gradcheck.relative_error([1, 2], [1.0, 2.2]) == pytest.approx(0.2 / 2.2)  # integers are promoted


def test_a_wrong_gradient_is_still_found_at_the_smallest_settings():
    a, f, g = _problem()
    with pytest.raises(gradcheck.GradcheckError):
        gradcheck.check_grads(f, {"a": a}, {"a": g * 1.1}, max_entries=1)


# ---------------------------------------------------------------------------- 7. analysis functions


def _gru(rng, L=2):
    return hs.GRU(2, 3, L, rng=rng)


PROBE_CASES = {
    "trace of a cell": (lambda r: trace(hs.GRUCell(2, 3), np.zeros((4, 2))), TypeError,
                        r"^layer must be a hiddenstate sequence layer .*got GRUCell\. A one-step cell"),
    "trace of a module": (lambda r: trace(np, np.zeros((4, 2))), TypeError, r"^layer must be a hiddenstate sequence layer"),
    "layer_map index 5 of 2": (lambda r: layer_map(_gru(r), layer_index=5), ValueError,
                               r"^layer_index must be an integer in \[-2, 2\) \(2 layers; negative counts from the end\); got 5"),
    "layer_map index float": (lambda r: layer_map(_gru(r), layer_index=1.0), TypeError, r"^layer_index must be an integer"),
    "layer_map direction": (lambda r: layer_map(_gru(r), direction=1), ValueError, r"^direction must be an integer in \[-1, 1\)"),
    "layer_map x (1, I)": (lambda r: layer_map(_gru(r), np.zeros((1, 2))), ValueError, r"^x must have shape \(2,\)"),
    "layer_map of a cell": (lambda r: layer_map(hs.GRUCell(2, 3)), TypeError, r"^layer must be a hiddenstate sequence layer"),
    "layer_map F wrong state": (lambda r: layer_map(_gru(r))[0](np.zeros(4)), ValueError, r"^s must have shape \(S=3,\)"),
    "sensitivity wraps no more": (lambda r: sensitivity(_gru(r), np.zeros((4, 1, 2)), layer_index=5), ValueError,
                                  r"^layer_index must be an integer in \[-2, 2\)"),
    "sensitivity direction": (lambda r: sensitivity(_gru(r), np.zeros((4, 1, 2)), direction=-3), ValueError, r"^direction must be"),
    "jacobian_flow max_lag float": (lambda r: jacobian_flow(np.zeros((4, 3, 3)), max_lag=2.9), TypeError,
                                    r"^max_lag must be a non-negative integer; got float 2.9"),
    "jacobian_flow trace max_lag > T": (lambda r: jacobian_flow(trace(_gru(r), np.zeros((4, 1, 2)))[0], max_lag=5), ValueError,
                                        r"^max_lag must be in \[0, T=4\]"),
    "jacobian_flow NaN": (lambda r: jacobian_flow(np.full((2, 3, 3), np.nan)), ValueError, r"^source must be finite"),
    "jacobian_flow bool": (lambda r: jacobian_flow(np.zeros((2, 3, 3), dtype=bool)), TypeError, r"^source must be a floating-point"),
    "pca n_components 2.5": (lambda r: pca(r.normal(size=(10, 3)), n_components=2.5), TypeError,
                             r"^n_components must be a positive integer; got float 2.5"),
    "pca n_components 0": (lambda r: pca(r.normal(size=(10, 3)), n_components=0), ValueError, r"^n_components must be a positive"),
    "pca float mask": (lambda r: pca(r.normal(size=(10, 3)), mask=np.ones(10)), TypeError, r"^mask must be a bool array of shape \(10,\)"),
    "pca strings": (lambda r: pca([["a", "b"], ["c", "d"]]), TypeError, r"^states must be a floating-point array"),
    "pca H = 0": (lambda r: pca(np.zeros((5, 0))), ValueError, r"^states must have shape \(\.\.\., H\) with H >= 1"),
    "transform wrong H": (lambda r: pca(r.normal(size=(10, 3))).transform(np.zeros((2, 4))), ValueError,
                          r"^states must have shape \(\.\.\., H=3\)"),
    "n_components_for 0": (lambda r: pca(r.normal(size=(10, 3))).n_components_for(0.0), ValueError, r"^fraction must be a number in \(0, 1\]"),
    "memory max_lag float": (lambda r: memory_curve(r.normal(size=(20, 3)), np.zeros(20), max_lag=2.9), TypeError,
                             r"^max_lag must be a non-negative integer; got float"),
    "memory alpha str": (lambda r: memory_curve(r.normal(size=(20, 3)), np.zeros(20), alpha="1"), TypeError, r"^alpha must be a number"),
    "memory complex inputs": (lambda r: memory_curve(r.normal(size=(20, 3)), np.zeros(20, dtype=complex)), TypeError,
                              r"^inputs must be real numbers"),
    "memory int mask": (lambda r: memory_curve(r.normal(size=(20, 3)), np.zeros(20), mask=np.ones(20, dtype=int)), TypeError,
                        r"^mask must be a bool array"),
    "ridge shapes": (lambda r: ridge_fit(np.zeros((4, 2)), np.zeros((3, 1))), ValueError, r"^Y must have shape \(M=4, P\)"),
    "classify NaN": (lambda r: classify_point(np.full((2, 2), np.nan)), ValueError, r"^jacobian must be finite"),
    "classify not square": (lambda r: classify_point(np.zeros((2, 3))), ValueError, r"^jacobian must have shape \(H, H\)"),
    "classify margin": (lambda r: classify_point(np.eye(2), margin=-1), ValueError, r"^margin must be a finite number >= 0"),
    "fixed points max_iter float": (lambda r: find_fixed_points(np.tanh, lambda h: np.eye(1), [[0.1]], max_iter=2.5), TypeError,
                                    r"^max_iter must be a positive integer; got float"),
    "fixed points method": (lambda r: find_fixed_points(np.tanh, lambda h: np.eye(1), [[0.1]], method="newton"), ValueError,
                            r"^method must be one of L-BFGS-B"),
    "fixed points bounds with BFGS": (lambda r: find_fixed_points(np.tanh, lambda h: np.eye(1), [[0.1]], method="BFGS",
                                                                  bounds=(-1, 1)), ValueError, r"^method must be one of .* when bounds"),
    "fixed points bounds reversed": (lambda r: find_fixed_points(np.tanh, lambda h: np.eye(1), [[0.1]], bounds=(1, -1)), ValueError,
                                     r"^bounds\[0\] must have low <= high"),
    "fixed points F not callable": (lambda r: find_fixed_points(3, lambda h: np.eye(1), [[0.1]]), TypeError, r"^F must be callable"),
    "fixed points F NaN": (lambda r: find_fixed_points(lambda h: h * np.nan, lambda h: np.eye(1), [[0.1]]), ValueError,
                           r"^F\(h\) and jac\(h\) must return finite values"),
    "gate_statistics float mask": (lambda r: gate_statistics(np.full((4, 2), 0.5), mask=np.ones(4)), TypeError, r"^mask must be a bool"),
    "gate_statistics name": (lambda r: gate_statistics(np.full((4, 2), 0.5), name=3), TypeError, r"^name must be a str"),
    "time_constant NaN": (lambda r: time_constant([0.5, np.nan]), ValueError, r"^mean_keep must lie in \[0, 1\]; got 1 NaN"),
    "units top 0": (lambda r: unit_feature_correlation(r.normal(size=(6, 3)), np.arange(6.0), top=0), ValueError,
                    r"^top must be a positive integer; got 0"),
    "units top float": (lambda r: unit_feature_correlation(r.normal(size=(6, 3)), np.arange(6.0), top=1.5), TypeError, r"^top must be"),
    "best_units not a mapping": (lambda r: best_units(r.normal(size=(6, 3)), [np.arange(6.0)]), TypeError, r"^features must be a mapping"),
    "inside_quotes quote int": (lambda r: inside_quotes('a"b', quote=5), TypeError, r"^quote must be a str"),
    "bracket_depth close list": (lambda r: bracket_depth("(a)", close=[")"]), TypeError, r"^close must be a str"),
    "curve index": (lambda r: GradientNorms(np.zeros((2, 3)), np.zeros((2, 3, 1)), None, np.zeros(2)).curve(5), ValueError,
                    r"^layer must be an integer in \[-2, 2\)"),
    "hidden_gradient_norms cell": (lambda r: hidden_gradient_norms(hs.GRUCell(2, 3), np.zeros((4, 1, 2))), TypeError,
                                   r"^layer must be a hiddenstate sequence layer"),
    "analyze max_lag float": (lambda r: analyze_model(_gru(r, 1), np.zeros((20, 1, 2)), max_lag=2.9), TypeError,
                              r"^max_lag must be a non-negative integer; got float"),
    "analyze starts negative": (lambda r: analyze_model(_gru(r, 1), np.zeros((20, 1, 2)), n_fixed_point_starts=-1), ValueError,
                                r"^n_fixed_point_starts must be a non-negative integer"),
    "analyze tokens shape": (lambda r: analyze_model(_gru(r, 1), np.zeros((20, 2, 2)), tokens=np.zeros(20, dtype=int)), ValueError,
                             r"^tokens must have shape \(T=20, N=2\)"),
    "analyze tokens float": (lambda r: analyze_model(_gru(r, 1), np.zeros((20, 1, 2)), tokens=np.zeros(20)), TypeError,
                             r"^tokens must be an integer array"),
    "analyze text bytes": (lambda r: analyze_model(_gru(r, 1), np.zeros((20, 1, 2)), text=b"abc"), TypeError, r"^text must be a str"),
    "memory_sweep size float": (lambda r: memory_sweep("gru", [2.5], np.zeros((10, 1, 2)), np.zeros((10, 1, 2))), TypeError,
                                r"^hidden_sizes\[0\] must be a positive integer; got float 2.5"),
    "memory_sweep repeats 0": (lambda r: memory_sweep("gru", [2], np.zeros((10, 1, 2)), np.zeros((10, 1, 2)), repeats=0), ValueError,
                               r"^repeats must be a positive integer"),
}


@pytest.mark.parametrize("case", list(PROBE_CASES))
def test_probe_functions_validate_their_arguments(case, rng):
    call, exc, match = PROBE_CASES[case]
    with pytest.raises(exc, match=match):
        call(rng)


def test_negative_indices_are_documented_and_mean_the_top_layer(rng):
    layer = _gru(rng)
    x = rng.normal(size=(6, 2, 2))
    top, neg = sensitivity(layer, x, layer_index=1), sensitivity(layer, x, layer_index=-1)
    np.testing.assert_array_equal(top.spectral, neg.spectral)
    F1, _ = layer_map(layer, np.zeros(3), layer_index=-1)
    F2, _ = layer_map(layer, np.zeros(3), layer_index=1)
    s = rng.uniform(-0.5, 0.5, 3)
    np.testing.assert_array_equal(F1(s), F2(s))
    tr = trace(layer, x)
    assert tr[-1] is tr[1]
    with pytest.raises(IndexError, match="trace index must be"):
        tr[2]
    with pytest.raises(TypeError, match="trace index .* must be an integer"):
        tr[1.0]


def test_analyze_model_records_a_skipped_memory_curve_instead_of_swallowing_errors(rng):
    layer = _gru(rng, 1)
    an = analyze_model(layer, rng.normal(size=(3, 1, 2)), n_fixed_point_starts=0, grad_steps=0)
    assert an.memory is None
    assert an.skipped["memory"].startswith("the sequences are too short for a held-out split: max_lag must leave")
    assert an.pca is not None
    # a real error of the measurement is not swallowed: tokens that do not fit the input
    with pytest.raises(ValueError, match=r"^tokens must have shape"):
        analyze_model(layer, rng.normal(size=(30, 1, 2)), tokens=np.zeros((29, 1), dtype=int), n_fixed_point_starts=0)
    an = analyze_model(hs.GRU(2, 3, bidirectional=True, rng=rng), rng.normal(size=(30, 1, 2)), n_fixed_point_starts=0)
    assert "gradient norms" in an.skipped and an.memory is not None


# ---------------------------------------------------------------------------- 8. one dtype rule


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint64])
def test_integer_arrays_are_promoted_to_float64_like_lists_of_ints(dtype):
    a = float_array("x", np.array([[1, 2], [3, 4]], dtype=dtype))
    assert a.dtype == np.float64
    np.testing.assert_array_equal(a, float_array("x", [[1, 2], [3, 4]]))
    assert float_array("x", np.arange(3, dtype=dtype), dtype=np.float32).dtype == np.float32


@pytest.mark.parametrize("value, shown", [
    (np.zeros(2, dtype=bool), "bool"), (np.zeros(2, dtype=complex), "complex128"), (np.array(["1.0"]), "<U3"),
    (np.array([1.0, None]), "object"), (np.zeros(2, dtype="datetime64[s]"), "datetime64"), ([True, False], "bool"),
    ([1 + 2j], "complex128"),
])
def test_bool_complex_object_and_strings_are_refused(value, shown):
    with pytest.raises(TypeError, match=rf"^x must be a floating-point array \(float32 or float64; integers are promoted "
                                        rf"to float64\); got dtype {shown}"):
        float_array("x", value)
    with pytest.raises(TypeError, match=r"^x must be a floating-point array; got str"):
        float_array("x", "1.0")


def test_the_rule_holds_at_every_boundary(rng):
    layer = make_layer("gru", 3, 4)
    xi = rng.integers(-2, 3, size=(5, 2, 3))
    np.testing.assert_array_equal(layer(xi)[0], layer(xi.astype(float))[0])
    cell = make_cell("lstm", 3, 4)
    np.testing.assert_array_equal(cell(xi[0])[0], cell(xi[0].astype(float))[0])
    np.testing.assert_array_equal(elman_step(xi[0, :, :2], np.zeros((2, 3), dtype=int), np.ones((2, 3), dtype=int),
                                             np.eye(3, dtype=int), np.zeros(3, dtype=int)),
                                  np.tanh(xi[0, :, :2].astype(float) @ np.ones((2, 3))))
    state = {k: v.astype(np.int64) for k, v in layer.state_dict().items()}
    layer.load_state_dict(state)
    np.testing.assert_array_equal(layer.params["weight_ih_l0"], state["weight_ih_l0"].astype(float))
    with pytest.raises(TypeError, match=r"^state_dict\['weight_ih_l0'\] must be a floating-point array"):
        layer.load_state_dict({**state, "weight_ih_l0": state["weight_ih_l0"].astype(bool)})


def test_from_torch_follows_the_dtype_rule(rng):
    from hiddenstate.interop import from_torch

    src = make_layer("gru_after", 3, 4)
    ints = {k: np.round(4 * v).astype(np.int64) for k, v in src.state_dict().items()}
    layer = from_torch(ints)
    for k, v in ints.items():
        assert layer.params[k].dtype == np.float64
        np.testing.assert_array_equal(layer.params[k], v)
    with pytest.raises(TypeError, match=r"^state_dict\['weight_ih_l0'\] must be a floating-point array .*got dtype bool"):
        from_torch({**ints, "weight_ih_l0": ints["weight_ih_l0"] > 0})
    with pytest.raises(TypeError, match=r"^state_dict\['bias_hh_l0'\] must be a floating-point array .*got dtype complex128"):
        from_torch({**ints, "bias_hh_l0": ints["bias_hh_l0"] + 0j})
    torch = pytest.importorskip("torch")
    t = {k: torch.from_numpy(v) for k, v in ints.items()}
    np.testing.assert_array_equal(from_torch(t).params["weight_hh_l0"], ints["weight_hh_l0"])
    with pytest.raises(TypeError, match=r"^state_dict\['weight_ih_l0'\] must be a floating-point tensor .*got dtype torch.bool"):
        from_torch({**t, "weight_ih_l0": t["weight_ih_l0"] > 0})
    with pytest.raises(TypeError, match=r"must be a floating-point tensor .*got dtype torch.complex128"):
        from_torch({**t, "bias_ih_l0": t["bias_ih_l0"].to(torch.complex128)})


# ---------------------------------------------------------------------------- 9. an accurate public sigmoid


def _sigmoid_reference(x: float) -> float:
    """1 / (1 + exp(-x)) with 60 significant digits (Decimal's exp is correctly rounded), then rounded once."""
    getcontext().prec = 60
    return float(Decimal(1) / (Decimal(1) + (-Decimal(x)).exp()))


def _ulps(got, want):
    return abs(got - want) / math.ulp(want) if want else abs(got) / 5e-324


def test_sigmoid_is_accurate_to_a_few_ulps_over_the_whole_range():
    xs = np.concatenate([np.linspace(-744, 40, 4001), np.linspace(-40, 40, 2001), np.geomspace(1e-300, 700, 400),
                         -np.geomspace(1e-300, 700, 400), [-50.0, -20.0, 0.0, 5e-324, -5e-324]])
    got = F.sigmoid(xs)
    worst = max(_ulps(float(g), _sigmoid_reference(float(v))) for g, v in zip(got, xs))
    assert worst <= 3.0, worst
    assert F.sigmoid(np.array([-50.0]))[0] == pytest.approx(1.9287498479639178e-22, rel=4e-16)
    assert _ulps(float(F.sigmoid(np.array([-20.0]))[0]), _sigmoid_reference(-20.0)) <= 2  # the tanh form is off in digit 9
    assert F.sigmoid_tanh(np.array([-50.0]))[0] == 0.0  # the kernels' form: absolute, not relative, accuracy


def test_sigmoid_float32_and_the_gates_are_accurate(rng):
    xs = np.linspace(-100, 20, 3001).astype(np.float32)
    got = F.sigmoid(xs)
    assert got.dtype == np.float32
    for g, v in zip(got, xs):
        want = np.float32(_sigmoid_reference(float(v)))
        if want >= np.finfo(np.float32).tiny:
            assert abs(float(g) - float(want)) <= 3 * float(np.spacing(want)), v
    W, U, b = np.ones((1, 1)), np.zeros((1, 1)), np.zeros(1)
    for gate in (update_gate, reset_gate):
        z = gate(np.array([-60.0]), np.zeros(1), W, U, b)[0]
        assert _ulps(float(z), _sigmoid_reference(-60.0)) <= 3


def test_the_kernels_keep_the_tanh_form_bit_for_bit(rng):
    """RNN(nonlinearity="sigmoid") still computes 0.5 * tanh(a / 2) + 0.5 (torch-parity numerics untouched)."""
    layer = make_layer("rnn_sigmoid", 3, 4) if "rnn_sigmoid" in KINDS else pytest.skip("no sigmoid RNN")
    x = rng.standard_normal((1, 2, 3)) * 30
    p = layer.params
    a = x[0] @ p["weight_ih_l0"].T + p["bias_ih_l0"] + p["bias_hh_l0"]
    want = 0.5 * np.tanh(0.5 * a) + 0.5
    np.testing.assert_array_equal(layer(x)[0][0], want)


# ---------------------------------------------------------------------------- 10. textbook shape errors name the symbols


TEXTBOOK_CASES = {
    "elman h_prev (H,) for a batch": (lambda: elman_step(np.zeros((2, 2)), np.zeros(3), np.zeros((2, 3)), np.zeros((3, 3)), np.zeros(3)),
                                      r"so h_prev must have shape \(N=2, H=3\); got x_t \(2, 2\) and h_prev \(3,\)"),
    "elman h_prev wrong N": (lambda: elman_step(np.zeros((2, 2)), np.zeros((3, 3)), np.zeros((2, 3)), np.zeros((3, 3)), np.zeros(3)),
                             r"h_prev must have shape \(N=2, H=3\)"),
    "elman h_prev wrong H": (lambda: elman_step(np.zeros((2, 2)), np.zeros((2, 4)), np.zeros((2, 3)), np.zeros((3, 3)), np.zeros(3)),
                             r"^h_prev must have last dimension H=3; got \(2, 4\)\. Its shape must be \(N=2, H=3\) \(H=3 from W_xh "
                             r"\(2, 3\)\)"),
    "elman x wrong D": (lambda: elman_step(np.zeros(4), np.zeros(3), np.zeros((2, 3)), np.zeros((3, 3)), np.zeros(3)),
                        r"^x_t must have last dimension D=2; got \(4,\)\. Its shape must be \(D=2,\)"),
    "elman single h batched": (lambda: elman_step(np.zeros(2), np.zeros((1, 3)), np.zeros((2, 3)), np.zeros((3, 3)), np.zeros(3)),
                               r"so h_prev must have shape \(H=3,\)"),
    "elman W_hh": (lambda: elman_step(np.zeros(2), np.zeros(3), np.zeros((2, 3)), np.zeros((3, 2)), np.zeros(3)),
                   r"^W_hh must have shape \(H, H\)=\(3, 3\); got \(3, 2\)\. H=3 is the number of columns of W_xh \(2, 3\)"),
    "gru_step h_prev": (lambda: gru_step(np.zeros((2, 2)), np.zeros(3), {k: (np.zeros((2, 3)) if k[0] == "W" else
                                                                                 np.zeros((3, 3)) if k[0] == "U" else np.zeros(3))
                                                                             for k in ("W_z", "U_z", "b_z", "W_r", "U_r", "b_r",
                                                                                       "W_h", "U_h", "b_h")}),
                        r"so h_prev must have shape \(N=2, H=3\)"),
    "candidate r_t": (lambda: candidate(np.zeros((2, 2)), np.zeros((2, 3)), np.zeros(3), np.zeros((2, 3)), np.zeros((3, 3)),
                                        np.zeros(3)), r"^r_t must have the shape of h_prev \(2, 3\); got \(3,\)\. The gate is "
                                                      r"elementwise: \(N, H\)"),
}


@pytest.mark.parametrize("case", list(TEXTBOOK_CASES))
def test_textbook_shape_errors_name_the_expected_shape_with_symbols(case):
    call, match = TEXTBOOK_CASES[case]
    with pytest.raises(ValueError, match=match):
        call()
