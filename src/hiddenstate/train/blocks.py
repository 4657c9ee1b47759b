"""Residual blocks around minGRU/minLSTM layers: the stack a character model of linear recurrences needs.

A minGRU's state is a gated running average of its candidates, and its candidates are linear
in its input, so minGRU layers chained directly compose little more than one layer does: our
torch prototypes of two directly stacked 512-unit minGRU layers reached 2.32 nats/char after
600 steps of the demo schedule where a GRU of 256 units reached 1.80. Feng et al. (2024)
evaluate minGRU/minLSTM inside the blocks of modern sequence models (a normalisation, the
recurrent layer with a residual connection, an MLP with a residual connection; lucidrains'
minGRU-pytorch builds its language model the same way), and that stack reached 1.85 in the
same prototype. :class:`MinStack` is that stack, with the first layer reading the model's input
directly (one-hot or embedded characters), since normalising a row of an embedding only
reparameterises it::

    h^k_t = R_k(u^k)_t,   u^0 = input,   u^k = rms(x) * n_k (k >= 1)     minGRU or minLSTM
    x = h^0_t + S_0 h^0_{t-1}                                            layer 0
    x = x + h^k_t + S_k h^k_{t-1}                                        layers k >= 1
    x = x + W2_k gelu(W1_k (rms(x) * m_k) + b1_k) + b2_k                 after every layer (F = 2H)
    output = rms(x) * n_out,     rms(v) = v / sqrt(mean(v^2) + 1e-6)

``R_k`` is a one-layer :class:`hiddenstate.MinGRU`/:class:`~hiddenstate.MinLSTM` recurrence
(the kernels of :mod:`hiddenstate.classic.cells.mingru`, :mod:`~hiddenstate.classic.cells.minlstm`) and GELU is
the tanh approximation. Dropout (training only) acts on each branch before it is added.

``S_k h^k_{t-1}`` (a "state shift", an (H, H) matrix per layer) is ours: the analogue of the
token shift of RWKV or the short causal convolution of Mamba-style blocks, applied to the
recurrent state, whose value at ``t - 1`` is carried across chunks anyway, so nothing else needs
carrying. A unit with a keep gate near 0 holds its current input, so the block sees the current
and the previous input apart, which a gated average alone mixes; the recurrence itself stays
linear.

The stack is a :class:`~hiddenstate.classic.recurrent.RecurrentLayer` whose ``run`` and ``backward``
are the blocks', so the probe tools (:func:`hiddenstate.trace`, gradient flow, memory, the
report) see every layer's gates and the input each layer really read; its state is the layers'
states ``(L, N, H)``, carried across chunks like any layer's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hiddenstate.classic.cells import KINDS
from hiddenstate.classic.cells.mingru import SCANS
from hiddenstate.classic.prepared import DirectionCache
from hiddenstate.classic.recurrent import RecurrentLayer
from hiddenstate.core.params import check_params, uniform_init
from hiddenstate.core.validation import boolean, choice, float_array, generator, shape_str
from hiddenstate.shared.scan import previous_states

__all__ = ["EPS", "FF_MULT", "LINEAR_CELLS", "MinStack"]

#: The cells a :class:`MinStack` can hold.
LINEAR_CELLS = ("mingru", "minlstm")
#: Width of each block's MLP, in multiples of H.
FF_MULT = 2
#: Added to the mean square in every RMS normalisation.
EPS = 1e-6
_GELU_C = float(np.sqrt(2.0 / np.pi))


def _rms(x, gain):
    """``x / sqrt(mean(x^2) + EPS) * gain`` over the last axis, and what its backward needs."""
    inv = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS)  # (..., 1)
    xhat = x * inv
    return xhat * gain, (xhat, inv)


def _rms_backward(dy, cache, gain):
    """Gradients of :func:`_rms` with respect to its input and its gain."""
    xhat, inv = cache
    dxhat = dy * gain
    dx = inv * (dxhat - xhat * np.mean(dxhat * xhat, axis=-1, keepdims=True))
    return dx, (dy * xhat).reshape(-1, xhat.shape[-1]).sum(axis=0)


def _gelu(a):
    """GELU, tanh approximation (torch's ``approximate="tanh"``), and its derivative (in-place steps)."""
    a2 = a * a  # (a ** 3 would be a slow pow() per element)
    t = a2 * 0.044715
    t += 1.0
    t *= a
    t *= _GELU_C
    np.tanh(t, out=t)  # tanh(c (a + 0.044715 a^3))
    f = t + 1.0
    f *= a
    f *= 0.5
    d = t * t
    np.subtract(1.0, d, out=d)
    d *= a
    d *= 0.5 * _GELU_C
    a2 *= 3 * 0.044715
    a2 += 1.0
    d *= a2
    t += 1.0
    t *= 0.5
    d += t  # 0.5 (1 + t) + 0.5 a (1 - t^2) c (1 + 3 * 0.044715 a^2)
    return f, d


@dataclass(frozen=True)
class StackCache:
    """What :meth:`MinStack.run` keeps for :meth:`MinStack.backward` and :func:`hiddenstate.trace`.

    Attributes
    ----------
    directions : list of DirectionCache
        One per layer: the input the layer read and its kernel's cache.
    blocks : list of tuple
        Per layer: the normalisations', MLP's and dropout's intermediate arrays.
    out_norm : tuple
        The final normalisation's cache.
    prepared : Prepared
        The input of the run.
    """

    directions: list
    blocks: list
    out_norm: tuple
    prepared: object


class MinStack(RecurrentLayer):
    """L minGRU or minLSTM layers in residual blocks with RMS normalisation and an MLP (see the module).

    Parameters
    ----------
    input_size : int
        I, features of each input vector (what layer 0 reads).
    hidden_size : int
        H, units of every layer; also the width of the residual stream and of the output.
    num_layers : int, default 1
        L, blocks.
    cell : {"mingru", "minlstm"}, default "mingru"
        The recurrence of every block.
    log_space : bool, default False
        The recurrences' log-space form (positive candidates ``g``).
    scan : {"parallel", "sequential"}, default "sequential"
        How the recurrences run over time (the same function; see :class:`hiddenstate.MinGRU`).
    dropout : float in [0, 1), default 0
        Dropout on each recurrent layer's and each MLP's output before it joins the residual
        stream, in ``forward(training=True)`` only.
    dtype : {float64, float32}, default float64
        Dtype of the parameters and of every result.
    rng : numpy.random.Generator, optional
        Draws the initial weights (U(-1/sqrt(fan_in), 1/sqrt(fan_in)), gains 1) and, by
        default, the dropout masks.

    Attributes
    ----------
    params : dict of str to ndarray
        ``weight_ih_l{k}`` (G*H, I_k), ``bias_ih_l{k}`` (G*H,) (the recurrences),
        ``shift_weight_l{k}`` (H, H), ``norm_l{k}`` (H,) for k >= 1, ``ff_norm_l{k}`` (H,),
        ``ff_in_weight_l{k}`` (F, H), ``ff_in_bias_l{k}`` (F,), ``ff_out_weight_l{k}`` (H, F),
        ``ff_out_bias_l{k}`` (H,), ``norm_out`` (H,).
    kind : CellKind
        The recurrences' kind (``KINDS[cell]``).
    cell, log_space, scan : str, bool, str
        The options above.

    Raises
    ------
    TypeError, ValueError
        As :class:`hiddenstate.MinGRU`; an unknown ``cell``.
    """

    kind = None

    def __init__(self, input_size, hidden_size, num_layers=1, *, cell="mingru", log_space=False, scan="sequential",
                 dropout=0.0, dtype=np.float64, rng=None):
        self.cell = choice("cell", cell, LINEAR_CELLS)
        self.kind = KINDS[self.cell]
        self.log_space = boolean("log_space", log_space)
        self.scan = choice("scan", scan, SCANS)
        super().__init__(input_size, hidden_size, num_layers, dropout=dropout, dtype=dtype, rng=rng)
        H, F = self.hidden_size, FF_MULT * self.hidden_size
        for k in range(self.num_layers):
            self.params[f"shift_weight_l{k}"] = uniform_init(self._rng, (H, H), H, self.dtype)
            if k:
                self.params[f"norm_l{k}"] = np.ones(H, dtype=self.dtype)
            self.params[f"ff_norm_l{k}"] = np.ones(H, dtype=self.dtype)
            self.params[f"ff_in_weight_l{k}"] = uniform_init(self._rng, (F, H), H, self.dtype)
            self.params[f"ff_in_bias_l{k}"] = uniform_init(self._rng, (F,), H, self.dtype)
            self.params[f"ff_out_weight_l{k}"] = uniform_init(self._rng, (H, F), F, self.dtype)
            self.params[f"ff_out_bias_l{k}"] = uniform_init(self._rng, (H,), F, self.dtype)
        self.params["norm_out"] = np.ones(H, dtype=self.dtype)
        self._shapes = {k: (v.shape, shape_str(v.shape)) for k, v in self.params.items()}

    def check_params(self) -> None:
        """Check :attr:`params` as every forward pass does: keys, ndarray, dtype, shape, finite values.

        Raises
        ------
        TypeError
            A parameter replaced by something that is not an ndarray, or of another dtype.
        ValueError
            A missing or unexpected key, a wrong shape, a NaN or Inf (the message names the key).
        """
        check_params(self.params, self._shapes, self.dtype, type(self).__name__)

    def run(self, prepared, *, training=False, rng=None, record=False):
        """The blocks over a :class:`~hiddenstate.classic.prepared.Prepared` input (the body of :meth:`forward`).

        Parameters
        ----------
        prepared : Prepared
            From :meth:`prepare`.
        training : bool, default False
            Apply dropout.
        rng : numpy.random.Generator, optional
            Draws the dropout masks (default: the generator given at construction).
        record : bool, default False
            Let the kernels also keep every pre-activation (for :func:`hiddenstate.trace`).

        Returns
        -------
        output : ndarray of shape (T, N, H) (batch_first: (N, T, H); unbatched: (T, H))
            The normalised residual stream; zero past a row's length.
        h_n : ndarray of shape (L, N, H) (unbatched: (L, H))
            Every layer's final state.
        cache : StackCache
        """
        training, record = boolean("training", training), boolean("record", record)
        self.check_params()
        drng = generator(rng) if rng is not None else self._rng
        x, keep = prepared.x, prepared.keep
        T, N, _ = x.shape
        H, G, p, opts = self.hidden_size, self.num_gates, self.params, self.options
        rm = None if prepared.reset is None else prepared.reset[:, :, None]
        drop = training and self.dropout > 0.0

        def mask():
            if not drop:
                return None
            return (drng.random((T, N, H)) >= self.dropout).astype(self.dtype) / self.dtype.type(1.0 - self.dropout)

        directions, blocks, finals, stream = [], [], [], None
        with np.errstate(under="ignore"):
            for k in range(self.num_layers):
                u, norm = (x, None) if k == 0 else _rms(stream, p[f"norm_l{k}"])
                xw = (u.reshape(T * N, -1) @ p[f"weight_ih_l{k}"].T).reshape(T, N, G * H)
                if self.bias:
                    xw += p[f"bias_ih_l{k}"]
                hs, final, kc = self.kind.scan_forward(xw, prepared.state0[k], None, None, keep, rm, record=record,
                                                       **opts)
                finals.append(final)
                h_prev = previous_states(hs, prepared.state0[k], rm)  # (T, N, H): h_{t-1} as step t read it
                h = hs + (h_prev.reshape(T * N, H) @ p[f"shift_weight_l{k}"].T).reshape(T, N, H)
                if keep is not None:
                    h = np.where(keep, h, 0.0)
                m_h = mask()
                h = h if m_h is None else h * m_h
                stream = h if k == 0 else stream + h
                v, ff_norm = _rms(stream, p[f"ff_norm_l{k}"])
                a = v.reshape(T * N, H) @ p[f"ff_in_weight_l{k}"].T + p[f"ff_in_bias_l{k}"]  # (T*N, F)
                f, df = _gelu(a)
                y = (f @ p[f"ff_out_weight_l{k}"].T + p[f"ff_out_bias_l{k}"]).reshape(T, N, H)
                m_y = mask()
                stream = stream + (y if m_y is None else y * m_y)
                directions.append(DirectionCache(x=u, kernel=kc, weight_mask=None, reset=rm))
                blocks.append((norm, ff_norm, v, f, df, m_h, m_y, h_prev))
            out, out_norm = _rms(stream, p["norm_out"])
        if keep is not None:
            out = np.where(keep, out, 0.0)
        h_n = np.stack(finals)
        if prepared.unbatched:
            out, h_n = out[:, 0], h_n[:, 0]
        elif self.batch_first:
            out = out.transpose(1, 0, 2)
        return out, h_n, StackCache(directions=directions, blocks=blocks, out_norm=out_norm, prepared=prepared)

    def backward(self, cache: StackCache, d_output, d_h_n=None):
        """Exact gradients of a :meth:`forward` call: the blocks in reverse, each recurrence by its kernel.

        Parameters
        ----------
        cache : StackCache
            From :meth:`forward`.
        d_output : ndarray shaped like ``output``, or None
            Gradient of the loss with respect to the output (None: zeros).
        d_h_n : ndarray shaped like ``h_n``, or None
            Gradient with respect to the final states.

        Returns
        -------
        grads : dict
            Same keys and shapes as :attr:`params`.
        dx : ndarray shaped like ``x``
        dh0 : ndarray shaped like ``h0``

        Raises
        ------
        TypeError
            ``cache`` is not a :class:`StackCache`.
        ValueError
            A gradient whose shape does not match the forward result.
        """
        if not isinstance(cache, StackCache):
            raise TypeError(f"cache must be the StackCache of this stack's forward; got {type(cache).__name__}.")
        prep = cache.prepared
        T, N = prep.x.shape[:2]
        H, L, p = self.hidden_size, self.num_layers, self.params

        def time_major(name, a, shape):
            if a is None:
                return None
            a = float_array(name, a, dtype=self.dtype)
            if prep.unbatched:
                a = a[:, None]
            elif self.batch_first and name == "d_output":
                a = a.transpose(1, 0, 2)
            if a.shape != shape:
                raise ValueError(f"{name} must have the shape of the forward result; got {shape_str(a.shape)} "
                                 f"(time-major), expected {shape_str(shape)}.")
            return a

        d_out = time_major("d_output", d_output, (T, N, H))
        d_fin = time_major("d_h_n", d_h_n, (L, N, H))
        grads, d_h0 = {}, np.zeros((L, N, H), dtype=self.dtype)
        with np.errstate(under="ignore"):
            if d_out is None:
                d_stream = np.zeros((T, N, H), dtype=self.dtype)
                grads["norm_out"] = np.zeros(H, dtype=self.dtype)
            else:
                if prep.keep is not None:
                    d_out = np.where(prep.keep, d_out, 0.0)
                d_stream, grads["norm_out"] = _rms_backward(d_out, cache.out_norm, p["norm_out"])
            for k in range(L - 1, -1, -1):
                norm, ff_norm, v, f, df, m_h, m_y, h_prev = cache.blocks[k]
                dc = cache.directions[k]
                dy = (d_stream if m_y is None else d_stream * m_y).reshape(T * N, H)
                grads[f"ff_out_weight_l{k}"] = dy.T @ f
                grads[f"ff_out_bias_l{k}"] = dy.reshape(T, N, H).sum(axis=1).sum(axis=0)
                da = (dy @ p[f"ff_out_weight_l{k}"]) * df  # (T*N, F)
                grads[f"ff_in_weight_l{k}"] = da.T @ v.reshape(T * N, H)
                grads[f"ff_in_bias_l{k}"] = da.reshape(T, N, -1).sum(axis=1).sum(axis=0)
                dv, grads[f"ff_norm_l{k}"] = _rms_backward((da @ p[f"ff_in_weight_l{k}"]).reshape(T, N, H), ff_norm,
                                                            p[f"ff_norm_l{k}"])
                d_stream = d_stream + dv
                dh = d_stream if m_h is None else d_stream * m_h
                if prep.keep is not None:
                    dh = np.where(prep.keep, dh, 0.0)
                dh2 = dh.reshape(T * N, H)
                grads[f"shift_weight_l{k}"] = dh2.T @ h_prev.reshape(T * N, H)
                d_prev = (dh2 @ p[f"shift_weight_l{k}"]).reshape(T, N, H)  # onto h_{t-1}: hs[t-1], or h0
                d_hs = dh.copy()
                d_hs[:-1] += d_prev[1:] if dc.reset is None else np.where(dc.reset[1:], 0.0, d_prev[1:])
                to_h0 = d_prev[0] if dc.reset is None else d_prev[0] + np.where(dc.reset[1:], d_prev[1:], 0.0).sum(0)
                dxw, _, _, d_h0[k] = self.kind.scan_backward(dc.kernel, d_hs, None if d_fin is None else d_fin[k])
                d_h0[k] += to_h0
                dxw2 = dxw.reshape(T * N, -1)
                grads[f"weight_ih_l{k}"] = dxw2.T @ dc.x.reshape(T * N, -1)
                if self.bias:
                    grads[f"bias_ih_l{k}"] = dxw.sum(axis=1).sum(axis=0)
                du = (dxw2 @ p[f"weight_ih_l{k}"]).reshape(T, N, -1)
                if k == 0:
                    dx = du
                else:
                    dn, grads[f"norm_l{k}"] = _rms_backward(du, norm, p[f"norm_l{k}"])
                    d_stream = d_stream + dn
        grads = {key: grads[key] for key in p}
        if prep.unbatched:
            return grads, dx[:, 0], d_h0[:, 0]
        return grads, (dx.transpose(1, 0, 2) if self.batch_first else dx), d_h0
