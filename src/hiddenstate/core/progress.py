"""The progress bars of long work (tqdm, on stderr, only on a terminal).

``hiddenstate reproduce adding`` trains for minutes and ``hiddenstate inspect`` measures for tens
of seconds; each loop shows a bar that goes away when it ends, so what stays on the screen is
the result. The bar is
switched off when stderr is not a terminal (tqdm's ``disable=None``: pipes, files, the test
suite), so the printed output is the same with and without it.
"""

from __future__ import annotations

import sys

__all__ = ["progress"]


def progress(total: int, desc: str | None, *, unit: str = "step"):
    """A tqdm bar of ``total`` steps named ``desc`` on stderr; a bar that draws nothing for ``desc=None``.

    Parameters
    ----------
    total : int
        Steps the loop will take (the bar's 100%).
    desc : str or None
        The bar's label (e.g. ``"adding: gru T=100"``). None: no bar at all, whatever the
        terminal (a loop called from code that shows its own progress).
    unit : str, default "step"
        What one update counts (shown in the bar's rate).

    Returns
    -------
    tqdm.tqdm
        Use as a context manager and call ``update()`` once a step. ``leave=False``: the bar is
        erased when it closes. Disabled (a no-op object) when stderr is not a TTY.
    """
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=False, file=sys.stderr, dynamic_ncols=True,
                mininterval=0.5, disable=True if desc is None else None)
