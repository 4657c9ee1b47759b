"""Griffin's recurrent block with its state in the open: :class:`RGLRUBlock` (RecurrentGemma's temporal block).

:class:`RGLRUBlock` is the recurrent block of Griffin and Hawk (De et al. 2024, Fig. 2):
two linear branches, a causal depthwise convolution and the RG-LRU, in the parameter names
and layouts of transformers' ``RecurrentGemmaRecurrentBlock`` (``linear_y``, ``linear_x``,
``linear_out``, ``conv_1d``, ``rg_lru.recurrent_param``, ``rg_lru.input_gate_weight``, ...),
so a state dict maps 1:1. The equations and the kernels are in :mod:`hiddenstate.kinds.rglru.kernel`.

==============  ===========================================================================
state           an :class:`~hiddenstate.kinds.rglru.kernel.RGLRUState` ``(rg (N, W), conv (N, W, K-1))``;
                both are inputs (None: zeros) and both final states are outputs
every step      ``forward(..., record=True)`` returns every step's RG-LRU state and conv window,
                the decay ``a_t`` and both gates (:class:`~hiddenstate.kinds.rglru.kernel.RGLRURecord`)
gradients       :meth:`RGLRUBlock.backward`: every parameter, the input, ``d_h0`` and ``d_conv0``,
                with the final states' gradients honoured
carry           pass the returned state to the next call: two chunks give what one long call gives
lengths, reset  right-padded batches; document starts (``position_ids == 0`` in transformers)
==============  ===========================================================================
"""

from __future__ import annotations

import math

import numpy as np

from hiddenstate.core.validation import boolean, choice, float_dtype, generator, positive_int
from hiddenstate.kinds.rglru import kernel
from hiddenstate.kinds.rglru.kernel import RGLRURecord, RGLRUState
from hiddenstate.shared.seqblock import SequenceBlock

__all__ = ["RGLRUBlock", "RGLRURecord", "RGLRUState"]


class RGLRUBlock(SequenceBlock):
    """Griffin's recurrent block (De et al. 2024): ``out, state_n = block(u, state)``.

    ``y = gelu_tanh(linear_y(u))``; ``c = conv_1d(linear_x(u))`` (causal, depthwise);
    ``h_t = a_t h_{t-1} + sqrt(1 - a_t^2) (i_t c_t)`` with ``a_t = exp(-8 r_t softplus(Lambda))``
    and the gates ``i_t``, ``r_t`` block-diagonal in the heads; ``out = linear_out(h y)`` (see
    :mod:`hiddenstate.kinds.rglru.kernel`). Equivalent to transformers' ``RecurrentGemmaRecurrentBlock``
    with the same weights (a prefill from zero states is a call with ``reset`` True at step 0).

    Parameters
    ----------
    hidden_size : int
        M, features in and out.
    lru_width : int, optional
        W, the RG-LRU's channels (None: M).
    num_heads : int, default 1
        Hh, the blocks of the gates' block-diagonal weights (transformers' ``num_attention_heads``);
        must divide W.
    conv_width : int, default 4
        K, the taps of the convolution (``conv1d_width``).
    scan : {"parallel", "sequential"}, default "parallel"
        The recurrence as a chunked Brent-Kung scan or as the per-step loop (the same states to
        round-off).
    batch_first : bool, default False
        Input and output as (N, T, M) instead of (T, N, M).
    dtype : {float64, float32}, default float64
    rng : numpy.random.Generator, optional
        Draws the initial weights as transformers' ``RecurrentGemmaPreTrainedModel`` does
        (``w_init_variance_scale = 0.01``, one layer): normal branches with variance 1/M, an
        output of variance 1/W, zero biases, gates of variance 0.01/Bw, conv taps of variance
        0.01/K, and ``recurrent_param = softplus^-1(-log(q) / 2)`` with ``q`` uniform in
        [0.9^2, 0.999^2] (Griffin's initialisation of ``Lambda``).

    Attributes
    ----------
    params : dict of str to ndarray
        ``linear_y.weight``, ``linear_x.weight`` (W, M), ``linear_y.bias``, ``linear_x.bias`` (W,),
        ``linear_out.weight`` (M, W), ``linear_out.bias`` (M,), ``conv_1d.weight`` (W, 1, K),
        ``conv_1d.bias`` (W,), ``rg_lru.recurrent_param`` (W,), ``rg_lru.input_gate_weight``,
        ``rg_lru.recurrent_gate_weight`` (Hh, Bw, Bw), ``rg_lru.input_gate_bias``,
        ``rg_lru.recurrent_gate_bias`` (Hh, Bw).

    Raises
    ------
    TypeError, ValueError
        A size that is not a positive integer, ``num_heads`` that does not divide W, a flag that
        is not a bool, an unknown ``scan``, a dtype other than float32/float64.
    """

    state_type = RGLRUState
    supports = frozenset({"lengths", "reset"})

    def __init__(self, hidden_size, lru_width=None, *, num_heads=1, conv_width=4, scan="parallel",
                 batch_first=False, dtype=np.float64, rng=None):
        self.d_model = positive_int("hidden_size", hidden_size)
        self.lru_width = self.d_model if lru_width is None else positive_int("lru_width", lru_width)
        self.num_heads = positive_int("num_heads", num_heads)
        if self.lru_width % self.num_heads:
            raise ValueError(f"num_heads must divide lru_width={self.lru_width}; got {self.num_heads}.")
        self.conv_width = positive_int("conv_width", conv_width)
        self.scan = choice("scan", scan, kernel.SCANS)
        self.batch_first = boolean("batch_first", batch_first)
        self.dtype = float_dtype("dtype", dtype)
        rng = generator(rng)
        self._check_sizes(hidden_size=self.d_model, lru_width=self.lru_width, conv_width=self.conv_width)
        M, W, Hh, K = self.d_model, self.lru_width, self.num_heads, self.conv_width
        Bw = W // Hh

        def normal(shape, var):
            return (rng.standard_normal(shape) * math.sqrt(var)).astype(self.dtype)

        a2 = rng.uniform(0.9 ** 2 + 1e-8, 0.999 ** 2 + 1e-8, size=W)
        self.params = {
            "linear_y.weight": normal((W, M), 1.0 / M), "linear_y.bias": np.zeros(W, self.dtype),
            "linear_x.weight": normal((W, M), 1.0 / M), "linear_x.bias": np.zeros(W, self.dtype),
            "linear_out.weight": normal((M, W), 1.0 / W), "linear_out.bias": np.zeros(M, self.dtype),
            "conv_1d.weight": normal((W, 1, K), 0.01 / K), "conv_1d.bias": np.zeros(W, self.dtype),
            "rg_lru.recurrent_param": np.log(np.exp(-0.5 * np.log(a2)) - 1.0).astype(self.dtype),
            "rg_lru.input_gate_weight": normal((Hh, Bw, Bw), 0.01 / Bw),
            "rg_lru.input_gate_bias": np.zeros((Hh, Bw), self.dtype),
            "rg_lru.recurrent_gate_weight": normal((Hh, Bw, Bw), 0.01 / Bw),
            "rg_lru.recurrent_gate_bias": np.zeros((Hh, Bw), self.dtype),
        }

    def __repr__(self) -> str:
        return (f"RGLRUBlock({self.d_model}, lru_width={self.lru_width}, num_heads={self.num_heads}, "
                f"conv_width={self.conv_width})")

    def shapes(self) -> dict:
        """Every parameter's shape and its legend (for :func:`hiddenstate.core.params.check_params`).

        Returns
        -------
        dict of str to (tuple of int, str)
        """
        M, W, Hh, K = self.d_model, self.lru_width, self.num_heads, self.conv_width
        Bw = W // Hh
        wm, w, hb, hbb = (((W, M), f"(W={W}, M={M})"), ((W,), f"(W={W},)"), ((Hh, Bw), f"(Hh={Hh}, Bw={Bw})"),
                          ((Hh, Bw, Bw), f"(Hh={Hh}, Bw={Bw}, Bw={Bw})"))
        return {"linear_y.weight": wm, "linear_y.bias": w, "linear_x.weight": wm, "linear_x.bias": w,
                "linear_out.weight": ((M, W), f"(M={M}, W={W})"), "linear_out.bias": ((M,), f"(M={M},)"),
                "conv_1d.weight": ((W, 1, K), f"(W={W}, 1, K={K})"), "conv_1d.bias": w,
                "rg_lru.recurrent_param": w, "rg_lru.input_gate_weight": hbb, "rg_lru.input_gate_bias": hb,
                "rg_lru.recurrent_gate_weight": hbb, "rg_lru.recurrent_gate_bias": hb}

    def _state_shapes(self, N):
        W, K = self.lru_width, self.conv_width
        return [((N, W), f"(N={N}, W={W})"), ((N, W, K - 1), f"(N={N}, W={W}, K-1={K - 1})")]

    def _forward(self, p, x, s, lengths, reset):
        return kernel.block_forward(p, x, s[0], s[1], lengths=lengths, reset=reset, scan=self.scan)

    def _backward(self, kc, d_out, d_final):
        return kernel.block_backward(kc, d_out, d_final)

    def _recorded(self, kc):
        return kernel.recorded(kc)
