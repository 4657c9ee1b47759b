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
from hiddenstate.report.textview import legible

__all__ = ["MATRIX_BYTES", "MATRIX_SIDE", "MAX_BYTES", "decode", "explorer_html", "quantize"]

#: Default budget for the embedded activations (base64 characters), so a page stays under ~5 MB.
MAX_BYTES = 4_400_000
#: Default budget for the matrix states drawn one head at a time (base64 characters, all layers).
MATRIX_BYTES = 1_500_000
#: The most rows and columns of one head's matrix drawn.
MATRIX_SIDE = 32


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


def _matrix(m, T: int, budget: int, max_side: int):
    """One layer's matrix states of sequence 0 for the page: steps spread evenly, each head's 8-bit codes (None: no room)."""
    m = np.asarray(m, dtype=np.float64)
    if m.ndim != 4 or m.shape[0] < T:
        raise ValueError(f"explore['matrix'] must have shape (T >= {T}, H, Dk, Dv); got {m.shape}.")
    _, Hh, R0, C0 = m.shape
    R, C = min(R0, max_side), min(C0, max_side)
    per_step = Hh * R * C * 4 // 3 + 1  # base64 characters of one step
    n = min(T, budget // per_step)
    if n < 1:
        return None
    steps = np.unique(np.linspace(0, T - 1, n).round().astype(int))  # (n,) always the first and last step
    sub = m[steps][:, :, :R, :C]  # (n, H, R, C)
    if not np.isfinite(sub).all():
        raise ValueError("explore['matrix'] must be finite; got NaN or Inf.")
    codes, lo, hi = quantize(sub.transpose(0, 2, 3, 1).reshape(-1, Hh))  # per head over its steps and entries
    codes = codes.reshape(Hh, steps.size, R, C).transpose(1, 0, 2, 3)  # (n, H, R, C)
    return {"steps": [int(t) for t in steps], "H": int(Hh), "R": int(R), "C": int(C), "rows": int(R0),
            "cols": int(C0), "codes": base64.b64encode(np.ascontiguousarray(codes).tobytes()).decode("ascii"),
            "lo": _floats(lo), "hi": _floats(hi)}


def _layer(ex: Mapping, T: int, budget: list, left_out: list, label: str, required: bool = True) -> dict | None:
    """One layer's payload: its signals (the state always, gates while ``budget[0]`` lasts), unit columns, featured units.

    A layer that is not ``required`` is left out whole (None, its name in ``left_out``) when its state does not fit.
    """
    signals = dict(ex.get("signals") or {})
    if not signals:
        raise ValueError("explore['signals'] must name at least one (T, H) array (the state first).")
    data, H = {}, None
    for name, values in signals.items():
        v = np.asarray(values, dtype=np.float64)
        if v.ndim != 2 or v.shape[0] < T or (H is not None and v.shape[1] != H):
            raise ValueError(f"explore['signals'][{name!r}] must have shape (T >= {T}, H{'' if H is None else '=' + str(H)});"
                             f" got {v.shape}.")
        H = v.shape[1]
        codes, lo, hi = quantize(v[:T])  # ValueError if not finite
        b64 = base64.b64encode(codes.tobytes()).decode("ascii")
        if len(b64) > budget[0] and (data or not required):
            left_out.append(f"{label}{name}" if data else f"{label.strip() or 'a layer'} (its every signal)")
            if not data:
                return None
            continue
        budget[0] -= len(b64)
        data[str(name)] = {"codes": b64, "lo": _floats(lo), "hi": _floats(hi)}
    units = {str(c): _column(str(c), vals, H, "str" if c == "best feature" else "num")
             for c, vals in (ex.get("units") or {}).items()}
    featured = []
    for lab, sig, unit in ex.get("featured") or ():
        if str(sig) not in signals:
            raise ValueError(f"explore['featured'] names signal {sig!r}; the signals are {list(signals)}.")
        if not (0 <= int(unit) < H):
            raise ValueError(f"explore['featured'] names unit {unit}; it must be in [0, {H}).")
        if str(sig) in data:
            featured.append([str(lab), str(sig), int(unit)])
    norm = ex.get("norm")
    if norm is not None:
        norm = np.asarray(norm, dtype=np.float64).reshape(-1)
        if norm.size < T:
            raise ValueError(f"explore['norm'] must have one value per step (>= {T}); got {norm.size}.")
        norm = [round(float(x), 4) for x in norm[:T]]
    heads = int(ex.get("heads") or 0)
    if heads < 0 or (heads and H % heads):
        raise ValueError(f"explore['heads'] must divide the H={H} units; got {heads}.")
    return {"name": str(ex.get("name") or "top layer"), "H": H, "signals": data, "order": list(data), "units": units,
            "featured": featured, "norm": norm, "heads": heads, "matrix": None}


def explorer_html(explore: Mapping, *, max_chars: int = 2000, max_bytes: int = MAX_BYTES,
                  matrix_bytes: int = MATRIX_BYTES, matrix_side: int = MATRIX_SIDE) -> str:
    """The explorer card's body: controls, the text and the embedded, quantised activations.

    Parameters
    ----------
    explore : mapping
        ``"text"``: a str (one step per character) or a sequence of str (one token's text per
        step, :func:`hiddenstate.probe.tokens.token_pieces`: the tokens are the units of text,
        each shown legibly, :func:`hiddenstate.probe.tokens.legible`); one layer's data at the top
        level: ``"signals"``, a mapping of name to array of shape (T, H) with ``T >= len(text)``
        shown, the state first (e.g. ``{"h": ..., "z": ..., "r": ...}``; values all in [0, 1] are
        coloured on the gate scale); optionally ``"units"``, a mapping of column name to per-unit
        values of shape (H,) shown in the unit list and offered as sort keys (``"best feature"``
        holds str labels, ``"|r|"``, ``"time constant"``, ``"saturation"`` numbers; NaN shows as
        blank); ``"featured"``, a sequence of ``(label, signal, unit)`` offered as buttons (the
        first is shown first); ``"norm"``, the state's norm per step, shape (T,); ``"heads"``,
        how many heads the H units come in (unit k in head ``k // (H / heads)``; 0: none), which
        the head selector filters by; ``"matrix"``, a matrix state per head of sequence 0,
        (T, heads, Dk, Dv), drawn one head at a time with a step slider; ``"name"``. With
        ``"layers"``, a sequence of such mappings (one per layer, bottom first), the page has a
        layer selector (the last layer shown first) and the top level's own signals are not read.
    max_chars : int, default 2000
        Steps of the text shown (positive).
    max_bytes : int, default :data:`MAX_BYTES`
        Budget for the base64 of the signals: the top layer's state always goes in; then, from
        the top down, each layer's signals while the total stays within the budget (a layer
        whose state does not fit is left out whole; the card names what was left out).
    matrix_bytes : int, default :data:`MATRIX_BYTES`
        Budget for the matrix states, shared by the layers: each gets the steps that fit (spread
        evenly, always the first and last).
    matrix_side : int, default :data:`MATRIX_SIDE`
        The most rows and columns of a head's matrix drawn (the first ones; the view says so).

    Returns
    -------
    str
        An HTML fragment (a ``<div class="explorer">`` and its data).

    Raises
    ------
    ValueError
        A signal that is not (T, H) with the same H as the first, has fewer steps than shown, or
        is not finite; a ``units`` column or ``norm`` of the wrong length; a featured entry
        naming an unknown signal or a unit out of range; ``heads`` that do not divide H; a
        matrix that is not (T, H, Dk, Dv); no signal at all; no layer.
    TypeError
        ``explore`` is not a mapping, ``text`` neither a str nor a sequence of str, a budget not an integer.
    """
    if not isinstance(explore, Mapping):
        raise TypeError(f"explore must be a mapping with 'text' and 'signals'; got {type(explore).__name__}.")
    text = explore.get("text")
    tokens = not isinstance(text, str)
    if tokens and (not isinstance(text, (list, tuple)) or not all(isinstance(p, str) for p in text)):
        raise TypeError(f"explore['text'] must be a str or a sequence of str (one token's text per step); got "
                        f"{type(text).__name__}.")
    max_chars = positive_int("max_chars", max_chars)
    max_bytes = positive_int("max_bytes", max_bytes)
    matrix_bytes = positive_int("matrix_bytes", matrix_bytes)
    matrix_side = positive_int("matrix_side", matrix_side)
    pieces = list(text[:max_chars])
    T = len(pieces)
    layers = list(explore["layers"]) if explore.get("layers") is not None else [explore]
    if not layers:
        raise ValueError("explore['layers'] must hold at least one layer's data; got none.")
    budget, left_out, several = [max_bytes], [], len(layers) > 1
    made = {}  # the top layer first, always; the others from the top down while their states fit
    for j in reversed(range(len(layers))):
        ex = layers[j]
        made[j] = _layer(ex, T, budget, left_out, f"{ex.get('name', 'layer')} " if several else "", j == len(layers) - 1)
    kept = [j for j in range(len(layers)) if made[j] is not None]
    out, layers = [made[j] for j in kept], [layers[j] for j in kept]
    with_matrix = [j for j, ex in enumerate(layers) if ex.get("matrix") is not None]
    for j in with_matrix:
        out[j]["matrix"] = _matrix(layers[j]["matrix"], T, matrix_bytes // len(with_matrix), matrix_side)
    payload = {"T": T, "tokens": tokens, "text": pieces, "shown": [legible(p) for p in pieces] if tokens else None,
               "layers": out, "layer": len(out) - 1}
    blob = json.dumps(payload, ensure_ascii=True, separators=(",", ":")).replace("</", "<\\/")
    top = out[-1]
    buttons = "".join(
        f'<button type="button" class="ex-feat" data-signal="{_esc(s)}" data-unit="{u}">{_esc(lab)}</button>'
        for lab, s, u in top["featured"])
    sorts = "".join(f'<option value="{_esc(c)}">{_esc(c)}</option>' for c in top["units"] if c != "best feature")
    layer_opts = "".join(f'<option value="{j}"{" selected" if j == len(out) - 1 else ""}>{_esc(lay["name"])}</option>'
                         for j, lay in enumerate(out))
    note = (f'<p class="empty">Left out to keep the page small: {", ".join(_esc(n) for n in left_out)} '
            f"(the data would exceed {max_bytes / 1e6:.1f} MB).</p>" if left_out else "")
    step = "token" if tokens else "character"
    return (
        f'<div class="explorer" data-units="{step}s">'
        '<div class="ex-side"><div class="ex-pick">'
        f'<label>layer <select id="ex-layer" aria-label="layer">{layer_opts}</select></label> '
        '<label>head <select id="ex-head" aria-label="head"><option value="-1">all</option></select></label></div>'
        '<input id="ex-search" type="search" placeholder="search: unit number or feature" aria-label="search units">'
        f'<label class="ex-sort">sort by <select id="ex-sort">{sorts}<option value="unit">unit number</option>'
        '</select></label><ol id="ex-units" class="ex-units"></ol></div>'
        f'<div class="ex-main"><div class="ex-featured">{buttons}</div>'
        '<div class="ex-signals" id="ex-signals"></div>'
        '<div class="unit-head"><b id="ex-title"></b><span class="legend" id="ex-legend"></span></div>'
        f'<pre class="chars{" tokens" if tokens else ""}" id="ex-text" data-readout="ex-readout"></pre>'
        f'<div class="readout" id="ex-readout">hover a {step} to read its value; select a span to find '
        'the units that are on there</div>'
        '<div class="ex-match"><label>on means value &gt; <input id="ex-thr" type="number" step="0.05" '
        'value="0.5"></label><div id="ex-matches"></div></div>'
        '<div class="ex-matrix" id="ex-matrix" hidden><div class="unit-head"><b id="ex-mtitle"></b>'
        '<span class="legend" id="ex-mlegend"></span></div><label>step <input id="ex-step" type="range" min="0" '
        'value="0" aria-label="step"></label> <span id="ex-stepval"></span><br><canvas id="ex-canvas"></canvas></div>'
        f"{note}</div></div>"
        f'<script type="application/json" id="ex-data">{blob}</script>'
    )
