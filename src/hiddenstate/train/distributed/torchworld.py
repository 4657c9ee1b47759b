"""One rank of a run on ``torch.distributed``: the process group, the collectives, the setup checks.

torch is imported by :func:`hiddenstate.train.distributed.join` and handed in, so this module
loads without it.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import socket
import time

import numpy as np

from hiddenstate.train.distributed.buckets import BUCKET_ELEMENTS, GradientBuckets, agreed, stop_slots
from hiddenstate.train.distributed.rows import RankRows, stream_rows
from hiddenstate.train.distributed.store import rendezvous
from hiddenstate.train.distributed.world import (
    LostRank,
    PeerFailed,
    RendezvousFailed,
    World,
    alive,
    env_int,
    first_sentence,
    one_line,
    timeout_s,
)

__all__ = ["TorchWorld"]


def _describe_address() -> str:
    return f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"


class TorchWorld(RankRows, World):
    """One rank of a run on ``torch.distributed`` (gloo on CPUs, NCCL on GPUs).

    Joins the process group on construction (``init_method="env://"``: torchrun's ``MASTER_ADDR``,
    ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``) with the timeout of every collective. Ranks started
    by hand on a loopback ``MASTER_ADDR`` listen there only (:mod:`~hiddenstate.train.distributed.store`).

    Parameters
    ----------
    rank, size : int
        This process's rank and the number of processes.
    device : str
        The run's ``--device`` (see :func:`join`).
    torch, dist : module
        ``torch`` and ``torch.distributed``, imported by :func:`join`.

    Raises
    ------
    ValueError
        ``--device cupy`` or an explicit ``cuda:K``.
    RendezvousFailed
        The group could not be formed.
    """

    def __init__(self, rank: int, size: int, device: str, torch, dist):
        if rank >= size:
            raise ValueError(f"RANK must be below WORLD_SIZE={size}; got {rank}.")
        self.rank, self.size, self.leader = rank, size, rank == 0
        self.local_rank = env_int("LOCAL_RANK") if os.environ.get("LOCAL_RANK") else 0
        self.local_size = env_int("LOCAL_WORLD_SIZE") if os.environ.get("LOCAL_WORLD_SIZE") else 1
        self.torch, self.dist = torch, dist
        self.timeout_s = timeout_s()
        self.device = self._device(device)
        self.step = 0  # the step being taken, for messages
        backend = "nccl" if self.device.startswith(("cuda", "torch:cuda")) else "gloo"
        if backend == "nccl":  # the objects of all_gather_object/broadcast travel on the current GPU: this rank's
            torch.cuda.set_device(self.local_rank)
        self.owns_group = not dist.is_initialized()  # a script may have joined the group itself
        if self.owns_group:
            try:
                joining = rendezvous(dist, rank, size, self.timeout_s)  # env://, or a store on loopback only
                dist.init_process_group(backend=backend, rank=rank, world_size=size, **joining,
                                        timeout=datetime.timedelta(seconds=self.timeout_s))
            except Exception as error:  # DistStoreError, RuntimeError (EADDRINUSE), ValueError, ...
                raise RendezvousFailed(
                    f"rank {rank} of {size} could not join the run at {_describe_address()} within "
                    f"{self.timeout_s:g} s ({one_line(error)}). Check --rdzv-endpoint / MASTER_ADDR:MASTER_PORT "
                    "(reachable, and a port no other program uses) and that every process was started.") from None
        elif (dist.get_rank(), dist.get_world_size()) != (rank, size):
            raise ValueError(f"the process group already joined is rank {dist.get_rank()} of {dist.get_world_size()}, "
                             f"but RANK={rank} and WORLD_SIZE={size}; leave it or fix the environment.")
        else:
            backend = dist.get_backend()
        self.tensor_device = torch.device("cpu") if backend == "gloo" else torch.device("cuda", self.local_rank)
        self.bucket_elements = BUCKET_ELEMENTS
        self._plan = self._buckets = self._probe = self._agreed = None
        self._counted = False
        self.peers = self._gather_object({"host": socket.gethostname(), "pid": os.getpid()})

    # -- devices and collectives --------------------------------------------------------------------
    def _device(self, device: str) -> str:
        if device == "cupy":
            raise ValueError("device must be cpu, torch:cpu or cuda (torch) for a run of several processes; got "
                             "'cupy' (torch.distributed reduces torch tensors). Use --device cuda.")
        if device in ("cuda", "torch:cuda"):
            return f"cuda:{self.local_rank}"  # one GPU per rank: LOCAL_RANK's
        if device.startswith(("cuda:", "torch:cuda:")):
            raise ValueError(f"device must be cuda (each rank uses GPU LOCAL_RANK) for a run of several processes; "
                             f"got {device!r}. Use --device cuda.")
        return device

    def run_device(self, device: str) -> str:
        """The ``--device`` this rank trains on (``cuda`` becomes ``cuda:LOCAL_RANK``).

        Parameters
        ----------
        device : str
            The run's ``--device`` (checked when the group was joined).

        Returns
        -------
        str
        """
        return self.device

    def _lost(self, error: BaseException, doing: str) -> LostRank:
        here = socket.gethostname()
        local = [(r, p["pid"]) for r, p in enumerate(self.peers or ()) if r != self.rank and p["host"] == here]
        dead, end = [], time.monotonic() + 2.0
        while local and not dead and time.monotonic() < end:  # a killed peer's sockets close before it is a zombie
            dead = [f"rank {r} (pid {pid})" for r, pid in local if not alive(pid)]
            if not dead:
                time.sleep(0.05)
        who = (" and ".join(dead) + (" was" if len(dead) == 1 else " were") + " lost" if dead
               else "another rank was lost or stopped answering")
        return LostRank(f"rank {self.rank} stopped at step {self.step}: {who} during {doing} "
                        f"({first_sentence(error)}).")

    def _collective(self, doing: str, call, *args, **kwargs):
        try:
            return call(*args, **kwargs)
        except Exception as error:  # DistBackendError / RuntimeError: a closed peer or the timeout
            raise self._lost(error, doing) from None

    def _gather_object(self, value) -> list:
        out = [None] * self.size
        self._collective("the start", self.dist.all_gather_object, out, value)
        return out

    # -- the run's setup ------------------------------------------------------------------------------
    def check_request(self, request: dict) -> None:
        """Refuse the run unless every rank was started with the same flags.

        Parameters
        ----------
        request : dict
            What this rank was asked to do (the flags and the settings), JSON-encodable.

        Raises
        ------
        ValueError
            On every rank, naming the ranks and the flags that differ.
        """
        flat = {k: v for k, v in request.items() if k != "config"}
        flat.update(request.get("config") or {})  # the flags of the run, each compared on its own
        mine = json.loads(json.dumps(flat, sort_keys=True, default=str))
        everyone = self._gather_object(mine)
        for r, theirs in enumerate(everyone):
            if theirs != everyone[0]:
                keys = sorted(k for k in set(theirs) | set(everyone[0]) if theirs.get(k) != everyone[0].get(k))
                shown = ", ".join(f"{_flag(k)} {everyone[0].get(k)!r} on rank 0 but {theirs.get(k)!r} on rank {r}"
                                  for k in keys)
                raise ValueError(f"every process of a run must be started with the same flags; got {shown}. "
                                 "Start them all with the same command line.")

    def share(self, value=None, *, failed: BaseException | None = None):
        """The leader's ``value`` on every rank, or its refusal as :class:`PeerFailed` on the others.

        Parameters
        ----------
        value : object, optional
            On the leader: what the followers need (pickled).
        failed : BaseException, optional
            On the leader: the error that ends the run before it starts (followers then raise
            :class:`PeerFailed`, the leader re-raises ``failed``).

        Returns
        -------
        object
            The leader's value.

        Raises
        ------
        PeerFailed
            On a follower, when the leader failed.
        """
        box = [("failed", type(failed).__name__) if failed is not None else ("ok", value)] if self.leader else [None]
        self._collective("the start", self.dist.broadcast_object_list, box, src=0)
        status, payload = box[0]
        if failed is not None:
            raise failed
        if status == "failed":
            raise PeerFailed(f"rank 0 refused the run ({payload}); its message says why.")
        return payload

    def check_ready(self, error: BaseException | None, *, text_sha256: str, batch_size: int) -> None:
        """Refuse the run unless every rank is ready with the same text and a batch that splits.

        Parameters
        ----------
        error : BaseException or None
            This rank's own failure to set up (a missing ``--data`` file, memory, ...).
        text_sha256 : str
            The SHA-256 of the text this rank read.
        batch_size : int
            N, ``--batch-size``.

        Raises
        ------
        ValueError
            On every rank: a ``--batch-size`` that is not a multiple of the number of processes,
            a rank whose ``--data`` differs from rank 0's, or another rank's setup error (named).
        """
        mine = None if error is None else f"{type(error).__name__}: {one_line(error)}"
        reports = self._gather_object({"error": mine, "sha256": text_sha256})
        if error is not None:
            raise error
        for r, report in enumerate(reports):
            if report["error"] is not None:
                raise PeerFailed(f"rank {r} could not start: {report['error']}") if not self.leader else \
                    ValueError(f"rank {r} could not start: {report['error']}")
        if batch_size % self.size:
            raise ValueError(f"batch_size must be a multiple of the number of processes ({self.size}) so that each "
                             f"reads the same number of rows; got {batch_size}. Use --batch-size "
                             f"{max(self.size, batch_size - batch_size % self.size)} or another multiple of {self.size}.")
        for r, report in enumerate(reports):
            if report["sha256"] != reports[0]["sha256"]:
                raise ValueError(f"data must be the same text on every process; rank {r} read a text whose SHA-256 "
                                 f"({report['sha256'][:12]}...) differs from rank 0's ({reports[0]['sha256'][:12]}...). "
                                 "Give every machine the same --data file.")

    # -- the step --------------------------------------------------------------------------------------
    def watch(self, probe) -> None:
        """Let the stop agreement ride in the step's last bucket: ``probe()`` gives this rank's part.

        Parameters
        ----------
        probe : callable or None
            Returns ``(out_of_time, signum)`` when the last bucket starts (after the backward
            pass); None: the agreement is a collective of its own (:meth:`agree`), as it must be
            when a callback decides after the step.
        """
        self._probe = probe

    def local(self, compute, params: dict, groups=None):
        """This rank's part of a step, its gradient reduced bucket by bucket as the backward pass finishes it.

        ``compute(ready=...)`` gets :meth:`GradientBuckets.ready
        <hiddenstate.train.distributed.buckets.GradientBuckets.ready>` for NumPy parameters. A
        floating-point error in it becomes a NaN loss and zero gradients: the step's all-reduce
        then carries the NaN to every rank, which all stop as diverged at the same step (a rank
        that raised alone would leave the others waiting for it).

        Parameters
        ----------
        compute : callable
            ``compute(ready=None)`` returns ``(loss, grads, carry)``.
        params : dict of str to ndarray
            The model's parameters (the shapes of the gradients).
        groups : list of list of str, optional
            The keys in the order the backward pass finishes them
            (:meth:`~hiddenstate.train.model.CharRNN.gradient_groups`); None: one bucket.

        Returns
        -------
        tuple of (float, dict, object)
        """
        first = next(iter(params.values()))
        self.step, self._counted = self.step + 1, True
        self._buckets = self._buckets_for(params, groups) if isinstance(first, np.ndarray) else None
        try:
            return compute(ready=None if self._buckets is None else self._buckets.ready)
        except FloatingPointError:
            return float("nan"), {k: np.zeros_like(v) for k, v in params.items()}, None

    def _buckets_for(self, params: dict, groups) -> GradientBuckets:
        key = (tuple(map(tuple, groups or [list(params)])), next(iter(params.values())).dtype, self.bucket_elements)
        if self._plan is None or self._plan[0] != key:
            self._plan = (key, GradientBuckets(params, groups or [list(params)], self._start, self._wait, self.size,
                                               self.torch, self.bucket_elements))
        self._plan[1].begin()
        return self._plan[1]

    def _start(self, tensor):
        return self._collective(f"the gradient all-reduce of step {self.step}", self.dist.all_reduce, tensor,
                                async_op=True)

    def _wait(self, work) -> None:
        self._collective(f"the gradient all-reduce of step {self.step}", work.wait)

    def average(self, loss, grads: dict):
        """The whole batch's mean loss and gradient: ``(1/K) sum_r`` of every rank's, in the step's one all-reduce.

        NumPy gradients: the buckets :meth:`local` started, and the last one with the loss and
        the stop agreement (:mod:`~hiddenstate.train.distributed.buckets`); each is waited for
        here, before the update. torch tensors (``--device torch:cpu``/``cuda``) are concatenated
        on their device with the same extras and reduced at once.

        Parameters
        ----------
        loss : float or 0-d array
            This rank's mean loss over its rows (nats per character).
        grads : dict of str to ndarray or tensor
            Its gradients.

        Returns
        -------
        loss : float
            The batch's mean loss.
        grads : dict of str to ndarray or tensor
            The batch's gradient (the same values on every rank).
        """
        torch = self.torch
        self.step, self._counted = self.step + (not self._counted), False
        probe = self._probe
        slots = stop_slots(self.leader, *probe()) if probe is not None else []
        if isinstance(next(iter(grads.values())), np.ndarray):
            buckets = self._buckets if self._buckets is not None else self._buckets_for(grads, None)
            self._buckets = None
            total, reduced, summed = buckets.finish(loss, grads, slots)
        else:
            parts = [g.reshape(-1) for g in grads.values()]
            extras = torch.tensor([float(loss), *slots], dtype=parts[0].dtype, device=parts[0].device)
            flat = torch.cat([*parts, extras]) * (1.0 / self.size)
            self._collective(f"the gradient all-reduce of step {self.step}", self.dist.all_reduce, flat)
            reduced, offset = {}, 0
            for key, g in grads.items():
                n = g.numel()
                reduced[key] = flat[offset: offset + n].reshape(g.shape)
                offset += n
            total, summed = float(flat[offset]), (flat[offset + 1:] * self.size).tolist()
        self._agreed = agreed(summed) if probe is not None else None
        return total, reduced

    def val_rows(self, n_rows: int) -> slice:
        """This rank's share of the ``n_rows`` validation streams (as even as it can be).

        Parameters
        ----------
        n_rows : int

        Returns
        -------
        slice
        """
        return stream_rows(self.rank, self.size, n_rows)

    def sum(self, *values: float) -> tuple:
        """``values`` summed over the ranks (float64, one all-reduce).

        Parameters
        ----------
        *values : float

        Returns
        -------
        tuple of float
        """
        t = self.torch.tensor(values, dtype=self.torch.float64, device=self.tensor_device)
        self._collective(f"a reduction at step {self.step}", self.dist.all_reduce, t)
        return tuple(float(v) for v in t.tolist())

    def agree(self, out_of_time: bool, stop: bool, signum) -> tuple:
        """The stop decision shared by every rank: the leader's time limit, a callback or any rank's signal.

        After a step whose last bucket carried the agreement (:meth:`watch`) it is that one, with
        no collective of its own; otherwise an all-reduce of its own.

        Parameters
        ----------
        out_of_time, stop : bool
            This rank's time limit and callback decision (only the leader's clock counts).
        signum : int or None
            The signal this rank received.

        Returns
        -------
        tuple of (bool, bool, int or None)
        """
        carried, self._agreed = self._agreed, None
        if carried is not None and not stop:
            return carried[0], False, carried[1]
        flags = self.torch.tensor([float(out_of_time and self.leader), float(stop), float(signum or 0)],
                                  dtype=self.torch.float64, device=self.tensor_device)
        self._collective(f"the stop decision of step {self.step}", self.dist.all_reduce, flags,
                         op=self.dist.ReduceOp.MAX)
        t, s, g = flags.tolist()
        return bool(t), bool(s), (int(g) or None)

    def signal(self, agreed, received):
        """The signal that stops the run after this step: the one agreed by :meth:`agree`.

        A signal that arrived after the agreement is kept for the next step's (the ranks must stop
        at the same step).

        Parameters
        ----------
        agreed, received : int or None

        Returns
        -------
        int or None
        """
        return agreed

    def check_same_weights(self, params: dict) -> None:
        """Refuse weights that differ between ranks (a digest of every parameter, compared at each save).

        Parameters
        ----------
        params : dict of str to ndarray

        Raises
        ------
        RuntimeError
            When a rank's weights differ from rank 0's.
        """
        digest = hashlib.sha256()
        for key in sorted(params):
            digest.update(np.ascontiguousarray(params[key]).tobytes())
        digests = self._gather_object(digest.hexdigest())
        bad = [r for r, d in enumerate(digests) if d != digests[0]]
        if bad:
            raise RuntimeError(f"the weights of rank(s) {bad} differ from rank 0's at step {self.step}: the ranks "
                               "no longer train the same model (please report it).")

    def leave(self) -> None:
        """Leave the process group (destroyed if :func:`join` created it; a script's own group is kept)."""
        if self.owns_group and self.dist.is_initialized():
            with contextlib.suppress(Exception):  # leaving after a lost rank
                self.dist.destroy_process_group()


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


