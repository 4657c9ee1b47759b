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

from hiddenstate.train.distributed.rows import RowGenerator, batch_rows, stream_rows
from hiddenstate.train.distributed.store import rendezvous
from hiddenstate.train.distributed.world import LostRank, PeerFailed, RendezvousFailed, World, env_int, timeout_s

__all__ = ["TorchWorld"]


def _describe_address() -> str:
    return f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


class TorchWorld(World):
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
                    f"{self.timeout_s:g} s ({_one_line(error)}). Check --rdzv-endpoint / MASTER_ADDR:MASTER_PORT "
                    "(reachable, and a port no other program uses) and that every process was started.") from None
        elif (dist.get_rank(), dist.get_world_size()) != (rank, size):
            raise ValueError(f"the process group already joined is rank {dist.get_rank()} of {dist.get_world_size()}, "
                             f"but RANK={rank} and WORLD_SIZE={size}; leave it or fix the environment.")
        else:
            backend = dist.get_backend()
        self.tensor_device = torch.device("cpu") if backend == "gloo" else torch.device("cuda", self.local_rank)
        self._bucket = None
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
            dead = [f"rank {r} (pid {pid})" for r, pid in local if not _alive(pid)]
            if not dead:
                time.sleep(0.05)
        who = (" and ".join(dead) + (" was" if len(dead) == 1 else " were") + " lost" if dead
               else "another rank was lost or stopped answering")
        return LostRank(f"rank {self.rank} stopped at step {self.step}: {who} during {doing} "
                        f"({_first_sentence(error)}).")

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
        mine = None if error is None else f"{type(error).__name__}: {_one_line(error)}"
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

    # -- rows ------------------------------------------------------------------------------------------
    def rows_of(self, batch_size: int) -> slice:
        """This rank's rows ``[r N/K, (r+1) N/K)`` of the batch.

        Parameters
        ----------
        batch_size : int
            N, a multiple of the number of ranks K.

        Returns
        -------
        slice
        """
        return batch_rows(self.rank, self.size, batch_size)

    def mask_generator(self, rng: np.random.Generator, batch_size: int) -> np.random.Generator:
        """:class:`RowGenerator` of ``rng`` for this rank's rows.

        Parameters
        ----------
        rng : numpy.random.Generator
            The run's generator.
        batch_size : int
            N.

        Returns
        -------
        RowGenerator
        """
        self.batch_size = batch_size
        return RowGenerator(rng, self.rows_of(batch_size), batch_size)

    def shard(self, chunk):
        """This rank's rows of the step's chunk.

        Parameters
        ----------
        chunk : tuple of ndarray of shape (T, N)
            Inputs and targets.

        Returns
        -------
        tuple of ndarray of shape (T, N/K)
        """
        rows = self.rows_of(chunk[0].shape[1])
        return tuple(np.ascontiguousarray(part[:, rows]) for part in chunk)

    def shard_state(self, state):
        """This rank's rows of a carried state restored from a checkpoint.

        Parameters
        ----------
        state : ndarray of shape (L, N, H), a pair of them, or None

        Returns
        -------
        ndarray of shape (L, N/K, H), a pair, or None
        """
        if state is None:
            return None
        if isinstance(state, tuple):
            return tuple(self.shard_state(s) for s in state)
        return np.ascontiguousarray(state[:, self.rows_of(state.shape[1])])

    def gather_state(self, state):
        """Every row's carried state, concatenated on the leader (followers get None).

        Parameters
        ----------
        state : ndarray of shape (L, N/K, H), a pair, or None
            This rank's rows (the same structure on every rank).

        Returns
        -------
        ndarray of shape (L, N, H), a pair, or None
        """
        parts = self._gather_object(state)  # a few MB at most, at a checkpoint: pickled is simple and exact
        if not self.leader or parts[0] is None:
            return None
        if isinstance(parts[0], tuple):
            return tuple(np.concatenate([p[i] for p in parts], axis=1) for i in range(len(parts[0])))
        return np.concatenate(parts, axis=1)

    # -- the step --------------------------------------------------------------------------------------
    def local(self, compute, params: dict):
        """This rank's part of a step; a floating-point error in it becomes a NaN loss and zero gradients.

        The step's all-reduce then carries the NaN to every rank, which all stop as diverged at the
        same step (a rank that raised alone would leave the others waiting for it).

        Parameters
        ----------
        compute : callable
            Returns ``(loss, grads, carry)``.
        params : dict of str to ndarray
            The model's parameters (the shapes of the gradients).

        Returns
        -------
        tuple of (float, dict, object)
        """
        try:
            return compute()
        except FloatingPointError:
            return float("nan"), {k: np.zeros_like(v) for k, v in params.items()}, None

    def average(self, loss, grads: dict):
        """The whole batch's mean loss and gradient: ``(1/K) sum_r`` of every rank's, in one all-reduce.

        NumPy gradients are packed (scaled by 1/K in the same pass) into one flat buffer, reduced
        in place through ``torch.from_numpy`` (no copy) and handed back as views of it; torch
        tensors (``--device torch:cpu``/``cuda``) are concatenated on their device. The loss rides
        in float64 in a second, one-element reduction.

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
        torch, scale = self.torch, 1.0 / self.size
        self.step += 1
        first = next(iter(grads.values()))
        if isinstance(first, np.ndarray):
            flat = self._numpy_bucket(grads)
            offset = 0
            for g in grads.values():
                np.multiply(g.reshape(-1), first.dtype.type(scale), out=flat[offset: offset + g.size])
                offset += g.size
            self._collective(f"the gradient all-reduce of step {self.step}", self.dist.all_reduce, self._bucket[1])
            reduced, offset = {}, 0
            for key, g in grads.items():
                reduced[key] = flat[offset: offset + g.size].reshape(g.shape)
                offset += g.size
        else:
            flat = torch.cat([g.reshape(-1) for g in grads.values()]) * scale
            self._collective(f"the gradient all-reduce of step {self.step}", self.dist.all_reduce, flat)
            reduced, offset = {}, 0
            for key, g in grads.items():
                n = g.numel()
                reduced[key] = flat[offset: offset + n].reshape(g.shape)
                offset += n
        total = self.sum(float(loss) * scale)[0]
        return total, reduced

    def _numpy_bucket(self, grads: dict) -> np.ndarray:
        size = sum(g.size for g in grads.values())
        dtype = next(iter(grads.values())).dtype
        if self._bucket is None or self._bucket[0].size != size or self._bucket[0].dtype != dtype:
            flat = np.empty(size, dtype=dtype)
            self._bucket = (flat, self.torch.from_numpy(flat))  # one buffer for the run; the tensor shares it
        return self._bucket[0]

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
        """The stop decision shared by every rank: any rank's time limit, callback or signal stops all.

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


def _first_sentence(error: BaseException) -> str:
    """The start of a backend's message, up to its first sentence (gloo's go on for lines)."""
    text = _one_line(error)
    cut = text.find(". ")
    text = text if cut < 0 else text[:cut]
    return text if len(text) <= 160 else text[:157] + "..."


def _alive(pid: int) -> bool:
    """Whether process ``pid`` on this machine still runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


