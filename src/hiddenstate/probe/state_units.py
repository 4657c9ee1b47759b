"""A Mamba channel as a unit: its activation, its keep gate, the text features it tracks, the explorer's data.

The tools that read one value per unit and step (the unit features of
:mod:`hiddenstate.probe.unitfeatures`, the explorer of :mod:`hiddenstate.probe.explore`) read a
Mamba layer's Di channels as its units:

* **the channel's activation** is its readout before the gate, ``y_t[d] = C_t . h_t[d] + D_d a_t[d]``
  (:attr:`MambaRecord.y <hiddenstate.kinds.ssm.mamba_kernel.MambaRecord>`): the one number per step that the
  layer computes from the channel's S state entries (the output projection reads ``y * silu(z)``),
  signed and unbounded like an RNN unit's ``h``. The channel's state norm ``||h_t[d]||`` would
  be the other candidate; it is never negative and counts entries that ``C_t`` does not read at
  that step, so it says less about what the channel passes on;
* **its keep gate** is the mean over its S entries of the decay, ``mean_s exp(dt_t[d] A[d, s])``
  in (0, 1] (all entries of a channel share its step ``dt_t[d]``), and its time constant
  ``1 / (1 - mean over steps of that gate)``, as for the keep gate of the gated kinds;
* the output gate's sigmoid part ``sigmoid(z_t[d])`` (``silu(z) = z sigmoid(z)``) in (0, 1) is
  the second gate view.

A Mamba-2 layer (:class:`~hiddenstate.kinds.ssm.mamba2_kernel.Mamba2Record`) reads the same way with its Di
= H * P head-channels as its units, channel ``d = h * P + p`` (head ``h``, row ``p``): its
activation is its readout before the gate and the gated norm, ``y_t[h, p] = h_t[h, p] . C_t[g(h)]
+ D_h x_t[h, p]`` (``g(h)`` the head's group); the norm divides a whole group of channels by their
common RMS, so after it a channel's value depends on every other channel of its group, and ``y``
is the last value that is the channel's own. Its keep gate is its head's decay ``exp(dt_t A_h)``,
the one scalar that multiplies the channel's whole row of S state entries.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.kinds.ssm.mamba2_kernel import Mamba2Record
from hiddenstate.kinds.ssm.mamba_kernel import MambaRecord
from hiddenstate.kinds.ssm.view import mamba2_view, mamba_view
from hiddenstate.probe.explore import varying_memory_unit
from hiddenstate.probe.gatestats import time_constant, unit_time_constants
from hiddenstate.probe.unitfeatures import best_units, featured_units

__all__ = ["channel_activations", "channel_decay", "channel_features", "mamba_explore_data", "view_explore_data"]


def channel_activations(record: MambaRecord | Mamba2Record) -> np.ndarray:
    """Each channel's readout before the gate, ``y_t[d] = C_t . h_t[d] + D_d a_t[d]``.

    Parameters
    ----------
    record : MambaRecord or Mamba2Record
        One layer's record (time-major); for Mamba-2 the head-channels ``d = h * P + p`` of
        ``y`` (T, N, H, P), before the gate and the gated norm.

    Returns
    -------
    ndarray of shape (T, N, Di)
    """
    if isinstance(record, Mamba2Record):
        return record.y.reshape(record.y.shape[:2] + (-1,))
    return record.y


def channel_decay(record: MambaRecord | Mamba2Record) -> np.ndarray:
    """Each channel's keep gate: the mean over its S state entries of ``exp(dt_t A)``.

    Parameters
    ----------
    record : MambaRecord or Mamba2Record
        For Mamba-2 the gate of head-channel ``d = h * P + p`` is its head's decay
        ``exp(dt_t A_h)`` (all S entries of the row share it).

    Returns
    -------
    ndarray of shape (T, N, Di), in (0, 1]
    """
    if isinstance(record, Mamba2Record):
        return np.repeat(record.decay, record.y.shape[-1], axis=-1)
    return record.decay.mean(axis=-1)


def channel_features(record: MambaRecord | Mamba2Record, features: dict) -> dict:
    """The channels of sequence 0 that track each text feature best (Pearson r of ``y`` with the feature).

    Parameters
    ----------
    record : MambaRecord or Mamba2Record
        One layer's record; sequence 0 read the text.
    features : dict of str to ndarray of shape (T',)
        Per-character features, ``T' <= T`` (e.g. :func:`hiddenstate.probe.textfeatures.usable_text_features`).

    Returns
    -------
    dict of str to UnitCorrelation
        :func:`~hiddenstate.probe.unitfeatures.best_units` of ``y[:T', 0]`` (Di channels), top 3.
    """
    n = len(next(iter(features.values()))) if features else 0
    return best_units(channel_activations(record)[:n, 0], features, top=3)


def mamba_explore_data(record: MambaRecord | Mamba2Record, text: str, units: dict | None) -> dict:
    """The explorer's data (the format of :func:`hiddenstate.probe.explore.explore_data`) for one Mamba layer.

    Parameters
    ----------
    record : MambaRecord or Mamba2Record
        The layer's record; sequence 0 read ``text``.
    text : str
        Its characters, one per step, ``1 <= len(text) <= T``.
    units : dict of str to UnitCorrelation, or None
        :func:`channel_features` of the same layer (None or empty: no feature columns).

    Returns
    -------
    dict
        :func:`view_explore_data` of the record's view: ``"signals"`` ``"y"`` (T', Di), the keep
        gate ``"decay"`` (:func:`channel_decay`) and the output gate ``"sigmoid(z)"``.
    """
    view = mamba2_view(record) if isinstance(record, Mamba2Record) else mamba_view(record)
    return view_explore_data(view, text, units)


def _heads(view) -> int:
    """How many heads the units come in (0: none): a matrix state's heads, or the keep gate's first axis when it groups units."""
    U = view.units.shape[-1]
    if view.matrix is not None:
        return int(view.matrix.shape[2])
    g = int(view.keep_shape[0]) if view.keep is not None and view.keep_shape else 0
    return g if 1 <= g < U and U % g == 0 else 0


def view_explore_data(view, text, units: dict | None, *, time_constants=None, name: str = "") -> dict:
    """The explorer's data (the format of :func:`hiddenstate.probe.explore.explore_data`) of one layer's view.

    Parameters
    ----------
    view : RecordView
        The layer's :class:`~hiddenstate.kinds.RecordView`; sequence 0 read ``text``.
    text : str or sequence of str
        Its characters, or its tokens' pieces (:func:`hiddenstate.probe.tokens.token_pieces`),
        one per step, ``1 <= len(text) <= T``.
    units : dict of str to UnitCorrelation, or None
        The best units of the same layer for each text feature (None or empty: no feature columns).
    time_constants : ndarray, optional
        The layer's time constants, shaped ``view.keep_shape`` (:func:`hiddenstate.probe.layer_loop.view_measures`):
        the explorer's column is :func:`~hiddenstate.probe.gatestats.unit_time_constants` of them,
        the numbers the layer's card summarises. Default: computed from ``view.keep``.
    name : str, default ""
        What the explorer's layer selector calls the layer (``"layer 3"``).

    Returns
    -------
    dict
        ``"text"``; ``"name"``; ``"signals"``: ``"y"`` the units' activations (T', U), the keep
        gate ``"decay"`` (``view.unit_keep``) and, where the kind has a (0, 1) output gate, that gate
        under ``view.out_gate_name``; ``"units"``: ``"best feature"`` and ``"|r|"`` (with
        ``units``), ``"time constant"`` (:func:`~hiddenstate.probe.gatestats.unit_time_constants`,
        capped at 1e6 steps) and ``"saturation"`` (the fraction of steps the output gate is
        below 0.1 or above 0.9; a decay is no on/off gate, so it does not count), each of shape
        (U,), each only where the kind has such a gate; ``"featured"``: each feature's best unit
        on ``y`` (at most 4) and the long-memory unit whose decay varies most; ``"norm"``: the
        norm of the whole state ``||S_t||`` (T',); ``"heads"``: how many heads the units come in,
        unit k in head ``k // (U / heads)`` (0: no heads); ``"matrix"``: a matrix state's
        ``S_t`` of sequence 0, (T', H, Dk, Dv), or None.
    """
    n = len(text)
    y = view.units[:n, 0]  # (T', U)
    decay = None if view.unit_keep is None else view.unit_keep[:n, 0]
    gates = {} if decay is None else {"decay": decay}
    if view.out_gate is not None:
        gates[view.out_gate_name] = view.out_gate[:n, 0]
    cols, featured = {}, []
    if units:
        names = list(units)
        R = np.stack([units[k].r for k in names])  # (F, U)
        best = np.argmax(np.abs(R), axis=0)
        cols["best feature"] = [f"{names[b]} (r = {R[b, j]:+.2f})" for j, b in enumerate(best)]
        cols["|r|"] = np.abs(R[best, np.arange(R.shape[1])])
        for unit, fnames in featured_units(units, limit=4):
            rs = ", ".join(f"{float(units[f].r[unit]):+.2f}" for f in fnames)
            featured.append((f"{', '.join(fnames)}: channel {unit}, r = {rs}", "y", unit))
    if decay is not None:  # a kind without a keep gate (a short convolution) has no time constants
        if time_constants is None:
            time_constants = time_constant(np.clip(view.keep.reshape(-1, *view.keep_shape).mean(axis=0), 0.0, 1.0))
        tau = unit_time_constants(time_constants, y.shape[1])
        if tau is not None:
            cols["time constant"] = np.minimum(tau, 1e6)
    if view.out_gate is not None:
        g = gates[view.out_gate_name]
        cols["saturation"] = ((g < 0.1) | (g > 0.9)).mean(axis=0)
    if decay is not None:
        j = varying_memory_unit(decay)
        featured.append((f"decay of channel {j}, τ ≈ {float(cols.get('time constant', [np.inf] * (j + 1))[j]):.3g} "
                         "steps", "decay", j))
    return {"text": text, "name": name, "signals": {"y": y, **gates}, "units": cols, "featured": featured,
            "norm": np.linalg.norm(view.state[:n, 0], axis=1), "heads": _heads(view),
            "matrix": None if view.matrix is None else view.matrix[:n, 0]}
