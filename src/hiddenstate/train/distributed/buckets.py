"""A step's gradient in buckets, reduced while the backward pass still runs (the scheme of torch's DDP).

The backward pass of the character model finishes its gradients in groups
(:meth:`~hiddenstate.train.model.CharRNN.gradient_groups`): the decoder's first, then each
recurrent layer's from the top down. :class:`GradientBuckets` lays every gradient out in that
order in one flat buffer, cut into buckets at group boundaries (a bucket closes at the first
boundary past :data:`BUCKET_ELEMENTS`); as a group arrives (:meth:`GradientBuckets.ready`) it is
scaled by ``1/K`` into its place, and a bucket whose groups have all arrived starts its
all-reduce at once (``async_op=True``) while the layers below run their BPTT. The last bucket
starts when the backward pass has returned, with the step's extras at its end: the loss (its
``1/K`` share) and the stop agreement (the leader's time limit, one slot per signal), so a step
costs one collective per bucket and no other. :meth:`GradientBuckets.finish` waits for every
bucket, in order, just before the update.

The sum of each element is the same sum as an all-reduce of the whole buffer (the same K
values, added by the same backend), so the bucketed gradient equals the unbucketed one.
"""

from __future__ import annotations

import itertools
import signal

import numpy as np

__all__ = ["BUCKET_ELEMENTS", "EXTRAS", "SIGNAL_SLOTS", "GradientBuckets", "agreed", "stop_slots"]

#: A bucket closes at the first group boundary after this many elements (1 MiB of float32, DDP's
#: first bucket); the long preset's model (2 GRU layers of 512) gets two: decoder and top layer,
#: then the bottom layer with the extras.
BUCKET_ELEMENTS = 1 << 18

#: The signals the stop agreement carries, one slot each (a rank that received one adds 1).
SIGNAL_SLOTS = tuple(int(s) for s in (getattr(signal, "SIGINT", None), getattr(signal, "SIGTERM", None))
                     if s is not None)

#: The extras at the end of the last bucket: the loss, the leader's time limit, one slot per signal.
EXTRAS = 2 + len(SIGNAL_SLOTS)


class GradientBuckets:
    """The buffers and the in-flight all-reduces of a step's gradient on one rank.

    Parameters
    ----------
    params : dict of str to ndarray
        The model's parameters (the shapes and dtype of the gradients).
    groups : list of list of str
        The keys in the order the backward pass finishes them; keys of ``params`` in no group
        form a last one (in ``params``' order).
    start, wait : callable
        ``start(tensor)`` starts the all-reduce (sum) of a torch tensor and returns its work
        handle; ``wait(work)`` waits for it (the world's collectives, with their error handling).
    size : int
        K, the number of ranks (gradients and loss are scaled by ``1/K``).
    torch : module
    cap : int, default BUCKET_ELEMENTS
        The elements after which a bucket closes at the next group boundary.

    Attributes
    ----------
    buckets : list of tuple of (int, int)
        ``[start, stop)`` of each bucket in the flat buffer; the last one ends with the extras.
    """

    def __init__(self, params: dict, groups, start, wait, size: int, torch, cap: int = BUCKET_ELEMENTS):
        order = [k for g in groups for k in g if k in params]
        rest = [k for k in params if k not in set(order)]
        groups = [[k for k in g if k in params] for g in groups] + ([rest] if rest else [])
        self.dtype = next(iter(params.values())).dtype
        self.where, offset, cuts = {}, 0, []
        for group in groups:
            for key in group:
                self.where[key] = (offset, params[key].shape)
                offset += params[key].size
            if group and offset - (cuts[-1] if cuts else 0) >= cap:
                cuts.append(offset)
        self.total = offset
        cuts = [c for c in cuts if c < offset]  # the last bucket always ends at the gradient's end
        bounds = [0, *cuts, offset + EXTRAS]
        self.buckets = list(itertools.pairwise(bounds))
        self.flat = np.zeros(offset + EXTRAS, dtype=self.dtype)
        tensor = torch.from_numpy(self.flat)  # shares the buffer: reduced in place, no copy
        self.tensors = [tensor[a:b] for a, b in self.buckets]
        self.missing0 = [sum(1 for k, (o, _) in self.where.items() if a <= o < b) for a, b in self.buckets]
        self.start, self.wait, self.scale = start, wait, self.dtype.type(1.0 / size)
        self.torch = torch
        self.begin()

    def begin(self) -> None:
        """A new step: nothing packed, nothing in flight."""
        self.packed: set[str] = set()
        self.missing = list(self.missing0)
        self.works: list = []

    def _bucket_of(self, offset: int) -> int:
        for i, (a, b) in enumerate(self.buckets):
            if a <= offset < b:
                return i
        raise KeyError(offset)

    def ready(self, grads: dict) -> None:
        """Pack final gradients (times ``1/K``) and start every bucket they complete, in order.

        Parameters
        ----------
        grads : dict of str to ndarray
            Some of the model's gradients, final (keys already packed this step are ignored).
        """
        for key, g in grads.items():
            if key in self.packed or key not in self.where:
                continue
            offset, shape = self.where[key]
            np.multiply(np.reshape(g, -1), self.scale, out=self.flat[offset: offset + g.size])
            self.packed.add(key)
            self.missing[self._bucket_of(offset)] -= 1
        last = len(self.buckets) - 1  # the last bucket waits for the extras (finish)
        while len(self.works) < last and self.missing[len(self.works)] == 0:
            self.works.append(self.start(self.tensors[len(self.works)]))

    def finish(self, loss, grads: dict, flags=()) -> tuple:
        """Pack what is left and the extras, start the remaining buckets, wait for all.

        Parameters
        ----------
        loss : float
            This rank's mean loss (NaN after a floating-point error: every rank then sees NaN).
        grads : dict of str to ndarray
            Every gradient (those not yet packed are packed now).
        flags : sequence of float, optional
            The stop agreement's slots (``EXTRAS - 1`` of them), summed over the ranks.

        Returns
        -------
        loss : float
            The batch's mean loss.
        grads : dict of str to ndarray
            The batch's gradient: views of the flat buffer (valid until the next step).
        flags : ndarray of shape (EXTRAS - 1,)
            The slots summed over the ranks.
        """
        self.ready(grads)
        extras = self.flat[self.total:]
        extras[:] = 0
        extras[0] = float(loss) * float(self.scale)
        extras[1: 1 + len(flags)] = flags
        self.missing[-1] = 0
        while len(self.works) < len(self.buckets):
            self.works.append(self.start(self.tensors[len(self.works)]))
        for work in self.works:
            self.wait(work)
        reduced = {key: self.flat[offset: offset + int(np.prod(shape, dtype=np.int64))].reshape(shape)
                   for key, (offset, shape) in self.where.items()}
        out = (float(extras[0]), reduced, extras[1:].copy())
        self.begin()
        return out


def stop_slots(leader: bool, out_of_time: bool, signum) -> list[float]:
    """The stop agreement's slots of one rank: the leader's time limit, then a 1 for the signal received.

    Parameters
    ----------
    leader : bool
        Only the leader's clock counts.
    out_of_time : bool
    signum : int or None
        The signal received (one not in :data:`SIGNAL_SLOTS` counts as the last of them).

    Returns
    -------
    list of float
        ``EXTRAS - 1`` slots.
    """
    slots = [float(bool(out_of_time) and leader)] + [0.0] * len(SIGNAL_SLOTS)
    if signum is not None and SIGNAL_SLOTS:
        slots[1 + (SIGNAL_SLOTS.index(signum) if signum in SIGNAL_SLOTS else len(SIGNAL_SLOTS) - 1)] = 1.0
    return slots


def agreed(slots) -> tuple:
    """The decision of the summed slots: (out_of_time, signal) -- any rank's signal, the largest number.

    Parameters
    ----------
    slots : sequence of float
        :func:`stop_slots` summed over the ranks.

    Returns
    -------
    tuple of (bool, int or None)
    """
    got = [s for s, n in zip(SIGNAL_SLOTS, slots[1:]) if n > 0]
    return bool(slots[0] > 0), (max(got) if got else None)
