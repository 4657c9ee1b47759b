"""A bad-input sweep (hypothesis) over issue 26's recurrences and issue 25's family registry: results or clear errors.

As tests/test_sweep_edges.py and tests/test_sweep_new_surfaces.py do for the older surfaces: the
recurrent layers of issue 26 (:class:`~hiddenstate.kinds.delta.block.GatedDeltaNet`,
:class:`~hiddenstate.kinds.delta.block.KimiDeltaAttention`, :class:`~hiddenstate.kinds.rglru.block.RGLRUBlock`,
:class:`~hiddenstate.kinds.mlstm.block.MLSTMLayer`, :class:`~hiddenstate.kinds.rwkv.block.RWKVTimeMix`,
:class:`~hiddenstate.kinds.lightning.block.LightningAttention`, :class:`~hiddenstate.kinds.shortconv.block.ShortConv`):
their constructors, ``initial_state``, ``forward`` (inputs, initial states, ``lengths``,
``reset``, ``record``), ``backward`` and ``load_state_dict``; their kernels' two forms held
to each other on extreme values; and the family registry (``family_of``, ``Family.block``,
``tolerance``, ``estimate_bytes``, ``recompute_layers``, ``inspect_model`` of a tiny random
transformers model of each of issue 26's families) get inputs drawn from junk. Every call must end
in a result checked to be finite and of the right shape, or a ``ValueError``/``TypeError`` whose
message states a rule; every call runs under a watchdog (a hang fails). The counts per surface
are printed at the end (``sweep_recurrences: ...``).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hiddenstate as hs
from hiddenstate.kinds import get_kind
from hiddenstate.kinds.delta.block import GatedDeltaNet, KimiDeltaAttention
from hiddenstate.kinds.lightning.block import LightningAttention
from hiddenstate.kinds.mlstm.block import MLSTMLayer
from hiddenstate.kinds.rglru.block import RGLRUBlock
from hiddenstate.kinds.rwkv.block import RWKVTimeMix
from hiddenstate.kinds.shortconv.block import ShortConv

COUNTS: Counter = Counter()
SWEEP = settings(max_examples=int(os.environ.get("HIDDENSTATE_SWEEP_EXAMPLES", 15)), deadline=None, database=None,
                 derandomize=True, suppress_health_check=list(HealthCheck))
RULE = re.compile(r" must |needs about|does not exist|is missing|is required|requires ")
M = 8  # every block's width


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    line = f"sweep_recurrences: {sum(COUNTS.values())} inputs; {dict(sorted(COUNTS.items()))}"
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if capture is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():
        print("\n" + line)


@contextlib.contextmanager
def watchdog(seconds: int = 20):
    def fire(signum, frame):
        raise TimeoutError(f"a call ran longer than {seconds} s (a hang)")
    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def attempt(surface: str, call, check=None):
    """Run ``call``: a result (checked) or a clear ValueError/TypeError; returns the result or None."""
    try:
        with watchdog(), np.errstate(all="raise"):
            result = call()
    except (ValueError, TypeError) as error:
        assert RULE.search(str(error)), f"{surface}: unclear {type(error).__name__}: {error}"
        assert "Traceback" not in str(error)
        COUNTS[(surface, "refused")] += 1
        return None
    if check is not None:
        check(result)
    COUNTS[(surface, "result")] += 1
    return result


def finite(result):
    """Every float array in a result (tuples, lists, dicts, states) is finite."""
    stack = [result]
    while stack:
        a = stack.pop()
        if isinstance(a, np.ndarray) and a.dtype.kind == "f":
            assert np.isfinite(a).all(), "a NaN or Inf in a result"
        elif isinstance(a, (tuple, list)):
            stack.extend(a)
        elif isinstance(a, dict):
            stack.extend(a.values())


JUNK = st.sampled_from([None, True, 0, -1, 3, 2.5, float("nan"), float("inf"), 1e308, 10**12, -(10**30), "3", "",
                        "auto", b"x", [], [1, [2]], [[1, 2], [3]], {}, (1, 2), object(), np.float32(1.5),
                        np.int64(2), np.bool_(True), 1j, np.zeros(0), np.zeros((2, 0)), np.full(3, np.nan),
                        np.ones((2, 3)), np.array(["a"]), np.ones(3, dtype=bool)])
SIZES = st.one_of(JUNK, st.integers(-2, 0), st.just(10**12), st.just(2**62))  # beyond any machine's memory
REALS = st.one_of(JUNK, st.sampled_from([0.0, -1e-6, 1e308, 1e-320]))
DTYPES = st.one_of(JUNK, st.sampled_from([np.float16, int, complex, "bfloat16", "float128"]))
FLAGS = st.one_of(JUNK, st.sampled_from(["True", 1, 0]))
CHEAP = settings(SWEEP, max_examples=4 * SWEEP.max_examples)  # the calls that take milliseconds


def drawn(data, good: dict, bad: dict, most: int = 2) -> dict:
    """One value per argument from its ``good`` strategy, except up to ``most`` drawn from ``bad`` (default JUNK)."""
    spoilt = data.draw(st.lists(st.sampled_from(sorted(good)), max_size=most, unique=True), label="spoilt")
    return {k: data.draw(bad.get(k, JUNK) if k in spoilt else g, label=k) for k, g in good.items()}


def make(name, seed=0, **over):
    """One small block of each kind (M = 8), ``over`` replacing its options."""
    rng = np.random.default_rng(seed)
    kinds = {
        "GatedDeltaNet": lambda **o: GatedDeltaNet(M, **{"num_k_heads": 1, "num_v_heads": 2, "head_k_dim": 4,
                                                         "head_v_dim": 3, "d_conv": 3, "chunk": 2, **o}, rng=rng),
        "GatedDeltaNet/olmo": lambda **o: GatedDeltaNet(M, **{"num_k_heads": 2, "head_k_dim": 3, "d_conv": 2,
                                                              "layout": "olmo_hybrid", "allow_neg_eigval": True,
                                                              "chunk": None, **o}, rng=rng),
        "KimiDeltaAttention": lambda **o: KimiDeltaAttention(M, **{"num_heads": 2, "head_dim": 4, "d_conv": 3,
                                                                   "chunk": 2, **o}, rng=rng),
        "RGLRUBlock": lambda **o: RGLRUBlock(M, **{"num_heads": 2, "conv_width": 3, **o}, rng=rng),
        "RGLRUBlock/bf": lambda **o: RGLRUBlock(M, 4, **{"batch_first": True, "scan": "sequential", **o}, rng=rng),
        "MLSTMLayer": lambda **o: MLSTMLayer(M, 2, **o, rng=rng),
        "MLSTMLayer/fused": lambda **o: MLSTMLayer(M, 2, **{"weight_mode": "fused", "use_bias": True,
                                                            "scan": "sequential", "batch_first": True, **o}, rng=rng),
        "RWKVTimeMix": lambda **o: RWKVTimeMix(M, 6, **o, rng=rng),
        "LightningAttention": lambda **o: LightningAttention(M, 2, **{"chunk": 2, **o}, rng=rng),
        "ShortConv": lambda **o: ShortConv(M, **{"kernel_size": 3, "bias": True, **o}, rng=rng),
    }
    return kinds[name](**over)


NAMES = ("GatedDeltaNet", "GatedDeltaNet/olmo", "KimiDeltaAttention", "RGLRUBlock", "RGLRUBlock/bf", "MLSTMLayer",
         "MLSTMLayer/fused", "RWKVTimeMix", "LightningAttention", "ShortConv")
BLOCKS = {name: make(name) for name in NAMES}


def shapes_of(block, N):
    """The state shapes of ``block`` for N rows (without allocating)."""
    legends = block._legends(N) if hasattr(block, "_legends") else block._state_shapes(N)
    return [s for s, _ in legends]


def runs(block):
    """A block that was built: its parameters are finite and it runs two steps of two rows."""
    finite(block.params)
    u = np.random.default_rng(0).normal(size=(2, 2, block.d_model))
    out, final = block(u)
    finite((out, tuple(final)))
    assert out.shape == u.shape and [a.shape for a in final] == shapes_of(block, 2)


# -- constructors and initial_state ---------------------------------------------------------------------------
POS = st.integers(1, 5)
CONSTRUCTORS = {  # class, positional arguments, good options, bad options (default JUNK)
    "GatedDeltaNet": (GatedDeltaNet, ("d_model",), dict(
        d_model=POS, num_k_heads=st.integers(1, 3), num_v_heads=st.none(), head_k_dim=POS,
        head_v_dim=st.one_of(st.none(), POS), d_conv=POS, eps=st.one_of(st.none(), st.floats(1e-8, 1e-2)),
        layout=st.sampled_from(["qwen3_next", "olmo_hybrid"]), allow_neg_eigval=st.booleans(),
        chunk=st.one_of(st.none(), POS), batch_first=st.booleans(), dtype=st.sampled_from([np.float32, "float64"])),
        dict(d_model=SIZES, num_k_heads=SIZES, num_v_heads=SIZES, head_k_dim=SIZES, head_v_dim=SIZES, d_conv=SIZES,
             eps=REALS, chunk=SIZES, dtype=DTYPES, allow_neg_eigval=FLAGS, batch_first=FLAGS)),
    "KimiDeltaAttention": (KimiDeltaAttention, ("d_model",), dict(
        d_model=POS, num_heads=POS, head_dim=POS, d_conv=POS, eps=st.floats(1e-8, 1e-2),
        chunk=st.one_of(st.none(), POS), batch_first=st.booleans(), dtype=st.sampled_from([np.float32, np.float64])),
        dict(d_model=SIZES, num_heads=SIZES, head_dim=SIZES, d_conv=SIZES, eps=REALS, chunk=SIZES, dtype=DTYPES,
             batch_first=FLAGS)),
    "RGLRUBlock": (RGLRUBlock, ("hidden_size", "lru_width"), dict(
        hidden_size=POS, lru_width=st.sampled_from([None, 2, 4, 6]), num_heads=st.sampled_from([1, 2]),
        conv_width=POS, scan=st.sampled_from(["parallel", "sequential"]), batch_first=st.booleans(),
        dtype=st.sampled_from([np.float32, np.float64])),
        dict(hidden_size=SIZES, lru_width=SIZES, num_heads=SIZES, conv_width=SIZES, dtype=DTYPES, batch_first=FLAGS)),
    "MLSTMLayer": (MLSTMLayer, ("hidden_size", "num_heads"), dict(
        hidden_size=st.sampled_from([2, 4, 8]), num_heads=st.sampled_from([1, 2]), qk_dim_factor=st.just(0.5),
        v_dim_factor=st.sampled_from([1.0, 0.5]), use_bias=st.booleans(), weight_mode=st.sampled_from(["single",
                                                                                                      "fused"]),
        gate_soft_cap=st.one_of(st.none(), st.floats(0.5, 30)), norm_eps=st.floats(1e-8, 1e-2),
        eps=st.floats(0, 1e-2), scan=st.sampled_from(["chunkwise", "parallel", "sequential"]),
        batch_first=st.booleans(), dtype=st.sampled_from([np.float32, np.float64])),
        dict(hidden_size=SIZES, num_heads=SIZES, qk_dim_factor=REALS, v_dim_factor=REALS, gate_soft_cap=REALS,
             norm_eps=REALS, eps=REALS, dtype=DTYPES, use_bias=FLAGS, batch_first=FLAGS)),
    "RWKVTimeMix": (RWKVTimeMix, ("hidden_size", "attention_hidden_size"), dict(
        hidden_size=POS, attention_hidden_size=st.one_of(st.none(), POS), scan=st.sampled_from(["parallel",
                                                                                                "sequential"]),
        batch_first=st.booleans(), dtype=st.sampled_from([np.float32, np.float64])),
        dict(hidden_size=SIZES, attention_hidden_size=SIZES, dtype=DTYPES, batch_first=FLAGS)),
    "LightningAttention": (LightningAttention, ("hidden_size", "num_heads"), dict(
        hidden_size=st.integers(2, 6), num_heads=st.sampled_from([1, 2]), head_dim=st.one_of(st.none(), POS),
        slope_rate=st.sampled_from([None, [0.5, 1.0], [1e-300, 700.0], [1e300, 2.0]]),
        form=st.sampled_from(["chunked", "sequential"]), chunk=POS, batch_first=st.booleans(),
        dtype=st.sampled_from([np.float32, np.float64])),
        dict(hidden_size=SIZES, num_heads=SIZES, head_dim=SIZES, chunk=SIZES, dtype=DTYPES, batch_first=FLAGS,
             slope_rate=st.one_of(JUNK, st.sampled_from([[0.0, 1.0], [[1.0, 2.0]], [-1.0, 1.0], [np.nan, 1.0]])))),
    "ShortConv": (ShortConv, ("hidden_size",), dict(
        hidden_size=POS, kernel_size=POS, bias=st.booleans(), batch_first=st.booleans(),
        dtype=st.sampled_from([np.float32, np.float64])),
        dict(hidden_size=SIZES, kernel_size=SIZES, dtype=DTYPES, bias=FLAGS, batch_first=FLAGS)),
}


@CHEAP
@given(data=st.data(), which=st.sampled_from(sorted(CONSTRUCTORS)))
def test_constructors(data, which):
    cls, positional, good, bad = CONSTRUCTORS[which]
    kw = drawn(data, good, bad)
    if which == "LightningAttention" and isinstance(kw["slope_rate"], list) and len(kw["slope_rate"]) == 2:
        kw["slope_rate"] = kw["slope_rate"][:kw["num_heads"]] if isinstance(kw["num_heads"], int) else kw["slope_rate"]
    args = [kw.pop(k) for k in positional]
    attempt(f"{which}()", lambda: cls(*args, **kw, rng=np.random.default_rng(0)), runs)


@CHEAP
@given(name=st.sampled_from(NAMES), n=st.one_of(SIZES, POS))
def test_initial_state(name, n):
    block = BLOCKS[name]

    def check(state):
        assert isinstance(state, block.state_type if hasattr(block, "state_type") else tuple)
        assert [a.shape for a in state] == shapes_of(block, n)
        finite(state)
    attempt(f"{name}.initial_state", lambda: block.initial_state(n), check)


# -- forward, backward --------------------------------------------------------------------------------------------
def inputs(block, T, N):
    """Good forward inputs of ``block``: (T, N, M) or (N, T, M), random or with extreme values."""
    shape = (N, T, M) if block.batch_first else (T, N, M)
    return st.one_of(st.sampled_from([1.0, 3.0, 30.0]).map(lambda s: np.random.default_rng(T).normal(size=shape) * s),
                     st.sampled_from([1e150, 1e300, 1e-310, -1.0]).map(lambda v: np.full(shape, v)),
                     st.just(np.ones(shape, np.float32)), st.just(np.ones(shape, int)),
                     st.just(np.ones(shape).tolist()))


def bad_inputs(block, T, N):
    shape = (N, T, M) if block.batch_first else (T, N, M)
    return st.one_of(JUNK, st.sampled_from([np.full(shape, np.nan), np.full(shape, np.inf), np.ones(shape[:2] + (M + 1,)),
                                            np.ones(shape, np.float16), np.ones(shape, complex), np.ones(shape, bool),
                                            np.ones(shape[1:]), np.ones((1,) + shape), np.ones(shape, object),
                                            np.ones(shape[::-1])]))


def states(block, N):
    good = block.initial_state(N)
    return st.one_of(st.none(), st.just(good), st.just(tuple(good)), st.just(tuple(None for _ in good)),
                     st.just(tuple(np.random.default_rng(1).normal(size=a.shape) for a in good)),
                     st.just(tuple(a.astype(np.float32) for a in good)), st.just(tuple(a.tolist() for a in good)))


def bad_states(block, N):
    good = tuple(block.initial_state(N))
    return st.one_of(JUNK, st.sampled_from([
        list(good), good[:-1] or (None, None), good + (good[0],), tuple(a[:1] for a in good),
        tuple(a[None] for a in good), tuple(a * np.nan for a in good), tuple(np.full_like(a, 1e300) for a in good),
        good[::-1], tuple(a.astype(bool) for a in good), tuple(a.astype(complex) for a in good)]))


@CHEAP
@given(data=st.data(), name=st.sampled_from(NAMES), T=st.integers(0, 5), N=st.integers(0, 2))
def test_forward_backward(data, name, T, N):
    block = BLOCKS[name]
    rows = (N, T) if block.batch_first else (T, N)
    mask = np.zeros(rows, bool)
    mask[::2] = True
    good = dict(u=inputs(block, T, N), state=states(block, max(N, 1)) if N else st.none(),
                lengths=st.one_of(st.none(), st.just(np.arange(N) % (T + 1))) if "lengths" in getattr(
                    block, "supports", {"lengths"}) else st.none(),
                reset=st.one_of(st.none(), st.just(mask)) if "reset" in getattr(block, "supports", ()) else st.none(),
                record=st.booleans(), d_out=st.sampled_from([None, "ones", "random", "huge"]),
                d_final=st.sampled_from([None, "ones", "parts-none"]))
    bad = dict(u=bad_inputs(block, T, N), state=bad_states(block, max(N, 1)),
               lengths=st.one_of(JUNK, st.sampled_from([[T + 1] * N, [-1] * N, [1.0] * N, [True] * N, [[1] * N]])),
               reset=st.one_of(JUNK, st.sampled_from([mask.astype(int), mask.T.copy(), mask[:1]])),
               d_out=st.one_of(JUNK, st.sampled_from(["nan", "wrong", "f16", "T"])),
               d_final=st.one_of(JUNK, st.sampled_from(["nan", "short", "wrong", "list"])))
    kw = drawn(data, good, bad)
    d_out, d_final = kw.pop("d_out"), kw.pop("d_final")

    def check(res):
        out, final, cache = res[:3]
        assert len(res) == (4 if bool(kw["record"]) else 3)
        finite((out, tuple(final)) + (tuple(res[3:]),))
        assert out.shape == (N, T, M) if block.batch_first else (T, N, M)
        assert out.dtype == block.dtype
        assert [a.shape for a in final] == shapes_of(block, N)
        ones = tuple(np.ones_like(a) for a in final)
        dn = {"ones": ones, "nan": tuple(a * np.nan for a in ones), "short": ones[:-1] or (1,), "list": list(ones),
              "parts-none": (None,) * len(ones), "wrong": tuple(a[..., :0] for a in ones)}.get(d_final, d_final) \
            if isinstance(d_final, str) or d_final is None else d_final
        do = {"ones": np.ones_like(out), "random": np.random.default_rng(2).normal(size=out.shape),
              "huge": np.full_like(out, 1e300), "nan": np.full_like(out, np.nan), "T": out.T,
              "wrong": np.ones(out.shape[:-1] + (M + 1,)), "f16": np.ones_like(out, np.float16)}.get(d_out, d_out) \
            if isinstance(d_out, str) or d_out is None else d_out

        def grads_ok(g):
            grads, d_u, d_state = g
            finite((grads, d_u, tuple(d_state)))
            assert grads.keys() == block.params.keys()
            assert all(grads[k].shape == v.shape for k, v in block.params.items())
            assert d_u.shape == out.shape
            assert [a.shape for a in d_state] == [a.shape for a in final]
        attempt(f"{name}.backward", lambda: block.backward(cache, do, dn), grads_ok)
    attempt(f"{name}.forward", lambda: block.forward(kw["u"], kw["state"], lengths=kw["lengths"], reset=kw["reset"],
                                                     record=kw["record"]), check)


@SWEEP
@given(name=st.sampled_from(NAMES), cache=st.one_of(JUNK, st.sampled_from(["other", "tuple", "same"])))
def test_backward_cache(name, cache):
    block = BLOCKS[name]
    u = np.ones((3, 2, M))
    _, _, own = block.forward(u)
    c = {"other": lambda: make(name, seed=1).forward(u)[2], "tuple": lambda: own.kernel,
         "same": lambda: own}.get(cache, lambda: cache)() if isinstance(cache, str) else cache
    attempt(f"{name}.backward(cache)", lambda: block.backward(c, None), finite)


@CHEAP
@given(name=st.sampled_from(NAMES), key=st.integers(0, 50),
       value=st.one_of(JUNK, st.sampled_from([[[1.0, 2.0], [3.0]], "nan", "huge", "f32", "int", "T", "list"])),
       edit=st.sampled_from(["set", "set", "drop", "extra", "not-a-dict"]))
def test_load_state_dict(name, key, value, edit):
    block = make(name)
    before = block.state_dict()
    state = block.state_dict()
    k = sorted(state)[key % len(state)]
    v = state[k]
    if isinstance(value, str) and value in ("nan", "huge", "f32", "int", "T", "list"):
        value = {"nan": np.full_like(v, np.nan), "huge": np.full(v.shape, 1e300), "f32": v.astype(np.float32),
                 "int": np.ones(v.shape, int), "T": v.T, "list": v.tolist()}[value]
    if edit == "set":
        state[k] = value
    elif edit == "drop":
        del state[k]
    elif edit == "extra":
        state[k + "_x"] = value
    else:
        state = list(state.items())
    done = attempt(f"{name}.load_state_dict", lambda: block.load_state_dict(state) or "loaded")
    after = block.state_dict()
    if done is None:  # a refusal writes nothing
        assert all(np.array_equal(after[p], before[p]) for p in before), name
    else:
        finite(after)
        attempt(f"{name} after load_state_dict", lambda: block(np.ones((2, 2, M))), finite)


# -- the two forms of each kernel agree on extreme values (or refuse) --------------------------------------------
FORMS = {"GatedDeltaNet": {"chunk": None}, "KimiDeltaAttention": {"chunk": None},
         "RGLRUBlock": {"scan": "sequential"}, "MLSTMLayer": {"scan": "sequential"},
         "MLSTMLayer/fused": {"scan": "chunkwise"}, "RWKVTimeMix": {"scan": "sequential"},
         "LightningAttention": {"form": "sequential"}}


@SWEEP
@given(name=st.sampled_from(sorted(FORMS)), scale=st.sampled_from([1.0, 30.0, 1e3, 1e8, 1e150]),
       pscale=st.sampled_from([1.0, 10.0, 1e3]), T=st.integers(1, 7), key=st.integers(0, 50))
def test_forms_agree(name, scale, pscale, T, key):
    a, b = make(name), make(name, **FORMS[name])
    state = a.state_dict()
    k = sorted(state)[key % len(state)]
    state[k] = state[k] * pscale
    a.load_state_dict(state)
    b.load_state_dict(state)
    u = np.random.default_rng(T).normal(size=(2, T, M) if a.batch_first else (T, 2, M)) * scale
    ra = attempt(f"{name} forms", lambda: a.forward(u, record=True), lambda r: finite(r[:2]))
    rb = attempt(f"{name} forms", lambda: b.forward(u, record=True), lambda r: finite(r[:2]))
    if ra is None or rb is None:
        return
    for x, y in zip((ra[0],) + tuple(ra[1]), (rb[0],) + tuple(rb[1])):
        tol = 1e-7 * max(1.0, float(np.abs(y).max()))
        assert np.abs(x - y).max() <= tol, (name, k, scale, pscale, float(np.abs(x - y).max()), tol)


# -- the family registry ------------------------------------------------------------------------------------------
FAMILIES = ("qwen3_next", "kimi_linear", "recurrent_gemma", "xlstm", "rwkv", "minimax", "lfm2")


@pytest.fixture(scope="module")
def tiny():
    """One tiny random model of each of issue 26's families (float32, seeded, no download)."""
    pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers

    from hiddenstate.interop.families import family_of
    torch.manual_seed(0)
    models = {}
    for name in FAMILIES:
        fam = family_of(name)
        models[name] = getattr(transformers, fam.classes[0])(fam.tiny_config()).eval()
    return models


@SWEEP
@given(obj=st.one_of(JUNK, st.sampled_from(["mamba", "MAMBA", " rwkv", "gpt2", "rwkv\x00", "model", "config",
                                            "torch", "ours"])))
def test_family_of(tiny, obj):
    import torch

    from hiddenstate.interop.families import Family, family_of, find_family
    o = {"model": tiny["rwkv"], "config": tiny["xlstm"].config, "torch": torch.nn.GRU(2, 3),
         "ours": BLOCKS["RWKVTimeMix"]}.get(obj, obj) if isinstance(obj, str) else obj
    attempt("family_of", lambda: family_of(o), lambda f: isinstance(f, Family))
    attempt("find_family", lambda: find_family(o), lambda f: f is None or isinstance(f, Family))


@SWEEP
@given(name=st.sampled_from(FAMILIES), index=st.one_of(JUNK, st.integers(-1, 4)),
       dtype=st.one_of(JUNK, st.sampled_from([np.float32, "float64", np.int32, complex, "bfloat16"])),
       model=st.sampled_from(["own", "own", "own", "type", "config", "other", None]))
def test_family_block_and_tolerance(tiny, name, index, dtype, model):
    from hiddenstate.interop.families import family_of
    from hiddenstate.interop.families.hooks import tolerance
    fam = family_of(name)
    other = {"own": tiny[name], "type": name, "config": tiny[name].config, None: None,
             "other": tiny["rwkv" if name != "rwkv" else "lfm2"]}[model]

    def own(mixers):
        assert model == "own" and mixers, model
    attempt("Family.mixers", lambda: fam.mixers(other), own)

    def is_block(blk):
        assert isinstance(blk, get_kind(fam.kind).block) and model == "own"
        assert isinstance(index, (int, np.integer)) and not isinstance(index, (bool, np.bool_))
        finite(blk.params)
    attempt("Family.block", lambda: fam.block(other, index), is_block)
    attempt("tolerance", lambda: tolerance(dtype), lambda t: 0 < t < 1)


def ids_of(which, V=50):
    return {"ok": np.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]]), "row": np.arange(6) % V, "big": np.array([[V, 1]]),
            "neg": np.array([[-1, 2]]), "float": np.ones((1, 4)) * 0.5, "ragged": [[1, 2], [3]],
            "empty": np.zeros((1, 0), int), "3d": np.ones((1, 3, 2), int), "huge": [[2**70, 1]],
            "i8": np.ones((1, 4), np.int8)}.get(which, which) if isinstance(which, str) else which


GOOD_IDS = st.sampled_from(["ok", "row", "i8"])
BAD_IDS = st.one_of(JUNK, st.sampled_from(["big", "neg", "float", "ragged", "empty", "3d", "huge"]))
BAD_LAYERS = st.one_of(JUNK, st.integers(-1, 3), st.sampled_from([[0.5], [True], [[0, 1], [2]], "0", [], [0, 7], 0.0,
                                                                  np.array([0.0]), np.ones((1, 1), int), range(3)]))
BAD_BYTES = st.one_of(JUNK, st.sampled_from([1, -5, "4GiB", 1e300]))


def good_layers(model_layers):
    return st.one_of(st.none(), st.sampled_from(model_layers), st.just(list(model_layers)),
                     st.just(np.array(model_layers[:1])), st.just(tuple(model_layers[::-1])))


@SWEEP
@given(data=st.data(), name=st.sampled_from(FAMILIES))
def test_recompute_layers(tiny, data, name):
    from hiddenstate.interop.families import Recomputed, family_of, recompute_layers
    model = tiny[name]
    recurrent = [e.index for e in family_of(model).layer_map(model) if e.role == "recurrent"]
    kw = drawn(data, dict(ids=GOOD_IDS, layers=good_layers(recurrent), max_bytes=st.sampled_from([None, 2**30]),
                          tol=st.sampled_from([None, 1e-3])),
               dict(ids=BAD_IDS, layers=BAD_LAYERS, max_bytes=BAD_BYTES,
                    tol=st.one_of(JUNK, st.sampled_from([-1.0, "1e-3"]))))
    layers = kw["layers"]

    def check(rc):
        assert isinstance(rc, Recomputed)
        finite(rc.records)
        assert all(0 <= e <= rc.tolerance for e in rc.errors)
        assert len(rc.records) == len(rc.layers) >= 1
        want = recurrent if layers is None else sorted({int(i) for i in np.atleast_1d(layers)})
        assert list(rc.layers) == want
    attempt("recompute_layers", lambda: recompute_layers(model, ids_of(kw["ids"]), layers=layers,
                                                         max_bytes=kw["max_bytes"], tol=kw["tol"]), check)


@CHEAP
@given(data=st.data(), name=st.sampled_from(FAMILIES))
def test_estimate_bytes(tiny, data, name):
    from hiddenstate.interop.families import estimate_bytes, family_of
    model = tiny[name]
    recurrent = [e.index for e in family_of(model).layer_map(model) if e.role == "recurrent"]
    kw = drawn(data, dict(T=st.integers(0, 10**6), N=st.integers(0, 9), layers=good_layers(recurrent)),
               dict(T=SIZES, N=SIZES, layers=BAD_LAYERS))

    def check(per):
        assert isinstance(per, dict) and per
        assert all(isinstance(v, int) and v >= 0 for v in per.values())
        assert all(v == 0 for v in per.values()) == (int(kw["T"]) * int(kw["N"]) == 0)
    attempt("estimate_bytes", lambda: estimate_bytes(model, kw["T"], kw["N"], layers=kw["layers"]), check)


@SWEEP
@given(data=st.data(), name=st.sampled_from(FAMILIES + ("ours",)))
def test_inspect_model(tiny, data, name):
    from hiddenstate.interop.families import family_of
    model = BLOCKS["GatedDeltaNet"] if name == "ours" else tiny[name]
    recurrent = [0] if name == "ours" else [e.index for e in family_of(model).layer_map(model) if e.role == "recurrent"]
    kw = drawn(data, dict(ids=GOOD_IDS, layers=good_layers(recurrent), max_bytes=st.just(2**30),
                          max_lag=st.integers(1, 4), text=st.one_of(st.none(), st.text("ab \n", min_size=1, max_size=5)),
                          tokens=st.none()),
               dict(ids=BAD_IDS, layers=BAD_LAYERS, max_bytes=BAD_BYTES, max_lag=st.one_of(JUNK, st.integers(-1, 0)),
                    text=st.one_of(JUNK, st.text("ab", min_size=7, max_size=9)),
                    tokens=st.one_of(JUNK, st.just(np.ones((5, 2), int)), st.just(np.ones((2, 5), int)))))
    extra = data.draw(st.sampled_from([{}, {}, {}, {"h0": np.zeros(3)}, {"lengths": [5, 5]}, {"vocab": "abc"},
                                       {"title": 3}, {"source": b"x"}]), label="extra")

    def check(an):
        finite([la.record for la in an.layers])
        assert len(an.layers) >= 1
    args = {k: v for k, v in kw.items() if k != "ids"}
    attempt("inspect_model", lambda: hs.inspect_model(model, ids_of(kw["ids"]), **args, **extra), check)
