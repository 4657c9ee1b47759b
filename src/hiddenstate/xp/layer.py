"""A sequence layer on arrays of any array-API library: forward over layers and directions, exact BPTT.

:meth:`hiddenstate.classic.recurrent.RecurrentLayer.forward` and ``backward`` hand a torch tensor, a
CuPy array or any array-API array (:func:`hiddenstate.xp.arrays.is_foreign`) to :func:`forward`
and :func:`backward` here. They follow :mod:`hiddenstate.classic.unroll` step for step (input projection
of all T steps, the kind's scan per layer and direction, the backward direction reversed within
each row's length, inter-layer dropout) with the reference steps of :mod:`hiddenstate.xp.cells`,
in the input's namespace and on its device:

* the layer's NumPy parameters are converted once per change (:func:`~hiddenstate.xp.arrays.converted`);
* ``lengths`` and ``reset`` are checked on the host (they are small) and copied to the device;
* dropout and DropConnect masks are drawn from the same NumPy generator, in the same order, as the
  NumPy path, so a training step gives the same result on either path;
* every result (``output``, ``h_n``, the gradients of :func:`backward`, parameters included) is
  an array of the input's namespace, on its device, of the layer's dtype.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from hiddenstate.core.ragged import reverse_index, reverse_time
from hiddenstate.core.validation import boolean, generator, shape_str
from hiddenstate.core.validation import lengths as check_lengths
from hiddenstate.xp.arrays import converted, float_input, namespace, state_input, to_namespace
from hiddenstate.xp.cells import scan, scan_backward

__all__ = ["XPCache", "backward", "forward", "run_layers"]


@dataclass(frozen=True)
class XPCache:
    """What :func:`backward` needs from one array-API :func:`forward` (the array-API ``LayerCache``).

    Attributes
    ----------
    xp : module
        The namespace of the run.
    device : object
        Its device.
    directions : list of dict
        Index ``layer * D + direction``: ``x`` (T, N, I_k) in processing order, ``saved`` (the
        reference steps' values), ``w`` (the recurrent weights used), ``weight_ih``, ``state0``,
        ``reset``, ``weight_mask``.
    dropout_masks : list
        The inter-layer dropout mask of each layer's output, or None.
    keep : array of bool, shape (T, N, 1), or None
        False on padded steps.
    reverse : array of int64, shape (T*N,), or None
        The flat gather index of the backward direction within each row's length.
    learned : tuple of bool
        Which parts of the initial state were the layer's learned ``h0`` / ``c0``.
    shape : tuple
        ``(T, N, unbatched)``.
    owner : weakref.ref
        The layer that made the cache.
    keys : tuple of str
        The layer's parameter names, in order.
    """

    xp: object
    device: object
    directions: list
    dropout_masks: list
    keep: object
    reverse: object
    learned: tuple
    shape: tuple
    owner: weakref.ref
    keys: tuple

    def check_owner(self, layer) -> None:
        """Raise unless this cache was made by ``layer``'s forward pass.

        Parameters
        ----------
        layer : RecurrentLayer
            The layer whose ``backward`` received the cache.

        Raises
        ------
        ValueError
            The cache belongs to another layer.
        """
        made_by = self.owner()
        if made_by is not layer:
            other = "a layer that no longer exists" if made_by is None else f"another layer ({made_by!r})"
            raise ValueError(f"cache must come from this layer's forward ({layer!r}); got a cache of {other}. "
                             "Call backward on the layer whose forward returned the cache.")


def _reverse(xp, a, flat):
    """``a`` (T, N, F) reversed in time within each row's length (``flat`` None: the whole axis)."""
    if flat is None:
        return xp.flip(a, axis=0)
    T, N, F = a.shape
    return xp.reshape(xp.take(xp.reshape(a, (T * N, F)), flat, axis=0), (T, N, F))


def _project(xp, x, w_ih, b_ih):
    """``x W_ih^T + b_ih`` for all T steps at once: (T, N, I) -> (T, N, G*H)."""
    T, N, I = x.shape
    xw = xp.reshape(xp.matmul(xp.reshape(x, (T * N, I)), xp.matrix_transpose(w_ih)), (T, N, w_ih.shape[0]))
    return xw if b_ih is None else xw + b_ih


def _states(net, h0, xp, dev, dtype, N, unbatched, p):
    """The initial state of every layer and direction, a tuple of (L*D, N, H) arrays, and the learned flags."""
    LD, H = net.num_layers * net.num_directions, net.hidden_size
    names = ("h0", "c0") if net.is_lstm else ("h0",)
    if net.is_lstm:
        if h0 is not None and not (isinstance(h0, tuple) and len(h0) == 2):
            raise TypeError(f"h0 must be None or a pair (h0, c0) for an LSTM; got {type(h0).__name__}.")
        given = (None, None) if h0 is None else h0
    else:
        given = (h0,)
    parts, learned = [], []
    for name, value in zip(names, given):
        if value is None:
            if net.learn_h0:
                parts.append(xp.broadcast_to(p[name][:, None, :], (LD, N, H)))
            else:
                parts.append(xp.zeros((LD, N, H), dtype=dtype, device=dev))
            learned.append(bool(net.learn_h0))
        elif unbatched:
            parts.append(state_input(name, value, (LD, H), "(L*D, H)", xp, dev, net.dtype)[:, None, :])
            learned.append(False)
        else:
            parts.append(state_input(name, value, (LD, N, H), "(num_layers*num_directions, N, H)", xp, dev, net.dtype))
            learned.append(False)
    return tuple(parts), tuple(learned)


def _masks(net, lengths, reset, T, N, unbatched, xp, dev):
    """``keep`` (T, N, 1), ``reset`` forward and backward (T, N, 1) and the flat reverse index, on the device."""
    keep = lens = None
    if lengths is not None:
        if unbatched:
            raise ValueError("lengths must be None for unbatched (T, I) input; add a batch axis to use lengths.")
        if not isinstance(lengths, (np.ndarray, list, tuple)) and not np.isscalar(lengths):
            from hiddenstate.xp.arrays import to_numpy

            lengths = to_numpy(lengths)
        lens = check_lengths(lengths, T, N)
        if (lens < T).any():
            keep = (np.arange(T)[:, None] < lens[None, :])[:, :, None]
    idx = reverse_index(T, lens) if (net.num_directions == 2 and lens is not None) else None
    r = None
    if reset is not None:
        if not isinstance(reset, (np.ndarray, list, tuple)):
            from hiddenstate.xp.arrays import to_numpy

            reset = to_numpy(reset)
        r = np.asarray(reset)
        if r.dtype != bool:
            raise TypeError(f"reset must be a bool array; got dtype {r.dtype}.")
        want = (T,) if unbatched else ((N, T) if net.batch_first else (T, N))
        if r.shape != want:
            legend = "(T,)" if unbatched else ("(N, T)" if net.batch_first else "(T, N)")
            raise ValueError(f"reset must have shape {legend}={shape_str(want)}; got {shape_str(r.shape)}.")
        r = r[:, None] if unbatched else (r.T if net.batch_first else r)
        if keep is not None:
            r = r & keep[:, :, 0]
        r = r if r.any() else None
    r_rev = None
    if r is not None and net.num_directions == 2:
        shifted = np.zeros_like(r)
        shifted[:-1] = r[1:]  # a boundary before t is, read backwards, a boundary before t-1
        if keep is not None:
            shifted &= keep[:, :, 0]
        r_rev = to_namespace(reverse_time(shifted, idx)[:, :, None], xp, dev)
    flat = None if idx is None else to_namespace((idx * N + np.arange(N)[None, :]).reshape(-1), xp, dev, np.int64)
    return (None if keep is None else to_namespace(keep, xp, dev), None if r is None else to_namespace(r[:, :, None], xp, dev),
            r_rev, flat)


def run_layers(net, p, x, state0, keep, resets, flat, training, drng, xp, dev):
    """The unrolled layers and directions on time-major arrays (the body of :func:`forward`).

    Parameters
    ----------
    net : RecurrentLayer
        The configuration (sizes, kind, options, dropout).
    p : dict of str to array
        The parameters in ``xp`` (the layer's own names).
    x : array of shape (T, N, I)
        Time-major input.
    state0 : tuple of arrays (L*D, N, H)
        Initial states.
    keep : bool array (T, N, 1) or None
        False on padded steps.
    resets : pair of (bool array (T, N, 1) or None)
        The reset mask of the forward and of the backward direction.
    flat : int array (T*N,) or None
        The reverse index (None: reverse the whole time axis).
    training : bool
        Draw dropout and DropConnect masks.
    drng : numpy.random.Generator
        Draws them (in the NumPy path's order).
    xp, dev : module, object
        Namespace and device.

    Returns
    -------
    out : array of shape (T, N, D*H)
    finals : list of tuples
        Every layer's and direction's final state.
    directions, masks : list
        For :class:`XPCache`.
    """
    D, L = net.num_directions, net.num_layers
    kind, opts, dtype = net.kind.name, net.options, net.dtype
    use_dropout = training and net.dropout > 0.0 and L > 1
    use_weight_drop = training and net.weight_drop > 0.0
    finals, directions, masks, inp = [], [], [], x
    for layer in range(L):
        outs = []
        for d in range(D):
            sfx = net.suffix(layer, d)
            xin = inp if d == 0 else _reverse(xp, inp, flat)
            xw = _project(xp, xin, p["weight_ih" + sfx], p.get("bias_ih" + sfx))
            w = {k: p[k + sfx] for k in ("weight_hh", "bias_hh") if (k + sfx) in p}
            w_mask = None
            if use_weight_drop:  # the NumPy path's DropConnect mask, drawn in its order
                w_mask = ((drng.random(tuple(w["weight_hh"].shape)) >= net.weight_drop).astype(dtype)
                          / dtype.type(1.0 - net.weight_drop))
                w_mask = to_namespace(w_mask, xp, dev)
                w = {**w, "weight_hh": w["weight_hh"] * w_mask}
            k = layer * D + d
            s0 = tuple(s[k] for s in state0)
            hs, final, saved = scan(xp, kind, xw, s0, w, keep, resets[d], opts)
            finals.append(final)
            out = hs if keep is None else xp.where(keep, hs, xp.zeros_like(hs))
            outs.append(out if d == 0 else _reverse(xp, out, flat))
            directions.append({"x": xin, "saved": saved, "w": w, "weight_ih": p["weight_ih" + sfx], "state0": s0,
                               "reset": resets[d], "weight_mask": w_mask})
        out = outs[0] if D == 1 else xp.concat(outs, axis=2)
        mask = None
        if use_dropout and layer < L - 1:
            mask = to_namespace((drng.random(tuple(out.shape)) >= net.dropout).astype(dtype) / (1.0 - net.dropout),
                                xp, dev, dtype)
            out = out * mask
        masks.append(mask)
        inp = out
    return inp, finals, directions, masks


def forward(net, x, h0=None, *, lengths=None, reset=None, training=False, rng=None):
    """:meth:`RecurrentLayer.forward <hiddenstate.classic.recurrent.RecurrentLayer.forward>` on an array-API input.

    Parameters
    ----------
    net : RecurrentLayer
        The layer (its parameters are NumPy arrays; they are converted, see the module docstring).
    x : array of shape (T, N, I), (N, T, I) if ``batch_first``, or (T, I)
        A torch tensor, CuPy array, ...: the computation runs in its namespace, on its device.
    h0 : array of shape (L*D, N, H) or (L*D, H), optional
        Initial state (LSTM: a pair), of ``x``'s library and device (or host data, copied over).
    lengths : array_like of int, shape (N,), optional
        Valid steps of each column.
    reset : bool array, shape (T, N) ((N, T) if ``batch_first``), optional
        Restart mask.
    training : bool, default False
        Dropout and DropConnect.
    rng : numpy.random.Generator, optional
        Draws their masks (default: the layer's generator).

    Returns
    -------
    output : array of shape (T, N, D*H) (batch_first: (N, T, D*H); unbatched: (T, D*H))
    h_n : array of shape (L*D, N, H) (unbatched: (L*D, H)); LSTM: pair ``(h_n, c_n)``
    cache : XPCache

    Raises
    ------
    TypeError, ValueError
        As the NumPy path: shapes, dtypes, NaN/Inf, lengths, reset; an ``h0`` of another library
        or device.
    """
    training = boolean("training", training)
    xp, dev = namespace(x)
    net.check_params()
    p = converted(net, xp, dev)
    dtype = getattr(xp, net.dtype.name)
    x = float_input("x", x, xp, dev, net.dtype)
    I = net.input_size
    if x.ndim == 2:
        unbatched = True
        if x.shape[1] != I:
            raise ValueError(f"x must have shape (T, I={I}) when unbatched; got {shape_str(tuple(x.shape))}.")
        x = x[:, None, :]
    elif x.ndim == 3:
        unbatched = False
        if x.shape[2] != I:
            legend = f"(N, T, I={I})" if net.batch_first else f"(T, N, I={I})"
            raise ValueError(f"x must have shape {legend}; got {shape_str(tuple(x.shape))}.")
        if net.batch_first:
            x = xp.permute_dims(x, (1, 0, 2))
    else:
        legend = "(N, T, I)" if net.batch_first else "(T, N, I)"
        raise ValueError(f"x must have shape {legend} or unbatched (T, I); got {shape_str(tuple(x.shape))}.")
    T, N, _ = x.shape
    state0, learned = _states(net, h0, xp, dev, dtype, N, unbatched, p)
    keep, r_fwd, r_bwd, flat = _masks(net, lengths, reset, T, N, unbatched, xp, dev)
    drng = generator(rng) if rng is not None else net.__dict__["_rng"]
    out, finals, directions, masks = run_layers(net, p, x, state0, keep, (r_fwd, r_bwd), flat, training, drng, xp, dev)
    h_n = tuple(xp.stack([f[i] for f in finals]) for i in range(len(state0)))
    if unbatched:
        out, h_n = out[:, 0], tuple(s[:, 0] for s in h_n)
    elif net.batch_first:
        out = xp.permute_dims(out, (1, 0, 2))
    cache = XPCache(xp=xp, device=dev, directions=directions, dropout_masks=masks, keep=keep, reverse=flat,
                    learned=learned, shape=(T, N, unbatched), owner=weakref.ref(net), keys=tuple(net.params))
    return out, (h_n if net.is_lstm else h_n[0]), cache


def backward(net, cache: XPCache, d_output=None, d_h_n=None):
    """:meth:`RecurrentLayer.backward <hiddenstate.classic.recurrent.RecurrentLayer.backward>` through an :class:`XPCache`.

    Parameters
    ----------
    net : RecurrentLayer
        The layer whose :func:`forward` made ``cache``.
    cache : XPCache
        From :func:`forward`.
    d_output : array shaped like ``output``, or None
        Of the forward's library and device (or host data, copied over).
    d_h_n : array shaped like ``h_n``, or None
        LSTM: a pair ``(dh_n, dc_n)``, either part None.

    Returns
    -------
    grads : dict of str to array
        Same keys and shapes as ``net.params``, in the forward's namespace and on its device.
    dx : array shaped like ``x``
    dh0 : array shaped like ``h0`` (LSTM: a pair)

    Raises
    ------
    TypeError, ValueError
        A cache of another layer; a gradient of another shape, library or device, or with NaN/Inf.
    """
    cache.check_owner(net)
    xp, dev = cache.xp, cache.device
    T, N, unbatched = cache.shape
    H, D, L = net.hidden_size, net.num_directions, net.num_layers
    LD, keep, flat = L * D, cache.keep, cache.reverse
    if unbatched:
        out_want, out_legend, st_want, st_legend = (T, D * H), "(T, D*H)", (LD, H), "(L*D, H)"
    else:
        out_want = (N, T, D * H) if net.batch_first else (T, N, D * H)
        out_legend = "(N, T, D*H)" if net.batch_first else "(T, N, D*H)"
        st_want, st_legend = (LD, N, H), "(L*D, N, H)"
    dout = None
    if d_output is not None:
        dout = state_input("d_output", d_output, out_want, out_legend, xp, dev, net.dtype)
        dout = dout[:, None] if unbatched else (xp.permute_dims(dout, (1, 0, 2)) if net.batch_first else dout)
    names = ("d_h_n", "d_c_n") if net.is_lstm else ("d_h_n",)
    if net.is_lstm and d_h_n is not None and not (isinstance(d_h_n, tuple) and len(d_h_n) == 2):
        raise TypeError(f"d_h_n must be None or a pair (dh_n, dc_n) for an LSTM; got {type(d_h_n).__name__}.")
    given = (d_h_n if net.is_lstm else (d_h_n,)) if d_h_n is not None else (None,) * len(names)
    d_fin = tuple(None if g is None else state_input(n, g, st_want, st_legend, xp, dev, net.dtype)
                  for n, g in zip(names, given))
    d_fin = tuple(None if g is None else (g[:, None, :] if unbatched else g) for g in d_fin)
    grads, d_state = {}, [[None] * LD for _ in names]
    for layer in range(L - 1, -1, -1):
        mask = cache.dropout_masks[layer]
        if dout is not None and mask is not None:
            dout = dout * mask
        dinp = None
        for d in range(D):
            sfx, k = net.suffix(layer, d), layer * D + d
            dc = cache.directions[k]
            dhs = None
            if dout is not None:
                dhs = dout[:, :, d * H:(d + 1) * H]
                if keep is not None:
                    dhs = xp.where(keep, dhs, xp.zeros_like(dhs))
                dhs = dhs if d == 0 else _reverse(xp, dhs, flat)
            dfin = tuple(None if g is None else g[k] for g in d_fin)
            dxw, dw_hh, db_hh, ds0 = scan_backward(xp, net.kind.name, dc["saved"], dc["w"], dc["state0"], keep,
                                                    dc["reset"], dhs, dfin, net.options)
            xin = dc["x"]
            if dxw is None:  # T = 0
                dxw = xp.zeros((0, N, net.num_gates * H), dtype=xin.dtype, device=dev)
            dxw2, x2 = xp.reshape(dxw, (T * N, net.num_gates * H)), xp.reshape(xin, (T * N, xin.shape[2]))
            grads["weight_ih" + sfx] = xp.matmul(xp.matrix_transpose(dxw2), x2)
            if net.kind.recurrent:
                grads["weight_hh" + sfx] = dw_hh if dc["weight_mask"] is None else dw_hh * dc["weight_mask"]
            if net.bias:
                grads["bias_ih" + sfx] = xp.sum(xp.sum(dxw, axis=1), axis=0)
                if net.kind.recurrent:
                    grads["bias_hh" + sfx] = db_hh
            dxin = xp.reshape(xp.matmul(dxw2, dc["weight_ih"]), (T, N, xin.shape[2]))
            dxin = dxin if d == 0 else _reverse(xp, dxin, flat)
            dinp = dxin if dinp is None else dinp + dxin
            for i, s in enumerate(ds0):
                d_state[i][k] = s
        dout = dinp
    dstate = tuple(xp.stack(parts) for parts in d_state)
    if net.learn_h0:  # the batch sum of the initial-state gradient, for each part that was the learned one
        for name, part, learned in zip(("h0", "c0"), dstate, cache.learned):
            grads[name] = xp.sum(part, axis=1) if learned else xp.zeros((LD, H), dtype=part.dtype, device=dev)
    grads = {key: grads[key] for key in cache.keys}
    dx = dout
    if unbatched:
        dx, dstate = dx[:, 0], tuple(s[:, 0] for s in dstate)
    elif net.batch_first:
        dx = xp.permute_dims(dx, (1, 0, 2))
    return grads, dx, (dstate if net.is_lstm else dstate[0])
