"""Run every hidden-state measurement on a layer and collect the results for a report.

:func:`analyze_model` traces a recurrent layer over an input (:mod:`hiddenstate.probe.trace`) and
computes, with the modules of this package,

* gate statistics per layer, direction and gate (:mod:`hiddenstate.probe.gatestats`);
* gradient norms ``||dL/dh_t||`` against lag from the layer's BPTT and the Jacobian-product
  norms ``||dh_T/dh_{T-k}||`` (:mod:`hiddenstate.probe.gradflow`), with ``sigma_max(W_hh)`` against the
  vanishing bound of Pascanu, Mikolov and Bengio (2013);
* a memory curve of the top layer's state (:mod:`hiddenstate.probe.memory`);
* PCA of the top layer's trajectory (:mod:`hiddenstate.probe.pca`);
* fixed points of the first layer with zero input, started from visited states plus noise
  (:mod:`hiddenstate.probe.fixedpoints`; Sussillo and Barak 2013, Golub and Sussillo 2018);
* for text, the units that best track per-character features (:mod:`hiddenstate.probe.textfeatures`,
  :mod:`hiddenstate.probe.unitfeatures`).

``hiddenstate.report.build_report(path, analysis)`` renders an :class:`Analysis` (this module does
not import the report: the report reads the analysis, not the other way round).
:func:`memory_sweep` measures the memory capacity and cost of untrained layers over hidden sizes
(the fixed-size-bottleneck trade-off as numbers).

The API is layer-based: for a character model, pass its recurrent layer, the encoded input that
layer reads (one-hot or embedded characters, (T, N, I)), the token ids and the text.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hiddenstate.classic import layers
from hiddenstate.classic.cells import kind_of
from hiddenstate.core.progress import progress
from hiddenstate.core.validation import float_array, generator, nonnegative_int, positive_int, shape_str
from hiddenstate.probe.explore import explore_data, varying_memory_unit
from hiddenstate.probe.fixedpoints import find_fixed_points, layer_map, reachable_box
from hiddenstate.probe.gatestats import gate_statistics
from hiddenstate.probe.gradflow import (
    hidden_gradient_norms,
    jacobian_flow,
    spectral_bounds,
)
from hiddenstate.probe.memory import check_lags, memory_curve
from hiddenstate.probe.pca import pca
from hiddenstate.probe.textfeatures import usable_text_features
from hiddenstate.probe.trace import Trace, sequence_layer, trace
from hiddenstate.probe.unitfeatures import best_units, featured_units

__all__ = ["Analysis", "analyze_model", "memory_sweep"]



@dataclass
class Analysis:
    """Everything :func:`analyze_model` measured (each entry may be None when not computed).

    Attributes
    ----------
    trace : Trace
    gates : list of GateStats
    gradient : dict of str to (lags, norms)
        Curves for the report: BPTT gradient norms per layer and the top layer's Jacobian-product
        spectral norm, each ``(lags, values)``. The notebook display draws them;
        ``hiddenstate.report.plots.gradient_figure(an.gradient, an.gradient_refs)`` on their own.
    gradient_refs : dict of str to (lags, values)
        Reference curves, e.g. ``sigma_max(W_hh)**k`` for an Elman RNN.
    gradient_norms : GradientNorms or None
    jacobian : JacobianFlow or None
    bounds : list of dict
        :func:`hiddenstate.probe.gradflow.spectral_bounds` rows.
    memory : MemoryCurve or None
    pca : PCAResult or None
    fixed_points : list of FixedPoint or None
    units : dict of str to UnitCorrelation
    text : str or None
    text_units : dict of str to ndarray (T,)
    meta : dict
    loss : dict or None
    timings : dict of str to float
        Seconds spent in each measurement.
    skipped : dict of str to str
        Measurements that were not made although asked for, and why (e.g. ``"memory"``: the
        sequences are too short for a held-out split; ``"feature 'inside quotes'"``: the text
        has no double quote); their entries above stay None. The report lists them.
    explore : dict or None
        The report's explorer data (:func:`hiddenstate.probe.explore.explore_data`): every unit's
        state and gates on the text, with per-unit summaries.
    """

    trace: Trace
    gates: list = field(default_factory=list)
    gradient: dict = field(default_factory=dict)
    gradient_refs: dict = field(default_factory=dict)
    gradient_norms: Any = None
    jacobian: Any = None
    bounds: list = field(default_factory=list)
    memory: Any = None
    pca: Any = None
    fixed_points: Any = None
    units: dict = field(default_factory=dict)
    text: str | None = None
    text_units: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    loss: Any = None
    timings: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    explore: Any = None

    def __repr__(self) -> str:
        """``Analysis(GRU, H=64, T=2000: gates, gradient, memory, pca, fixed points, units; skipped: ...)``."""
        done = [name for name, v in (("gates", self.gates), ("gradient", self.gradient), ("memory", self.memory),
                                     ("pca", self.pca), ("fixed points", self.fixed_points), ("units", self.units))
                if v is not None and (not isinstance(v, (list, dict)) or len(v) or name == "fixed points")]
        skipped = f"; skipped: {', '.join(self.skipped)}" if self.skipped else ""
        T, N = self.trace.mask.shape
        H = self.trace.layers[0].hidden_size if self.trace.layers else 0
        return f"Analysis({self.trace.kind.upper()}, H={H}, T={T}, N={N}: {', '.join(done) or 'nothing'}{skipped})"

    def _repr_html_(self) -> str:
        from hiddenstate.report.notebook import analysis_html

        return analysis_html(self)

    def report_kwargs(self) -> dict:
        """Keyword arguments for :func:`hiddenstate.report.build_report`.

        Returns
        -------
        dict of str to object
            ``meta``, ``loss``, ``gates``, ``gradient``, ``gradient_refs``, ``memory``, ``pca``,
            ``fixed_points``, ``text``, ``text_units`` (None when the explorer shows them),
            ``explore``, ``skipped``, ``tables`` (None where there is nothing to show) and
            ``project_fixed_points`` (True only for a one-layer, one-direction
            trace, where the fixed points (layer 0, forward) and the PCA (the top layer's
            output) live in the same space).
        """
        tables = {}
        if self.bounds:
            gated = all(row["bound"] is None for row in self.bounds)
            title = ("Largest singular value of each recurrent weight block (the vanishing bound of Pascanu et al. "
                     "2013 applies to Elman RNNs only: a gate near 1 carries the state whatever the weights)"
                     if gated else "Recurrent weights against the vanishing bound (Pascanu et al. 2013)")
            tables[title] = [
                {"matrix": row["matrix"], "gate block": row["block"], "σ_max": row["sigma_max"]}
                | ({} if row["bound"] is None else {
                    "bound 1/γ": row["bound"], "vanishing guaranteed": "yes" if row["vanishing guaranteed"] else "no"})
                for row in self.bounds
            ]
        if self.units:
            tables["Units that track text features"] = [
                {"feature": name, "best unit": int(u.top_units[0]), "r": float(u.top_r[0]),
                 "runner-up": int(u.top_units[1]) if u.top_units.size > 1 else "",
                 "r (runner-up)": float(u.top_r[1]) if u.top_units.size > 1 else ""}
                for name, u in self.units.items()
            ]
        return {
            "meta": self.meta, "loss": self.loss, "gates": self.gates or None, "gradient": self.gradient or None,
            "gradient_refs": self.gradient_refs or None, "memory": self.memory, "pca": self.pca,
            "fixed_points": self.fixed_points, "text": self.text if (self.text_units or self.explore) else None,
            "text_units": None if self.explore else (self.text_units or None), "explore": self.explore,
            "skipped": self.skipped or None, "tables": tables or None,
            # fixed points belong to layer 0 forward; the PCA plane is the top layer's output
            "project_fixed_points": self.trace.num_layers == 1 and self.trace.num_directions == 1,
        }


#: What each measurement of :func:`analyze_model` is, for its ``echo`` lines
_MEASURED = {"trace": "the states and gates of every step", "gates": "gate statistics",
             "gradient": "gradient flow (BPTT gradient norms and Jacobian products)",
             "memory": "the memory curve (decoding the input k steps back)", "pca": "PCA of the top layer's states",
             "fixed points": "fixed points", "text": "the units that track text features, and the explorer's data"}


def _done(bar, echo, timings, key: str, seconds: float, following: str | None, what: str | None = None) -> None:
    """Record a measurement's time, advance the bar to the ``following`` one and tell ``echo`` (``what`` it was)."""
    timings[key] = seconds
    bar.update()
    if following is not None:
        bar.set_postfix_str(following)
    if echo is not None:
        echo(f"measured {what or _MEASURED[key]}: {seconds:.1f} s")


def analyze_model(
    layer,
    x,
    h0=None,
    *,
    tokens=None,
    text: str | None = None,
    loss=None,
    lengths=None,
    max_lag: int = 30,
    grad_steps: int = 100,
    grad_sequences: int = 16,
    n_fixed_point_starts: int = 32,
    fixed_point_input=None,
    rng: np.random.Generator | None = None,
    title_meta: dict | None = None,
    echo=None,
) -> Analysis:
    """Measure a layer's hidden state on an input: gates, gradient flow, memory, PCA, fixed points.

    Parameters
    ----------
    layer : hiddenstate.RNN, GRU or LSTM
    x : ndarray of shape (T, N, I) ((N, T, I) if batch_first) or (T, I)
        The input the layer reads (e.g. one-hot characters).
    h0 : optional
        Initial state as for ``layer.forward``.
    tokens : array_like of int, shape (T, N) or (T,), optional
        Token ids behind ``x``; the memory curve then decodes the token ``k`` steps back
        (accuracy). Without tokens it regresses ``x[t-k]`` (R^2).
    text : str, optional
        The characters of sequence 0 (one per step); enables the unit-feature correlations and
        the coloured-text view.
    loss : mapping or array, optional
        Loss history to show (passed through to the report).
    lengths : array_like of int, shape (N,), optional
        Valid steps per sequence.
    max_lag : int, default 30
        Largest lag of the memory curve. The Jacobian products span the BPTT curve's lags
        (``0..grad_steps-1``, so both gradient curves end together) or, without it, ``2 * max_lag``.
    grad_steps, grad_sequences : int, default 100 and 16
        The BPTT gradient-norm measurement (``O(T^2)``) uses the first ``grad_steps`` steps of the
        first ``grad_sequences`` sequences; 0 skips it. Skipped for bidirectional layers and
        ragged batches.
    n_fixed_point_starts : int, default 32
        Starting states for the fixed-point search (0 skips it).
    fixed_point_input : array_like of shape (I,), optional
        The constant input of the first layer during the fixed-point search; default zeros
        (Sussillo and Barak 2013). For a character model, the one-hot vector of a common
        character (e.g. the space) is often more telling than "no character".
    rng : numpy.random.Generator, optional
        Draws the fixed-point starts and their noise (default ``default_rng(0)``).
    title_meta : dict, optional
        Extra entries for the report header.
    echo : callable, optional
        Called with one line of text after each measurement (what it measured and its seconds,
        e.g. ``"measured fixed points (search from 32 starts): 4.1 s"``); ``hiddenstate inspect``
        prints them on stderr when stderr is not a terminal (on a terminal a progress bar shows).
        Default: silent.

    Returns
    -------
    Analysis
        A measurement that could not be made (too short a sequence, no valid step) is None and
        says why in :attr:`Analysis.skipped`.

    Raises
    ------
    TypeError
        ``layer`` is not a sequence layer; a count that is not an integer (``max_lag=2.9``);
        ``tokens`` that are not integers; ``text`` that is not a str; ``rng`` that is not a
        Generator; ``title_meta`` that is not a mapping.
    ValueError
        A negative count, ``tokens`` whose shape does not match the input, and every error of
        :func:`~hiddenstate.probe.trace.trace` and of the measurements.
    """
    cell = kind_of(sequence_layer(layer))
    kind = cell.name
    xs = np.shape(x)
    t_axis = 1 if (len(xs) == 3 and layer.batch_first) else 0
    if len(xs) in (2, 3) and xs[t_axis] == 0:
        raise ValueError(f"x must have at least one time step to analyse; got T = 0 (x of shape {shape_str(xs)}"
                         f"{', batch_first' if t_axis else ''}).")
    max_lag = nonnegative_int("max_lag", max_lag)
    grad_steps = nonnegative_int("grad_steps", grad_steps)
    grad_sequences = positive_int("grad_sequences", grad_sequences)
    n_fixed_point_starts = nonnegative_int("n_fixed_point_starts", n_fixed_point_starts)
    rng = np.random.default_rng(0) if rng is None else generator(rng)
    if text is not None and not isinstance(text, str):
        raise TypeError(f"text must be a str or None; got {type(text).__name__}.")
    if title_meta is not None and not isinstance(title_meta, Mapping):
        raise TypeError(f"title_meta must be a mapping or None; got {type(title_meta).__name__}.")
    if fixed_point_input is not None:
        fixed_point_input = float_array("fixed_point_input", fixed_point_input, dtype=np.float64)
    if echo is not None and not callable(echo):
        raise TypeError(f"echo must be callable or None; got {type(echo).__name__}.")
    timings = {}
    bar = progress(7, "analysing the hidden state", unit="measurement")  # on a terminal only
    bar.set_postfix_str("trace")
    t0 = time.perf_counter()
    tr = trace(layer, x, h0, lengths=lengths)
    _done(bar, echo, timings, "trace", time.perf_counter() - t0, "gates")
    T, N = tr.mask.shape
    tok = None
    if tokens is not None:
        tok = np.asarray(tokens)
        if tok.dtype == bool or tok.dtype.kind not in "iu":
            raise TypeError(f"tokens must be an integer array of shape (T={T}, N={N}); got dtype {tok.dtype}.")
        tok = tok[:, None] if (tok.ndim == 1 and N == 1) else tok
        if tok.shape != (T, N):
            raise ValueError(f"tokens must have shape (T={T}, N={N}) (or (T,) for one sequence), one id per step of "
                             f"x; got {shape_str(np.shape(tokens))}.")
    H, L, D = layer.hidden_size, layer.num_layers, layer.num_directions
    an = Analysis(trace=tr, loss=loss, text=text)
    an.meta = {"cell": kind.upper(), "hidden size": H, "layers": L, "directions": D,
               "parameters": int(sum(np.size(v) for v in layer.params.values())), "time steps analysed": T, "sequences": N}
    an.meta.update(title_meta or {})

    # gates
    t0 = time.perf_counter()
    for lt in tr:
        for g in cell.sigmoid_gates:
            an.gates.append(gate_statistics(lt.gates[g], mask=tr.mask, name=f"{lt.label} {g}", keep=g == cell.keep_gate))
    _done(bar, echo, timings, "gates", time.perf_counter() - t0, "gradient flow")

    # gradient flow
    t0 = time.perf_counter()
    an.bounds = spectral_bounds(layer)
    top = tr[L - 1, 0]
    bptt = bool(grad_steps) and D == 1 and lengths is None
    # the Jacobian products span the BPTT curve's lags, so both curves end at the same lag
    an.jacobian = jacobian_flow(top, max_lag=min(grad_steps, T) - 1 if bptt else min(max_lag * 2, T))
    an.gradient[f"largest gain from h_T-k to h_T: σ_max(∂h_T/∂h_T-k), layer {L - 1}"] = (
        an.jacobian.lags, an.jacobian.spectral)
    if grad_steps and (D != 1 or lengths is not None):
        an.skipped["gradient norms"] = ("BPTT gradient norms are measured along one direction of unpadded sequences; "
                                        f"got {'a bidirectional layer' if D != 1 else 'lengths'}.")
    if grad_steps and D == 1 and lengths is None:
        ts, ns = min(grad_steps, T), min(grad_sequences, N)
        xt = tr[0].x[:ts, :ns]
        if layer.batch_first:
            xt = xt.transpose(1, 0, 2)
        h_init = np.stack([lt.h_prev[0] for lt in tr.layers])[:, :ns]  # (L, ns, H) the state each layer started from
        h0s = (h_init, np.stack([lt.c_prev[0] for lt in tr.layers])[:, :ns]) if cell.has_cell else h_init
        an.gradient_norms = hidden_gradient_norms(layer, xt, h0s)
        for li in range(L):
            an.gradient[f"gradient of a loss at step T reaching h_T-k (BPTT), layer {li}"] = an.gradient_norms.curve(li)
    if an.bounds and an.bounds[-1]["bound"] is not None:  # a bound that applies: the Elman RNN's
        s = an.bounds[-1]["sigma_max"]
        lags = np.arange(an.jacobian.lags.size)
        with np.errstate(under="ignore", over="ignore"):
            an.gradient_refs[f"σ_max(W_hh)^k = {s:.2f}^k"] = (lags, s ** lags.astype(np.float64))
    _done(bar, echo, timings, "gradient", time.perf_counter() - t0, "memory")

    # states of the top layer (directions concatenated)
    states = tr.output  # (T, N, D*H)

    # memory
    t0 = time.perf_counter()
    K = min(max_lag, max(T // 3, 0))
    try:
        check_lags(tr.mask, K, 0.75)  # the one condition under which the curve is skipped, not failed
    except ValueError as exc:
        an.skipped["memory"] = f"the sequences are too short for a held-out split: {exc}"
    else:  # any other error of the measurement surfaces
        an.memory = memory_curve(states, tok if tok is not None else tr[0].x, max_lag=K, mask=tr.mask)
    _done(bar, echo, timings, "memory", time.perf_counter() - t0, "PCA")

    # PCA
    t0 = time.perf_counter()
    if tr.mask[:, 0].sum() >= 2:
        an.pca = pca(states[:, :1] if N > 1 else states, mask=tr.mask[:, :1] if N > 1 else tr.mask)
    else:
        an.skipped["pca"] = f"sequence 0 has {int(tr.mask[:, 0].sum())} valid step(s); PCA needs at least 2."
    _done(bar, echo, timings, "pca", time.perf_counter() - t0, "fixed points")

    # fixed points of the first layer, zero input
    t0 = time.perf_counter()
    if n_fixed_point_starts:
        first = tr[0, 0]
        visited = first.h[tr.mask]  # (M, H)
        if cell.has_cell:
            visited = np.concatenate([visited, first.c[tr.mask]], axis=1)  # state (h, c)
        if not visited.shape[0]:
            an.skipped["fixed points"] = "no valid step to start the search from."
        else:
            pick = rng.choice(visited.shape[0], size=min(n_fixed_point_starts, visited.shape[0]), replace=False)
            starts = visited[pick] + 0.5 * visited.std(axis=0) * rng.normal(size=(pick.size, visited.shape[1]))
            F, J = layer_map(layer, fixed_point_input, layer_index=0, direction=0)
            # half the starts are first run forward under the map: that finds the attractors even
            # where saturated gates make q nearly flat (the optimiser then finds saddles/slow points)
            half = pick.size // 2
            if half:
                for _ in range(300):  # all of them at once: one batched step (K, S) -> (K, S)
                    starts[:half] = F(starts[:half])
            box = reachable_box(layer)
            lo = np.array([-np.inf if b[0] is None else b[0] for b in box])
            hi = np.array([np.inf if b[1] is None else b[1] for b in box])
            an.fixed_points = find_fixed_points(F, J, np.clip(starts, lo, hi), max_iter=200, bounds=box)
    fp_note = (f"{an.fixed_points.n_starts} starts, {len(an.fixed_points)} found" if an.fixed_points is not None
              else "skipped" if not n_fixed_point_starts else "no start")
    _done(bar, echo, timings, "fixed points", time.perf_counter() - t0, "text features", f"fixed points ({fp_note})")

    # text features, the coloured-text views and the explorer
    t0 = time.perf_counter()
    if text is not None:
        n_chars = min(len(text), int(tr.mask[:, 0].sum()))
        acts = states[:n_chars, 0]  # (T', D*H)
        feats, skipped = usable_text_features(text[:n_chars])
        an.skipped.update(skipped)
        featured = []  # (label, signal, unit) buttons of the explorer
        if feats and n_chars >= 2:
            an.units = best_units(acts, feats, top=3)
            # each feature's best unit, as in the report's table; a unit best for several features once
            for unit, names in featured_units(an.units, limit=4):
                rs = [float(an.units[n].r[unit]) for n in names]
                tracks = ", ".join(f"{n} · r = {r:+.2f}" if len(names) == 1 else f"{n} (r = {r:+.2f})"
                                   for n, r in zip(names, rs))
                an.text_units[f"unit {unit} · tracks {tracks}"] = acts[:, unit]
                featured.append((f"{', '.join(names)}: unit {unit}, r = {', '.join(f'{r:+.2f}' for r in rs)}", "h", unit))
        if cell.keep_gate is not None and n_chars:
            gate = tr[L - 1, 0].gates[cell.keep_gate][:n_chars, 0]  # (T', H)
            j = varying_memory_unit(gate)
            tau = 1.0 / max(1.0 - float(gate[:, j].mean()), 1e-12)
            label = (f"{cell.keep_gate} gate of unit {j} · long memory (τ ≈ {tau:.1f} steps) that varies most, "
                     f"{cell.keep_gate} in [{gate[:, j].min():.2f}, {gate[:, j].max():.2f}]")
            an.text_units[label] = gate[:, j]
            featured.append((f"{cell.keep_gate} gate of unit {j}, τ ≈ {tau:.1f} steps", cell.keep_gate, j))
        an.text = text[:n_chars]
        if n_chars:
            an.explore = explore_data(tr, an.text, an.units, featured=featured)
    _done(bar, echo, timings, "text", time.perf_counter() - t0, None)
    bar.close()
    an.timings = timings
    return an


def memory_sweep(cell: str, hidden_sizes, x, targets, *, max_lag: int = 20, rng: np.random.Generator | None = None,
                 repeats: int = 3) -> list[dict]:
    """Memory capacity and cost of untrained layers over hidden sizes.

    For each ``H`` a fresh layer (PyTorch's U(-1/sqrt(H), 1/sqrt(H)) initialisation) reads ``x``;
    its memory curve for ``targets`` gives the capacity (:attr:`MemoryCurve.capacity`) and the
    forward pass the cost. This is the "hidden size" trade-off of the seeds measured: a bigger
    state keeps more of the past, at a cost that grows like ``H**2`` per step.

    Parameters
    ----------
    cell : {"rnn", "gru", "lstm"}
    hidden_sizes : sequence of int
    x : ndarray of shape (T, N, I)
    targets : ndarray of shape (T, N) (int tokens) or (T, N, P) (floats)
        What the memory curve decodes (e.g. ``x`` itself).
    max_lag : int, default 20
    rng : numpy.random.Generator, optional
        Initial weights (default ``default_rng(0)``).
    repeats : int, default 3
        Forward passes timed (the fastest is reported).

    Returns
    -------
    list of dict
        One row per hidden size: ``"H"``, ``"parameters"``, ``"µs per step"`` (per sequence),
        ``"capacity"``, ``"horizon (R² ≥ 0.5)"`` or ``"horizon (acc ≥ 0.5)"``.

    Raises
    ------
    TypeError
        A size, ``repeats`` or ``max_lag`` that is not an integer (``64.5`` is not truncated), ``x``
        that is not real numbers, ``rng`` that is not a Generator.
    ValueError
        An unknown ``cell``, a size or ``repeats`` below 1, ``x`` not (T, N, I), and the errors of
        :func:`~hiddenstate.probe.memory.memory_curve`.
    """
    cls = layers.BY_KIND.get(cell) if isinstance(cell, str) else None
    if cls is None:
        raise ValueError(f"cell must be one of {', '.join(repr(k) for k in layers.BY_KIND)}; got {cell!r}.")
    rng = np.random.default_rng(0) if rng is None else generator(rng)
    x = float_array("x", x, dtype=np.float64)
    if x.ndim != 3:
        raise ValueError(f"x must have shape (T, N, I); got {x.shape}.")
    if isinstance(hidden_sizes, (str, bytes)) or not hasattr(hidden_sizes, "__iter__"):
        raise TypeError(f"hidden_sizes must be a sequence of positive integers; got {type(hidden_sizes).__name__}.")
    sizes = [positive_int(f"hidden_sizes[{i}]", H) for i, H in enumerate(hidden_sizes)]
    repeats = positive_int("repeats", repeats)
    max_lag = nonnegative_int("max_lag", max_lag)
    T, N, I = x.shape
    rows = []
    for H in sizes:
        layer = cls(I, H, rng=rng)
        best = np.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            out, _ = layer(x)
            best = min(best, time.perf_counter() - t0)
        mc = memory_curve(out, targets, max_lag=max_lag)
        key = "horizon (R² ≥ 0.5)" if mc.metric == "r2" else "horizon (acc ≥ 0.5)"
        rows.append({"H": int(H), "parameters": int(sum(v.size for v in layer.params.values())),
                     "µs per step": 1e6 * best / (T * N), "capacity": mc.capacity, key: mc.horizon(0.5)})
    return rows
