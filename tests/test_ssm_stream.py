"""The streamed runs of the kinds "mamba" and "mamba2" (kinds/ssm/stream.py) against the blocks' own records."""

import tracemalloc

import numpy as np
import pytest

from _ssm import jittered
from hiddenstate import Mamba, Mamba2
from hiddenstate.interop.families import family_of
from hiddenstate.kinds.ssm.stream import mamba2_stream, mamba_stream
from hiddenstate.kinds.ssm.view import KINDS, ssm_states
from hiddenstate.kinds.stream import StateSink, pick
from tests import test_families_mamba1 as one
from tests import test_families_mamba2 as two

MAMBA = {"plain": {}, "biases": {"bias": True, "conv_bias": False}, "falcon_rms": {"bcdt_norm": "rms"},
         "jamba_rms_weight": {"bcdt_norm": "rms_weight", "bias": True}, "zamba_heads": {"num_heads": 2},
         "heads_and_norms": {"num_heads": 4, "bcdt_norm": "rms_weight"}}
MAMBA2 = {"plain": {}, "groups": {"n_groups": 2}, "dt_limit": {"time_step_limit": (0.3, 0.9)},
          "norm_before_gate": {"norm_before_gate": True, "n_groups": 2}, "no_norm": {"rms_norm": False},
          "falcon_mup": {"ssm_multipliers": (0.5, 1.5, 0.8, 1.2, 2.0), "ssm_in_multiplier": 0.7},
          "biases": {"bias": True, "out_bias": False, "conv_bias": False}}


def mamba(name, M=4):
    return jittered(Mamba, M, d_state=3, dt_rank=2, batch_first=True, **MAMBA[name])


def mamba2(name, M=4):
    return jittered(Mamba2, M, d_state=3, head_dim=2, batch_first=True, **MAMBA2[name])


CASES = [(mamba, mamba_stream, n) for n in MAMBA] + [(mamba2, mamba2_stream, n) for n in MAMBA2]
IDS = [f"{make.__name__}-{n}" for make, _, n in CASES]


def record(block, u):
    """The block's own output and every step's states (float64)."""
    out, _, _, rec = block.forward(u, record=True)
    return out, ssm_states(rec)


def close(got, want, rtol):
    """``got`` equals ``want`` to ``rtol`` of ``want``'s largest entry."""
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= rtol * max(np.abs(want).max(), 1e-300), np.abs(got - want).max()


class Spy(StateSink):
    """A sink that also notes every block handed to it: its start, its steps, the arrays' dtypes."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.blocks = []

    def put(self, start, states):
        self.blocks.append((start, len(states["ssm"]), {k: v.dtype for k, v in states.items()}))
        super().put(start, states)


@pytest.mark.parametrize(("make", "stream", "name"), CASES, ids=IDS)
@pytest.mark.parametrize(("block_steps", "chunk_steps"), [(None, None), (8, None), (4, 10)])
def test_float64_stream_is_the_record(make, stream, name, block_steps, chunk_steps):
    block = make(name)
    u = np.random.default_rng(3).standard_normal((2, 37, 4))
    want, states = record(block, u)
    sink = StateSink(37, 2, slice(None), np.float64)
    out = stream(block, u, sink, block_steps=block_steps, chunk_steps=chunk_steps)
    assert out.dtype == np.float64 and out.shape == (2, 37, 4)
    close(out, want, 1e-10)
    assert list(sink.arrays) == ["ssm", "conv"]
    for k in states:
        close(sink.arrays[k], states[k], 1e-10)
    assert np.abs(states["ssm"]).max() > 1e-3  # the comparison means something


@pytest.mark.parametrize(("make", "stream", "name"), CASES, ids=IDS)
def test_float32_stream_computes_in_float32(make, stream, name):
    block = make(name)
    u = np.random.default_rng(4).standard_normal((3, 21, 4))
    want, states = record(block, u)
    sink = Spy(21, 3, slice(None), np.float32)
    out = stream(block, u.astype(np.float32), sink, block_steps=5)
    assert out.dtype == np.float32
    close(out, want, 2e-5)
    for k in states:
        close(sink.arrays[k], states[k], 2e-5)
    assert [(s, n) for s, n, _ in sink.blocks] == [(0, 5), (5, 5), (10, 5), (15, 5), (20, 1)]
    assert all(d["ssm"] == np.float32 and d["conv"] == np.float32 for _, _, d in sink.blocks)


@pytest.mark.parametrize(("make", "stream", "name"), CASES[:1] + CASES[len(MAMBA):len(MAMBA) + 2], ids=IDS[:1] +
                         IDS[len(MAMBA):len(MAMBA) + 2])
def test_window_stride_and_heads_are_the_full_states_sliced(make, stream, name):
    block = make(name)
    T, N = 40, 2
    u = np.random.default_rng(5).standard_normal((N, T, 4))
    _, states = record(block, u)
    keep = slice(7, 33, 4)
    heads = {"ssm": pick([2, 0], states["ssm"].shape[2], "ssm"), "conv": pick([5], states["conv"].shape[2], "conv")}
    sink = Spy(T, N, keep, np.float64, heads=heads)
    stream(block, u, sink, block_steps=6, chunk_steps=15)
    np.testing.assert_array_equal(sink.steps, np.arange(T)[keep])
    close(sink.arrays["ssm"], states["ssm"][keep][:, :, [2, 0]], 1e-10)
    close(sink.arrays["conv"], states["conv"][keep][:, :, [5]], 1e-10)
    # every block put, in order: blocks of 6 within chunks of 15
    assert [(s, n) for s, n, _ in sink.blocks] == [(0, 6), (6, 6), (12, 3), (15, 6), (21, 6), (27, 3), (30, 6), (36, 4)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_mamba2_runs_the_blocks_a_sink_keeps_nothing_of_at_once_without_their_states(dtype):
    # SSD's matrix form between the kept steps: one put for the 36 steps before the last, then the last
    block = mamba2("groups")
    u = np.random.default_rng(9).standard_normal((2, 37, 4))
    want, states = record(block, u)
    sink = Spy(37, 2, slice(36, 37), dtype)
    out = mamba2_stream(block, u.astype(dtype), sink, block_steps=4)
    assert [(s, n) for s, n, _ in sink.blocks] == [(0, 36), (36, 1)]
    assert out.dtype == dtype and all(d["ssm"] == dtype for _, _, d in sink.blocks)
    rtol = 1e-10 if dtype == np.float64 else 2e-5
    close(out, want, rtol)
    close(sink.arrays["ssm"], states["ssm"][36:], rtol)
    close(sink.arrays["conv"], states["conv"][36:], rtol)


@pytest.mark.parametrize(("make", "stream", "name"), [CASES[0], CASES[len(MAMBA)]], ids=[IDS[0], IDS[len(MAMBA)]])
@pytest.mark.parametrize(("T", "block_steps", "chunk_steps"), [(1, None, None), (1, 4, 1), (13, 4, None), (13, 13, 5),
                                                              (13, 64, 1), (13, 2, 3)])
def test_any_T_without_a_sink(make, stream, name, T, block_steps, chunk_steps):
    block = make(name)
    u = np.random.default_rng(6).standard_normal((2, T, 4))
    want, states = record(block, u)
    close(stream(block, u, None, block_steps=block_steps, chunk_steps=chunk_steps), want, 1e-10)
    sink = StateSink(T, 2, slice(T - 1, T), np.float64)
    close(stream(block, u, sink, block_steps=block_steps, chunk_steps=chunk_steps), want, 1e-10)
    close(sink.arrays["ssm"], states["ssm"][-1:], 1e-10)
    close(sink.arrays["conv"], states["conv"][-1:], 1e-10)


def test_the_kinds_name_their_streams():
    by_name = {k.name: k for k in KINDS}
    assert by_name["mamba"].streamer() is mamba_stream
    assert by_name["mamba2"].streamer() is mamba2_stream


def test_bad_inputs_are_refused():
    block = mamba("plain")
    with pytest.raises(TypeError, match=r"u must be a float32 or float64 NumPy array; got an array of int64"):
        mamba_stream(block, np.zeros((1, 3, 4), dtype=np.int64))
    with pytest.raises(TypeError, match=r"got list"):
        mamba_stream(block, [[[0.0] * 4]])
    with pytest.raises(ValueError, match=r"u must have shape \(N, T, M=4\); got \(3, 4\)"):
        mamba_stream(block, np.zeros((3, 4)))


def traced_peak(stream, block, T):
    """The peak of the memory traced while a float32 stream of T steps keeps its last step (bytes)."""
    u = np.random.default_rng(7).standard_normal((1, T, block.d_model)).astype(np.float32)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        stream(block, u, StateSink(T, 1, slice(T - 1, T), np.float32), chunk_steps=128)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("block", "stream", "per_step"), [
    (Mamba(8, d_state=128, batch_first=True, rng=np.random.default_rng(0)), mamba_stream, 16 * 128),
    (Mamba2(64, d_state=128, head_dim=64, batch_first=True, rng=np.random.default_rng(0)), mamba2_stream,
     2 * 64 * 128)],
    ids=["mamba", "mamba2"])
def test_memory_does_not_grow_with_every_state(block, stream, per_step):
    # 1536 more steps of every state would be 1536 * per_step * 4 bytes (12 and 96 MiB); the stream grows by
    # the output (T, N, M) and the sink's per-step indices (a bool and an int64): measured 50 and 280 bytes a
    # step (M = 8 and 64); the bound is twice the output and 64 bytes a step
    growth = traced_peak(stream, block, 2048) - traced_peak(stream, block, 512)
    assert 0 < growth < 1536 * (8 * block.d_model + 64) < 1536 * per_step * 4 / 20


@pytest.mark.parametrize("name", ["falcon_mamba", "jamba", "zamba", "bamba", "nemotron_h", "granitemoehybrid", "zamba2",
                                  "falcon_h1"])
def test_the_blocks_of_the_transformers_families_stream(name):
    # every recurrent layer's block as the family's to_block builds it from the model (the mapped variants)
    model, _ = (one if name in one.FAMILIES else two).build(name)
    family = family_of(model)
    layers = [info for info in family.layer_map(model) if info.role == "recurrent"]
    assert layers
    u = np.random.default_rng(8).standard_normal((2, 19, model.config.hidden_size))
    for info in layers:
        block = family.to_block(model.get_submodule(info.path), model.config)
        stream = mamba_stream if isinstance(block, Mamba) else mamba2_stream
        want, states = record(block, u)
        sink = StateSink(19, 2, slice(None), np.float64)
        close(stream(block, u, sink, block_steps=4), want, 1e-10)
        for k in states:
            close(sink.arrays[k], states[k], 1e-10)
        close(stream(block, u.astype(np.float32), block_steps=4), want, 1e-4)
