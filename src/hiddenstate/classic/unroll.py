"""The loops of a sequence layer, forward and backward side by side: layers, directions, time.

:func:`unroll` runs any cell kind's scan kernel over every layer and direction of a
:class:`~hiddenstate.classic.recurrent.RecurrentLayer`; :func:`backprop` is its exact adjoint (BPTT),
walking the same loops in reverse. Both trust their inputs: validation happened once, in
:meth:`~hiddenstate.classic.recurrent.RecurrentLayer.prepare` and ``backward``'s shape checks.
"""

from __future__ import annotations

import weakref

import numpy as np

from hiddenstate.classic.cells import gru, lstm, rnn
from hiddenstate.classic.prepared import DirectionCache, LayerCache
from hiddenstate.core import workspace as ws
from hiddenstate.core.ragged import reverse_index, reverse_time
from hiddenstate.core.validation import float_array, shape_str

__all__ = ["backprop", "unroll"]

# The kernels for a run that no backward pass follows (``unroll(..., need_cache=False)``): the
# same results as the kind's scan_forward, without keeping what only the backward reads. A kind
# without one here runs its scan_forward and drops the cache.
_INFER = {"rnn": rnn.scan_infer, "gru": gru.scan_infer, "lstm": lstm.scan_infer}


def unroll(net, prepared, training, rng, record, need_cache=True):
    """The forward pass of ``net`` over a :class:`~hiddenstate.classic.prepared.Prepared` input.

    Per layer and direction: one input projection for all T steps, the kind's scan kernel,
    the reversal of the backward direction within each row's length, inter-layer dropout.

    Parameters
    ----------
    net : hiddenstate.classic.recurrent.RecurrentLayer
    prepared : Prepared
    training : bool
        Apply dropout and DropConnect (when the layer has them).
    rng : numpy.random.Generator
        Draws the masks.
    record : bool
        Let the kernels keep every pre-activation.
    need_cache : bool, default True
        False: no backward pass will follow, so the kernels keep nothing for one (the kind's
        ``scan_infer`` where it has one; the same output and ``h_n``) and ``cache`` is None.

    Returns
    -------
    output : ndarray of shape (T, N, D*H) (batch_first: (N, T, D*H); unbatched: (T, D*H))
    h_n : ndarray of shape (L*D, N, H) (unbatched: (L*D, H)); LSTM: pair ``(h_n, c_n)``
    cache : LayerCache, or None when not ``need_cache``
    """
    x, state0, _, lens, keep, rmask, unbatched = prepared
    T, N, _ = x.shape
    H, D, L = net.hidden_size, net.num_directions, net.num_layers
    p = net.params
    opts = net.options
    idx = reverse_index(T, lens) if (D == 2 and lens is not None) else None
    rmask_rev = None
    if D == 2 and rmask is not None:
        shifted = np.zeros_like(rmask)
        shifted[:-1] = rmask[1:]  # a boundary before t is, read backwards, a boundary before t-1
        if keep is not None:
            shifted &= keep[:, :, 0]
        rmask_rev = reverse_time(shifted, idx)[:, :, None]
    rm = None if rmask is None else rmask[:, :, None]
    use_dropout = training and net.dropout > 0.0 and L > 1
    use_weight_drop = training and net.weight_drop > 0.0
    drng = rng
    infer = None if need_cache else _INFER.get(net.kind.name)
    finals = [None] * (L * D)
    directions, masks = [], []
    inp = x
    hs = None
    for layer in range(L):
        outs = []
        for d in range(D):
            sfx = net.suffix(layer, d)
            xin = inp if d == 0 else reverse_time(inp, idx)
            w_ih = p["weight_ih" + sfx]
            if need_cache:
                w_ih = w_ih.copy()  # the run's own weights: later changes to params do not reach backward
            xw = np.matmul(xin.reshape(T * N, xin.shape[2]), w_ih.T,
                           out=ws.empty((T * N, net.num_gates * H), net.dtype)).reshape(T, N, net.num_gates * H)
            if net.bias:
                xw += p["bias_ih" + sfx]
            k = layer * D + d
            s0 = (state0[0][k], state0[1][k]) if net.is_lstm else state0[k]
            w_hh, w_mask = p.get("weight_hh" + sfx), None  # None: a kind without recurrent weights
            if use_weight_drop:  # one DropConnect mask for the whole chunk (Merity et al. 2018)
                w_mask = ((drng.random(w_hh.shape) >= net.weight_drop).astype(net.dtype)
                          / net.dtype.type(1.0 - net.weight_drop))  # (G*H, H)
                w_hh = w_hh * w_mask  # a new array
            elif w_hh is not None and need_cache:
                w_hh = w_hh.copy()  # the kernel's cache keeps it for the backward
            b_hh = p.get("bias_hh" + sfx)
            if b_hh is not None and need_cache:
                b_hh = b_hh.copy()
            r_d = rm if d == 0 else rmask_rev
            if infer is not None:
                (hs, final), kc = infer(xw, s0, w_hh, b_hh, keep, r_d, **opts), None
            else:
                hs, final, kc = net.kind.scan_forward(xw, s0, w_hh, b_hh, keep, r_d, record=record, **opts)
            finals[k] = final
            out = hs if keep is None else np.where(keep, hs, 0.0)
            outs.append(out if d == 0 else reverse_time(out, idx))
            if need_cache:
                directions.append(DirectionCache(x=xin, kernel=kc, weight_mask=w_mask, reset=r_d, weight_ih=w_ih))
        out = outs[0] if D == 1 else np.concatenate(outs, axis=2)
        mask = None
        if use_dropout and layer < L - 1:
            mask = (drng.random(out.shape) >= net.dropout).astype(net.dtype) / (1.0 - net.dropout)
            out = out * mask
        masks.append(mask)
        inp = out
    output = inp.copy() if (need_cache and inp is hs and net.kind.shares_hs) else inp  # never hand out what the backward reads
    if net.is_lstm:
        h_n = np.stack([f[0] for f in finals])
        c_n = np.stack([f[1] for f in finals])
    else:
        h_n = np.stack(finals)
    if unbatched:
        output = output[:, 0]
        h_n = h_n[:, 0]
        if net.is_lstm:
            c_n = c_n[:, 0]
    elif net.batch_first:
        output = output.transpose(1, 0, 2)
    cache = None
    if need_cache:
        cache = LayerCache(directions=directions, dropout_masks=masks, prepared=prepared, reverse=idx,
                           owner=weakref.ref(net), keys=tuple(net.params))
    return output, ((h_n, c_n) if net.is_lstm else h_n), cache


def backprop(net, cache, d_output, d_h_n, ready=None):
    """Exact BPTT through :func:`unroll`: the same loops in reverse, kernels' backward passes.

    Parameters
    ----------
    net : hiddenstate.classic.recurrent.RecurrentLayer
    cache : LayerCache
        From :func:`unroll` with the same layer.
    d_output : ndarray shaped like ``output``, or None
    d_h_n : ndarray shaped like ``h_n``, or None (LSTM: a pair, either part None)
    ready : callable, optional
        Called with a dict of the gradients that are final as soon as they are: a layer's (all
        directions) after its BPTT, top layer first; ``h0``/``c0`` when learned, at the end.

    Returns
    -------
    grads : dict
        Same keys as ``net.params``.
    dx : ndarray shaped like ``x``
    dh0 : ndarray shaped like ``h0`` (LSTM: a pair)

    Raises
    ------
    ValueError
        A gradient whose shape does not match the forward result.
    TypeError
        A gradient that is not a float array (integers are promoted).
    """
    prep = cache.prepared
    keep, idx, learned, unbatched = prep.keep, cache.reverse, prep.learned, prep.unbatched
    T, N = prep.x.shape[:2]
    H, D, L, G = net.hidden_size, net.num_directions, net.num_layers, net.num_gates
    LD = L * D

    def as_tm(name, a, shape_tm):
        if a is None:
            return None
        a = float_array(name, a, dtype=net.dtype)
        if name == "d_output":  # the shape in the caller's layout, checked before any axis is moved
            want, legend = (((T, D * H), "(T, D*H)") if unbatched else ((N, T, D * H), "(N, T, D*H)") if net.batch_first
                            else ((T, N, D * H), "(T, N, D*H)"))
        else:
            want, legend = ((LD, H), "(L*D, H)") if unbatched else ((LD, N, H), "(L*D, N, H)")
        if a.shape != want:
            raise ValueError(f"{name} must have the shape of the forward result; got {shape_str(a.shape)}, expected "
                             f"{shape_str(want)} = {legend}.")
        if unbatched:
            a = a[:, None] if name == "d_output" else a[:, None, :]
        elif net.batch_first and name == "d_output":
            a = a.transpose(1, 0, 2)
        return a

    dout = as_tm("d_output", d_output, (T, N, D * H))
    if net.is_lstm:
        if d_h_n is not None and not (isinstance(d_h_n, tuple) and len(d_h_n) == 2):
            raise TypeError(f"d_h_n must be None or a pair (dh_n, dc_n) for an LSTM; got {type(d_h_n).__name__}.")
        dh_n, dc_n = (None, None) if d_h_n is None else d_h_n
        dh_n = as_tm("d_h_n", dh_n, (LD, N, H))
        dc_n = as_tm("d_c_n", dc_n, (LD, N, H))
    else:
        dh_n = as_tm("d_h_n", d_h_n, (LD, N, H))
    grads = {}
    dstate_h = np.zeros((LD, N, H), dtype=net.dtype)
    dstate_c = np.zeros((LD, N, H), dtype=net.dtype) if net.is_lstm else None
    for layer in range(L - 1, -1, -1):
        mask = cache.dropout_masks[layer]
        if dout is not None and mask is not None:
            dout = dout * mask
        dinp = None
        for d in range(D):
            sfx = net.suffix(layer, d)
            k = layer * D + d
            dc = cache.directions[k]
            xin = dc.x
            dhs = None
            if dout is not None:
                dhs = dout[:, :, d * H:(d + 1) * H]
                if keep is not None:
                    dhs = np.where(keep, dhs, 0.0)
                dhs = np.ascontiguousarray(dhs) if d == 0 else reverse_time(dhs, idx)
            if net.is_lstm:
                dfin = None
                if dh_n is not None or dc_n is not None:
                    dfin = (None if dh_n is None else dh_n[k], None if dc_n is None else dc_n[k])
            else:
                dfin = None if dh_n is None else dh_n[k]
            dxw, dw_hh, db_hh, ds0 = net.kind.scan_backward(dc.kernel, dhs, dfin)
            dxw2 = dxw.reshape(T * N, G * H)
            grads["weight_ih" + sfx] = dxw2.T @ xin.reshape(T * N, xin.shape[2])
            if net.kind.recurrent:
                grads["weight_hh" + sfx] = dw_hh if dc.weight_mask is None else dw_hh * dc.weight_mask
            if net.bias:
                grads["bias_ih" + sfx] = dxw.sum(axis=1).sum(axis=0)
                if net.kind.recurrent:
                    grads["bias_hh" + sfx] = db_hh
            dxin = np.matmul(dxw2, dc.weight_ih, out=ws.empty((T * N, xin.shape[2]), net.dtype)).reshape(T, N, xin.shape[2])
            if d == 1:
                dxin = reverse_time(dxin, idx)
            dinp = dxin if dinp is None else dinp + dxin
            if net.is_lstm:
                dstate_h[k], dstate_c[k] = ds0
            else:
                dstate_h[k] = ds0
        if ready is not None:  # this layer's weights are final while the layers below still run BPTT
            ends = tuple(net.suffix(layer, d) for d in range(D))
            ready({key: g for key, g in grads.items() if key.endswith(ends)})
        dout = dinp
    dx = dout
    if net.learn_h0:  # the batch sum of the initial-state gradient, for each part that was the learned one
        grads["h0"] = dstate_h.sum(axis=1) if learned[0] else np.zeros((LD, H), dtype=net.dtype)
        if net.is_lstm:
            grads["c0"] = dstate_c.sum(axis=1) if learned[1] else np.zeros((LD, H), dtype=net.dtype)
        if ready is not None:
            ready({key: grads[key] for key in ("h0", "c0") if key in grads})
    grads = {key: grads[key] for key in cache.keys}  # the parameters' order
    if unbatched:
        dx = dx[:, 0]
        dstate_h = dstate_h[:, 0]
        dstate_c = None if dstate_c is None else dstate_c[:, 0]
    elif net.batch_first:
        dx = dx.transpose(1, 0, 2)
    return grads, dx, ((dstate_h, dstate_c) if net.is_lstm else dstate_h)
