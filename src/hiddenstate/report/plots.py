"""One figure per measurement of the report: loss, gates, gradient flow, memory, PCA, eigenvalues.

Each function takes the measurement as :mod:`hiddenstate.probe` returns it (duck-typed: only the
attributes named in its docstring are read, so this module imports nothing from ``probe``) and
returns a :class:`matplotlib.figure.Figure` drawn in the house style of
:mod:`hiddenstate.report.figures`. Save it inside :func:`~hiddenstate.report.figures.style` to get
the house resolution too::

    with style():
        b64 = png_base64(loss_figure({"train": losses}))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from hiddenstate.report.figures import COLORS, KIND_COLORS, figure, style

__all__ = ["CHAR_CLASSES", "char_class", "eigenvalue_figure", "gates_figure", "gradient_figure", "is_keep_gate", "loss_figure",
           "memory_figure", "pca_figure", "state_figure"]

_REF_GREYS = ("#5f6368", "#9aa0a6", "#3c4043")  # dashed reference curves of the gradient figure


def _xy(name: str, obj) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) float64 arrays of shape (n,) from an array (x = 0..n-1) or a pair (x, y)."""
    if isinstance(obj, tuple) and len(obj) == 2:
        x, y = np.asarray(obj[0], dtype=np.float64), np.asarray(obj[1], dtype=np.float64)
    else:
        y = np.asarray(obj, dtype=np.float64).reshape(-1)
        x = np.arange(y.size, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"{name} must be an array (n,) or a pair (x, y) of equal-length arrays; got shapes "
                         f"{x.shape} and {y.shape}.")
    return x, y


def _plain_log_ticks(axis) -> None:
    """Label a log axis 1, 10, 100 rather than 10^0, 10^1, 10^2, and 2, 5, 20, 50 in between when it
    spans less than two decades (else a range such as 1.5-12 shows only "10" and perhaps "1")."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    def minor(v, _):
        lo, hi = sorted(axis.get_view_interval())
        if not (lo > 0 and hi / lo < 100 and v > 0):
            return ""
        mant = v / 10 ** np.floor(np.log10(v) + 1e-9)
        return f"{v:g}" if np.isclose(mant, 2) or np.isclose(mant, 5) else ""

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_locator(LogLocator(subs=np.arange(2, 10)))
    axis.set_minor_formatter(FuncFormatter(minor))


def is_keep_gate(name: str) -> bool:
    """Whether a gate's label names a keep gate (GRU update ``z``, LSTM forget ``f``, minGRU/minLSTM ``keep``).

    Parameters
    ----------
    name : str
        A :class:`~hiddenstate.probe.gatestats.GateStats` name such as ``"layer 0 z"``; its last
        word decides (``z``, ``f``, ``update``, ``forget`` or ``keep``, any case).

    Returns
    -------
    bool
        True for a keep gate, whose time constant ``1 / (1 - mean)`` is worth plotting.
    """
    words = name.strip().split()
    return bool(words) and words[-1].lower() in ("z", "f", "update", "forget", "keep")


def _keeps(g) -> bool:
    """Whether a gate's statistics are of a keep gate: its ``keep`` flag when set, else its name."""
    keep = getattr(g, "keep", None)
    return bool(keep) if keep is not None else is_keep_gate(g.name)


def loss_figure(loss: Mapping[str, object]):
    """Loss curves against the step, each labelled with its last finite value.

    Parameters
    ----------
    loss : mapping of str to array_like or pair of array_like
        Curve name -> values of shape (S,) (drawn at x = 0..S-1) or a pair ``(steps, values)`` of
        two arrays of shape (S,). Non-finite values are skipped.

    Returns
    -------
    matplotlib.figure.Figure
        One axes: loss against step, one line per curve, with a legend.

    Raises
    ------
    ValueError
        If a pair's arrays differ in shape or are not one-dimensional.
    """
    with style():
        fig, ax = figure(6.0, 3.2)
        for name, obj in loss.items():
            x, y = _xy(f"loss[{name!r}]", obj)
            ok = np.isfinite(y)
            # one point alone is no line: draw it as a marker so its legend entry is visible
            ax.plot(x[ok], y[ok], lw=1.6, label=name, **({"marker": "o", "ms": 5} if ok.sum() == 1 else {}))
            if ok.any():
                ax.annotate(f"{y[ok][-1]:.3f}", (x[ok][-1], y[ok][-1]), textcoords="offset points",
                            xytext=(4, 0), va="center", fontsize=8, color="#3c4043")
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.legend(loc="upper right")
    return fig


def gates_figure(gates: Sequence):
    """The gate-saturation scatter of Karpathy et al. (2015), and the keep gates' time constants.

    Parameters
    ----------
    gates : non-empty sequence of :class:`~hiddenstate.probe.gatestats.GateStats`
        Reads ``name``, ``left`` and ``right`` (each of shape (H,)), ``low`` and ``high`` (the
        thresholds of the first one label the axes) and, for keep gates, ``time_constant`` of
        shape (H,). A gate is a keep gate when its ``keep`` attribute is True (set from the cell
        kind's declared keep gate by :func:`hiddenstate.analyze_model`); without that attribute
        (or with None) its name decides (:func:`is_keep_gate`).

    Returns
    -------
    matplotlib.figure.Figure
        One axes (scatter, one dot per unit) or, when some gate is a keep gate, two: the scatter
        and the sorted time constants ``1 / (1 - mean)`` on a log scale.
    """
    keep = any(_keeps(g) for g in gates)
    with style():
        fig, axes = figure(6.4, 3.3, ncols=2, width_ratios=[1.15, 1]) if keep else figure(6.0, 3.3)
        ax = axes[0] if keep else axes
        ax.fill_between([0, 1], [1, 0], [1, 1], color="#f1f3f4", zorder=0, lw=0)
        ax.plot([0, 1], [1, 0], color="#bdc1c6", lw=0.8, zorder=1)
        for i, g in enumerate(gates):
            ax.scatter(g.left, g.right, s=18, alpha=0.75, color=COLORS[i % len(COLORS)],
                       edgecolors="white", linewidths=0.4, label=g.name, zorder=2)
        ax.set_xlim(-0.03, 1.03)
        ax.set_ylim(-0.03, 1.03)
        ax.set_aspect("equal")
        ax.set_xlabel(f"fraction left-saturated (< {gates[0].low:g})")
        ax.set_ylabel(f"fraction right-saturated (> {gates[0].high:g})")
        ax.set_title("gate saturation, one dot per unit")
        ax.legend(loc="upper right", markerscale=1.3)
        if keep:
            ax2 = axes[1]
            for i, g in enumerate(gates):  # the scatter's colour for each keep gate
                if not _keeps(g):
                    continue
                tau = np.sort(np.minimum(g.time_constant, 1e6))[::-1]  # (H,), longest first
                ax2.plot(np.arange(1, tau.size + 1), tau, marker="o", ms=3, lw=1.2, label=g.name,
                         color=COLORS[i % len(COLORS)])
            ax2.set_yscale("log")
            _plain_log_ticks(ax2.yaxis)
            ax2.set_xlabel("unit (sorted)")
            ax2.set_ylabel("time constant 1/(1 - mean) [steps]")
            ax2.set_title("memory time constant")
            ax2.axhline(10, color="#bdc1c6", lw=0.8, ls="--")
            ax2.legend(loc="upper right")
    return fig


def gradient_figure(gradient: Mapping[str, object], refs: Mapping[str, object] | None = None):
    """Gradient (or Jacobian-product) norms against the lag, on a log scale.

    Parameters
    ----------
    gradient : mapping of str to array_like or pair of array_like
        Curve name -> norms of shape (K,) (at lags 0..K-1) or a pair ``(lags, norms)``, e.g. from
        :mod:`hiddenstate.probe.gradflow`. Values that are not finite and positive are skipped.
    refs : mapping of str to array_like or pair of array_like, optional
        Reference curves in the same forms, drawn thin, dashed and grey (e.g. the bound ``0.9**k``).

    Returns
    -------
    matplotlib.figure.Figure
        One axes: norm (log scale, bottom at 0.3 times the smallest plotted norm) against lag, the
        legend below it.

    Raises
    ------
    ValueError
        If a pair's arrays differ in shape or are not one-dimensional.
    """
    with style():
        fig, ax = figure(6.0, 3.4)
        lo = np.inf
        for name, obj in gradient.items():
            x, y = _xy(f"gradient[{name!r}]", obj)
            ok = np.isfinite(y) & (y > 0)
            if ok.any():
                lo = min(lo, y[ok].min())
                ax.plot(x[ok], y[ok], lw=1.8, label=name)
        for j, (name, obj) in enumerate((refs or {}).items()):
            x, y = _xy(f"gradient_refs[{name!r}]", obj)
            ok = np.isfinite(y) & (y > 0)
            if ok.any():
                ax.plot(x[ok], y[ok], lw=1.0, ls="--", color=_REF_GREYS[j % len(_REF_GREYS)], label=name)
        ax.set_yscale("log")
        if np.isfinite(lo):
            ax.set_ylim(bottom=max(lo * 0.3, 1e-300))
        ends = [line.get_xdata()[-1] for line in ax.lines if len(line.get_xdata())]
        if ends:
            ax.set_xlim(0, max(ends))  # the axis ends where the data does
        ax.set_xlabel("lag k (steps back from the last step)")
        ax.set_ylabel("norm")
        # below the axes, never over a curve (loc="best" covered the minGRU's): the figure grows per entry
        n = len(ax.get_legend_handles_labels()[1])
        if n:
            fig.set_size_inches(6.0, 3.0 + 0.22 * n)
            fig.legend(loc="outside lower center", fontsize=8, frameon=False)
    return fig


def memory_figure(memory: Mapping[str, object]):
    """Memory curves: held-out decodability of the input k steps back, against k.

    Parameters
    ----------
    memory : mapping of str to :class:`~hiddenstate.probe.memory.MemoryCurve`
        Reads ``lags`` and ``score`` (shape (K+1,)), ``capacity`` (shown in the legend),
        ``metric`` (``"r2"`` or ``"accuracy"``; the last one names the y axis) and ``chance``
        (drawn dotted and labelled for accuracy: always guessing the most common class).

    Returns
    -------
    matplotlib.figure.Figure
        One axes: score against lag, y from at most -0.05 to 1.05.
    """
    with style():
        fig, ax = figure(6.0, 3.4)
        metric = None
        for i, (name, mc) in enumerate(memory.items()):
            color = COLORS[i % len(COLORS)]
            ax.plot(mc.lags, mc.score, marker="o", ms=3.5, lw=1.6, color=color,
                    label=f"{name} (capacity {mc.capacity:.1f})")
            if mc.metric == "accuracy":
                ax.axhline(mc.chance, color=color, lw=0.9, ls=":",
                           label=f"chance: most common class ({mc.chance:.2f})")
            metric = mc.metric
        ax.axhline(0.0, color="#9aa0a6", lw=0.8)
        ax.set_ylim(min(-0.05, ax.get_ylim()[0]), 1.05)
        ax.set_xlabel("lag k")
        ax.set_ylabel("held-out R²" if metric == "r2" else "held-out accuracy")
        ax.legend(loc="upper right")
    return fig


def _draw_fixed_points(ax, res, fixed_points, lo, hi) -> None:
    """Fixed points of the PCA's state size, projected on PC1-PC2, unless far outside [lo, hi]."""
    span = np.maximum(hi - lo, 1e-9)
    seen = set()
    for p in fixed_points:
        if p.h.shape != res.mean.shape:
            continue
        xy = res.transform(p.h)[:2]
        if xy.size < 2:
            xy = np.append(xy, 0.0)
        if np.any(xy < lo - 0.5 * span) or np.any(xy > hi + 0.5 * span):
            continue  # far from every visited state: would squash the trajectory
        stable = p.kind == "stable"
        lab = None if p.kind in seen else f"{p.kind} fixed point"
        seen.add(p.kind)
        ax.scatter([xy[0]], [xy[1]], s=260 if stable else 130, marker="*" if stable else "X",
                   color=KIND_COLORS.get(p.kind, "#3c4043"), edgecolors="#202124", linewidths=0.9,
                   zorder=5, label=lab)


#: The classes of characters the PCA plot colours by, in drawing order (name, colour).
CHAR_CLASSES = (("lower-case letter", COLORS[0]), ("upper-case letter", COLORS[1]), ("space", COLORS[2]),
                ("newline", COLORS[3]), ("punctuation", COLORS[4]), ("digit or other", COLORS[6]))


def char_class(ch: str) -> int:
    """The index in :data:`CHAR_CLASSES` of one character's class.

    Parameters
    ----------
    ch : str
        One character.

    Returns
    -------
    int
        0 lower-case letter, 1 upper-case letter, 2 space (or tab), 3 newline, 4 punctuation
        (``str.isalnum`` false and printable), 5 digit or other.
    """
    if ch.isalpha():
        return 1 if ch.isupper() else 0
    if ch == "\n":
        return 3
    if ch.isspace():
        return 2
    if ch.isprintable() and not ch.isalnum():
        return 4
    return 5


def _variance_axes(ax2, evr) -> None:
    k = min(10, evr.size)
    ax2.bar(np.arange(1, k + 1), evr[:k], color=COLORS[0], alpha=0.85, label="per component")
    ax2.plot(np.arange(1, k + 1), np.cumsum(evr[:k]), color=COLORS[1], marker="o", ms=3, label="cumulative")
    ax2.set_ylim(0, 1.05)
    ax2.set_xlabel("component")
    ax2.set_ylabel("explained variance ratio")
    ax2.set_title(f"explained variance (PC1+PC2: {100 * evr[:2].sum():.1f} %)")
    ax2.legend(loc="upper left")


def _pc_labels(ax, evr) -> None:
    ax.set_xlabel(f"PC1 ({100 * evr[0]:.1f} % of the variance)")
    ax.set_ylabel(f"PC2 ({100 * evr[1]:.1f} %)" if evr.size > 1 else "PC2")


def _pca_by_class(pca, sc, fixed_points, text: str, stretch: int):
    """Three axes: steps coloured by character class, a short annotated stretch, explained variance."""
    pts = (sc if sc.ndim == 2 else sc[:, 0])[: len(text), :2]  # (T', 2) sequence 0
    text = text[: pts.shape[0]]
    cls = np.array([char_class(c) for c in text], dtype=int)
    evr = np.asarray(pca.explained_variance_ratio)
    fig, (ax, ax1, ax2) = figure(13.5, 4.4, ncols=3, width_ratios=[1.2, 1.2, 0.9])
    for j, (name, color) in enumerate(CHAR_CLASSES):
        sel = cls == j
        if sel.any():
            ax.scatter(pts[sel, 0], pts[sel, 1], s=7, alpha=0.6, color=color, edgecolors="none",
                       label=f"{name} ({int(sel.sum())})")
    if fixed_points:
        _draw_fixed_points(ax, pca, fixed_points, pts.min(axis=0), pts.max(axis=0))
    _pc_labels(ax, evr)
    ax.set_title("every step, by the character just read")
    ax.margins(0.08)  # room for a fixed point's marker at the edge of the visited states
    legend = ax.legend(loc="best", fontsize=7)
    for handle in legend.legend_handles:  # one size for all: the steps' dots legible, the star not huge
        handle.set_sizes([60.0 if handle.get_sizes()[0] > 100 else 24.0])
    n = min(stretch, pts.shape[0])
    seg = pts[:n]
    ax1.plot(seg[:, 0], seg[:, 1], color="#9aa0a6", lw=0.9, zorder=1)
    ax1.scatter(seg[:, 0], seg[:, 1], s=16, c=[CHAR_CLASSES[c][1] for c in cls[:n]], zorder=2, edgecolors="none")
    for t in range(n):
        ch = {"\n": "↵", " ": "␣"}.get(text[t], text[t])
        ax1.annotate(ch, (seg[t, 0], seg[t, 1]), textcoords="offset points", xytext=(3, 3), fontsize=7.5,
                     color="#202124")
    _pc_labels(ax1, evr)
    shown = "".join({"\n": "↵"}.get(c, c) for c in text[:n])
    ax1.set_title(f"steps 0-{n - 1}: " + repr(shown[:28] + ("…" if len(shown) > 28 else "")), fontsize=8.5)
    _variance_axes(ax2, evr)
    return fig


def pca_figure(pca, fixed_points: Sequence = (), *, text: str | None = None, stretch: int = 40):
    """The trajectory in the top-two principal-component plane, and the explained variance.

    Parameters
    ----------
    pca : :class:`~hiddenstate.probe.pca.PCAResult`
        Reads ``scores`` of shape (T, K) (one sequence) or (T, N, K) (the first 4 sequences are
        drawn, the first one strongest), ``explained_variance_ratio`` (K,), and for fixed points
        ``mean`` (H,) and ``transform``.
    fixed_points : sequence of :class:`~hiddenstate.probe.fixedpoints.FixedPoint`, default ()
        Drawn as stars (stable) or crosses (other kinds) when their ``h`` has the shape of
        ``pca.mean`` and they lie near the trajectory.
    text : str, optional
        The characters of sequence 0, one per step. With it, the steps are drawn as dots
        coloured by the class of the character just read (:data:`CHAR_CLASSES`) and the first
        ``stretch`` steps as a path labelled with their characters, instead of one long path
        coloured by time (which for thousands of steps is a tangle).
    stretch : int, default 40
        Steps of the labelled path.

    Returns
    -------
    matplotlib.figure.Figure
        Without text two axes (the path coloured by time step, with its colour bar) and the
        per-component and cumulative explained variance ratio of the first 10 components; with
        text three: by class, the labelled stretch, the explained variance.
    """
    from matplotlib.collections import LineCollection

    sc = np.asarray(pca.scores)
    if sc.shape[-1] < 2:
        sc = np.concatenate([sc, np.zeros(sc.shape[:-1] + (1,))], axis=-1)
    if text:
        with style():
            return _pca_by_class(pca, sc, fixed_points, text, max(int(stretch), 2))
    trajs = [sc] if sc.ndim == 2 else [sc[:, n] for n in range(min(sc.shape[1], 4))]  # each (T, K)
    with style():
        fig, (ax, ax2) = figure(12.5, 4.6, ncols=2, width_ratios=[1.9, 1])
        for j, tr in enumerate(trajs):
            pts = tr[:, :2]  # (T, 2)
            segs = np.stack([pts[:-1], pts[1:]], axis=1)  # (T-1, 2, 2)
            lw = 1.4 if len(segs) < 300 else (0.9 if len(segs) < 1000 else 0.45)
            lc = LineCollection(segs, cmap="viridis", linewidths=lw if j == 0 else 0.6 * lw,
                                alpha=(0.95 if len(segs) < 1000 else 0.7) if j == 0 else 0.4)
            lc.set_array(np.arange(len(segs), dtype=np.float64))
            ax.add_collection(lc)
            ax.scatter(pts[:1, 0], pts[:1, 1], marker="o", s=28, color="#3c4043", zorder=3,
                       label="start" if j == 0 else None)
            ax.scatter(pts[-1:, 0], pts[-1:, 1], marker="s", s=26, color="#fde725", edgecolors="#3c4043",
                       zorder=3, label="end" if j == 0 else None)
        allpts = np.concatenate([t[:, :2] for t in trajs])
        if fixed_points:
            _draw_fixed_points(ax, pca, fixed_points, allpts.min(axis=0), allpts.max(axis=0))
        ax.autoscale_view()
        fig.colorbar(lc, ax=ax, label="time step", shrink=0.85, pad=0.01)
        evr = np.asarray(pca.explained_variance_ratio)
        _pc_labels(ax, evr)
        ax.set_title("trajectory in the top-two PC plane")
        ax.legend(loc="best", fontsize=7.5)
        _variance_axes(ax2, evr)
    return fig


def eigenvalue_figure(fixed_points: Sequence):
    """The Jacobian eigenvalues of fixed points in the complex plane, with the unit circle.

    Parameters
    ----------
    fixed_points : sequence of :class:`~hiddenstate.probe.fixedpoints.FixedPoint`
        Reads ``eigenvalues`` (complex, shape (H,)) and ``kind`` (the colour, :data:`KIND_COLORS`).

    Returns
    -------
    matplotlib.figure.Figure
        One axes with equal scales: one dot per eigenvalue, one legend entry per kind.
    """
    with style():
        fig, ax = figure(3.6, 3.4)
        th = np.linspace(0, 2 * np.pi, 256)
        ax.plot(np.cos(th), np.sin(th), color="#9aa0a6", lw=1.0, ls="--")
        seen = set()
        for p in fixed_points:
            ev = np.asarray(p.eigenvalues)
            lab = None if p.kind in seen else p.kind
            seen.add(p.kind)
            ax.scatter(ev.real, ev.imag, s=14, alpha=0.7, color=KIND_COLORS.get(p.kind, "#3c4043"), label=lab,
                       edgecolors="none")
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_xlabel("Re λ")
        ax.set_ylabel("Im λ")
        ax.set_title("Jacobian eigenvalues")
        ax.legend(loc="upper right", fontsize=7.5)
    return fig


def state_figure(h, *, max_units: int = 64, max_steps: int = 400):
    """Heat map of a trajectory of states: one row per unit, one column per step, diverging colours.

    Parameters
    ----------
    h : array_like of shape (T, H)
        The states, e.g. one sequence of :attr:`~hiddenstate.probe.trace.Trace.output`.
    max_units : int, default 64
        With more units, the ``max_units`` whose state varies most (largest standard deviation)
        are shown, in unit order.
    max_steps : int, default 400
        With more steps, consecutive steps are averaged in ``ceil(T / max_steps)``-step windows
        (the last window may be shorter).

    Returns
    -------
    matplotlib.figure.Figure
        One axes (unit against step, colour scale symmetric about 0) with a colour bar.

    Raises
    ------
    ValueError
        If ``h`` is not of shape (T, H) with T, H >= 1, or has NaN/Inf.
    """
    h = np.asarray(h, dtype=np.float64)
    if h.ndim != 2 or 0 in h.shape or not np.isfinite(h).all():
        raise ValueError(f"h must be finite states of shape (T, H) with T, H >= 1; got shape {h.shape}.")
    T, H = h.shape
    units = np.arange(H)
    if units.size > max_units:
        units = np.sort(np.argsort(-h.std(axis=0), kind="stable")[:max_units])
    w = -(-T // max_steps)  # steps per column
    starts = np.arange(0, T, w)
    img = np.add.reduceat(h[:, units], starts, axis=0) / np.diff(np.append(starts, T))[:, None]  # (C, U)
    m = float(np.max(np.abs(img))) or 1.0
    with style():
        fig, ax = figure(6.0, 2.8)
        im = ax.imshow(img.T, aspect="auto", cmap="RdBu_r", vmin=-m, vmax=m, interpolation="nearest",
                       extent=(0, T, units.size, 0))
        ax.grid(False)
        ax.set_xlabel("step t" + (f" (means over {w} steps)" if w > 1 else ""))
        ax.set_ylabel("unit" if units.size == H else f"{units.size} of {H} units (most varying)")
        if units.size != H or H <= 16:
            ticks = np.linspace(0, units.size - 1, min(units.size, 5)).astype(int)
            ax.set_yticks(ticks + 0.5, [str(int(units[i])) for i in ticks])
        ax.set_title("hidden state h_t")
        fig.colorbar(im, ax=ax, fraction=0.04, pad=0.01)
    return fig
