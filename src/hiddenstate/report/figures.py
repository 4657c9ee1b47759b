"""Figure plumbing shared by the report, the training loss plot and the paper reproductions.

matplotlib is imported inside these functions, never at module import, and pyplot never: every
figure is a :class:`matplotlib.figure.Figure` on the Agg canvas, so nothing opens a window and
nothing depends on a global backend.
"""

from __future__ import annotations

import base64
import io
import os
import pathlib

import numpy as np

__all__ = ["COLORS", "KIND_COLORS", "figure", "png_base64", "save_png", "style"]

#: Colour-blind safe palette (Okabe-Ito based), in the order lines are drawn.
COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#7f7f7f", "#F0E442")
#: Colour of each fixed-point kind (:class:`hiddenstate.probe.fixedpoints.FixedPoint`).
KIND_COLORS = {"stable": "#009E73", "marginal": "#E69F00", "saddle": "#D55E00", "unstable": "#CC79A7"}


def style():
    """The house style as a context manager: ``with style(): fig, ax = figure(...)``.

    Returns
    -------
    contextlib.AbstractContextManager
        A :func:`matplotlib.rc_context` with the fonts, greys, grid and colour cycle of the report.
    """
    import matplotlib

    return matplotlib.rc_context({
        "font.size": 9.5,
        "axes.titlesize": 10.5,
        "axes.labelsize": 9.5,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.edgecolor": "#9aa0a6",
        "axes.labelcolor": "#3c4043",
        "axes.grid": True,
        "grid.color": "#e8eaed",
        "grid.linewidth": 0.8,
        "xtick.color": "#5f6368",
        "ytick.color": "#5f6368",
        "legend.frameon": False,
        "legend.fontsize": 8.5,
        "axes.prop_cycle": matplotlib.cycler(color=list(COLORS)),
        "figure.dpi": 100,
        "savefig.dpi": 160,
    })


def figure(width: float = 6.0, height: float = 3.4, ncols: int = 1, **subplots):
    """A new figure on the Agg canvas with a row of ``ncols`` axes.

    Parameters
    ----------
    width, height : float, default 6.0, 3.4
        Size in inches.
    ncols : int, default 1
        Axes side by side; ``ncols=0`` adds no axes (add them yourself, e.g. a 3-D one).
    **subplots
        Passed to :meth:`matplotlib.figure.Figure.subplots` (``sharey=True``, ...).

    Returns
    -------
    fig : matplotlib.figure.Figure
        With the constrained layout.
    axes : matplotlib.axes.Axes, ndarray of Axes, or None
        One Axes for ``ncols=1``, an array for more, None for 0.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, **subplots) if ncols else None
    return fig, axes


def png_base64(fig, *, dpi: float | None = None) -> str:
    """The figure as a PNG, base64-encoded ASCII (for a ``data:`` URI in a self-contained page).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure, saved on a white background.
    dpi : float, optional
        Resolution; default the current ``savefig.dpi`` (160 inside :func:`style`).

    Returns
    -------
    str
        The PNG's bytes in base64, for ``src="data:image/png;base64,..."``.
    """
    buf = io.BytesIO()
    with np.errstate(all="ignore"):  # matplotlib's internals may under/overflow harmlessly
        fig.savefig(buf, format="png", facecolor="white", **({} if dpi is None else {"dpi": float(dpi)}))
    return base64.b64encode(buf.getvalue()).decode("ascii")


def save_png(fig, path, *, dpi: float | None = None) -> pathlib.Path:
    """Write the figure to ``path`` as a PNG, creating parent directories.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure, saved on a white background.
    path : str or os.PathLike
        The PNG file to write.
    dpi : float, optional
        Resolution; default the figure's ``savefig.dpi``.

    Returns
    -------
    pathlib.Path
        The file written.
    """
    out = pathlib.Path(os.fspath(path))
    out.parent.mkdir(parents=True, exist_ok=True)
    with np.errstate(all="ignore"):
        fig.savefig(out, format="png", facecolor="white", **({} if dpi is None else {"dpi": dpi}))
    return out
