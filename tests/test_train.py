"""Training: it learns, it samples reproducibly, it resumes exactly, its checkpoint loads into torch."""
import json
import math

import numpy as np
import pytest

from _torch import require_torch
from hiddenstate.train import TrainConfig, evaluate, load, lr_at, resolve_checkpoint, sample, train
from hiddenstate.train.config import check_config, make_config
from hiddenstate.train.corpus import load_text
from hiddenstate.train.history import kept_log_lines, plot_history, read_history
from hiddenstate.train.rundir.checkpoint import load_checkpoint, save_checkpoint
from hiddenstate.train.rundir.snapshot import ARRAYS, HISTORY, KIND, META, Snapshot


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    """40k characters of the embedded Shakespeare: enough to learn something in a few hundred steps."""
    path = tmp_path_factory.mktemp("data") / "small.txt"
    path.write_text(load_text()[:40_000], encoding="utf-8")
    return path


def small_config(text_file, out, **overrides):
    settings = dict(data=str(text_file), hidden_size=24, seq_len=16, batch_size=8, steps=40, lr=1e-2,
                    eval_every=10, save_every=10, out=str(out), dtype="float64")
    settings.update(overrides)
    return TrainConfig(**settings)


@pytest.fixture(scope="module")
def trained(text_file, tmp_path_factory):
    """A few hundred steps of a small GRU (shared by the tests that only read the result)."""
    out = tmp_path_factory.mktemp("runs") / "gru"
    config = small_config(text_file, out, hidden_size=48, seq_len=32, batch_size=16, steps=300, eval_every=100,
                          save_every=100, dtype="float32")
    return train(config, progress=False, verbose=False)


def test_a_few_hundred_steps_drive_the_loss_well_below_ln_v(trained):
    ln_v = math.log(trained.vocab.size)
    assert trained.step == 300 and trained.stopped == "steps"
    first = float(np.mean(trained.history["train_loss"][:5]))
    assert first == pytest.approx(ln_v, abs=0.3)  # an untrained model is near uniform
    assert trained.train_loss < 0.7 * ln_v
    assert trained.val_loss < 0.75 * ln_v
    assert trained.val_bpc == pytest.approx(trained.val_loss / math.log(2))
    assert trained.val_ppl == pytest.approx(math.exp(trained.val_loss))
    np.testing.assert_array_equal(trained.history["val_step"], [100, 200, 300])
    assert trained.history["val_loss"][-1] == trained.val_loss


def test_run_directory_has_log_plot_and_checkpoint(trained):
    out = trained.out
    assert (out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, 301))
    evals = [r for r in records if "val_loss" in r]
    assert [r["step"] for r in evals] == [100, 200, 300]
    assert evals[-1]["val_bpc"] == pytest.approx(evals[-1]["val_loss"] / math.log(2))
    assert records[-1]["lr"] < records[0]["lr"]  # decayed
    assert resolve_checkpoint(out) == out / "checkpoint"
    assert resolve_checkpoint(out / "checkpoint") == out / "checkpoint"


def test_checkpoint_round_trip_is_exact(trained):
    loaded = load(trained.out)
    assert loaded.step == 300
    assert loaded.vocab == trained.vocab
    assert loaded.config == trained.config
    assert loaded.model.config() == trained.model.config()
    assert loaded.val_loss == trained.val_loss
    for key, value in trained.model.params.items():
        got = loaded.model.params[key]
        assert got.dtype == value.dtype == np.float32
        assert got.tobytes() == value.tobytes(), key
    # the loaded model computes exactly what the trained one does
    ids = trained.vocab.encode(load_text()[-3000:])
    assert evaluate(loaded.model, ids) == evaluate(trained.model, ids)


def test_sampling_is_reproducible(trained):
    a = sample(trained.out, prime="ROMEO:", length=200, seed=3)
    b = trained.sample(prime="ROMEO:", length=200, seed=3)
    c = sample(trained.out, prime="ROMEO:", length=200, seed=4)
    assert a == b
    assert a != c
    assert a.startswith("ROMEO:") and len(a) == 206
    assert set(a) <= set(trained.vocab.chars)
    greedy = sample(trained.out, length=50, temperature=0, seed=None)
    assert greedy == sample(trained.out, length=50, temperature=0, seed=123)


def test_prime_with_unknown_characters_is_a_clear_error(trained):
    with pytest.raises(ValueError, match=r"prime must only use characters the model was trained on; got 2 "
                                         r"unknown character\(s\): '@', 'é'"):
        sample(trained.out, prime="é@ROMEO")
    with pytest.raises(ValueError, match="prime must hold at least one character"):
        sample(trained.out, prime="")


@pytest.mark.parametrize("cell,extra", [("gru", {}), ("lstm", {"num_layers": 2, "dropout": 0.2}),
                                        ("gru", {"ema": 0.9}), ("gru", {"weight_drop": 0.3, "dropout": 0.1}),
                                        ("mingru", {"num_layers": 2, "dropout": 0.2}), ("minlstm", {})])
def test_resume_equals_the_uninterrupted_run(cell, extra, text_file, tmp_path):
    # 40 steps over 36k training characters / (64 x 16) per step: the batcher wraps to a new pass
    # (state reset) during the run, so that path is covered too; dropout draws from the saved RNG
    whole = train(small_config(text_file, tmp_path / "whole", cell=cell, steps=40, batch_size=64, **extra),
                  progress=False, verbose=False)

    class Crash(Exception):
        pass

    def crash_at_step_27(record):
        if record["step"] == 27:
            raise Crash

    config = small_config(text_file, tmp_path / "parts", cell=cell, steps=40, batch_size=64, **extra)
    with pytest.raises(Crash):
        train(config, progress=False, verbose=False, callback=crash_at_step_27)
    assert load(tmp_path / "parts").step == 20  # the last checkpoint before the crash
    resumed = train(None, resume=tmp_path / "parts", progress=False, verbose=False)

    assert resumed.step == 40
    for key in ("train_loss", "grad_norm", "val_step", "val_loss"):
        np.testing.assert_array_equal(resumed.history[key], whole.history[key], err_msg=key)
    assert resumed.val_loss == whole.val_loss
    for key, value in whole.model.params.items():
        assert resumed.model.params[key].tobytes() == value.tobytes(), key
    logs = [[json.loads(line) for line in (run.out / "log.jsonl").read_text().splitlines()]
            for run in (whole, resumed)]
    for log in logs:
        for record in log:
            record.pop("elapsed_s")
    assert logs[0] == logs[1]


def test_ema_run_evaluates_saves_and_samples_the_average(text_file, tmp_path):
    # constant rate, so a run extended one step at a time by resuming is the same trajectory
    cfg = dict(steps=12, lr_min_ratio=1.0, eval_every=12, save_every=12)
    plain = train(small_config(text_file, tmp_path / "plain", **cfg), progress=False, verbose=False)
    run = train(small_config(text_file, tmp_path / "ema", ema=0.8, **cfg), progress=False, verbose=False)
    # the average never feeds back: the same training losses, and the raw weights are kept for resuming
    np.testing.assert_array_equal(run.history["train_loss"], plain.history["train_loss"])
    ckpt = load(run.out)
    raw = {k[len("weights."):]: v for k, v in ckpt.arrays.items() if k.startswith("weights.")}
    assert raw.keys() == plain.model.params.keys() and int(ckpt.arrays["ema.step"]) == 12
    for key, value in plain.model.params.items():
        np.testing.assert_array_equal(raw[key], value, err_msg=key)

    # the raw weights after every step, from a plain run extended one step at a time
    snapshots = [load(train(small_config(text_file, tmp_path / "steps", **{**cfg, "steps": 1}),
                            progress=False, verbose=False).out).model.params]
    for k in range(2, 13):
        snapshots.append(load(train({"steps": k}, resume=tmp_path / "steps", progress=False,
                                    verbose=False).out).model.params)
    expect = {k: v.copy() for k, v in snapshots[0].items()}  # the first update copies
    for snap in snapshots[1:]:
        for k in expect:
            expect[k] = 0.8 * expect[k] + 0.2 * snap[k]
    for key, value in expect.items():
        np.testing.assert_allclose(ckpt.model.params[key], value, rtol=1e-12, atol=1e-14, err_msg=key)
        np.testing.assert_array_equal(run.model.params[key], ckpt.model.params[key])

    # validation and sampling use the average
    text = load_text(str(text_file))
    val_ids = ckpt.vocab.encode(text[len(text) - round(0.1 * len(text)):])
    assert run.val_loss == pytest.approx(evaluate(ckpt.model, val_ids), abs=1e-12)
    assert abs(run.val_loss - plain.val_loss) > 1e-6
    assert sample(run.out, length=50, seed=3) == sample(ckpt, length=50, seed=3)


def test_resume_can_extend_the_run_but_not_change_the_model(text_file, tmp_path):
    first = train(small_config(text_file, tmp_path / "run", steps=10), progress=False, verbose=False)
    longer = train({"steps": 15}, resume=first.out, progress=False, verbose=False)
    assert longer.step == 15 and len(longer.history["train_loss"]) == 15
    np.testing.assert_array_equal(longer.history["train_loss"][:10], first.history["train_loss"])
    with pytest.raises(ValueError, match=r"--hidden-size must match the checkpoint being resumed \(24\); got 32"):
        train({"hidden_size": 32}, resume=first.out, progress=False)
    with pytest.raises(ValueError, match="steps must be at least the checkpoint's step 15"):
        train({"steps": 5}, resume=first.out, progress=False)
    other = tmp_path / "other.txt"
    other.write_text(text_file.read_text()[::-1], encoding="utf-8")
    with pytest.raises(ValueError, match="data must be the text the checkpoint was trained on"):
        train({"data": str(other)}, resume=first.out, progress=False)
    moved = tmp_path / "moved.txt"
    moved.write_text(text_file.read_text(), encoding="utf-8")
    train({"data": str(moved), "steps": 16}, resume=first.out, progress=False, verbose=False)  # same text, new path


def test_tampered_checkpoint_is_a_clear_error(text_file, tmp_path):
    run = train(small_config(text_file, tmp_path / "run", steps=5), progress=False, verbose=False)
    weights = run.checkpoint / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="sha256"):
        load(run.out)
    weights.write_bytes(bytes(data[:100]))
    with pytest.raises(ValueError, match="truncated"):
        load(run.out)


@pytest.mark.parametrize("cell", ["gru", "lstm", "rnn"])
def test_checkpoint_recurrent_weights_load_into_torch(cell, text_file, tmp_path):
    torch = require_torch()
    from safetensors.numpy import load_file

    run = train(small_config(text_file, tmp_path / cell, cell=cell, num_layers=2, steps=3),
                progress=False, verbose=False)
    weights = load_file(str(run.checkpoint / "model.safetensors"))
    V, H = run.vocab.size, 24
    module = {"gru": torch.nn.GRU, "lstm": torch.nn.LSTM, "rnn": torch.nn.RNN}[cell](V, H, 2, dtype=torch.float64)
    module.load_state_dict({k[len("rnn."):]: torch.from_numpy(v) for k, v in weights.items() if k.startswith("rnn.")})
    decoder = torch.nn.Linear(H, V, dtype=torch.float64)
    decoder.load_state_dict({"weight": torch.from_numpy(weights["decoder.weight"]),
                             "bias": torch.from_numpy(weights["decoder.bias"])})

    ids = run.vocab.encode(text_file.read_text()[:120]).reshape(30, 4)
    ours, _, _ = load(run.out).model.forward(ids)
    with torch.no_grad():
        out, _ = module(torch.nn.functional.one_hot(torch.from_numpy(ids), V).to(torch.float64))
        theirs = decoder(out).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


def test_time_limit_stops_with_a_checkpoint(text_file, tmp_path):
    run = train(small_config(text_file, tmp_path / "run", steps=100_000, max_minutes=1e-4),
                progress=False, verbose=False)
    assert run.stopped == "time" and 1 <= run.step < 100_000
    assert load(run.out).step == run.step
    assert run.history["val_step"][-1] == run.step


def test_callback_can_stop_the_run(text_file, tmp_path):
    run = train(small_config(text_file, tmp_path / "run", steps=50),
                progress=False, verbose=False, callback=lambda record: record["step"] == 7)
    assert run.stopped == "callback" and run.step == 7 and load(run.out).step == 7


def test_progress_bar_runs(text_file, tmp_path, capsys):
    train(small_config(text_file, tmp_path / "run", steps=4, eval_every=2), progress=True)
    err = capsys.readouterr().err
    assert "4/4" in err and "val=" in err


def test_learning_rate_schedule():
    cfg = TrainConfig(lr=1e-2, lr_min_ratio=0.1)
    assert lr_at(cfg, 0.0) == pytest.approx(1e-2)
    assert lr_at(cfg, 0.5) == pytest.approx(5.5e-3)
    assert lr_at(cfg, 1.0) == pytest.approx(1e-3)
    assert lr_at(cfg, 2.0) == pytest.approx(1e-3)
    assert lr_at(TrainConfig(lr=1e-2, lr_min_ratio=1.0), 0.7) == pytest.approx(1e-2)


@pytest.mark.parametrize("overrides,error,match", [
    (dict(cell="transformer"), ValueError, "cell must be one of gru, lstm, rnn"),
    (dict(hidden_size=0), ValueError, "hidden_size must be a positive integer; got 0"),
    (dict(steps=2.5), TypeError, "steps must be a positive integer; got float 2.5"),
    (dict(lr=-1.0), ValueError, "lr must be a finite number > 0; got -1.0"),
    (dict(dtype="float16"), ValueError, "dtype must be one of float32, float64; got 'float16'"),
    (dict(batch_size=10_000), ValueError, r"--batch-size x \(--seq-len \+ 1\) = 10000 x 17 = 170000 characters"),
])
def test_config_errors(overrides, error, match, text_file, tmp_path):
    with pytest.raises(error, match=match):
        train(small_config(text_file, tmp_path / "run", **overrides), progress=False)


def test_data_errors(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        train({"data": str(empty), "out": str(tmp_path / "r")}, progress=False)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        train({"data": str(tmp_path / "missing.txt"), "out": str(tmp_path / "r")}, progress=False)
    with pytest.raises(IsADirectoryError, match="which is a directory"):
        train({"data": str(tmp_path), "out": str(tmp_path / "r")}, progress=False)
    with pytest.raises(TypeError, match="unknown field"):
        train({"hidden": 3}, progress=False)


# ------------------------------------------------------------------ the checkpoint's contents, once
def array_entry(name):
    """The entry of ARRAYS that documents an array name (exact, or the prefix it starts with)."""
    return next((key for key in ARRAYS if name == key or (key.endswith(".") and name.startswith(key))), None)


@pytest.mark.parametrize("extra", [{}, {"ema": 0.9, "cell": "lstm"}])
def test_checkpoint_files_hold_exactly_the_documented_entries(extra, text_file, tmp_path):
    run = train(small_config(text_file, tmp_path / "run", steps=6, eval_every=3, save_every=3, **extra),
                progress=False, verbose=False)
    params, meta, arrays = load_checkpoint(run.checkpoint)  # the raw files, read without Snapshot
    assert set(meta) == set(META)
    assert meta["kind"] == KIND and meta["step"] == 6 and meta["train"] == run.config.to_dict()
    assert all(array_entry(name) is not None for name in arrays), sorted(arrays)
    assert {f"history.{key}" for key in HISTORY} <= set(arrays)
    np.testing.assert_array_equal(arrays["history.train_loss"], run.history["train_loss"])
    assert arrays["history.val_step"].dtype == np.int64 and arrays["history.val_step"].tolist() == [3, 6]
    assert ("ema.step" in arrays) == ("ema" in extra) and ("carry.c" in arrays) == (extra.get("cell") == "lstm")
    assert set(params) == set(run.model.params)

    # the load side reads back what the save side wrote, entry for entry
    snap = Snapshot.read(run.checkpoint)
    again_params, again_meta, again_arrays = snap.to_files()
    assert again_meta == meta
    assert again_arrays.keys() == arrays.keys() and again_params.keys() == params.keys()
    for key, value in {**arrays, **params}.items():
        got = again_arrays.get(key, again_params.get(key))
        assert got.dtype == value.dtype and got.tobytes() == value.tobytes(), key
    trained = load(run.out)
    assert trained.meta == meta and trained.arrays.keys() == arrays.keys()
    assert trained.run_dir == run.out and trained.step == 6


def test_a_checkpoint_of_another_kind_is_refused(tmp_path):
    save_checkpoint(tmp_path / "checkpoint", {"w": np.zeros(2)}, {"kind": "someone else", "step": 1})
    with pytest.raises(ValueError, match=r"must be written by hiddenstate.train \(kind 'hiddenstate.CharRNN'\); "
                                         r"got kind 'someone else'"):
        load(tmp_path)
    save_checkpoint(tmp_path / "checkpoint", {"w": np.zeros(2)}, {"kind": KIND, "step": 1})
    with pytest.raises(ValueError, match=r"must hold every entry of a run checkpoint; missing \['model', 'train'"):
        load(tmp_path)


# ------------------------------------------------------------------ one rule per setting
def test_dropout_rule_is_the_one_of_the_layers(text_file, tmp_path):
    # [0, 1), as drop_probability states it for the layers and the CLI (0.9 was the old, separate cap)
    assert check_config(TrainConfig(dropout=0.95, weight_drop=0.95)).dropout == 0.95
    with pytest.raises(ValueError, match=r"weight_drop must be a number in \[0, 1\); got 1.0"):
        check_config(TrainConfig(weight_drop=1.0))
    with pytest.raises(ValueError, match=r"dropout must be a number in \[0, 1\); got -0.1"):
        train(small_config(text_file, tmp_path / "r", dropout=-0.1), progress=False)


@pytest.mark.parametrize("overrides,error,match", [
    (dict(seed=-1), ValueError, "seed must be a non-negative integer; got -1"),
    (dict(embedding_dim=0), ValueError, "embedding_dim must be a positive integer; got 0"),
    (dict(lr_min_ratio=0.0), ValueError, r"lr_min_ratio must be a number in \(0, 1\]; got 0.0"),
    (dict(val_fraction=0.6), ValueError, r"val_fraction must be a number in \(0, 0.5\]; got 0.6"),
    (dict(ema=1.0), ValueError, r"ema must be a number in \(0, 1\); got 1.0"),
    (dict(max_minutes=0), ValueError, "max_minutes must be a finite number > 0; got 0"),
    (dict(clip=float("inf")), ValueError, "clip must be a finite number > 0; got inf"),
    (dict(num_layers=True), TypeError, "num_layers must be a positive integer; got bool True"),
    (dict(out=""), ValueError, "out must be a directory path; got ''"),
])
def test_every_field_has_its_rule(overrides, error, match):
    with pytest.raises(error, match=match):
        check_config(TrainConfig(**overrides))
    assert check_config(TrainConfig(ema=None, embedding_dim=None, max_minutes=None)).ema is None


def test_make_config_merges_a_resumed_run():
    saved = TrainConfig(hidden_size=24, steps=10, out="runs/a")
    cfg = make_config({"steps": 20}, saved=saved, out="runs/b")
    assert (cfg.hidden_size, cfg.steps, cfg.out) == (24, 20, "runs/b")
    assert make_config(TrainConfig(steps=30), saved=saved).steps == 30  # defaults do not count as given
    with pytest.raises(ValueError, match=r"--lr must match the checkpoint being resumed \(0.008\); got 0.1"):
        make_config({"lr": 0.1}, saved=saved)
    with pytest.raises(TypeError, match="config must be a TrainConfig, a dict or None; got list"):
        make_config([])


def test_sample_seed_rule(trained):
    with pytest.raises(ValueError, match="seed must be a non-negative integer; got -1"):
        sample(trained, length=5, seed=-1)
    with pytest.raises(TypeError, match="length must be a non-negative integer; got float 2.5"):
        sample(trained, length=2.5)


# ------------------------------------------------------------------ the log and the plot
def test_log_reading_keeps_the_steps_up_to_a_checkpoint(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "train_loss": 4.0}\nnot json\n{"step": 2, "train_loss": 3.5, "val_loss": 3.7}\n'
                   '[1, 2]\n{"no_step": 1}\n{"step": 3, "train_loss": 3.0}\n', encoding="utf-8")
    assert kept_log_lines(log, 2) == ['{"step": 1, "train_loss": 4.0}', '{"step": 2, "train_loss": 3.5, "val_loss": 3.7}']
    assert kept_log_lines(tmp_path / "missing.jsonl", 5) == []
    curves = read_history(log)
    np.testing.assert_array_equal(curves["train"][0], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(curves["train"][1], [4.0, 3.5, 3.0])
    np.testing.assert_array_equal(curves["validation"][0], [2.0])
    np.testing.assert_array_equal(curves["validation"][1], [3.7])
    assert read_history(tmp_path / "missing.jsonl") is None


def test_plot_history_draws_an_empty_and_a_short_history(tmp_path):
    empty = plot_history({"train_loss": [], "val_step": [], "val_loss": []}, tmp_path / "a" / "empty.png")
    short = plot_history({"train_loss": [4.1, 3.9, 3.0], "val_step": [3], "val_loss": [3.2]}, tmp_path / "short.png",
                         title="t", vocab_size=63)
    for path in (empty, short):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ nothing lost (issue 11)
def tree(path):
    """Every file under ``path``: relative name -> (bytes, mtime_ns)."""
    return {str(p.relative_to(path)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(path.rglob("*")) if p.is_file()}


def test_out_holding_a_run_is_refused_before_anything_is_touched(text_file, tmp_path):
    run = train(small_config(text_file, tmp_path / "run", steps=5, save_every=5), progress=False, verbose=False)
    before = tree(run.out)
    with pytest.raises(ValueError, match=r"--out '.*run' already holds a run \(checkpoint at step 5\); continue it "
                                         r"with `hiddenstate train --resume .*run`, replace it with --overwrite"):
        train(small_config(text_file, run.out, steps=3), progress=False)
    assert tree(run.out) == before
    # --overwrite replaces the run, and only the run: a file of the user's in it stays as it was
    (run.out / "notes.txt").write_text("mine", encoding="utf-8")
    mine = tree(run.out)["notes.txt"]
    again = train(small_config(text_file, run.out, steps=3, save_every=3), overwrite=True, progress=False,
                  verbose=False)
    assert load(again.out).step == 3 and len((again.out / "log.jsonl").read_text().splitlines()) == 3
    assert tree(run.out)["notes.txt"] == mine
    assert sorted(p.name for p in run.out.iterdir()) == ["checkpoint", "log.jsonl", "loss.png", "notes.txt"]


def test_out_with_other_files_is_refused_even_with_overwrite(text_file, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "log.jsonl").write_text("my own log\n", encoding="utf-8")
    (out / "loss.png").write_bytes(b"my own plot")
    before = tree(out)
    for overwrite in (False, True):
        with pytest.raises(ValueError, match=r"--out must be a new or empty directory, or a previous run; got "
                                             r"'.*mine', which holds 2 entries that are not a hiddenstate run "
                                             r"\(log.jsonl, loss.png\)"):
            train(small_config(text_file, out, steps=2), overwrite=overwrite, progress=False)
        assert tree(out) == before
    with pytest.raises(ValueError, match="out must be a directory; got .*, which is a file"):
        train(small_config(text_file, out / "log.jsonl", steps=2), progress=False)


def test_a_run_killed_before_its_first_checkpoint_starts_again(text_file, tmp_path):
    from hiddenstate.train.rundir.ownership import LOCK_FILE

    out = tmp_path / "killed"
    (out / ".checkpoint.saving-0123456789ab").mkdir(parents=True)  # a save the kill cut short
    (out / LOCK_FILE).write_text('{"pid": 999999999, "host": "elsewhere"}\n', encoding="utf-8")  # no flock: stale
    (out / "log.jsonl").write_text('{"step": 1, "train_loss": 4.1}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"--resume '.*killed' holds no checkpoint: the run there was stopped "
                                         r"before its first save\. Start it again with `hiddenstate train --out"):
        train(None, resume=out, progress=False)
    run = train(small_config(text_file, out, steps=2, save_every=2), progress=False, verbose=False)
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint", "log.jsonl", "loss.png"]
    assert len((run.out / "log.jsonl").read_text().splitlines()) == 2


def test_a_second_process_is_refused_naming_the_holder(text_file, tmp_path):
    import os
    import socket

    from hiddenstate.train.rundir.ownership import RunLock

    first = train(small_config(text_file, tmp_path / "run", steps=4, save_every=2), progress=False, verbose=False)
    holder = rf"is in use by another training process \(pid {os.getpid()} on {socket.gethostname()}, since "
    with RunLock(first.out).acquire("train"):  # what a running `hiddenstate train` holds
        with pytest.raises(ValueError, match="--resume '.*run' " + holder):
            train({"steps": 6}, resume=first.out, progress=False)
        with pytest.raises(ValueError, match="--out '.*run' " + holder):
            train(small_config(text_file, first.out, steps=2), overwrite=True, progress=False)
        with pytest.raises(ValueError, match="--resume '.*run' " + holder):  # resuming into another directory
            train({"steps": 6, "out": str(tmp_path / "copy")}, resume=first.out, progress=False)
        assert not (tmp_path / "copy").exists()
    assert train({"steps": 6}, resume=first.out, progress=False, verbose=False).step == 6
    assert not (first.out / ".hiddenstate.lock").exists()  # released at the end


def test_resume_refuses_a_log_whose_steps_repeat(text_file, tmp_path):
    run = train(small_config(text_file, tmp_path / "run", steps=6, save_every=3), progress=False, verbose=False)
    log = run.out / "log.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:4] + lines[2:]) + "\n", encoding="utf-8")  # two writers interleaved
    before = tree(run.out)
    with pytest.raises(ValueError, match=r"log.jsonl' must list each step once, in order; got step 3 after step 4\. "
                                         r"Two processes wrote to this run"):
        train({"steps": 8}, resume=run.out, progress=False)
    assert tree(run.out) == before


@pytest.mark.parametrize("signame,status", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_saves_the_current_step_and_the_run_resumes_exactly(signame, status, text_file, tmp_path):
    import os
    import signal

    from hiddenstate.train.guards import TrainingInterrupted

    whole = train(small_config(text_file, tmp_path / "whole", steps=12, save_every=5), progress=False, verbose=False)
    sig = getattr(signal, signame)

    def signal_at_step_3(record):  # before the first checkpoint (save_every 5)
        if record["step"] == 3:
            os.kill(os.getpid(), sig)

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(TrainingInterrupted) as info:
        train(small_config(text_file, tmp_path / "parts", steps=12, save_every=5), progress=False,
              verbose=False, callback=signal_at_step_3)
    assert (info.value.signum, info.value.step, info.value.saved, info.value.exit_status) == (sig, 3, True, status)
    assert isinstance(info.value, KeyboardInterrupt)
    assert str(info.value) == f"interrupted by {signame}: saved the checkpoint of step 3 in '{tmp_path / 'parts' / 'checkpoint'}'"
    assert load(tmp_path / "parts").step == 3
    assert {s: signal.getsignal(s) for s in handlers} == handlers  # the caller's handlers are back
    resumed = train(None, resume=tmp_path / "parts", progress=False, verbose=False)
    for key in ("train_loss", "grad_norm", "val_step", "val_loss"):
        np.testing.assert_array_equal(resumed.history[key], whole.history[key], err_msg=key)
    for key, value in whole.model.params.items():
        assert resumed.model.params[key].tobytes() == value.tobytes(), key


def test_a_second_signal_stops_at_once_and_says_which_checkpoint_is_intact(text_file, tmp_path):
    import os
    import signal

    from hiddenstate.train.guards import TrainingInterrupted

    def twice_at_step_7(record):
        if record["step"] == 7:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # raises KeyboardInterrupt here, inside the step

    with pytest.raises(TrainingInterrupted) as info:
        train(small_config(text_file, tmp_path / "run", steps=12, save_every=5), progress=False, verbose=False,
              callback=twice_at_step_7)
    assert (info.value.step, info.value.saved) == (5, False)
    assert "stopped at once; the checkpoint of step 5 in" in str(info.value) and load(tmp_path / "run").step == 5

    def twice_at_step_2(record):
        if record["step"] == 2:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(TrainingInterrupted, match="stopped at once; no checkpoint was saved"):
        train(small_config(text_file, tmp_path / "new", steps=12, save_every=5), progress=False, verbose=False,
              callback=twice_at_step_2)
    assert not (tmp_path / "new").exists()  # nothing saved: nothing left behind


@pytest.mark.parametrize("overrides,match", [
    (dict(lr=1e4, clip=1e9), r"training diverged at step 2: the training loss reached [\d.]+ nats/char \(a uniform "
                             r"guess scores 4\.\d\d\)\. Lower the learning rate \(--lr, now 10000\) or the gradient "
                             r"clipping norm \(--clip, now 1e\+09\)\. The checkpoint of step 1 in '.*' is intact"),
    (dict(lr=1e308), r"training diverged at step 1: the training step hit a floating-point error \((overflow|invalid "
                     r"value) encountered in .*\)\. Lower the learning rate \(--lr, now 1e\+308\) or the gradient "
                     r"clipping norm \(--clip, now 5\)\. No checkpoint was saved\.$"),
])
def test_a_diverging_run_stops_and_keeps_the_last_good_checkpoint(overrides, match, text_file, tmp_path):
    from hiddenstate.train.guards import TrainingDiverged

    config = small_config(text_file, tmp_path / "run", steps=20, save_every=1, **overrides)
    with pytest.raises(TrainingDiverged, match=match) as info:
        train(config, progress=False, verbose=False)
    assert isinstance(info.value, FloatingPointError)
    if info.value.checkpoint_step is None:  # diverged at the first step: nothing saved, nothing left behind
        assert not (tmp_path / "run").exists()
        return
    assert info.value.checkpoint_step == 1
    good = load(tmp_path / "run")  # the last good checkpoint loads (weights finite)
    assert good.step == 1 and all(np.isfinite(p).all() for p in good.model.params.values())


def test_degenerate_texts_are_refused(tmp_path):
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"\x00" * 5000)
    with pytest.raises(ValueError, match=r"data must hold at least 2 distinct characters; got 1 \('\\x00'\) in "
                                         r"'.*nul.txt': there is nothing to predict"):
        train({"data": str(nul), "out": str(tmp_path / "r")}, progress=False)
    assert not (tmp_path / "r").exists()


def test_a_resumed_run_gets_a_new_time_budget(text_file, tmp_path, capsys):
    import time

    def slow_step_2(record):
        if record["step"] == 2:
            time.sleep(1.3)

    # 0.02 minutes = 1.2 s: the slow step uses it up (the limit is checked after the next step)
    config = small_config(text_file, tmp_path / "run", steps=20, max_minutes=0.02, eval_every=100)
    first = train(config, progress=False, verbose=False, callback=slow_step_2)
    assert first.stopped == "time" and first.step == 3
    # the run has spent more than its limit already; the resumed part has a budget of its own
    resumed = train(None, resume=first.out, progress=False, verbose=True)
    assert resumed.stopped == "steps" and resumed.step == 20
    assert resumed.seconds > 1.3  # the run's own clock still counts every part
    assert capsys.readouterr().out.splitlines()[0] == (
        f"resuming '{first.out}' at step 3 of 20; --max-minutes 0.02: a new time budget for this part")


def test_a_full_disk_names_the_file_and_the_checkpoint_that_survived(text_file, tmp_path, monkeypatch):
    import errno

    calls = []
    save = Snapshot.save

    def fills_the_disk(self, directory):
        calls.append(self.step)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return save(self, directory)

    monkeypatch.setattr(Snapshot, "save", fills_the_disk)
    with pytest.raises(OSError, match=r"^No space left on device while saving the checkpoint of step 10 to '.*run/"
                                      r"checkpoint'; the checkpoint of step 5 in '.*' is intact\.$") as info:
        train(small_config(text_file, tmp_path / "run", steps=20, save_every=5), progress=False, verbose=False)
    assert info.value.errno == errno.ENOSPC
    assert load(tmp_path / "run").step == 5


def test_a_loss_plot_that_cannot_be_written_is_a_warning(text_file, tmp_path, monkeypatch):
    import errno

    from hiddenstate.train import loop

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(loop, "plot_history", no_space)
    with pytest.warns(UserWarning, match=r"could not write the loss plot '.*loss.png' \(\[Errno 28\] No space left "
                                         r"on device\); the run is complete and its checkpoint of step 4 is saved"):
        run = train(small_config(text_file, tmp_path / "run", steps=4), progress=False, verbose=False)
    assert run.plot is None and load(run.out).step == 4


def test_sizes_that_cannot_fit_in_memory_are_refused_up_front(text_file, tmp_path, trained):
    with pytest.raises(ValueError, match=r"training a GRU of --hidden-size 1000000000 x --num-layers 1 "
                                         r"\(3,000,000,\d+,\d+,\d+,\d+ parameters\) needs about .* of memory; this "
                                         r"machine allows .*\. Lower --hidden-size"):
        train(small_config(text_file, tmp_path / "big", hidden_size=10**9), progress=False)
    assert not (tmp_path / "big").exists()
    with pytest.raises(ValueError, match=r"length 1000000000000 needs about .* TiB of memory"):
        sample(trained, length=10**12)


def test_the_data_path_is_recorded_absolute_and_old_relative_ones_are_found(text_file, tmp_path, monkeypatch):
    import shutil

    from hiddenstate.train.rundir import training_text_path

    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    shutil.copy(text_file, home / "small.txt")
    monkeypatch.chdir(home)
    run = train(small_config("small.txt", "runs/rel", steps=2), progress=False, verbose=False)
    assert run.config.data == str(home / "small.txt")
    assert load(home / "runs" / "rel").config.data == str(home / "small.txt")
    monkeypatch.chdir(tmp_path)
    # an older run recorded "small.txt" as typed, relative to the folder it was trained in
    old = TrainConfig(data="small.txt", out="runs/rel")
    assert training_text_path(old, home / "runs" / "rel") == str(home / "small.txt")
    assert training_text_path(old, tmp_path / "elsewhere") == "small.txt"  # not found: left as recorded


def test_resuming_a_finished_run_is_one_line_and_changes_nothing(tmp_path, capsys):
    from hiddenstate.cli import main

    run = tmp_path / "run"
    assert main(["train", "--hidden-size", "8", "--steps", "3", "--seq-len", "8", "--batch-size", "2", "--quiet",
                 "--out", str(run)]) == 0
    before = {p.name: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    val = json.loads((run / "log.jsonl").read_text().splitlines()[-1])["val_loss"]
    capsys.readouterr()
    assert main(["train", "--resume", str(run)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"'{run}' is finished: step 3 of 3, validation loss {val:.4f} nats/char; nothing to "
                                f"train (add steps: --resume {run} --steps S)."]
    assert err == ""
    assert {p.name: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()} == before
