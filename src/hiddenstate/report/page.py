"""One self-contained HTML page that shows what a recurrent network's hidden state does.

:func:`build_report` takes measurements made with this package (loss history, gate statistics,
gradient norms against lag, memory curves, PCA of a trajectory, fixed points, per-character unit
activations) and writes a single HTML file: figures (:mod:`hiddenstate.report.plots`) are PNGs
embedded as base64 ``data:`` URIs, the style sheet and the few lines of script (package data,
``static/report.css`` and ``static/report.js``) are inlined, and nothing is fetched from the
network, so the file opens from disk, can be mailed, and renders the same everywhere.

Each section is optional and appears only when its measurement is given. The explorer
(:mod:`hiddenstate.report.explorer`) colours every character by the activation of any unit or
gate the reader picks, as in the "quote cell" figure of Karpathy, Johnson and Fei-Fei (2015);
without explorer data, static text views (:mod:`hiddenstate.report.textview`) show chosen units.
"""

from __future__ import annotations

import html
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hiddenstate.core.validation import boolean, positive_int
from hiddenstate.report.explorer import explorer_html
from hiddenstate.report.figures import KIND_COLORS, png_base64, style
from hiddenstate.report.layout import page_html
from hiddenstate.report.notebook import Report
from hiddenstate.report.plots import (
    eigenvalue_figure,
    gates_figure,
    gradient_figure,
    loss_figure,
    memory_figure,
    pca_figure,
)
from hiddenstate.report.target import check_report_path, write_report
from hiddenstate.report.textview import text_views_html

__all__ = ["build_report", "render_html"]


def _img(fig, alt: str) -> str:
    """An ``<img>`` with the figure inline as a PNG, saved at the house resolution."""
    with style():
        b64 = png_base64(fig)
    return f'<img class="fig" alt="{_esc(alt)}" src="data:image/png;base64,{b64}">'


# --------------------------------------------------------------------------- HTML pieces

def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def _fmt(v) -> str:
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if v == 0 or (1e-3 <= abs(v) < 1e5):
            return f"{v:.4g}"
        return f"{v:.2e}"
    if isinstance(v, (np.integer,)):
        return str(int(v))
    return str(v)


def _card(anchor, title, what, body, wide=False) -> str:
    cls = "card wide" if wide else "card"
    return (f'<section class="{cls}" id="{anchor}"><h2>{_esc(title)}</h2>'
            f'<p class="what">{what}</p>{body}</section>')


def _table(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return '<p class="empty">(empty)</p>'
    cols = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{_esc(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_esc(_fmt(r.get(c, '')))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fp_table(points, max_rows: int = 15) -> str:
    rows = []
    for i, p in enumerate(points[:max_rows]):
        col = KIND_COLORS.get(p.kind, "#5f6368")
        kind = f'<span class="badge" style="background:{col}">{_esc(p.kind)}</span>'
        rows.append(
            f"<tr><td>{i}</td><td>{kind}</td><td>{p.n_unstable}</td><td>{p.spectral_radius:.4f}</td>"
            f"<td>{_fmt(p.q)}</td><td>{float(np.linalg.norm(p.h)):.3f}</td><td>{p.n_hits}</td></tr>"
        )
    if len(points) > max_rows:
        counts = {}
        for p in points[max_rows:]:
            counts[p.kind] = counts.get(p.kind, 0) + 1
        rest = ", ".join(f"{n} {k}" for k, n in counts.items())
        rows.append(f'<tr><td colspan="7" class="empty">… and {len(points) - max_rows} more ({rest})</td></tr>')
    head = ("<tr><th>#</th><th>kind</th><th>unstable dims</th><th>max |λ|</th><th>q</th>"
            "<th>‖h*‖</th><th>starts that ended here</th></tr>")
    return f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"


# --------------------------------------------------------------------------- sections

def _as_mapping(obj, default_key: str) -> dict:
    """A measurement as {name: value}: a mapping as is, named objects by name, else one entry."""
    if obj is None:
        return {}
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, (list, tuple)) and obj and all(hasattr(o, "name") for o in obj):
        return {o.name: o for o in obj}
    return {default_key: obj}


def _fixed_points_card(fps) -> str:
    n_starts = getattr(fps, "n_starts", None)
    tried = f"{n_starts} start{'s' if n_starts != 1 else ''}" if n_starts is not None else "the given starts"
    if not fps:
        return _card("fixed", "Fixed points", "Sussillo &amp; Barak (2013).",
                     f'<p class="empty">No fixed point found from {tried}.</p>', wide=True)
    n_st = sum(p.kind == "stable" for p in fps)
    n_sad = sum(p.kind == "saddle" for p in fps)
    body = (f'<div class="fp"><div>{_fp_table(list(fps))}</div>'
            f'<div>{_img(eigenvalue_figure(fps), "fixed point eigenvalues")}</div></div>')
    what = (f"Sussillo &amp; Barak (2013): minima of q(h) = ½‖F(h) − h‖² with the input held fixed, searched from "
            f"{tried}; starts that end at the same point are merged (the last column counts them). "
            f"{len(fps)} distinct point{'s' if len(fps) != 1 else ''}, {n_st} stable"
            + (f", {n_sad} saddle{'s' if n_sad != 1 else ''}: a saddle's unstable directions lead to the "
               "attractors it separates." if n_sad else "."))
    return _card("fixed", "Fixed points", what, body, wide=True)


def _explore_card(explore, max_chars: int) -> str:
    return _card(
        "text", "Explore the hidden state",
        "Pick a unit (the list is searchable and sorts by what each unit tracks best, its memory time constant or "
        "its saturation) to colour the text by its value after each character: warm positive, cool negative, "
        "white-to-warm for a gate in [0, 1] (Karpathy et al. 2015's \"quote cell\" view). Switch to a gate of the "
        "same unit with the buttons above the text; the legend gives the scale and the unit's range, so a pale or "
        "uniform panel reads as a gate that barely moves. Hover a character for its value, the state's norm and "
        "the most active units; select a span of text to list the units that are on all over it (LSTMVis's "
        "\"match\", Strobelt et al. 2018). The values are embedded at 8 bits per unit and step.",
        explorer_html(explore, max_chars=max_chars), wide=True)


def _skipped_card(skipped) -> str:
    items = "".join(f"<li><b>{_esc(k)}</b>: {_esc(v)}</li>" for k, v in dict(skipped).items())
    return _card("skipped", "Not measured", "What was asked for but could not be measured or shown, and why.",
                 f"<ul>{items}</ul>", wide=True)


def _text_card(text: str, text_units, max_chars: int) -> str:
    shown = min(len(text), max_chars)
    more = f" (first {shown} of {len(text)} characters)" if shown < len(text) else ""
    return _card(
        "text", "Text coloured by unit activation",
        "Each character's background is the unit's activation after reading it: warm positive, cool "
        f"negative (Karpathy et al. 2015's \"quote cell\" view){more}.",
        text_views_html(text, text_units, max_chars=max_chars), wide=True)


def _sections(*, loss, gates, gradient, gradient_refs, memory, pca, fixed_points, text, text_units, tables,
              max_chars, project_fixed_points, explore=None, skipped=None) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """The cards of the given measurements: (half-width cards, full-width cards, [(anchor, label)])."""
    grid, wide, toc = [], [], []

    loss_m = _as_mapping(loss, "train")
    if loss_m:
        grid.append(_card("loss", "Loss", "Training (and validation) loss per step. A flat validation "
                          "curve under a falling training curve means the model is memorising.",
                          _img(loss_figure(loss_m), "loss curve")))
        toc.append(("loss", "Loss"))

    gates_l = list(_as_mapping(gates, "gate").values())
    if gates_l:
        grid.append(_card(
            "gates", "Gate saturation",
            "Karpathy et al. (2015): each dot is one unit; its position is the fraction of steps its gate is "
            "nearly closed (&lt; 0.1) and nearly open (&gt; 0.9). Right: the time constant 1/(1 − mean) of the "
            "keep gates (the gate the cell kind declares keeps the state: GRU z, LSTM f, minGRU/minLSTM keep) — "
            "units above the dashed line remember for more than 10 steps.",
            _img(gates_figure(gates_l), "gate saturation scatter")))
        toc.append(("gates", "Gates"))

    grad_m = _as_mapping(gradient, "gradient")
    if grad_m:
        grid.append(_card(
            "gradient", "Gradient flow over time",
            "How much of a signal at the last step T still reaches the hidden state k steps back. Solid curves: "
            "the norm of the gradient of a loss at step T on h<sub>T−k</sub>, by backpropagation through time; and "
            "the largest gain σ<sub>max</sub>(∂h<sub>T</sub>/∂h<sub>T−k</sub>) by which a small change of "
            "h<sub>T−k</sub> can move h<sub>T</sub>. Both are drawn over the lags they were measured at. Pascanu, "
            "Mikolov &amp; Bengio (2013): with σ<sub>max</sub>(W<sub>hh</sub>) &lt; 1 a tanh RNN's gradient must "
            "vanish geometrically; gates that keep the state open a highway.",
            _img(gradient_figure(grad_m, gradient_refs), "gradient norm against lag")))
        toc.append(("gradient", "Gradient"))

    mem_m = _as_mapping(memory, "memory")
    if mem_m:
        grid.append(_card(
            "memory", "Memory curve",
            "How well a linear readout of h<sub>t</sub> recovers the input k steps back, on held-out steps "
            "(ridge regression). The fixed-size state forgets: the curve falls with the lag; its area above "
            "chance is the memory capacity (Jaeger 2001). For characters the dotted line is chance: always "
            "guessing the most common character.",
            _img(memory_figure(mem_m), "memory curve")))
        toc.append(("memory", "Memory"))

    fps = list(fixed_points) if fixed_points is not None else []
    if pca is not None:
        evr = np.asarray(pca.explained_variance_ratio)
        two = float(evr[:2].sum())
        n90 = int(np.searchsorted(np.cumsum(evr), 0.9 - 1e-12) + 1) if evr.size else 0
        wide.append(_card(
            "pca", "Trajectory in principal components",
            f"The hidden state projected on its top two principal components, which together explain "
            f"{100 * two:.1f} % of its variance (90 % takes {min(n90, evr.size)} of {evr.size} components: "
            f"{'a low-dimensional' if n90 <= max(2, evr.size // 10) else 'a high-dimensional'} state). "
            + ("Left: every step as a dot coloured by the class of the character just read; middle: the first "
               "steps as a path, each point labelled with its character"
               if text is not None else "Left: the path coloured by time")
            + ("; stars are stable fixed points, crosses unstable ones." if fps and project_fixed_points else "."),
            _img(pca_figure(pca, fps if project_fixed_points else [], text=text), "PCA trajectory"), wide=True))
        toc.append(("pca", "PCA"))

    if fixed_points is not None:
        wide.append(_fixed_points_card(fixed_points))
        toc.append(("fixed", "Fixed points"))

    if explore is not None:
        wide.append(_explore_card(explore, max_chars))
        toc.append(("text", "Explore"))
    elif text is not None and text_units:
        wide.append(_text_card(text, text_units, max_chars))
        toc.append(("text", "Text"))

    for j, (name, rows) in enumerate((tables or {}).items()):
        wide.append(_card(f"table{j}", str(name), "", _table(list(rows)), wide=True))
        short = str(name).split(" (")[0]
        toc.append((f"table{j}", short if len(short) <= 32 else short[:30] + "…"))
    if skipped:
        wide.append(_skipped_card(skipped))
        toc.append(("skipped", "Not measured"))
    return grid, wide, toc


def _page(title: str, subtitle: str | None, meta, grid: list[str], wide: list[str], toc) -> str:
    """The HTML document around the cards (:func:`hiddenstate.report.layout.page_html`, the look of every report)."""
    content = ""
    if grid:
        content += f'<div class="grid">{"".join(grid)}</div><div style="height:20px"></div>'
    content += "".join(wide)
    if not content:
        content = '<section class="card"><p class="empty">No measurements were given.</p></section>'
    chips = {str(k): _fmt(v) for k, v in (meta or {}).items()}
    return page_html(title, subtitle, chips, toc, content)


# --------------------------------------------------------------------------- public API

def render_html(
    *,
    title: str = "Inside the hidden state",
    subtitle: str | None = None,
    meta: Mapping[str, Any] | None = None,
    loss=None,
    gates=None,
    gradient=None,
    gradient_refs=None,
    memory=None,
    pca=None,
    fixed_points=None,
    text: str | None = None,
    text_units=None,
    tables: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    max_chars: int = 2000,
    project_fixed_points: bool = True,
    explore: Mapping[str, Any] | None = None,
    skipped: Mapping[str, str] | None = None,
) -> str:
    """The report as one self-contained HTML string; every measurement is optional.

    Sections without data are left out; with none at all the page says so. The measurements are
    read duck-typed (only the attributes named below), so any object with them will do.

    Parameters
    ----------
    title : str, default "Inside the hidden state"
        The page's title and heading.
    subtitle : str, optional
        One line under the title (e.g. the model and data).
    meta : mapping of str to object, optional
        Key facts shown as chips in the header (``{"cell": "GRU", "H": 64, "val loss": 1.61}``).
    loss : mapping of str to array_like, or array_like, optional
        Loss curves by name (a bare curve is named ``"train"``); each an array of shape (S,)
        (x = 0..S-1) or a pair ``(steps, values)`` of arrays of shape (S,).
    gates : sequence or mapping of :class:`~hiddenstate.probe.gatestats.GateStats`, optional
        Plotted as the Karpathy et al. (2015) saturation scatter. Stats whose name ends in ``z``,
        ``f``, ``update`` or ``forget`` are keep gates and also get a time-constant plot.
    gradient : mapping of str to (lags, norms), optional
        Gradient or Jacobian-product norms against lag (log scale), e.g. from
        :mod:`hiddenstate.probe.gradflow`; each a pair of arrays of shape (K,) or an array (K,).
    gradient_refs : mapping of str to (lags, values), optional
        Reference curves drawn dashed on the same axes (e.g. the bound ``0.9**k``).
    memory : :class:`~hiddenstate.probe.memory.MemoryCurve` or mapping of str to it, optional
        Memory curves (held-out decodability against lag), one line each with its capacity.
    pca : :class:`~hiddenstate.probe.pca.PCAResult`, optional
        Its ``scores`` (T, K) or (T, N, K) are drawn as a trajectory coloured by time (up to 4
        sequences); fixed points of matching size are projected onto the same plane.
    fixed_points : sequence of :class:`~hiddenstate.probe.fixedpoints.FixedPoint`, optional
        Summary table and eigenvalue plot (an empty sequence says that none was found). When it
        has an ``n_starts`` attribute (:class:`~hiddenstate.probe.fixedpoints.FixedPoints`), the
        card says from how many starts the points were searched.
    text : str, optional
        The text the activations were recorded on (one step per character); also colours the PCA
        plot by character class.
    text_units : mapping of str to array_like (T,), or sequence of (label, values), optional
        Activations to colour ``text`` with, one view per entry (e.g. ``{"unit 17 (inside quotes,
        r=0.62)": h[:, 17]}``), at least one value per character shown. Values in [0, 1] use a
        white-to-warm scale, others a diverging cool-white-warm scale symmetric about 0.
    tables : mapping of str to sequence of mappings, optional
        Extra tables (title -> rows), e.g. the Pascanu bound per weight matrix.
    max_chars : int, default 2000
        Characters of ``text`` shown (positive).
    project_fixed_points : bool, default True
        Draw the fixed points in the PCA plane (only sensible when they live in the space the
        PCA was fitted on, e.g. a one-layer network; points of another size are never drawn).
    explore : mapping, optional
        The explorer's data (:func:`hiddenstate.report.explorer.explorer_html`): the text, the
        state and gates of every unit (T, H), per-unit columns for the unit list, featured units.
        Replaces the static ``text_units`` views.
    skipped : mapping of str to str, optional
        Measurements that could not be made, and why (e.g. :attr:`Analysis.skipped`), listed in
        a card of their own.

    Returns
    -------
    str
        The page, starting ``<!DOCTYPE html>``: figures as PNG ``data:`` URIs, the style sheet and
        script inline, no reference outside the file.

    Raises
    ------
    ValueError
        If a measurement has the wrong shape (e.g. fewer activations than characters shown, a
        ``(steps, values)`` pair of unequal lengths), activations are not finite, or
        ``max_chars`` is not positive.
    TypeError
        If ``max_chars`` is not an integer or ``project_fixed_points`` not a bool.
    """
    max_chars = positive_int("max_chars", max_chars)
    project_fixed_points = boolean("project_fixed_points", project_fixed_points)
    with np.errstate(under="ignore"):  # tiny values (vanished gradients) may underflow when drawn
        grid, wide, toc = _sections(
            loss=loss, gates=gates, gradient=gradient, gradient_refs=gradient_refs, memory=memory, pca=pca,
            fixed_points=fixed_points, text=text, text_units=text_units, tables=tables, max_chars=max_chars,
            project_fixed_points=project_fixed_points, explore=explore, skipped=skipped)
    return _page(title, subtitle, meta, grid, wide, toc)


#: The keywords :func:`build_report` passes on to :func:`render_html`.
_KEYWORDS = frozenset(inspect.signature(render_html).parameters)


def build_report(path, analysis=None, /, **measurements) -> Report:
    """Write a self-contained HTML report of hidden-state measurements (:func:`render_html`).

    Parameters
    ----------
    path : str or os.PathLike
        Output file (``.html``): a new file or a previous hiddenstate report, which is replaced
        atomically; any other existing file is refused before any work (nothing a user saved is
        overwritten). Parent directories are created.
    analysis : hiddenstate.probe.analysis.Analysis, optional
        Everything :func:`hiddenstate.analyze_model` measured, or any object with a
        ``report_kwargs()`` method returning keywords of :func:`render_html`; keywords given
        here override them.
    **measurements
        Keywords of :func:`render_html`: ``title``, ``subtitle``, ``meta``, ``loss``, ``gates``,
        ``gradient``, ``gradient_refs``, ``memory``, ``pca``, ``fixed_points``, ``text``,
        ``text_units``, ``tables``, ``max_chars``, ``project_fixed_points``, ``explore``, ``skipped``.

    Returns
    -------
    Report
        The path written (UTF-8): a :class:`pathlib.Path` (so it works wherever the path did)
        that a notebook shows as the page itself (:meth:`Report._repr_html_`).

    Raises
    ------
    TypeError
        If an unknown keyword is given, or from :func:`render_html`.
    ValueError
        From :func:`render_html`, e.g. fewer activations than characters; ``path`` is a
        directory or an existing file that is not a hiddenstate report
        (:func:`~hiddenstate.report.target.check_report_path`).
    """
    check_report_path(path)  # before the work, not after it
    unknown = sorted(set(measurements) - _KEYWORDS)
    if unknown:
        raise TypeError(f"build_report got unknown keyword(s) {unknown}; allowed: {sorted(_KEYWORDS)}.")
    if analysis is not None:
        measurements = {**analysis.report_kwargs(), **measurements}
    page = render_html(**measurements)
    return Report(write_report(path, page))
