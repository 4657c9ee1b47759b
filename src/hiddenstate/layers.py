"""Sequence layers :class:`RNN`, :class:`GRU` and :class:`LSTM`: unroll, stack, both directions, exact BPTT.

The layers follow ``torch.nn.RNN/GRU/LSTM``: same constructor names, same parameter names and
layouts (``weight_ih_l{k}`` (G*H, I_k), ``weight_hh_l{k}`` (G*H, H), ``bias_ih_l{k}``,
``bias_hh_l{k}``, ``..._reverse`` for the backward direction), same shapes in and out:

==========  ==========================================================================
input       ``x`` (T, N, I), or (N, T, I) with ``batch_first=True``, or unbatched (T, I)
h0          (L*D, N, H) (unbatched: (L*D, H)); LSTM: a pair ``(h0, c0)``; None means zeros
            (or the learned initial state when ``learn_h0=True``)
output      (T, N, D*H): the last layer's state at every step, directions concatenated
h_n         (L*D, N, H): every layer's and direction's final state; LSTM: ``(h_n, c_n)``
==========  ==========================================================================

Extras over torch: ``lengths`` (N,) for ragged batches without packing (padding never changes
``h_n``; the backward direction starts at each row's last valid step), a ``reset`` mask (T, N)
that restarts chosen rows from their initial state mid-sequence with no gradient across the
boundary, a learned initial state, and :meth:`backward` with gradients for every parameter,
the input and the initial state.

Equivalent reference loop for one layer and direction (``GRU`` shown)::

    h = h0
    for t in range(T):
        h = cell(x[t], h)        # hiddenstate.GRUCell with the same weights
        output[t] = h

Speed (see ``benchmarks/bench_layers.py``): per layer and direction the input projection of all
T steps is one matrix multiply, each step does one product of the (N, H) state with all gates'
recurrent weights (a batched (G, H, H) matmul that writes the gates gate-major; a second
(N, H) x (H, H) product for the Cho-form GRU), and the weight gradients are one product after
the time loop.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hiddenstate import state as _state
from hiddenstate.validation import boolean, drop_probability, float_array, float_dtype, generator, positive_int, shape_str, state_array
from hiddenstate.validation import lengths as check_lengths
from hiddenstate.cells import gru as _gru
from hiddenstate.cells import lstm as _lstm
from hiddenstate.cells import rnn as _rnn
from hiddenstate.cells.base import uniform_init

__all__ = ["GRU", "LSTM", "RNN", "DirectionalState", "reverse_padded"]


class DirectionalState(NamedTuple):
    """A final state split by direction, so nobody has to index ``h_n[-2]`` / ``h_n[-1]`` by hand.

    Attributes
    ----------
    forward : ndarray of shape (L, N, H)
        Final state of the forward direction of every layer.
    backward : ndarray of shape (L, N, H) or None
        Final state of the backward direction (state after reading each row's first step),
        None for a unidirectional layer.
    """

    forward: np.ndarray
    backward: np.ndarray | None


def _reverse_index(T: int, lengths: np.ndarray | None, N: int) -> np.ndarray | None:
    """Time index (T, N) that reverses each column within its length (an involution)."""
    if lengths is None:
        return None
    t = np.arange(T)[:, None]
    return np.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)


def _reverse(a: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
    if idx is None:
        return np.ascontiguousarray(a[::-1])
    return a[idx, np.arange(a.shape[1])[None, :]]


def reverse_padded(x, lengths) -> np.ndarray:
    """Reverse each sequence of a padded batch within its own length; padding stays in place.

    Parameters
    ----------
    x : ndarray of shape (T, N, ...)
        Time-major padded batch.
    lengths : array_like of int, shape (N,)
        Valid steps per column, each in [0, T].

    Returns
    -------
    ndarray of shape (T, N, ...)
        ``out[t, n] = x[lengths[n] - 1 - t, n]`` for ``t < lengths[n]``, else ``x[t, n]``.
        Applying it twice gives back ``x``.
    """
    x = np.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"x must have shape (T, N, ...); got {shape_str(x.shape)}.")
    lengths = check_lengths(lengths, x.shape[0], x.shape[1])
    return _reverse(x, _reverse_index(x.shape[0], lengths, x.shape[1]))


class _RecurrentLayer:
    """Shared engine of :class:`RNN`, :class:`GRU` and :class:`LSTM`."""

    _kernel = None
    num_gates = 1
    is_lstm = False

    def __init__(self, input_size, hidden_size, num_layers=1, *, bias=True, batch_first=False,
                 bidirectional=False, dropout=0.0, weight_drop=0.0, learn_h0=False, dtype=np.float64, rng=None):
        self.input_size = positive_int("input_size", input_size)
        self.hidden_size = positive_int("hidden_size", hidden_size)
        self.num_layers = positive_int("num_layers", num_layers)
        self.bias = boolean("bias", bias)
        self.batch_first = boolean("batch_first", batch_first)
        self.bidirectional = boolean("bidirectional", bidirectional)
        self.learn_h0 = boolean("learn_h0", learn_h0)
        self.dropout = drop_probability("dropout", dropout)
        self.weight_drop = drop_probability("weight_drop", weight_drop)
        self.dtype = float_dtype("dtype", dtype)
        self._rng = generator(rng)
        self.num_directions = 2 if self.bidirectional else 1
        G, H = self.num_gates, self.hidden_size
        self.params: dict[str, np.ndarray] = {}
        for layer in range(self.num_layers):
            width = self.input_size if layer == 0 else H * self.num_directions
            for d in range(self.num_directions):
                sfx = self._suffix(layer, d)
                self.params["weight_ih" + sfx] = uniform_init(self._rng, (G * H, width), H, self.dtype)
                self.params["weight_hh" + sfx] = uniform_init(self._rng, (G * H, H), H, self.dtype)
                if self.bias:
                    self.params["bias_ih" + sfx] = uniform_init(self._rng, (G * H,), H, self.dtype)
                    self.params["bias_hh" + sfx] = uniform_init(self._rng, (G * H,), H, self.dtype)
        if self.learn_h0:
            LD = self.num_layers * self.num_directions
            self.params["h0"] = np.zeros((LD, H), dtype=self.dtype)
            if self.is_lstm:
                self.params["c0"] = np.zeros((LD, H), dtype=self.dtype)

    @staticmethod
    def _suffix(layer: int, direction: int) -> str:
        return f"_l{layer}" + ("_reverse" if direction else "")

    def _options(self) -> dict:
        return {}

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
                f"bidirectional={self.bidirectional}, dtype={self.dtype})")

    # -- parameters ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """A copy of :attr:`params` (torch names; ``torch.nn.GRU.load_state_dict`` accepts the recurrent part)."""
        return {k: v.copy() for k, v in self.params.items()}

    def load_state_dict(self, state: dict) -> None:
        """Replace every parameter; keys and shapes must match exactly (nothing is loaded otherwise).

        Raises
        ------
        ValueError
            A key is missing or unexpected, or an array has the wrong shape.
        """
        missing = sorted(set(self.params) - set(state))
        extra = sorted(set(state) - set(self.params))
        if missing or extra:
            raise ValueError(f"state_dict keys do not match {type(self).__name__}: missing {missing}, unexpected {extra}.")
        new = {}
        for k, v in self.params.items():
            a = np.asarray(state[k])
            if a.shape != v.shape:
                raise ValueError(f"state_dict[{k!r}] must have shape {shape_str(v.shape)}; got {shape_str(a.shape)}.")
            new[k] = float_array(f"state_dict[{k!r}]", a, dtype=self.dtype).copy()
        self.params.update(new)

    def initial_state(self, batch_size: int, kind: str = "zeros", **options):
        """Build an initial state of the right structure for ``batch_size`` sequences (cf. Flax ``initialize_carry``).

        Parameters
        ----------
        batch_size : int
            N.
        kind : {"zeros", "normal", "constant", "learned"}, default "zeros"
            See :func:`hiddenstate.state.initial_state`; ``"learned"`` broadcasts the layer's
            ``h0`` (and ``c0``) parameters (requires ``learn_h0=True``).
        **options
            ``std``, ``value``, ``rng`` for :func:`hiddenstate.state.initial_state`.

        Returns
        -------
        ndarray of shape (L*D, N, H), or a pair of them for the LSTM
        """
        N = positive_int("batch_size", batch_size)
        shape = (self.num_layers * self.num_directions, N, self.hidden_size)
        if kind == "learned":
            if not self.learn_h0:
                raise ValueError("kind='learned' needs a layer built with learn_h0=True; got learn_h0=False.")
            h = np.repeat(self.params["h0"][:, None, :], N, axis=1)
            return (h, np.repeat(self.params["c0"][:, None, :], N, axis=1)) if self.is_lstm else h
        make = lambda: _state.initial_state(shape, kind, dtype=self.dtype, **options)  # noqa: E731
        return (make(), make()) if self.is_lstm else make()

    def split_directions(self, h_n) -> DirectionalState:
        """Split a final state (L*D, N, H) into named forward / backward parts (each (L, N, H))."""
        h = np.asarray(h_n)
        LD = self.num_layers * self.num_directions
        if h.ndim < 2 or h.shape[0] != LD:
            raise ValueError(f"h_n must have shape (L*D={LD}, N, H); got {shape_str(h.shape)}.")
        if self.num_directions == 1:
            return DirectionalState(h, None)
        return DirectionalState(h[0::2], h[1::2])

    # -- validation ----------------------------------------------------------------------------
    def _prepare(self, x, h0, lengths, reset):
        x = float_array("x", x, dtype=self.dtype)
        I, H = self.input_size, self.hidden_size
        LD = self.num_layers * self.num_directions
        if x.ndim == 2:
            unbatched = True
            if x.shape[1] != I:
                raise ValueError(f"x must have shape (T, I={I}) when unbatched; got {shape_str(x.shape)}.")
            x = x[:, None, :]
        elif x.ndim == 3:
            unbatched = False
            if x.shape[2] != I:
                legend = f"(N, T, I={I})" if self.batch_first else f"(T, N, I={I})"
                raise ValueError(f"x must have shape {legend}; got {shape_str(x.shape)}.")
            if self.batch_first:
                x = x.transpose(1, 0, 2)
        else:
            legend = "(N, T, I)" if self.batch_first else "(T, N, I)"
            raise ValueError(f"x must have shape {legend} or unbatched (T, I); got {shape_str(x.shape)}.")
        x = np.ascontiguousarray(x)
        T, N, _ = x.shape

        def state(name, value, learned_key):
            if value is None:
                if self.learn_h0:
                    return np.repeat(self.params[learned_key][:, None, :], N, axis=1), True
                return np.zeros((LD, N, H), dtype=self.dtype), False
            if unbatched:
                a = state_array(name, value, None, H, self.dtype, lead=(LD,), legend=f"(L*D={LD}, H={H})")
                return a[:, None, :].copy(), False
            legend = f"(num_layers*num_directions={LD}, N={N}, H={H})"
            return state_array(name, value, N, H, self.dtype, lead=(LD,), legend=legend).copy(), False

        if self.is_lstm:
            if h0 is None:
                hc = (None, None)
            elif isinstance(h0, tuple) and len(h0) == 2:
                hc = h0
            else:
                raise TypeError(f"h0 must be None or a pair (h0, c0) for an LSTM; got {type(h0).__name__}.")
            (h, learned), (c, _) = state("h0", hc[0], "h0"), state("c0", hc[1], "c0")
            state0 = (h, c)
        else:
            state0, learned = state("h0", h0, "h0")

        keep = None
        lens = None
        if lengths is not None:
            if unbatched:
                raise ValueError("lengths must be None for unbatched (T, I) input; add a batch axis to use lengths.")
            lens = check_lengths(lengths, T, N)
            if (lens < T).any():
                keep = (np.arange(T)[:, None] < lens[None, :])[:, :, None]  # (T, N, 1)
        rmask = None
        if reset is not None:
            r = np.asarray(reset)
            if r.dtype != bool:
                raise TypeError(f"reset must be a bool array; got dtype {r.dtype}.")
            want = (T,) if unbatched else ((N, T) if self.batch_first else (T, N))
            if r.shape != want:
                legend = "(T,)" if unbatched else ("(N, T)" if self.batch_first else "(T, N)")
                raise ValueError(f"reset must have shape {legend}={shape_str(want)}; got {shape_str(r.shape)}.")
            r = r[:, None] if unbatched else (r.T if self.batch_first else r)
            if keep is not None:
                r = r & keep[:, :, 0]
            if r.any():
                rmask = np.ascontiguousarray(r)
        return x, state0, learned, lens, keep, rmask, unbatched

    # -- forward -------------------------------------------------------------------------------
    def forward(self, x, h0=None, *, lengths=None, reset=None, training=False, rng=None):
        """Run the layer over a sequence and keep what :meth:`backward` needs.

        Parameters
        ----------
        x : ndarray of shape (T, N, I), (N, T, I) if ``batch_first``, or (T, I), float
            Input sequence; cast to the layer's dtype.
        h0 : ndarray of shape (L*D, N, H) or (L*D, H) unbatched, optional
            Initial state (LSTM: pair ``(h0, c0)``). None: zeros, or the learned initial state.
            Pass the ``h_n`` of the previous chunk to carry the state (truncated BPTT); its
            batch size must match ``x``; it is never sliced or broadcast.
        lengths : array_like of int, shape (N,), optional
            Valid steps of each column, in any order, each in [0, T]. Outputs past a column's
            length are zero and ``h_n`` is the state at its own last valid step; a length-0
            column keeps its ``h0``.
        reset : ndarray of bool, shape (T, N) ((N, T) if ``batch_first``), optional
            Where ``reset[t, n]`` is True, column n starts step t from its initial state instead
            of its previous state, and no gradient flows back across that boundary.
        training : bool, default False
            Apply inter-layer dropout (when ``dropout > 0``) and DropConnect on the recurrent
            weights (when ``weight_drop > 0``).
        rng : numpy.random.Generator, optional
            Draws the dropout masks (default: the generator given at construction).

        Returns
        -------
        output : ndarray of shape (T, N, D*H) (batch_first: (N, T, D*H); unbatched: (T, D*H))
        h_n : ndarray of shape (L*D, N, H) (unbatched: (L*D, H)); LSTM: pair ``(h_n, c_n)``
        cache : object
            Opaque; pass it to :meth:`backward`.

        Raises
        ------
        ValueError
            Shapes that do not match the legend above, NaN/Inf, lengths out of range.
        TypeError
            Non-float inputs, non-integer lengths, non-bool reset.
        """
        x, state0, learned, lens, keep, rmask, unbatched = self._prepare(x, h0, lengths, reset)
        with np.errstate(under="ignore"):  # gradients and gates may underflow to 0; that is exact enough
            return self._forward(x, state0, learned, lens, keep, rmask, unbatched, training, rng)

    def _forward(self, x, state0, learned, lens, keep, rmask, unbatched, training, rng):
        T, N, _ = x.shape
        H, D, L = self.hidden_size, self.num_directions, self.num_layers
        p = self.params
        fwd, _ = self._kernel
        opts = self._options()
        idx = _reverse_index(T, lens, N) if D == 2 else None
        rmask_rev = None
        if D == 2 and rmask is not None:
            shifted = np.zeros_like(rmask)
            shifted[:-1] = rmask[1:]  # a boundary before t is, read backwards, a boundary before t-1
            if keep is not None:
                shifted &= keep[:, :, 0]
            rmask_rev = _reverse(shifted, idx)[:, :, None]
        rm = None if rmask is None else rmask[:, :, None]
        use_dropout = training and self.dropout > 0.0 and L > 1
        use_weight_drop = training and self.weight_drop > 0.0
        drng = generator(rng) if rng is not None else self._rng
        finals = [None] * (L * D)
        layer_caches = []
        inp = x
        for layer in range(L):
            outs, dcaches = [], []
            for d in range(D):
                sfx = self._suffix(layer, d)
                xin = inp if d == 0 else _reverse(inp, idx)
                xw = (xin.reshape(T * N, xin.shape[2]) @ p["weight_ih" + sfx].T).reshape(T, N, self.num_gates * H)
                if self.bias:
                    xw += p["bias_ih" + sfx]
                k = layer * D + d
                s0 = (state0[0][k], state0[1][k]) if self.is_lstm else state0[k]
                w_hh, w_mask = p["weight_hh" + sfx], None
                if use_weight_drop:  # one DropConnect mask for the whole chunk (Merity et al. 2018)
                    w_mask = ((drng.random(w_hh.shape) >= self.weight_drop).astype(self.dtype)
                              / self.dtype.type(1.0 - self.weight_drop))  # (G*H, H)
                    w_hh = w_hh * w_mask
                hs, final, kc = fwd(xw, s0, w_hh, p.get("bias_hh" + sfx), keep,
                                    rm if d == 0 else rmask_rev, **opts)
                finals[k] = final
                out = hs if keep is None else np.where(keep, hs, 0.0)
                outs.append(out if d == 0 else _reverse(out, idx))
                dcaches.append((xin, kc, w_mask))
            out = outs[0] if D == 1 else np.concatenate(outs, axis=2)
            mask = None
            if use_dropout and layer < L - 1:
                mask = (drng.random(out.shape) >= self.dropout).astype(self.dtype) / (1.0 - self.dropout)
                out = out * mask
            layer_caches.append((dcaches, mask))
            inp = out
        output = inp
        if self.is_lstm:
            h_n = np.stack([f[0] for f in finals])
            c_n = np.stack([f[1] for f in finals])
        else:
            h_n = np.stack(finals)
        if unbatched:
            output = output[:, 0]
            h_n = h_n[:, 0]
            if self.is_lstm:
                c_n = c_n[:, 0]
        elif self.batch_first:
            output = output.transpose(1, 0, 2)
        cache = (layer_caches, keep, idx, learned, unbatched, (T, N))
        return output, ((h_n, c_n) if self.is_lstm else h_n), cache

    def __call__(self, x, h0=None, *, lengths=None, reset=None):
        """``output, h_n = layer(x, h0)`` (inference; see :meth:`forward`)."""
        output, h_n, _ = self.forward(x, h0, lengths=lengths, reset=reset)
        return output, h_n

    # -- backward ------------------------------------------------------------------------------
    def backward(self, cache, d_output, d_h_n=None):
        """Exact backpropagation through time for a :meth:`forward` call.

        Parameters
        ----------
        cache : object
            From :meth:`forward`.
        d_output : ndarray shaped like ``output``, or None
            Gradient of the loss with respect to the output (None: zeros).
        d_h_n : ndarray shaped like ``h_n``, or None
            Gradient with respect to the final state (LSTM: pair ``(dh_n, dc_n)``, either may be
            None).

        Returns
        -------
        grads : dict
            Same keys and shapes as :attr:`params` (``h0``/``c0`` included when learned:
            the batch sum of the initial-state gradient when ``h0=None`` was used, else zero).
        dx : ndarray shaped like ``x``
        dh0 : ndarray shaped like ``h0`` (LSTM: pair ``(dh0, dc0)``)
        """
        with np.errstate(under="ignore"):
            return self._backward(cache, d_output, d_h_n)

    def _backward(self, cache, d_output, d_h_n):
        layer_caches, keep, idx, learned, unbatched, (T, N) = cache
        H, D, L, G = self.hidden_size, self.num_directions, self.num_layers, self.num_gates
        LD = L * D
        p = self.params
        _, bwd = self._kernel

        def as_tm(name, a, shape_tm):
            if a is None:
                return None
            a = float_array(name, a, dtype=self.dtype)
            if unbatched:
                a = a[:, None] if name == "d_output" else a[:, None, :]
            elif self.batch_first and name == "d_output":
                a = a.transpose(1, 0, 2)
            if a.shape != shape_tm:
                raise ValueError(f"{name} must have the shape of the forward result; got {shape_str(a.shape)} "
                                 f"(time-major), expected {shape_str(shape_tm)}.")
            return a

        dout = as_tm("d_output", d_output, (T, N, D * H))
        if self.is_lstm:
            dh_n, dc_n = (None, None) if d_h_n is None else d_h_n
            dh_n = as_tm("d_h_n", dh_n, (LD, N, H))
            dc_n = as_tm("d_c_n", dc_n, (LD, N, H))
        else:
            dh_n = as_tm("d_h_n", d_h_n, (LD, N, H))
        grads = {}
        dstate_h = np.zeros((LD, N, H), dtype=self.dtype)
        dstate_c = np.zeros((LD, N, H), dtype=self.dtype) if self.is_lstm else None
        for layer in range(L - 1, -1, -1):
            dcaches, mask = layer_caches[layer]
            if dout is not None and mask is not None:
                dout = dout * mask
            dinp = None
            for d in range(D):
                sfx = self._suffix(layer, d)
                xin, kc, w_mask = dcaches[d]
                k = layer * D + d
                dhs = None
                if dout is not None:
                    dhs = dout[:, :, d * H:(d + 1) * H]
                    if keep is not None:
                        dhs = np.where(keep, dhs, 0.0)
                    dhs = np.ascontiguousarray(dhs) if d == 0 else _reverse(dhs, idx)
                if self.is_lstm:
                    dfin = None
                    if dh_n is not None or dc_n is not None:
                        dfin = (None if dh_n is None else dh_n[k], None if dc_n is None else dc_n[k])
                else:
                    dfin = None if dh_n is None else dh_n[k]
                dxw, dw_hh, db_hh, ds0 = bwd(kc, dhs, dfin)
                dxw2 = dxw.reshape(T * N, G * H)
                grads["weight_ih" + sfx] = dxw2.T @ xin.reshape(T * N, xin.shape[2])
                grads["weight_hh" + sfx] = dw_hh if w_mask is None else dw_hh * w_mask
                if self.bias:
                    grads["bias_ih" + sfx] = dxw.sum(axis=1).sum(axis=0)
                    grads["bias_hh" + sfx] = db_hh
                dxin = (dxw2 @ p["weight_ih" + sfx]).reshape(T, N, xin.shape[2])
                if d == 1:
                    dxin = _reverse(dxin, idx)
                dinp = dxin if dinp is None else dinp + dxin
                if self.is_lstm:
                    dstate_h[k], dstate_c[k] = ds0
                else:
                    dstate_h[k] = ds0
            dout = dinp
        dx = dout
        if self.learn_h0:
            grads["h0"] = dstate_h.sum(axis=1) if learned else np.zeros((LD, H), dtype=self.dtype)
            if self.is_lstm:
                grads["c0"] = dstate_c.sum(axis=1) if learned else np.zeros((LD, H), dtype=self.dtype)
        grads = {key: grads[key] for key in self.params}  # the parameters' order
        if unbatched:
            dx = dx[:, 0]
            dstate_h = dstate_h[:, 0]
            dstate_c = None if dstate_c is None else dstate_c[:, 0]
        elif self.batch_first:
            dx = dx.transpose(1, 0, 2)
        return grads, dx, ((dstate_h, dstate_c) if self.is_lstm else dstate_h)


class RNN(_RecurrentLayer):
    """Multi-layer Elman RNN ``h_t = act(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)`` (Elman 1990).

    Parameters
    ----------
    input_size : int
        I, features of each input vector.
    hidden_size : int
        H, hidden units per layer and direction.
    num_layers : int, default 1
        L, stacked layers; layer k > 0 reads layer k-1's output (D*H features).
    nonlinearity : {"tanh", "relu", "sigmoid"}, default "tanh"
        ``"sigmoid"``: Elman's (1990) logistic units in [0, 1] (an extension; torch has tanh and relu).
    bias : bool, default True
    batch_first : bool, default False
        Input and output as (N, T, features) instead of (T, N, features).
    bidirectional : bool, default False
        D = 2: a second direction reads each sequence backwards (within its length).
    dropout : float in [0, 1), default 0
        Dropout on every layer's output except the last, in ``forward(training=True)`` only.
    weight_drop : float in [0, 1), default 0
        DropConnect (Wan et al. 2013) on the recurrent weights ``weight_hh_l*``, in
        ``forward(training=True)`` only: each entry is zeroed with this probability and the
        rest scaled by ``1 / (1 - weight_drop)``, one mask per forward call, the same for every
        time step and sequence (the weight-dropped LSTM of Merity, Keskar & Socher 2018,
        "Regularizing and optimizing LSTM language models", Sec. 2). It regularizes the
        recurrent connection, which ``dropout`` leaves alone; ``backward`` returns the gradient
        with respect to the unmasked weights.
    learn_h0 : bool, default False
        Add a trainable initial state ``params["h0"]`` (L*D, H), broadcast over the batch.
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
        Initial weights U(-1/sqrt(H), 1/sqrt(H)) (as PyTorch) and default dropout masks.

    Examples
    --------
    >>> rnn = RNN(10, 20, 2, rng=np.random.default_rng(0))
    >>> out, h_n = rnn(np.ones((5, 3, 10)))
    >>> out.shape, h_n.shape
    ((5, 3, 20), (2, 3, 20))
    """

    _kernel = (_rnn.scan_forward, _rnn.scan_backward)
    num_gates = _rnn.NUM_GATES

    def __init__(self, input_size, hidden_size, num_layers=1, *, nonlinearity="tanh", bias=True, batch_first=False,
                 bidirectional=False, dropout=0.0, weight_drop=0.0, learn_h0=False, dtype=np.float64, rng=None):
        if nonlinearity not in _rnn.NONLINEARITIES:
            raise ValueError(f"nonlinearity must be one of {_rnn.NONLINEARITIES}; got {nonlinearity!r}.")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, num_layers, bias=bias, batch_first=batch_first,
                         bidirectional=bidirectional, dropout=dropout, weight_drop=weight_drop, learn_h0=learn_h0,
                         dtype=dtype, rng=rng)

    def _options(self):
        return {"nonlinearity": self.nonlinearity}


class GRU(_RecurrentLayer):
    """Multi-layer gated recurrent unit (Cho et al. 2014); see :class:`hiddenstate.GRUCell` for the equations.

    Parameters are those of :class:`RNN` (no ``nonlinearity``) plus

    reset_after : bool, default False
        False: the paper's candidate ``tanh(W_in x + b_in + W_hn (r * h) + b_hn)`` (the seeds'
        form; Keras ``reset_after=False``). True: ``tanh(W_in x + b_in + r * (W_hn h + b_hn))``,
        identical to ``torch.nn.GRU``.

    Parameter rows are in gate order r, z, n: ``weight_ih_l0`` (3H, I), ``weight_hh_l0`` (3H, H).
    """

    _kernel = (_gru.scan_forward, _gru.scan_backward)
    num_gates = _gru.NUM_GATES

    def __init__(self, input_size, hidden_size, num_layers=1, *, bias=True, batch_first=False, reset_after=False,
                 bidirectional=False, dropout=0.0, weight_drop=0.0, learn_h0=False, dtype=np.float64, rng=None):
        self.reset_after = boolean("reset_after", reset_after)
        super().__init__(input_size, hidden_size, num_layers, bias=bias, batch_first=batch_first,
                         bidirectional=bidirectional, dropout=dropout, weight_drop=weight_drop, learn_h0=learn_h0,
                         dtype=dtype, rng=rng)

    def _options(self):
        return {"reset_after": self.reset_after}


class LSTM(_RecurrentLayer):
    """Multi-layer LSTM (Hochreiter & Schmidhuber 1997); see :class:`hiddenstate.LSTMCell` for the equations.

    Parameters are those of :class:`RNN` (no ``nonlinearity``). The state is a pair: ``h0`` is
    ``(h0, c0)`` and the result ``(output, (h_n, c_n))``; with ``learn_h0=True`` both ``h0`` and
    ``c0`` are parameters. Parameter rows are in gate order i, f, g, o (4H rows).
    """

    _kernel = (_lstm.scan_forward, _lstm.scan_backward)
    num_gates = _lstm.NUM_GATES
    is_lstm = True
