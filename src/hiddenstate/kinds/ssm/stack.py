"""Mamba blocks for the character model: the stack of ``cell="mamba"`` (:class:`MambaStack`).

The reference models (state-spaces/mamba's ``MambaLMHeadModel``, transformers'
``MambaForCausalLM``, :class:`hiddenstate.kinds.ssm.lm.MambaLM` here) put every Mamba mixer behind an
RMS normalisation on a residual stream and normalise the stream once more at the top::

    x = u @ W_in.T                       u: one-hot (or embedded) characters     # (T, N, M)
    x = x + drop(mixer_l(rms(x) * n_l))  for l = 0 .. L-1                        # (T, N, M)
    output = rms(x) * n_f,               rms(v) = v / sqrt(mean(v^2) + 1e-5)

``mixer_l`` is a :class:`hiddenstate.kinds.ssm.mamba.Mamba` block (Gu & Dao 2023, Algorithm 2) with
``d_model`` M (the character model's ``hidden_size``), ``d_state`` 16, ``d_conv`` 4, ``expand`` 2
(the defaults of the reference models) and ``dt_rank = ceil(M / 16)``. ``W_in`` (M, I) plays the
reference models' embedding for one-hot input. Dropout (training only) masks each mixer's output
before it joins the stream, one ``rng.random((T, N, M))`` per layer.

The state carried across chunks is every layer's SSM state and convolution state, stacked:
a pair ``(ssm (L, N, Di, S), conv (L, N, Di, K-1))`` with ``Di = expand * M``.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.core.validation import boolean, drop_probability, float_dtype, generator, positive_int, shape_str
from hiddenstate.kinds.ssm import mamba_kernel as kernel
from hiddenstate.kinds.ssm.mamba import Mamba

__all__ = ["D_CONV", "D_STATE", "EPS", "EXPAND", "MambaStack"]

#: SSM state entries per channel (S).
D_STATE = 16
#: Width of the causal convolution (K).
D_CONV = 4
#: Inner channels per model feature (Di = EXPAND * M).
EXPAND = 2
#: The RMS norms' epsilon (transformers' ``layer_norm_epsilon``).
EPS = 1e-5


class MambaStack:
    """L Mamba blocks on a residual stream with RMS norms, state carried as a pair (see the module).

    Parameters
    ----------
    input_size : int
        I, features of each input vector (V for one-hot characters).
    hidden_size : int
        M, the width of the residual stream (``d_model``) and of the output.
    num_layers : int, default 1
        L, blocks.
    dropout : float in [0, 1), default 0
        Dropout on each mixer's output before the residual add, in ``forward(training=True)``.
    scan : {"parallel", "sequential"}, default "sequential"
        How each block's SSM recurrence runs over time (the same states to round-off).
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
        Draws the initial weights (``W_in`` N(0, 0.02) as the reference embedding, the blocks as
        :class:`hiddenstate.kinds.ssm.mamba.Mamba`, norms 1) and, by default, the dropout masks.

    Attributes
    ----------
    params : dict of str to ndarray
        ``in_proj.weight`` (M, I), ``layers.{l}.norm.weight`` (M,), ``layers.{l}.mixer.<name>``
        (the :class:`~hiddenstate.kinds.ssm.mamba.Mamba` parameters; the same arrays as the blocks'),
        ``norm_f.weight`` (M,).
    layers : list of Mamba
    d_inner, d_state, d_conv : int
        Di, S, K.
    weight_drop : float
        Always 0 (no recurrent weight matrix to drop).

    Raises
    ------
    TypeError, ValueError
        Sizes that are not positive ints, a dropout outside [0, 1), an unknown ``scan``.
    """

    weight_drop = 0.0

    def __init__(self, input_size, hidden_size, num_layers=1, *, dropout=0.0, scan="sequential",
                 dtype=np.float64, rng=None):
        self.input_size = positive_int("input_size", input_size)
        self.hidden_size = positive_int("hidden_size", hidden_size)
        self.num_layers = positive_int("num_layers", num_layers)
        self.dropout = drop_probability("dropout", dropout)
        self.dtype = float_dtype("dtype", dtype)
        self._rng = generator(rng)
        M = self.hidden_size
        self.params = {"in_proj.weight": self._rng.normal(0.0, 0.02, size=(M, self.input_size)).astype(self.dtype)}
        self.layers = []
        for i in range(self.num_layers):
            blk = Mamba(M, d_state=D_STATE, d_conv=D_CONV, expand=EXPAND, scan=scan, dtype=self.dtype, rng=self._rng)
            self.layers.append(blk)
            self.params[f"layers.{i}.norm.weight"] = np.ones(M, dtype=self.dtype)
            for k, v in blk.params.items():
                self.params[f"layers.{i}.mixer.{k}"] = v  # the same arrays: in-place updates reach the block
        self.params["norm_f.weight"] = np.ones(M, dtype=self.dtype)
        self.d_inner, self.d_state, self.d_conv = self.layers[0].d_inner, D_STATE, D_CONV

    def __repr__(self) -> str:
        return f"MambaStack({self.input_size}, {self.hidden_size}, {self.num_layers}, {self.layers[0]!r})"

    def state_shapes(self, batch_size: int) -> tuple:
        """The shapes of the carried pair for N rows.

        Parameters
        ----------
        batch_size : int
            N.

        Returns
        -------
        tuple of two tuples
            ``(L, N, Di, S)`` and ``(L, N, Di, K-1)``.
        """
        L, Di = self.num_layers, self.d_inner
        return (L, batch_size, Di, self.d_state), (L, batch_size, Di, self.d_conv - 1)

    def initial_state(self, batch_size: int) -> tuple:
        """Zero SSM and conv states.

        Parameters
        ----------
        batch_size : int
            N.

        Returns
        -------
        tuple of ndarray
            ``(ssm (L, N, Di, S), conv (L, N, Di, K-1))``, zeros of the stack's dtype.
        """
        n = positive_int("batch_size", batch_size)
        return tuple(np.zeros(s, dtype=self.dtype) for s in self.state_shapes(n))

    def _check_state(self, state, N):
        if state is None:
            return self.initial_state(N)
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise TypeError(f"state must be a pair (ssm (L, N, Di, S), conv (L, N, Di, K-1)); got "
                            f"{type(state).__name__}.")
        out = []
        for name, part, want in zip(("ssm", "conv"), state, self.state_shapes(N)):
            a = np.asarray(part)
            if a.shape != want:
                raise ValueError(f"state.{name} must have shape {shape_str(want)}; got {shape_str(a.shape)}.")
            out.append(a.astype(self.dtype, copy=False))
        return tuple(out)

    def forward(self, x, state=None, *, training=False, rng=None, need_cache=True, record=False):
        """The blocks over a time-major input.

        Parameters
        ----------
        x : ndarray of shape (T, N, I)
        state : pair of ndarray, optional
            ``(ssm (L, N, Di, S), conv (L, N, Di, K-1))`` carried from the previous chunk (None: zeros).
        training : bool, default False
            Apply dropout.
        rng : numpy.random.Generator, optional
            Draws the dropout masks (default: the generator given at construction).
        need_cache : bool, default True
            False: the cache is None (no backward follows).
        record : bool, default False
            Also return every layer's :class:`~hiddenstate.kinds.ssm.mamba_kernel.MambaRecord`: what each
            block computed at every step of this very pass (its SSM and conv states, ``dt``, the
            decay ``exp(dt A)``, ``B``, ``C``, the gate), as :meth:`hiddenstate.kinds.ssm.mamba.Mamba.forward`
            records it.

        Returns
        -------
        output : ndarray of shape (T, N, M)
        state : pair of ndarray
            The final states, shaped as ``state``.
        cache : tuple or None
        records : list of MambaRecord
            Only with ``record=True``: one per layer, time-major (T, N, ...).

        Raises
        ------
        TypeError, ValueError
            A state that is not a pair of the shapes above; ``x`` not (T, N, I); a ``record``
            that is not a bool.
        """
        record = boolean("record", record)
        x = np.asarray(x, dtype=self.dtype)
        if x.ndim != 3 or x.shape[2] != self.input_size:
            raise ValueError(f"x must have shape (T, N, I={self.input_size}); got {shape_str(x.shape)}.")
        T, N, _ = x.shape
        ssm0, conv0 = self._check_state(state, N)
        drng = generator(rng) if rng is not None else self._rng
        drop = training and self.dropout > 0.0
        p, M = self.params, self.hidden_size
        stream = (x.reshape(T * N, -1) @ p["in_proj.weight"].T).reshape(T, N, M)
        steps, ssm, conv, records = [], [], [], []
        for i, blk in enumerate(self.layers):
            xn, inv = kernel.rms_norm(stream, p[f"layers.{i}.norm.weight"], EPS)
            y, fin, bc, *rec = blk.forward(xn, (ssm0[i], conv0[i]), record=record)
            records += rec
            mask = None
            if drop:
                mask = (drng.random((T, N, M)) >= self.dropout).astype(self.dtype) / self.dtype.type(1.0 - self.dropout)
                y = y * mask
            steps.append((stream, inv, bc, mask) if need_cache else None)
            ssm.append(fin.ssm)
            conv.append(fin.conv)
            stream = stream + y
        out, inv_f = kernel.rms_norm(stream, p["norm_f.weight"], EPS)
        cache = (x, steps, stream, inv_f) if need_cache else None
        if record:
            return out, (np.stack(ssm), np.stack(conv)), cache, records
        return out, (np.stack(ssm), np.stack(conv)), cache

    def backward(self, cache, d_output, d_state_n=None):
        """Exact gradients of a :meth:`forward` call, down to the initial states it started from.

        Parameters
        ----------
        cache : tuple
            From :meth:`forward` with ``need_cache=True``.
        d_output : ndarray of shape (T, N, M)
        d_state_n : None
            Accepted for the layers' signature; must be None (truncated BPTT cuts at the chunk's end).

        Returns
        -------
        grads : dict
            Same keys and shapes as :attr:`params`.
        dx : ndarray of shape (T, N, I)
        dh0 : pair of ndarray
            d loss / d ``state``: ``(d_ssm (L, N, Di, S), d_conv (L, N, Di, K-1))``, the gradient
            with respect to the initial states :meth:`forward` was given (or the zeros it used),
            exact BPTT through every block (what initial-state tuning trains).

        Raises
        ------
        ValueError
            No cache (``need_cache=False``), a ``d_output`` of another shape, a ``d_state_n``.
        """
        if cache is None:
            raise ValueError("cache must come from forward(need_cache=True); got None.")
        if d_state_n is not None:
            raise ValueError("d_state_n must be None for a MambaStack (no gradient through the carried state).")
        x, steps, stream, inv_f = cache
        T, N, _ = x.shape
        M, p = self.hidden_size, self.params
        d_out = np.asarray(d_output, dtype=self.dtype)
        if d_out.shape != (T, N, M):
            raise ValueError(f"d_output must have shape {shape_str((T, N, M))}; got {shape_str(d_out.shape)}.")
        grads, d_ssm, d_conv = {}, [None] * self.num_layers, [None] * self.num_layers
        d_x, grads["norm_f.weight"] = kernel.rms_norm_backward(stream, p["norm_f.weight"], inv_f, d_out)
        for i in range(self.num_layers - 1, -1, -1):
            s_in, inv, bc, mask = steps[i]
            dy = d_x if mask is None else d_x * mask
            g, d_xn, (d_ssm[i], d_conv[i]) = self.layers[i].backward(bc, dy)
            for k, v in g.items():
                grads[f"layers.{i}.mixer.{k}"] = v
            d_in, grads[f"layers.{i}.norm.weight"] = kernel.rms_norm_backward(s_in, p[f"layers.{i}.norm.weight"],
                                                                              inv, d_xn)
            d_x = d_x + d_in
        d2 = d_x.reshape(T * N, M)
        grads["in_proj.weight"] = d2.T @ x.reshape(T * N, -1)
        dx = (d2 @ p["in_proj.weight"]).reshape(T, N, -1)
        return {k: grads[k] for k in p}, dx, (np.stack(d_ssm), np.stack(d_conv))
