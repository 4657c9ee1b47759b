"""How a rank's rows are cut from the batch, and the generator that draws its dropout masks."""

from __future__ import annotations

import numpy as np

__all__ = ["RankRows", "RowGenerator", "batch_rows", "stream_rows"]


def batch_rows(rank: int, size: int, batch_size: int) -> slice:
    """Rank ``rank``'s rows ``[r N/K, (r+1) N/K)`` of a batch of N rows split over K ranks.

    Parameters
    ----------
    rank, size : int
        r and K.
    batch_size : int
        N, a multiple of K.

    Returns
    -------
    slice
    """
    n = batch_size // size
    return slice(rank * n, (rank + 1) * n)


def stream_rows(rank: int, size: int, n_rows: int) -> slice:
    """Rank ``rank``'s share of ``n_rows`` validation streams (as even as it can be; some may get none).

    Parameters
    ----------
    rank, size : int
    n_rows : int

    Returns
    -------
    slice
    """
    bounds = np.linspace(0, n_rows, size + 1).round().astype(int)
    return slice(int(bounds[rank]), int(bounds[rank + 1]))


class RowGenerator(np.random.Generator):
    """The run's generator, seen by one rank: it draws its rows of a (T, N, X) mask and skips the others'.

    Every mask of the character model is drawn with ``random(shape)``: DropConnect masks of a
    recurrent weight (2-D, the same for every row) and dropout masks of a layer's output, which
    are 3-D and time-major, (T, n, X) with ``n`` this rank's rows. The single-process run draws
    the whole batch's (T, N, X) block in C order, so at step ``t`` the numbers of rows
    ``[lo, hi)`` are the contiguous run ``[(t N + lo) X, (t N + hi) X)`` of the stream: a rank
    draws those and advances the generator past the other rows' numbers without drawing them
    (PCG64's ``advance``, a jump of the 128-bit LCG). It thus consumes the same numbers in the
    same order as the single-process run and uses its own rows of them, at ``n/N`` of the cost.

    float32 numbers take 32 bits each: PCG64 hands out the low half of a 64-bit output and keeps
    the high half for the next one (``has_uint32``), so a skip of ``k`` of them uses the kept half
    first, jumps ``k // 2`` outputs and, for an odd rest, draws one number to keep the other half
    as the whole draw would. A bit generator without ``advance`` draws the whole block and cuts it.

    Parameters
    ----------
    parent : numpy.random.Generator
        The run's generator; its bit generator is shared (draws advance it).
    rows : slice
        This rank's rows ``[lo, hi)`` of the batch.
    batch_size : int
        N, the rows of the whole batch.
    """

    def __init__(self, parent: np.random.Generator, rows: slice, batch_size: int):
        super().__init__(parent.bit_generator)
        self.rows, self.batch_size = rows, batch_size
        self._jumps = isinstance(parent.bit_generator, (np.random.PCG64, np.random.PCG64DXSM))

    def random(self, size=None, dtype=np.float64, out=None):
        """Uniform [0, 1) numbers; a 3-D ``size`` (T, n, X) is this rank's rows of a (T, N, X) draw.

        Parameters
        ----------
        size : tuple of int, optional
        dtype : {numpy.float64, numpy.float32}, default float64
        out : ndarray, optional
            Only for draws that are not 3-D.

        Returns
        -------
        ndarray or float

        Raises
        ------
        RuntimeError
            A 3-D draw whose second axis is not this rank's number of rows (a mask of another
            layout would be cut wrongly, so it is refused instead).
        """
        if size is not None and np.ndim(size) == 1 and len(size) == 3:
            n = self.rows.stop - self.rows.start
            if size[1] != n or out is not None:
                raise RuntimeError(f"a (T, N, X) mask of shape {tuple(size)} does not match this rank's {n} rows")
            dtype = np.dtype(dtype)
            if not self._jumps or dtype not in (np.float64, np.float32) or n == self.batch_size:
                return super().random((size[0], self.batch_size, size[2]), dtype=dtype)[:, self.rows]
            return self._rows_of_block(int(size[0]), n, int(size[2]), dtype)
        return super().random(size, dtype=dtype, out=out)

    def _rows_of_block(self, T: int, n: int, X: int, dtype: np.dtype) -> np.ndarray:
        """Rows ``[lo, hi)`` of a (T, N, X) draw: draw n X numbers, skip (N - n) X, T times."""
        lo, N = self.rows.start, self.batch_size
        block = np.empty((T, n, X), dtype=dtype)
        state = self.bit_generator.state
        kept, half = bool(state["has_uint32"]), state["uinteger"]  # read once, then followed
        draw = super().random
        for t in range(T):
            kept = self._skip((lo if t == 0 else N - n) * X, dtype, kept)
            draw(dtype=dtype, out=block[t])
            kept = kept != bool((n * X) % 2) if dtype == np.float32 else kept
        self._skip((N - lo - n) * X, dtype, kept)
        if dtype == np.float64 and kept:  # 64-bit draws leave a kept half alone; advance() dropped it
            state = self.bit_generator.state
            state["has_uint32"], state["uinteger"] = 1, half
            self.bit_generator.state = state
        return block

    def _skip(self, count: int, dtype: np.dtype, kept: bool) -> bool:
        """Advance past ``count`` numbers of ``dtype`` as drawing them would; returns whether a half is kept."""
        if count == 0:
            return kept
        if dtype == np.float64:
            self.bit_generator.advance(count)  # one 64-bit output a number (the kept half is restored after)
            return kept
        if kept:  # the kept high half is the first number
            super().random(dtype=dtype)
            count -= 1
        if count // 2:
            self.bit_generator.advance(count // 2)  # resets the kept half; none is kept here
        if count % 2:
            super().random(dtype=dtype)  # the low half of one output; its high half is kept
            return True
        return False


class RankRows:
    """A rank's rows of the batch, its carried state and its masks (the part of :class:`TorchWorld` about rows).

    Mixed into :class:`~hiddenstate.train.distributed.TorchWorld`, which provides ``rank``,
    ``size``, ``leader`` and ``_gather_object``.
    """

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
