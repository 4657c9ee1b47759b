"""Parity with Hugging Face transformers' ``Mamba2ForCausalLM`` (its pure-torch CPU path): logits, states, weights.

Small configurations with random weights (no download), with a small ``chunk_size`` so that
transformers' chunked SSD computation crosses chunk boundaries. That CPU path computes the SSM
(``mamba2_chunk_scan`` casts x, B, C and dt to float32), the norms, the residual stream
(``residual_in_fp32``) and the logits in float32 whatever the model's dtype, so our float64
model is held to float32 round-off (1e-5 relative); the weights go back bit for bit.
"""

import numpy as np
import pytest

from hiddenstate.interop.transformers_io import from_transformers, states_from_cache, to_transformers
from hiddenstate.kinds.ssm.lm import Mamba2LM
from tests._torch import require_torch, torch_required

torch = require_torch()
transformers = pytest.importorskip("transformers") if not torch_required() else __import__("transformers")

RTOL = 1e-5


def hf_model(seed=0, *, vocab=40, hidden=16, d_state=8, layers=3, d_conv=4, expand=2, head_dim=8, n_groups=2,
             **config):
    torch.manual_seed(seed)
    cfg = transformers.Mamba2Config(vocab_size=vocab, hidden_size=hidden, state_size=d_state, num_hidden_layers=layers,
                                    conv_kernel=d_conv, expand=expand, head_dim=head_dim,
                                    num_heads=expand * hidden // head_dim, n_groups=n_groups, chunk_size=4, **config)
    m = transformers.Mamba2ForCausalLM(cfg).eval()
    with torch.no_grad():  # off the structured initial values (A_log = log(1..H), D = 1, norms = 1)
        for p in m.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return m


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("config", [dict(), dict(n_groups=1), dict(n_groups=4, use_bias=True),
                                    dict(use_conv_bias=False, d_conv=2, expand=1, head_dim=4),
                                    dict(tie_word_embeddings=True, layer_norm_epsilon=1e-3)])
@pytest.mark.parametrize("scan", ["parallel", "sequential", "ssd"])
def test_logits_and_every_layers_final_states_equal_transformers(config, scan):
    m = hf_model(**config)
    ids = torch.randint(0, 40, (3, 13), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = m(ids, use_cache=True)
    lm = from_transformers(m, scan=scan)
    assert isinstance(lm, Mamba2LM) and lm.tie_embeddings == config.get("tie_word_embeddings", False)
    assert lm.layers[0].eps == lm.eps == config.get("layer_norm_epsilon", 1e-5)
    logits, states, _ = lm.forward(ids.numpy())
    assert logits.shape == (3, 13, 40)
    assert rel(logits, out.logits.numpy()) <= RTOL
    theirs = states_from_cache(out.cache, m.config.num_hidden_layers)
    for ours, ref in zip(states, theirs):
        assert ours.ssm.shape == ref.ssm.shape and ours.conv.shape == ref.conv.shape
        assert rel(ours.ssm, ref.ssm) <= RTOL
        assert rel(ours.conv, ref.conv) <= RTOL


def test_token_by_token_decoding_with_the_cache_equals_our_carried_states():
    # transformers' single-token path (mamba2_selective_state_update, causal_conv1d_update) reads its cache
    m = hf_model(d_state=6)
    ids = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(2))
    lm = from_transformers(m)
    full, _ = lm(ids.numpy())
    with torch.no_grad():
        out = m(ids[:, :5], use_cache=True)
        cache, got = out.cache, [out.logits]
        for t in range(5, 9):
            out = m(ids[:, t:t + 1], cache=cache, use_cache=True)
            cache = out.cache
            got.append(out.logits)
    assert rel(full, torch.cat(got, 1).numpy()) <= RTOL
    a, s = lm(ids[:, :5].numpy())
    b, s = lm(ids[:, 5:].numpy(), s)
    np.testing.assert_allclose(np.concatenate([a, b], axis=1), full, rtol=1e-12, atol=1e-12)
    for ours, ref in zip(s, states_from_cache(cache, 3)):
        assert rel(ours.ssm, ref.ssm) <= RTOL and rel(ours.conv, ref.conv) <= RTOL
    # a multi-token call on a filled cache starts both the SSM and the convolution from it, as ours does
    with torch.no_grad():
        second = m(ids[:, 5:], cache=m(ids[:, :5], use_cache=True).cache, use_cache=True)
    assert rel(b, second.logits.numpy()) <= RTOL


def test_weights_go_back_bit_for_bit():
    m = hf_model(d_state=5, use_bias=True)
    back = to_transformers(from_transformers(m))
    assert type(back).__name__ == "Mamba2ForCausalLM" and back.config.n_groups == 2 and back.config.num_heads == 4
    a, b = m.state_dict(), back.state_dict()
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
    # and ours through transformers' float64 model and back
    lm = Mamba2LM(11, 8, 2, d_state=3, head_dim=4, n_groups=2, rng=np.random.default_rng(0))
    again = from_transformers(to_transformers(lm, torch_dtype=torch.float64))
    assert isinstance(again, Mamba2LM) and list(again.params) == list(lm.params)
    for k, v in lm.params.items():
        np.testing.assert_array_equal(again.params[k], v)


def test_our_float32_model_matches_transformers_to_float32_round_off():
    m = hf_model(d_state=8)
    ids = torch.randint(0, 40, (2, 17), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = m(ids, use_cache=True)
    lm = from_transformers(m, dtype=np.float32)
    logits, states, _ = lm.forward(ids.numpy())
    assert logits.dtype == np.float32 and states[0].ssm.dtype == np.float32
    assert rel(logits, out.logits.numpy()) <= RTOL
    for ours, ref in zip(states, states_from_cache(out.cache, 3)):
        assert rel(ours.ssm, ref.ssm) <= RTOL


def test_a_clamped_step_size_equals_transformers_and_goes_back():
    m = hf_model(layers=2, time_step_limit=(0.3, 0.9))
    with torch.no_grad():  # step sizes around 0.7, so that the clamp cuts on both sides
        for layer in m.backbone.layers:
            layer.mixer.dt_bias.uniform_(-1.0, 0.5)
    ids = torch.randint(0, 40, (2, 11), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        out = m(ids, use_cache=True)
    for scan in ("parallel", "ssd"):
        lm = from_transformers(m, scan=scan)
        assert all(b.time_step_limit == (0.3, 0.9) for b in lm.layers)
        logits, states, _, records = lm.forward(ids.numpy(), record=True)
        assert rel(logits, out.logits.numpy()) <= RTOL
        for ours, ref in zip(states, states_from_cache(out.cache, 2)):
            assert rel(ours.ssm, ref.ssm) <= RTOL
        dt = np.concatenate([r.dt.ravel() for r in records])
        assert (dt == 0.3).any() and (dt == 0.9).any() and ((dt > 0.3) & (dt < 0.9)).any()
    back = to_transformers(lm)
    assert tuple(back.config.time_step_limit) == (0.3, 0.9)
    with torch.no_grad():
        assert rel(back(ids).logits.numpy(), out.logits.numpy()) <= RTOL  # its own chunk_size: round-off


def test_a_bad_step_size_limit_and_a_hybrid_block_are_refused_clearly():
    m = hf_model(layers=1)
    m.config.time_step_limit = (0.5, 0.1)
    with pytest.raises(ValueError, match=r"model.config.time_step_limit must be a pair \(lo, hi\) with 0 <= lo <= hi.*; "
                                         r"got \(0.5, 0.1\)"):
        from_transformers(m)
    lm = Mamba2LM(11, 8, 1, d_state=3, head_dim=4, rms_norm=False, ssm_multipliers=(1, 2, 1, 1, 1),
                  rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="must be Mamba2Mixer's own .* got blocks with rms_norm, ssm_multipliers set"):
        to_transformers(lm)
