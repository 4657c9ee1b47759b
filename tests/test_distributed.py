"""Data-parallel training on torch.distributed (gloo on 127.0.0.1): one run, whatever the world size.

Every process here binds to 127.0.0.1 (MASTER_ADDR / --rdzv-endpoint, GLOO_SOCKET_IFNAME=lo) on
a port picked free, and every wait is bounded (subprocess timeouts, HIDDENSTATE_DIST_TIMEOUT), so
a lost rank can never hang the suite. The reference is always the one-process run of the same
flags: a float64 run on 2 ranks must equal it to round-off (the gradient is the same sum of row
sums / N, in another order).
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests._torch import require_torch
from tests._torchrun import TORCHRUN  # torchrun, its store listening on 127.0.0.1 only

require_torch()  # the distributed extra; CI requires it
pytestmark = pytest.mark.slow

WAIT_S = 240  # a busy 2-core machine runs two ranks slowly; nothing waits longer than this
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "HIDDENSTATE_DIST_TIMEOUT": "30",
       "HIDDENSTATE_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
for _name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
    ENV.pop(_name, None)

SMALL = ["--hidden-size", "24", "--num-layers", "2", "--seq-len", "12", "--batch-size", "8", "--eval-every", "10",
         "--save-every", "10", "--dtype", "float64", "--quiet"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    from hiddenstate.train.corpus import load_text

    path = tmp_path_factory.mktemp("data") / "play.txt"
    path.write_text(load_text()[:40_000], encoding="utf-8")
    return path


def torchrun(*args, nproc=2, extra=(), port=None, **kwargs):
    """``torchrun --nproc-per-node nproc -m hiddenstate ARGS`` on 127.0.0.1 (a free port)."""
    cmd = [*TORCHRUN, "--nnodes", "1", f"--nproc-per-node={nproc}",
           "--master-addr", "127.0.0.1", "--master-port", str(port or free_port()), *extra, "-m", "hiddenstate", *args]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=WAIT_S, **kwargs)


def one_process(*args):
    return subprocess.run([sys.executable, "-m", "hiddenstate", *args], env=ENV, capture_output=True, text=True,
                          timeout=WAIT_S)


def ranks_by_hand(argvs, *, port=None, env=None):
    """Start one ``python -m hiddenstate`` per argv as rank r of len(argvs) (env:// rendezvous on 127.0.0.1)."""
    port = port or free_port()
    procs = []
    for r, argv in enumerate(argvs):
        e = {**ENV, "RANK": str(r), "WORLD_SIZE": str(len(argvs)), "LOCAL_RANK": str(r),
             "LOCAL_WORLD_SIZE": str(len(argvs)), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **(env or {})}
        procs.append(subprocess.Popen([sys.executable, "-m", "hiddenstate", *argv], env=e, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=argv.cwd
                                      if hasattr(argv, "cwd") else None))
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        results.append((p.returncode, out, err))
    return results


def log(run) -> list[dict]:
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def weights(run) -> dict:
    from safetensors.numpy import load_file

    return load_file(str(run / "checkpoint" / "model.safetensors"))


def assert_same_run(a, b, rtol=1e-10):
    la, lb = log(a), log(b)
    assert [r["step"] for r in la] == [r["step"] for r in lb]
    for key in ("train_loss", "grad_norm", "val_loss"):
        x = np.array([r.get(key, np.nan) for r in la])
        y = np.array([r.get(key, np.nan) for r in lb])
        assert np.array_equal(np.isnan(x), np.isnan(y)), key
        np.testing.assert_allclose(y[~np.isnan(y)], x[~np.isnan(x)], rtol=rtol, atol=0, err_msg=key)
    wa, wb = weights(a), weights(b)
    assert sorted(wa) == sorted(wb)
    for k in wa:
        scale = np.abs(wa[k]).max()
        assert np.abs(wa[k] - wb[k]).max() <= rtol * scale, k


# -- one run, whatever the world size ---------------------------------------------------------------
def test_two_ranks_equal_one_process_in_float64_with_dropout_and_dropconnect(text_file, tmp_path):
    flags = ["train", "--data", str(text_file), *SMALL, "--steps", "50", "--dropout", "0.3", "--weight-drop", "0.2"]
    single = one_process(*flags, "--out", str(tmp_path / "one"))
    assert single.returncode == 0, single.stderr
    double = torchrun(*flags, "--out", str(tmp_path / "two"))
    assert double.returncode == 0, double.stderr + double.stdout
    assert_same_run(tmp_path / "one", tmp_path / "two")
    assert sum(r.get("val_loss") is not None for r in log(tmp_path / "two")) == 5
    # rank 0 speaks for the run: one result, not one per rank
    assert double.stdout.count("validation loss:") == 1
    # the checkpoint is an ordinary one: every row's carried state, (L, N, H)
    from hiddenstate.train import load

    assert load(tmp_path / "two").snapshot.carry.shape == (2, 8, 24)
    # and the sample of it is the sample of the one-process run
    a = one_process("sample", str(tmp_path / "one"), "--length", "40", "--seed", "3")
    b = one_process("sample", str(tmp_path / "two"), "--length", "40", "--seed", "3")
    assert a.returncode == b.returncode == 0 and a.stdout == b.stdout


WORKER = r"""
import os, sys
import torch.distributed as dist
from hiddenstate.train import train

dist.init_process_group("gloo")   # the script's own group: train() joins it and leaves it open
out, cells = sys.argv[1], sys.argv[2].split(",")
for cell in cells:
    cfg = dict(data=sys.argv[3], cell=cell, hidden_size=16, num_layers=2, seq_len=10, batch_size=8, steps=12,
               eval_every=6, save_every=6, dtype="float64", dropout=0.25, out=os.path.join(out, cell))
    if cell in ("gru", "lstm", "rnn"):
        cfg["weight_drop"] = 0.2
    result = train(cfg, progress=False, verbose=False)
    if dist.get_rank() == 0:
        print(cell, repr(result.val_loss), flush=True)
dist.destroy_process_group()
"""


def test_every_cell_kind_trains_on_two_ranks_as_on_one(text_file, tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    cells = ["gru", "lstm", "rnn", "mingru", "minlstm", "mamba"]
    port = free_port()
    cmd = [*TORCHRUN, "--nnodes", "1", "--nproc-per-node", "2", "--master-addr",
           "127.0.0.1", "--master-port", str(port), str(script), str(tmp_path / "two"), ",".join(cells), str(text_file)]
    run = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=WAIT_S)
    assert run.returncode == 0, run.stderr
    from hiddenstate.train import train

    for cell in cells:
        cfg = dict(data=str(text_file), cell=cell, hidden_size=16, num_layers=2, seq_len=10, batch_size=8, steps=12,
                   eval_every=6, save_every=6, dtype="float64", dropout=0.25, out=str(tmp_path / "one" / cell))
        if cell in ("gru", "lstm", "rnn"):
            cfg["weight_drop"] = 0.2
        train(cfg, progress=False, verbose=False)
        assert_same_run(tmp_path / "one" / cell, tmp_path / "two" / cell)


def test_the_torch_device_path_reduces_device_tensors(text_file, tmp_path):
    flags = ["train", "--data", str(text_file), *SMALL, "--steps", "20", "--dropout", "0.2", "--device", "torch:cpu"]
    single = one_process(*flags, "--out", str(tmp_path / "one"))
    assert single.returncode == 0, single.stderr
    double = torchrun(*flags, "--out", str(tmp_path / "two"))
    assert double.returncode == 0, double.stderr
    assert_same_run(tmp_path / "one", tmp_path / "two")


# -- checkpoints: K ranks -> any number of ranks ------------------------------------------------------
STOP_AT = r"""
import sys
from hiddenstate.train import train

stop = int(sys.argv[2])
train(dict(data=sys.argv[3], hidden_size=24, num_layers=2, seq_len=12, batch_size=8, steps=40, eval_every=10,
           save_every=10, dtype="float64", dropout=0.3, out=sys.argv[1]),
      progress=False, verbose=False, callback=lambda record: record["step"] == stop)
"""


def test_resumes_across_world_sizes_continue_the_same_run(text_file, tmp_path):
    script = tmp_path / "stop_at.py"
    script.write_text(STOP_AT)
    flags = ["--data", str(text_file), *SMALL, "--steps", "40", "--dropout", "0.3"]
    whole = one_process("train", *flags, "--out", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr
    # 2 ranks stop at step 20 (a callback: every rank stops there), 1 process finishes
    port = free_port()
    first = subprocess.run([*TORCHRUN, "--nnodes", "1", "--nproc-per-node", "2",
                            "--master-addr", "127.0.0.1", "--master-port", str(port), str(script),
                            str(tmp_path / "a"), "20", str(text_file)],
                           env=ENV, capture_output=True, text=True, timeout=WAIT_S)
    assert first.returncode == 0, first.stderr
    from hiddenstate.train import load

    assert load(tmp_path / "a").step == 20
    rest = one_process("train", "--resume", str(tmp_path / "a"), "--quiet")
    assert rest.returncode == 0, rest.stderr
    assert_same_run(tmp_path / "whole", tmp_path / "a")
    # 1 process stops at step 20, 2 ranks finish
    first = subprocess.run([sys.executable, str(script), str(tmp_path / "b"), "20", str(text_file)], env=ENV,
                           capture_output=True, text=True, timeout=WAIT_S)
    assert first.returncode == 0, first.stderr
    rest = torchrun("train", "--resume", str(tmp_path / "b"), "--quiet")
    assert rest.returncode == 0, rest.stderr
    assert "resuming" in rest.stdout and rest.stdout.count("resuming") == 1
    assert_same_run(tmp_path / "whole", tmp_path / "b")


# the c10d agents' shared worker store would listen on every interface: rank 0 hosts it, on --local-addr
SHARED_STORE_OFF = {**ENV, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def test_two_machines_on_one_rendezvous_through_c10d(text_file, tmp_path):
    flags = ["train", "--data", str(text_file), *SMALL, "--steps", "20", "--out", str(tmp_path / "two")]
    port = free_port()
    nodes = [subprocess.Popen([*TORCHRUN, "--nnodes", "2", "--node-rank", str(r),
                               "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                               f"127.0.0.1:{port}", "--rdzv-id", "hs-test", "--rdzv-conf",
                               f"join_timeout=60,is_host={str(r == 0).lower()}", "--local-addr", "127.0.0.1",
                               "-m", "hiddenstate", *flags], env=SHARED_STORE_OFF, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    try:
        outs = [n.communicate(timeout=WAIT_S) for n in nodes]
    finally:
        for n in nodes:
            n.kill()
    assert [n.returncode for n in nodes] == [0, 0], [o[1][-2000:] for o in outs]
    single = one_process(*flags[:-1], str(tmp_path / "one"))
    assert single.returncode == 0, single.stderr
    assert_same_run(tmp_path / "one", tmp_path / "two")


# -- faults ---------------------------------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _wait_for_checkpoint(run, proc, timeout=WAIT_S):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if (run / "checkpoint" / "meta.json").exists():
            return
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.05)
    raise AssertionError("no checkpoint appeared")


def test_a_killed_rank_stops_the_others_with_one_line_and_the_checkpoint_resumes(text_file, tmp_path):
    run = tmp_path / "run"
    cmd = [*TORCHRUN, "--nnodes", "1", "--nproc-per-node", "2", "--master-addr",
           "127.0.0.1", "--master-port", str(free_port()), "-m", "hiddenstate", "train", "--data", str(text_file),
           *SMALL, "--steps", "100000", "--save-every", "5", "--out", str(run)]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_checkpoint(run, proc)
        workers = _children(proc.pid)
        assert len(workers) == 2
        ranks = {}
        for pid in workers:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
            ranks[int(env[b"RANK"])] = pid
        t_kill = time.monotonic()
        os.kill(ranks[1], signal.SIGKILL)
        _, err = proc.communicate(timeout=90)
        waited = time.monotonic() - t_kill
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert waited < 60
    ours = [line for line in err.splitlines() if line.startswith("hiddenstate: error:")]
    assert len(ours) == 1, err
    assert "rank 0 stopped at step" in ours[0] and f"rank 1 (pid {ranks[1]}) was lost" in ours[0]
    from hiddenstate.train import load

    saved = load(run)  # intact
    assert saved.step % 5 == 0 and saved.step >= 5
    again = one_process("train", "--resume", str(run), "--steps", str(saved.step + 3), "--quiet")
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("how", ["sigterm-to-torchrun", "ctrl-c-to-the-group"])
def test_sigterm_or_ctrl_c_saves_the_step_in_flight(text_file, tmp_path, how):
    run = tmp_path / "run"
    cmd = [*TORCHRUN, "--nnodes", "1", "--nproc-per-node", "2", "--master-addr",
           "127.0.0.1", "--master-port", str(free_port()), "-m", "hiddenstate", "train", "--data", str(text_file),
           *SMALL, "--steps", "100000", "--save-every", "1000", "--eval-every", "1000", "--out", str(run)]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        end = time.monotonic() + WAIT_S
        while not (run / "log.jsonl").exists() or len((run / "log.jsonl").read_text().splitlines()) < 3:
            assert proc.poll() is None and time.monotonic() < end, proc.communicate()[1]
            time.sleep(0.05)
        if how == "sigterm-to-torchrun":
            proc.send_signal(signal.SIGTERM)
            expected = 143
        else:  # a terminal's Ctrl-C reaches every process of the group, and torchrun passes it on again
            os.killpg(proc.pid, signal.SIGINT)
            expected = 130
        _, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    from hiddenstate.train import load

    saved = load(run)
    assert saved.step >= 3  # the step in flight, saved by rank 0 (no checkpoint was due before step 1000)
    ours = [line for line in err.splitlines() if line.startswith("hiddenstate: interrupted")]
    assert len(ours) == 1 and f"saved the checkpoint of step {saved.step}" in ours[0] and "--resume" in ours[0], err
    assert proc.returncode != 0
    assert expected in (130, 143)
    again = one_process("train", "--resume", str(run), "--steps", str(saved.step + 2), "--quiet")
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("how", ["--processes", "torchrun"])
def test_a_sigkilled_launcher_leaves_no_worker_behind_and_the_step_is_saved(text_file, tmp_path, how):
    # torch elastic starts its workers in sessions of their own: before the parent watch, a SIGKILLed
    # launcher left them training on (an orphan's sweep once left ~190 behind on this machine)
    from hiddenstate.train.distributed.world import alive

    run = tmp_path / "run"
    flags = ["train", "--data", str(text_file), *SMALL, "--steps", "100000", "--save-every", "1000",
             "--eval-every", "1000", "--out", str(run)]
    cmd = ([sys.executable, "-m", "hiddenstate", *flags, "--processes", "2"] if how == "--processes" else
           [*TORCHRUN, "--nnodes", "1", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
            str(free_port()), "-m", "hiddenstate", *flags])
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = []
    try:
        end = time.monotonic() + WAIT_S
        while not (run / "log.jsonl").exists() or len((run / "log.jsonl").read_text().splitlines()) < 3:
            assert proc.poll() is None and time.monotonic() < end, "the run did not start"
            time.sleep(0.05)
        workers = _children(proc.pid)
        assert len(workers) == 2
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        end = time.monotonic() + 60
        while any(alive(pid) for pid in workers) and time.monotonic() < end:
            time.sleep(0.1)
        left = [pid for pid in workers if alive(pid)]
    finally:
        proc.kill()
        for pid in workers:  # never leave one behind, whatever the outcome
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert left == [], f"workers {left} still run 60 s after their launcher was killed"
    from hiddenstate.train import load

    saved = load(run)  # the step in flight, saved (no checkpoint was due before step 1000)
    assert saved.step >= 3


class _Argv(list):
    cwd = None


def test_mismatched_flags_and_a_batch_that_does_not_split_are_refused_before_any_step(text_file, tmp_path):
    base = ["train", "--data", str(text_file), *SMALL, "--steps", "5", "--out", str(tmp_path / "run")]
    results = ranks_by_hand([base, [*base, "--lr", "0.01"]])
    assert [r[0] for r in results] == [2, 2], results
    line = results[0][2].strip()
    assert line.count("\n") == 0 and "--lr" in line and "rank 1" in line, line
    assert results[1][2].strip() == ""  # rank 0 speaks for the run
    assert not (tmp_path / "run").exists()
    odd = [*base[:-2], "--batch-size", "9", "--out", str(tmp_path / "odd")]
    results = ranks_by_hand([odd, odd])
    assert [r[0] for r in results] == [2, 2]
    assert "--batch-size must be a multiple of the number of processes (2)" in results[0][2]
    assert not (tmp_path / "odd").exists()


def test_different_texts_under_the_same_name_are_refused(text_file, tmp_path):
    for r, text in enumerate(("abcdefgh " * 2000, "abcdefgh " * 1999 + "hgfedcba ")):
        (tmp_path / f"m{r}").mkdir()
        (tmp_path / f"m{r}" / "data.txt").write_text(text)
    argvs = []
    for r in range(2):
        argv = _Argv(["train", "--data", "data.txt", *SMALL, "--steps", "5", "--out", str(tmp_path / "run")])
        argv.cwd = str(tmp_path / f"m{r}")
        argvs.append(argv)
    results = ranks_by_hand(argvs)
    assert [r[0] for r in results] == [2, 2], results
    assert "data must be the same text on every process; rank 1" in results[0][2]


def test_an_unreachable_rendezvous_and_a_port_in_use_are_one_line_within_the_timeout(text_file, tmp_path):
    base = ["train", "--data", str(text_file), *SMALL, "--steps", "5", "--out", str(tmp_path / "run")]
    t0 = time.monotonic()
    (code, _, err), = ranks_by_hand([base, base][1:], env={"RANK": "1", "WORLD_SIZE": "2",
                                                          "HIDDENSTATE_DIST_TIMEOUT": "3"})
    assert time.monotonic() - t0 < 60
    assert code == 2 and err.count("\n") == 1 and "could not join the run at 127.0.0.1:" in err, err
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        t0 = time.monotonic()
        (code, _, err), = ranks_by_hand([base], port=port, env={"WORLD_SIZE": "2", "HIDDENSTATE_DIST_TIMEOUT": "3"})
    assert time.monotonic() - t0 < 60
    assert code == 2 and err.count("\n") == 1 and "could not join the run" in err, err
    assert not (tmp_path / "run").exists()


def test_without_torch_a_launched_process_names_the_extra(tmp_path):
    code = ("import sys; sys.modules['torch'] = None\n"
            "from hiddenstate.cli import main\n"
            f"sys.exit(main(['train', '--steps', '1', '--out', {str(tmp_path / 'run')!r}]))")
    env = {**ENV, "RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=WAIT_S)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "pip install 'hiddenstate[distributed]'" in run.stderr, run.stderr
    assert not (tmp_path / "run").exists()


# -- the pieces, in one process -------------------------------------------------------------------------
def test_a_rank_gets_its_rows_of_the_whole_batch_draw_of_masks():
    from hiddenstate.train.distributed import RowGenerator
    from hiddenstate.train.distributed.rows import batch_rows, stream_rows

    whole = np.random.default_rng(7)
    expected = [whole.random((5, 8, 3), dtype=np.float32), whole.random((4, 4)), whole.random((5, 8, 3))]
    for rank in range(2):
        parent = np.random.default_rng(7)
        g = RowGenerator(parent, batch_rows(rank, 2, 8), 8)
        got = [g.random((5, 4, 3), dtype=np.float32), g.random((4, 4)), g.random((5, 4, 3))]
        rows = slice(4 * rank, 4 * rank + 4)
        np.testing.assert_array_equal(got[0], expected[0][:, rows])
        np.testing.assert_array_equal(got[1], expected[1])  # DropConnect: the same mask for every row
        np.testing.assert_array_equal(got[2], expected[2][:, rows])
        ref = np.random.default_rng(7)
        ref.random((5, 8, 3), dtype=np.float32), ref.random((4, 4)), ref.random((5, 8, 3))
        assert parent.random() == ref.random()  # the run's generator moved on exactly as in one process
        with pytest.raises(RuntimeError, match="does not match this rank's 4 rows"):
            g.random((5, 3, 3))
    assert [stream_rows(r, 3, 32) for r in range(3)] == [slice(0, 11), slice(11, 21), slice(21, 32)]
    assert [stream_rows(r, 2, 1) for r in range(2)] == [slice(0, 0), slice(0, 1)]


# -- hiddenstate train --processes K: torchrun's launcher in the CLI ----------------------------------
def test_processes_flag_runs_the_same_run_and_refuses_in_one_line(text_file, tmp_path):
    flags = ["train", "--data", str(text_file), *SMALL, "--steps", "20", "--dropout", "0.2"]
    single = one_process(*flags, "--out", str(tmp_path / "one"))
    assert single.returncode == 0, single.stderr
    double = one_process(*flags, "--processes", "2", "--out", str(tmp_path / "two"))
    assert double.returncode == 0, double.stderr
    assert double.stdout.count("validation loss:") == 1
    assert_same_run(tmp_path / "one", tmp_path / "two")
    odd = one_process(*flags, "--batch-size", "9", "--processes=2", "--out", str(tmp_path / "odd"))
    assert odd.returncode == 2
    errors = [line for line in odd.stderr.splitlines() if "warning" not in line]
    assert errors == ["hiddenstate: error: --batch-size must be a multiple of the number of processes (2) so that "
                      "each reads the same number of rows; got 9. Use --batch-size 8 or another multiple of 2."]
    assert not (tmp_path / "odd").exists()


def test_the_workers_get_the_command_line_without_the_processes_flag():
    from hiddenstate.train.distributed.launch import without_processes_flag

    assert without_processes_flag(["train", "--processes", "2", "--steps", "5"]) == ["train", "--steps", "5"]
    assert without_processes_flag(["train", "--processes=4", "--out", "x"]) == ["train", "--out", "x"]
    assert without_processes_flag(["train", "--prime", "--processes"]) == ["train", "--prime", "--processes"]


def test_a_diverging_run_stops_every_rank_at_the_same_step_with_one_line(text_file, tmp_path):
    run = torchrun("train", "--data", str(text_file), *SMALL, "--dtype", "float32", "--steps", "200", "--lr", "1e4",
                   "--clip", "1e9", "--out", str(tmp_path / "run"))
    ours = [line for line in run.stderr.splitlines() if line.startswith("hiddenstate: error:")]
    assert len(ours) == 1 and "training diverged at step" in ours[0] and "--lr" in ours[0], run.stderr
    assert "was lost" not in run.stderr


# -- nothing of a run on 127.0.0.1 listens beyond it -------------------------------------------------
def _listening_sockets() -> dict[int, tuple[str, int]]:
    """Inode -> (address, port) of every listening TCP socket of this machine (/proc/net/tcp, tcp6)."""
    import ipaddress

    found = {}
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = pathlib.Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            hexaddr, hexport = fields[1].split(":")
            raw = bytes.fromhex(hexaddr)  # 32-bit words in host (little-endian) order
            packed = b"".join(raw[i:i + 4][::-1] for i in range(0, width // 2, 4))
            found[int(fields[9])] = (str(ipaddress.ip_address(packed)), int(hexport, 16))
    return found


def _family(root: int) -> list[int]:
    """``root`` and every process below it."""
    parents = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(text.rsplit(")", 1)[1].split()[1])
    family, grew = {root}, True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in family and pid not in family:
                family.add(pid)
                grew = True
    return sorted(family)


def _listening_of(pids) -> set[tuple[str, int]]:
    sockets, seen = _listening_sockets(), set()
    for pid in pids:
        for fd in pathlib.Path(f"/proc/{pid}/fd").glob("*") if pathlib.Path(f"/proc/{pid}/fd").exists() else ():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and int(target[8:-1]) in sockets:
                seen.add(sockets[int(target[8:-1])])
    return seen


def _is_loopback(address: str) -> bool:
    import ipaddress

    ip = ipaddress.ip_address(address)
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback)


@pytest.mark.skipif(not pathlib.Path("/proc/net/tcp").exists(), reason="reads the sockets from Linux's /proc")
@pytest.mark.parametrize("how", ["--processes", "torchrun", "by-hand", "two-nodes-c10d"])
def test_a_run_on_127_0_0_1_listens_on_the_loopback_address_only(text_file, tmp_path, how):
    flags = ["train", "--data", str(text_file), *SMALL, "--steps", "40", "--out", str(tmp_path / "run")]
    if how == "--processes":
        procs = [subprocess.Popen([sys.executable, "-m", "hiddenstate", *flags, "--processes", "2"], env=ENV,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)]
    elif how == "torchrun":
        procs = [subprocess.Popen([*TORCHRUN, "--nnodes", "1", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                                   "--master-port", str(free_port()), "-m", "hiddenstate", *flags], env=ENV,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)]
    elif how == "two-nodes-c10d":
        port = free_port()
        procs = [subprocess.Popen([*TORCHRUN, "--nnodes", "2", "--node-rank", str(r), "--nproc-per-node", "1",
                                   "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-conf",
                                   f"join_timeout=60,is_host={str(r == 0).lower()}", "--local-addr", "127.0.0.1",
                                   "-m", "hiddenstate", *flags], env=SHARED_STORE_OFF, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    else:
        port = free_port()
        procs = [subprocess.Popen([sys.executable, "-m", "hiddenstate", *flags], text=True, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, env={**ENV, "RANK": str(r), "WORLD_SIZE": "2",
                                                               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
                 for r in (0, 1)]
    seen, deadline = set(), time.monotonic() + WAIT_S
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            seen |= _listening_of([pid for p in procs for pid in _family(p.pid)])
            time.sleep(0.05)
    finally:
        for p in procs:
            p.kill()
    errs = [p.communicate(timeout=30)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(procs), [e[-2000:] for e in errs]
    assert seen, "no listening socket was seen while the run lasted"
    assert all(_is_loopback(address) for address, _ in seen), sorted(seen)


def test_only_a_loopback_master_addr_gets_the_loopback_store(monkeypatch):
    from hiddenstate.train.distributed.store import is_loopback, rendezvous

    assert [is_loopback(h) for h in ("127.0.0.1", "127.3.2.1", "localhost", "::1")] == [True] * 4
    assert [is_loopback(h) for h in ("10.0.0.1", "0.0.0.0", "::", "example.org", "")] == [False] * 5
    monkeypatch.setenv("MASTER_ADDR", "10.1.2.3")  # other machines must reach it: torch's env:// as it is
    assert rendezvous(None, 0, 2, 5.0) == {"init_method": "env://"}
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")  # under torchrun its agent hosts the store
    assert rendezvous(None, 0, 2, 5.0) == {"init_method": "env://"}
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE")
    monkeypatch.setenv("MASTER_PORT", "29x")
    with pytest.raises(ValueError, match=r"MASTER_PORT must be an integer; got '29x'"):
        rendezvous(None, 0, 2, 5.0)


def test_initial_state_tuning_on_two_ranks_equals_one_process(text_file, tmp_path):
    # the tuned state's gradient is all-reduced like a weight's: the same run to round-off, weights untouched
    base = one_process("train", "--data", str(text_file), *SMALL, "--steps", "10", "--out", str(tmp_path / "base"))
    assert base.returncode == 0, base.stderr
    flags = ["train", "--tune-initial-state", str(tmp_path / "base"), "--data", str(text_file), "--seq-len", "12",
             "--batch-size", "8", "--steps", "20", "--eval-every", "10", "--save-every", "10", "--lr", "0.05", "--quiet"]
    single = one_process(*flags, "--out", str(tmp_path / "one"))
    assert single.returncode == 0, single.stderr
    double = torchrun(*flags, "--out", str(tmp_path / "two"))
    assert double.returncode == 0, double.stderr + double.stdout
    assert_same_run(tmp_path / "one", tmp_path / "two")  # the frozen weights too: equal to the base's below
    from hiddenstate.train import load

    a, b, w = load(tmp_path / "one"), load(tmp_path / "two"), weights(tmp_path / "base")
    np.testing.assert_allclose(b.initial_state, a.initial_state, rtol=0, atol=1e-10 * np.abs(a.initial_state).max())
    assert np.abs(a.initial_state).max() > 0
    assert all(weights(tmp_path / "two")[k].tobytes() == v.tobytes() for k, v in w.items())
