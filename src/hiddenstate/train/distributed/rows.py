"""How a rank's rows are cut from the batch, and the generator that draws its dropout masks."""

from __future__ import annotations

import numpy as np

__all__ = ["RowGenerator", "batch_rows", "stream_rows"]


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
    """The run's generator, seen by one rank: (T, N, X) draws are drawn whole and cut to its rows.

    Every mask of the character model is drawn with ``random(shape)``: DropConnect masks of a
    recurrent weight (2-D, the same for every row) and dropout masks of a layer's output, which
    are 3-D and time-major, (T, n, X) with ``n`` this rank's rows. A 3-D draw is drawn for the
    whole batch, (T, N, X), and rows ``[lo, hi)`` are returned, so every rank consumes the same
    numbers in the same order as the single-process run and uses its own rows of them.

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
            return super().random((size[0], self.batch_size, size[2]), dtype=dtype)[:, self.rows]
        return super().random(size, dtype=dtype, out=out)


