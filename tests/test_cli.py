"""The command line: it trains, samples and resumes; every user error is one line on stderr and exit 2."""
import json
import os
import subprocess
import sys

import pytest

from hiddenstate.cli import main
from hiddenstate.train.corpus import load_text

TINY = ["--hidden-size", "16", "--seq-len", "16", "--batch-size", "8", "--eval-every", "5", "--quiet"]


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "small.txt"
    path.write_text(load_text()[:20_000], encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def run_dir(text_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "tiny"
    assert main(["train", "--data", str(text_file), "--steps", "10", "--out", str(out), *TINY]) == 0
    return out


def assert_one_line_error(capsys, *needles):
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("hiddenstate"), lines[0]
    assert ": error: " in lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def run_main(argv):
    """main(argv) -> exit status, whether argparse exits (SystemExit) or main returns."""
    try:
        return main(argv)
    except SystemExit as exit_:
        return exit_.code


def test_train_prints_where_everything_went_and_the_validation_loss(run_dir, capsys):
    assert (run_dir / "checkpoint" / "meta.json").is_file()
    assert (run_dir / "loss.png").is_file()
    assert len((run_dir / "log.jsonl").read_text().splitlines()) == 10


def test_train_output_last_line_is_the_validation_loss(text_file, tmp_path, capsys):
    assert main(["train", "--data", str(text_file), "--steps", "3", "--out", str(tmp_path / "r"), *TINY]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("validation loss: ") and "nats/char" in last and "bits/char" in last


def test_sample_is_reproducible(run_dir, capsys):
    argv = ["sample", str(run_dir), "--prime", "KING:", "--length", "80", "--seed", "5"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first
    assert first.startswith("KING:") and len(first.rstrip("\n")) >= 80
    assert main([*argv[:-1], "6"]) == 0
    assert capsys.readouterr().out != first


def test_resume_continues_the_run(run_dir, tmp_path, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    assert main(["train", "--resume", str(copy), "--steps", "12", "--quiet"]) == 0
    assert "after 12 steps" in capsys.readouterr().out
    records = [json.loads(line) for line in (copy / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, 13))


@pytest.mark.parametrize("make_argv,needles", [
    (lambda d, t, r: ["train", "--data", str(t / "missing.txt"), "--out", str(t / "o")], ["does not exist"]),
    (lambda d, t, r: ["train", "--data", str(t / "empty.txt"), "--out", str(t / "o")], ["empty"]),
    (lambda d, t, r: ["train", "--data", str(t), "--out", str(t / "o")], ["is a directory"]),
    (lambda d, t, r: ["train", "--data", str(t / "latin1.txt"), "--out", str(t / "o")], ["not valid UTF-8"]),
    (lambda d, t, r: ["train", "--data", str(d), "--out", str(t / "empty.txt"), "--steps", "1", *TINY],
     ["out must be a directory"]),
    (lambda d, t, r: ["train", "--data", str(d), "--batch-size", "100000", "--out", str(t / "o")],
     ["batch_size"]),
    (lambda d, t, r: ["train", "--resume", str(t / "nowhere")], ["does not exist"]),
    (lambda d, t, r: ["train", "--resume", str(r), "--hidden-size", "99"], ["--hidden-size must match"]),
    (lambda d, t, r: ["train", "--resume", str(r), "--preset", "long"], ["--preset cannot be combined"]),
    (lambda d, t, r: ["sample", str(t / "missing")], ["does not exist"]),
    (lambda d, t, r: ["sample", str(t / "empty.txt")], ["which is a file"]),
    (lambda d, t, r: ["sample", str(t)], ["holds no checkpoint"]),
    (lambda d, t, r: ["sample", str(r), "--prime", "€x"], ["prime must only use characters", "'€'"]),
    (lambda d, t, r: ["sample", str(r), "--prime", ""], ["prime must hold at least one character"]),
    (lambda d, t, r: ["inspect", str(t / "missing")], ["does not exist"]),
    (lambda d, t, r: ["reproduce", "no-such-paper"], ["name must be one of"]),
])
def test_user_errors_are_one_line_and_exit_2(make_argv, needles, text_file, run_dir, tmp_path, capsys):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    assert run_main(make_argv(text_file, tmp_path, run_dir)) == 2
    assert_one_line_error(capsys, *needles)


@pytest.mark.parametrize("argv,needle", [
    (["train", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["sample"], "the following arguments are required: CKPT"),
    (["train", "--steps", "0"], "--steps: must be a positive integer; got 0"),
    (["train", "--lr", "fast"], "--lr: must be a number; got str 'fast'"),
    (["train", "--cell", "transformer"], "invalid choice: 'transformer'"),
    (["train", "--dtype", "float16"], "invalid choice: 'float16'"),
    (["sample", "x", "--temperature", "-1"], "--temperature: must be a finite number >= 0"),
    (["train", "--weight-drop", "1.0"], "--weight-drop: must be a number in [0, 1); got 1.0"),
    (["train", "--ema", "1"], "--ema: must be a number in (0, 1); got 1.0"),
    # every flag of a setting converts its text and then applies that setting's one rule
    (["train", "--steps", "ten"], "--steps: must be a positive integer; got str 'ten'"),
    (["train", "--seq-len", "2.5"], "--seq-len: must be a positive integer; got str '2.5'"),
    (["train", "--seed", "-3"], "--seed: must be a non-negative integer; got -3"),
    (["train", "--dropout", "-0.1"], "--dropout: must be a number in [0, 1); got -0.1"),
    (["train", "--max-minutes", "0"], "--max-minutes: must be a finite number > 0; got 0.0"),
    (["train", "--clip", "nan"], "--clip: must be a finite number > 0; got nan"),
    (["demo", "--steps", "0"], "--steps: must be a positive integer; got 0"),
    (["sample", "x", "--length", "-1"], "--length: must be a non-negative integer; got -1"),
    (["sample", "x", "--seed", "-1"], "--seed: must be a non-negative integer; got -1"),
    (["fly"], "invalid choice: 'fly'"),
    ([], "the following arguments are required: COMMAND"),
])
def test_usage_errors_are_one_line_and_exit_2(argv, needle, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert_one_line_error(capsys, needle)


def test_corrupt_checkpoint_is_one_line_and_exit_2(run_dir, tmp_path, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    (copy / "checkpoint" / "model.safetensors").write_bytes(b"garbage")
    assert main(["sample", str(copy)]) == 2
    assert_one_line_error(capsys, "model.safetensors")


def test_subprocess_entry_point(run_dir, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    bad = subprocess.run([sys.executable, "-m", "hiddenstate", "sample", str(tmp_path / "nope")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("hiddenstate: error: checkpoint")
    assert "Traceback" not in bad.stderr
    good = subprocess.run([sys.executable, "-m", "hiddenstate", "sample", str(run_dir), "--length", "30",
                           "--seed", "1"], capture_output=True, text=True, env=env, timeout=120)
    assert good.returncode == 0, good.stderr
    assert len(good.stdout.strip("\n")) >= 30


def test_thread_count_variable_uses_the_positive_integer_rule(run_dir, monkeypatch, capsys):
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HIDDENSTATE_NUM_THREADS", "0")
    assert main(["sample", str(run_dir), "--length", "5"]) == 2
    assert_one_line_error(capsys, "HIDDENSTATE_NUM_THREADS must be a positive integer; got 0.")
    monkeypatch.setenv("HIDDENSTATE_NUM_THREADS", "two")
    assert main(["sample", str(run_dir), "--length", "5"]) == 2
    assert_one_line_error(capsys, "HIDDENSTATE_NUM_THREADS must be a positive integer; got str 'two'.")


def test_flags_accept_what_the_rules_accept(text_file, tmp_path, capsys):
    # 0.95 was refused by the CLI's own [0, 0.9] cap; the one rule is [0, 1)
    out = tmp_path / "r"
    assert main(["train", "--data", str(text_file), "--steps", "2", "--dropout", "0.95", "--weight-drop", "0.95",
                 "--out", str(out), *TINY]) == 0
    config = json.loads((out / "checkpoint" / "meta.json").read_text())["meta"]["train"]
    assert config["dropout"] == 0.95 and config["weight_drop"] == 0.95
