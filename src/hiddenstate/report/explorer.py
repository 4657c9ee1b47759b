"""The report's explorer: every unit's activation (and gates) on the text, in the page, offline.

LSTMVis (Strobelt et al. 2018) needs a server; this view is one ``<section>`` of the
self-contained report. The activations travel in the page, quantised to 8 bits per value with
each unit's own range stored beside them (:func:`quantize`): value ``v`` of unit ``k`` is sent
as ``q = round(255 (v - lo_k) / (hi_k - lo_k))`` and decoded by the page as
``lo_k + q (hi_k - lo_k) / 255``, exact to half of 1/255 of the unit's range. Each signal (the
state ``h`` and, for gated cells, each sigmoid gate) is one base64 string, unit-major (unit
``k`` is bytes ``k T .. (k+1) T - 1``), inside a ``<script type="application/json">``. The
page's script (``static/report.js``) then lets the reader

* pick a unit from a searchable list, sorted by the feature it tracks best, its time constant,
  its saturation or its number, and see the text coloured by it (:func:`~hiddenstate.report.
  textview.colour_scale` and :func:`~hiddenstate.report.textview.background`, mirrored in
  JavaScript);
* switch between the state and each gate of the chosen unit;
* hover a character to read its value, the state's norm and the units most active there;
* select a span to list the units that are on (above a threshold) on all of it, ranked by how
  rarely they are on elsewhere (LSTMVis's "match").

A 2,000-character, 512-unit GRU (``h``, ``z``, ``r``) embeds about 4.1 MB of base64;
signals that would push the data past ``max_bytes`` are left out, and the card says so.

References
----------
H. Strobelt, S. Gehrmann, H. Pfister, A. M. Rush, "LSTMVis: a tool for visual analysis of hidden
state dynamics in recurrent neural networks", IEEE TVCG 24(1), 2018.
A. Karpathy, J. Johnson, L. Fei-Fei, "Visualizing and understanding recurrent networks",
arXiv:1506.02078, 2015.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping

import numpy as np

from hiddenstate.core.validation import positive_int

__all__ = ["MAX_BYTES", "decode", "explorer_html", "quantize"]

#: Default budget for the embedded activations (base64 characters), so a page stays under ~5 MB.
MAX_BYTES = 4_400_000


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def quantize(values) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """8-bit codes of each unit's values over its own range.

    Parameters
    ----------
    values : array_like of shape (T, H)
        Finite activations, one column per unit.

    Returns
    -------
    codes : ndarray of uint8, shape (H, T)
        ``round(255 (v - lo) / (hi - lo))`` (0 for a constant unit), unit-major.
    lo, hi : ndarray of float64, shape (H,)
        Each unit's minimum and maximum.

    Raises
    ------
    ValueError
        If ``values`` is not two-dimensional or holds NaN or Inf.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2:
        raise ValueError(f"values must have shape (T, H); got {v.shape}.")
    if not np.isfinite(v).all():
        raise ValueError("values must be finite; got NaN or Inf.")
    lo, hi = v.min(axis=0), v.max(axis=0)
    span = hi - lo
    scaled = np.zeros_like(v)
    np.divide(v - lo, span, out=scaled, where=span > 0)
    codes = np.rint(scaled * 255.0).astype(np.uint8)
    return np.ascontiguousarray(codes.T), lo, hi


def decode(codes, lo, hi) -> np.ndarray:
    """The values the page decodes from :func:`quantize`'s output, shape (T, H).

    Parameters
    ----------
    codes : ndarray of uint8, shape (H, T)
        Unit-major codes.
    lo, hi : ndarray of shape (H,)
        Each unit's range.

    Returns
    -------
    ndarray of float64, shape (T, H)
        ``lo + codes (hi - lo) / 255``, within ``(hi - lo) / 510`` of the quantised values.
    """
    c = np.asarray(codes, dtype=np.float64).T
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    return lo + c * (hi - lo) / 255.0


def _floats(a) -> list:
    """A float array as a JSON-ready list (full precision: the page must match Python's colours)."""
    return [float(x) for x in np.asarray(a, dtype=np.float64).reshape(-1)]


def _column(name: str, values, H: int, kind: str) -> list:
    if kind == "str":
        out = [str(v) for v in values]
    else:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
        out = [float(v) if np.isfinite(v) else None for v in arr]
    if len(out) != H:
        raise ValueError(f"explore['units'][{name!r}] must have one entry per unit (H={H}); got {len(out)}.")
    return out


def explorer_html(explore: Mapping, *, max_chars: int = 2000, max_bytes: int = MAX_BYTES) -> str:
    """The explorer card's body: controls, the text and the embedded, quantised activations.

    Parameters
    ----------
    explore : mapping
        ``"text"`` (str, one step per character); ``"signals"``, a mapping of name to array of
        shape (T, H) with ``T >= len(text)`` shown, the state first (e.g. ``{"h": ..., "z": ...,
        "r": ...}``; values all in [0, 1] are coloured on the gate scale); optionally
        ``"units"``, a mapping of column name to per-unit values of shape (H,) shown in the unit
        list and offered as sort keys (``"best feature"`` holds str labels, ``"|r|"``,
        ``"time constant"``, ``"saturation"`` numbers; NaN shows as blank); ``"featured"``, a
        sequence of ``(label, signal, unit)`` offered as buttons (the first is shown first);
        ``"norm"``, the state's norm per step, shape (T,).
    max_chars : int, default 2000
        Characters of the text shown (positive).
    max_bytes : int, default :data:`MAX_BYTES`
        Budget for the base64 of the signals: the state always goes in, a gate only while the
        total stays within the budget (the card names those left out).

    Returns
    -------
    str
        An HTML fragment (a ``<div class="explorer">`` and its data).

    Raises
    ------
    ValueError
        A signal that is not (T, H) with the same H as the first, has fewer steps than characters
        shown, or is not finite; a ``units`` column or ``norm`` of the wrong length; a featured
        entry naming an unknown signal or a unit out of range; no signal at all.
    TypeError
        ``explore`` is not a mapping, ``text`` not a str, ``max_chars`` or ``max_bytes`` not an integer.
    """
    if not isinstance(explore, Mapping):
        raise TypeError(f"explore must be a mapping with 'text' and 'signals'; got {type(explore).__name__}.")
    text = explore.get("text")
    if not isinstance(text, str):
        raise TypeError(f"explore['text'] must be a str; got {type(text).__name__}.")
    max_chars = positive_int("max_chars", max_chars)
    max_bytes = positive_int("max_bytes", max_bytes)
    text = text[:max_chars]
    T = len(text)
    signals = dict(explore.get("signals") or {})
    if not signals:
        raise ValueError("explore['signals'] must name at least one (T, H) array (the state first).")
    data, left_out, total, H = {}, [], 0, None
    for name, values in signals.items():
        v = np.asarray(values, dtype=np.float64)
        if v.ndim != 2 or v.shape[0] < T or (H is not None and v.shape[1] != H):
            raise ValueError(f"explore['signals'][{name!r}] must have shape (T >= {T}, H{'' if H is None else '=' + str(H)});"
                             f" got {v.shape}.")
        H = v.shape[1]
        v = v[:T]
        codes, lo, hi = quantize(v)  # ValueError if not finite
        b64 = base64.b64encode(codes.tobytes()).decode("ascii")
        if data and total + len(b64) > max_bytes:
            left_out.append(str(name))
            continue
        total += len(b64)
        data[str(name)] = {"codes": b64, "lo": _floats(lo), "hi": _floats(hi)}
    units = {}
    for col, vals in (explore.get("units") or {}).items():
        units[str(col)] = _column(str(col), vals, H, "str" if col == "best feature" else "num")
    featured = []
    for entry in explore.get("featured") or ():
        label, sig, unit = entry
        if str(sig) not in signals:
            raise ValueError(f"explore['featured'] names signal {sig!r}; the signals are {list(signals)}.")
        if not (0 <= int(unit) < H):
            raise ValueError(f"explore['featured'] names unit {unit}; it must be in [0, {H}).")
        if str(sig) in data:
            featured.append([str(label), str(sig), int(unit)])
    norm = explore.get("norm")
    if norm is not None:
        norm = np.asarray(norm, dtype=np.float64).reshape(-1)
        if norm.size < T:
            raise ValueError(f"explore['norm'] must have one value per character (>= {T}); got {norm.size}.")
        norm = [round(float(x), 4) for x in norm[:T]]
    payload = {"T": T, "H": H, "signals": data, "order": list(data), "units": units, "featured": featured,
               "norm": norm, "text": text}
    blob = json.dumps(payload, ensure_ascii=True, separators=(",", ":")).replace("</", "<\\/")
    buttons = "".join(
        f'<button type="button" class="ex-feat" data-signal="{_esc(s)}" data-unit="{u}">{_esc(lab)}</button>'
        for lab, s, u in featured)
    sorts = "".join(f'<option value="{_esc(c)}">{_esc(c)}</option>' for c in units if c != "best feature")
    note = (f'<p class="empty">Left out to keep the page small: {", ".join(_esc(n) for n in left_out)} '
            f"(the data would exceed {max_bytes / 1e6:.1f} MB).</p>" if left_out else "")
    return (
        '<div class="explorer">'
        '<div class="ex-side"><input id="ex-search" type="search" placeholder="search: unit number or feature" '
        'aria-label="search units">'
        f'<label class="ex-sort">sort by <select id="ex-sort">{sorts}<option value="unit">unit number</option>'
        '</select></label><ol id="ex-units" class="ex-units"></ol></div>'
        f'<div class="ex-main"><div class="ex-featured">{buttons}</div>'
        '<div class="ex-signals" id="ex-signals"></div>'
        '<div class="unit-head"><b id="ex-title"></b><span class="legend" id="ex-legend"></span></div>'
        '<pre class="chars" id="ex-text" data-readout="ex-readout"></pre>'
        '<div class="readout" id="ex-readout">hover a character to read its value; select a span to find '
        'the units that are on there</div>'
        '<div class="ex-match"><label>on means value &gt; <input id="ex-thr" type="number" step="0.05" '
        'value="0.5"></label><div id="ex-matches"></div></div>'
        f"{note}</div></div>"
        f'<script type="application/json" id="ex-data">{blob}</script>'
    )
