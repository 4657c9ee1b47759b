"""``hiddenstate train --processes K``: torchrun's own launcher, started from the command line.

The shorthand for ``torchrun --standalone --nproc-per-node K -m hiddenstate train ...`` on this
machine: torch's elastic agent (:func:`torch.distributed.launcher.api.elastic_launch`, the
machinery behind torchrun) runs in this process, with a static rendezvous on a free port of
127.0.0.1 (its store and the workers' connections listen on the loopback address only,
:mod:`~hiddenstate.train.distributed.store`), and starts K workers (``python -m hiddenstate train`` with the same flags). What differs
from torchrun is only what is printed: the workers' lines (rank 0 speaks for the run, every rank
for a lost peer) and nothing of the agent's; its exit status is the first failed rank's (a
signal N as 128 + N), 0 when every rank succeeded.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import uuid

from hiddenstate.train.distributed.store import bind_loopback_gloo, loopback_store
from hiddenstate.train.distributed.world import timeout_s

__all__ = ["launch", "max_processes", "without_processes_flag"]


def without_processes_flag(argv: list[str]) -> list[str]:
    """``argv`` with ``--processes K`` (or ``--processes=K``) taken out: what each worker is given.

    Parameters
    ----------
    argv : list of str
        The command line after the program name (``train ...``).

    Returns
    -------
    list of str
    """
    out, skip = [], False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg == "--processes" and i + 1 < len(argv):
            skip = True
            continue
        if arg.startswith("--processes="):
            continue
        out.append(arg)
    return out


def max_processes() -> int:
    """The most processes ``--processes`` starts on this machine: 4 per CPU, at least 8.

    Returns
    -------
    int
    """
    return max(8, 4 * (os.cpu_count() or 1))


def launch(argv: list[str], processes: int) -> int:
    """Run ``hiddenstate ARGV`` as ``processes`` ranks of one run on this machine (see the module docstring).

    Parameters
    ----------
    argv : list of str
        The command line after the program name, ``--processes`` included or not.
    processes : int
        K >= 1, the number of worker processes.

    Returns
    -------
    int
        The exit status: 0, the first failed rank's, or 128 + N for a signal N.

    Raises
    ------
    ValueError
        ``processes`` is more than :func:`max_processes` (``--processes 100000`` once started
        processes until the machine stalled); torch is not installed (the message names
        ``pip install 'hiddenstate[distributed]'``).
    """
    if processes > max_processes():
        raise ValueError(f"--processes must be at most {max_processes()} on this machine (4 per CPU, at least 8; "
                         f"{os.cpu_count() or 1} CPUs); got {processes}. Each process is one rank of the run: more "
                         "than the CPUs only wait for each other.")
    try:
        from torch.distributed.elastic.multiprocessing.api import SignalException
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.launcher.api import LaunchConfig, elastic_launch
    except ImportError:
        raise ValueError("processes > 1 needs torch.distributed, and torch is not installed: "
                         "pip install 'hiddenstate[distributed]' (or leave out --processes).") from None
    for name in ("torch.distributed.elastic", "torch.distributed.launcher", "torch.distributed.run"):
        logging.getLogger(name).setLevel(logging.CRITICAL)  # the workers say what happened, in one line each
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one BLAS thread a worker, as the CLI runs one process
    import torch.distributed as dist

    # the agent's static rendezvous opens its store at this port as a tenant of this server, which listens on
    # 127.0.0.1 only; the workers are the store's clients, and gloo connects them over the loopback interface
    store = loopback_store(dist, "127.0.0.1", 0, None, timeout_s(), is_master=True, multi_tenant=True)
    bind_loopback_gloo()
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=processes, run_id=str(uuid.uuid4()),
                          rdzv_backend="static", rdzv_endpoint=f"127.0.0.1:{store.port}",
                          rdzv_configs={"rank": 0, "timeout": timeout_s()}, max_restarts=0, monitor_interval=0.1)
    args = ["-m", "hiddenstate", *without_processes_flag(list(argv))]
    try:
        elastic_launch(config, entrypoint=sys.executable)(*args)
    except ChildFailedError as error:
        _, first = error.get_first_failure()
        code = first.exitcode
        return 128 - code if code < 0 else code
    except SignalException as error:  # Ctrl-C / SIGTERM here: the workers got it too and saved their step
        return 128 + int(getattr(error, "sigval", signal.SIGTERM))
    return 0
