"""Property test (hypothesis): the public API under malformed input raises ValueError/TypeError or is right.

Each test drives one part of the API with arguments that are mostly valid and partly replaced by
junk (wrong shapes, dtypes and types, NaN, Inf and huge values, negative sizes, strings for
bools, objects, callables ...). Every call must either raise ``ValueError``/``TypeError`` with a
message in the package's style (``"... must ..."``), or return a result that the test verifies
independently (against the same call on canonical float64 input, a NumPy reference, or an
invariant). Any other exception (IndexError, AttributeError, LinAlgError, FloatingPointError,
KeyError, ...) fails the test. The counts of calls and outcomes are printed at the end of the
module (``fuzz_api: ...`` in pytest's output). ``HIDDENSTATE_FUZZ_EXAMPLES=2000`` runs more examples, randomised
(the default is 600 per test, derandomized, about 15 s).
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hiddenstate as hs
from hiddenstate.classic import gradcheck, textbook
from hiddenstate.core import ragged
from hiddenstate.probe import fixedpoints, gatestats, gradflow, memory, pca, trace, unitfeatures
from tests.strategies import make_layer

OUTCOMES: Counter = Counter()
FUZZ = settings(max_examples=int(os.environ.get("HIDDENSTATE_FUZZ_EXAMPLES", 600)), deadline=None,
                derandomize=not os.environ.get("HIDDENSTATE_FUZZ_EXAMPLES"), database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


@pytest.fixture(scope="module", autouse=True)
def _report_counts(request):
    yield
    calls = sum(OUTCOMES.values())
    by_outcome = Counter()
    for (_, outcome), n in OUTCOMES.items():
        by_outcome[outcome] += n
    by_target = Counter()
    for (target, _), n in OUTCOMES.items():
        by_target[target] += n
    line = (f"fuzz_api: {calls} calls with malformed input; outcomes {dict(sorted(by_outcome.items()))}; "
            f"per target {dict(sorted(by_target.items()))}")
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if capture is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():  # shown in pytest's output, not captured with the teardown
        print("\n" + line)


def attempt(target: str, call, verify=None) -> None:
    """Run ``call``; count a clear ValueError/TypeError, or verify and count the result. Anything else fails."""
    try:
        result = call()
    except (ValueError, TypeError) as exc:
        msg = str(exc)
        assert re.search(r" must |does not fit|is missing|needs about", msg), f"{target}: unclear {type(exc).__name__}: {msg}"
        OUTCOMES[(target, type(exc).__name__)] += 1
        return
    if verify is not None:
        verify(result)
    OUTCOMES[(target, "verified result")] += 1


# ---------------------------------------------------------------------------- junk

JUNK_SCALARS = [None, True, False, 0, -1, 3, 2.5, -0.0, float("nan"), float("inf"), -float("inf"), 1e308, "False",
                "3", "", b"x", [], [1, [2]], {}, {"a": 1}, (1, 2), object(), len, np.float64("nan"), np.int64(3),
                np.bool_(True), np.float32(1.5), slice(1), 10**30, -(10**30), 1j]

DTYPES = ["float64", "float32", "float16", "int64", "int8", "uint8", "bool", "complex128", "object", "<U3", "datetime64[s]"]
FILLS = ["normal", "normal", "nan", "inf", "huge", "zeros", "ints"]
MOSTLY_VALID = dict(dtypes=["float64"] * 6 + ["float32", "int64", "bool", "complex128", "object"],
                    fills=["normal"] * 6 + ["ints", "zeros", "nan", "huge"])


@st.composite
def arrays(draw, shape=None, dtypes=DTYPES, fills=FILLS, max_value=None):
    """An ndarray of a drawn (or given) shape, dtype and kind of values."""
    if shape is None:
        shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=4)))
    dtype = draw(st.sampled_from(dtypes))
    fill = draw(st.sampled_from(fills))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    with np.errstate(all="ignore"):
        return _build(rng, shape, dtype, fill, max_value)


def _build(rng, shape, dtype, fill, max_value):
    base = rng.standard_normal(shape)
    if fill == "nan":
        base.flat[: max(1, base.size // 3)] = np.nan if base.size else 0.0
    elif fill == "inf":
        base.flat[: max(1, base.size // 3)] = np.inf if base.size else 0.0
    elif fill == "huge":
        base = base * (max_value or 1e308)
    elif fill == "zeros":
        base = np.zeros(shape)
    elif fill == "ints":
        base = np.round(base * 3)
    if dtype == "object":
        out = np.empty(shape, dtype=object)
        out.flat[:] = list(base.flat)
        return out
    if dtype == "<U3":
        return np.full(shape, "1.5")
    if dtype == "datetime64[s]":
        return np.zeros(shape, dtype=dtype)
    if dtype in ("int64", "int8", "uint8", "bool"):
        base = np.nan_to_num(base, nan=0.0, posinf=1.0, neginf=-1.0)
        base = np.clip(base, -100, 100)
    return base.astype(dtype)


def maybe_junk(draw, valid, p_junk=0.35):
    """``valid`` most of the time, else a junk scalar or a junk array."""
    r = (draw(st.integers(0, 2**20)) * 2654435761 % 1000) / 1000  # hashed: hypothesis's bias towards 0 would always pick junk
    if r >= p_junk:
        return valid
    if r > p_junk / 2:
        return draw(st.sampled_from(JUNK_SCALARS))
    return draw(arrays())


def near_shape(draw, shape):
    """``shape`` itself, or one axis changed, dropped or added."""
    shape = list(shape)
    how = draw(st.sampled_from(["same"] * 5 + ["change", "drop", "add"]))
    if how == "change" and shape:
        i = draw(st.integers(0, len(shape) - 1))
        shape[i] = draw(st.integers(0, 5))
    elif how == "drop" and shape:
        shape.pop(draw(st.integers(0, len(shape) - 1)))
    elif how == "add":
        shape.insert(draw(st.integers(0, len(shape))), draw(st.integers(1, 3)))
    return tuple(shape)


def finite(*arrays_):
    for a in arrays_:
        for p in (a if isinstance(a, tuple) else (a,)):
            assert np.isfinite(p).all()


def canonical(a, dtype=np.float64):
    return np.asarray(a).astype(dtype)


KIND_NAMES = ["rnn_tanh", "rnn_relu", "gru", "gru_after", "lstm"]


# ---------------------------------------------------------------------------- layers and cells


@FUZZ
@given(data=st.data())
def test_layer_constructors(data):
    draw = data.draw
    cls = draw(st.sampled_from([hs.RNN, hs.GRU, hs.LSTM]))
    args = {"input_size": 3, "hidden_size": 4, "num_layers": 1}
    kw = {"bias": True, "batch_first": False, "bidirectional": False, "dropout": 0.0, "weight_drop": 0.0,
          "learn_h0": False, "dtype": np.float64, "rng": np.random.default_rng(0)}
    if cls is hs.GRU:
        kw["reset_after"] = False
    if cls is hs.RNN:
        kw["nonlinearity"] = "tanh"
    for name in draw(st.lists(st.sampled_from(list(args) + list(kw)), min_size=1, max_size=2, unique=True)):
        target = args if name in args else kw
        target[name] = maybe_junk(draw, target[name], p_junk=1.0)

    def verify(layer):
        for name in ("input_size", "hidden_size", "num_layers"):
            assert isinstance(args[name], (int, np.integer)) and getattr(layer, name) == args[name] >= 1
        for name in ("bias", "batch_first", "bidirectional", "learn_h0", "reset_after"):
            if name in kw:
                assert isinstance(kw[name], (bool, np.bool_)) and getattr(layer, name) == kw[name]
        assert 0.0 <= layer.dropout < 1.0 and layer.dropout == float(kw["dropout"])
        out, _ = layer(np.zeros((2, 1, layer.input_size)))
        finite(out)

    attempt(f"{cls.__name__}()", lambda: cls(args["input_size"], args["hidden_size"], args["num_layers"], **kw), verify)


@FUZZ
@given(data=st.data())
def test_layer_forward_and_backward(data):
    draw = data.draw
    kind = draw(st.sampled_from(KIND_NAMES))
    L, bidir, bf = draw(st.integers(1, 2)), draw(st.booleans()), draw(st.booleans())
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    layer = make_layer(kind, 3, 4, L, bidirectional=bidir, batch_first=bf, dtype=dtype, learn_h0=draw(st.booleans()))
    T, N, LD = draw(st.integers(0, 4)), draw(st.integers(1, 3)), L * (2 if bidir else 1)
    x_shape = near_shape(draw, (N, T, 3) if bf else (T, N, 3))
    x = maybe_junk(draw, draw(arrays(shape=x_shape, max_value=1e200, **MOSTLY_VALID)), p_junk=0.1)
    h0 = None
    if draw(st.booleans()):
        h = draw(arrays(shape=near_shape(draw, (LD, N, 4)), max_value=1e3, **MOSTLY_VALID))
        h0 = (h, h.copy()) if kind == "lstm" and draw(st.booleans()) else h
        h0 = maybe_junk(draw, h0, p_junk=0.2)
    kw = {}
    if draw(st.integers(0, 3)) == 0:
        kw["lengths"] = maybe_junk(draw, draw(st.lists(st.integers(-1, T + 1), min_size=N, max_size=N)), p_junk=0.3)
    if draw(st.integers(0, 3)) == 0:
        kw["reset"] = maybe_junk(draw, np.random.default_rng(T).random((N, T) if bf else (T, N)) < 0.3, p_junk=0.3)
    training = maybe_junk(draw, False, p_junk=0.1)

    def verify(result):
        out, h_n, cache = result
        finite(out, h_n)
        h0c = None if h0 is None else (tuple(canonical(p, dtype) for p in h0) if isinstance(h0, tuple) else canonical(h0, dtype))
        ref_out, ref_hn, _ = layer.forward(canonical(x, dtype), h0c, **kw)
        np.testing.assert_array_equal(out, ref_out)
        d_out = draw(arrays(shape=near_shape(draw, out.shape), dtypes=["float64", "int64", "bool", "float32"], max_value=1e300))
        attempt("layer.backward", lambda: layer.backward(cache, d_out),
                lambda g: (finite(g[1], *g[0].values()), np.testing.assert_array_equal(g[1], layer.backward(cache, canonical(d_out, dtype))[1])))

    attempt("layer.forward", lambda: layer.forward(x, h0, training=training, **kw), verify)


@FUZZ
@given(data=st.data())
def test_backward_with_foreign_caches(data):
    draw = data.draw
    a, b = make_layer(draw(st.sampled_from(KIND_NAMES)), 3, 4), make_layer(draw(st.sampled_from(KIND_NAMES)), 3, 4, seed=1)
    out, _, cache = a.forward(np.ones((3, 2, 3)))
    cell = hs.GRUCell(3, 4)
    _, cell_cache = cell.forward(np.ones(3))
    junk = draw(st.sampled_from([cache, cell_cache, (1, 2, 3), None, "cache", cache.prepared, cache.directions]))
    attempt("backward(foreign cache)", lambda: b.backward(junk, np.ones_like(out)), lambda g: finite(g[1]))
    attempt("cell.backward(foreign cache)", lambda: cell.backward(junk, np.ones(4)), lambda g: finite(g[1]))


@FUZZ
@given(data=st.data())
def test_cells(data):
    draw = data.draw
    cls = draw(st.sampled_from([hs.RNNCell, hs.GRUCell, hs.LSTMCell]))
    kw = {"bias": maybe_junk(draw, True, 0.2), "dtype": maybe_junk(draw, np.float64, 0.15)}
    size = maybe_junk(draw, 4, 0.15)

    def run_cell(cell):
        N = draw(st.integers(0, 3))
        x = maybe_junk(draw, draw(arrays(shape=near_shape(draw, (N, 3) if N else (3,)), max_value=1e300)), 0.15)
        hshape = near_shape(draw, (N, cell.hidden_size) if N else (cell.hidden_size,))
        h = None if draw(st.booleans()) else draw(arrays(shape=hshape, dtypes=["float64", "int64", "bool"], max_value=1e3))
        if cls is hs.LSTMCell and h is not None:
            h = draw(st.sampled_from([(h, h), h, [h, h]]))

        def verify(res):
            new, cache = res
            finite(new)
            d = draw(arrays(shape=near_shape(draw, np.shape(new[0] if isinstance(new, tuple) else new)),
                            dtypes=["float64", "int64", "bool"], max_value=1e300))
            d = (d, None) if (cls is hs.LSTMCell and draw(st.booleans())) else d
            attempt("cell.backward", lambda: cell.backward(cache, d), lambda g: finite(g[1], *g[0].values()))

        attempt("cell.forward", lambda: cell.forward(x, h), verify)

    attempt(f"{cls.__name__}()", lambda: cls(3, size, **kw), run_cell)


# ---------------------------------------------------------------------------- ragged helpers and textbook


@FUZZ
@given(data=st.data())
def test_ragged_helpers(data):
    draw = data.draw
    T, N = draw(st.integers(0, 4)), draw(st.integers(1, 3))
    lengths = maybe_junk(draw, draw(st.lists(st.integers(-1, T + 1), min_size=N, max_size=N)), 0.3)
    bf = maybe_junk(draw, False, 0.2)
    which = draw(st.sampled_from(["pad", "mask", "lengths", "last", "last_bwd", "reverse"]))
    if which == "pad":
        seqs = [draw(arrays(shape=(draw(st.integers(0, 3)), 2), dtypes=["float64", "int64", "bool", "object"])) for _ in range(N)]
        seqs = maybe_junk(draw, seqs, 0.2)
        pad = maybe_junk(draw, 0.0, 0.3)

        def verify(res):
            padded, lens = res
            tm = padded.swapaxes(0, 1) if bf else padded
            for n, s in enumerate(seqs):
                np.testing.assert_array_equal(tm[: len(s), n], np.asarray(s).astype(padded.dtype))
                assert lens[n] == len(s)

        attempt("pad_sequences", lambda: ragged.pad_sequences(seqs, batch_first=bf, padding_value=pad), verify)
    elif which == "mask":
        TT = maybe_junk(draw, T, 0.3)
        attempt("mask_from_lengths", lambda: ragged.mask_from_lengths(lengths, TT, batch_first=bf),
                lambda m: np.testing.assert_array_equal(m.T if bf else m, np.arange(m.shape[1 if bf else 0])[:, None]
                                                        < np.asarray(lengths)[None, :]))
    elif which == "lengths":
        m = draw(arrays(shape=near_shape(draw, (T, N)), dtypes=["bool", "bool", "int64", "float64"]))
        attempt("lengths_from_mask", lambda: ragged.lengths_from_mask(m, batch_first=bf),
                lambda lens: np.testing.assert_array_equal(lens, m.sum(axis=1 if bf else 0)))
    elif which == "last":
        out = draw(arrays(shape=near_shape(draw, (T, N, 2)), dtypes=["float64", "int64"]))
        out = maybe_junk(draw, out, 0.2)

        def verify(res):
            tm, lens = (np.swapaxes(out, 0, 1) if bf else out), np.asarray(lengths)
            for n in range(res.shape[0]):
                np.testing.assert_array_equal(res[n], tm[lens[n] - 1, n] if lens[n] else np.zeros((), tm.dtype))

        attempt("last_valid", lambda: ragged.last_valid(out, lengths, batch_first=bf), verify)
    elif which == "last_bwd":
        d = draw(arrays(shape=near_shape(draw, (N, 2)), max_value=1e300))
        TT = maybe_junk(draw, T, 0.3)
        attempt("last_valid_backward", lambda: ragged.last_valid_backward(d, lengths, TT, batch_first=bf),
                lambda g: np.testing.assert_array_equal(
                    ragged.last_valid(g, lengths, batch_first=bf),
                    np.where(np.asarray(lengths).reshape((-1,) + (1,) * (np.ndim(d) - 1)) > 0, canonical(d, g.dtype), 0)))
    else:
        x = maybe_junk(draw, draw(arrays(shape=near_shape(draw, (T, N, 2)))), 0.2)
        def verify(r):  # an involution that moves entries only: checked on the positions (NaN-safe for object arrays)
            idx = np.arange(np.size(x)).reshape(np.shape(x))
            once = ragged.reverse_padded(idx, lengths)
            np.testing.assert_array_equal(ragged.reverse_padded(once, lengths), idx)
            flat = np.asarray(x).reshape(-1)
            assert r.shape == np.shape(x) and all(a is b or a == b or (a != a and b != b)
                                                  for a, b in zip(r.reshape(-1), flat[once.reshape(-1)]))

        attempt("reverse_padded", lambda: ragged.reverse_padded(x, lengths), verify)


def _reference_elman(x, h, W, U, b):
    with np.errstate(all="ignore"):
        return np.tanh(canonical(x) @ canonical(W) + canonical(h) @ canonical(U) + canonical(b))


@FUZZ
@given(data=st.data())
def test_textbook_functions(data):
    draw = data.draw
    D, H, N = 2, 3, draw(st.integers(0, 3))
    xs, hsh = ((N, D), (N, H)) if N else ((D,), (H,))
    big = draw(st.sampled_from([1e3, 1e300]))
    x = maybe_junk(draw, draw(arrays(shape=near_shape(draw, xs), max_value=big)), 0.15)
    h = maybe_junk(draw, draw(arrays(shape=near_shape(draw, hsh), max_value=big)), 0.15)
    W = maybe_junk(draw, draw(arrays(shape=near_shape(draw, (D, H)), dtypes=["float64", "int64"], max_value=big)), 0.15)
    U = maybe_junk(draw, draw(arrays(shape=near_shape(draw, (H, H)), dtypes=["float64", "int64"], max_value=big)), 0.15)
    b = maybe_junk(draw, draw(arrays(shape=near_shape(draw, (H,)), dtypes=["float64", "int64"], max_value=big)), 0.15)
    which = draw(st.sampled_from(["elman", "update", "blend", "gru", "lstm"]))
    if which == "elman":
        attempt("elman_step", lambda: textbook.elman_step(x, h, W, U, b),
                lambda r: (finite(r), np.testing.assert_allclose(r, _reference_elman(x, h, W, U, b), rtol=1e-12, atol=1e-300)))
    elif which == "update":
        attempt("update_gate", lambda: textbook.update_gate(x, h, W, U, b), lambda r: finite(r) or None)
    elif which == "blend":
        z = draw(arrays(shape=near_shape(draw, hsh), fills=["normal", "zeros", "nan"]))
        z = np.clip(z, 0, 1) if z.dtype.kind == "f" and draw(st.booleans()) else z
        attempt("hidden_state_update", lambda: textbook.hidden_state_update(z, h, x),
                lambda r: (finite(r), np.testing.assert_allclose(r, canonical(z) * canonical(h) + (1 - canonical(z)) * canonical(x),
                                                                 rtol=1e-12, atol=1e-12 * max(1.0, np.abs(canonical(h)).max(initial=0)))))
    elif which == "gru":
        params = {k: (W if k[0] == "W" else U if k[0] == "U" else b) for k in ("W_z", "U_z", "b_z", "W_r", "U_r", "b_r", "W_h", "U_h", "b_h")}
        params = maybe_junk(draw, params, 0.1)
        attempt("gru_step", lambda: textbook.gru_step(x, h, params), finite)
    else:
        params = {f"{m}_{g}": (W if m == "W" else U if m == "U" else b) for g in "ifgo" for m in "WUb"}
        c = maybe_junk(draw, h, 0.2)
        attempt("lstm_step", lambda: textbook.lstm_step(x, h, c, params), lambda r: finite(*r))


# ---------------------------------------------------------------------------- gradcheck


@FUZZ
@given(data=st.data())
def test_gradcheck(data):
    draw = data.draw
    a = np.linspace(-1.0, 1.0, 6).reshape(3, 2)
    true = np.cos(a)
    f = lambda: float(np.sin(a).sum())
    g = draw(st.sampled_from(["exact", "wrong", "junk"]))
    grads = {"a": true if g == "exact" else (true * 1.1 if g == "wrong" else maybe_junk(draw, true, 1.0))}
    opts = {"eps": maybe_junk(draw, 1e-6, 0.4), "max_entries": maybe_junk(draw, 64, 0.4)}
    which = draw(st.sampled_from(["check", "elementwise", "directional", "relative"]))
    if which == "check":
        rtol = maybe_junk(draw, 1e-6, 0.4)

        def call():
            try:
                return gradcheck.check_grads(f, {"a": a}, grads, rtol=rtol, **opts)
            except gradcheck.GradcheckError:  # a reported failure: a wrong gradient, or rtol / eps at the noise level
                err = gradcheck.relative_error(grads["a"], true)
                assert err > 1e-7 or rtol < 1e-8 or opts["eps"] > 1e-2 or opts["eps"] < 1e-9, (err, rtol, opts)
                return None

        attempt("check_grads", call, lambda errs: errs is None or all(0 <= v <= rtol for v in errs.values()))
    elif which == "elementwise":
        attempt("elementwise_check", lambda: gradcheck.elementwise_check(f, {"a": a}, grads, **opts),
                lambda errs: all(math.isfinite(v) and v >= 0 for v in errs.values()) and (g != "wrong" or errs["a"] > 1e-3))
    elif which == "directional":
        nd = maybe_junk(draw, 3, 0.4)
        attempt("directional_check", lambda: gradcheck.directional_check(f, {"a": a}, grads, eps=opts["eps"], num_directions=nd),
                lambda e: math.isfinite(e) and e >= 0)
    else:
        other = maybe_junk(draw, draw(arrays(shape=near_shape(draw, (3, 2)))), 0.3)
        attempt("relative_error", lambda: gradcheck.relative_error(true, other),
                lambda e: math.isfinite(e) and e >= 0 and np.shape(other) == true.shape)


# ---------------------------------------------------------------------------- probes


@FUZZ
@given(data=st.data())
def test_probe_functions(data):
    draw = data.draw
    layer = make_layer(draw(st.sampled_from(KIND_NAMES)), 2, 3, draw(st.integers(1, 2)))
    T, N = draw(st.integers(0, 5)), draw(st.integers(1, 2))
    x = maybe_junk(draw, draw(arrays(shape=near_shape(draw, (T, N, 2)), max_value=1e6)), 0.2)
    which = draw(st.sampled_from(["trace", "gates", "pca", "memory", "fixed", "classify", "flow", "map", "sens", "gradnorms",
                                  "units"]))
    small = dict(dtypes=["float64", "float32", "int64", "bool", "complex128", "object"], max_value=1e6)
    if which == "trace":
        tgt = maybe_junk(draw, layer, 0.2)
        attempt("trace", lambda: trace.trace(tgt, x), lambda tr: finite(tr.output, tr.h_n))
    elif which == "gates":
        gate = draw(arrays(shape=near_shape(draw, (T, N, 3)), fills=["normal", "zeros", "nan"], **small))
        gate = np.clip(gate, 0, 1) if gate.dtype.kind == "f" and draw(st.booleans()) else gate
        mask = maybe_junk(draw, None, 0.3)
        low, high = maybe_junk(draw, 0.1, 0.2), maybe_junk(draw, 0.9, 0.2)
        attempt("gate_statistics", lambda: gatestats.gate_statistics(gate, mask=mask, low=low, high=high),
                lambda s: bool(np.all((s.mean >= 0) & (s.mean <= 1))))
    elif which == "pca":
        states = draw(arrays(shape=near_shape(draw, (max(T, 2), N, 3)), **small))
        k = maybe_junk(draw, None, 0.5)
        mask = maybe_junk(draw, None, 0.2)

        def verify(res):
            np.testing.assert_allclose(res.components @ res.components.T, np.eye(res.components.shape[0]), atol=1e-8)

        attempt("pca", lambda: pca.pca(states, n_components=k, mask=mask), verify)
    elif which == "memory":
        states = draw(arrays(shape=near_shape(draw, (12, N, 3)), **small))
        inputs = draw(arrays(shape=near_shape(draw, (12, N)), **small))
        kw = {"max_lag": maybe_junk(draw, 2, 0.3), "alpha": maybe_junk(draw, 1.0, 0.2),
              "train_fraction": maybe_junk(draw, 0.75, 0.2), "mask": maybe_junk(draw, None, 0.2)}
        attempt("memory_curve", lambda: memory.memory_curve(states, inputs, **kw), lambda mc: finite(mc.score))
    elif which == "fixed":
        inits = draw(arrays(shape=near_shape(draw, (2, 3)), **small))
        F, J = fixedpoints.layer_map(layer)
        kw = {k: maybe_junk(draw, v, 0.15) for k, v in (("tol", 1e-12), ("max_iter", 50), ("newton_steps", 5), ("margin", 1e-8),
                                                         ("method", "L-BFGS-B"), ("bounds", None), ("dedup_tol", None))}
        Fj = maybe_junk(draw, F, 0.1)
        attempt("find_fixed_points", lambda: fixedpoints.find_fixed_points(Fj, J, inits, **kw),
                lambda pts: all(p.q <= kw["tol"] and np.isfinite(p.h).all() for p in pts))
    elif which == "classify":
        Jm = draw(arrays(shape=near_shape(draw, (3, 3)), **small))
        margin = maybe_junk(draw, 1e-8, 0.2)
        attempt("classify_point", lambda: fixedpoints.classify_point(Jm, margin=margin),
                lambda r: 0 <= r[1] <= Jm.shape[0] and r[2] in ("stable", "marginal", "saddle", "unstable"))
    elif which == "flow":
        src = draw(st.sampled_from(["array", "trace"]))
        source = draw(arrays(shape=near_shape(draw, (3, N, 3, 3)), **small)) if src == "array" else None
        if source is None:
            attempt("trace", lambda: trace.trace(layer, x), None)
            try:
                source = trace.trace(layer, x)[0]
            except (ValueError, TypeError):
                return
        lag, block = maybe_junk(draw, None, 0.4), maybe_junk(draw, "h", 0.2)
        attempt("jacobian_flow", lambda: gradflow.jacobian_flow(source, max_lag=lag, block=block),
                lambda fl: np.isfinite(fl.spectral[0]) or fl.spectral.size == 0)
    elif which == "map":
        kw = {"layer_index": maybe_junk(draw, 0, 0.4), "direction": maybe_junk(draw, 0, 0.3)}
        xin = maybe_junk(draw, None, 0.4)
        attempt("layer_map", lambda: fixedpoints.layer_map(layer, xin, **kw),
                lambda fj: finite(fj[0](np.zeros(layer.kind.state_size(3)))))
    elif which == "sens":
        kw = {"layer_index": maybe_junk(draw, -1, 0.4), "direction": maybe_junk(draw, 0, 0.3), "max_lag": maybe_junk(draw, None, 0.3)}
        attempt("sensitivity", lambda: gradflow.sensitivity(layer, x, **kw), lambda fl: fl.lags.size >= 1)
    elif which == "gradnorms":
        dh = maybe_junk(draw, None, 0.5)
        attempt("hidden_gradient_norms", lambda: gradflow.hidden_gradient_norms(layer, x, dh_last=dh), lambda g: finite(g.norm))
    else:
        acts = draw(arrays(shape=near_shape(draw, (6, 3)), **small))
        feat = draw(arrays(shape=near_shape(draw, (6,)), **small))
        top = maybe_junk(draw, 2, 0.3)
        attempt("unit_feature_correlation", lambda: unitfeatures.unit_feature_correlation(acts, feat, top=top),
                lambda u: bool(np.all(np.abs(u.r) <= 1)))


# ---------------------------------------------------------------------------- interop: state dicts


@FUZZ
@given(data=st.data())
def test_from_torch_with_malformed_state_dicts(data):
    from hiddenstate.interop import from_torch

    draw = data.draw
    src = make_layer(draw(st.sampled_from(["rnn_tanh", "gru_after", "lstm"])), 3, 4, draw(st.integers(1, 2)),
                     bidirectional=draw(st.booleans()))
    state = src.state_dict()
    key = draw(st.sampled_from(sorted(state)))
    how = draw(st.sampled_from(["none", "drop", "add", "shape", "dtype", "nan", "junk", "list"]))
    if how == "drop":
        state.pop(key)
    elif how == "add":
        state[draw(st.sampled_from(["weight_hr_l0", "bias_ih_l9", "extra", "h0"]))] = np.zeros((4, 4))
    elif how == "shape":
        state[key] = np.zeros(near_shape(draw, state[key].shape))
    elif how == "dtype":
        state[key] = draw(arrays(shape=state[key].shape, fills=["normal", "ints"]))
    elif how == "nan":
        state[key] = state[key].copy()
        state[key].flat[0] = draw(st.sampled_from([np.nan, np.inf, 1e308]))
    elif how == "junk":
        state[key] = draw(st.sampled_from(JUNK_SCALARS))
    elif how == "list":
        state[key] = state[key].tolist()
    source = maybe_junk(draw, state, 0.1)
    kw = {"kind": maybe_junk(draw, None, 0.2), "batch_first": maybe_junk(draw, None, 0.2), "dtype": maybe_junk(draw, np.float64, 0.2)}

    def verify(layer):
        for k, v in source.items():
            np.testing.assert_array_equal(layer.params[k], canonical(v, layer.dtype))

    attempt("from_torch(state dict)", lambda: from_torch(source, **kw), verify)
