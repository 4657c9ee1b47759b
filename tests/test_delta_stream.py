"""The delta-rule kinds' streamed run (``Kind.stream``): the block's own outputs and recorded states, block by block.

What :func:`hiddenstate.kinds.delta.stream.stream` hands a sink is held to what the block's
``forward(u, record=True)`` records (``kind.states(record)``: the matrix state (T, N, Hv, Dk, Dv)
and the convolution's window (T, N, Dc, K-1)), and its output to ``forward``'s, for every
layout our delta-rule blocks have and for the blocks every registered family of the two kinds
converts (from its tiny random transformers model). The stream forms the states in segments and
L-step scratches; small ``SEGMENT_BYTES`` and ``SCRATCH_BYTES`` force many segments and one-step
scratches, so chunk and segment borders are crossed.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from hiddenstate.kinds import get_kind
from hiddenstate.kinds.delta import stream as delta_stream
from hiddenstate.kinds.delta.block import GatedDeltaNet, KimiDeltaAttention
from hiddenstate.kinds.stream import StateSink, pick

M = 12


def gdn(layout, gate="silu", neg=False, seed=0, **sizes):
    """A tiny GatedDeltaNet whose state remembers (decays mostly 0.5 to 1; A_log, dt_bias redrawn)."""
    rng = np.random.default_rng(seed)
    sizes = {"num_k_heads": 2, "num_v_heads": 4, "head_k_dim": 8, "head_v_dim": 6, "d_conv": 4, **sizes}
    blk = GatedDeltaNet(sizes.pop("d_model", M), layout=layout, gate=gate, allow_neg_eigval=neg, batch_first=True,
                        rng=rng, **sizes)
    return _remember(blk, rng)


def kda(layout, lower_bound=None, seed=0):
    rng = np.random.default_rng(seed)
    return _remember(KimiDeltaAttention(M, num_heads=2, head_dim=8, layout=layout, lower_bound=lower_bound,
                                        batch_first=True, rng=rng), rng)


def _remember(blk, rng):
    for name, w in blk.params.items():
        if name.endswith("A_log"):
            blk.params[name] = np.log(rng.uniform(0.02, 0.3, w.shape))
        elif name.endswith("dt_bias"):
            blk.params[name] = 0.5 * rng.standard_normal(w.shape)
    return blk


BLOCKS = {
    "qwen3_next": lambda: gdn("qwen3_next"),
    "olmo_hybrid": lambda: gdn("olmo_hybrid", neg=True),
    "qwen3_5": lambda: gdn("qwen3_5"),
    "qwen3_5_sigmoid_gate": lambda: gdn("qwen3_5", gate="sigmoid"),
    "qwen3_next_conv1": lambda: gdn("qwen3_next", d_conv=1, num_k_heads=1, num_v_heads=1),
    "kimi": lambda: kda("kimi"),
    "glm5_next_safe_gate": lambda: kda("glm5_next", lower_bound=-5.0),
    "bailing_hybrid_safe_gate": lambda: kda("bailing_hybrid", lower_bound=-5.0),
}
SMALL = {"default": None, "segments of one chunk, one-step scratch": (1, 1), "one chunk, 8-step scratch": (1, 8)}


def kind_of(blk):
    return get_kind("kda" if isinstance(blk, KimiDeltaAttention) else "gated_delta")


def recorded(blk, u):
    """``forward``'s output and ``kind.states(record)``, float64."""
    out, _, _, rec = blk.forward(u, record=True)
    return out, kind_of(blk).states(rec)


def run(blk, u, sink=None, *, monkeypatch=None, small=None):
    if small is not None:
        seg, steps = small
        s = blk.spec
        monkeypatch.setattr(delta_stream, "SEGMENT_BYTES", seg)
        monkeypatch.setattr(delta_stream, "SCRATCH_BYTES", steps * u.shape[0] * s.Hv * s.Dk * s.Dv * u.dtype.itemsize)
    return kind_of(blk).streamer()(blk, u, sink)


def rel(a, b):
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-300)


def test_both_kinds_name_the_stream():
    for name in ("gated_delta", "kda"):
        assert get_kind(name).streamer() is delta_stream.stream


@pytest.mark.parametrize("small", list(SMALL))
@pytest.mark.parametrize("T", [1, 63, 64, 150])
@pytest.mark.parametrize("name", list(BLOCKS))
def test_every_step_s_states_and_the_output_are_the_records_in_float64(name, T, small, monkeypatch):
    blk = BLOCKS[name]()
    u = np.random.default_rng(T).standard_normal((3, T, M))
    out, states = recorded(blk, u)
    sink = StateSink(T, 3, slice(None), np.float64)
    got = run(blk, u, sink, monkeypatch=monkeypatch, small=SMALL[small])
    assert got.dtype == np.float64 and got.shape == out.shape
    assert rel(got, out) < 1e-10
    assert list(sink.arrays) == list(states) == ["recurrent", "conv"]
    for key, want in states.items():
        assert sink.arrays[key].shape == want.shape
        assert want.size == 0 or rel(sink.arrays[key], want) < 1e-10, key
    assert np.abs(states["recurrent"][-1]).max() > 1e-3  # the state holds something to compare


@pytest.mark.parametrize("name", list(BLOCKS))
def test_float32_computes_in_float32_to_its_round_off(name, monkeypatch):
    blk = BLOCKS[name]()
    T = 150
    u = np.random.default_rng(5).standard_normal((2, T, M))
    out, states = recorded(blk, u)
    sink = StateSink(T, 2, slice(None), np.float32)
    got = run(blk, u.astype(np.float32), sink, monkeypatch=monkeypatch, small=(1, 16))
    assert got.dtype == np.float32
    assert rel(got, out) < 2e-5
    for key, want in states.items():
        if want.size:
            assert rel(sink.arrays[key], want) < 2e-5, key
    # computed in float32: not the float64 run rounded
    assert rel(got, out.astype(np.float32)) > 1e-8


@pytest.mark.parametrize("small", list(SMALL))
@pytest.mark.parametrize("name", ["qwen3_next", "olmo_hybrid", "kimi"])
def test_a_window_a_stride_and_heads_keep_the_slices_of_the_full_states(name, small, monkeypatch):
    blk = BLOCKS[name]()
    T, N = 150, 2
    u = np.random.default_rng(7).standard_normal((N, T, M))
    _, states = recorded(blk, u)
    Hv, Dc = blk.spec.Hv, blk.conv_dim
    kept_heads = [[Hv - 1, 0], [1], [Hv - 2, Hv - 1], list(range(Hv))]  # scattered, one, a range, all
    for i, keep in enumerate((slice(70, 140, 9), slice(149, 150), slice(0, 1), slice(None, None, 64), slice(3, 40))):
        heads = {"recurrent": pick(kept_heads[i % 4], Hv, "the matrix state"), "conv": pick([5, 0, Dc - 1], Dc, "conv")}
        sink = StateSink(T, N, keep, np.float64, heads=heads)
        run(blk, u, sink, monkeypatch=monkeypatch, small=SMALL[small])
        np.testing.assert_array_equal(sink.steps, np.arange(T)[keep])
        for key, want in states.items():
            np.testing.assert_allclose(sink.arrays[key], want[keep][:, :, heads[key]], rtol=1e-10, atol=1e-13)


def test_steps_no_state_is_kept_of_are_neither_formed_nor_read(monkeypatch):
    blk = BLOCKS["qwen3_next"]()
    T = 300
    u = np.random.default_rng(2).standard_normal((1, T, M))
    calls = []
    original = delta_stream.step_states
    monkeypatch.setattr(delta_stream, "step_states", lambda *a: calls.append(a[-1].shape[0]) or original(*a))
    sink = StateSink(T, 1, slice(200, 203), np.float64)
    run(blk, u, sink)
    assert calls == [3]  # steps 200..202 alone, from the state before step 200 reached in one product
    assert sink.filled == T  # every block was put, in order
    _, states = recorded(blk, u)
    np.testing.assert_allclose(sink.arrays["recurrent"], states["recurrent"][200:203], rtol=1e-10, atol=1e-13)
    shapes = []
    monkeypatch.setattr(delta_stream, "step_states", lambda *a: shapes.append(a[-1].shape) or original(*a))
    sink = StateSink(T, 1, slice(100, 110), np.float64, heads={"recurrent": pick([2], 4, "the matrix state")})
    run(blk, u, sink)
    assert shapes == [(10, 1, 1, 8, 6)]  # one value head of four formed
    np.testing.assert_allclose(sink.arrays["recurrent"], states["recurrent"][100:110, :, [2]], rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("name", ["qwen3_5", "glm5_next_safe_gate"])
def test_without_a_sink_the_output_alone(name):
    blk = BLOCKS[name]()
    u = np.random.default_rng(3).standard_normal((2, 77, M))
    assert rel(run(blk, u), blk.forward(u)[0]) < 1e-10
    assert run(blk, np.zeros((2, 0, M))).shape == (2, 0, M)


def test_a_sink_of_one_step_holds_far_less_than_every_step_s_states():
    blk = gdn("qwen3_next", seed=1, d_model=32, num_k_heads=2, num_v_heads=4, head_k_dim=32, head_v_dim=32)
    s = blk.spec
    P = delta_stream._segment_steps(blk, 1, 4)  # steps per segment: T of 2 and of 8 segments
    peaks = {}
    for T in (2 * P, 8 * P):
        u = np.random.default_rng(0).standard_normal((1, T, 32)).astype(np.float32)
        sink = StateSink(T, 1, slice(T - 1, T), np.float32)
        tracemalloc.start()
        run(blk, u, sink)
        peaks[T] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    every = 6 * P * s.Hv * s.Dk * s.Dv * 4  # what the 6 P more steps' states take
    assert peaks[8 * P] - peaks[2 * P] < every / 50, (peaks, every)
    assert peaks[8 * P] < 8 * P * s.Hv * s.Dk * s.Dv * 4 / 4


@pytest.mark.parametrize("family", ["qwen3_next", "olmo_hybrid", "qwen3_5_text", "qwen3_5_moe_text", "qwen4_exp_text",
                                    "lara_mini", "jev", "kimi_linear", "glm5_next", "bailing_hybrid"])
def test_every_family_s_converted_block_streams_its_records(family):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from hiddenstate.interop import families

    fam = families.family_of(family)
    torch.manual_seed(0)
    model = getattr(transformers, fam.classes[0])(fam.tiny_config()).eval()
    mixers = fam.mixers(model)
    blk = fam.convert(mixers[next(iter(mixers))], model.config)
    assert blk.batch_first and blk.dtype == np.float64 and type(blk) is kind_of(blk).block
    _remember(blk, np.random.default_rng(0))
    T, N = 130, 2
    u = np.random.default_rng(1).standard_normal((N, T, blk.d_model))
    out, states = recorded(blk, u)
    sink = StateSink(T, N, slice(None), np.float64)
    assert rel(kind_of(blk).streamer()(blk, u, sink), out) < 1e-10
    for key, want in states.items():
        assert rel(sink.arrays[key], want) < 1e-10, key


def test_bad_input_is_refused_by_name():
    blk = BLOCKS["qwen3_next"]()
    u = np.zeros((1, 5, M))
    with pytest.raises(TypeError, match="block must be"):
        delta_stream.stream(object(), u)
    with pytest.raises(TypeError, match="u must be float32 or float64"):
        delta_stream.stream(blk, u.astype(np.int64))
    with pytest.raises(TypeError, match="u must be a NumPy array"):
        delta_stream.stream(blk, u.tolist())
    with pytest.raises(ValueError, match=r"u must be of shape \(N, T, M=12\); got \(1, 5, 3\)"):
        delta_stream.stream(blk, np.zeros((1, 5, 3)))
    with pytest.raises(ValueError, match="finite"):
        delta_stream.stream(blk, np.full((1, 5, M), np.nan))
    with pytest.raises(ValueError, match="sink must be a StateSink for T=5 steps and N=1"):
        delta_stream.stream(blk, u, StateSink(6, 1, slice(None), np.float64))
