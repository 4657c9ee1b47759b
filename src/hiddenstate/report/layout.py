"""The one look of every report: the page around the cards, its header, navigation, cards and small charts.

The GRU report (:mod:`hiddenstate.report.page`) and the report of every other kind
(:mod:`hiddenstate.report.family_page`) are built from these pieces, so they read as one tool:

* :func:`page_html`: the document: the title and subtitle in a coloured header with key facts as
  chips, warnings (what the input cannot show) under it, a sticky navigation bar with one link
  per card, the cards, a footer; the style sheet and script (package data ``static/``) inline;
* :func:`card`: one ``<section class="card">`` with its heading and a muted line of what it shows;
* :func:`line_chart`: a small inline SVG of curves with values in [0, 1], with ticks and numbers
  on both axes, a legend and an optional dashed chance line.

Nothing here imports the probes: a page is built from strings and arrays.
"""

from __future__ import annotations

import datetime as _dt
import functools
import html
from collections.abc import Mapping, Sequence
from importlib import resources

import numpy as np

from hiddenstate.version import __version__

__all__ = ["COLOURS", "card", "line_chart", "page_html", "static"]

#: The curves' colours (colour-blind safe, the figures' palette order).
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")


@functools.cache
def static(name: str) -> str:
    """The text of a file in the package data folder ``hiddenstate/report/static/`` (``report.css``, ``report.js``).

    Parameters
    ----------
    name : str

    Returns
    -------
    str
    """
    return (resources.files("hiddenstate.report") / "static" / name).read_text(encoding="utf-8")


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def card(anchor: str, title: str, what: str, body: str, *, wide: bool = False) -> str:
    """One card of a report.

    Parameters
    ----------
    anchor : str
        Its ``id`` (the navigation links to ``#anchor``).
    title : str
        Its heading (escaped).
    what : str
        What it shows, one muted paragraph (HTML; "" for none).
    body : str
        Its content (HTML).
    wide : bool, default False
        Full width in the grid.

    Returns
    -------
    str
    """
    cls = "card wide" if wide else "card"
    what = f'<p class="what">{what}</p>' if what else ""
    return f'<section class="{cls}" id="{_esc(anchor)}"><h2>{_esc(title)}</h2>{what}{body}</section>'


def _tick(v: float) -> str:
    return f"{v:g}" if v == int(v) else f"{v:.2g}"


def line_chart(curves: Mapping, label: str, *, xlabel: str = "lag", chance=None, width: int = 420,
               height: int = 170) -> str:
    """A small inline SVG line chart of curves with values in [0, 1] against their index, with axis ticks.

    Parameters
    ----------
    curves : mapping of str to array_like of shape (K,)
        Name -> values (clipped to [0, 1] when drawn), one line each; x is the index 0 .. K-1.
    label : str
        The chart's accessible name.
    xlabel : str, default "lag"
        What x counts (written under the axis).
    chance : float, optional
        A dashed horizontal line at this value.
    width, height : int, default 420, 170
        Pixels.

    Returns
    -------
    str
        ``<svg class="chart">`` with ticks and numbers at 0, 0.5, 1 (y) and 0, the middle and the
        last index (x), then a legend line when there is more than one curve or a chance line.
    """
    left, right, top, bottom = 34, 12, 10, 30
    w, h = width - left - right, height - top - bottom
    n = max(max((len(np.asarray(ys).reshape(-1)) for ys in curves.values()), default=1) - 1, 1)

    def x_of(i):
        return left + w * i / n

    def y_of(v):
        return top + h * (1.0 - float(np.clip(v, 0.0, 1.0)))

    parts = [f'<line x1="{left}" y1="{top + h}" x2="{left + w}" y2="{top + h}" stroke="#999"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" stroke="#999"/>']
    for v in (0.0, 0.5, 1.0):
        y = y_of(v)
        parts.append(f'<line x1="{left - 4}" y1="{y:.1f}" x2="{left}" y2="{y:.1f}" stroke="#999"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_tick(v)}</text>')
    for i in sorted({0, n // 2, n}):
        x = x_of(i)
        parts.append(f'<line x1="{x:.1f}" y1="{top + h}" x2="{x:.1f}" y2="{top + h + 4}" stroke="#999"/>'
                     f'<text x="{x:.1f}" y="{top + h + 15}" text-anchor="middle">{i}</text>')
    parts.append(f'<text x="{left + w / 2:.1f}" y="{height - 2}" text-anchor="middle">{_esc(xlabel)}</text>')
    for j, ys in enumerate(curves.values()):
        ys = np.asarray(ys, dtype=np.float64).reshape(-1)
        pts = " ".join(f"{x_of(i):.1f},{y_of(v):.1f}" for i, v in enumerate(ys))
        parts.append(f'<polyline fill="none" stroke="{COLOURS[j % len(COLOURS)]}" stroke-width="2" points="{pts}"/>')
    if chance is not None:
        parts.append(f'<line x1="{left}" y1="{y_of(chance):.1f}" x2="{left + w}" y2="{y_of(chance):.1f}" stroke="#666" '
                     'stroke-dasharray="3,3"/>')
    svg = (f'<svg class="chart" width="{width}" height="{height}" role="img" aria-label="{_esc(label)}">'
           f'{"".join(parts)}</svg>')
    if len(curves) > 1 or chance is not None:
        key = " ".join(f'<span style="color:{COLOURS[j % len(COLOURS)]}">&#9632; {_esc(name)}</span>'
                       for j, name in enumerate(curves))
        svg += f'<div class="key">{key}{" · dashed: chance" if chance is not None else ""}</div>'
    return svg


def page_html(title: str, subtitle: str | None, chips: Mapping, nav: Sequence, content: str, *,
              warnings: Sequence = (), script: bool = True) -> str:
    """A whole report page: header with chips, warnings, navigation, the cards, footer; style and script inline.

    Parameters
    ----------
    title : str
        The page's title and heading (escaped).
    subtitle : str or None
        One line under the title (escaped).
    chips : mapping of str to str
        Key facts shown as chips in the header (already formatted; escaped).
    nav : sequence of (str, str)
        ``(anchor, label)`` of every card, in order.
    content : str
        The cards (HTML).
    warnings : sequence of str, default ()
        Plain sentences shown in a box above the cards (escaped): what the input cannot show.
    script : bool, default True
        Inline the report's script (hover read-outs, the explorer).

    Returns
    -------
    str
        The document, starting ``<!DOCTYPE html>``.
    """
    chip = "".join(f'<span class="chip">{_esc(k)}: <b>{_esc(v)}</b></span>' for k, v in chips.items())
    links = "".join(f'<a href="#{_esc(a)}">{_esc(t)}</a>' for a, t in nav)
    sub = f'<p class="sub">{_esc(subtitle)}</p>' if subtitle else ""
    warn = "".join(f'<p class="warn" role="note"><b>Note:</b> {_esc(w)}</p>' for w in warnings)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    js = f"<script>\n{static('report.js')}</script>" if script else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{_esc(title)}</title><style>\n{static('report.css')}</style></head><body>"
        f"<header><h1>{_esc(title)}</h1>{sub}<div class=\"chips\">{chip}</div></header>"
        f"<nav>{links}</nav><main>{warn}{content}</main>"
        f"<footer>hiddenstate {__version__} · generated {stamp} · self-contained, no network needed</footer>"
        f"{js}</body></html>\n"
    )
