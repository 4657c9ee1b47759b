"""The RNNs inside any torch model, measured like ours: :func:`inspect_rnns_inside`.

The model runs itself on its own inputs while every ``torch.nn.RNN/GRU/LSTM`` (and cell) inside
it is hooked and recomputed by our layer, held to the module's own output
(:func:`hiddenstate.interop.torch_rnns.recompute_rnns`); each recovered RNN is then measured by
:func:`hiddenstate.analyze_model` on the input it read. The report shows one RNN's measurements
in full (the first one, or the one ``layers`` names first) and a table of every RNN by module
path with its recomputation error and headline measurements. :func:`hiddenstate.inspect_model`
comes here for a torch model (transformers ones included) that holds RNNs and is not a
recurrent model we read as a whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hiddenstate.interop.torch_rnns import RNNsInside, recompute_rnns
from hiddenstate.probe.analysis import analyze_model
from hiddenstate.report import build_report

__all__ = ["InsideAnalysis", "inspect_rnns_inside"]


@dataclass
class InsideAnalysis:
    """What :func:`inspect_rnns_inside` measured: every RNN inside a torch model, by module path.

    Attributes
    ----------
    model : str
        What the report calls the model (its class name by default).
    recomputed : RNNsInside
        The recovered RNNs (inputs, our layers, errors) and the modules skipped, with why.
    analyses : dict of str to Analysis
        Per analysed RNN (its :attr:`~hiddenstate.interop.torch_rnns.RecoveredRNN.name`), the
        :func:`hiddenstate.analyze_model` result on the input it read.
    rows : list of dict
        The report's table: one row per analysed RNN.
    """

    model: str
    recomputed: RNNsInside
    analyses: dict = field(default_factory=dict)
    rows: list = field(default_factory=list)

    def __getitem__(self, name: str):
        """The analysis of the RNN of that name (``an["decoder.lstm"]``)."""
        if name not in self.analyses:
            raise KeyError(f"name must be one of {list(self.analyses)}; got {name!r}.")
        return self.analyses[name]

    def __repr__(self) -> str:
        """``InsideAnalysis(EncodecModel: encoder.layers.7.lstm (LSTM, error 2.2e-07), ...)``."""
        parts = [f"{r['module']} ({r['kind']}, error {r['recomputation error']:.2g})" for r in self.rows]
        return f"InsideAnalysis({self.model}: {', '.join(parts)})"


def _call(inputs) -> tuple[tuple, dict]:
    """The model's call from ``inputs``: a tensor (one argument), a tuple/list (arguments) or a mapping (keywords)."""
    if isinstance(inputs, Mapping):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


def _chosen(names: list, layers) -> list:
    if layers is None:
        return names
    wanted = [layers] if isinstance(layers, str) else list(layers) if isinstance(layers, (list, tuple)) else None
    if wanted is None or not wanted or any(not isinstance(w, str) for w in wanted):
        raise TypeError(f"layers must be a module path (a str) or a list of them for a torch model with RNNs inside; "
                        f"got {layers!r:.80}.")
    bad = [w for w in wanted if w not in names]
    if bad:
        raise ValueError(f"layers must name RNNs of this model, {names}; got {bad}.")
    return wanted


def _row(rec, an) -> dict:
    layer = rec.layer
    pca = an.pca
    T, N = rec.x.shape[:2]
    return {"module": rec.name, "class": rec.module_class.rsplit(".", 1)[-1], "kind": type(layer).__name__,
            "layers × units": f"{layer.num_layers} × {layer.hidden_size}" + (" × 2 directions" if layer.bidirectional
                                                                                else ""),
            "calls": len(rec.calls) if len(rec.calls) == 1 else f"{len(rec.calls)}, joined in time",
            "steps × sequences": f"{T} × {N}", "dtype": rec.dtype, "recomputation error": rec.error,
            "tolerance": rec.tolerance,
            "PCA: components for 90%": "" if pca is None else pca.n_components_for(0.9),
            "fixed points": "" if an.fixed_points is None else len(an.fixed_points)}


def inspect_rnns_inside(model, inputs, *, method=None, layers=None, out=None, title=None, source=None,
                        max_lag: int = 30, n_fixed_point_starts: int = 32, rng=None, echo=None,
                        tol=None) -> InsideAnalysis:
    """Recompute and measure every RNN inside a torch model run on ``inputs``; optionally write the report.

    Parameters
    ----------
    model : torch.nn.Module
        Holding ``torch.nn.RNN/GRU/LSTM`` modules or cells (transformers classes wrapping them
        included), anywhere in its tree.
    inputs : torch.Tensor, tuple, list or mapping
        What the model is called with: a tensor is its one argument, a tuple or list its
        arguments, a mapping its keywords (``{"input_values": x}``).
    method : callable, optional
        Called instead of ``model`` (e.g. ``model.generate``), as by
        :func:`~hiddenstate.interop.torch_rnns.recompute_rnns`.
    layers : str or list of str, optional
        The RNNs to analyse, by name (module path, ``[call k]`` where so named); default all. The
        report's sections show the first.
    out : str or os.PathLike, optional
        The HTML report to write (checked by the caller).
    title, source : str, optional
        The report's title; what it calls the model (default its class name).
    max_lag, n_fixed_point_starts, rng, echo
        As :func:`hiddenstate.analyze_model`.
    tol : float, optional
        The recomputation tolerance (default by dtype).

    Returns
    -------
    InsideAnalysis

    Raises
    ------
    TypeError
        ``model`` not a torch module; ``layers`` not str.
    ValueError
        No RNN to recompute; a recomputation above the tolerance (named); ``layers`` naming no
        recovered RNN; and the errors of :func:`hiddenstate.analyze_model`.
    """
    args, kwargs = _call(inputs)
    rec = recompute_rnns(model, *args, method=method, tol=tol, **kwargs)
    names = _chosen([r.name for r in rec.rnns], layers)
    source = type(model).__name__ if source is None else source
    result = InsideAnalysis(model=source, recomputed=rec)
    for name in names:
        r = rec[name]
        meta = {"model": source, "module": r.name, "recomputed": f"by our {type(r.layer).__name__}, error "
                f"{r.error:.2g} (tolerance {r.tolerance:.2g}, {r.dtype})"}
        an = analyze_model(r.layer, r.x, r.h0, lengths=r.lengths, max_lag=max_lag,
                           n_fixed_point_starts=n_fixed_point_starts, rng=rng, title_meta=meta, echo=echo)
        result.analyses[name] = an
        result.rows.append(_row(r, an))
    if out is not None:
        first = rec[names[0]]
        an = result.analyses[names[0]]
        kw = an.report_kwargs()
        tables = {f"The RNNs inside {source}, each recomputed by our layer and held to its own output": result.rows,
                  **(kw.get("tables") or {})}
        if rec.skipped:
            tables["Recurrent modules not analysed"] = [{"module": p or "(the model)", "why": w}
                                                        for p, w in rec.skipped.items()]
        T, N = first.x.shape[:2]
        subtitle = (f"{source} holds {len(rec.rnns)} recurrent module run(s); the sections below measure "
                    f"{first.name} ({type(first.layer).__name__}, {first.layer.num_layers} layer(s) × "
                    f"{first.layer.hidden_size} units) on the {T:,} steps of {N:,} sequence(s) it read "
                    f"(layers=[...] picks another).")
        build_report(out, an, title=title or f"The RNNs inside {source}", subtitle=subtitle, tables=tables)
    return result
