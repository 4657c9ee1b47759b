"""Data-parallel training over ``torch.distributed``: what a rank does, how rows are sharded, the collectives.

One run, whatever the world size. ``torchrun --nproc-per-node K -m hiddenstate train ...`` starts
K processes (ranks); each joins the process group (gloo on CPUs, NCCL on GPUs, rendezvous by
torchrun's ``env://`` variables) and trains the same model on its share of the batch:

* the global batch of ``N`` rows (``--batch-size``) is split into ``K`` equal column blocks; rank
  ``r`` reads rows ``[r N/K, (r+1) N/K)`` of every (T, N) chunk and carries their hidden states;
* the loss is the mean over all ``N`` rows: each rank scales its gradient (the mean over its
  ``T N/K`` predictions) by ``1/K`` and one all-reduce sums them, so every rank holds the
  single-process gradient up to the order of summation, clips it by the same global norm and
  takes the same Adam step (weights and optimizer state stay identical on every rank). As in
  torch's DDP the all-reduce goes in buckets that start while the backward pass still runs (the
  decoder's and the top layer's gradients are final before the lower layers' BPTT) and are
  waited for only before the update (:mod:`~hiddenstate.train.distributed.buckets`);
* dropout and DropConnect masks come from the run's one generator: every rank draws its rows of
  each mask and advances the generator past the other rows' numbers (:class:`RowGenerator`), so
  the draws are those of the single-process run at ``1/K`` of the cost;
* the validation rows (32 streams) are split over the ranks and the loss sums are all-reduced;
* only rank 0 (the leader) owns the run directory: it claims it, writes the log and the
  checkpoint (under the usual lock and atomic save) after gathering every row's carried state, so
  a checkpoint written by K ranks is an ordinary one-process checkpoint, resumable on any number
  of ranks;
* the decision to stop (the step count, ``--max-minutes``, SIGINT/SIGTERM) and the step's loss
  ride at the end of the gradient's last bucket, so every rank stops at the same step and a step
  costs no collective besides the gradient's (a ``callback`` of :func:`~hiddenstate.train.train`
  decides after the step, so with one the decision is an all-reduce of its own).

Faults: every collective runs under the process group's timeout (``HIDDENSTATE_DIST_TIMEOUT``
seconds, default 60); a rank that dies makes the others' next collective fail at once, and they
stop with one line naming it (:class:`LostRank`). Mismatched flags or data between ranks and a
batch that does not split are refused before the first step (:meth:`TorchWorld.check_request`,
:meth:`TorchWorld.check_ready`).

A process that was not started by a launcher (no ``WORLD_SIZE`` > 1 in its environment) gets
:data:`LOCAL`, whose methods do nothing: the single-process path is today's, unchanged.

Examples
--------
::

    torchrun --nproc-per-node 2 -m hiddenstate train --preset long --out runs/long2
    torchrun --nnodes 2 --node-rank R --rdzv-backend c10d --rdzv-endpoint HOST:29400 \\
             --nproc-per-node 8 -m hiddenstate train --device cuda ...
"""

from __future__ import annotations

import os
import sys
import warnings

from hiddenstate.train.distributed.rows import RowGenerator
from hiddenstate.train.distributed.torchworld import TorchWorld
from hiddenstate.train.distributed.world import LOCAL, LostRank, PeerFailed, RendezvousFailed, World, env_int

__all__ = ["LOCAL", "LostRank", "PeerFailed", "RendezvousFailed", "RowGenerator", "TorchWorld", "World", "check_cores",
           "exit_status", "first_of_another_node", "follower", "join", "launched"]


def launched() -> bool:
    """Whether this process was started as one of several ranks (``WORLD_SIZE`` > 1 in the environment).

    Returns
    -------
    bool
    """
    text = os.environ.get("WORLD_SIZE", "")
    return text not in ("", "1", "0")


def exit_status(error: BaseException, prog: str) -> int | None:
    """The CLI's exit status for an error of a distributed run, after its one line (None: not one).

    A lost rank (1) and a failed rendezvous (2) are printed by every rank that meets them; a
    :class:`PeerFailed` is silent (the rank that refused the run said why).

    Parameters
    ----------
    error : BaseException
    prog : str
        The program name the line starts with.

    Returns
    -------
    int or None
    """
    if isinstance(error, PeerFailed):
        return error.status
    if isinstance(error, (LostRank, RendezvousFailed)):
        print(f"{prog}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 1 if isinstance(error, LostRank) else 2
    return None


def follower() -> bool:
    """Whether this process is a rank other than 0 of a launched run (rank 0 prints for the run).

    Returns
    -------
    bool
    """
    if not launched():
        return False
    try:  # a rank out of [0, WORLD_SIZE) or not a number has no rank 0 to speak for it: it speaks itself
        rank, size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return False
    return 0 < rank < size


def first_of_another_node() -> bool:
    """Whether this process is the first local rank of a node other than rank 0's (it speaks for that node).

    A run refused before its first step (a ``--data`` that differs on node B, say) is refused on
    every rank with the same one line; rank 0 prints it, and so does the first rank of every other
    node, so that the user at node B reads why its torchrun exited 2 (``LOCAL_RANK`` 0 and
    ``RANK`` > 0, as torchrun sets them).

    Returns
    -------
    bool
    """
    if not follower():
        return False
    return os.environ.get("LOCAL_RANK", "").strip() == "0"


def join(device: str = "cpu") -> World:
    """This process's world: :data:`LOCAL`, or the process group that torchrun's variables describe.

    Parameters
    ----------
    device : str, default "cpu"
        The run's ``--device``: ``cpu`` and ``torch:cpu`` use gloo, ``cuda`` (``torch:cuda``) NCCL
        with GPU ``LOCAL_RANK``; ``cupy`` is refused (torch.distributed reduces torch tensors).

    Returns
    -------
    World
        :data:`LOCAL` without ``WORLD_SIZE`` > 1; a :class:`TorchWorld` otherwise.

    Raises
    ------
    ValueError
        torch is not installed (the message names ``pip install 'hiddenstate[distributed]'``), a
        launcher variable that is not an integer, ``--device cupy`` or ``cuda:K``.
    RendezvousFailed
        The group could not be formed within the timeout (an unreachable ``MASTER_ADDR``, a port
        in use), in one line.
    """
    if not launched():
        return LOCAL
    rank, size = env_int("RANK"), env_int("WORLD_SIZE")
    if rank >= size:
        raise ValueError(f"RANK must be less than WORLD_SIZE={size} (set by torchrun); got {rank}. Start the ranks "
                         "with torchrun or hiddenstate train --processes K.")
    if not os.environ.get("HIDDENSTATE_DEBUG"):  # c10d's own C++ log lines would break the one-line errors
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise ValueError(f"this process was started as rank {rank} of WORLD_SIZE={size} processes (by torchrun), "
                         "but torch is not installed: pip install 'hiddenstate[distributed]'.") from None
    if not dist.is_available():
        raise ValueError("this torch was built without torch.distributed; install a build that has it "
                         "(pip install 'hiddenstate[distributed]').")
    return TorchWorld(rank, size, device, torch, dist)


def check_cores(world: World) -> None:
    """Warn (one line, from the first rank of each machine) when fewer CPUs are free than processes run there.

    The rule of the CLI's thread fallback: the 1-minute load average must leave a CPU for each
    of this machine's ``LOCAL_WORLD_SIZE`` processes (each with one BLAS thread); otherwise the
    processes wait for each other at every all-reduce and the run goes at the slowest one's pace.

    Parameters
    ----------
    world : World
    """
    if world.size == 1 or world.local_rank != 0 or not hasattr(os, "getloadavg"):
        return
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    load = os.getloadavg()[0]
    if world.local_size > cpus - load + 0.5:
        warnings.warn(f"{world.local_size} processes on this machine but the load average is {load:.1f} on {cpus} "
                      f"CPUs: fewer CPUs are free than processes, so every step waits for the slowest one (use "
                      f"{max(1, int(cpus - load + 0.5))} with --nproc-per-node or --processes, or wait for an idle machine).",
                      UserWarning, stacklevel=2)
