"""A bad-input sweep (hypothesis) over the surfaces of issue 20's last edges: results or clear errors, never more.

Every call gets inputs drawn from junk (wrong types, shapes, dtypes, NaN/Inf, tiny and huge
numbers, sizes of terabytes, paths of FIFOs, devices, directories, symlink loops and crafted
safetensors headers) and must end in one of: a result checked to be finite and of the right
shape, a ``ValueError``/``TypeError`` whose message states a rule (``" must "``, ``"needs about"``),
or, for the CLI, exit status 2 with one line on stderr. Any other exception, a NaN in a result, or
a call that hangs (every call runs under a SIGALRM watchdog) fails. The counts per surface are
printed at the end (``sweep_edges: ...``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import struct
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hiddenstate as hs
from hiddenstate.cli import main
from hiddenstate.interop import load_safetensors, save_safetensors, to_onnx
from hiddenstate.interop.statedict_file import load_state_dict_file
from hiddenstate.probe.fixedpoints import layer_map
from hiddenstate.train.corpus import Vocabulary, load_text
from hiddenstate.train.generate import Stream, draw, next_distribution
from hiddenstate.train.model import CharRNN

COUNTS: Counter = Counter()
SWEEP = settings(max_examples=int(os.environ.get("HIDDENSTATE_SWEEP_EXAMPLES", 120)), deadline=None, database=None,
                 derandomize=True, suppress_health_check=list(HealthCheck))
RULE = re.compile(r" must |needs about|does not exist|is missing")


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    total = sum(COUNTS.values())
    surfaces = Counter()
    outcomes = Counter()
    for (surface, outcome), n in COUNTS.items():
        surfaces[surface] += n
        outcomes[outcome] += n
    line = f"sweep_edges: {total} inputs; outcomes {dict(sorted(outcomes.items()))}; per surface {dict(sorted(surfaces.items()))}"
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


def attempt(surface: str, call, check=None) -> None:
    try:
        with watchdog(), np.errstate(all="raise"):
            result = call()
    except (ValueError, TypeError) as error:
        assert RULE.search(str(error)), f"{surface}: unclear {type(error).__name__}: {error}"
        assert "Traceback" not in str(error)
        COUNTS[(surface, "refused")] += 1
        return
    if check is not None:
        check(result)
    COUNTS[(surface, "result")] += 1


def finite(result):
    for a in (result if isinstance(result, tuple) else (result,)):
        if isinstance(a, np.ndarray) and a.dtype.kind == "f":
            assert np.isfinite(a).all(), "a NaN or Inf in a result"


JUNK = st.sampled_from([None, True, 0, -1, 3, 2.5, float("nan"), float("inf"), -float("inf"), 1e-310, 5e-324, 1e308,
                        10**12, 10**30, -(10**30), "3", "", "d", b"x", [], [1, [2]], [[1, 2], [3]], {}, (1, 2), object(),
                        np.float32(1.5), np.int64(2), np.bool_(True), 1j, np.zeros(0), np.zeros((2, 0)),
                        np.full(3, np.nan), np.ones((2, 3)), np.array(["a"]), np.ones(3, dtype=bool)])
NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**20, 10**20), JUNK)
VECTORS = st.one_of(JUNK, st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), max_size=8)
                    .map(np.array), st.lists(st.floats(-1e300, 1e300), min_size=1, max_size=6).map(np.array))


MODEL = CharRNN(5, 6, rng=np.random.default_rng(0))
LAYER = hs.GRU(3, 4, rng=np.random.default_rng(0))


@SWEEP
@given(logits=VECTORS, temperature=NUMBERS, top_k=st.one_of(st.none(), JUNK, st.integers(-3, 8)),
       top_p=st.one_of(st.none(), NUMBERS))
def test_next_distribution(logits, temperature, top_k, top_p):
    def check(p):
        assert p.ndim == 1 and np.isfinite(p).all() and (p >= 0).all() and abs(p.sum() - 1) < 1e-9
    attempt("next_distribution", lambda: next_distribution(logits, temperature=temperature, top_k=top_k,
                                                           top_p=top_p), check)


@SWEEP
@given(p=VECTORS, rng=st.one_of(st.just(np.random.default_rng(0)), JUNK))
def test_draw(p, rng):
    def check(i):
        assert isinstance(i, int) and 0 <= i < np.asarray(p).size and np.asarray(p)[i] > 0
    attempt("draw", lambda: draw(p, rng), check)


@SWEEP
@given(char=st.one_of(JUNK, st.integers(-2, 7), st.text(max_size=2)), state=st.one_of(st.none(), JUNK),
       vocab=st.sampled_from([None, "abcde", Vocabulary("abcde"), Vocabulary("abc"), 5]),
       length=st.one_of(JUNK, st.integers(-2, 4), st.just(10**12)), temperature=NUMBERS)
def test_stream(char, state, vocab, length, temperature):
    def run():
        stream = Stream(MODEL, state, vocab=vocab)
        probs, _ = stream.feed(char)
        finite(probs)
        return stream.generate(length, temperature=temperature, rng=np.random.default_rng(0))
    attempt("Stream", run, lambda ids: (ids.dtype == np.int64 and ((ids >= 0) & (ids < 5)).all()) or pytest.fail())


@SWEEP
@given(prime=st.one_of(JUNK, st.lists(st.integers(-1, 6), max_size=4)), length=st.one_of(JUNK, st.integers(-1, 5)),
       temperature=NUMBERS)
def test_charrnn_sample(prime, length, temperature):
    attempt("CharRNN.sample", lambda: MODEL.sample(prime, length, temperature=temperature,
                                                   rng=np.random.default_rng(0)), finite)


@SWEEP
@given(b=st.one_of(JUNK, st.integers(-2, 10**9)), h=st.one_of(JUNK, st.integers(-2, 10**9)))
def test_init_hidden(b, h):
    def run():
        if isinstance(b, int) and isinstance(h, int) and not isinstance(b, bool) and 0 < b * h * 8 <= 2**26:
            return hs.init_hidden(b, h)
        if isinstance(b, int) and isinstance(h, int) and not isinstance(b, bool) and b > 0 and h > 0 \
                and b * h * 8 <= 2**34:  # would allocate up to 16 GiB: skip (fits, so a result is right)
            return None
        return hs.init_hidden(b, h)
    attempt("init_hidden", run, lambda r: r is None or (r.shape == (b, h) and not r.any()) or pytest.fail())


@SWEEP
@given(x=st.one_of(JUNK, VECTORS, st.recursive(st.floats(-2, 2), lambda c: st.lists(c, max_size=3), max_leaves=12)),
       h0=st.one_of(st.none(), JUNK))
def test_layer_forward(x, h0):
    attempt("GRU.__call__", lambda: LAYER(x, h0), finite)


@SWEEP
@given(r=st.one_of(JUNK, st.floats(-10, 10).map(lambda v: np.full((1, 4), v))),
       h=st.one_of(JUNK, st.just(np.ones((1, 4)))))
def test_textbook_candidate(r, h):
    attempt("candidate", lambda: hs.candidate(np.ones((1, 3)), h, r, np.ones((3, 4)), np.ones((4, 4)), np.ones(4)),
            lambda out: (np.abs(out) <= 1).all() or pytest.fail())


@SWEEP
@given(width=st.integers(0, 8), rows=st.integers(0, 3))
def test_find_fixed_points_inits(width, rows):
    F, jac = layer_map(LAYER)
    attempt("find_fixed_points", lambda: hs.find_fixed_points(F, jac, np.zeros((rows, width)), max_iter=20), None)


@SWEEP
@given(x=st.one_of(JUNK, st.lists(st.integers(-1, 6), max_size=5).map(np.array)),
       text=st.one_of(st.none(), st.text(alphabet="abcdez", max_size=5)),
       vocab=st.sampled_from([None, "abcde", ["a", "b"], 3]),
       lengths=st.one_of(st.none(), st.just([0]), st.just([1]), JUNK))
def test_inspect_model(x, text, vocab, lengths):
    attempt("inspect_model", lambda: hs.inspect_model(MODEL, x, text=text, vocab=vocab, lengths=lengths,
                                                      n_fixed_point_starts=0, max_lag=3))


# -- files: crafted safetensors headers and paths that are not regular files ------------------------
JSON_JUNK = st.sampled_from([None, True, 0, -1, 3, 2.5, 1e308, "3", "", [], [1, [2]], [-1, 5], [5, 1], {}, {"a": 1}])
ENTRY = st.fixed_dictionaries({"dtype": st.sampled_from(["F64", "F32", "F16", "BF16", "I64", "X9", 3]),
                               "shape": st.one_of(st.lists(st.integers(-1, 2**31), max_size=3), JSON_JUNK),
                               "data_offsets": st.one_of(st.lists(st.integers(-1, 2**33), min_size=2, max_size=2),
                                                         JSON_JUNK)})
NAMES = st.sampled_from(["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "x.weight", "__metadata__"])


@SWEEP
@given(entries=st.lists(st.tuples(NAMES, ENTRY), max_size=5), tail=st.integers(0, 2**32), valid=st.booleans(),
       dup=st.booleans(), raw=st.one_of(st.none(), st.binary(max_size=40)))
def test_safetensors_headers(tmp_path_factory, entries, tail, valid, dup, raw):
    path = tmp_path_factory.mktemp("st") / "f.safetensors"
    if valid:  # a real file, then a duplicate entry or a truncation
        save_safetensors(LAYER, path)
        data = path.read_bytes()
        if dup:
            n = struct.unpack("<Q", data[:8])[0]
            head = data[8:8 + n].decode().rstrip()
            extra = head[1:head.index("}") + 1]
            head = (head[:-1] + "," + extra + "}").encode()
            head += b" " * (-len(head) % 8)
            data = struct.pack("<Q", len(head)) + head + data[8 + n:]
        path.write_bytes(data[:len(data) - (tail % 3) * 8])
    elif raw is not None:
        path.write_bytes(raw)
    else:
        pairs = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in entries)
        head = ("{" + pairs + "}").encode()
        head += b" " * (-len(head) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(head)) + head)
            f.truncate(8 + len(head) + tail)  # a sparse tail, up to 4 GiB claimed
    for surface, call in (("load_state_dict_file", lambda: load_state_dict_file(path)),
                          ("load_safetensors", lambda: load_safetensors(path))):
        attempt(surface, call)


def make_odd_paths(d):
    """Paths of everything that is not a readable regular file (the writers may turn 'dangling' into a file)."""
    os.mkfifo(d / "fifo")
    os.mkfifo(d / "fifo.safetensors")
    os.symlink(d / "loop", d / "loop")
    os.symlink(d / "nowhere", d / "dangling")
    (d / "dir").mkdir()
    (d / "empty.txt").write_bytes(b"")
    (d / "latin.txt").write_bytes(b"caf\xe9")
    return [str(d / n) for n in ("fifo", "fifo.safetensors", "loop", "dangling", "dir", "empty.txt", "latin.txt")] + \
        [str(d / "dir") + os.sep, "/dev/null", "/dev/zero", str(d / "missing"), 3, None]


@pytest.fixture(scope="module")
def odd_paths(tmp_path_factory):
    return make_odd_paths(tmp_path_factory.mktemp("odd"))


@pytest.fixture(scope="module")
def odd_paths_cli(tmp_path_factory):  # their own: the Python writers above may create files through the links
    return make_odd_paths(tmp_path_factory.mktemp("odd_cli"))


@SWEEP
@given(i=st.integers(0, 12))
def test_paths_in_python(odd_paths, i):
    path = odd_paths[i]
    for surface, call in (("load_text", lambda: load_text(path)), ("load_safetensors(path)", lambda: load_safetensors(path)),
                          ("to_onnx", lambda: to_onnx(LAYER, path)), ("save_safetensors", lambda: save_safetensors(LAYER, path)),
                          ("train.load", lambda: hs.train.load(path))):
        try:
            attempt(surface, call)
        except (FileNotFoundError, IsADirectoryError) as error:  # documented, clear
            assert RULE.search(str(error)) or "does not exist" in str(error), error
            COUNTS[(surface, "refused")] += 1
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


@SWEEP
@given(i=st.integers(0, 10), command=st.sampled_from(["inspect", "sample", "export", "train-data", "train-resume"]),
       number=st.sampled_from(["1e-310", "-1", "nan", "inf", "1e400", "0", "10**12", "1000000000000", "x"]))
def test_cli(odd_paths_cli, i, command, number, tmp_path_factory):
    path = str(odd_paths_cli[i])
    out = str(tmp_path_factory.mktemp("cli") / "out")
    argv = {"inspect": ["inspect", path, "--out", out + ".html"],
            "sample": ["sample", path, "--temperature", number, "--length", number],
            "export": ["export", path, "--format", "onnx", "--out", out + ".onnx"],
            "train-data": ["train", "--data", path, "--steps", number, "--out", out],
            "train-resume": ["train", "--resume", path, "--steps", "1"]}[command]
    err = io.StringIO()
    with watchdog(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(argv)
        except SystemExit as exit_:
            status = exit_.code
    lines = err.getvalue().strip().splitlines()
    assert status == 2, (argv, status, lines)
    assert len(lines) == 1 and re.match(r"hiddenstate( \w+)?: error: ", lines[0]), lines  # ours or argparse's
    COUNTS[(f"cli {command}", "exit 2, one line")] += 1
