"""Checkpoints: exact round trip, integrity checks, and crash safety of the directory switch."""
import copy
import hashlib
import json
import os
import re
import time
import tracemalloc

import numpy as np
import pytest

from _torch import require_torch
from hiddenstate.train.config import TrainConfig
from hiddenstate.train.corpus import StreamBatcher, Vocabulary, train_val_split
from hiddenstate.train.model import CharRNN
from hiddenstate.train.optim import Adam
from hiddenstate.train.rundir import checkpoint, load
from hiddenstate.train.rundir.checkpoint import (
    MAX_META_BYTES,
    META_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    load_checkpoint,
    record_digest,
    save_checkpoint,
)
from hiddenstate.train.rundir.snapshot import Snapshot


def make_params(rng):
    return {
        "weight_ih_l0": rng.standard_normal((12, 3)),
        "weight_hh_l0": rng.standard_normal((12, 4)),
        "bias_ih_l0": rng.standard_normal(12),
        "bias_hh_l0": rng.standard_normal(12),
    }


def assert_bitwise_equal(got, expected):
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key].dtype == value.dtype, key
        assert got[key].shape == value.shape, key
        assert got[key].tobytes() == np.ascontiguousarray(value).tobytes(), key


@pytest.fixture
def saved(tmp_path, rng):
    """A checkpoint with parameters, Adam moments and a typical meta document."""
    params = make_params(rng)
    opt = Adam(params)
    opt.step({k: rng.standard_normal(v.shape) for k, v in params.items()})
    meta = {
        "config": {"cell": "gru", "hidden_size": 4, "lr": 2e-3},
        "vocabulary": Vocabulary("to be, or not to be\n").to_json(),
        "step": 1,
        "rng": rng.bit_generator.state,
    }
    path = tmp_path / "run" / "checkpoint"
    save_checkpoint(path, params, meta, opt.state_dict())
    return path, params, meta, opt.state_dict()


def test_round_trip_is_bitwise(saved):
    path, params, meta, arrays = saved
    assert sorted(os.listdir(path)) == sorted([MODEL_FILE, OPTIMIZER_FILE, META_FILE])
    got_params, got_meta, got_arrays = load_checkpoint(path)
    assert_bitwise_equal(got_params, params)
    assert_bitwise_equal(got_arrays, arrays)
    assert got_meta == meta
    assert all(v.flags.writeable for v in got_params.values())


def test_special_values_and_dtypes_survive(tmp_path):
    params = {
        "f64": np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 5e-324, np.finfo(np.float64).max]),
        "f32": np.arange(6, dtype=np.float32).reshape(2, 3).T,  # non-contiguous
        "reversed": np.arange(5.0)[::-1],  # negative stride
        "i64": np.array(7, dtype=np.int64),  # 0-d
        "empty": np.zeros((0, 3)),
        "big_endian": np.arange(3, dtype=">f8"),
    }
    save_checkpoint(tmp_path / "c", params, {})
    got, meta, arrays = load_checkpoint(tmp_path / "c")
    assert meta == {} and arrays == {}
    for key in ("f64", "f32", "reversed", "i64", "empty"):
        assert_bitwise_equal({key: got[key]}, {key: params[key]})
    np.testing.assert_array_equal(got["big_endian"], params["big_endian"])


def test_rng_state_resumes_the_same_stream(tmp_path):
    rng = np.random.default_rng(1234)
    rng.standard_normal(10)
    save_checkpoint(tmp_path / "c", {"w": np.zeros(1)}, {"rng": rng.bit_generator.state})
    expected = rng.standard_normal(5)
    _, meta, _ = load_checkpoint(tmp_path / "c")
    resumed = np.random.default_rng()
    resumed.bit_generator.state = meta["rng"]
    np.testing.assert_array_equal(resumed.standard_normal(5), expected)


def test_adam_resumes_from_a_checkpoint(tmp_path, rng):
    params = make_params(rng)
    grads = [{k: rng.standard_normal(v.shape) for k, v in params.items()} for _ in range(4)]
    straight = {k: v.copy() for k, v in params.items()}
    opt = Adam(straight)
    for g in grads:
        opt.step(g)

    first = {k: v.copy() for k, v in params.items()}
    opt = Adam(first)
    for g in grads[:2]:
        opt.step(g)
    save_checkpoint(tmp_path / "c", first, {"step": 2}, opt.state_dict())
    loaded, _, arrays = load_checkpoint(tmp_path / "c")
    opt = Adam(loaded)
    opt.load_state_dict(arrays)
    for g in grads[2:]:
        opt.step(g)
    assert_bitwise_equal(loaded, straight)


def test_model_file_loads_into_torch(saved):
    torch = require_torch()
    from safetensors.torch import load_file

    path, params, _, _ = saved
    gru = torch.nn.GRU(3, 4, dtype=torch.float64)
    gru.load_state_dict(load_file(path / MODEL_FILE))
    np.testing.assert_array_equal(gru.weight_hh_l0.detach().numpy(), params["weight_hh_l0"])


def test_saving_again_replaces_the_checkpoint(saved, rng):
    path, params, meta, _ = saved
    new_params = {k: v + 1 for k, v in params.items()}
    save_checkpoint(path, new_params, {**meta, "step": 2})
    got, got_meta, arrays = load_checkpoint(path)
    assert_bitwise_equal(got, new_params)
    assert got_meta["step"] == 2 and arrays == {}
    assert sorted(os.listdir(path.parent)) == ["checkpoint"]  # no staging or backup left


# ---------------------------------------------------------------- integrity


@pytest.mark.parametrize("name", [MODEL_FILE, OPTIMIZER_FILE])
def test_truncation_is_detected(saved, name):
    path = saved[0]
    data = (path / name).read_bytes()
    (path / name).write_bytes(data[: len(data) - 8])
    with pytest.raises(ValueError, match=rf"{name}' must have the {len(data)} bytes .*; got {len(data) - 8}"):
        load_checkpoint(path)


@pytest.mark.parametrize("name", [MODEL_FILE, OPTIMIZER_FILE])
def test_tampering_is_detected(saved, name):
    path = saved[0]
    data = bytearray((path / name).read_bytes())
    data[-3] ^= 0x01  # flip one bit of one float
    (path / name).write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"{name}' must match the sha256 recorded in meta.json"):
        load_checkpoint(path)


def test_files_from_another_save_are_detected(saved, tmp_path, rng):
    path = saved[0]
    other = save_checkpoint(tmp_path / "other", make_params(rng), {})
    (path / MODEL_FILE).write_bytes((other / MODEL_FILE).read_bytes())
    with pytest.raises(ValueError, match=rf"{MODEL_FILE}'"):
        load_checkpoint(path)


def test_truncated_meta_is_detected(saved):
    path = saved[0]
    data = (path / META_FILE).read_bytes()
    (path / META_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"meta.json' must be valid UTF-8 JSON"):
        load_checkpoint(path)


def test_foreign_meta_is_detected(saved):
    path = saved[0]
    (path / META_FILE).write_text(json.dumps({"step": 3}))
    with pytest.raises(ValueError, match=r"meta.json' must be a hiddenstate-checkpoint record"):
        load_checkpoint(path)
    record = {"format": "hiddenstate-checkpoint", "format_version": 99, "meta": {}, "files": {
        name: {"bytes": 0, "sha256": ""} for name in (MODEL_FILE, OPTIMIZER_FILE)}}
    (path / META_FILE).write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"must have format_version 1; got 99"):
        load_checkpoint(path)


@pytest.mark.parametrize("name", [MODEL_FILE, OPTIMIZER_FILE, META_FILE])
def test_missing_file_is_named(saved, name):
    path = saved[0]
    (path / name).unlink()
    with pytest.raises(ValueError, match=rf"{name}' is missing"):
        load_checkpoint(path)


def test_missing_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"directory must hold a checkpoint; got '.*nothing'"):
        load_checkpoint(tmp_path / "nothing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"checkpoint directory; got '.*file', a file"):
        load_checkpoint(tmp_path / "file")


def test_loading_never_unpickles(saved, monkeypatch):
    import pickle

    def forbidden(*args, **kwargs):
        raise AssertionError("unpickling attempted")

    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(np, "load", forbidden)
    load_checkpoint(saved[0])


# ---------------------------------------------------------------- crash safety


def failing_replace(fail_on):
    """os.replace that raises on the calls numbered in fail_on (1-based), else renames."""
    real = os.replace
    calls = []

    def replace(src, dst):
        calls.append((os.fspath(src), os.fspath(dst)))
        if len(calls) in fail_on:
            raise OSError(f"simulated crash in os.replace call {len(calls)}")
        return real(src, dst)

    replace.calls = calls
    return replace


@pytest.mark.parametrize("fail_on", [{1}, {2}], ids=["before-backup", "between-renames"])
def test_failed_save_keeps_the_previous_checkpoint(saved, monkeypatch, rng, fail_on):
    path, params, meta, arrays = saved
    monkeypatch.setattr(checkpoint.os, "replace", failing_replace(fail_on))
    with pytest.raises(OSError, match=r"simulated crash"):
        save_checkpoint(path, make_params(rng), {"step": 99})
    monkeypatch.undo()
    got, got_meta, got_arrays = load_checkpoint(path)
    assert_bitwise_equal(got, params)
    assert got_meta == meta
    assert_bitwise_equal(got_arrays, arrays)
    assert sorted(os.listdir(path.parent)) == ["checkpoint"]


def test_hard_crash_between_renames_falls_back_to_the_previous_checkpoint(saved, monkeypatch, rng):
    # The second rename fails and so does every later one: no rollback, as after a power loss.
    path, params, meta, _ = saved
    monkeypatch.setattr(checkpoint.os, "replace", failing_replace({2, 3, 4}))
    with pytest.raises(OSError, match=r"simulated crash"):
        save_checkpoint(path, make_params(rng), {"step": 99})
    monkeypatch.undo()
    assert not path.exists()
    got, got_meta, _ = load_checkpoint(path)
    assert_bitwise_equal(got, params)
    assert got_meta == meta
    # The next save succeeds and cleans up after the crash.
    new_params = make_params(rng)
    save_checkpoint(path, new_params, {"step": 100})
    assert_bitwise_equal(load_checkpoint(path)[0], new_params)
    assert sorted(os.listdir(path.parent)) == ["checkpoint"]


def test_crash_while_writing_keeps_the_previous_checkpoint(saved, monkeypatch, rng):
    path, params, _, _ = saved
    real_write = checkpoint._write_file

    def write_then_crash(file_path, data):
        if file_path.name == OPTIMIZER_FILE:
            file_path.write_bytes(data[: len(data) // 2])  # a torn write
            raise OSError("simulated crash while writing")
        real_write(file_path, data)

    monkeypatch.setattr(checkpoint, "_write_file", write_then_crash)
    with pytest.raises(OSError, match=r"simulated crash while writing"):
        save_checkpoint(path, make_params(rng), {}, {"m": np.ones(100)})
    monkeypatch.undo()
    assert_bitwise_equal(load_checkpoint(path)[0], params)
    assert sorted(os.listdir(path.parent)) == ["checkpoint"]


def test_stale_staging_from_a_killed_save_is_cleaned_up(saved, rng):
    path = saved[0]
    stale = path.parent / ".checkpoint.saving-deadbeef"
    stale.mkdir()
    (stale / MODEL_FILE).write_bytes(b"half")
    save_checkpoint(path, make_params(rng), {})
    assert sorted(os.listdir(path.parent)) == ["checkpoint"]


# ---------------------------------------------------------------- argument errors


def test_save_refuses_to_replace_other_directories(tmp_path, rng):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"hold only a checkpoint .* other entries \['notes.txt'\]"):
        save_checkpoint(tmp_path, make_params(rng), {})
    assert (tmp_path / "notes.txt").read_text() == "mine"
    with pytest.raises(ValueError, match=r"got '.*notes.txt', which is a file"):
        save_checkpoint(tmp_path / "notes.txt", make_params(rng), {})
    with pytest.raises(ValueError, match=r"directory must end in a directory name; got '.'"):
        save_checkpoint(".", make_params(rng), {})


def test_save_into_an_existing_empty_directory(tmp_path, rng):
    (tmp_path / "c").mkdir()
    params = make_params(rng)
    save_checkpoint(tmp_path / "c", params, {})
    assert_bitwise_equal(load_checkpoint(tmp_path / "c")[0], params)


def test_save_argument_errors(tmp_path):
    good = {"w": np.zeros(2)}
    with pytest.raises(TypeError, match=r"meta must be JSON-serializable .* int64"):
        save_checkpoint(tmp_path / "c", good, {"step": np.int64(3)})
    with pytest.raises(ValueError, match=r"meta must be strict JSON \(no nan/inf"):
        save_checkpoint(tmp_path / "c", good, {"loss": float("nan")})
    with pytest.raises(TypeError, match=r"meta must be a dict; got list"):
        save_checkpoint(tmp_path / "c", good, [])
    with pytest.raises(TypeError, match=r"params\['w'\] must be an ndarray; got list"):
        save_checkpoint(tmp_path / "c", {"w": [1.0]}, {})
    with pytest.raises(TypeError, match=r"arrays must hold arrays that safetensors can store"):
        save_checkpoint(tmp_path / "c", good, {}, {"z": np.zeros(2, dtype=np.complex128)})
    with pytest.raises(ValueError, match=r"params keys must be non-empty strings other than"):
        save_checkpoint(tmp_path / "c", {"__metadata__": np.zeros(1)}, {})
    with pytest.raises(TypeError, match=r"directory must be a str or os.PathLike; got int"):
        save_checkpoint(3, good, {})
    assert not (tmp_path / "c").exists()
    assert os.listdir(tmp_path) == []  # validation happens before anything is written


# ---------------------------------------------------------------- sizes before reading (issue 11)


def refuse_quietly(path, match):
    """load_checkpoint(path) must refuse with `match`, in under a second and a few MiB of memory."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ValueError, match=match):
            load_checkpoint(path)
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seconds < 1.0, seconds
    assert peak < 4 << 20, peak  # the file is never read (before: 1.1 GiB, 6.5 s)


@pytest.mark.parametrize("name", [MODEL_FILE, OPTIMIZER_FILE])
def test_a_sparse_1gib_tensor_file_is_refused_without_reading_it(saved, name):
    path = saved[0]
    size = (path / name).stat().st_size
    with open(path / name, "r+b") as f:
        f.truncate(1 << 30)  # sparse: no disk used
    refuse_quietly(path, rf"{name}' must have the {size} bytes recorded in meta.json; got 1073741824")


def test_a_sparse_1gib_meta_json_is_refused_without_reading_it(saved):
    path = saved[0]
    with open(path / META_FILE, "r+b") as f:
        f.truncate(1 << 30)
    refuse_quietly(path, r"meta.json' must hold at most 16777216 bytes \(16 MiB\) of JSON; got 1073741824")


def test_meta_json_just_over_the_cap_is_refused(saved):
    path = saved[0]
    with open(path / META_FILE, "r+b") as f:
        f.truncate(MAX_META_BYTES + 1)
    refuse_quietly(path, rf"meta.json' must hold at most {MAX_META_BYTES} bytes")


def test_a_modified_tensor_file_is_hashed_in_chunks_never_read_whole(tmp_path, rng):
    weights = {"w": rng.standard_normal(1_000_000)}  # 8 MB
    save_checkpoint(tmp_path / "c", weights, {})
    tracemalloc.start()
    try:
        got = load_checkpoint(tmp_path / "c")[0]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_bitwise_equal(got, weights)
    assert peak < weights["w"].nbytes + (2 << 20), peak  # the arrays, not the file as well
    data = bytearray((tmp_path / "c" / MODEL_FILE).read_bytes())
    data[-3] ^= 0x01
    (tmp_path / "c" / MODEL_FILE).write_bytes(bytes(data))
    refuse_quietly(tmp_path / "c", rf"{MODEL_FILE}' must match the sha256 recorded in meta.json")


def test_a_file_replaced_while_loading_is_refused(saved, monkeypatch):
    path = saved[0]
    real = checkpoint.safetensors.safe_open

    def replaced_meanwhile(file, **kwargs):  # another process rewrites the file after its digest was checked
        st = os.stat(file)
        os.utime(file, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        return real(file, **kwargs)

    monkeypatch.setattr(checkpoint.safetensors, "safe_open", replaced_meanwhile)
    with pytest.raises(ValueError, match=rf"{MODEL_FILE}' changed while it was being loaded"):
        load_checkpoint(path)


def test_a_directory_in_place_of_a_file_is_named(saved):
    path = saved[0]
    (path / OPTIMIZER_FILE).unlink()
    (path / OPTIMIZER_FILE).mkdir()
    with pytest.raises(ValueError, match=rf"{OPTIMIZER_FILE}' must be a regular file"):
        load_checkpoint(path)


# ---------------------------------------------------------------- meta.json: strict JSON (issue 11)


def edit_meta(path, old, new):
    text = (path / META_FILE).read_text()
    assert old in text, old
    (path / META_FILE).write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("new,match", [
    ('"step": NaN', r"NaN is not a JSON number"),
    ('"step": Infinity', r"Infinity is not a JSON number"),
    ('"step": -Infinity', r"-Infinity is not a JSON number"),
    ('"step": 1e999', r"the number 1e999 overflows to infinity"),
    ('"step": 1, "step": 1', r"the key 'step' appears twice"),
    ('"step": ' + "9" * 5000, r"Exceeds the limit \(4300 digits\)"),
    ('"step": [1', r"Expecting ',' delimiter"),
], ids=["nan", "inf", "-inf", "1e999", "repeated-key", "5000-digits", "broken"])
def test_meta_json_must_be_strict_json(saved, new, match):
    path = saved[0]
    edit_meta(path, '"step": 1', new)
    with pytest.raises(ValueError, match=rf"meta.json' must be valid UTF-8 JSON \(strict: .*\); got: {match}"):
        load_checkpoint(path)


@pytest.mark.parametrize("depth", [150, 200_000])
def test_deeply_nested_meta_json_is_a_value_error(saved, depth):
    path = saved[0]
    edit_meta(path, '"step": 1', '"step": ' + "[" * depth + "]" * depth)
    with pytest.raises(ValueError, match=r"meta.json' must nest at most 100 arrays/objects deep; got deeper"):
        load_checkpoint(path)


def test_meta_json_that_is_not_utf8_is_named(saved):
    path = saved[0]
    (path / META_FILE).write_bytes(b'{"format": "\xff"}')
    with pytest.raises(ValueError, match=r"meta.json' must be valid UTF-8 JSON; got: 'utf-8' codec"):
        load_checkpoint(path)


# ---------------------------------------------------------------- meta.json: its digest (issue 11)


def read_record(path):
    return json.loads((path / META_FILE).read_text())


def write_record(path, record, *, digest=True):
    """Write a record as a deliberate editor would: with its digest recomputed (or without)."""
    record = dict(record)
    record.pop("sha256", None)
    if digest:
        record["sha256"] = record_digest(record)
    (path / META_FILE).write_text(json.dumps(record, indent=2))


@pytest.mark.parametrize("old,new", [
    ('"step": 1', '"step": 2'),
    ('"chars": "\\n ,benort"', '"chars": "\\n ,benorz"'),  # a vocabulary with one character replaced
    ('"lr": 0.002', '"lr": 0.02'),
], ids=["step", "vocabulary", "lr"])
def test_a_hand_edited_meta_json_is_detected(saved, old, new):
    path = saved[0]
    edit_meta(path, old, new)
    with pytest.raises(ValueError, match=r"meta.json' must match the sha256 recorded in it \(of its canonical JSON\); "
                                         r"it does not. The file was edited or corrupted"):
        load_checkpoint(path)


def test_the_digest_covers_values_not_formatting(saved):
    path, params, meta, _ = saved
    record = read_record(path)
    assert record["sha256"] == record_digest(record)
    (path / META_FILE).write_text(json.dumps(record, indent=4, sort_keys=True))  # reformatted, same content
    assert load_checkpoint(path)[1] == meta
    record["meta"]["step"] = 7  # a deliberate edit, digest recomputed
    write_record(path, record)
    assert load_checkpoint(path)[1]["step"] == 7


def test_a_record_without_a_digest_still_loads(saved):
    # meta.json of 0.1 had no sha256 entry; the tensor files are still verified
    path, params, meta, _ = saved
    write_record(path, read_record(path), digest=False)
    got_params, got_meta, _ = load_checkpoint(path)
    assert got_meta == meta
    assert_bitwise_equal(got_params, params)


@pytest.mark.parametrize("edit,match", [
    (lambda r: r["files"][MODEL_FILE].update(bytes=True),
     rf"field 'files.{MODEL_FILE}.bytes' must be a non-negative integer; got bool True"),
    (lambda r: r["files"][MODEL_FILE].update(bytes=-3),
     rf"field 'files.{MODEL_FILE}.bytes' must be a non-negative integer; got -3"),
    (lambda r: r["files"][OPTIMIZER_FILE].update(sha256="xyz"),
     rf"field 'files.{OPTIMIZER_FILE}.sha256' must be a SHA-256 in 64 lowercase hex digits; got 'xyz'"),
    (lambda r: r["files"][MODEL_FILE].update(mtime=3), rf"field 'files.{MODEL_FILE}' must hold only 'bytes' and"),
    (lambda r: r["files"].update(extra={"bytes": 0, "sha256": "0" * 64}), r"field 'files' must describe only"),
    (lambda r: r.update(format_version=True), r"must have format_version 1; got True"),
    (lambda r: r.update(note="hi"), r"must hold only the entries .*; got also \['note'\]"),
    (lambda r: r.update(meta=[1, 2]), r"field 'meta' must be a JSON object; got list"),
], ids=["bytes-bool", "bytes-negative", "sha256", "file-entry", "files", "version-bool", "entry", "meta-list"])
def test_every_entry_of_the_record_is_checked(saved, edit, match):
    path = saved[0]
    record = read_record(path)
    edit(record)
    write_record(path, record)  # a valid digest: the rule itself must catch it
    with pytest.raises(ValueError, match=rf"meta.json'(: )?.*{match}"):
        load_checkpoint(path)


def test_save_refuses_what_load_would_refuse(tmp_path):
    good = {"w": np.zeros(2)}
    deep = []
    for _ in range(150):
        deep = [deep]
    with pytest.raises(ValueError, match=r"meta must nest at most 99 arrays/objects deep; got deeper nesting"):
        save_checkpoint(tmp_path / "c", good, {"deep": deep})
    with pytest.raises(ValueError, match=r"meta must have distinct keys as JSON strings; got: the key '1' appears twice"):
        save_checkpoint(tmp_path / "c", good, {1: "a", "1": "b"})
    with pytest.raises(ValueError, match=r"meta must encode to at most 16 MiB of JSON; got 1677"):
        save_checkpoint(tmp_path / "c", good, {"blob": "x" * MAX_META_BYTES})
    assert os.listdir(tmp_path) == []
    shallow = []
    for _ in range(97):
        shallow = [shallow]
    save_checkpoint(tmp_path / "c", good, {"deep": shallow})  # the deepest that is allowed
    assert load_checkpoint(tmp_path / "c")[1] == {"deep": shallow}


# ---------------------------------------------------------------- a run's checkpoint: its schema (issue 11)

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 3


def run_files(rng, *, dtype="float64", cell="gru", carry=True):
    """The three parts of a valid run checkpoint (as train() writes it), built without training."""
    vocab = Vocabulary(TEXT)
    cfg = TrainConfig(cell=cell, hidden_size=4, seq_len=5, batch_size=2, steps=10, dtype=dtype, out="unused")
    model = CharRNN(vocab.size, 4, cell=cell, dtype=np.dtype(dtype), rng=rng)
    train_ids, val_ids = train_val_split(vocab.encode(TEXT), cfg.val_fraction)
    batcher = StreamBatcher(train_ids, cfg.batch_size, cfg.seq_len)
    text = {"chars": len(TEXT), "sha256": hashlib.sha256(TEXT.encode()).hexdigest(), "source": "test",
            "train_chars": int(train_ids.size), "val_chars": int(val_ids.size)}
    state = model.initial_state(cfg.batch_size) if carry else None
    snap = Snapshot(model=model.config(), train=cfg.to_dict(), vocab=vocab.to_json(), step=2, val_loss=3.5,
                    batcher=batcher.state_dict(), rng=rng.bit_generator.state, elapsed_s=1.5, text=text,
                    weights=model.state_dict(), adam=Adam(model.params).state_dict(),
                    history={"train_loss": [4.0, 3.9], "grad_norm": [1.0, 0.9], "val_step": [2], "val_loss": [3.5]},
                    carry=state)
    return snap.to_files()


@pytest.fixture
def run_dir(tmp_path, rng):
    """A run directory whose checkpoint/ is a valid run checkpoint; returns (run dir, its three parts)."""
    params, meta, arrays = run_files(rng)
    save_checkpoint(tmp_path / "run" / "checkpoint", params, meta, arrays)
    return tmp_path / "run", (params, meta, arrays)


def test_a_valid_run_checkpoint_loads(run_dir):
    path, (params, meta, arrays) = run_dir
    trained = load(path)
    assert trained.step == 2 and trained.vocab.chars == Vocabulary(TEXT).chars
    assert trained.meta == meta and trained.config.hidden_size == 4


def resaved(run_dir, edit, *, params_edit=None, arrays_edit=None):
    """Save run_dir's checkpoint again with its meta (and arrays) edited: the digests are valid."""
    path, (params, meta, arrays) = run_dir
    meta, params, arrays = copy.deepcopy(meta), dict(params), dict(arrays)
    edit(meta)
    if params_edit:
        params_edit(params)
    if arrays_edit:
        arrays_edit(arrays)
    save_checkpoint(path / "checkpoint", params, meta, arrays)
    return path / "checkpoint"


def put(field, value):
    """An edit that sets meta[a][b]... = value for field "a.b..."; value DELETE removes it."""
    *parents, last = field.split(".")

    def edit(meta):
        node = meta
        for key in parents:
            node = node[key]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return edit


DELETE = object()
BAD_META = [
    ("step", "five", r"field 'step' must be a non-negative integer; got str 'five'"),
    ("step", 5.9, r"field 'step' must be a non-negative integer; got float 5.9"),
    ("step", -3, r"field 'step' must be a non-negative integer; got -3"),
    ("step", True, r"field 'step' must be a non-negative integer; got bool True"),
    ("step", 10**30, r"field 'step' must be at most 9223372036854775807; got 10{30}"),
    ("train.lr", "fast", r"field 'train.lr' must be a number; got str 'fast'"),
    ("train.steps", 0, r"field 'train.steps' must be a positive integer; got 0"),
    ("train.dropout", 1.5, r"field 'train.dropout' must be a number in \[0, 1\); got 1.5"),
    ("train.ema", "yes", r"field 'train.ema' must be a number; got str 'yes'"),
    ("train.out", "", r"field 'train.out' must be a non-empty path string; got ''"),
    ("train.data", 3, r"field 'train.data' must be a non-empty path string; got 3"),
    ("train.colour", "red", r"field 'train' has unknown entries \['colour'\]"),
    ("train.hidden_size", 8, r"field 'model.hidden_size' must equal field 'train.hidden_size' \(8\); got 4"),
    ("train.batch_size", 3, r"field 'batcher.batch_size' must equal field 'train.batch_size' \(3\); got 2"),
    ("model", "gru", r"field 'model' must be a JSON object; got str 'gru'"),
    ("model.dtype", "float16", r"field 'model.dtype' must be one of float32, float64; got 'float16'"),
    ("model.dtype", DELETE, r"field 'model' must hold \['vocab_size', 'hidden_size', 'dtype'\]; missing \['dtype'\]"),
    ("model.hidden_size", None, r"field 'model.hidden_size' must be a positive integer; got NoneType None"),
    ("model.vocab_size", 99, r"field 'model.vocab_size' must equal field 'len\(vocab.chars\)' \(27\); got 99"),
    ("vocab.chars", "ba", r"field 'vocab' must be Vocabulary.to_json\(\) of a text; got: .*sorted distinct"),
    ("vocab.chars", 7, r"field 'vocab' must be Vocabulary.to_json\(\) of a text; got: .*non-empty string"),
    ("vocab.size", 27, r"field 'vocab' has unknown entries \['size'\]"),
    ("val_loss", "low", r"field 'val_loss' must be a number; got str 'low'"),
    ("val_loss", -1.0, r"field 'val_loss' must be a finite number >= 0; got -1.0"),
    ("elapsed_s", None, r"field 'elapsed_s' must be a number; got NoneType None"),
    ("batcher.epoch", True, r"field 'batcher.epoch' must be a non-negative integer; got bool True"),
    ("batcher.batch_index", DELETE, r"field 'batcher' must hold .*; missing \['batch_index'\]"),
    ("batcher.num_tokens", 5, r"field 'batcher.num_tokens' must equal field 'text.train_chars' \(\d+\); got 5"),
    ("rng.bit_generator", "MT19937", r"field 'rng.bit_generator' must be one of PCG64; got 'MT19937'"),
    ("rng.state.state", "five", r"field 'rng.state.state' must be a non-negative integer; got str 'five'"),
    ("rng.state.inc", 2**128, r"field 'rng.state.inc' must be at most 3402\d+; got 3402\d+"),
    ("rng.has_uint32", True, r"field 'rng.has_uint32' must be a non-negative integer; got bool True"),
    ("rng.uinteger", 1.5, r"field 'rng.uinteger' must be a non-negative integer; got float 1.5"),
    ("text.sha256", "abc", r"field 'text.sha256' must be a SHA-256 in 64 lowercase hex digits; got 'abc'"),
    ("text.chars", 3, r"field 'text.chars' must equal field 'text.train_chars \+ text.val_chars' \(\d+\); got 3"),
    ("torch", 5, r"field 'torch' must be a string; got int 5"),
    ("extra", 1, r"has unknown entries \['extra'\]; a run checkpoint holds"),
]


@pytest.mark.parametrize("field,value,match", BAD_META, ids=[f"{f}={v!r:.12}" for f, v, _ in BAD_META])
def test_every_entry_of_a_run_meta_json_is_checked(run_dir, field, value, match):
    path = resaved(run_dir, put(field, value))
    with pytest.raises(ValueError, match=rf"^'{re.escape(str(path / META_FILE))}'(: | ).*{match}"):
        load(run_dir[0])
    with pytest.raises(ValueError, match=match):
        Snapshot.read(path)
    with pytest.raises(ValueError, match=rf"^checkpoint {META_FILE}(: | ).*{match}"):
        Snapshot.from_files(*load_checkpoint(path))


def test_a_hand_edited_run_meta_json_is_refused_before_its_schema(run_dir):
    path = run_dir[0] / "checkpoint"
    edit_meta(path, '"step": 2', '"step": "five"')
    with pytest.raises(ValueError, match=r"meta.json' must match the sha256 recorded in it"):
        load(run_dir[0])


# ---------------------------------------------------------------- a run's checkpoint: its arrays (issue 11)


def test_float64_weights_that_overflow_float32_are_refused(tmp_path, rng):
    params, meta, arrays = run_files(rng, dtype="float32")
    params = {k: v.astype(np.float64) for k, v in params.items()}
    params["decoder.weight"][1, 2] = 1e300  # finite as float64, inf as float32
    save_checkpoint(tmp_path / "checkpoint", params, meta, arrays)
    with pytest.raises(ValueError, match=r"model.safetensors': tensor 'decoder.weight' must be finite as float32; "
                                         r"got 1 value\(s\) that are or become inf or nan; largest finite magnitude "
                                         r"1e\+300"):
        load(tmp_path)
    # the same weights are fine for a float64 model, and float64 weights that fit load into float32
    params64, meta64, arrays64 = run_files(rng, dtype="float64")
    params64["decoder.weight"][1, 2] = 1e300
    save_checkpoint(tmp_path / "checkpoint", params64, meta64, arrays64)
    assert load(tmp_path).model.params["decoder.weight"][1, 2] == 1e300
    params["decoder.weight"][1, 2] = 1e30
    save_checkpoint(tmp_path / "checkpoint", params, meta, arrays)
    got = load(tmp_path).model.params["decoder.weight"]
    assert got.dtype == np.float32 and got[1, 2] == np.float32(1e30)


@pytest.mark.parametrize("edit,match", [
    (lambda p, a: p.update({"rnn.weight_hh_l0": np.full_like(p["rnn.weight_hh_l0"], np.nan)}),
     r"model.safetensors': tensor 'rnn.weight_hh_l0' must be finite as float64; got 48 value\(s\)"),
    (lambda p, a: p.update({"decoder.bias": np.arange(22)}),
     r"model.safetensors': tensor 'decoder.bias' must be a floating array; got dtype int64"),
    (lambda p, a: a.update({"carry.h": np.zeros((1, 3, 4))}),
     r"optimizer.safetensors': array 'carry.h' must have shape \(L=1, N=2, H=4\); got \(1, 3, 4\)"),
    (lambda p, a: a.update({"carry.h": np.full((1, 2, 4), np.inf)}),
     r"optimizer.safetensors': array 'carry.h' must be finite as float64; got 8 value\(s\)"),
    (lambda p, a: a.update({"carry.c": np.zeros((1, 2, 4))}),
     r"optimizer.safetensors' must hold only 'carry.h', not 'carry.c' for cell 'gru'"),
    (lambda p, a: a.update({"history.val_step": np.array([2.0])}),
     r"optimizer.safetensors': array 'history.val_step' must be a 1-D int64 array; got dtype float64"),
    (lambda p, a: a.update({"ema.step": np.array(3, dtype=np.int64)}),
     r"optimizer.safetensors' must hold 'ema.step' and one 'weights.<name>' per weight together"),
], ids=["nan-weight", "int-weight", "carry-shape", "carry-inf", "carry-c", "history-dtype", "ema-alone"])
def test_the_arrays_of_a_run_checkpoint_are_checked(run_dir, edit, match):
    path, (params, meta, arrays) = run_dir
    params, arrays = dict(params), dict(arrays)
    edit(params, arrays)
    save_checkpoint(path / "checkpoint", params, meta, arrays)
    with pytest.raises(ValueError, match=match):
        load(path)


def test_an_lstm_checkpoint_with_its_cell_state_loads(tmp_path, rng):
    params, meta, arrays = run_files(rng, cell="lstm")
    assert "carry.c" in arrays
    save_checkpoint(tmp_path / "checkpoint", params, meta, arrays)
    assert isinstance(load(tmp_path).snapshot.carry, tuple)
    del arrays["carry.c"]
    save_checkpoint(tmp_path / "checkpoint", params, meta, arrays)
    with pytest.raises(ValueError, match=r"must hold both 'carry.h' and 'carry.c' for cell 'lstm'"):
        load(tmp_path)
