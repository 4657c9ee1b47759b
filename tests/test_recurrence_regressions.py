"""Inputs that tests/test_sweep_recurrences.py found failing, kept so they never fail again.

Each test names the input, what went wrong on the main branch it was found on, and checks the
fix against values computed independently (the other form of the same kernel, hand counts).
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.kinds import get_kind
from hiddenstate.kinds.delta.block import GatedDeltaNet, KimiDeltaAttention
from hiddenstate.kinds.lightning.block import LightningAttention
from hiddenstate.kinds.mlstm.block import MLSTMLayer
from hiddenstate.kinds.rglru.block import RGLRUBlock
from hiddenstate.kinds.rwkv.block import RWKVTimeMix
from hiddenstate.kinds.shortconv.block import ShortConv


def rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_kda_with_one_key_channel_runs_chunked(chunk):
    """KimiDeltaAttention(head_dim=1) took the scalar-decay path of the chunked form (no factors): a TypeError."""
    u = np.random.default_rng(0).normal(size=(5, 2, 3))
    a, b = (KimiDeltaAttention(3, num_heads=2, head_dim=1, d_conv=2, chunk=c, rng=np.random.default_rng(0))
            for c in (chunk, None))
    (oa, sa, ca), (ob, sb, cb) = a.forward(u), b.forward(u)
    assert rel(oa, ob) < 1e-12 and rel(sa.recurrent, sb.recurrent) < 1e-12
    ga, gb = a.backward(ca, np.ones_like(oa)), b.backward(cb, np.ones_like(ob))
    assert max(rel(ga[0][k], gb[0][k]) for k in gb[0]) < 1e-10 and rel(ga[1], gb[1]) < 1e-10


@pytest.mark.parametrize("T, N", [(0, 0), (2, 0), (0, 2)])
def test_delta_chunked_form_with_no_steps_or_rows(T, N):
    """T = 0 with N = 0, or N = 0: the chunked form's reshape(-1) of an empty array raised NumPy's ValueError."""
    g = GatedDeltaNet(8, num_k_heads=1, num_v_heads=2, head_k_dim=4, head_v_dim=3, d_conv=3, chunk=2)
    out, final, cache = g.forward(np.ones((T, N, 8)))
    assert out.shape == (T, N, 8) and final.recurrent.shape == (N, 2, 4, 3) and final.conv.shape == (N, 14, 2)
    grads, d_u, d_state = g.backward(cache, np.ones_like(out))
    assert d_u.shape == out.shape and all(np.all(v == 0) for v in grads.values())


def test_delta_chunk_larger_than_the_sequence():
    """chunk=10**12 padded every call to 10**12 steps (a MemoryError); a chunk longer than T is one chunk of T."""
    u = np.random.default_rng(1).normal(size=(4, 2, 8))
    big, per_step = (GatedDeltaNet(8, num_k_heads=2, head_k_dim=2, chunk=c, rng=np.random.default_rng(0))
                     for c in (10**12, None))
    assert rel(big(u)[0], per_step(u)[0]) < 1e-12
    with pytest.raises(ValueError, match=r"chunk=100000 over T=200000, N=2: the chunks' .* needs about .* Pass a "):
        GatedDeltaNet(8, num_k_heads=2, head_k_dim=2, chunk=10**5).forward(np.zeros((200000, 2, 8)))


@pytest.mark.parametrize("make, words", [
    (lambda: GatedDeltaNet(10**12), r"GatedDeltaNet\(d_model=1000000000000, num_k_heads=2, .*head_k_dim=64"),
    (lambda: KimiDeltaAttention(4, head_dim=10**9), r"KimiDeltaAttention\(d_model=4, num_heads=2, head_dim=1000000000\)"),
    (lambda: RGLRUBlock(2, 10**12), r"RGLRUBlock\(hidden_size=2, lru_width=1000000000000, conv_width=4\)"),
    (lambda: MLSTMLayer(2 * 10**9, 1), r"MLSTMLayer\(hidden_size=2000000000, qk_dim=1000000000, v_dim=2000000000\)"),
    (lambda: RWKVTimeMix(1, 10**9), r"RWKVTimeMix\(hidden_size=1, attention_hidden_size=1000000000\)"),
    (lambda: LightningAttention(10**12, 1), r"LightningAttention\(hidden_size=1000000000000, num_heads=1, head_dim="),
    (lambda: ShortConv(3, kernel_size=10**12), r"ShortConv\(hidden_size=3, kernel_size=1000000000000\)"),
])
def test_constructor_sizes_beyond_memory(make, words):
    """Sizes beyond the machine ended in NumPy's MemoryError / "array is too big", or a long hang (RWKV's QR)."""
    with pytest.raises(ValueError, match=words + r".* needs about .* of memory; this machine allows .* parameters"):
        make()


@pytest.mark.parametrize("name", ["GatedDeltaNet", "RWKVTimeMix", "RGLRUBlock", "ShortConv"])
def test_initial_state_beyond_memory(name):
    """initial_state(10**12) raised NumPy's MemoryError or "array is too big", naming no argument."""
    block = {"GatedDeltaNet": lambda: GatedDeltaNet(4, head_k_dim=2), "RWKVTimeMix": lambda: RWKVTimeMix(4),
             "RGLRUBlock": lambda: RGLRUBlock(4), "ShortConv": lambda: ShortConv(4)}[name]()
    with pytest.raises(ValueError, match=rf"{name} states of batch_size=1000000000000 rows needs about .* Use fewer"):
        block.initial_state(10**12)
    assert [a.shape[0] for a in block.initial_state(3)] == [3] * len(block.initial_state(3))


def test_mlstm_dim_factor_that_overflows():
    """qk_dim_factor=1e308 with hidden_size 2: int(inf) raised a raw OverflowError."""
    with pytest.raises(ValueError, match=r"qk_dim = int\(hidden_size \* qk_dim_factor\) must be finite; got 2 \* 1e\+308"):
        MLSTMLayer(2, 1, qk_dim_factor=1e308)


def test_mlstm_soft_cap_beyond_the_dtype():
    """gate_soft_cap=1e308 in float32: cap * tanh(g / cap) overflowed (every forward refused); 1e-320: divide by 0."""
    for cap, dtype in ((1e308, np.float32), (1e-320, np.float32), (1e-320, np.float64)):
        with pytest.raises(ValueError, match=rf"gate_soft_cap must lie in {np.dtype(dtype)}'s normal range .* got {re.escape(f'{cap:g}')}\."):
            MLSTMLayer(2, 1, gate_soft_cap=cap, dtype=dtype)
    u = np.random.default_rng(3).normal(size=(4, 2, 2))
    big, none = (MLSTMLayer(2, 1, gate_soft_cap=c, rng=np.random.default_rng(0)) for c in (1e300, None))
    assert rel(big(u)[0], none(u)[0]) < 1e-12  # a cap far beyond the gates is no cap


def test_record_underflow_is_not_an_error():
    """LightningAttention.forward(record=True) of tiny inputs raised FloatingPointError under np.seterr(all='raise').

    The forward pass ignores underflow (FloatGuard); the record's own arithmetic did not.
    """
    block = LightningAttention(8, 2, chunk=2, rng=np.random.default_rng(0))
    out, final, _, rec = block.forward(np.full((2, 1, 8), 1e-310), record=True)  # conftest: np.seterr(all="raise")
    assert np.isfinite(rec.kv).all() and np.allclose(rec.kv[-1], final.kv, rtol=1e-12, atol=0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_lightning_rates_beyond_the_float_range(dtype):
    """slope_rate 1e300: the chunked form's sums overflowed (NaN, refused) where the per-step form gives the answer."""
    u = np.random.default_rng(2).normal(size=(5, 2, 4))
    a, b = (LightningAttention(4, 2, slope_rate=[1e300, 2.0], form=f, chunk=2, dtype=dtype,
                               rng=np.random.default_rng(0)) for f in ("chunked", "sequential"))
    (oa, sa), (ob, sb) = a(u), b(u)
    assert rel(oa, ob) < (1e-5 if dtype == np.float32 else 1e-12) and rel(sa.kv, sb.kv) < 1e-5


def test_backward_nan_from_a_matrix_product_is_refused():
    """RGLRUBlock on 1e300: the backward's BLAS products made 0 * inf = NaN gradients without a floating-point flag."""
    block = RGLRUBlock(8, num_heads=2, conv_width=3, rng=np.random.default_rng(0))
    _, _, cache = block.forward(np.full((1, 1, 8), 1e300))
    with pytest.raises(ValueError, match=r"the backward pass must stay within the float range; got \d+ NaN or Inf"):
        block.backward(cache, None)


def test_refusals_say_must():
    """reset for the delta rule said "is not supported" (no rule); lengths=3 for mLSTM said "got an array"."""
    with pytest.raises(ValueError, match=r"reset must be None for GatedDeltaNet .*; got ndarray"):
        GatedDeltaNet(4, head_k_dim=2).forward(np.ones((2, 1, 4)), reset=np.zeros((2, 1), bool))
    with pytest.raises(ValueError, match="lengths must be None for MLSTMLayer; got int"):
        MLSTMLayer(4, 2).forward(np.ones((2, 1, 4)), lengths=3)
    with pytest.raises(ValueError, match=r"kind must be one of .*; got \[\]"):
        get_kind([])  # was: TypeError unhashable type: 'list'


# -- the family registry ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rwkv():
    transformers = pytest.importorskip("transformers")
    import torch

    from hiddenstate.interop.families import family_of
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    return transformers.RwkvForCausalLM(family_of("rwkv").tiny_config()).eval()


IDS = np.array([[3, 1, 4, 1, 5]])


@pytest.mark.parametrize("layers, error, words", [
    (0.5, TypeError, r"layers must be a recurrent layer index \(an int\) or a list of them; got 0\.5"),  # read as 0
    ([1.9], TypeError, r"got \[1\.9\]"),  # read as layer 1
    (True, TypeError, "got True"),  # read as layer 1
    ("1", TypeError, "got '1'"),  # read as layer 1
    (float("inf"), TypeError, "got inf"),  # a raw OverflowError
    ([[0, 1], [2]], TypeError, r"got \[\[0, 1\], \[2\]\]"),  # NumPy's "inhomogeneous shape" ValueError
])
def test_recompute_layers_refuses_non_integer_layers(rwkv, layers, error, words):
    from hiddenstate.interop.families import recompute_layers
    with pytest.raises(error, match=words):
        recompute_layers(rwkv, IDS, layers=layers)


@pytest.mark.parametrize("kw, error, words", [
    ({"max_bytes": "4GiB"}, TypeError, "max_bytes must be a number; got str '4GiB'"),  # '>' not supported
    ({"max_bytes": float("nan")}, ValueError, r"max_bytes must be a finite number >= 0; got nan"),  # no cap at all
    ({"max_bytes": -5}, ValueError, "max_bytes must be a finite number >= 0; got -5"),
    ({"tol": -1.0}, ValueError, "tol must be a finite number >= 0; got -1.0"),  # every layer "above the tolerance"
    ({"tol": "1e-3"}, TypeError, "tol must be a number; got str '1e-3'"),  # float("1e-3") accepted a string
    ({"tol": float("nan")}, ValueError, "tol must be a finite number >= 0; got nan"),
])
def test_recompute_layers_checks_its_numbers_before_running(rwkv, kw, error, words):
    from hiddenstate.interop.families import recompute_layers
    with pytest.raises(error, match=words):
        recompute_layers(rwkv, IDS, **kw)


def test_recompute_layers_with_a_tol_below_round_off(rwkv):
    """tol=0 was refused as if the family's to_block were wrong ("misses part of what the mixer computes")."""
    from hiddenstate.interop.families import recompute_layers, tolerance
    err = recompute_layers(rwkv, IDS, layers=0).errors[0]
    assert 0 < err <= tolerance(np.float32)  # float32 round-off: not exact
    with pytest.raises(ValueError, match=r"above the tolerance 0 for a float32 model: not analysed. tol=0 was passed: it "
                                         r"must be at least the model's round-off \(the default for this model is "):
        recompute_layers(rwkv, IDS, layers=0, tol=0)


def test_recompute_layers_reads_integer_layers(rwkv):
    from hiddenstate.interop.families import recompute_layers
    for layers in (1, np.int64(1), [1], (1, 1), np.array([1]), range(1, 2)):
        rc = recompute_layers(rwkv, IDS, layers=layers, tol=1e-3, max_bytes=2**30)
        assert rc.layers == (1,) and rc.errors[0] <= 1e-3


@pytest.mark.parametrize("T, N, error, words", [
    ("3", 2, TypeError, "T must be a non-negative integer; got str '3'"),  # "3" * 2 * ... was a string
    (2, None, TypeError, "N must be a non-negative integer; got NoneType None"),
    (-1, 2, ValueError, "T must be a non-negative integer; got -1"),  # negative bytes
    (2.5, 2, TypeError, "T must be a non-negative integer; got float 2.5"),
])
def test_estimate_bytes_checks_sizes(rwkv, T, N, error, words):
    from hiddenstate.interop.families import estimate_bytes
    with pytest.raises(error, match=words):
        estimate_bytes(rwkv, T, N)
    per = estimate_bytes(rwkv, 3, 2)
    assert estimate_bytes(rwkv, 6, 2) == {k: 2 * v for k, v in per.items()}


@pytest.mark.parametrize("index", [True, 0.0, [0], np.ones(1, int)])
def test_family_block_index_must_be_an_int(rwkv, index):
    """Family.block(model, True) gave layer 1, 0.0 layer 0; a list raised "unhashable type"."""
    from hiddenstate.interop.families import family_of
    with pytest.raises(TypeError, match=r"index must be a recurrent layer's index \(an int\); got "):
        family_of(rwkv).block(rwkv, index)
    assert isinstance(family_of(rwkv).block(rwkv, np.int64(1)), RWKVTimeMix)


@pytest.mark.parametrize("model", ["rwkv", "config", "lfm2-model", None])
def test_family_methods_on_what_is_not_its_model(rwkv, model):
    """estimate_bytes("rwkv", ...), Family.block(config, 0), Family.mixers(None) raised AttributeError ('named_modules')."""
    import transformers

    from hiddenstate.interop.families import estimate_bytes, family_of, recompute_layers
    other = {"rwkv": "rwkv", "config": rwkv.config, None: None,
             "lfm2-model": transformers.Lfm2ForCausalLM(family_of("lfm2").tiny_config())}[model]
    fam = family_of("rwkv")
    words = r"model must be a transformers RwkvForCausalLM or RwkvModel \(model_type 'rwkv'\); got "
    for call in (lambda: fam.block(other, 0), lambda: fam.mixers(other), lambda: fam.layer_map(other)):
        with pytest.raises(TypeError, match=words):
            call()
    if model in ("rwkv", "config"):  # family_of reads a model type or a config; the model's layers need a model
        for call in (lambda: estimate_bytes(other, 3, 1), lambda: recompute_layers(other, IDS)):
            with pytest.raises(TypeError, match=words):
                call()


@pytest.mark.parametrize("dtype", [2.5, None, complex, np.int32, "bfloat16", object()])
def test_tolerance_of_what_is_not_a_float_dtype(dtype):
    """tolerance(2.5), tolerance(None), tolerance(complex) returned float64's tolerance (np.finfo reads them)."""
    from hiddenstate.interop.families import tolerance
    with pytest.raises(TypeError, match="dtype must be a floating torch or NumPy dtype; got "):
        tolerance(dtype)
    assert tolerance(np.float64) == pytest.approx(8 * 2.220446049250313e-16 + 1000 * 1.1920928955078125e-07)
    assert tolerance("float32") == pytest.approx(1008 * 1.1920928955078125e-07)


def test_inspect_model_with_ragged_ids(rwkv):
    """inspect_model(model, [[1, 2], [3]]) raised NumPy's "inhomogeneous shape" ValueError before any check."""
    with pytest.raises(TypeError, match=r"ids must be token ids of shape \(N, T\) or \(T,\); got a ragged list"):
        hs.inspect_model(rwkv, [[1, 2], [3]])
