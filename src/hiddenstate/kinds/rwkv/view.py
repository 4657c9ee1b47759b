"""The RWKV-4 kind (Peng et al. 2023): ``"rwkv"``, the WKV numerator and denominator with a fixed decay per channel.

One step of :class:`~hiddenstate.kinds.rwkv.block.RWKVTimeMix` per row and channel (:mod:`hiddenstate.kinds.rwkv.kernel`),
in the unstabilised terms ``a~_t = a_t exp(p_t)``, ``b~_t = b_t exp(p_t)``::

    a~_t = w a~_{t-1} + exp(k_t) v_t          b~_t = w b~_{t-1} + exp(k_t)          w = exp(-exp(time_decay))

The stored state (transformers' ``state[2:5]`` of the layer) is ``(num, den, max)``: the sums
scaled by ``exp(-max_t)``; ``state[1]``, the token shift's last input, is the layer's input
itself. What the analyses read (:class:`~hiddenstate.kinds.base.RecordView`):

* ``state``: the stored ``num`` and ``den`` of every channel, (T, N, 2A);
* ``keep``: the decay ``w`` per channel (``keep_shape`` (A,)), the same at every step (it is a
  parameter, not a gate of the input): its time constant ``1 / (1 - w)`` is the channel's memory
  in steps;
* ``lag_norms``: ``da~_T/da~_{T-k} = w^k`` per channel (and the same for ``b~``), a diagonal
  recurrence; the stored state's Jacobian is that times ``exp(max_{T-k} - max_T)``, the running
  maximum's change of scale, which ``wkv = num / den`` divides out;
* ``units``: a channel's ``wkv_t`` (the value average the layer reads out), its keep gate the
  channel's decay; ``out_gate`` the receptance ``r_t = sigmoid(W_r x_t)`` that multiplies it.

The record (:class:`RWKVRecord`) comes from one forward pass of the layer (:func:`rwkv_run`).

References
----------
B. Peng et al., "RWKV: Reinventing RNNs for the Transformer Era", Findings of EMNLP 2023,
arXiv:2305.13048 (Sec. 4.1.2, the WKV operator).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hiddenstate.kinds.base import Kind, LagNorms, RecordView, diagonal_lag_norms
from hiddenstate.kinds.rwkv.block import RWKVTimeMix

__all__ = ["KINDS", "RWKVRecord", "rwkv_run", "rwkv_states", "rwkv_view"]


class RWKVRecord(NamedTuple):
    """Every step of one :class:`~hiddenstate.kinds.rwkv.block.RWKVTimeMix` call, time-major (T steps, N sequences).

    Attributes
    ----------
    shift : ndarray of shape (T, N, M)
        The token shift's state after every step: that step's input.
    num, den : ndarray of shape (T, N, A)
        The stored (stabilised) WKV numerator and denominator.
    max : ndarray of shape (T, N, A)
        Their running maximum.
    decay : ndarray of shape (T, N, A)
        The decay ``exp(-exp(time_decay))`` of every channel, the same at every step (a read-only
        broadcast of the (A,) parameter).
    k : ndarray of shape (T, N, A)
        The keys (the log weight of each step's value).
    r : ndarray of shape (T, N, A)
        The receptance ``sigmoid(W_r x)``.
    wkv : ndarray of shape (T, N, A)
        The WKV readout.
    current : ndarray of shape (T, N, A)
        The current token's share of ``wkv_t``'s weights, ``e^{k_t + u} / (e^{k_t + u} + sum_{s<t}
        w^{t-1-s} e^{k_s})`` in (0, 1]: how much of the readout is the present token (with its
        bonus ``u = time_first``) rather than the memory.
    """

    shift: np.ndarray
    num: np.ndarray
    den: np.ndarray
    max: np.ndarray
    decay: np.ndarray
    k: np.ndarray
    r: np.ndarray
    wkv: np.ndarray
    current: np.ndarray


def rwkv_run(block: RWKVTimeMix, u, **forward):
    """The RWKV kind's :attr:`~hiddenstate.kinds.base.Kind.run`: the time mixing on ``u``, every step recorded.

    Parameters
    ----------
    block : RWKVTimeMix
        ``batch_first=True`` (what the registry's ``to_block`` builds).
    u : ndarray of shape (N, T, M)
    **forward
        More keywords of the layer's ``forward`` (none of the registered families gives any).

    Returns
    -------
    out : ndarray of shape (N, T, M)
    record : RWKVRecord
        Time-major.
    """
    out, _, cache, states = block.forward(u, record=True, **forward)
    r, kc = cache.kernel[6], cache.kernel[7]  # the layer's cache: (p, x, diff, xk, xv, xr, r, kc, rw)
    k, e2, den, wkv = kc[0], kc[14], kc[15], kc[16]  # the kernel's cache: (k, v, w, ..., e2, den, wkv, scan)
    decay = np.broadcast_to(np.exp(-np.exp(block.params["time_decay"])), k.shape)
    return out, RWKVRecord(*states, decay, k, r, wkv, e2 / den)


def rwkv_view(rec: RWKVRecord) -> RecordView:
    """The :class:`~hiddenstate.kinds.base.RecordView` of an RWKV record (module docstring).

    Parameters
    ----------
    rec : RWKVRecord

    Returns
    -------
    RecordView
        ``state`` (T, N, 2A) num and den, ``keep`` the channels' decay (T, N, A), ``units`` the
        channels' ``wkv``, ``unit_keep`` their decay, ``out_gate`` the receptance, ``lag_norms``
        the powers of the decay.
    """
    A = rec.num.shape[-1]
    return RecordView(
        state=np.concatenate([rec.num, rec.den], axis=-1), keep=rec.decay, keep_shape=(A,),
        keep_name="channel decay", lag_norms=lambda max_lag: LagNorms(*diagonal_lag_norms(rec.decay, max_lag)),
        units=rec.wkv, unit_keep=rec.decay, out_gate=rec.r, out_gate_name="receptance sigmoid(r)")


def rwkv_states(rec: RWKVRecord) -> dict:
    """An RWKV record's states by name, in the order of :class:`~hiddenstate.kinds.rwkv.block.RWKVState`.

    Parameters
    ----------
    rec : RWKVRecord

    Returns
    -------
    dict of str to ndarray
        ``{"shift": (T, N, M), "num", "den", "max": (T, N, A)}``.
    """
    return {"shift": rec.shift, "num": rec.num, "den": rec.den, "max": rec.max}


#: The RWKV-4 kind.
KINDS = (Kind("rwkv", RWKVTimeMix, rwkv_view, rwkv_states, run=rwkv_run,
              description="WKV numerator and denominator (N, A) with a running maximum, a fixed decay "
                          "exp(-exp(time_decay)) per channel",
              analysis="hiddenstate.kinds.rwkv.analysis:RWKV", card="hiddenstate.kinds.rwkv.card:CARD",
              title="RWKV-4"),)
