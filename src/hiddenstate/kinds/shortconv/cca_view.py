"""The view of ZAYA's CCA projection (``"cca"``): what every analysis reads of its record.

CCA projection (:class:`~hiddenstate.kinds.shortconv.cca.CCAProjection`,
:class:`~hiddenstate.kinds.shortconv.cca.CCARecord`): the state is the window of the last W =
(t0 - 1) + (t1 - 1) values of ``z_t = [q_t | k_t]`` per channel (N, C, W), C = Cq + Ck, shifted
by one each step, and the last token's delayed value projection ``v_t = v_proj_delayed(u_t)``
(N, Ck / 2), replaced each step. Neither is kept by a gate, so the view has **no keep gate**
(no decay statistics, no time constants), and the memory is exactly W steps: ``dS_T/dS_{T-k}``
is the shift by k on the window and 0 on the delayed value for k >= 1, whatever the input. A
unit is a window channel (its activation ``z_t``, the value entering the window) or a delayed
value channel (``v_t``).

**The state's share** (:func:`cca_share`, what the agreement figure carries): of the queries,
keys and delayed values, the part the state feeds, ``var(part) / var(readout)``. The projection is
affine in its state, so the state's part at step t is the convolutions of the window before t
(the current token's slot 0, without the biases) and the delayed value before t; the current
token's own part is its slot of the convolutions and the residual paths. The value's current half
(``v_proj_current``), which no state feeds, is left out of the readout (the record does not hold
it).
"""

from __future__ import annotations

import numpy as np

from hiddenstate.core.validation import positive_int
from hiddenstate.kinds.agreement import readout_share
from hiddenstate.kinds.base import Kind, LagNorms, RecordView
from hiddenstate.kinds.shortconv import cca_kernel
from hiddenstate.kinds.shortconv.cca import CCAProjection

__all__ = ["KIND", "cca_lag_norms", "cca_share", "cca_view"]


def cca_lag_norms(T: int, channels: int, window: int, values: int, max_lag: int) -> LagNorms:
    """The norms of ``dS_T/dS_{T-k}`` of a CCA state: a shift register of ``window`` slots and a replaced value.

    Each step drops the window's oldest slot and appends ``z_t``, and replaces the delayed value
    by ``v_proj_delayed(u_t)``; neither new value reads the state. So for k >= 1 the product is
    the shift by k on the window (one 1 per surviving slot of each channel) and 0 on the value.

    Parameters
    ----------
    T : int
        Steps.
    channels : int
        C = Cq + Ck, the window's channels.
    window : int
        W, the slots per channel (>= 0).
    values : int
        Ck / 2, the delayed value's entries.
    max_lag : int
        Largest k (at most T).

    Returns
    -------
    LagNorms
        k = 0 .. min(max_lag, T): ``spectral`` 1 at k = 0 and for k < W, 0 after; ``rms``
        ``||J||_F / sqrt(F)`` with F = C W + Ck / 2: 1 at k = 0, ``sqrt(C (W - k) / F)`` for
        0 < k < W, 0 after.
    """
    K = min(positive_int("max_lag", max_lag), T) + 1
    k = np.arange(K)
    F = channels * window + values
    spectral = ((k == 0) | (k < window)).astype(float)
    rms = np.where(k == 0, 1.0, np.sqrt(channels * np.clip(window - k, 0, None) / F))
    return LagNorms(spectral, rms)


def cca_view(rec) -> RecordView:
    """The :class:`~hiddenstate.kinds.RecordView` of a CCA projection record.

    Parameters
    ----------
    rec : CCARecord
        ``conv`` (T, N, C, W), ``v`` (T, N, Ck/2).

    Returns
    -------
    RecordView
        ``state`` (T, N, C W + Ck/2): the window flattened, then the delayed value; ``keep`` and
        ``unit_keep`` None (no keep gate); ``lag_norms`` :func:`cca_lag_norms`; ``units`` the
        value entering each window channel (``z_t``, the window's newest slot) and the delayed
        value, (T, N, C + Ck/2) (only the value when W = 0); no (0, 1) output gate.
    """
    T, N, C, W = rec.conv.shape
    V = rec.v.shape[-1]
    state = np.concatenate([rec.conv.reshape(T, N, C * W), rec.v], axis=-1)
    units = np.concatenate([rec.conv[..., -1], rec.v], axis=-1) if W else rec.v
    return RecordView(state=state, keep=None, keep_shape=(), keep_name="",
                      lag_norms=lambda max_lag: cca_lag_norms(T, C, W, V, max_lag), units=units, unit_keep=None)


def cca_share(block, rec) -> float:
    """The state's share of a CCA projection's queries, keys and delayed values (module docstring), from a fresh run's record.

    Parameters
    ----------
    block : CCAProjection
        Its convolutions and ``v_proj_delayed.bias`` (the delayed value before step 0).
    rec : CCARecord
        Of a run from the default state (zero window): ``conv`` (T, N, C, W), ``v`` (T, N, Ck/2).

    Returns
    -------
    float
        :func:`hiddenstate.kinds.agreement.readout_share` of the readout ``[query | key | delayed
        value]`` (recomputed from the record: ``z_t``, the newest slot, through identity
        projections) and the readout less the state's part (the readout less its residual paths,
        the current token's newest taps and the biases; the delayed value whole). With W = 0 (no
        window) the queries and keys read no state and the record holds no ``z``: the share of the
        delayed values alone, 1.
    """
    T, N, C, W = rec.conv.shape
    V = rec.v.shape[-1]
    if W == 0:
        return 1.0
    p, eye = block.params, np.eye(C)
    Hq, Hk, D = block.heads
    G = Hq + Hk
    ident = {"q_proj.weight": eye[:Hq * D], "k_proj.weight": eye[Hq * D:], "v_proj_current.weight": np.zeros((V, C)),
             "v_proj_delayed.weight": np.zeros((V, C))}
    conv = {k: p[k] for k in p if k.startswith("conv_qk_")}
    z = np.ascontiguousarray(rec.conv[..., -1].transpose(1, 0, 2))  # (N, T, C): z_t, the newest slot
    v0 = np.broadcast_to(p.get("v_proj_delayed.bias", np.zeros(V)), (N, V))
    window0 = np.zeros((N, C, W))
    readout = cca_kernel.forward({**ident, **conv}, z, window0, v0, block.heads)[0]  # z through identity projections
    q, k = z[..., :Hq * D].reshape(N, T, Hq, D), z[..., Hq * D:].reshape(N, T, Hk, D)
    rq = (q + np.repeat(k, Hq // Hk, axis=2)) / 2  # the residual paths: each query head with its key head
    resid = np.concatenate([rq.reshape(N, T, -1), rq.reshape(N, T, Hk, Hq // Hk, D).mean(axis=3).reshape(N, T, -1)],
                           axis=-1)
    w1, w2 = conv["conv_qk_depthwise.weight"][:, 0], conv["conv_qk_grouped.weight"]  # (C, t0), (C, D, t1)
    taps2 = w2.reshape(G, D, D, -1)  # (group, out, in, tap)
    current = np.einsum("ntgi,goi->ntgo", (z * w1[:, -1]).reshape(N, T, G, D), taps2[..., -1]).reshape(N, T, C)
    bias = conv["conv_qk_grouped.bias"] + np.einsum("goij,gi->go", taps2, conv["conv_qk_depthwise.bias"].reshape(
        G, D)).reshape(C)  # the depthwise bias through every grouped tap, and the grouped bias
    part = readout[..., :C] - resid - current - bias  # the convolutions of the window before each step
    delayed = np.concatenate([v0[:, None], rec.v[:-1].transpose(1, 0, 2)], axis=1)  # v before each step: all state
    keep = np.concatenate([readout[..., :C], delayed], axis=-1)  # [query | key | delayed value]
    state = np.concatenate([part, delayed], axis=-1)
    return readout_share(keep, keep - state)


#: The kind's record (registered in :mod:`hiddenstate.kinds` with the short convolution's).
KIND = Kind("cca", CCAProjection, cca_view, lambda rec: {"conv": rec.conv, "v": rec.v},
            description="conv window of [q | k] (N, Cq+Ck, W) and the delayed value (N, Ck/2): a memory of exactly "
                        "W steps, no keep gate",
            analysis="hiddenstate.kinds.shortconv.analysis:CCA", card="hiddenstate.kinds.shortconv.card:CARD",
            title="CCA projection", share=cca_share)
