"""Fault injection: `hiddenstate train` killed at random points (SIGKILL, SIGINT, SIGTERM, during saves
too) and resumed each time ends bit for bit where the run that never stopped ends, and never changes
a file of the user's in its run directory."""
import collections
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from hiddenstate.cli import main
from hiddenstate.train import load, sample
from hiddenstate.train.corpus import load_text
from hiddenstate.train.rundir.ownership import checkpoint_step

KILLS = 24  # at least 20, a third of each signal on average
STEPS = 400  # enough that the 24 kills never reach the end, however fast the machine
FLAGS = ["--hidden-size", "16", "--seq-len", "16", "--batch-size", "8", "--steps", str(STEPS), "--save-every", "3",
         "--eval-every", "7", "--quiet"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", HIDDENSTATE_NUM_THREADS="1")


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "small.txt"
    path.write_text(load_text()[:20_000], encoding="utf-8")
    return path


def tree(path, skip=()):
    return {str(p.relative_to(path)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(path.rglob("*")) if p.is_file() and p.relative_to(path).parts[0] not in skip}


def log_records(run):
    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    for record in records:
        record.pop("elapsed_s")
    return records


def staging(run):
    return [name for name in os.listdir(run) if name.startswith(".checkpoint.saving-")]


def wait_for(condition, proc, timeout=60.0, pause=0.0002):
    """Poll until ``condition()`` (True) or the process ends (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(pause)
    raise AssertionError("the training process made no progress")


@pytest.mark.slow
def test_killed_and_resumed_train_ends_bit_for_bit_where_the_uninterrupted_one_does(text_file, tmp_path):
    reference = tmp_path / "reference"
    assert main(["train", "--data", str(text_file), "--out", str(reference), *FLAGS]) == 0

    run = tmp_path / "run"
    mine = {"notes.txt": b"my notes\n", "log.jsonl.bak": b"my own copy\n", "mine/data.bin": os.urandom(4096)}
    rng = random.Random(11)
    outcomes = collections.Counter()
    during_save = 0
    kills, saved_at = 0, []
    start = time.monotonic()
    while True:
        if checkpoint_step(run) is None:  # killed before its first checkpoint: the same command starts it again
            argv = ["train", "--data", str(text_file), "--out", str(run), *FLAGS]
        else:
            argv = ["train", "--resume", str(run), "--quiet"]
            if not (run / "notes.txt").exists():  # the user keeps files in the run directory
                for name, data in mine.items():
                    (run / name).parent.mkdir(exist_ok=True)
                    (run / name).write_bytes(data)
                placed = tree(run, skip=("checkpoint", "log.jsonl", "loss.png", ".hiddenstate.lock"))
        lines_before = len((run / "log.jsonl").read_text().splitlines()) if (run / "log.jsonl").exists() else 0
        proc = subprocess.Popen([sys.executable, "-m", "hiddenstate", *argv], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env=ENV)
        sig = None
        if kills < KILLS:
            sig = rng.choice([signal.SIGKILL, signal.SIGINT, signal.SIGTERM])
            in_a_save = rng.random() < 0.4

            def progressed(lines_before=lines_before):
                try:
                    return len((run / "log.jsonl").read_text().splitlines()) > lines_before
                except FileNotFoundError:
                    return False

            if wait_for(progressed, proc):  # training: this part has saved once
                if in_a_save:
                    wait_for(lambda: bool(staging(run)), proc)  # the next save is being written
                    saving = bool(staging(run))
                else:
                    time.sleep(rng.uniform(0.0, 0.025))
                    saving = False
                if proc.poll() is None:
                    proc.send_signal(sig)
                    during_save += saving
        _, err = proc.communicate(timeout=120)
        rc = proc.returncode
        if rc == 0:
            break
        kills += 1
        outcomes[(signal.Signals(sig).name, rc)] += 1
        saved_at.append(checkpoint_step(run))
        expected = {signal.SIGKILL: -9, signal.SIGINT: 130, signal.SIGTERM: 143}[sig]
        assert rc == expected, (sig, rc, err)
        if sig != signal.SIGKILL:  # saved at the end of the step, and said so on one line
            assert err.count("\n") == 1 and err.startswith(f"hiddenstate: interrupted by {signal.Signals(sig).name}: "
                                                           "saved the checkpoint of step "), err
        assert "Traceback" not in err
    seconds = time.monotonic() - start
    print(f"\n{kills} kills in {seconds:.1f} s, {during_save} during a save: {dict(outcomes)}; checkpoint steps "
          f"after each: {saved_at}")
    assert kills >= 20 and during_save >= 3
    assert {name for name, _ in outcomes} == {"SIGKILL", "SIGINT", "SIGTERM"}

    # the same run, bit for bit: weights, optimizer state and history, the log, samples
    ours, theirs = load(run), load(reference)
    assert ours.step == theirs.step == STEPS
    for key, value in theirs.model.params.items():
        assert ours.model.params[key].tobytes() == value.tobytes(), key
    for key, value in theirs.arrays.items():
        assert ours.arrays[key].tobytes() == value.tobytes(), key
    assert ours.val_loss == theirs.val_loss
    assert log_records(run) == log_records(reference)
    assert sample(run, length=300, seed=4) == sample(reference, length=300, seed=4)
    # the user's files are untouched, and the run left nothing of its own behind
    assert tree(run, skip=("checkpoint", "log.jsonl", "loss.png")) == placed
    assert sorted(os.listdir(run)) == sorted(["checkpoint", "log.jsonl", "loss.png", "log.jsonl.bak", "mine",
                                              "notes.txt"])


def test_a_diverging_run_prints_one_line_and_no_numpy_warnings(text_file, tmp_path):
    # in a fresh process, with NumPy's default error handling (warnings), not the test suite's
    proc = subprocess.run([sys.executable, "-m", "hiddenstate", "train", "--data", str(text_file), "--lr", "1e308",
                           "--out", str(tmp_path / "r"), *FLAGS], capture_output=True, text=True, env=ENV, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("hiddenstate: error: training diverged at step 1: ")
    assert "RuntimeWarning" not in proc.stderr and "(--lr, now 1e+308)" in proc.stderr
    assert not (tmp_path / "r").exists()  # nothing saved, nothing left
