"""Parity with transformers' own layers: Qwen3NextGatedDeltaNet, OlmoHybridGatedDeltaNet, KimiLinearDeltaAttention.

Each module is built from a tiny random config (no download) and run on its pure-torch CPU
path (``torch_chunk_gated_delta_rule`` / ``chunk_kimi_delta_attention`` for a prompt,
``torch_recurrent_gated_delta_rule`` / ``recurrent_kimi_delta_attention`` for one token with a
cache). Those kernels cast q, k, v, g and beta to float32 and the gated norms compute in float32,
whatever the module's dtype, so our float64 layer is held to float32 round-off: outputs, the
final recurrent state against the cache's ``recurrent_states``, the conv window against the
cache's ``conv_states`` (its last K - 1 columns), and token-by-token decoding through their
cache against our carried state. The weights go over by name, bit for bit.
"""

import os

import numpy as np
import pytest

from hiddenstate.kinds.delta.block import GatedDeltaNet, KimiDeltaAttention
from tests._torch import require_torch, torch_required

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = require_torch()
transformers = pytest.importorskip("transformers") if not torch_required() else __import__("transformers")

RTOL = 2e-5  # float32 round-off (measured: 2e-6 to 4e-6 on the outputs)


def rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


def hf_layer(kind, seed=0, *, M=16, Hk=2, Hv=4, Dk=8, Dv=6, K=4, eps=1e-6, neg=True):
    """transformers' layer module and our layer, same random weights."""
    torch.manual_seed(seed)
    if kind == "qwen3_next":
        from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet as cls
        cfg = transformers.Qwen3NextConfig(hidden_size=M, linear_num_key_heads=Hk, linear_num_value_heads=Hv,
                                           linear_key_head_dim=Dk, linear_value_head_dim=Dv, linear_conv_kernel_dim=K,
                                           num_hidden_layers=1, layer_types=["linear_attention"], rms_norm_eps=eps)
        ours = GatedDeltaNet(M, num_k_heads=Hk, num_v_heads=Hv, head_k_dim=Dk, head_v_dim=Dv, d_conv=K, eps=eps)
    elif kind == "olmo_hybrid":
        from transformers.models.olmo_hybrid.modeling_olmo_hybrid import OlmoHybridGatedDeltaNet as cls
        cfg = transformers.OlmoHybridConfig(hidden_size=M, linear_num_key_heads=Hk, linear_num_value_heads=Hv,
                                            linear_key_head_dim=Dk, linear_value_head_dim=Dv,
                                            linear_conv_kernel_dim=K, linear_allow_neg_eigval=neg,
                                            num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
                                            num_attention_heads=2, num_key_value_heads=2)
        ours = GatedDeltaNet(M, num_k_heads=Hk, num_v_heads=Hv, head_k_dim=Dk, head_v_dim=Dv, d_conv=K,
                             layout="olmo_hybrid", allow_neg_eigval=neg)
    else:
        from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearDeltaAttention as cls
        cfg = transformers.KimiLinearConfig(hidden_size=M, linear_num_heads=Hk, linear_head_dim=Dk,
                                            linear_conv_kernel_dim=K, num_hidden_layers=1,
                                            layer_types=["linear_attention"], rms_norm_eps=eps)
        ours = KimiDeltaAttention(M, num_heads=Hk, head_dim=Dk, d_conv=K, eps=eps)
    m = cls(cfg, 0).eval()
    with torch.no_grad():  # random values everywhere (their initial A_log, dt_bias are structured or empty)
        for name, p in m.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(1.0, 8.0).log())
            elif name.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn_like(p))
            elif "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
    ours.load_state_dict({k: v.detach().numpy() for k, v in m.state_dict().items()})
    assert set(ours.params) == set(m.state_dict())
    return m, cfg, ours


CASES = [("qwen3_next", {}), ("qwen3_next", dict(Hv=2, Dv=8, K=2)), ("olmo_hybrid", {}),
         ("olmo_hybrid", dict(neg=False, Hk=1, Hv=3)), ("kimi", {}), ("kimi", dict(Hk=3, Dk=4, K=3))]


@pytest.mark.parametrize("chunk", [64, None])
@pytest.mark.parametrize(("kind", "sizes"), CASES)
def test_outputs_final_state_and_decoding_equal_transformers(kind, sizes, chunk):
    m, cfg, ours = hf_layer(kind, **sizes)
    ours.chunk, ours.batch_first = chunk, True
    g = torch.Generator().manual_seed(1)
    u = torch.randn(2, 150, cfg.hidden_size, generator=g)  # crosses their 64-step chunks (and ours)
    cache = transformers.DynamicCache(config=cfg)
    with torch.no_grad():
        ref = m(u, cache=cache)
    out, st, _ = ours.forward(u.numpy().astype(np.float64))
    layer = cache.layers[0]
    assert rel(out, ref.numpy()) <= RTOL
    assert st.recurrent.shape == tuple(layer.recurrent_states[0].shape)
    assert rel(st.recurrent, layer.recurrent_states[0].numpy()) <= RTOL
    assert rel(st.conv, layer.conv_states[0].numpy()[..., 1:]) <= RTOL
    x = torch.randn(2, 4, cfg.hidden_size, generator=g)
    for t in range(4):  # their single-token path (the fused recurrent kernel and conv update) vs our carry
        with torch.no_grad():
            r = m(x[:, t:t + 1], cache=cache)
        o, st, _ = ours.forward(x[:, t:t + 1].numpy().astype(np.float64), st)
        assert rel(o, r.numpy()) <= RTOL
        assert rel(st.recurrent, layer.recurrent_states[0].numpy()) <= RTOL
        assert rel(st.conv, layer.conv_states[0].numpy()[..., 1:]) <= RTOL


@pytest.mark.parametrize("kind", ["qwen3_next", "olmo_hybrid", "kimi"])
def test_gradients_equal_transformers_autograd_at_float32_round_off(kind):
    m, cfg, ours = hf_layer(kind)
    u = torch.randn(2, 70, cfg.hidden_size, generator=torch.Generator().manual_seed(2), requires_grad=True)
    d_out = torch.randn(2, 70, cfg.hidden_size, generator=torch.Generator().manual_seed(3))
    (m(u) * d_out).sum().backward()
    ours.batch_first = True
    _, _, cache = ours.forward(u.detach().numpy().astype(np.float64))
    grads, d_u, _ = ours.backward(cache, d_out.numpy().astype(np.float64))
    assert rel(d_u, u.grad.numpy()) <= 1e-4
    for name, p in m.named_parameters():
        assert rel(grads[name], p.grad.numpy()) <= 1e-4, name
