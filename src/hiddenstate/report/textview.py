"""Text coloured by unit activation: the "quote cell" view of Karpathy, Johnson and Fei-Fei (2015).

Every character is a ``<span>`` whose background is the activation of one unit after reading it:
warm for positive and cool for negative values on a scale symmetric about 0, or white to warm for
values that all lie in [0, 1] (gates). Each span carries its step and value (``data-t``,
``data-v``), which the report's script (``static/report.js``) shows on hover.

References
----------
A. Karpathy, J. Johnson, L. Fei-Fei, "Visualizing and understanding recurrent networks",
arXiv:1506.02078, 2015.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

import numpy as np

from hiddenstate.report.figures import COLORS

__all__ = ["background", "colour_scale", "legend_number", "legible", "text_views_html"]

#: What the page shows for a whitespace character inside a token of whitespace only.
_MARKS = {"\n": "↵", "\t": "→", "\r": "␍", " ": "␣"}


def _rgb(hex_color: str) -> tuple[int, int, int]:
    return int(hex_color[1:3], 16), int(hex_color[3:5], 16), int(hex_color[5:7], 16)


_WARM = _rgb(COLORS[1])  # positive activations (213, 94, 0)
_COOL = _rgb(COLORS[0])  # negative activations (0, 114, 178)


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def colour_scale(lo: float, hi: float) -> tuple[str, float, float]:
    """The colour scale of values that range over ``[lo, hi]`` (one unit of one text view).

    Parameters
    ----------
    lo, hi : float
        The smallest and largest value shown.

    Returns
    -------
    mode : {"diverging", "gate", "sequential"}
        ``"diverging"`` (some value negative: cool below 0, warm above, symmetric), ``"gate"``
        (all values in [0, 1]: white at 0 to warm at 1) or ``"sequential"`` (white at ``lo`` to
        warm at ``hi``).
    a, b : float
        The ends of the scale: ``(-s, s)`` with ``s = max(|lo|, |hi|)``, ``(0, 1)`` or ``(lo, hi)``.
    """
    lo, hi = float(lo), float(hi)
    if lo < 0.0:
        s = max(abs(lo), abs(hi))
        return "diverging", -s, s
    if hi <= 1.0:
        return "gate", 0.0, 1.0
    return "sequential", lo, hi


def background(v: float, mode: str, a: float, b: float) -> tuple[int, int, int, float]:
    """The background colour of one value on a :func:`colour_scale` (the page's script does the same).

    Parameters
    ----------
    v : float
        The value.
    mode : {"diverging", "gate", "sequential"}
        From :func:`colour_scale`.
    a, b : float
        The ends of the scale, from :func:`colour_scale`.

    Returns
    -------
    (int, int, int, float)
        Red, green, blue (warm ``(213, 94, 0)`` for positive, cool ``(0, 114, 178)`` for negative
        values) and the opacity ``0.88 * f`` where ``f`` in [0, 1] is ``|v| / b`` (diverging) or
        ``(v - a) / (b - a)``, clipped; 0 on an empty scale.
    """
    if mode == "diverging":
        f = min(abs(v) / b, 1.0) if b > 0 else 0.0
        c = _WARM if v >= 0 else _COOL
    else:
        f = min(max((v - a) / (b - a), 0.0), 1.0) if b > a else 0.0
        c = _WARM
    return c[0], c[1], c[2], 0.88 * f


def legend_number(v: float) -> str:
    """A legend's number with 3 significant digits, as the page's script writes it (``legendNumber``).

    Parameters
    ----------
    v : float

    Returns
    -------
    str
        ``"0"`` for zero; ``f"{v:.3g}"`` read back and shown plainly for 1e-3 <= |v| < 1e5
        (``0.00123``, ``-4.5``, ``12300``); else ``f"{v:.2e}"`` (``-3.20e-05``): a range of
        ``-3.2e-05 to 3.2e-05`` is never shown as ``-0.00 to 0.00``.
    """
    v = float(v)
    if v == 0.0 or not np.isfinite(v):
        return "0" if v == 0.0 else str(v)
    if 1e-3 <= abs(v) < 1e5:
        return f"{float(f'{v:.3g}'):g}"
    return f"{v:.2e}"


def legible(piece: str) -> str:
    """How the page shows one token's piece of text.

    Parameters
    ----------
    piece : str

    Returns
    -------
    str
        A piece of whitespace only has each character shown as a mark (``" "`` -> ``"␣"``,
        ``"\\n"`` -> ``"↵"``, ``"\\t"`` -> ``"→"``); elsewhere a newline becomes ``"↵"``
        followed by the newline itself (the page breaks the line there) and a tab ``"→"``; an
        empty piece is ``"∅"``.

    Raises
    ------
    TypeError
        ``piece`` is not a str.
    """
    if not isinstance(piece, str):
        raise TypeError(f"piece must be a str; got {type(piece).__name__}.")
    if not piece:
        return "∅"
    if piece.isspace():
        return "".join(_MARKS.get(c, "·") for c in piece) + ("\n" if "\n" in piece else "")
    return piece.replace("\t", "→").replace("\r", "").replace("\n", "↵\n")


def _rgba(v: float, lo: float, hi: float, diverging: bool) -> str:
    """The CSS background of one value: warm/cool by sign up to ``hi`` (diverging), else warm in [lo, hi]."""
    r, g, b, alpha = background(v, "diverging" if diverging else "sequential", -hi if diverging else lo, hi)
    return f"rgba({r},{g},{b},{alpha:.2f})"


def _view(idx: int, label: str, text: str, values: np.ndarray) -> str:
    """One unit's view: a legend bar, the coloured characters and the hover read-out ``readout{idx}``."""
    v = np.asarray(values, dtype=np.float64)
    lo, hi = float(np.min(v)), float(np.max(v))
    diverging = lo < 0.0
    scale = max(abs(lo), abs(hi)) if diverging else hi
    base_lo = 0.0 if (not diverging and lo >= 0 and hi <= 1) else lo
    base_hi = 1.0 if (not diverging and lo >= 0 and hi <= 1) else hi
    parts = []
    for t, ch in enumerate(text):
        bg = _rgba(v[t], base_lo, scale if diverging else base_hi, diverging)
        strong = (abs(v[t]) / scale if diverging and scale > 0 else
                  (v[t] - base_lo) / (base_hi - base_lo) if base_hi > base_lo else 0.0) > 0.7
        style = f"background:{bg}" + (";color:#fff" if strong else "")
        if ch == "\n":
            parts.append(f'<span class="nl" style="{style}" data-t="{t}" data-v="{v[t]:.3f}"></span>\n')
        else:
            parts.append(f'<span style="{style}" data-t="{t}" data-v="{v[t]:.3f}">{_esc(ch)}</span>')
    if diverging:
        bar = (f"linear-gradient(90deg, rgba({_COOL[0]},{_COOL[1]},{_COOL[2]},.88), #fff, "
               f"rgba({_WARM[0]},{_WARM[1]},{_WARM[2]},.88))")
        ends = (legend_number(-scale), legend_number(scale))
    else:
        bar = f"linear-gradient(90deg, #fff, rgba({_WARM[0]},{_WARM[1]},{_WARM[2]},.88))"
        ends = (legend_number(base_lo), legend_number(base_hi))
    rid = f"readout{idx}"
    return (
        f'<div class="textview"><div class="unit-head"><b>{_esc(label)}</b>'
        f'<span class="legend">{ends[0]}<span class="bar" style="background:{bar}"></span>{ends[1]}</span></div>'
        f'<pre class="chars" data-readout="{rid}">{"".join(parts)}</pre>'
        f'<div class="readout" id="{rid}">hover a character to read its value</div></div>'
    )


def text_views_html(text: str, text_units, *, max_chars: int = 2000) -> str:
    """One coloured view of ``text`` per unit, as an HTML fragment (a ``<div class="textviews">``).

    Parameters
    ----------
    text : str
        The text the activations were recorded on, one step per character.
    text_units : mapping of str to array_like, or sequence of (label, array_like)
        Label -> activations of shape (T,) with ``T >= min(len(text), max_chars)`` (extra values are
        ignored); any shape is flattened. Each entry is one view, in order.
    max_chars : int, default 2000
        Characters shown: the first ``max_chars`` of ``text``.

    Returns
    -------
    str
        The fragment; characters and labels are HTML-escaped.

    Raises
    ------
    ValueError
        If an entry has fewer values than characters shown, or a shown value is NaN or infinite.
    """
    units = list(text_units.items()) if isinstance(text_units, Mapping) else list(text_units)
    shown = text[:max_chars]
    views = []
    for i, (label, vals) in enumerate(units):
        v = np.asarray(vals, dtype=np.float64).reshape(-1)  # (T,)
        if v.size < len(shown):
            raise ValueError(f"text_units[{label!r}] must have one value per character (>= {len(shown)}); got {v.size}.")
        if not np.isfinite(v[: len(shown)]).all():
            raise ValueError(f"text_units[{label!r}] must be finite; got NaN or Inf.")
        views.append(_view(i, str(label), shown, v[: len(shown)]))
    return f'<div class="textviews">{"".join(views)}</div>'
