"""Parity with Hugging Face transformers' ``MambaForCausalLM`` (its pure-torch CPU path): logits, states, weights.

Small configurations with random weights (no download). transformers' CPU path computes the
RMS norms, the residual stream and the logits in float32 whatever the model's dtype, so our
float64 model is held to float32 round-off (1e-5 relative); the weights go back bit for bit.
"""

import subprocess
import sys

import numpy as np
import pytest

from hiddenstate.interop.transformers_io import from_transformers, states_from_cache, to_transformers
from hiddenstate.kinds.ssm.lm import MambaLM
from tests._torch import require_torch, torch_required

torch = require_torch()
transformers = pytest.importorskip("transformers") if not torch_required() else __import__("transformers")

RTOL = 1e-5


def hf_model(seed=0, *, vocab=40, hidden=16, d_state=8, layers=3, d_conv=4, expand=2, **config):
    torch.manual_seed(seed)
    cfg = transformers.MambaConfig(vocab_size=vocab, hidden_size=hidden, state_size=d_state, num_hidden_layers=layers,
                                   conv_kernel=d_conv, expand=expand, **config)
    m = transformers.MambaForCausalLM(cfg).eval()
    with torch.no_grad():  # off the structured initial values (A_log = log(1..S), D = 1, norms = 1)
        for p in m.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return m


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("config", [dict(d_state=4), dict(d_state=16, d_conv=3), dict(d_state=8, use_bias=True),
                                    dict(d_state=4, use_conv_bias=False, expand=1, time_step_rank=3),
                                    dict(d_state=8, tie_word_embeddings=False)])
@pytest.mark.parametrize("scan", ["parallel", "sequential"])
def test_logits_and_every_layers_final_states_equal_transformers(config, scan):
    m = hf_model(**config)
    ids = torch.randint(0, 40, (3, 13), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = m(ids, use_cache=True)
    lm = from_transformers(m, scan=scan)
    assert lm.tie_embeddings == config.get("tie_word_embeddings", True)
    logits, states, _ = lm.forward(ids.numpy())
    assert logits.shape == (3, 13, 40)
    assert rel(logits, out.logits.numpy()) <= RTOL
    theirs = states_from_cache(out.cache, m.config.num_hidden_layers)
    for ours, ref in zip(states, theirs):
        assert ours.ssm.shape == ref.ssm.shape and ours.conv.shape == ref.conv.shape
        assert rel(ours.ssm, ref.ssm) <= RTOL
        assert rel(ours.conv, ref.conv) <= RTOL


def test_token_by_token_decoding_with_the_cache_equals_our_carried_states():
    # transformers' single-token path (selective_state_update, causal_conv1d_update) reads its cache
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


def test_weights_go_back_bit_for_bit():
    m = hf_model(d_state=5, use_bias=True)
    back = to_transformers(from_transformers(m))
    a, b = m.state_dict(), back.state_dict()
    assert list(a) == list(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
    # and ours through transformers' float64 model and back
    lm = MambaLM(11, 8, 2, d_state=3, rng=np.random.default_rng(0))
    again = from_transformers(to_transformers(lm, torch_dtype=torch.float64))
    assert list(again.params) == list(lm.params)
    for k, v in lm.params.items():
        np.testing.assert_array_equal(again.params[k], v)


def test_the_conversion_refuses_other_models_clearly():
    with pytest.raises(TypeError, match=r"model must be a transformers MambaForCausalLM \(or FalconMambaForCausalLM, "
                                        r"Mamba2ForCausalLM\); got Linear"):
        from_transformers(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"lm must be a hiddenstate MambaLM \(or Mamba2LM\); got dict"):
        to_transformers({})


def test_importing_hiddenstate_and_its_interop_loads_no_transformers():
    code = ("import sys, hiddenstate, hiddenstate.interop, hiddenstate.interop.transformers_io; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


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
