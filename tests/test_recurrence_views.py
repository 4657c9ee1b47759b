"""The views of the RG-LRU, lightning attention and short convolution kinds, and ``inspect_model`` of their families.

What each view gives the analyses is held to an independent computation: the gradient against
lag to our blocks' own exact BPTT (the backward pass from the final state's gradient, run over
the last k steps from the recorded state), the time constants to the blocks' parameters (the
RG-LRU's ``exp(-8 r softplus(Lambda))``, transformers' per-layer lightning slopes), the
effective rank of lightning's matrix state to the singular values of the state transformers
keeps in its own cache.
"""

from __future__ import annotations

import numpy as np
import pytest

from hiddenstate.kinds import get_kind
from hiddenstate.kinds.lightning.block import LightningAttention, LightningState
from hiddenstate.kinds.lightning.kernel import slope_rates
from hiddenstate.kinds.rglru.block import RGLRUBlock
from hiddenstate.kinds.rglru.kernel import RGLRUState
from hiddenstate.kinds.shortconv.block import ShortConv, ShortConvState
from hiddenstate.probe.block_analysis import analyze_recurrence

T, N, MAX_LAG = 12, 2, 12


def noisy(block, seed=0, scale=0.5):
    """``block`` with its weights drawn off their structured initial values."""
    rng = np.random.default_rng(seed)
    for k, v in block.params.items():
        if k not in ("rg_lru.recurrent_param", "norm.weight"):
            v[...] = scale * rng.standard_normal(v.shape)
    return block


def u_for(block, seed=1):
    return np.random.default_rng(seed).standard_normal((T, N, block.d_model))


def bptt_diagonal(block, u, initial, probe, k, reset=None):
    """``d(sum of the final state's first part)/d(that state k steps back)``: our block's backward over the last k steps.

    For a diagonal (or shift) Jacobian this vector of ones gives its entries exactly.
    """
    out, final, cache = block.forward(u[T - k:], initial, reset=reset)
    _, _, d_state = block.backward(cache, np.zeros_like(out), probe(final))
    return d_state[0]


def norms(d):
    """The largest entry and the RMS of a diagonal Jacobian's entries, per sequence, averaged."""
    flat = np.abs(d.reshape(N, -1))
    return flat.max(axis=1).mean(), np.sqrt((flat ** 2).mean(axis=1)).mean()


def test_rglru_view_lag_curve_is_bptt_and_its_time_constants_leave_out_the_document_start():
    b = noisy(RGLRUBlock(5, 6, num_heads=2, conv_width=3, rng=np.random.default_rng(0)))
    b.params["rg_lru.recurrent_param"][...] = np.random.default_rng(2).uniform(-2.0, 1.0, 6)
    u = u_for(b)
    reset = np.zeros((T, N), dtype=bool)
    reset[0] = True
    rec = b.forward(u, reset=reset, record=True)[3]
    view = get_kind("rglru").view(rec)
    lag = view.lag_norms(MAX_LAG)

    def probe(final):
        return RGLRUState(np.ones_like(final.rg), np.zeros_like(final.conv))

    for k in range(1, T + 1):  # k = T: the whole call, from zero states, with its reset at step 0
        initial = RGLRUState(rec.rg[T - k - 1], rec.conv[T - k - 1]) if k < T else None
        d = bptt_diagonal(b, u, initial, probe, k, reset=None if k < T else reset)
        np.testing.assert_allclose((lag.spectral[k], lag.rms[k]), norms(d), rtol=1e-12)
    assert lag.spectral[T] == 0 and lag.spectral[0] == 1  # nothing passes through the reset at step 0
    an = analyze_recurrence(b, u, reset=reset, max_lag=MAX_LAG)
    lam = np.logaddexp(0, b.params["rg_lru.recurrent_param"])
    a = np.exp(-8 * rec.recurrent_gate[1:] * lam)  # steps 1 .. T-1: the gate's own decay
    np.testing.assert_allclose(an.layers[0].time_constants, 1 / (1 - a.mean(axis=(0, 1))), rtol=1e-12)
    assert an.layers[0].decay.n_steps == (T - 1) * N and an.layers[0].gate is None
    assert "output gate statistics" in an.not_measured and an.meta["kind"] == "rglru"


def test_lightning_view_lag_curve_is_bptt_time_constants_are_the_slopes_and_the_rank_is_the_states():
    H, D, L = 3, 4, 5
    b = noisy(LightningAttention(8, H, head_dim=D, slope_rate=slope_rates(H, 1, L), chunk=5,
                                 rng=np.random.default_rng(0)), scale=0.3)
    u = u_for(b)
    rec = b.forward(u, record=True)[3]
    lag = get_kind("lightning").view(rec).lag_norms(MAX_LAG)

    for k in range(1, T + 1):
        initial = LightningState(rec.kv[T - k - 1]) if k < T else None
        d = bptt_diagonal(b, u, initial, lambda final: LightningState(np.ones_like(final.kv)), k)
        np.testing.assert_allclose((lag.spectral[k], lag.rms[k]), norms(d), rtol=1e-12)
    np.testing.assert_allclose(lag.heads[5], np.exp(-5 * slope_rates(H, 1, L)), rtol=1e-12)
    an = analyze_recurrence(b, u, max_lag=MAX_LAG)
    la = an.layers[0]
    np.testing.assert_allclose(la.time_constants, 1 / (1 - np.exp(-slope_rates(H, 1, L))), rtol=1e-12)
    sv = np.linalg.svd(rec.kv, compute_uv=False)  # (T, N, H, D)
    p = sv / sv.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(la.effective_rank, np.exp(-(p * np.log(p)).sum(axis=-1)).mean(axis=1), rtol=1e-10)
    assert la.effective_rank.shape == (T, H) and la.gate is not None and la.head_flow.shape == (MAX_LAG + 1, H)


@pytest.mark.parametrize("K", [2, 4])
def test_shortconv_has_no_keep_gate_and_its_memory_is_exactly_k_minus_1_steps(K):
    b = noisy(ShortConv(5, kernel_size=K, rng=np.random.default_rng(0)))
    u = u_for(b)
    rec = b.forward(u, record=True)[3]
    view = get_kind("shortconv").view(rec)
    assert view.keep is None and view.unit_keep is None and view.out_gate is None
    lag = view.lag_norms(MAX_LAG)

    for k in range(1, T + 1):
        initial = ShortConvState(rec.conv[T - k - 1]) if k < T else None
        d = bptt_diagonal(b, u, initial, lambda final: ShortConvState(np.ones_like(final.conv)), k)
        np.testing.assert_allclose((lag.spectral[k], lag.rms[k]), norms(d), rtol=1e-12)
    np.testing.assert_array_equal(lag.spectral, np.arange(MAX_LAG + 1) < K - 1)
    an = analyze_recurrence(b, u, max_lag=MAX_LAG, text="abcabcabc ab")
    la = an.layers[0]
    assert la.decay is None and la.time_constants is None and la.gate is None
    assert "keep gate and time constants" in an.not_measured and f"exactly {K - 1} steps" in an.summary()
    assert "decay" not in an.explore["signals"] and "time constant" not in an.explore["units"]
    np.testing.assert_array_equal(an.explore["signals"]["y"], (rec.B * rec.x)[:, 0])


def test_analyze_recurrence_refuses_other_blocks():
    from hiddenstate import GRU

    with pytest.raises(TypeError, match="block must be a hiddenstate RGLRUBlock, LightningAttention or ShortConv; got GRU"):
        analyze_recurrence(GRU(2, 3), np.zeros((3, 1, 2)))
    with pytest.raises(ValueError, match="reset must be None for ShortConv"):
        analyze_recurrence(ShortConv(4), np.zeros((3, 1, 4)), reset=np.zeros((3, 1), dtype=bool))
