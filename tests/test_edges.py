"""Regression tests of issue 20's "last edges": each input once crashed, hung, replaced a file or gave a wrong result."""

from __future__ import annotations

import functools
import json
import os
import resource
import struct
import subprocess
import sys

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.interop import load_safetensors, save_safetensors, to_onnx
from hiddenstate.interop.statedict_file import load_state_dict_file
from hiddenstate.probe.fixedpoints import layer_map
from hiddenstate.train.corpus import Vocabulary, load_text
from hiddenstate.train.generate import Stream, draw, next_distribution
from hiddenstate.train.model import CharRNN

SRC = os.path.dirname(os.path.dirname(hs.__file__))


def write_safetensors(path, tensors, *, header_text=None):
    """A safetensors file written by hand: name -> (dtype, shape, bytes or a byte count left as a sparse hole)."""
    header, off = {}, 0
    for name, (dtype, shape, data) in tensors.items():
        n = data if isinstance(data, int) else len(data)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    text = (header_text or json.dumps(header)).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, _, data in tensors.values():
            if isinstance(data, int):
                f.seek(data, 1)  # a hole: no disk, no memory
            else:
                f.write(data)
        f.truncate()
    return path


def gru_tensors(rng, dtype="F64"):
    layer = hs.GRU(3, 4, rng=rng)
    return layer, {k: (dtype, v.shape, v.astype(np.float64 if dtype == "F64" else np.float32).tobytes())
                   for k, v in layer.params.items()}


# -- memory bombs --------------------------------------------------------------------------------
def test_a_2_gib_tensor_of_another_module_is_never_read(tmp_path, rng):
    layer, tensors = gru_tensors(rng)
    tensors["decoder.weight"] = ("F32", (2**29,), 2**31)  # 2 GiB claimed, a sparse hole
    path = write_safetensors(tmp_path / "big.safetensors", tensors)
    assert path.stat().st_size > 2**31
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    loaded = load_state_dict_file(path)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < 200 * 1024, f"peak RSS grew by {grown / 1024:.0f} MiB (was 4.1 GiB before the fix)"
    assert loaded.ignored == ["decoder.weight"]
    for key, value in layer.params.items():
        np.testing.assert_array_equal(loaded.layer.params[key], value)


def test_a_layer_tensor_with_bad_rows_is_refused_from_the_header(tmp_path, rng, monkeypatch):
    _, tensors = gru_tensors(rng)
    tensors["weight_ih_l0"] = ("F32", (2**27, 4), 2**31)  # 2 GiB, rows of no GRU of H = 4
    path = write_safetensors(tmp_path / "rows.safetensors", tensors)
    import hiddenstate.interop.safetensors_header as header_module

    def no_read(*args, **kwargs):
        raise AssertionError("a tensor was read before the shapes were checked")
    monkeypatch.setattr(header_module, "read_tensors", no_read)
    monkeypatch.setattr("hiddenstate.interop.statedict_file.read_tensors", no_read)
    with pytest.raises(ValueError, match=r"\['weight_ih_l0'\] must have shape \(12, 4\) .*got \(134217728, 4\)"):
        load_state_dict_file(path)


def test_tensors_that_cannot_fit_in_memory_are_refused_before_reading(tmp_path, rng, monkeypatch):
    _, tensors = gru_tensors(rng)
    path = write_safetensors(tmp_path / "gru.safetensors", tensors)
    import hiddenstate.interop.safetensors_header as header_module
    from hiddenstate.core.resources import check_memory

    # the reader's own rule, on a machine of 100 bytes (the layer of 864 bytes is built, its tensors not read)
    monkeypatch.setattr(header_module, "check_memory", functools.partial(check_memory, limit=100))
    with pytest.raises(ValueError, match=r"reading 4 tensor\(s\) of .* needs about 864 bytes of memory; this "
                                         r"machine allows 100 bytes"):
        load_state_dict_file(path)
    with pytest.raises(ValueError, match="needs about 864 bytes"):
        load_safetensors(path)


# -- silently wrong: a name twice ----------------------------------------------------------------
def test_a_header_naming_a_tensor_twice_is_refused(tmp_path, rng):
    layer, tensors = gru_tensors(rng)
    header, off = {}, 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    text = json.dumps(header)
    first = '"bias_hh_l0": ' + json.dumps(header["bias_hh_l0"])
    text = text[:-1] + ", " + first + "}"  # the same entry again: json.loads would keep the last silently
    path = write_safetensors(tmp_path / "dup.safetensors", tensors, header_text=text)
    with pytest.raises(ValueError, match="must name each tensor once in its header; got 'bias_hh_l0' twice"):
        load_state_dict_file(path)
    with pytest.raises(ValueError, match="'bias_hh_l0' twice"):
        load_safetensors(path)


def test_header_offsets_that_overlap_or_run_past_the_end_are_refused(tmp_path, rng):
    _, tensors = gru_tensors(rng)
    path = write_safetensors(tmp_path / "ok.safetensors", tensors)
    data = path.read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[:-8])
    with pytest.raises(ValueError, match="must end where its last tensor ends"):
        load_safetensors(tmp_path / "cut.safetensors")
    (tmp_path / "len.safetensors").write_bytes(struct.pack("<Q", 10**12) + data[8:])
    with pytest.raises(ValueError, match="must be a valid safetensors file .* a header length of 1000000000000"):
        load_safetensors(tmp_path / "len.safetensors")


def test_save_and_load_safetensors_round_trip_reading_only_the_header_first(tmp_path, rng):
    layer = hs.LSTM(3, 5, 2, bidirectional=True, rng=rng, dtype=np.float32)
    save_safetensors(layer, tmp_path / "l.safetensors")
    back = load_safetensors(tmp_path / "l.safetensors", dtype=np.float32)
    for k, v in layer.params.items():
        assert back.params[k].dtype == np.float32
        np.testing.assert_array_equal(back.params[k], v)
    target = hs.LSTM(3, 5, 2, bidirectional=True, rng=np.random.default_rng(9), dtype=np.float32)
    load_safetensors(tmp_path / "l.safetensors", target)
    for k, v in layer.params.items():
        np.testing.assert_array_equal(target.params[k], v)


# -- hangs: FIFOs --------------------------------------------------------------------------------
def _run(code: str, cwd, timeout: float = 60):
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)  # a regression hangs: the timeout fails the test, the suite goes on


@pytest.mark.parametrize("argv, message", [
    (["inspect", "pipe.safetensors"], "must name a regular file; got 'pipe.safetensors', which is a FIFO"),
    (["inspect", "pipe"], "must be a directory; got 'pipe', which is not a directory"),
    (["train", "--data", "pipe", "--steps", "1", "--out", "run"], "--data must name a regular file"),
])
def test_the_cli_refuses_a_fifo_at_once(tmp_path, argv, message):
    os.mkfifo(tmp_path / "pipe")
    os.mkfifo(tmp_path / "pipe.safetensors")
    done = _run(f"import sys; from hiddenstate.cli import main; sys.exit(main({argv!r}))", tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hiddenstate: error: ") and message in lines[0], lines


def test_python_functions_refuse_a_fifo_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe.safetensors")
    code = ("import sys\nfrom hiddenstate.interop import load_safetensors\nfrom hiddenstate.pipelines.inspection import inspect_file\n"
            "from hiddenstate.train.corpus import load_text\n"
            "for f in (lambda: load_safetensors('pipe.safetensors'), lambda: inspect_file('pipe.safetensors', 'r.html'),"
            " lambda: load_text('pipe.safetensors')):\n"
            "    try:\n        f()\n    except ValueError as e:\n        print('refused:', e)\n")
    done = _run(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("refused:") == 3 and done.stdout.count("which is a FIFO (named pipe)") == 3, done.stdout


def test_a_symlink_loop_is_named_as_one(tmp_path):
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    with pytest.raises(ValueError, match="a loop of symbolic links"):
        hs.train.load(tmp_path / "loop")
    with pytest.raises(ValueError, match="--data must name a regular file; got .*a loop of symbolic links"):
        load_text(tmp_path / "loop", name="--data")


# -- files replaced that are not ours -------------------------------------------------------------
def test_exports_follow_the_cli_path_rules(tmp_path, rng):
    layer = hs.GRU(3, 4, rng=rng)
    with pytest.raises(ValueError, match="ends in a path separator and so names a directory"):
        to_onnx(layer, str(tmp_path / "newdir") + os.sep)
    assert not (tmp_path / "newdir").exists()
    with pytest.raises(TypeError, match="path must be a str or os.PathLike; got int 3"):
        to_onnx(layer, 3)
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ValueError, match="which is a FIFO .*only a regular file is ever replaced"):
        to_onnx(layer, tmp_path / "pipe")
    for export in (lambda p: to_onnx(layer, p), lambda p: save_safetensors(layer, p),
                   lambda p: hs.interop.charrnn_to_onnx(CharRNN(5, 4, rng=rng), p)):
        with pytest.raises(ValueError, match="which is a character device"):  # refused before anything is written
            export("/dev/null")
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


# -- silently wrong ----------------------------------------------------------------------------------
def test_inspect_model_refuses_a_text_that_is_not_the_ids(rng):
    model = CharRNN(5, 8, rng=rng)
    with pytest.raises(ValueError, match=r"text must be the characters of x's sequence 0 .*differs at position 0"):
        hs.inspect_model(model, np.array([0, 1, 2]), text="cde", vocab="abcde", n_fixed_point_starts=0)
    an = hs.inspect_model(model, np.array([0, 1, 2]), text="abc", vocab="abcde", n_fixed_point_starts=0)
    assert an.text == "abc"


def test_load_state_dict_refuses_values_beyond_float32_naming_the_key(rng):
    model = CharRNN(5, 8, rng=rng, dtype=np.float32)
    state = {k: v.astype(np.float64) for k, v in model.state_dict().items()}
    before = model.state_dict()
    state["rnn.bias_ih_l0"][:] = 1e300
    with pytest.raises(ValueError, match=r"state\['rnn.bias_ih_l0'\] must fit in float32; got 24 value"):
        model.load_state_dict(state)
    for k, v in before.items():
        np.testing.assert_array_equal(model.params[k], v)  # nothing loaded


def test_the_textbook_candidate_refuses_a_reset_gate_outside_0_1():
    args = (np.ones((1, 3)), np.ones((1, 4)))
    weights = (np.ones((3, 4)), np.ones((4, 4)), np.ones(4))
    with pytest.raises(ValueError, match=r"r_t must lie in \[0, 1\] \(it is a sigmoid gate\); got values in \[5.0"):
        hs.candidate(*args, np.full((1, 4), 5.0), *weights)
    out = hs.candidate(*args, np.full((1, 4), 0.5), *weights)
    np.testing.assert_allclose(out, np.tanh(3 + 0.5 * 4 + 1) * np.ones((1, 4)))  # by hand


# -- crashes with foreign messages ----------------------------------------------------------------
@pytest.mark.parametrize("temperature", [1e-310, 1e-300, 5e-324])
def test_a_tiny_temperature_is_greedy(temperature):
    p = next_distribution(np.array([1.0, 3.0, 2.0, -1e3]), temperature=temperature)
    np.testing.assert_array_equal(p, [0.0, 1.0, 0.0, 0.0])
    tied = next_distribution(np.array([3.0, 1.0, 3.0]), temperature=temperature)
    np.testing.assert_array_equal(tied, [0.5, 0.0, 0.5])  # the limit T -> 0 of the softmax


def test_sample_cli_with_a_tiny_temperature_is_the_greedy_text(tmp_path, capsys, rng):
    model = CharRNN(4, 6, rng=rng)
    prime = np.array([1])
    greedy = model.sample(prime, 20, temperature=0.0)
    tiny = model.sample(prime, 20, temperature=1e-310, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(tiny, greedy)


def test_draw_validates_its_arguments(rng):
    with pytest.raises(ValueError, match="p must be a non-empty vector .* positive sum; got weights in \\[0, 0\\]"):
        draw(np.zeros(3), rng)
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator; got int"):
        draw(np.ones(3) / 3, 3)
    with pytest.raises(ValueError, match="non-negative weights"):
        draw(np.array([0.5, -0.1, 0.6]), rng)
    assert draw(np.array([0.0, 0.0, 1.0]), rng) == 2


def test_stream_messages_name_vocab_char_and_state(rng):
    model = CharRNN(5, 8, rng=rng)
    with pytest.raises(TypeError, match="vocab must be a hiddenstate Vocabulary .*got str 'abcde'"):
        Stream(model, vocab="abcde")
    stream = Stream(model, vocab=Vocabulary("abcde"))
    with pytest.raises(ValueError, match="char must be one of the vocabulary's 5 characters; got 'z'"):
        stream.feed("z")
    with pytest.raises(ValueError, match=r"state must be \(1, N, 8\) of floats for CharRNN.*N = 1 .*got float64 \(3,\)"):
        Stream(model, state=np.zeros(3))
    with pytest.raises(ValueError, match="vocab must have the model's V=5 characters; got 3"):
        Stream(model, vocab=Vocabulary("abc"))


def test_huge_lengths_are_refused_by_the_clis_rule(rng):
    model = CharRNN(5, 8, rng=rng)
    stream = Stream(model)
    stream.feed(1)
    with pytest.raises(ValueError, match="length 1000000000000 needs about .* of memory; this machine allows"):
        stream.generate(10**12)
    with pytest.raises(ValueError, match="length 1000000000000 needs about"):
        model.sample([1], 10**12)


def test_inspect_model_without_a_sequence_names_the_input(rng):
    layer = hs.GRU(3, 4, rng=rng)
    with pytest.raises(ValueError, match=r"x must hold at least one sequence \(N >= 1\); got shape \(5, 0, 3\)"):
        hs.inspect_model(layer, np.zeros((5, 0, 3)), n_fixed_point_starts=0)
    with pytest.raises(ValueError, match="lengths must give at least one valid step"):
        hs.inspect_model(layer, np.zeros((5, 2, 3)), lengths=[0, 0], n_fixed_point_starts=0)


def test_torch_meta_tensors_are_named():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="must hold values; got a torch tensor on the 'meta' device"):
        hs.interop.from_torch(torch.nn.GRU(3, 4, device="meta"))
    with pytest.raises(ValueError, match="x must hold values; got a torch tensor on the 'meta' device"):
        hs.inspect_model(torch.nn.GRU(3, 4), torch.zeros(5, 2, 3, device="meta"), n_fixed_point_starts=0)


def test_init_hidden_of_800_tb_is_refused_from_the_size_rule():
    with pytest.raises(ValueError, match=r"init_hidden\(batch_size=10000000, hidden_dim=10000000\), a float64 state of shape \(10000000, 10000000\), needs about 727.6 TiB"):
        hs.init_hidden(10**7, 10**7)
    with pytest.raises(ValueError, match="needs about"):
        hs.initial_state((10**7, 10**7), "constant")


@pytest.mark.parametrize("value, where", [([[[1, 2, 3]], [[1, 2]]], r"x\[0\]\[0\] has 3 entries but x\[1\]\[0\] has 2"),
                                          ([[1.0, 2.0, 3.0], 4.0], r"x\[0\] has 3 entries but x\[1\] is a scalar")])
def test_a_ragged_nested_list_says_where(value, where):
    with pytest.raises(TypeError, match=r"x must be a floating-point array; got list \(ragged: "
                                        + where):
        hs.GRU(3, 4)(value)


def test_find_fixed_points_names_inits_of_the_wrong_width(rng):
    layer = hs.GRU(3, 4, rng=rng)
    F, jac = layer_map(layer)
    with pytest.raises(ValueError, match=r"inits must have shape \(K, S=4\), states of the map F; got shape \(2, 5\)"):
        hs.find_fixed_points(F, jac, np.zeros((2, 5)))
