"""The epilogue every paper reproduction shares: one result record, one table, one figure path.

Each ``reproduce_*`` function (in :mod:`hiddenstate.experiments.elman`,
:mod:`~hiddenstate.experiments.arjovsky` and :mod:`~hiddenstate.experiments.flipflop`) trains,
measures, and ends with one call to :func:`record`, which draws and saves the figure in the
house style, takes the wall time and assembles the result dict; :func:`format_result` prints
such a dict as a table, ours beside the paper's. The registry and the entry point are in
:mod:`hiddenstate.experiments.reproduce`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from hiddenstate.report.figures import save_png, style

__all__ = ["FIGURE_DPI", "format_result", "record", "stream_rng"]

FIGURE_DPI: float = 110
"""Resolution of the saved figures (dots per inch)."""


def stream_rng(seed: int, stream: int) -> np.random.Generator:
    """An independent generator for one purpose (data, initial weights, ...) of one seeded run.

    Parameters
    ----------
    seed : int
        The run's seed (``hiddenstate reproduce --seed``).
    stream : int
        Which purpose; each experiment numbers its own (e.g. 0 data, 1 weights).

    Returns
    -------
    numpy.random.Generator
        ``numpy.random.default_rng([seed, stream])``: same pair, same numbers.
    """
    return np.random.default_rng([seed, stream])


def record(
    name: str,
    title: str,
    *,
    rows: list,
    metrics: dict,
    settings: dict,
    draw: Callable,
    out_dir,
    started: float,
) -> dict:
    """Draw and save the figure, take the time, and assemble the result of one reproduction.

    Parameters
    ----------
    name : str
        The experiment's name (one of :data:`hiddenstate.experiments.reproduce.EXPERIMENTS`);
        the figure is saved as ``out_dir/NAME.png``.
    title : str
        One line naming the task and the paper's figure.
    rows : list of (str, str, str)
        ``(quantity, ours, paper)`` for the table of :func:`format_result`.
    metrics : dict
        The measured numbers (what the tests assert on).
    settings : dict
        The arguments the experiment ran with.
    draw : callable
        ``draw() -> matplotlib.figure.Figure``; called inside
        :func:`hiddenstate.report.figures.style`.
    out_dir : str or os.PathLike
        Directory for the figure (created if needed).
    started : float
        :func:`time.perf_counter` when the experiment began.

    Returns
    -------
    dict
        ``name``, ``title``, ``rows``, ``metrics``, ``settings``, ``seconds`` (wall time from
        ``started`` to the saved figure) and ``figure`` (path of the PNG, str).
    """
    with style():
        fig = draw()
        path = save_png(fig, Path(os.fspath(out_dir)) / f"{name}.png", dpi=FIGURE_DPI)
    return {
        "name": name,
        "title": title,
        "rows": rows,
        "metrics": metrics,
        "settings": settings,
        "seconds": time.perf_counter() - started,
        "figure": str(path),
    }


def format_result(result: dict) -> str:
    """Render a result of a reproduction as a plain-text table, ours beside the paper's.

    Parameters
    ----------
    result : dict
        As returned by :func:`hiddenstate.experiments.reproduce.run` or a ``reproduce_*``
        function (see :func:`record`).

    Returns
    -------
    str
        A title line, the ``quantity / ours / paper`` table, and a line with the wall time
        and the figure's path.
    """
    head = ("quantity", "ours", "paper")
    rows = [head] + [tuple(str(c) for c in r) for r in result["rows"]]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{result['name']}: {result['title']}"]
    for k, r in enumerate(rows):
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if k == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    lines.append(f"  wall time {result['seconds']:.1f} s; figure {result['figure']}")
    return "\n".join(lines)
