"""Mamba-2 as a recurrent layer with its state in the open: :class:`Mamba2`, one SSD block (a scalar decay per head).

:class:`Mamba2` is the block of Dao & Gu (2024) in the parameter names and layouts of
transformers' ``Mamba2Mixer`` (``in_proj.weight``, ``conv1d.weight``, ``conv1d.bias``,
``dt_bias``, ``A_log``, ``D``, ``norm.weight``, ``out_proj.weight``), so a state dict maps 1:1.
The equations and the kernels are in :mod:`hiddenstate.cells.mamba2`. As :class:`hiddenstate.Mamba`:

==============  ===========================================================================
state           a :class:`~hiddenstate.cells.mamba.MambaState` ``(ssm (N, H, P, S), conv (N, Dc, K-1))``;
                both are inputs (None: zeros) and both final states are outputs
every step      ``forward(..., record=True)`` returns every step's SSM and conv state, ``dt``
                and the decay ``exp(dt A)`` of every head (:class:`~hiddenstate.cells.mamba2.Mamba2Record`)
gradients       :meth:`Mamba2.backward`: every parameter, the input, ``d_h0`` and ``d_conv0``,
                with the final states' gradients honoured
carry           pass the returned state to the next call: two chunks give what one long call gives
==============  ===========================================================================

Not (yet) here: right-padded batches (``lengths``), ``reset``, inputs of other array libraries.
:class:`hiddenstate.mamba_lm.Mamba2LM` stacks the blocks into a language model.
"""

from __future__ import annotations

import math

import numpy as np

from hiddenstate.cells import mamba2 as kernel
from hiddenstate.cells.mamba import MambaState
from hiddenstate.cells.mamba2 import Mamba2Record
from hiddenstate.functional import FloatGuard
from hiddenstate.params import check_params, load_into
from hiddenstate.validation import boolean, choice, float_array, float_dtype, generator, positive_int, real, shape_str
from hiddenstate.xp.arrays import is_foreign

__all__ = ["Mamba2", "Mamba2Cache", "Mamba2Record", "MambaState"]

#: The evaluation modes of the SSM recurrence (option ``scan``).
SCANS = ("parallel", "sequential", "ssd")


def _limit(value) -> tuple[float, float]:
    """``time_step_limit`` validated: a pair ``(lo, hi)`` of numbers with 0 <= lo <= hi (hi may be inf)."""
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise TypeError(f"time_step_limit must be a pair (lo, hi) of numbers; got {value!r}.") from None
    if not (0.0 <= lo <= hi and math.isfinite(lo) and not math.isnan(hi)):
        raise ValueError(f"time_step_limit must be a pair (lo, hi) with 0 <= lo <= hi (hi may be inf); got {value!r}. "
                         f"(0.0, inf) clamps nothing.")
    return lo, hi


def _multipliers(value) -> tuple[float, ...] | None:
    """``ssm_multipliers`` validated: None or 5 finite numbers (z, x, B, C, dt)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 5:
        raise ValueError(f"ssm_multipliers must be 5 numbers (for z, x, B, C and dt) or None; got {value!r}.")
    return tuple(real(f"ssm_multipliers[{i}]", v) for i, v in enumerate(value))


class Mamba2Cache:
    """What :meth:`Mamba2.backward` needs from one forward call (opaque).

    Parameters
    ----------
    kernel_cache : tuple
        The kernel's cache (:func:`hiddenstate.cells.mamba2.scan_forward`).
    batch_first : bool
        The layout of the call's input and output.
    owner : Mamba2
        The layer that made it.
    """

    __slots__ = ("batch_first", "kernel", "owner")

    def __init__(self, kernel_cache, batch_first, owner):
        self.kernel = kernel_cache
        self.batch_first = batch_first
        self.owner = owner


class Mamba2:
    """One Mamba-2 block (Dao & Gu 2024, SSD): ``out, state_n = block(u, state)``.

    ``z, xBC, dt = in_proj(u)``; ``x, B, C = silu(conv1d(xBC))``; ``dt = softplus(dt + dt_bias)``;
    ``h_t = exp(dt_t A_h) h_{t-1} + dt_t x_t B_t^T`` on a state (N, H, P, S) with one decay rate
    ``A_h = -exp(A_log[h])`` per head; ``y_t = h_t C_t + D x_t``;
    ``out_t = out_proj(rms_norm_G(y_t silu(z_t)))`` (see :mod:`hiddenstate.cells.mamba2`).
    Equivalent to transformers' ``Mamba2Mixer`` with the same weights (its ``time_step_limit``
    included). The options after ``eps`` are the hybrid families' variants of the mixer
    (``BambaMixer``, ``NemotronHMamba2Mixer``, ``Zamba2MambaMixer``, ``FalconH1Mixer``,
    ``GraniteMoeHybridMambaLayer``); each has its exact backward and leaves the plain block
    unchanged at its default.

    Parameters
    ----------
    d_model : int
        M, features in and out.
    d_state : int, default 128
        S, state entries per channel.
    d_conv : int, default 4
        K, the width of the causal convolution.
    expand : int, default 2
        Di = ``expand * d_model`` inner channels.
    head_dim : int, default 64
        P, channels per head; Di must be a multiple of it (H = Di / P heads).
    n_groups : int, default 1
        G, groups of heads that share B and C (and over which the gated norm is taken); H must
        be a multiple of it.
    bias : bool, default False
        Whether ``in_proj.bias`` and ``out_proj.bias`` exist.
    conv_bias : bool, default True
        Whether ``conv1d.bias`` exists.
    eps : float, default 1e-5
        The gated RMS norm's epsilon (transformers' ``layer_norm_epsilon``).
    d_inner : int, optional
        Di itself, when it is not ``expand * d_model`` (NemotronH's ``mamba_num_heads *
        mamba_head_dim``, Falcon-H1's ``mamba_d_ssm``); None: ``expand * d_model``.
    out_bias : bool, optional
        Whether ``out_proj.bias`` exists (Falcon-H1's ``projectors_bias``); None: as ``bias``,
        which then decides ``in_proj.bias`` alone.
    time_step_limit : pair of float, default (0.0, inf)
        ``(lo, hi)``, 0 <= lo <= hi <= inf: ``dt = clamp(softplus(r + dt_bias), lo, hi)``, with no
        gradient where the clamp cuts (transformers' ``time_step_limit``; Zamba2's
        ``(time_step_min, inf)``).
    rms_norm : bool, default True
        Whether the gated RMS norm (and ``norm.weight``) exists; False: ``out_proj(y silu(z))``
        (Falcon-H1's ``mamba_rms_norm``).
    norm_before_gate : bool, default False
        ``rms_norm_G(y) silu(z)`` instead of ``rms_norm_G(y silu(z))`` (Falcon-H1's
        ``mamba_norm_before_gate``).
    ssm_multipliers : sequence of 5 float, optional
        Falcon-H1's muP multipliers of the z, x, B, C and dt parts of ``in_proj``'s output, kept
        as the constant :attr:`mup_vector` (a buffer, not a parameter, as transformers has it);
        None: no multipliers.
    ssm_in_multiplier : float, default 1.0
        Falcon-H1's multiplier of the input before ``in_proj``.
    scan : {"parallel", "sequential", "ssd"}, default "parallel"
        The SSM recurrence as a chunked Brent-Kung scan, as the per-step loop, or in SSD's
        chunked matrix form (:mod:`hiddenstate.cells.ssd`; ``record=True`` then runs the scan
        for the per-step states); the same outputs, states and gradients to round-off.
    batch_first : bool, default False
        Input and output as (N, T, M) instead of (T, N, M).
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
        Draws the initial weights: linear layers U(-1/sqrt(fan_in), 1/sqrt(fan_in)), the
        convolution U(-1/sqrt(K), 1/sqrt(K)) with a zero bias; ``A_log = log(1..H)``, ``D = 1``,
        ``norm.weight = 1``; ``dt_bias = softplus^-1(dt)`` with ``dt`` log-uniform in [0.001, 0.1]
        (as transformers' ``Mamba2Mixer`` initialises them).

    Attributes
    ----------
    params : dict of str to ndarray
        ``in_proj.weight`` (Di + Dc + H, M), ``conv1d.weight`` (Dc, 1, K), ``conv1d.bias`` (Dc,),
        ``dt_bias`` (H,), ``A_log`` (H,), ``D`` (H,), ``norm.weight`` (Di,), ``out_proj.weight``
        (M, Di) (and the optional biases), with Dc = Di + 2 G S.
    mup_vector : ndarray of shape (Di + Dc + H,) or None
        The muP constants of ``in_proj``'s output built from ``ssm_multipliers`` (the z block
        times the first, then x, B, C, dt), in the layer's dtype.

    Raises
    ------
    TypeError, ValueError
        A size that is not a positive integer, Di not a multiple of ``head_dim``, H not a
        multiple of ``n_groups``, a flag that is not a bool, an unknown ``scan``, a dtype other
        than float32/float64, ``eps`` not positive, a ``time_step_limit`` that is not a pair
        0 <= lo <= hi, ``ssm_multipliers`` that are not 5 finite numbers.
    """

    def __init__(self, d_model, *, d_state=128, d_conv=4, expand=2, head_dim=64, n_groups=1, bias=False,
                 conv_bias=True, eps=1e-5, d_inner=None, out_bias=None, time_step_limit=(0.0, math.inf),
                 rms_norm=True, norm_before_gate=False, ssm_multipliers=None, ssm_in_multiplier=1.0,
                 scan="parallel", batch_first=False, dtype=np.float64, rng=None):
        self.d_model = positive_int("d_model", d_model)
        self.d_state = positive_int("d_state", d_state)
        self.d_conv = positive_int("d_conv", d_conv)
        self.expand = positive_int("expand", expand)
        self._d_inner = self.expand * self.d_model if d_inner is None else positive_int("d_inner", d_inner)
        self.head_dim = positive_int("head_dim", head_dim)
        self.n_groups = positive_int("n_groups", n_groups)
        if self.d_inner % self.head_dim:
            what = "" if d_inner is not None else "expand * d_model = "
            raise ValueError(f"head_dim must divide d_inner = {what}{self.d_inner}; got {self.head_dim}. "
                             f"Choose a head_dim that divides {self.d_inner}.")
        if self.num_heads % self.n_groups:
            raise ValueError(f"n_groups must divide the number of heads H = d_inner / head_dim = {self.num_heads}; "
                             f"got {self.n_groups}.")
        self.bias = boolean("bias", bias)
        self.out_bias = self.bias if out_bias is None else boolean("out_bias", out_bias)
        self.conv_bias = boolean("conv_bias", conv_bias)
        self.eps = real("eps", eps, low=0.0, low_open=True)
        self.time_step_limit = _limit(time_step_limit)
        self.rms_norm = boolean("rms_norm", rms_norm)
        self.norm_before_gate = boolean("norm_before_gate", norm_before_gate)
        self.ssm_multipliers = _multipliers(ssm_multipliers)
        self.ssm_in_multiplier = real("ssm_in_multiplier", ssm_in_multiplier)
        self.scan = choice("scan", scan, SCANS)
        self.batch_first = boolean("batch_first", batch_first)
        self.dtype = float_dtype("dtype", dtype)
        rng = generator(rng)
        M, Di, H, K, Dc = self.d_model, self.d_inner, self.num_heads, self.d_conv, self.conv_dim

        def linear(out_f, in_f):
            k = 1.0 / math.sqrt(in_f)
            return rng.uniform(-k, k, size=(out_f, in_f)).astype(self.dtype)

        dt = np.exp(rng.uniform(size=H) * (math.log(0.1) - math.log(0.001)) + math.log(0.001)).clip(1e-4)
        p = {"in_proj.weight": linear(Di + Dc + H, M)}
        if self.bias:
            p["in_proj.bias"] = np.zeros(Di + Dc + H, dtype=self.dtype)
        p["conv1d.weight"] = rng.uniform(-1 / math.sqrt(K), 1 / math.sqrt(K), size=(Dc, 1, K)).astype(self.dtype)
        if self.conv_bias:
            p["conv1d.bias"] = np.zeros(Dc, dtype=self.dtype)
        p["dt_bias"] = (dt + np.log(-np.expm1(-dt))).astype(self.dtype)
        p["A_log"] = np.log(np.arange(1, H + 1, dtype=np.float64)).astype(self.dtype)
        p["D"] = np.ones(H, dtype=self.dtype)
        if self.rms_norm:
            p["norm.weight"] = np.ones(Di, dtype=self.dtype)
        p["out_proj.weight"] = linear(M, Di)
        if self.out_bias:
            p["out_proj.bias"] = np.zeros(M, dtype=self.dtype)
        self.params = p
        self.mup_vector = None
        if self.ssm_multipliers is not None:  # the z, x, B, C, dt blocks of in_proj's output
            GS = self.n_groups * self.d_state
            self.mup_vector = np.repeat(np.array(self.ssm_multipliers, dtype=self.dtype), (Di, Di, GS, GS, H))

    @property
    def d_inner(self) -> int:
        """Di, the inner channels (``expand * d_model`` unless given)."""
        return self._d_inner

    @property
    def num_heads(self) -> int:
        """H = Di / P."""
        return self.d_inner // self.head_dim

    @property
    def conv_dim(self) -> int:
        """Dc = Di + 2 G S, the channels of the convolution (x, B and C)."""
        return self.d_inner + 2 * self.n_groups * self.d_state

    def __repr__(self) -> str:
        inner = f"expand={self.expand}" if self.d_inner == self.expand * self.d_model else f"d_inner={self.d_inner}"
        return (f"Mamba2({self.d_model}, d_state={self.d_state}, d_conv={self.d_conv}, {inner}, "
                f"head_dim={self.head_dim}, n_groups={self.n_groups})")

    def shapes(self) -> dict:
        """Every parameter's shape and its legend (for :func:`hiddenstate.params.check_params`).

        Returns
        -------
        dict of str to (tuple of int, str)
        """
        M, Di, H, K, Dc = self.d_model, self.d_inner, self.num_heads, self.d_conv, self.conv_dim
        W = Di + Dc + H
        out = {"in_proj.weight": ((W, M), f"(Di+Dc+H={W}, M={M})")}
        if self.bias:
            out["in_proj.bias"] = ((W,), f"(Di+Dc+H={W},)")
        out["conv1d.weight"] = ((Dc, 1, K), f"(Dc={Dc}, 1, K={K})")
        if self.conv_bias:
            out["conv1d.bias"] = ((Dc,), f"(Dc={Dc},)")
        for k in ("dt_bias", "A_log", "D"):
            out[k] = ((H,), f"(H={H},)")
        if self.rms_norm:
            out["norm.weight"] = ((Di,), f"(Di={Di},)")
        out["out_proj.weight"] = ((M, Di), f"(M={M}, Di={Di})")
        if self.out_bias:
            out["out_proj.bias"] = ((M,), f"(M={M},)")
        return out

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of the parameters by their ``Mamba2Mixer`` names.

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
        load_into(self.params, state, "Mamba2")

    def _legends(self, N):
        H, P, S, Dc, K = self.num_heads, self.head_dim, self.d_state, self.conv_dim, self.d_conv
        return (((N, H, P, S), f"(N={N}, H={H}, P={P}, S={S})"), ((N, Dc, K - 1), f"(N={N}, Dc={Dc}, K-1={K - 1})"))

    def initial_state(self, batch_size: int) -> MambaState:
        """Zero states for ``batch_size`` sequences.

        Parameters
        ----------
        batch_size : int
            N.

        Returns
        -------
        MambaState
            ``ssm`` (N, H, P, S) and ``conv`` (N, Dc, K-1), zeros of the layer's dtype.
        """
        N = positive_int("batch_size", batch_size)
        return MambaState(*(np.zeros(w, dtype=self.dtype) for w, _ in self._legends(N)))

    def _part(self, name, value, N, which):
        """One validated state array (a private copy): ``which`` 0 is the SSM state, 1 the conv state."""
        want, legend = self._legends(N)[which]
        a = float_array(name, value, dtype=self.dtype)
        if a.shape != want:
            raise ValueError(f"{name} must have shape {legend}; got {shape_str(a.shape)}. A state is never broadcast "
                             f"over the batch.")
        return np.array(a, copy=True)

    def forward(self, u, state=None, *, record=False):
        """Run the block over a sequence and keep what :meth:`backward` needs.

        Parameters
        ----------
        u : ndarray of shape (T, N, M), or (N, T, M) with ``batch_first``
            The input; cast to the layer's dtype.
        state : MambaState or pair (ssm (N, H, P, S), conv (N, Dc, K-1)), optional
            The initial states; None: zeros. Pass the previous call's ``state_n`` to carry it.
        record : bool, default False
            Also return every step's states and selective parameters.

        Returns
        -------
        out : ndarray shaped like ``u``
        state_n : MambaState
            The final SSM state (N, H, P, S) and conv state (N, Dc, K-1).
        cache : Mamba2Cache
            Pass it to :meth:`backward`.
        record : Mamba2Record
            Only with ``record=True``: time-major arrays (T, N, ...), whatever ``batch_first``.

        Raises
        ------
        ValueError
            ``u`` not of shape (T, N, M), a state of another shape, NaN/Inf.
        TypeError
            Non-float input, an array of another library, a state that is not a pair, a non-bool
            ``record``.
        """
        record = boolean("record", record)
        if is_foreign(u):
            raise TypeError(f"u must be a NumPy array for Mamba2 (only Mamba has the array-API path); got "
                            f"{type(u).__name__}. Convert it with .numpy() (on the CPU) first.")
        x = float_array("u", u, dtype=self.dtype)
        legend = "(N, T, M)" if self.batch_first else "(T, N, M)"
        if x.ndim != 3 or x.shape[2] != self.d_model:
            raise ValueError(f"u must have shape {legend} with M={self.d_model}; got {shape_str(x.shape)}.")
        x = np.array(x.transpose(1, 0, 2) if self.batch_first else x, copy=True)  # (T, N, M), the cache's own
        N = x.shape[1]
        if state is None:
            s = MambaState(*(np.zeros(w, dtype=self.dtype) for w, _ in self._legends(N)))
        elif isinstance(state, tuple) and len(state) == 2:
            s = MambaState(self._part("state.ssm", state[0], N, 0), self._part("state.conv", state[1], N, 1))
        else:
            raise TypeError(f"state must be a pair (ssm, conv) (a MambaState); got {type(state).__name__}.")
        check_params(self.params, self.shapes(), self.dtype, "Mamba2")
        p = {k: v.copy() for k, v in self.params.items()}
        with FloatGuard() as guard:
            out, final, kc = kernel.scan_forward(p, x, s.ssm, s.conv, eps=self.eps, n_groups=self.n_groups,
                                                 scan=self.scan, dt_limit=self.time_step_limit,
                                                 norm_before_gate=self.norm_before_gate, mup=self.mup_vector,
                                                 in_multiplier=self.ssm_in_multiplier)
        guard.check("the forward pass", (("out", out), ("ssm", final.ssm)), "Scale the input or the weights down.")
        cache = Mamba2Cache(kc, self.batch_first, self)
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

    def backward(self, cache: Mamba2Cache, d_out, d_state_n=None):
        """Exact BPTT through one :meth:`forward` call.

        Parameters
        ----------
        cache : Mamba2Cache
            From this layer's :meth:`forward`.
        d_out : ndarray shaped like that call's output, or None
            Gradient of the loss with respect to the output (None: zeros).
        d_state_n : pair (d_ssm (N, H, P, S), d_conv (N, Dc, K-1)), optional
            Gradient with respect to the final states (either part None).

        Returns
        -------
        grads : dict of str to ndarray
            Same keys and shapes as :attr:`params`.
        d_u : ndarray shaped like the input
        d_state : MambaState
            ``d_h0`` (N, H, P, S) and ``d_conv0`` (N, Dc, K-1).

        Raises
        ------
        TypeError
            A cache from something else, a ``d_state_n`` that is not a pair.
        ValueError
            A cache of another layer, gradients of the wrong shape or with NaN/Inf.
        """
        if not isinstance(cache, Mamba2Cache):
            raise TypeError(f"cache must be what Mamba2.forward returned; got {type(cache).__name__}.")
        if cache.owner is not self:
            raise ValueError("cache must come from this layer's forward; got the cache of another Mamba2 layer.")
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
