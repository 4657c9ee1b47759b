"""Checkpoints: exact round trip, integrity checks, and crash safety of the directory switch."""
import json
import os

import numpy as np
import pytest

from _torch import require_torch
from hiddenstate.train import checkpoint
from hiddenstate.train.checkpoint import (
    META_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    load_checkpoint,
    save_checkpoint,
)
from hiddenstate.train.corpus import Vocabulary
from hiddenstate.train.optim import Adam


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
