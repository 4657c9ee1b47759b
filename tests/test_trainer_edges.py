"""Two edges of the multi-process trainer found by cases held back from the suite (issue 34)."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests._torch import require_torch
from tests._torchrun import TORCHRUN
from tests.test_distributed import SHARED_STORE_OFF, SMALL, WAIT_S, free_port

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGTERM") or os.name != "posix", reason="POSIX signals")

_RELAYED = textwrap.dedent("""
    import os, signal, sys, time
    from hiddenstate.train.guards import DeferredSignals
    with DeferredSignals(relay_grace_s={grace}) as s:
        os.kill(os.getpid(), signal.SIGTERM)          # the user's SIGTERM to this one worker
        time.sleep(0.05)
    assert s.received == signal.SIGTERM
    os.kill(os.getpid(), signal.SIGTERM)              # torchrun's SIGTERM while the rank exits
    time.sleep(0.05)
    sys.exit(143)
""")


def test_a_rank_stopped_by_a_signal_outlives_the_relay_and_exits_with_its_own_status():
    """Before: the handlers were restored at the context's end, and the relay killed the rank with -15."""
    done = subprocess.run([sys.executable, "-c", _RELAYED.format(grace=10.0)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 143, (done.returncode, done.stderr[-1000:])


def test_without_a_grace_the_handlers_come_back_at_the_end():
    done = subprocess.run([sys.executable, "-c", _RELAYED.format(grace=0.0)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == -signal.SIGTERM  # one process: a signal after the run acts as before it


def test_a_signal_after_the_grace_acts_as_before_the_run():
    script = _RELAYED.format(grace=0.2).replace("sys.exit(143)", "time.sleep(0.5); os.kill(os.getpid(), "
                                                "signal.SIGTERM); time.sleep(0.5); sys.exit(143)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGTERM


def test_a_two_node_run_refused_before_any_step_says_why_on_every_node(tmp_path):
    """Node B read another text: the run is refused on both nodes, and node B's user reads the reason too.

    Before, only rank 0 printed it; node B's torchrun said "exitcode: 2" and nothing else.
    """
    require_torch()
    from hiddenstate.train.corpus import load_text

    text = load_text()[:40_000]
    for r in (0, 1):  # the same --data path on each machine (a relative path, each node's own folder), another text
        (tmp_path / f"node{r}").mkdir()
        (tmp_path / f"node{r}" / "play.txt").write_text(text if r == 0 else text[::-1], encoding="utf-8")
    port = free_port()
    nodes = [subprocess.Popen([*TORCHRUN, "--nnodes", "2", "--node-rank", str(r), "--nproc-per-node", "1",
                               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id",
                               "hs-edge", "--rdzv-conf", f"join_timeout=60,is_host={str(r == 0).lower()}",
                               "--local-addr", "127.0.0.1", "-m", "hiddenstate", "train", "--data",
                               "play.txt", *SMALL, "--steps", "20", "--out", str(tmp_path / "run")],
                              cwd=tmp_path / f"node{r}", env=SHARED_STORE_OFF, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    try:
        outs = [n.communicate(timeout=WAIT_S) for n in nodes]
    finally:
        for n in nodes:
            n.kill()
    for r, (_, err) in enumerate(outs):
        ours = [line for line in err.splitlines() if line.startswith("hiddenstate: error:")]
        assert len(ours) == 1 and "data must be the same text on every process" in ours[0], (r, err[-3000:])
    assert [n.returncode for n in nodes] != [0, 0]
