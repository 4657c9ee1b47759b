"""Mamba as a recurrent layer with its state in the open: :class:`Mamba`, one selective state space block.

:class:`Mamba` is the selective state space block of Gu & Dao (2023, Algorithm 2) in the
parameter names and layouts of transformers' ``MambaMixer`` (``in_proj.weight``,
``conv1d.weight``, ``conv1d.bias``, ``x_proj.weight``, ``dt_proj.weight``, ``dt_proj.bias``,
``A_log``, ``D``, ``out_proj.weight``), so a state dict maps 1:1. The equations and the kernels
are in :mod:`hiddenstate.cells.mamba`. What this layer adds over the reference kernels:

==============  ===========================================================================
state           a :class:`~hiddenstate.cells.mamba.MambaState` ``(ssm (N, Di, S), conv (N, Di, K-1))``;
                both are inputs (None: zeros) and both final states are outputs
every step      ``forward(..., record=True)`` returns every step's SSM and conv state, ``dt``
                and the decay ``exp(dt A)`` (:class:`~hiddenstate.cells.mamba.MambaRecord`)
gradients       :meth:`Mamba.backward`: every parameter, the input, ``d_h0`` and ``d_conv0``,
                with the final states' gradients honoured
carry           pass the returned state to the next call: two chunks give what one long call gives
array API       a torch tensor or CuPy array runs forward and backward in its own library
                (:mod:`hiddenstate.xp.mamba`), lengths, resets and both initial states included
variants        ``bcdt_norm``: the RMS norms of dt, B, C of ``FalconMambaMixer`` (weightless) and
                ``JambaMambaMixer`` (weighted); ``num_heads``: ``ZambaMambaMixer``'s heads
==============  ===========================================================================

:class:`hiddenstate.mamba_lm.MambaLM` stacks the blocks into a language model.
"""

from __future__ import annotations

import math

import numpy as np

from hiddenstate.cells import mamba as kernel
from hiddenstate.cells.mamba import MambaRecord, MambaState
from hiddenstate.functional import FloatGuard
from hiddenstate.params import check_params, load_into
from hiddenstate.validation import (
    bool_mask,
    boolean,
    choice,
    float_array,
    float_dtype,
    generator,
    positive_int,
    real,
    shape_str,
)
from hiddenstate.validation import lengths as valid_lengths
from hiddenstate.xp import mamba as xp_mamba
from hiddenstate.xp.arrays import is_foreign

__all__ = ["BCDT_NORMS", "Mamba", "MambaCache", "MambaRecord", "MambaState"]

#: The options ``bcdt_norm`` of :class:`Mamba` (besides None): weightless RMS norms of dt, B, C
#: (``FalconMambaMixer``) or RMS norms with weights (``JambaMambaMixer``).
BCDT_NORMS = ("rms", "rms_weight")


def _linear(rng, out_f, in_f, dtype):
    k = 1.0 / math.sqrt(in_f)
    return rng.uniform(-k, k, size=(out_f, in_f)).astype(dtype)


class MambaCache:
    """What :meth:`Mamba.backward` needs from one forward call (opaque).

    Parameters
    ----------
    kernel_cache : tuple
        The kernel's cache (:func:`hiddenstate.cells.mamba.scan_forward`).
    batch_first : bool
        The layout of the call's input and output.
    owner : Mamba
        The layer that made it.
    """

    __slots__ = ("batch_first", "kernel", "owner")

    def __init__(self, kernel_cache, batch_first, owner):
        self.kernel = kernel_cache
        self.batch_first = batch_first
        self.owner = owner


class Mamba:
    """One Mamba block (Gu & Dao 2023, Algorithm 2): ``out, state_n = block(u, state)``.

    ``x, z = in_proj(u)``; ``a = silu(conv1d(x))``; ``dt, B, C = x_proj(a)`` with
    ``dt = softplus(dt_proj(dt))``; ``h_t = exp(dt_t A) h_{t-1} + dt_t B_t a_t`` on a state
    (N, Di, S); ``y_t = C_t h_t + D a_t``; ``out_t = out_proj(y_t silu(z_t))`` (see
    :mod:`hiddenstate.cells.mamba`). Equivalent to transformers' ``MambaMixer`` with the same
    weights; with ``bcdt_norm="rms"`` to ``FalconMambaMixer``, with ``bcdt_norm="rms_weight"``
    to ``JambaMambaMixer``, with ``num_heads`` to ``ZambaMambaMixer``.

    Parameters
    ----------
    d_model : int
        M, features in and out.
    d_state : int, default 16
        S, state entries per channel.
    d_conv : int, default 4
        K, the width of the causal convolution.
    expand : int, default 2
        Di = ``expand * d_model`` inner channels.
    dt_rank : int or "auto", default "auto"
        R, the rank of the step-size projection; ``"auto"`` is ``ceil(d_model / 16)``.
    bias : bool, default False
        Whether ``in_proj.bias`` (2 Di,) and ``out_proj.bias`` (M,) exist.
    conv_bias : bool, default True
        Whether ``conv1d.bias`` (Di,) exists.
    scan : {"parallel", "sequential"}, default "parallel"
        The SSM recurrence as a chunked Brent-Kung scan or as the per-step loop (the same states
        to round-off).
    batch_first : bool, default False
        Input and output as (N, T, M) instead of (T, N, M).
    bcdt_norm : {None, "rms", "rms_weight"}, default None
        RMS norms of ``r`` (dt's low-rank part, before ``dt_proj``), ``B`` and ``C``, each over
        its last axis, right after ``x_proj``: ``"rms"`` weightless (``FalconMambaMixer``),
        ``"rms_weight"`` times ``dt_layernorm.weight`` (R,), ``b_layernorm.weight`` (S,),
        ``c_layernorm.weight`` (S,) (``JambaMambaMixer``; initialised to 1).
    norm_eps : float, default 1e-6
        Their epsilon (``mixer_rms_eps`` of FalconMamba, ``rms_norm_eps`` of Jamba); unused
        without ``bcdt_norm``.
    num_heads : int, optional
        None: ``MambaMixer``'s single head. H: ``ZambaMambaMixer``'s H heads (``n_mamba_heads``)
        of Dh = Di / H consecutive channels, each with its own selective projections:
        ``x_proj_weight`` (H, R + 2S, Dh), ``dt_proj_weight`` (H, Dh, R), ``dt_proj_bias``
        (H, Dh), ``A_log`` (H, Dh, S), ``D`` (H, Dh), and x and z interleaved in
        ``in_proj.weight``'s rows (row 2i is channel i of x, row 2i+1 of z). The states keep
        the shapes (N, Di, S) and (N, Di, K-1) (head h is channels h Dh .. (h+1) Dh - 1).
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
        Draws the initial weights as transformers' ``MambaMixer`` does: linear layers
        U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (per head for ``x_proj_weight``); ``A_log = log(1..S)``,
        ``D = 1``; ``dt_proj.bias = softplus^-1(dt)`` with ``dt`` log-uniform in [0.001, 0.1].

    Attributes
    ----------
    params : dict of str to ndarray
        ``in_proj.weight`` (2 Di, M), ``conv1d.weight`` (Di, 1, K), ``conv1d.bias`` (Di,),
        ``x_proj.weight`` (R + 2 S, Di), ``dt_proj.weight`` (Di, R), ``dt_proj.bias`` (Di,),
        ``A_log`` (Di, S), ``D`` (Di,), ``out_proj.weight`` (M, Di) (and the optional biases;
        the norms' weights with ``"rms_weight"``; the per-head layout with ``num_heads``).
    d_inner : int
        Di.

    Raises
    ------
    TypeError, ValueError
        A size that is not a positive integer, a flag that is not a bool, an unknown ``scan`` or
        ``bcdt_norm``, ``norm_eps`` not positive, ``num_heads`` not dividing Di, a dtype other than
        float32/float64.
    """

    def __init__(self, d_model, *, d_state=16, d_conv=4, expand=2, dt_rank="auto", bias=False, conv_bias=True,
                 scan="parallel", batch_first=False, bcdt_norm=None, norm_eps=1e-6, num_heads=None,
                 dtype=np.float64, rng=None):
        self.d_model = positive_int("d_model", d_model)
        self.d_state = positive_int("d_state", d_state)
        self.d_conv = positive_int("d_conv", d_conv)
        self.expand = positive_int("expand", expand)
        self.dt_rank = math.ceil(self.d_model / 16) if isinstance(dt_rank, str) and dt_rank == "auto" else \
            positive_int("dt_rank", dt_rank)
        self.bias = boolean("bias", bias)
        self.conv_bias = boolean("conv_bias", conv_bias)
        self.scan = choice("scan", scan, kernel.SCANS)
        self.batch_first = boolean("batch_first", batch_first)
        self.bcdt_norm = None if bcdt_norm is None else choice("bcdt_norm", bcdt_norm, BCDT_NORMS)
        self.norm_eps = real("norm_eps", norm_eps, low=0.0, low_open=True)
        self.num_heads = None if num_heads is None else positive_int("num_heads", num_heads)
        if self.num_heads is not None and self.d_inner % self.num_heads:
            raise ValueError(f"num_heads must divide d_inner = expand * d_model = {self.d_inner}; got {self.num_heads}.")
        self.dtype = float_dtype("dtype", dtype)
        rng = generator(rng)
        M, Di, S, K, R = self.d_model, self.d_inner, self.d_state, self.d_conv, self.dt_rank
        dt = np.exp(rng.uniform(size=Di) * (math.log(0.1) - math.log(0.001)) + math.log(0.001)).clip(1e-4)
        p = {"in_proj.weight": _linear(rng, 2 * Di, M, self.dtype)}
        if self.bias:
            p["in_proj.bias"] = np.zeros(2 * Di, dtype=self.dtype)
        p["conv1d.weight"] = rng.uniform(-1 / math.sqrt(K), 1 / math.sqrt(K), size=(Di, 1, K)).astype(self.dtype)
        if self.conv_bias:
            p["conv1d.bias"] = rng.uniform(-1 / math.sqrt(K), 1 / math.sqrt(K), size=Di).astype(self.dtype)
        if self.num_heads is None:
            p["x_proj.weight"] = _linear(rng, R + 2 * S, Di, self.dtype)
            p["dt_proj.weight"] = rng.uniform(-R ** -0.5, R ** -0.5, size=(Di, R)).astype(self.dtype)
            p["dt_proj.bias"] = (dt + np.log(-np.expm1(-dt))).astype(self.dtype)
        else:
            H, Dh = self.num_heads, Di // self.num_heads
            p["x_proj_weight"] = np.stack([_linear(rng, R + 2 * S, Dh, self.dtype) for _ in range(H)])
            p["dt_proj_weight"] = rng.uniform(-R ** -0.5, R ** -0.5, size=(H, Dh, R)).astype(self.dtype)
            p["dt_proj_bias"] = (dt + np.log(-np.expm1(-dt))).reshape(H, Dh).astype(self.dtype)
        p["A_log"] = np.log(np.tile(np.arange(1, S + 1, dtype=np.float64), (Di, 1))).astype(self.dtype)
        p["D"] = np.ones(Di, dtype=self.dtype)
        if self.num_heads is not None:
            p["A_log"], p["D"] = p["A_log"].reshape(H, Dh, S), p["D"].reshape(H, Dh)
        p["out_proj.weight"] = _linear(rng, M, Di, self.dtype)
        if self.bias:
            p["out_proj.bias"] = np.zeros(M, dtype=self.dtype)
        if self.bcdt_norm == "rms_weight":
            for k, n in zip(kernel.NORMS, (R, S, S)):
                p[k] = np.ones(n, dtype=self.dtype)
        self.params = p

    @property
    def d_inner(self) -> int:
        """Di = ``expand * d_model``."""
        return self.expand * self.d_model

    def __repr__(self) -> str:
        extra = "" if self.bcdt_norm is None else f", bcdt_norm={self.bcdt_norm!r}, norm_eps={self.norm_eps:g}"
        extra += "" if self.num_heads is None else f", num_heads={self.num_heads}"
        return (f"Mamba({self.d_model}, d_state={self.d_state}, d_conv={self.d_conv}, expand={self.expand}, "
                f"dt_rank={self.dt_rank}{extra})")

    def shapes(self) -> dict:
        """Every parameter's shape and its legend (for :func:`hiddenstate.params.check_params`).

        Returns
        -------
        dict of str to (tuple of int, str)
        """
        M, Di, S, K, R = self.d_model, self.d_inner, self.d_state, self.d_conv, self.dt_rank
        out = {"in_proj.weight": ((2 * Di, M), f"(2*Di={2 * Di}, M={M})")}
        if self.bias:
            out["in_proj.bias"] = ((2 * Di,), f"(2*Di={2 * Di},)")
        out["conv1d.weight"] = ((Di, 1, K), f"(Di={Di}, 1, K={K})")
        if self.conv_bias:
            out["conv1d.bias"] = ((Di,), f"(Di={Di},)")
        if self.num_heads is None:
            out["x_proj.weight"] = ((R + 2 * S, Di), f"(R+2*S={R + 2 * S}, Di={Di})")
            out["dt_proj.weight"] = ((Di, R), f"(Di={Di}, R={R})")
            out["dt_proj.bias"] = ((Di,), f"(Di={Di},)")
            out["A_log"] = ((Di, S), f"(Di={Di}, S={S})")
            out["D"] = ((Di,), f"(Di={Di},)")
        else:
            H, Dh = self.num_heads, Di // self.num_heads
            out["x_proj_weight"] = ((H, R + 2 * S, Dh), f"(H={H}, R+2*S={R + 2 * S}, Dh={Dh})")
            out["dt_proj_weight"] = ((H, Dh, R), f"(H={H}, Dh={Dh}, R={R})")
            out["dt_proj_bias"] = ((H, Dh), f"(H={H}, Dh={Dh})")
            out["A_log"] = ((H, Dh, S), f"(H={H}, Dh={Dh}, S={S})")
            out["D"] = ((H, Dh), f"(H={H}, Dh={Dh})")
        out["out_proj.weight"] = ((M, Di), f"(M={M}, Di={Di})")
        if self.bias:
            out["out_proj.bias"] = ((M,), f"(M={M},)")
        if self.bcdt_norm == "rms_weight":
            for k, n, leg in zip(kernel.NORMS, (R, S, S), (f"(R={R},)", f"(S={S},)", f"(S={S},)")):
                out[k] = ((n,), leg)
        return out

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of the parameters by their ``MambaMixer`` names.

        Returns
        -------
        dict of str to ndarray
        """
        return {k: v.copy() for k, v in self.params.items()}

    def load_state_dict(self, state) -> None:
        """Copy ``state`` into :attr:`params` in place (every key and shape must match).

        Parameters
        ----------
        state : mapping of str to array_like

        Raises
        ------
        ValueError, TypeError
            As :func:`hiddenstate.params.load_into`.
        """
        load_into(self.params, state, "Mamba")

    def initial_state(self, batch_size: int) -> MambaState:
        """Zero states for ``batch_size`` sequences.

        Parameters
        ----------
        batch_size : int
            N.

        Returns
        -------
        MambaState
            ``ssm`` (N, Di, S) and ``conv`` (N, Di, K-1), zeros of the layer's dtype.
        """
        N = positive_int("batch_size", batch_size)
        return MambaState(np.zeros((N, self.d_inner, self.d_state), dtype=self.dtype),
                          np.zeros((N, self.d_inner, self.d_conv - 1), dtype=self.dtype))

    def _part(self, name, value, N, which):
        """One validated state array (a private copy): ``which`` 0 is the SSM state, 1 the conv state."""
        Di = self.d_inner
        want, legend = (((N, Di, self.d_state), f"(N={N}, Di={Di}, S={self.d_state})") if which == 0 else
                        ((N, Di, self.d_conv - 1), f"(N={N}, Di={Di}, K-1={self.d_conv - 1})"))
        a = float_array(name, value, dtype=self.dtype)
        if a.shape != want:
            raise ValueError(f"{name} must have shape {legend}; got {shape_str(a.shape)}. A state is never broadcast "
                             f"over the batch.")
        return np.array(a, copy=True)

    def _state(self, state, N, name="state"):
        if state is None:
            return MambaState(np.zeros((N, self.d_inner, self.d_state), dtype=self.dtype),
                              np.zeros((N, self.d_inner, self.d_conv - 1), dtype=self.dtype))
        if not (isinstance(state, tuple) and len(state) == 2):
            raise TypeError(f"{name} must be a pair (ssm, conv) (a MambaState); got {type(state).__name__}.")
        return MambaState(self._part(f"{name}.ssm", state[0], N, 0), self._part(f"{name}.conv", state[1], N, 1))

    def forward(self, u, state=None, *, lengths=None, reset=None, record=False):
        """Run the block over a sequence and keep what :meth:`backward` needs.

        Parameters
        ----------
        u : ndarray of shape (T, N, M), or (N, T, M) with ``batch_first``
            The input; cast to the layer's dtype. A torch tensor or CuPy array runs in its library.
        state : MambaState or pair (ssm (N, Di, S), conv (N, Di, K-1)), optional
            The initial states; None: zeros. Pass the previous call's ``state_n`` to carry it.
        lengths : array_like of int, shape (N,), optional
            Valid steps of each row of a right-padded batch, each in [0, T]: outputs past a row's
            length are 0 and ``state_n`` is its state at its own last valid step (a length-0 row
            keeps its initial states).
        reset : ndarray of bool, shape (T, N) ((N, T) with ``batch_first``), optional
            Where ``reset[t, n]`` is True, row n starts step t from its initial states (both the
            SSM state and the convolution's inputs) instead of its previous ones, and no gradient
            flows back across that boundary (ignored on padded steps).
        record : bool, default False
            Also return every step's states and selective parameters.

        Returns
        -------
        out : ndarray shaped like ``u``
        state_n : MambaState
            The final SSM state (N, Di, S) and conv state (N, Di, K-1).
        cache : MambaCache or MambaXPCache
            Pass it to :meth:`backward`. For an array of another library (a torch tensor, a CuPy
            array) the call is computed in that library, on its device, by
            :func:`hiddenstate.xp.mamba.forward` (outputs and states of that library, a
            :class:`~hiddenstate.xp.mamba.MambaXPCache`).
        record : MambaRecord
            Only with ``record=True``: time-major arrays (T, N, ...), whatever ``batch_first``.

        Raises
        ------
        ValueError
            ``u`` not of shape (T, N, M), a state of another shape, NaN/Inf, lengths out of range,
            ``record=True`` for an array of another library.
        TypeError
            Non-float input, a state that is not a pair, a non-bool ``record``, non-integer lengths,
            a non-bool ``reset``.
        """
        record = boolean("record", record)
        if is_foreign(u):  # a torch tensor, a CuPy array, ...: the reference step in its library
            if record:
                raise ValueError("record must be False for an input of another array library (the array-API path "
                                 "keeps no record); got True. Pass a NumPy array to record every step.")
            return xp_mamba.forward(self, u, state, lengths=lengths, reset=reset)
        x = float_array("u", u, dtype=self.dtype)
        legend = "(N, T, M)" if self.batch_first else "(T, N, M)"
        if x.ndim != 3 or x.shape[2] != self.d_model:
            raise ValueError(f"u must have shape {legend} with M={self.d_model}; got {shape_str(x.shape)}.")
        x = np.array(x.transpose(1, 0, 2) if self.batch_first else x, copy=True)  # (T, N, M), the cache's own
        s = self._state(state, x.shape[1])
        lengths = None if lengths is None else valid_lengths(lengths, x.shape[0], x.shape[1])
        if reset is not None:
            reset = bool_mask("reset", reset, (x.shape[1], x.shape[0]) if self.batch_first else x.shape[:2])
            reset = np.ascontiguousarray(reset.T if self.batch_first else reset)  # (T, N)
        check_params(self.params, self.shapes(), self.dtype, "Mamba")
        p = {k: v.copy() for k, v in self.params.items()}
        with FloatGuard() as guard:
            out, final, kc = kernel.scan_forward(p, x, s.ssm, s.conv, lengths=lengths, reset=reset, scan=self.scan,
                                                 norm_eps=None if self.bcdt_norm is None else self.norm_eps)
        guard.check("the forward pass", (("out", out), ("ssm", final.ssm)), "Scale the input or the weights down.")
        cache = MambaCache(kc, self.batch_first, self)
        out = out.transpose(1, 0, 2) if self.batch_first else out
        if record:
            return out, final, cache, kernel.recorded(kc)
        return out, final, cache

    def __call__(self, u, state=None):
        """``out, state_n = block(u, state)`` (see :meth:`forward`).

        Parameters
        ----------
        u : ndarray of shape (T, N, M), or (N, T, M) with ``batch_first``
        state : MambaState, optional

        Returns
        -------
        out : ndarray shaped like ``u``
        state_n : MambaState
        """
        out, final, _ = self.forward(u, state)
        return out, final

    def backward(self, cache: MambaCache, d_out, d_state_n=None):
        """Exact BPTT through one :meth:`forward` call.

        Parameters
        ----------
        cache : MambaCache or MambaXPCache
            From this layer's :meth:`forward` (a cache of another library's arrays is differentiated
            in that library by :func:`hiddenstate.xp.mamba.backward`: every result is an array of it).
        d_out : ndarray shaped like that call's output, or None
            Gradient of the loss with respect to the output (None: zeros).
        d_state_n : pair (d_ssm (N, Di, S), d_conv (N, Di, K-1)), optional
            Gradient with respect to the final states (either part None).

        Returns
        -------
        grads : dict of str to ndarray
            Same keys and shapes as :attr:`params`.
        d_u : ndarray shaped like the input
        d_state : MambaState
            ``d_h0`` (N, Di, S) and ``d_conv0`` (N, Di, K-1).

        Raises
        ------
        TypeError
            A cache from something else.
        ValueError
            A cache of another layer, gradients of the wrong shape or with NaN/Inf.
        """
        if isinstance(cache, xp_mamba.MambaXPCache):
            return xp_mamba.backward(self, cache, d_out, d_state_n)
        if not isinstance(cache, MambaCache):
            raise TypeError(f"cache must be what Mamba.forward returned; got {type(cache).__name__}.")
        if cache.owner is not self:
            raise ValueError("cache must come from this layer's forward; got the cache of another Mamba layer.")
        T, N, M = cache.kernel[1].shape
        if d_out is not None:
            d_out = float_array("d_out", d_out, dtype=self.dtype)
            want = (N, T, M) if cache.batch_first else (T, N, M)
            if d_out.shape != want:
                raise ValueError(f"d_out must have the output's shape {shape_str(want)}; got {shape_str(d_out.shape)}.")
            d_out = np.ascontiguousarray(d_out.transpose(1, 0, 2) if cache.batch_first else d_out)
        d_final = None
        if d_state_n is not None:
            if not (isinstance(d_state_n, tuple) and len(d_state_n) == 2):
                raise TypeError(f"d_state_n must be a pair (d_ssm, d_conv); got {type(d_state_n).__name__}.")
            d_final = tuple(None if v is None else self._part(f"d_state_n.{('ssm', 'conv')[i]}", v, N, i)
                            for i, v in enumerate(d_state_n))
        with FloatGuard():
            grads, d_u, d_state = kernel.scan_backward(cache.kernel, d_out, d_final)
        return grads, (d_u.transpose(1, 0, 2) if cache.batch_first else d_u), d_state
