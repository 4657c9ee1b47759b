"""Mamba as a recurrent layer with its state in the open: :class:`Mamba`, one selective state space block.

:class:`Mamba` is the selective state space block of Gu & Dao (2023, Algorithm 2) in the
parameter names and layouts of transformers' ``MambaMixer`` (``in_proj.weight``,
``conv1d.weight``, ``conv1d.bias``, ``x_proj.weight``, ``dt_proj.weight``, ``dt_proj.bias``,
``A_log``, ``D``, ``out_proj.weight``), so a state dict maps 1:1. The equations and the kernels
are in :mod:`hiddenstate.kinds.ssm.mamba_kernel`. What this layer adds over the reference kernels:

==============  ===========================================================================
state           a :class:`~hiddenstate.state.MambaState` ``(ssm (N, Di, S), conv (N, Di, K-1))``;
                both are inputs (None: zeros) and both final states are outputs
every step      ``forward(..., record=True)`` returns every step's SSM and conv state, ``dt``
                and the decay ``exp(dt A)`` (:class:`~hiddenstate.kinds.ssm.mamba_kernel.MambaRecord`)
gradients       :meth:`Mamba.backward`: every parameter, the input, ``d_h0`` and ``d_conv0``,
                with the final states' gradients honoured
carry           pass the returned state to the next call: two chunks give what one long call gives
array API       a torch tensor or CuPy array runs forward and backward in its own library
                (:mod:`hiddenstate.kinds.ssm.reference`), lengths, resets and both initial states included
variants        ``bcdt_norm``: the RMS norms of dt, B, C of ``FalconMambaMixer`` (weightless) and
                ``JambaMambaMixer`` (weighted); ``num_heads``: ``ZambaMambaMixer``'s heads
==============  ===========================================================================

:class:`hiddenstate.kinds.ssm.lm.MambaLM` stacks the blocks into a language model.
"""

from __future__ import annotations

import math

import numpy as np

from hiddenstate.core.resources import check_memory
from hiddenstate.core.validation import boolean, choice, float_dtype, generator, positive_int, real
from hiddenstate.kinds.ssm import mamba_kernel as kernel
from hiddenstate.kinds.ssm import reference as xp_mamba
from hiddenstate.kinds.ssm.block import SelectiveSSMBlock, dt_bias_init, linear_init
from hiddenstate.kinds.ssm.mamba_kernel import MambaRecord
from hiddenstate.shared.seqblock import BlockCache
from hiddenstate.state import MambaState

__all__ = ["BCDT_NORMS", "Mamba", "MambaCache", "MambaRecord", "MambaState"]

#: The options ``bcdt_norm`` of :class:`Mamba` (besides None): weightless RMS norms of dt, B, C
#: (``FalconMambaMixer``) or RMS norms with weights (``JambaMambaMixer``).
BCDT_NORMS = ("rms", "rms_weight")


#: The cache of :meth:`Mamba.forward` (a :class:`~hiddenstate.shared.seqblock.BlockCache`; the name of 0.x).
MambaCache = BlockCache


class Mamba(SelectiveSSMBlock):
    """One Mamba block (Gu & Dao 2023, Algorithm 2): ``out, state_n = block(u, state)``.

    ``x, z = in_proj(u)``; ``a = silu(conv1d(x))``; ``dt, B, C = x_proj(a)`` with
    ``dt = softplus(dt_proj(dt))``; ``h_t = exp(dt_t A) h_{t-1} + dt_t B_t a_t`` on a state
    (N, Di, S); ``y_t = C_t h_t + D a_t``; ``out_t = out_proj(y_t silu(z_t))`` (see
    :mod:`hiddenstate.kinds.ssm.mamba_kernel`). Equivalent to transformers' ``MambaMixer`` with the same
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

    kernel = kernel
    xp_path = xp_mamba
    supports = frozenset({"lengths", "reset"})

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
        check_memory(f"Mamba(d_model={M}, d_state={S}, expand={self.expand}) parameters",
                     8.0 * (3 * Di * M + Di * (K + 2 * R + 3 * S + 4)), "Use a smaller d_model, d_state or expand.")
        dt_bias = dt_bias_init(rng, Di)
        p = {"in_proj.weight": linear_init(rng, 2 * Di, M, self.dtype)}
        if self.bias:
            p["in_proj.bias"] = np.zeros(2 * Di, dtype=self.dtype)
        p["conv1d.weight"] = rng.uniform(-1 / math.sqrt(K), 1 / math.sqrt(K), size=(Di, 1, K)).astype(self.dtype)
        if self.conv_bias:
            p["conv1d.bias"] = rng.uniform(-1 / math.sqrt(K), 1 / math.sqrt(K), size=Di).astype(self.dtype)
        if self.num_heads is None:
            p["x_proj.weight"] = linear_init(rng, R + 2 * S, Di, self.dtype)
            p["dt_proj.weight"] = rng.uniform(-R ** -0.5, R ** -0.5, size=(Di, R)).astype(self.dtype)
            p["dt_proj.bias"] = dt_bias.astype(self.dtype)
        else:
            H, Dh = self.num_heads, Di // self.num_heads
            p["x_proj_weight"] = np.stack([linear_init(rng, R + 2 * S, Dh, self.dtype) for _ in range(H)])
            p["dt_proj_weight"] = rng.uniform(-R ** -0.5, R ** -0.5, size=(H, Dh, R)).astype(self.dtype)
            p["dt_proj_bias"] = dt_bias.reshape(H, Dh).astype(self.dtype)
        p["A_log"] = np.log(np.tile(np.arange(1, S + 1, dtype=np.float64), (Di, 1))).astype(self.dtype)
        p["D"] = np.ones(Di, dtype=self.dtype)
        if self.num_heads is not None:
            p["A_log"], p["D"] = p["A_log"].reshape(H, Dh, S), p["D"].reshape(H, Dh)
        p["out_proj.weight"] = linear_init(rng, M, Di, self.dtype)
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
        """Every parameter's shape and its legend (for :func:`hiddenstate.core.params.check_params`).

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

    def _state_shapes(self, N):
        Di, S, K = self.d_inner, self.d_state, self.d_conv
        return [((N, Di, S), f"(N={N}, Di={Di}, S={S})"), ((N, Di, K - 1), f"(N={N}, Di={Di}, K-1={K - 1})")]

    def _forward(self, p, x, s, lengths, reset):
        return kernel.scan_forward(p, x, s[0], s[1], lengths=lengths, reset=reset, scan=self.scan,
                                   norm_eps=None if self.bcdt_norm is None else self.norm_eps)
