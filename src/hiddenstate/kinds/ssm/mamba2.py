"""Mamba-2 as a recurrent layer with its state in the open: :class:`Mamba2`, one SSD block (a scalar decay per head).

:class:`Mamba2` is the block of Dao & Gu (2024) in the parameter names and layouts of
transformers' ``Mamba2Mixer`` (``in_proj.weight``, ``conv1d.weight``, ``conv1d.bias``,
``dt_bias``, ``A_log``, ``D``, ``norm.weight``, ``out_proj.weight``), so a state dict maps 1:1.
The equations and the kernels are in :mod:`hiddenstate.kinds.ssm.mamba2_kernel`. As :class:`hiddenstate.Mamba`:

==============  ===========================================================================
state           a :class:`~hiddenstate.state.MambaState` ``(ssm (N, H, P, S), conv (N, Dc, K-1))``;
                both are inputs (None: zeros) and both final states are outputs
every step      ``forward(..., record=True)`` returns every step's SSM and conv state, ``dt``
                and the decay ``exp(dt A)`` of every head (:class:`~hiddenstate.kinds.ssm.mamba2_kernel.Mamba2Record`)
gradients       :meth:`Mamba2.backward`: every parameter, the input, ``d_h0`` and ``d_conv0``,
                with the final states' gradients honoured
carry           pass the returned state to the next call: two chunks give what one long call gives
==============  ===========================================================================

Not (yet) here: right-padded batches (``lengths``), ``reset``, inputs of other array libraries.
:class:`hiddenstate.kinds.ssm.lm.Mamba2LM` stacks the blocks into a language model.
"""

from __future__ import annotations

import math

import numpy as np

from hiddenstate.core.validation import boolean, choice, float_dtype, generator, positive_int, real
from hiddenstate.kinds.ssm import mamba2_kernel as kernel
from hiddenstate.kinds.ssm.block import SelectiveSSMBlock, dt_bias_init, linear_init
from hiddenstate.kinds.ssm.mamba2_kernel import Mamba2Record
from hiddenstate.shared.seqblock import BlockCache
from hiddenstate.state import MambaState

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


#: The cache of :meth:`Mamba2.forward` (a :class:`~hiddenstate.shared.seqblock.BlockCache`; the name of 0.x).
Mamba2Cache = BlockCache


class Mamba2(SelectiveSSMBlock):
    """One Mamba-2 block (Dao & Gu 2024, SSD): ``out, state_n = block(u, state)``.

    ``z, xBC, dt = in_proj(u)``; ``x, B, C = silu(conv1d(xBC))``; ``dt = softplus(dt + dt_bias)``;
    ``h_t = exp(dt_t A_h) h_{t-1} + dt_t x_t B_t^T`` on a state (N, H, P, S) with one decay rate
    ``A_h = -exp(A_log[h])`` per head; ``y_t = h_t C_t + D x_t``;
    ``out_t = out_proj(rms_norm_G(y_t silu(z_t)))`` (see :mod:`hiddenstate.kinds.ssm.mamba2_kernel`).
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
        chunked matrix form (:mod:`hiddenstate.shared.ssd`; ``record=True`` then runs the scan
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

    kernel = kernel

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
            return linear_init(rng, out_f, in_f, self.dtype)

        dt_bias = dt_bias_init(rng, H)
        p = {"in_proj.weight": linear(Di + Dc + H, M)}
        if self.bias:
            p["in_proj.bias"] = np.zeros(Di + Dc + H, dtype=self.dtype)
        p["conv1d.weight"] = rng.uniform(-1 / math.sqrt(K), 1 / math.sqrt(K), size=(Dc, 1, K)).astype(self.dtype)
        if self.conv_bias:
            p["conv1d.bias"] = np.zeros(Dc, dtype=self.dtype)
        p["dt_bias"] = dt_bias.astype(self.dtype)
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
        """Every parameter's shape and its legend (for :func:`hiddenstate.core.params.check_params`).

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

    def _state_shapes(self, N):
        H, P, S, Dc, K = self.num_heads, self.head_dim, self.d_state, self.conv_dim, self.d_conv
        return [((N, H, P, S), f"(N={N}, H={H}, P={P}, S={S})"), ((N, Dc, K - 1), f"(N={N}, Dc={Dc}, K-1={K - 1})")]

    def _forward(self, p, x, s, lengths, reset):
        return kernel.scan_forward(p, x, s[0], s[1], eps=self.eps, n_groups=self.n_groups, scan=self.scan,
                                   dt_limit=self.time_step_limit, norm_before_gate=self.norm_before_gate,
                                   mup=self.mup_vector, in_multiplier=self.ssm_in_multiplier)
