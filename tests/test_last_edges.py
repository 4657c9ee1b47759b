"""Regression tests of issue 27's "last edges": each input once failed with a message naming nothing of the user's."""

from __future__ import annotations

import contextlib
import io
import os
import re

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.cli import main
from hiddenstate.train.corpus import StreamBatcher
from hiddenstate.train.model import CharRNN
from hiddenstate.train.optim import SGD, Adam, ExponentialMovingAverage

RAGGED = [[1.0, 2.0], [3.0]]


def test_init_hidden_beyond_memory_names_both_arguments_and_their_values():
    with pytest.raises(ValueError, match=r"init_hidden\(batch_size=10000000, hidden_dim=10000000\).* needs about "
                                         r".*Use a smaller batch_size or hidden_dim"):
        hs.init_hidden(10_000_000, 10_000_000)


def _owners(rng):
    return [hs.GRU(3, 4, rng=rng), hs.LSTM(3, 4, num_layers=2, rng=rng), hs.RNN(3, 4, rng=rng),
            hs.MinGRU(3, 4, rng=rng), hs.MinLSTM(3, 4, rng=rng), CharRNN(5, 6, rng=rng),
            CharRNN(5, 8, cell="mamba", rng=rng), hs.Mamba(8, rng=rng), hs.Mamba2(16, head_dim=8, rng=rng)]


@pytest.mark.parametrize("i", range(9))
def test_load_state_dict_names_the_key_of_a_ragged_value(rng, i):
    owner = _owners(rng)[i]
    state = owner.state_dict()
    key = sorted(state)[-1]
    before = {k: v.copy() for k, v in owner.state_dict().items()}
    state[key] = RAGGED
    with pytest.raises(TypeError, match=rf"\[{key!r}\] must be an array of one shape; got list \(ragged: .*\[{key!r}\]\[0\] "
                                        r"has 2 entries but .*\[1\] has 1; every row of an array has the same length"):
        owner.load_state_dict(state)
    for k, v in owner.state_dict().items():  # nothing was loaded
        np.testing.assert_array_equal(v, before[k])


@pytest.mark.parametrize("make", [Adam, lambda p: SGD(p, 0.1, momentum=0.9), ExponentialMovingAverage])
def test_optimizer_states_and_grads_name_the_key_of_a_ragged_value(rng, make):
    params = {"w": rng.standard_normal((2, 2))}
    opt = make(params)
    state = opt.state_dict()
    key = next(k for k in state if k != "step")
    state[key] = RAGGED
    with pytest.raises(TypeError, match=rf"state\['{key}'\] must be an array of one shape; got list \(ragged"):
        opt.load_state_dict(state)
    state = opt.state_dict()
    state["step"] = RAGGED
    with pytest.raises(TypeError, match=r"state\['step'\] must be an array of one shape"):
        opt.load_state_dict(state)
    if hasattr(opt, "step") and callable(opt.step) and make is not ExponentialMovingAverage:
        with pytest.raises(TypeError, match=r"grads\['w'\] must be an array of one shape; got list \(ragged"):
            opt.step({"w": RAGGED})


def test_a_batcher_state_holding_an_array_is_refused_by_key():
    batcher = StreamBatcher(np.arange(100), 2, 5)
    state = batcher.state_dict()
    state["batch_size"] = np.array([2, 2])  # once: "The truth value of an array ... is ambiguous"
    with pytest.raises(ValueError, match=r"state\['batch_size'\] must match this batcher \(2\); got \[2 2\]"):
        batcher.load_state_dict(state)


# -- a checkpoint whose model.safetensors is a loop of symbolic links ---------------------------------
@pytest.fixture(scope="module")
def looped_run(tmp_path_factory):
    """A run directory of one training step whose checkpoint/model.safetensors links to itself."""
    d = tmp_path_factory.mktemp("looped")
    text = d / "text.txt"
    text.write_text("to be or not to be, that is the question\n" * 20)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["train", "--data", str(text), "--steps", "1", "--out", str(d / "run"), "--hidden-size", "4",
                     "--batch-size", "2", "--seq-len", "8", "--quiet"]) == 0
    model = d / "run" / "checkpoint" / "model.safetensors"
    os.remove(model)
    os.symlink(model, model)
    return d / "run"


def test_load_refuses_a_model_file_that_is_a_symlink_loop_by_name(looped_run):
    for path in (looped_run, looped_run / "checkpoint"):
        with pytest.raises(ValueError, match=r"model\.safetensors' must be a regular file; got a loop of symbolic "
                                             r"links\. Save the checkpoint again"):
            hs.train.load(path)


@pytest.mark.parametrize("command", ["sample", "inspect", "resume", "export"])
def test_the_cli_refuses_a_looped_checkpoint_in_one_line(looped_run, tmp_path, command):
    ckpt = str(looped_run / "checkpoint")
    argv = {"sample": ["sample", ckpt, "--length", "3"],
            "inspect": ["inspect", ckpt, "--out", str(tmp_path / "r.html")],
            "resume": ["train", "--resume", str(looped_run), "--steps", "2", "--quiet"],
            "export": ["export", ckpt, "--format", "onnx", "--out", str(tmp_path / "m.onnx")]}[command]
    before = sorted(os.listdir(looped_run))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(argv)
        except SystemExit as exit_:
            status = exit_.code
    lines = err.getvalue().strip().splitlines()
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith("hiddenstate: error: ") and "model.safetensors' must be a regular file; got a loop " \
        "of symbolic links" in lines[0], lines
    assert "Errno" not in lines[0]
    assert sorted(os.listdir(looped_run)) == before and os.listdir(tmp_path) == []  # nothing written


def test_processes_beyond_the_machine_are_refused_before_any_worker_starts(tmp_path):
    """``--processes 100000`` once started workers until the machine stalled."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(["train", "--processes", "100000", "--steps", "1", "--out", str(tmp_path / "run")])
        except SystemExit as exit_:
            status = exit_.code
    lines = err.getvalue().strip().splitlines()
    assert status == 2 and len(lines) == 1 and re.search(r"--processes must be at most \d+ on this machine .*got "
                                                         r"100000", lines[0]), lines
    assert os.listdir(tmp_path) == []


def test_a_rank_beyond_world_size_says_so(tmp_path, monkeypatch):
    """RANK=5 of WORLD_SIZE=2 exited 2 saying nothing (it took itself for a quiet follower of rank 0)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "5")
    text = tmp_path / "t.txt"
    text.write_text("to be or not to be\n" * 20)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(["train", "--data", str(text), "--steps", "1", "--out", str(tmp_path / "run")])
        except SystemExit as exit_:
            status = exit_.code
    lines = err.getvalue().strip().splitlines()
    assert status == 2 and lines == ["hiddenstate: error: RANK must be less than WORLD_SIZE=2 (set by torchrun); got 5. "
                                     "Start the ranks with torchrun or hiddenstate train --processes K."], lines
    assert not (tmp_path / "run").exists()


def test_the_fixed_point_search_lays_the_weights_out_once(rng, monkeypatch):
    """Each step of the search re-laid-out W_hh (3.4 of 3.5 ms a step at H = 256); now once per search, same points."""
    from hiddenstate.classic.cells import gru
    from hiddenstate.probe.fixedpoints import find_fixed_points, layer_map

    layer = hs.GRU(3, 6, rng=rng)
    layer.params["weight_hh_l0"] *= 0.3  # a contraction: one stable point, the long run's state
    calls = []
    layout = gru._gate_weights
    monkeypatch.setattr(gru, "_gate_weights", lambda *a: calls.append(1) or layout(*a))
    F, J = layer_map(layer)
    pts = find_fixed_points(F, J, rng.uniform(-1, 1, size=(4, 6)), bounds=(-1, 1))
    assert 0 < len(calls) <= 2 and len(pts) == 1  # one layout for one row (N = 1), one for a batch of rows
    _, h_n = layer(np.zeros((400, 1, 3)))
    np.testing.assert_allclose(pts[0].h, h_n[0, 0], atol=1e-10)
    before = F(pts[0].h)
    layer.params["weight_hh_l0"] *= 2.0  # the map is the layer's at layer_map time (a private copy)
    np.testing.assert_array_equal(F(pts[0].h), before)
