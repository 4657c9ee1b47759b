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


def test_one_step_is_one_step_and_the_bar_shows_no_placeholder_speed(text_file, tmp_path, capsys):
    assert main(["train", "--data", str(text_file), "--steps", "1", "--out", str(tmp_path / "r"), *TINY]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.endswith(" s") and " after 1 step, " in last, last
    from hiddenstate.train import TrainConfig
    from hiddenstate.train.steps import Progress

    cfg = TrainConfig(hidden_size=4, seq_len=16, batch_size=8, steps=10)
    progress = Progress(cfg, 0, bar=True, verbose=False, budget_s=None)
    history = {"train_loss": [2.0]}
    try:
        progress.stepped(history, None, 0.0)  # before the first 2-second window: no speed yet
        assert "loss=2.000" in progress.bar.postfix and "chars/s" not in progress.bar.postfix, progress.bar.postfix
        progress.window_t -= 4.0  # the window has now lasted about 4 s, over 2 steps of 8 x 16 characters
        progress.stepped(history, None, 0.0)
        speed = float(progress.bar.postfix.split("chars/s=")[1].split(",")[0].replace(",", ""))
        assert 2 * 8 * 16 / 4.5 < speed <= 2 * 8 * 16 / 4.0, progress.bar.postfix
    finally:
        progress.close()
    capsys.readouterr()


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
     ["--batch-size x (--seq-len + 1) = 100000 x 65 = 6500000 characters", "got 18000"]),
    (lambda d, t, r: ["train", "--resume", str(t / "nowhere")], ["does not exist"]),
    (lambda d, t, r: ["train", "--resume", str(r), "--hidden-size", "99"], ["--hidden-size must match"]),
    (lambda d, t, r: ["train", "--resume", str(r), "--preset", "long"], ["--preset cannot be combined"]),
    (lambda d, t, r: ["sample", str(t / "missing")], ["does not exist"]),
    (lambda d, t, r: ["sample", str(t / "empty.txt")], ["which is a file"]),
    (lambda d, t, r: ["sample", str(t)], ["holds no checkpoint"]),
    (lambda d, t, r: ["sample", str(r), "--prime", "€x"], ["prime must only use characters", "'€'"]),
    (lambda d, t, r: ["sample", str(r), "--prime", ""], ["prime must hold at least one character"]),
    (lambda d, t, r: ["inspect", str(t / "missing")], ["does not exist"]),
    (lambda d, t, r: ["reproduce", "no-such-paper"], ["NAME must be one of"]),
])
def test_user_errors_are_one_line_and_exit_2(make_argv, needles, text_file, run_dir, tmp_path, capsys):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    assert run_main(make_argv(text_file, tmp_path, run_dir)) == 2
    assert_one_line_error(capsys, *needles)


@pytest.mark.parametrize("argv,needle", [
    (["train", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
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


# ------------------------------------------------------------------ nothing lost, nothing misleading (issue 11)
def tree(path):
    return {str(p.relative_to(path)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(path.rglob("*")) if p.is_file()}


def copy_run(run_dir, tmp_path, name="copy"):
    import shutil

    return shutil.copytree(run_dir, tmp_path / name)


def test_train_onto_a_run_is_refused_and_overwrite_keeps_other_files(run_dir, text_file, tmp_path, capsys):
    copy = copy_run(run_dir, tmp_path)
    (copy / "notes.txt").write_text("mine", encoding="utf-8")
    before = tree(copy)
    assert main(["train", "--data", str(text_file), "--steps", "3", "--out", str(copy), *TINY]) == 2
    assert_one_line_error(capsys, f"--out '{copy}' already holds a run (checkpoint at step 10); continue it with "
                                  f"`hiddenstate train --resume {copy}`, replace it with --overwrite, or choose another --out.")
    assert tree(copy) == before
    assert main(["train", "--data", str(text_file), "--steps", "3", "--out", str(copy), "--overwrite", *TINY]) == 0
    assert json.loads((copy / "checkpoint" / "meta.json").read_text())["meta"]["step"] == 3
    assert tree(copy)["notes.txt"] == before["notes.txt"]


def test_train_into_a_folder_of_other_files_is_refused(text_file, tmp_path, capsys):
    folder = tmp_path / "papers"
    folder.mkdir()
    (folder / "log.jsonl").write_text("mine\n", encoding="utf-8")
    before = tree(folder)
    for extra in ([], ["--overwrite"]):
        assert main(["train", "--data", str(text_file), "--out", str(folder), *extra, *TINY]) == 2
        assert_one_line_error(capsys, "--out must be a new or empty directory, or a previous run; got",
                              "which holds 1 entry that is not a hiddenstate run (log.jsonl)", "Choose another --out.")
        assert tree(folder) == before


def test_a_second_train_on_one_directory_exits_2_naming_the_holder(run_dir, tmp_path, capsys):
    import socket

    from hiddenstate.train.rundir.ownership import RunLock

    copy = copy_run(run_dir, tmp_path)
    with RunLock(copy).acquire("train"):
        assert main(["train", "--resume", str(copy), "--steps", "12", "--quiet"]) == 2
        assert_one_line_error(capsys, f"--resume '{copy}' is in use by another training process (pid {os.getpid()} "
                                      f"on {socket.gethostname()}, since ")


def test_interrupted_train_saves_the_step_and_says_so(text_file, tmp_path, monkeypatch, capsys):
    import signal

    import hiddenstate.train
    from hiddenstate.train import loop

    def sigterm_at_step_4(record):
        if record["step"] == 4:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(hiddenstate.train, "train", lambda config, **kw: loop.train(config, callback=sigterm_at_step_4, **kw))
    out = tmp_path / "r"
    assert main(["train", "--data", str(text_file), "--steps", "10", "--out", str(out), *TINY]) == 143
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"hiddenstate: interrupted by SIGTERM: saved the checkpoint of step 4 in '{out / 'checkpoint'}'; "
                   f"continue with `hiddenstate train --resume {out}`"]
    assert json.loads((out / "checkpoint" / "meta.json").read_text())["meta"]["step"] == 4


def test_an_interrupt_elsewhere_does_not_talk_about_checkpoints(monkeypatch, capsys):
    from hiddenstate.experiments import reproduce

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(reproduce, "run", interrupted)
    assert main(["reproduce", "elman-xor", "--quick"]) == 130
    assert capsys.readouterr().err == "hiddenstate: interrupted\n"


def test_a_diverging_run_exits_1_naming_the_flags(text_file, tmp_path, capsys):
    out = tmp_path / "r"
    argv = ["train", "--data", str(text_file), "--steps", "20", "--lr", "1e4", "--clip", "1e9", "--save-every", "1",
            "--out", str(out), *TINY]
    assert main(argv) == 1
    line = assert_one_line_error(capsys, "training diverged at step 2: the training loss reached",
                                 "(--lr, now 10000)", "(--clip, now 1e+09)", "The checkpoint of step 1 in")
    assert "validation loss" not in line
    assert json.loads((out / "checkpoint" / "meta.json").read_text())["meta"]["step"] == 1


@pytest.mark.parametrize("make_argv,needles", [
    (lambda d, t, r: ["train", "--data", str(t / "missing.txt"), "--out", str(t / "o")],
     ["--data must name an existing text file; got", "give none for the embedded Shakespeare corpus"]),
    (lambda d, t, r: ["train", "--data", str(t / "nul.txt"), "--out", str(t / "o"), *TINY],
     ["--data must hold at least 2 distinct characters; got 1 ('\\x00')"]),
    (lambda d, t, r: ["train", "--data", str(t / "short.txt"), "--out", str(t / "o"), *TINY],
     ["the training text must hold at least --batch-size x (--seq-len + 1) = 8 x 17 = 136 characters", "got 85 (of the 95 characters of"]),
    (lambda d, t, r: ["train", "--hidden-size", "1000000000", "--out", str(t / "o"), "--quiet"],
     ["training a GRU of --hidden-size 1000000000 x --num-layers 1", "of memory; this machine allows"]),
    (lambda d, t, r: ["sample", str(r), "--length", "1000000000000"],
     ["--length 1000000000000 needs about", "TiB of memory; this machine allows", "Use a smaller --length."]),
    (lambda d, t, r: ["sample", str(r), "--prime", "€x"], ["--prime must only use characters", "'€'"]),
    (lambda d, t, r: ["inspect", str(r), "--text", str(t / "missing.txt")], ["--text must name an existing text file"]),
    (lambda d, t, r: ["inspect", str(r), "--out", str(t)], ["--out must name an HTML file; got", "which is a directory"]),
    (lambda d, t, r: ["inspect", str(r), "--out", str(t / "short.txt")],
     ["--out must be a new file or a previous hiddenstate report; got", "(nothing was written)"]),
    (lambda d, t, r: ["inspect", str(r), "--out", str(t / "dir_nothere") + os.sep],
     ["--out must name an HTML file; got", "ends in a path separator", "Give a file name"]),
    (lambda d, t, r: ["inspect", str(r), "--out", str(t / "nonexistent" / "dir" / "r.html")],
     ["--out must lie in an existing directory", "nonexistent"]),
    (lambda d, t, r: ["train", "--resume", str(r), "--overwrite"], ["--overwrite cannot be combined with --resume"]),
])
def test_errors_name_the_flag_the_user_typed(make_argv, needles, text_file, run_dir, tmp_path, capsys):
    import time

    (tmp_path / "nul.txt").write_bytes(b"\x00" * 3000)
    (tmp_path / "short.txt").write_text("to be or not to be " * 5, encoding="utf-8")
    before = tree(tmp_path)
    start = time.perf_counter()
    assert run_main(make_argv(text_file, tmp_path, run_dir)) == 2
    assert time.perf_counter() - start < 10  # refused up front, not after the work
    assert_one_line_error(capsys, *needles)
    assert tree(tmp_path) == before and not (tmp_path / "o").exists()


@pytest.mark.parametrize("error,status,needle", [
    (MemoryError(), 1, "hiddenstate: error: out of memory (MemoryError)."),
    (RecursionError("maximum recursion depth exceeded"), 2, "hiddenstate: error: an input nests too deeply"),
    (KeyError("vocab"), 2, "hiddenstate: error: a required entry is missing: 'vocab'"),
    (RuntimeError("boom"), 1, "hiddenstate: internal error: RuntimeError: boom (set HIDDENSTATE_DEBUG=1"),
])
def test_no_traceback_at_the_cli_boundary(error, status, needle, run_dir, monkeypatch, capsys):
    import hiddenstate.train

    def fails(*args, **kwargs):
        raise error

    monkeypatch.setattr(hiddenstate.train, "load", fails)
    assert main(["sample", str(run_dir)]) == status
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(needle), err


def test_a_full_disk_is_one_line_naming_the_file_and_the_surviving_checkpoint(text_file, tmp_path, monkeypatch,
                                                                              capsys):
    import errno

    from hiddenstate.train.rundir.snapshot import Snapshot

    save, calls = Snapshot.save, []

    def fills_the_disk(self, directory):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return save(self, directory)

    monkeypatch.setattr(Snapshot, "save", fills_the_disk)
    out = tmp_path / "r"
    assert main(["train", "--data", str(text_file), "--steps", "10", "--save-every", "5", "--out", str(out), *TINY]) == 1
    assert_one_line_error(capsys, f"No space left on device while saving the checkpoint of step 10 to "
                                  f"'{out / 'checkpoint'}'; the checkpoint of step 5 in '{out / 'checkpoint'}' is intact.")


def test_a_loss_plot_that_cannot_be_written_is_a_warning_not_a_failed_run(text_file, tmp_path, monkeypatch, capsys):
    from hiddenstate.train import loop

    def broken(*args, **kwargs):
        raise RuntimeError("the font cache is unreadable")

    monkeypatch.setattr(loop, "plot_history", broken)
    assert main(["train", "--data", str(text_file), "--steps", "3", "--out", str(tmp_path / "r"), *TINY]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"hiddenstate: warning: could not write the loss plot '{tmp_path / 'r' / 'loss.png'}' "
                                         "(the font cache is unreadable); the run is complete and its checkpoint of "
                                         "step 3 is saved."]
    assert "loss curve" not in captured.out and captured.out.strip().splitlines()[-1].startswith("validation loss: ")


def test_inspect_works_from_another_folder_and_counts_what_it_dropped(text_file, tmp_path, monkeypatch, capsys):
    import shutil

    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    shutil.copy(text_file, home / "small.txt")
    monkeypatch.chdir(home)
    assert main(["train", "--data", "small.txt", "--steps", "2", "--out", "runs/rel", *TINY]) == 0
    monkeypatch.chdir(elsewhere)
    (elsewhere / "mine.txt").write_text("ROMEO: my lov\u00e9, my \u20acuro\n" * 20, encoding="utf-8")
    capsys.readouterr()
    assert main(["inspect", str(home / "runs" / "rel"), "--out", "r.html", "--text", "mine.txt"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "text: dropped 40 characters outside the model's vocabulary ('é', '€'); the report says so too"
    page = (elsewhere / "r.html").read_text(encoding="utf-8")
    assert "(40 characters outside the vocabulary dropped)" in page and "characters dropped" in page
    assert main(["inspect", str(home / "runs" / "rel"), "--out", "r.html"]) == 0  # its validation text, found
    assert "validation text" in (elsewhere / "r.html").read_text(encoding="utf-8")  # a previous report is replaced


def test_inspect_fixed_point_starts_reaches_the_search_of_a_run(run_dir, tmp_path, capsys):
    assert main(["inspect", str(run_dir), "--fixed-point-starts", "2", "--out", str(tmp_path / "a.html")]) == 0
    page = (tmp_path / "a.html").read_text(encoding="utf-8")
    assert 'id="fixed"' in page and "from 2 starts" in page
    assert main(["inspect", str(run_dir), "--fixed-point-starts", "0", "--out", str(tmp_path / "b.html")]) == 0
    assert 'id="fixed"' not in (tmp_path / "b.html").read_text(encoding="utf-8")
    assert capsys.readouterr().out.splitlines()[-1] == f"report: {tmp_path / 'b.html'}"


def test_inspect_of_an_old_run_with_a_relative_data_path_says_what_to_do(run_dir, tmp_path, monkeypatch):
    import dataclasses

    from hiddenstate.pipelines.app import inspected_text
    from hiddenstate.train import load

    trained = load(run_dir)
    old = dataclasses.replace(trained, config=dataclasses.replace(trained.config, data="small.txt", out="runs/x"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"the run's training text 'small.txt' was recorded relative to the "
                                                r"folder it was trained in, and is not found from here\. Run inspect "
                                                r"from that folder, or pass --text FILE\."):
        inspected_text(old)


def test_demo_replaces_its_own_previous_run_but_no_other(text_file, tmp_path, capsys):
    from hiddenstate.cli import _is_demo_run
    from hiddenstate.train import TrainConfig, train
    from hiddenstate.train.rundir.ownership import describe

    demo = tmp_path / "demo"
    train({"steps": 1, "max_minutes": 3.0, "out": str(demo), "eval_every": 1}, progress=False, verbose=False)
    other = tmp_path / "other"
    train(TrainConfig(data=str(text_file), hidden_size=16, steps=1, out=str(other)), progress=False, verbose=False)
    assert _is_demo_run(describe(demo)) and not _is_demo_run(describe(other))
    assert main(["demo", "--out", str(other), "--steps", "1", "--quiet"]) == 2
    assert_one_line_error(capsys, f"--out '{other}' already holds a run (checkpoint at step 1)")


@pytest.mark.parametrize("cell", ["mingru", "minlstm"])
def test_train_sample_and_inspect_a_model_of_linear_recurrences(cell, text_file, tmp_path, capsys):
    out = tmp_path / cell
    assert main(["train", "--data", str(text_file), "--cell", cell, "--num-layers", "2", "--steps", "4",
                 "--out", str(out), *TINY]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("validation loss: ")
    meta = json.loads((out / "checkpoint" / "meta.json").read_text())
    assert cell in json.dumps(meta)
    assert main(["sample", str(out), "--length", "30", "--seed", "1"]) == 0
    assert len(capsys.readouterr().out) >= 30
    assert main(["inspect", str(out), "--out", str(tmp_path / "report.html")]) == 0
    assert (tmp_path / "report.html").stat().st_size > 10_000
    capsys.readouterr()
    for fmt in ("onnx", "torch"):
        assert main(["export", str(out), "--format", fmt, "--out", str(tmp_path / "m.bin")]) == 2
        line = assert_one_line_error(capsys, f"a {cell} run cannot be exported as {fmt}",
                                     str(out / "checkpoint" / "model.safetensors"), "`hiddenstate sample`")
        assert "save_safetensors" not in line
        assert not (tmp_path / "m.bin").exists()
    argv = ["train", "--data", str(text_file), "--cell", cell, "--weight-drop", "0.2", "--out", str(tmp_path / "w"),
            *TINY]
    assert run_main(argv) == 2
    assert_one_line_error(capsys, f"--weight-drop must be 0 for cell='{cell}', which has no recurrent weights")


def test_readme_examples_never_write_where_another_examples_results_live():
    import re

    from hiddenstate.train import PRESETS, TrainConfig
    from tests import _docs

    readme = _docs.text()  # the README and the docs pages
    written = []  # (destination, the example that writes it)
    for line in re.findall(r"^hiddenstate (?:train|demo|inspect)\b.*$", readme, flags=re.M):
        line = line.split("  #")[0].strip()
        if "--resume" in line:
            continue  # continues the run in its own directory
        out = re.search(r"--out (\S+)", line)
        if out:
            written.append((out.group(1), line))
        elif line.startswith("hiddenstate train"):
            preset = re.search(r"--preset (\S+)", line)
            written.append((PRESETS.get(preset.group(1) if preset else "", {}).get("out", TrainConfig().out), line))
        elif line.startswith("hiddenstate demo"):
            written.append(("runs/demo", line))
    written.append(("runs/demo", "make demo"))
    for block in re.findall(r"```python\n(.*?)```", readme, flags=re.S):  # files the Python examples save
        written += [(path, "python: " + path) for path in
                    re.findall(r"(?:save_checkpoint|save_safetensors|to_onnx|charrnn_to_onnx)\([^\"]*\"([^\"]+)\"", block)]
    runs = {path for path, example in written if example.startswith(("hiddenstate train", "make demo"))}
    seen = {}
    for path, example in written:
        inside = [run for run in runs if path != run and path.startswith(run + "/")]
        # a run's own report next to it is fine; anything else inside a run, or written twice, is not
        assert all(example.startswith("hiddenstate inspect " + run) for run in inside), (path, example)
        assert seen.setdefault(path, example) == example, (path, example, seen[path])
    assert "runs/example-checkpoint" in seen and len(written) >= 8
