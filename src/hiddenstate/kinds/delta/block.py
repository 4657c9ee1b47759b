"""Gated DeltaNet and Kimi Delta Attention as recurrent layers with their matrix state in the open.

:class:`GatedDeltaNet` is the gated delta rule's block (Yang et al. 2024) in the parameter names
and layouts of transformers' ``Qwen3NextGatedDeltaNet`` (``layout="qwen3_next"``),
``OlmoHybridGatedDeltaNet`` (``layout="olmo_hybrid"``) or ``Qwen3_5GatedDeltaNet`` and its kin
(``layout="qwen3_5"``, the output gate SiLU or sigmoid); :class:`KimiDeltaAttention` is
``KimiLinearDeltaAttention`` (the same rule with one decay per key channel), or GLM-5-Next's and
Bailing-hybrid's variants of it (``layout=``, the safe gate ``lower_bound=``). A state dict maps
1:1 both ways. The equations are in :mod:`hiddenstate.kinds.delta.block_kernel` and
:mod:`hiddenstate.kinds.delta.kernel`.

==============  ===========================================================================
state           a :class:`~hiddenstate.kinds.delta.block_kernel.DeltaState` ``(recurrent (N, Hv, Dk, Dv),
                conv (N, Dc, K-1))``; both are inputs (None: zeros) and both final states outputs
every step      ``forward(..., record=True)`` returns every step's matrix state and conv window,
                the decay, ``beta``, q, k, v, the rule's output and the gate
                (:class:`~hiddenstate.kinds.delta.block_kernel.DeltaRecord`); its memory is checked first
gradients       :meth:`backward`: every parameter, the input, ``d_recurrent0`` and ``d_conv0``,
                with the final states' gradients honoured
carry           pass the returned state to the next call: two chunks give what one long call gives
==============  ===========================================================================

Right-padded batches (``lengths``): a padded step neither decays nor writes, so both states are
carried. Not here: ``reset`` (refused: a restart mid-chunk breaks the chunked form), inputs of
other array libraries.
"""

from __future__ import annotations

import math

import numpy as np

from hiddenstate.core.resources import check_memory
from hiddenstate.core.validation import boolean, choice, float_dtype, generator, positive_int, real
from hiddenstate.kinds.delta import block_kernel as kernel
from hiddenstate.kinds.delta.block_kernel import GATES, BlockSpec, DeltaRecord, DeltaState
from hiddenstate.kinds.delta.kernel import DELTA_CHUNK
from hiddenstate.shared.seqblock import BlockCache, SequenceBlock
from hiddenstate.xp.arrays import is_foreign

__all__ = ["DeltaCache", "DeltaRecord", "DeltaState", "GatedDeltaNet", "KimiDeltaAttention"]

DeltaCache = BlockCache  # what ``backward`` needs from one forward call (the name of 0.2, kept)


class _DeltaLayer(SequenceBlock):
    """What both layers add to :class:`~hiddenstate.shared.seqblock.SequenceBlock`: the matrix state, the memory checks.

    The spec and params come from the subclass; the base class validates the inputs and runs
    :mod:`hiddenstate.kinds.delta.block_kernel`.
    """

    spec: BlockSpec
    params: dict
    state_type = DeltaState
    supports = frozenset({"lengths"})

    def _init_common(self, d_model, d_conv, eps, chunk, batch_first, dtype):
        self.d_model = positive_int("d_model", d_model)
        self.d_conv = positive_int("d_conv", d_conv)
        self.eps = real("eps", eps, low=0.0, low_open=True)
        self.chunk = None if chunk is None else positive_int("chunk", chunk)
        self.batch_first = boolean("batch_first", batch_first)
        self.dtype = float_dtype("dtype", dtype)

    @property
    def conv_dim(self) -> int:
        """Dc = 2 Hk Dk + Hv Dv, the channels of the convolution (q, k and v)."""
        s = self.spec
        return 2 * s.Hk * s.Dk + s.Hv * s.Dv

    def _rand(self, rng, shape, fan_in):
        k = 1.0 / math.sqrt(fan_in)
        return rng.uniform(-k, k, size=shape).astype(self.dtype)

    def _state_shapes(self, N):
        s, Dc = self.spec, self.conv_dim
        return [((N, s.Hv, s.Dk, s.Dv), f"(N={N}, Hv={s.Hv}, Dk={s.Dk}, Dv={s.Dv})"),
                ((N, Dc, s.K - 1), f"(N={N}, Dc={Dc}, K-1={s.K - 1})")]

    def _state_kind(self, name):
        return "a pair (d_recurrent, d_conv)" if name == "d_state_n" else "a pair (recurrent, conv) (a DeltaState)"

    def _chunk(self, T):
        return None if self.chunk is None else min(self.chunk, max(T, 1))  # one chunk of T steps is the same

    def _check_call(self, T, N, record):
        name, sp = type(self).__name__, self.spec
        if record or self.chunk is None:
            nbytes = T * N * sp.Hv * sp.Dk * sp.Dv * self.dtype.itemsize
            what = "record=True" if record else "chunk=None (the per-step form keeps every state)"
            check_memory(f"{name}.forward with {what} over T={T}, N={N}: the states (T, N, Hv, Dk, Dv) "
                         f"({nbytes} bytes)", nbytes, "Split the sequence into calls that carry the state.")
        chunk = self._chunk(T)
        if chunk is not None and chunk > DELTA_CHUNK:  # a chunk's (Q, Q) matrices: decays, Gram, inverse, attention
            C = -(-T // chunk)
            nbytes = 4.0 * N * sp.Hv * C * chunk * chunk * self.dtype.itemsize
            check_memory(f"{name}.forward with chunk={self.chunk} over T={T}, N={N}: the chunks' (N, Hv, T/Q, Q, Q) "
                         f"matrices", nbytes, "Pass a smaller chunk (64 is the kernels' own).")

    def _forward(self, p, x, s, lengths, reset):
        return kernel.block_forward(p, x, s[0], s[1], self.spec, chunk=self._chunk(x.shape[0]), lengths=lengths)

    def _backward(self, kc, d_out, d_final):
        return kernel.block_backward(kc, d_out, d_final)

    def _recorded(self, kc):
        return kernel.block_record(kc)

    def forward(self, u, state=None, *, record=False, lengths=None, reset=None):
        """Run the block over a sequence and keep what :meth:`backward` needs.

        Parameters
        ----------
        u : ndarray of shape (T, N, M), or (N, T, M) with ``batch_first``
            The input; cast to the layer's dtype.
        state : DeltaState or pair (recurrent (N, Hv, Dk, Dv), conv (N, Dc, K-1)), optional
            The initial states; None (or a None part): zeros. Pass the previous call's ``state_n``
            to carry it.
        record : bool, default False
            Also return every step's states and gates (refused up front when the T N Hv Dk Dv
            matrix states would not fit in memory).
        lengths : array_like of int, shape (N,), optional
            Valid steps of each row of a right-padded batch, each in [0, T]: outputs past a row's
            length are 0 and ``state_n`` is its states at its own last valid step (a length-0 row
            keeps its initial states); the record carries both states over padded steps.
        reset : None
            Not supported (refused when given): a row restarting from ``S0`` mid-chunk breaks the
            chunked form. Split the sequence at the reset instead.

        Returns
        -------
        out : ndarray shaped like ``u``
        state_n : DeltaState
            The final matrix state (N, Hv, Dk, Dv) and conv window (N, Dc, K-1).
        cache : DeltaCache
            Pass it to :meth:`backward`.
        record : DeltaRecord
            Only with ``record=True``: time-major arrays (T, N, ...), whatever ``batch_first``.

        Raises
        ------
        ValueError
            ``u`` not of shape (T, N, M), a state of another shape, NaN/Inf, a record (or the
            sequential form's per-step states) that cannot fit in memory, lengths out of range,
            ``reset``.
        TypeError
            Non-float input, an array of another library, a state that is not a pair, a non-bool
            ``record``.
        """
        record = boolean("record", record)
        name = type(self).__name__
        if reset is not None:
            raise ValueError(f"reset must be None for {name} (a row restarting from its initial state mid-chunk "
                             f"breaks the chunked form); got {type(reset).__name__}. Split the sequence at the reset "
                             f"and pass the initial state to the second call.")
        if is_foreign(u):
            raise TypeError(f"u must be a NumPy array for {name}; got {type(u).__name__}. Convert it with .numpy() "
                            f"(on the CPU) first.")
        return super().forward(u, state, lengths=lengths, record=record)


def _inverse_softplus_dt(rng, n, dtype):
    """``softplus^-1(dt)`` with ``dt`` log-uniform in [0.001, 0.1] (transformers' ``dt_bias`` initialisation)."""
    dt = np.exp(rng.uniform(size=n) * (math.log(0.1) - math.log(0.001)) + math.log(0.001)).clip(1e-4)
    return (dt + np.log(-np.expm1(-dt))).astype(dtype)


class GatedDeltaNet(_DeltaLayer):
    """The gated delta rule's block (Yang et al. 2024): ``out, state_n = layer(u, state)``.

    Per value head, ``S_t = (I - beta_t k_t k_t^T) exp(g_t) S_{t-1} + beta_t k_t v_t^T`` and
    ``o_t = S_t^T q_t`` on a state (N, Hv, Dk, Dv), with one decay ``g_t = -exp(A_log)
    softplus(a_t + dt_bias)`` per head, q and k from a causal conv1d + SiLU then L2-normalised,
    and the output ``out_proj(norm(o_t) * silu(z_t))`` (see :mod:`hiddenstate.kinds.delta.block_kernel`).
    Equivalent to transformers' ``Qwen3NextGatedDeltaNet`` / ``OlmoHybridGatedDeltaNet`` with the
    same weights (``hidden_act="silu"``).

    Parameters
    ----------
    d_model : int
        M, features in and out (``hidden_size``).
    num_k_heads : int, default 2
        Hk (``linear_num_key_heads``).
    num_v_heads : int, optional
        Hv (``linear_num_value_heads``), a multiple of Hk; default Hk.
    head_k_dim : int, default 64
        Dk (``linear_key_head_dim``).
    head_v_dim : int, optional
        Dv (``linear_value_head_dim``); default Dk.
    d_conv : int, default 4
        K, the convolution's taps (``linear_conv_kernel_dim``).
    eps : float, optional
        The gated norm's epsilon; default 1e-6 (``rms_norm_eps``) for ``"qwen3_next"``, 1e-5 for
        ``"olmo_hybrid"`` (which fixes it at fla's default).
    layout : {"qwen3_next", "olmo_hybrid", "qwen3_5"}, default "qwen3_next"
        Whose parameter names and layouts: Qwen3-Next's fused ``in_proj_qkvz`` / ``in_proj_ba``,
        OLMo-hybrid's six projections, or Qwen3.5's split ``in_proj_qkv``, ``in_proj_z``,
        ``in_proj_b``, ``in_proj_a`` (also Qwen3.5-MoE's, Qwen4-Exp's and Lara-mini's).
    allow_neg_eigval : bool, default False
        ``beta = 2 sigmoid(b)`` (OLMo-hybrid's ``linear_allow_neg_eigval``).
    gate : {"silu", "sigmoid"}, default "silu"
        The output gate's activation: ``y = norm(o) * gate(z)`` (Qwen4-Exp's ``output_gate_type``
        may be ``"sigmoid"``); the backward of either is exact.
    chunk : int or None, default 64
        The rule's form: chunks of this many steps (the WY/UT form), or None for the per-step loop
        (which keeps every state); the same results to round-off.
    batch_first : bool, default False
        Input and output as (N, T, M) instead of (T, N, M).
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
        Draws the initial weights: linear layers U(-1/sqrt(fan_in), 1/sqrt(fan_in)), the
        convolution U(-1/sqrt(K), 1/sqrt(K)); ``A_log = log U(1, 16)``; ``dt_bias`` the inverse
        softplus of a log-uniform ``dt`` in [0.001, 0.1]; the norm's weight 1.

    Attributes
    ----------
    params : dict of str to ndarray
        By transformers' names (:mod:`hiddenstate.kinds.delta.block_kernel` lists them per layout).
    spec : BlockSpec

    Raises
    ------
    TypeError, ValueError
        A size that is not a positive integer, Hv not a multiple of Hk, an unknown layout or
        gate, a flag that is not a bool, a dtype other than float32/float64, ``eps`` not positive.
    """

    def __init__(self, d_model, *, num_k_heads=2, num_v_heads=None, head_k_dim=64, head_v_dim=None, d_conv=4,
                 eps=None, layout="qwen3_next", allow_neg_eigval=False, gate="silu", chunk=DELTA_CHUNK,
                 batch_first=False, dtype=np.float64, rng=None):
        layout = choice("layout", layout, ("qwen3_next", "olmo_hybrid", "qwen3_5"))
        gate = choice("gate", gate, GATES)
        self._init_common(d_model, d_conv, (1e-6 if layout == "qwen3_next" else 1e-5) if eps is None else eps,
                          chunk, batch_first, dtype)
        Hk = positive_int("num_k_heads", num_k_heads)
        Hv = Hk if num_v_heads is None else positive_int("num_v_heads", num_v_heads)
        if Hv % Hk:
            raise ValueError(f"num_v_heads must be a multiple of num_k_heads={Hk}; got {Hv}.")
        Dk = positive_int("head_k_dim", head_k_dim)
        Dv = Dk if head_v_dim is None else positive_int("head_v_dim", head_v_dim)
        self.spec = BlockSpec(layout, Hk, Hv, Dk, Dv, self.d_conv, self.eps,
                              boolean("allow_neg_eigval", allow_neg_eigval), gate)
        rng = generator(rng)
        self._check_sizes(d_model=self.d_model, num_k_heads=Hk, num_v_heads=Hv, head_k_dim=Dk, head_v_dim=Dv)
        self.params = {}
        for key, (shape, _) in self.shapes().items():
            if key in ("dt_bias", "A_log"):
                continue
            if key == "conv1d.weight":
                self.params[key] = self._rand(rng, shape, self.d_conv)
            elif key.endswith("norm.weight"):
                self.params[key] = np.ones(shape, dtype=self.dtype)
            else:
                self.params[key] = self._rand(rng, shape, shape[1])
        self.params["dt_bias"] = _inverse_softplus_dt(rng, Hv, self.dtype)
        self.params["A_log"] = np.log(rng.uniform(1.0, 16.0, size=Hv)).astype(self.dtype)

    def __repr__(self) -> str:
        s = self.spec
        return (f"GatedDeltaNet({self.d_model}, num_k_heads={s.Hk}, num_v_heads={s.Hv}, head_k_dim={s.Dk}, "
                f"head_v_dim={s.Dv}, d_conv={s.K}, layout={s.layout!r}"
                + ("" if s.gate == "silu" else f", gate={s.gate!r}") + ")")

    def shapes(self) -> dict:
        """Every parameter's shape and its legend (for :func:`hiddenstate.core.params.check_params`).

        Returns
        -------
        dict of str to (tuple of int, str)
        """
        s, M, Dc = self.spec, self.d_model, self.conv_dim
        Hk, Hv, Dk, Dv = s.Hk, s.Hv, s.Dk, s.Dv
        out = {}
        if s.layout == "qwen3_next":
            W = Hk * (2 * Dk) + 2 * Hv * Dv
            out["in_proj_qkvz.weight"] = ((W, M), f"(2 Hk Dk + 2 Hv Dv={W}, M={M})")
            out["in_proj_ba.weight"] = ((2 * Hv, M), f"(2 Hv={2 * Hv}, M={M})")
        elif s.layout == "qwen3_5":
            out["in_proj_qkv.weight"] = ((Dc, M), f"(2 Hk Dk + Hv Dv={Dc}, M={M})")
            out["in_proj_z.weight"] = ((Hv * Dv, M), f"(Hv Dv={Hv * Dv}, M={M})")
            out["in_proj_b.weight"] = out["in_proj_a.weight"] = ((Hv, M), f"(Hv={Hv}, M={M})")
        else:
            out["q_proj.weight"] = out["k_proj.weight"] = ((Hk * Dk, M), f"(Hk Dk={Hk * Dk}, M={M})")
            out["v_proj.weight"] = out["g_proj.weight"] = ((Hv * Dv, M), f"(Hv Dv={Hv * Dv}, M={M})")
            out["a_proj.weight"] = out["b_proj.weight"] = ((Hv, M), f"(Hv={Hv}, M={M})")
        out["conv1d.weight"] = ((Dc, 1, s.K), f"(Dc={Dc}, 1, K={s.K})")
        out["dt_bias"] = out["A_log"] = ((Hv,), f"(Hv={Hv},)")
        norm, proj = ("norm.weight", "out_proj.weight") if s.layout != "olmo_hybrid" else ("o_norm.weight",
                                                                                          "o_proj.weight")
        out[norm] = ((Dv,), f"(Dv={Dv},)")
        out[proj] = ((M, Hv * Dv), f"(M={M}, Hv Dv={Hv * Dv})")
        return out


class KimiDeltaAttention(_DeltaLayer):
    """Kimi Delta Attention: the gated delta rule with one decay per key channel, ``out, state_n = layer(u, state)``.

    Per head, ``S_t = (I - beta_t k_t k_t^T) diag(exp(g_t)) S_{t-1} + beta_t k_t v_t^T``,
    ``o_t = S_t^T q_t`` on a state (N, H, D, D), with ``g_t = -exp(A_log[h]) softplus(f_t +
    dt_bias)`` a vector over the key channels (``f`` a rank-D projection of the input), and the
    output ``o_proj(norm(o_t) * sigmoid(g_t'))`` (see :mod:`hiddenstate.kinds.delta.block_kernel`).
    Equivalent to transformers' ``KimiLinearDeltaAttention`` with the same weights; with
    ``layout="glm5_next"`` to ``Glm5NextTextLinearAttention`` and with ``"bailing_hybrid"`` to
    ``BailingHybridDeltaAttention`` (full-rank ``f`` and ``g'``), each with the safe gate
    ``g_t = lower_bound sigmoid(exp(A_log[h]) (f_t + dt_bias))`` when ``lower_bound`` is given
    (Kimi Linear's report, Kimi Team 2025, sec. 3; fla's ``chunk_kda(safe_gate=True)``): every
    log decay lies in ``(lower_bound, 0)``.

    Parameters
    ----------
    d_model : int
        M, features in and out (``hidden_size``).
    num_heads : int, default 2
        H (``linear_num_heads``).
    head_dim : int, default 64
        D, the key and value channels per head (``linear_head_dim``).
    d_conv : int, default 4
        K (``linear_conv_kernel_dim``).
    eps : float, default 1e-6
        The gated norm's epsilon (``rms_norm_eps``).
    layout : {"kimi", "glm5_next", "bailing_hybrid"}, default "kimi"
        Whose parameter names and shapes: ``forget_gate.A_log`` (1, 1, H, 1) (``"kimi"``) or (H,);
        the forget gate's and output gate's projections of rank D (``forget_gate.f_a_proj``,
        ``f_b_proj``, ``g_a_proj``, ``g_b_proj``) or full (``forget_gate.f_proj``, ``g_proj``,
        ``"bailing_hybrid"``).
    lower_bound : float, optional
        The safe gate's bound, a negative number (``linear_lower_bound`` of GLM-5-Next,
        ``kda_lower_bound`` of Bailing-hybrid, -5 in both); None: the softplus gate.
    chunk : int or None, default 64
        Chunks of this many steps, or None for the per-step loop.
    batch_first : bool, default False
        Input and output as (N, T, M) instead of (T, N, M).
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
        Draws the initial weights as :class:`GatedDeltaNet` does.

    Attributes
    ----------
    params : dict of str to ndarray
        By the transformers module's names (:mod:`hiddenstate.kinds.delta.block_kernel` lists them).
    spec : BlockSpec

    Raises
    ------
    TypeError, ValueError
        As :class:`GatedDeltaNet`; an unknown layout; ``lower_bound`` not a finite negative number.
    """

    def __init__(self, d_model, *, num_heads=2, head_dim=64, d_conv=4, eps=1e-6, layout="kimi", lower_bound=None,
                 chunk=DELTA_CHUNK, batch_first=False, dtype=np.float64, rng=None):
        layout = choice("layout", layout, kernel.KDA_LAYOUTS)
        if lower_bound is not None:
            lower_bound = real("lower_bound", lower_bound, high=0.0, high_open=True)
        self._init_common(d_model, d_conv, eps, chunk, batch_first, dtype)
        H = positive_int("num_heads", num_heads)
        D = positive_int("head_dim", head_dim)
        self.spec = BlockSpec(layout, H, H, D, D, self.d_conv, self.eps, False, lower_bound=lower_bound)
        rng = generator(rng)
        self._check_sizes(d_model=self.d_model, num_heads=H, head_dim=D)
        self.params = {}
        for key, (shape, _) in self.shapes().items():
            if key == "conv1d.weight":
                self.params[key] = self._rand(rng, shape, self.d_conv)
            elif key == "o_norm.weight":
                self.params[key] = np.ones(shape, dtype=self.dtype)
            elif key.endswith("proj.weight"):
                self.params[key] = self._rand(rng, shape, shape[1])
        self.params["forget_gate.dt_bias"] = _inverse_softplus_dt(rng, H * D, self.dtype)
        a_log = np.log(rng.uniform(1.0, 16.0, size=(1, 1, H, 1))).astype(self.dtype)
        self.params["forget_gate.A_log"] = a_log.reshape(self.shapes()["forget_gate.A_log"][0])

    def __repr__(self) -> str:
        s = self.spec
        extra = "" if s.layout == "kimi" else f", layout={s.layout!r}"
        extra += "" if s.lower_bound is None else f", lower_bound={s.lower_bound!r}"
        return f"KimiDeltaAttention({self.d_model}, num_heads={s.Hv}, head_dim={s.Dk}, d_conv={s.K}{extra})"

    def shapes(self) -> dict:
        """Every parameter's shape and its legend (for :func:`hiddenstate.core.params.check_params`).

        Returns
        -------
        dict of str to (tuple of int, str)
        """
        s, M = self.spec, self.d_model
        H, D = s.Hv, s.Dk
        hd, rank, up = ((H * D, M), f"(H D={H * D}, M={M})"), ((D, M), f"(D={D}, M={M})"), \
            ((H * D, D), f"(H D={H * D}, D={D})")
        out = {"q_proj.weight": hd, "k_proj.weight": hd, "v_proj.weight": hd,
               "conv1d.weight": ((3 * H * D, 1, s.K), f"(3 H D={3 * H * D}, 1, K={s.K})")}
        if s.layout == "bailing_hybrid":
            out["forget_gate.f_proj.weight"] = hd
        else:
            out["forget_gate.f_a_proj.weight"], out["forget_gate.f_b_proj.weight"] = rank, up
        out["forget_gate.dt_bias"] = ((H * D,), f"(H D={H * D},)")
        out["forget_gate.A_log"] = ((1, 1, H, 1), f"(1, 1, H={H}, 1)") if s.layout == "kimi" else ((H,), f"(H={H},)")
        out["b_proj.weight"] = ((H, M), f"(H={H}, M={M})")
        if s.layout == "bailing_hybrid":
            out["g_proj.weight"] = hd
        else:
            out["g_a_proj.weight"], out["g_b_proj.weight"] = rank, up
        out["o_norm.weight"] = ((D,), f"(D={D},)")
        out["o_proj.weight"] = ((M, H * D), f"(M={M}, H D={H * D})")
        return out
