"""DeferredSignals: a signal waits for the end of the step, and an orphaned rank stops itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "getppid") or sys.platform == "win32",
                                reason="POSIX parent processes and signals")

# A parent that starts a child, waits until it watches, and exits: the child, re-parented, writes
# what it received within 20 s.
PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]])
    print(child.pid, flush=True)
    end = time.monotonic() + 40
    while not os.path.exists(sys.argv[2] + ".ready") and time.monotonic() < end:
        time.sleep(0.05)
""")
CHILD = textwrap.dedent("""
    import os, sys, time
    from hiddenstate.train.guards import DeferredSignals
    parent = os.getppid()
    with DeferredSignals(watch_parent=parent if sys.argv[2] == "1" else None) as signals:
        open(sys.argv[1] + ".ready", "w").close()
        end = time.monotonic() + 20
        while signals.received is None and time.monotonic() < end:
            time.sleep(0.05)
    with open(sys.argv[1], "w") as f:
        f.write(str(signals.received))
""")


def _orphan(tmp_path, watch: bool) -> str:
    out = tmp_path / f"watch{int(watch)}"
    parent = subprocess.run([sys.executable, "-c", PARENT, CHILD, str(out), "1" if watch else "0"],
                            capture_output=True, text=True, timeout=60, check=True)
    pid = int(parent.stdout.split()[0])
    import time

    end = time.monotonic() + 40
    while not out.exists() and time.monotonic() < end:
        time.sleep(0.05)
    if not out.exists():  # never leave the child behind
        os.kill(pid, signal.SIGKILL)
        raise AssertionError("the child did not finish")
    return out.read_text()


def test_an_orphaned_process_sends_itself_sigterm_when_watching_its_parent(tmp_path):
    assert _orphan(tmp_path, True) == str(int(signal.SIGTERM))


def test_without_the_watch_an_orphan_receives_nothing(tmp_path):
    assert _orphan(tmp_path, False) == "None"


def test_the_watch_stops_with_the_context_and_a_living_parent_sends_nothing():
    import threading

    from hiddenstate.train.guards import DeferredSignals

    before = threading.active_count()
    with DeferredSignals(watch_parent=os.getppid()) as signals:
        assert any(t.name == "hiddenstate-parent-watch" for t in threading.enumerate())
        import time

        time.sleep(3 * DeferredSignals.PARENT_POLL_S)
        assert signals.received is None
    assert threading.active_count() == before
