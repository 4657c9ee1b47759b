"""What the family page says of one kind: :class:`KindCard`, the generic card, and the pieces the kinds' cards share.

:func:`hiddenstate.report.family_page.family_page` reads an analysis by its attributes; the page's
opening paragraph, each layer's card, the sentence that says what a unit is, what the explorer's
gate buttons show and the memory curve's count of state entries come from the analysis's kind's
:class:`KindCard`: its record's ``card`` in the registry (:mod:`hiddenstate.kinds`), each kind's
in its folder (``kinds/<kind>/card.py``). A kind without a card of its own gets
:data:`ROWS_CARD`: the opening paragraph from ``meta["state"]``, each layer's card from its
``card_rows()`` and ``flow_note``, the unit and the state entries from ``meta``. Nothing here
imports the probes.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

__all__ = ["KEEP", "ROWS_CARD", "KindCard", "gate_row", "per_unit", "per_unit_rows", "quantiles", "rows_html",
           "rows_layer", "state_head"]

#: What the explorer's colours of a keep gate mean (appended to a card's ``gate``).
KEEP = " (its keep gate, in (0, 1]: white forgets at once, warm keeps)"


class KindCard(NamedTuple):
    """What the family page says of one kind.

    Attributes
    ----------
    head : callable
        ``head(meta, what) -> str``: the opening paragraph (HTML), ``what`` is ``"recorded
        recurrent "`` for a transformers model's layers, else ``""``.
    layer : callable
        ``layer(la, meta, curve, recomputed) -> str``: one layer's card (HTML), with the page's
        ``curve(ys, label, xlabel="lag")`` chart and ``recomputed(la)`` line.
    unit : str, default ""
        What a unit is (HTML), for the units table ("": ``meta["unit"]``).
    gate : str, default ""
        What the explorer's gate buttons show (HTML), ending with a full stop ("": the analysis
        names its unit in ``meta["unit"]`` and the explorer's generic text applies).
    entries : str, default ""
        The flattened state's entries, for the memory curve (``"H*(Dk*Dv+Dk)"``; "":
        ``meta["state entries"]``).
    """

    head: Callable
    layer: Callable
    unit: str = ""
    gate: str = ""
    entries: str = ""


def rows_html(rows) -> str:
    """(label, value) rows as the rows of an HTML table, escaped.

    Parameters
    ----------
    rows : iterable of (str, str)

    Returns
    -------
    str
    """
    return "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)


def quantiles(tau) -> str:
    """The 10/50/90% quantiles of the finite time constants, ``"1.2 / 3.4 / 5.6 steps"`` (inf without any).

    Parameters
    ----------
    tau : ndarray

    Returns
    -------
    str
    """
    finite = tau[np.isfinite(tau)]
    q = np.quantile(finite, [0.1, 0.5, 0.9]) if finite.size else [np.inf] * 3
    return " / ".join(f"{v:.3g}" for v in q) + " steps"


def gate_row(la, name) -> tuple:
    """The output gate's row: the share of steps it is open (> 0.9) and shut (< 0.1).

    Parameters
    ----------
    la : layer analysis
        With ``gate`` (GateStats).
    name : str
        The gate's name.

    Returns
    -------
    tuple of (str, str)
    """
    return (f"{name} open > 0.9 / shut < 0.1",
            f"{100 * float(np.mean(la.gate.right)):.1f}% / {100 * float(np.mean(la.gate.left)):.1f}%")


def per_unit(name, values, labels, fmt="{:.3g}") -> str:
    """A one-row table of ``values`` under their ``labels``, wrapped or summarised when wide (:func:`per_unit_rows`).

    Parameters
    ----------
    name : str
        The row's name.
    values : sequence of float
    labels : sequence of str
    fmt : str, default "{:.3g}"

    Returns
    -------
    str
    """
    return per_unit_rows([(name, values, fmt)], labels)


def per_unit_rows(rows, labels, *, corner: str = "per unit", wrap: int = 16, summarise: int = 64) -> str:
    """Tables of per-unit (or per-head) values that fit the card: wrapped every ``wrap`` columns, or summarised.

    Parameters
    ----------
    rows : sequence of (str, sequence of float, str)
        ``(name, values, fmt)``: each row's name, its values (one per label) and format.
    labels : sequence of str
        The columns (``"head 0"``, ``"3"``).
    corner : str, default "per unit"
        The header of the column of row names.
    wrap : int, default 16
        Columns per table; more are wrapped into further tables.
    summarise : int, default 64
        Above this many columns, each row is summarised instead: its minimum, 10/50/90% quantiles,
        maximum and where the maximum is (the explorer lists every unit).

    Returns
    -------
    str
        HTML: every column has a header.
    """
    labels = [str(lab) for lab in labels]
    if len(labels) > summarise:
        body = ""
        for name, vals, fmt in rows:
            v = np.asarray(vals, dtype=np.float64).reshape(-1)
            fin = v[np.isfinite(v)]
            q = [fin.min(), *np.quantile(fin, [0.1, 0.5, 0.9]), fin.max()] if fin.size else [np.nan] * 5
            at = labels[int(np.nanargmax(np.where(np.isnan(v), -np.inf, v)))] if v.size else ""
            body += (f"<tr><th>{html.escape(name)}</th>" + "".join(f"<td>{fmt.format(float(x))}</td>" for x in q)
                     + f"<td>{html.escape(at)}</td></tr>")
        return (f'<p class="key">{len(labels)} columns, summarised (the explorer lists each):</p><table><tr>'
                f"<th>{html.escape(corner)}</th><th>min</th><th>10%</th><th>median</th><th>90%</th><th>max</th>"
                f"<th>max at</th></tr>{body}</table>")
    out = []
    for start in range(0, max(len(labels), 1), wrap):
        cols = "".join(f"<th>{html.escape(lab)}</th>" for lab in labels[start:start + wrap])
        body = "".join(f"<tr><th>{html.escape(name)}</th>"
                       + "".join(f"<td>{fmt.format(float(x))}</td>" for x in list(vals)[start:start + wrap]) + "</tr>"
                       for name, vals, fmt in rows)
        out.append(f"<table><tr><th>{html.escape(corner)}</th>{cols}</tr>{body}</table>")
    return "".join(out)


def state_head(m, what) -> str:
    """The generic opening paragraph: the model, its layers and ``meta["state"]`` in words.

    Parameters
    ----------
    m : dict
        The analysis's ``meta``.
    what : str
        ``"recorded recurrent "`` for a transformers model's layers, else ``""``.

    Returns
    -------
    str
    """
    return (f"<p>{html.escape(m.get('model', ''))}: {m.get('num_layers')} {what}layer(s), "
            f"{html.escape(str(m.get('state', 'a recurrent state')))} per sequence; measured on {m.get('T')} steps of "
            f"{m.get('N')} sequence(s).</p>")


def rows_layer(la, m, curve, recomputed) -> str:
    """The generic layer card: the layer's own rows (``la.card_rows()``, ``la.flow_note``), its time constants, rank.

    Parameters
    ----------
    la : layer analysis
        With ``card_rows()``, ``flow_note``, ``flow_spectral`` and optionally ``time_constants``,
        ``effective_rank`` and ``rank_of``.
    m : dict
        The analysis's ``meta``.
    curve : callable
        The page's ``curve(ys, label, xlabel="lag")`` chart.
    recomputed : callable
        The page's ``recomputed(la)`` line.

    Returns
    -------
    str
    """
    tau = getattr(la, "time_constants", None)
    taus = ""
    if tau is not None and tau.ndim == 1 and tau.size <= 64:
        taus = per_unit("time constant (steps)", tau, [str(j) for j in range(tau.size)])
    rank = getattr(la, "effective_rank", None)
    if rank is not None:  # a matrix state: how full it is, step by step
        full = max(int(getattr(la, "rank_of", 0) or rank.shape[-1]), 1)
        rank = (f"<p>How full the matrix memory is: the entropy effective rank of S<sub>t</sub> (Roy &amp; Vetterli "
                f"2007), mean over heads, as a share of D = {full}, against the step t:</p>"
                f"{curve(rank.mean(axis=1) / full, f'layer {la.layer} effective rank', 'step')}")
    return (f'<section id="layer{la.layer}"><h2>Layer {la.layer}</h2>{recomputed(la)}<table>{rows_html(la.card_rows())}'
            f"</table>{taus}<p>{html.escape(getattr(la, 'flow_note', ''))}</p>"
            f"{curve(la.flow_spectral, f'layer {la.layer} gradient against lag')}{rank or ''}</section>")


#: The card of a kind with none of its own: everything from ``meta`` and the layers' ``card_rows()``.
ROWS_CARD = KindCard(state_head, rows_layer)
