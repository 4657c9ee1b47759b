"""The character model of Mamba blocks (``cell="mamba"``): gradients, resume, sampling, refusals."""

import json

import numpy as np
import pytest

from hiddenstate.classic.gradcheck import check_grads
from hiddenstate.train import PRESETS, TrainConfig, load, sample, train
from hiddenstate.train.corpus import load_text
from hiddenstate.train.generate import Stream
from hiddenstate.train.model import CharRNN
from hiddenstate.train.rundir.checkpoint import load_checkpoint
from hiddenstate.train.rundir.snapshot import Snapshot


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "small.txt"
    path.write_text(load_text()[:40_000], encoding="utf-8")
    return path


def small_config(text_file, out, **overrides):
    settings = dict(data=str(text_file), cell="mamba", hidden_size=8, num_layers=2, seq_len=16, batch_size=64,
                    steps=40, lr=1e-2, eval_every=10, save_every=10, out=str(out), dtype="float64")
    settings.update(overrides)
    return TrainConfig(**settings)


def _states(model, N, rng):
    ssm, conv = model.initial_state(N)
    return rng.normal(size=ssm.shape), rng.normal(size=conv.shape)


@pytest.mark.parametrize("embedding_dim", [None, 3])
def test_char_model_gradient_matches_finite_differences(embedding_dim):
    model = CharRNN(5, 6, 2, cell="mamba", embedding_dim=embedding_dim, dropout=0.3, rng=np.random.default_rng(0))
    rng = np.random.default_rng(1)
    inputs, targets = rng.integers(0, 5, (4, 2)), rng.integers(0, 5, (4, 2))
    state = _states(model, 2, rng)  # a carried state, not zeros: the chunk reads it
    loss, grads, _ = model.loss_and_grads(inputs, targets, state, training=True, rng=np.random.default_rng(5))

    def f():
        return model.loss(inputs, targets, state, training=True, rng=np.random.default_rng(5))[0]

    assert loss == f()
    errors = check_grads(f, model.params, grads, max_entries=None)
    assert max(errors.values()) < 1e-6, errors


def test_stack_is_the_reference_residual_stack_of_mamba_blocks():
    # written out by hand from the blocks: x = W_in u; x += mixer(rms(x) n_l); out = rms(x) n_f
    model = CharRNN(7, 8, 2, cell="mamba", rng=np.random.default_rng(2))
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 7, (5, 3))
    state = _states(model, 3, rng)
    logits, (ssm, conv), _ = model.forward(ids, state)
    p, stack = model.params, model.rnn
    x = np.eye(7)[ids] @ p["rnn.in_proj.weight"].T
    for i, blk in enumerate(stack.layers):
        w = p[f"rnn.layers.{i}.norm.weight"]
        xn = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5) * w
        y, fin, _ = blk.forward(xn, (state[0][i], state[1][i]))
        np.testing.assert_allclose(ssm[i], fin.ssm, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(conv[i], fin.conv, rtol=1e-12, atol=1e-13)
        x = x + y
    out = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5) * p["rnn.norm_f.weight"]
    np.testing.assert_allclose(logits, out @ p["decoder.weight"].T + p["decoder.bias"], rtol=1e-12, atol=1e-12)
    assert ssm.shape == (2, 3, 16, 16) and conv.shape == (2, 3, 16, 3)  # (L, N, Di = 2M, S), (L, N, Di, K-1)


def test_carried_state_splits_a_sequence_exactly_and_streams_one_char_at_a_time():
    model = CharRNN(6, 8, 2, cell="mamba", rng=np.random.default_rng(4))
    ids = np.random.default_rng(5).integers(0, 6, (12, 1))
    whole, state_whole, _ = model.forward(ids)
    first, state, _ = model.forward(ids[:5])
    second, state, _ = model.forward(ids[5:], state)
    np.testing.assert_allclose(np.concatenate([first, second]), whole, rtol=1e-12, atol=1e-12)
    for a, b in zip(state, state_whole):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    stream = Stream(model)
    for t in range(12):
        stream.feed(int(ids[t, 0]))
        np.testing.assert_allclose(stream.logits, whole[t, 0], rtol=1e-12, atol=1e-12)


def test_resume_equals_the_uninterrupted_run_and_saves_the_carried_pair(text_file, tmp_path):
    extra = {"dropout": 0.2}
    whole = train(small_config(text_file, tmp_path / "whole", **extra), progress=False, verbose=False)

    class Crash(Exception):
        pass

    def crash_at_step_27(record):
        if record["step"] == 27:
            raise Crash

    with pytest.raises(Crash):
        train(small_config(text_file, tmp_path / "parts", **extra), progress=False, verbose=False,
              callback=crash_at_step_27)
    params, meta, arrays = load_checkpoint(tmp_path / "parts" / "checkpoint")
    assert meta["step"] == 20
    assert arrays["carry.ssm"].shape == (2, 64, 16, 16) and arrays["carry.conv"].shape == (2, 64, 16, 3)
    assert "carry.h" not in arrays and np.abs(arrays["carry.ssm"]).max() > 0
    resumed = train(None, resume=tmp_path / "parts", progress=False, verbose=False)
    assert resumed.step == 40
    for key in ("train_loss", "grad_norm", "val_step", "val_loss"):
        np.testing.assert_array_equal(resumed.history[key], whole.history[key], err_msg=key)
    for key, value in whole.model.params.items():
        assert resumed.model.params[key].tobytes() == value.tobytes(), key
    assert whole.history["train_loss"][-1] < np.log(load(whole.out).vocab.size)  # it learns something
    # sampling: the same seed, the same text; another seed, another text
    a, b, c = (sample(whole.out, prime="ROMEO:", length=40, seed=s) for s in (3, 3, 4))
    assert a == b and a != c and a.startswith("ROMEO:") and len(a) == len("ROMEO:") + 40

    # the schema: a carried pair of the wrong shape, or half of it, is refused naming the array
    snap = Snapshot.from_files(params, meta, arrays)
    assert [x.tobytes() for x in snap.carry] == [arrays["carry.ssm"].tobytes(), arrays["carry.conv"].tobytes()]
    bad = dict(arrays, **{"carry.conv": arrays["carry.conv"][:, :, :, :2]})
    with pytest.raises(ValueError, match=r"array 'carry.conv' must have shape \(2, 64, 16, 3\)"):
        Snapshot.from_files(params, meta, bad)
    half = {k: v for k, v in arrays.items() if k != "carry.ssm"}
    with pytest.raises(ValueError, match=r"must hold exactly \['carry.conv', 'carry.ssm'\] for cell 'mamba'"):
        Snapshot.from_files(params, meta, half)
    nan = dict(arrays, **{"carry.ssm": np.full_like(arrays["carry.ssm"], np.nan)})
    with pytest.raises(ValueError, match="array 'carry.ssm' must be finite"):
        Snapshot.from_files(params, meta, nan)


def test_refusals_and_the_preset():
    with pytest.raises(ValueError, match="weight_drop must be 0 for cell='mamba', which has no recurrent weights"):
        CharRNN(5, 8, cell="mamba", weight_drop=0.2)
    model = CharRNN(5, 8, cell="mamba", rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"state.conv must have shape \(1, 2, 16, 3\); got \(1, 2, 16, 4\)"):
        model.forward(np.zeros((3, 2), dtype=np.int64), (np.zeros((1, 2, 16, 16)), np.zeros((1, 2, 16, 4))))
    with pytest.raises(TypeError, match=r"state must be a pair \(ssm"):
        model.forward(np.zeros((3, 2), dtype=np.int64), np.zeros((1, 2, 8)))
    preset = PRESETS["mamba"]
    assert preset["cell"] == "mamba" and preset["max_minutes"] == 3.0
    cfg = TrainConfig(**{k: v for k, v in preset.items()})
    assert json.loads(json.dumps(cfg.to_dict()))["cell"] == "mamba"


def test_device_path_refuses_mamba(text_file, tmp_path):
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match="cell must be gru, lstm or rnn to train on a device other than cpu; got "
                                         "'mamba'"):
        train(small_config(text_file, tmp_path / "d"), progress=False, verbose=False, device="torch:cpu")
    assert not (tmp_path / "d" / "checkpoint").exists()


def test_cli_trains_samples_and_refuses_what_mamba_does_not_have(text_file, tmp_path, capsys):
    from hiddenstate.cli import main

    def one_line_error(*needles):
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("hiddenstate: error: "), lines
        for needle in needles:
            assert needle in lines[0], lines[0]

    tiny = ["--hidden-size", "8", "--seq-len", "16", "--batch-size", "8", "--eval-every", "2", "--quiet"]
    out = tmp_path / "m"
    assert main(["train", "--data", str(text_file), "--cell", "mamba", "--num-layers", "2", "--steps", "3",
                 "--out", str(out), *tiny]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("validation loss: ")
    assert load(out).model.cell == "mamba"
    assert main(["sample", str(out), "--length", "30", "--seed", "1", "--prime", "A"]) == 0
    first = capsys.readouterr().out
    assert main(["sample", str(out), "--length", "30", "--seed", "1", "--prime", "A"]) == 0
    assert capsys.readouterr().out == first and len(first) >= 30
    assert main(["export", str(out), "--format", "onnx", "--out", str(tmp_path / "m.onnx")]) == 2
    one_line_error("a mamba run cannot be exported as onnx")
    assert not (tmp_path / "m.onnx").exists()

    def status(argv):
        try:
            return main(argv)
        except SystemExit as exit_:
            return exit_.code

    assert status(["train", "--data", str(text_file), "--cell", "mamba", "--weight-drop", "0.2",
                   "--out", str(tmp_path / "w"), *tiny]) == 2
    one_line_error("--weight-drop must be 0 for cell='mamba', which has no recurrent weights")
    assert not (tmp_path / "w").exists()
