"""The kind protocol (hiddenstate.kinds): the registry of kinds, the delta rule's exact lag norms, the effective rank.

The delta rule's Jacobian ``dS_T/dS_{T-k}`` is not diagonal; :func:`delta_lag_norms` builds it
as products of ``(I - beta k k^T) diag(a)``. It is held here to the Jacobian that the kernel's
hand-written backward pass (BPTT, itself held to torch autograd in tests/test_delta.py) gives,
column by column, on the whole (Dk, Dv) state of every head. The effective rank is checked on
matrices built with known singular values.
"""

from __future__ import annotations

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate import kinds
from hiddenstate.kinds.delta.analysis import DeltaAnalysis, analyze_delta
from hiddenstate.kinds.delta.block import GatedDeltaNet, KimiDeltaAttention
from hiddenstate.kinds.delta.kernel import delta_backward, delta_forward
from hiddenstate.kinds.delta.view import delta_lag_norms, effective_rank, numerical_rank
from hiddenstate.report.family_page import build_mamba_report


def rule_inputs(seed, T=9, N=2, H=3, Dk=4, Dv=3, per_channel=False, beta_max=1.0):
    rng = np.random.default_rng(seed)
    k = rng.normal(size=(T, N, H, Dk))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    q = rng.normal(size=(T, N, H, Dk))
    v = rng.normal(size=(T, N, H, Dv))
    g = -rng.uniform(0.01, 0.6, size=(T, N, H, Dk) if per_channel else (T, N, H))
    beta = rng.uniform(0.05, beta_max, size=(T, N, H))
    return q, k, v, g, beta, rng.normal(size=(N, H, Dk, Dv))


def bptt_jacobian(q, k, v, g, beta, S0, lag):
    """dS_T/dS_{T-lag} per (n, h) as a (Dk Dv, Dk Dv) matrix, from the kernel's backward pass, one column a basis state."""
    T, N, H, Dk = k.shape
    Dv = v.shape[-1]
    if lag == 0:
        return np.broadcast_to(np.eye(Dk * Dv), (N, H, Dk * Dv, Dk * Dv))
    _, _, c = delta_forward(q, k, v, g, beta, S0)
    start = c[7][T - lag - 1] if lag < T else S0  # S_{T-lag}: the state the last `lag` steps start from
    sl = slice(T - lag, T)
    _, _, cache = delta_forward(q[sl], k[sl], v[sl], g[sl], beta[sl], start)
    J = np.empty((N, H, Dk * Dv, Dk * Dv))
    for e in range(Dk * Dv):  # row e of J is d(S_T[e]) / d(S_start): the backward of the basis vector e
        dST = np.zeros((N, H, Dk * Dv))
        dST[..., e] = 1.0
        J[:, :, e, :] = delta_backward(cache, None, dST.reshape(N, H, Dk, Dv))[5].reshape(N, H, Dk * Dv)
    return J


@pytest.mark.parametrize(("per_channel", "beta_max"), [(False, 1.0), (True, 1.0), (False, 2.0)])
def test_delta_lag_norms_equal_the_jacobian_bptt_gives(per_channel, beta_max):
    q, k, v, g, beta, S0 = rule_inputs(0, per_channel=per_channel, beta_max=beta_max)
    T, N, H, Dk = k.shape
    Dv = v.shape[-1]
    got = delta_lag_norms(np.exp(g), beta, k, max_lag=T)
    assert got.spectral.shape == got.rms.shape == (T + 1,) and got.heads.shape == (T + 1, H)
    for lag in range(T + 1):
        J = bptt_jacobian(q, k, v, g, beta, S0, lag)
        sv = np.linalg.svd(J, compute_uv=False)[..., 0]  # (N, H): each head's spectral norm
        np.testing.assert_allclose(got.heads[lag], sv.mean(axis=0), rtol=1e-10)
        np.testing.assert_allclose(got.spectral[lag], sv.max(axis=1).mean(), rtol=1e-10)
        fro2 = (J ** 2).sum(axis=(-2, -1))  # (N, H); the whole state's J is block diagonal over heads
        np.testing.assert_allclose(got.rms[lag], np.sqrt(fro2.sum(axis=1) / (H * Dk * Dv)).mean(), rtol=1e-10)
    assert got.spectral[0] == 1.0 and got.spectral[-1] < 0.9  # it decays


def test_effective_rank_of_states_of_known_rank():
    rng = np.random.default_rng(3)
    U, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    V, _ = np.linalg.qr(rng.normal(size=(5, 5)))

    def built(sigma):
        s = np.zeros(5)
        s[:len(sigma)] = sigma
        return U[:, :5] @ np.diag(s) @ V.T

    for r in (1, 2, 3, 5):  # r equal singular values: rank r by both measures
        S = built([2.5] * r)
        assert effective_rank(S) == pytest.approx(r, rel=1e-12)
        assert numerical_rank(S) == r
    sigma = np.array([4.0, 2.0, 1.0, 1e-3])  # uneven: exp(entropy) between 1 and 4; the last under 1% of 4
    p = sigma / sigma.sum()
    assert effective_rank(built(sigma)) == pytest.approx(np.exp(-(p * np.log(p)).sum()), rel=1e-12)
    assert numerical_rank(built(sigma)) == 3 and numerical_rank(built(sigma), rtol=1e-4) == 4
    stack = np.stack([built([1.0]), built([1.0, 1.0]), np.zeros((6, 5))])  # batched, a zero state has rank 0
    np.testing.assert_allclose(effective_rank(stack), [1, 2, 0], atol=1e-12)
    np.testing.assert_array_equal(numerical_rank(stack), [1, 2, 0])
    with pytest.raises(ValueError, match="rtol"):
        numerical_rank(stack, rtol=0.0)


def test_the_registry_of_kinds():
    assert {"mamba", "mamba2", "gated_delta", "kda"} <= set(kinds.KINDS)
    assert kinds.BLOCKS["gated_delta"] is GatedDeltaNet and kinds.BLOCKS["kda"] is KimiDeltaAttention
    assert kinds.get_kind("mamba").block is hs.Mamba
    with pytest.raises(ValueError, match=r"kind must be one of \[.*'gated_delta', 'kda', .*'mamba', 'mamba2', .*'shortconv'\]"):
        kinds.get_kind("lstm")
    with pytest.raises(ValueError, match="'mamba' is registered already"):
        kinds.register_kind(kinds.get_kind("mamba"))
    with pytest.raises(TypeError, match="block must be a class"):
        kinds.Kind("x", 3, kinds.get_kind("mamba").view, kinds.get_kind("mamba").states)


@pytest.mark.parametrize("cls", [GatedDeltaNet, KimiDeltaAttention])
def test_a_delta_blocks_view_and_analysis(cls, tmp_path):
    kw = dict(num_k_heads=2, num_v_heads=4, head_k_dim=4, head_v_dim=3) if cls is GatedDeltaNet else dict(
        num_heads=2, head_dim=4)
    blk = cls(8, d_conv=3, rng=np.random.default_rng(0), **kw)
    u = np.random.default_rng(1).normal(size=(40, 2, 8))
    out, _, _, rec = blk.forward(u, record=True)
    kind = kinds.get_kind("kda" if cls is KimiDeltaAttention else "gated_delta")
    o2, rec2 = kind.run(blk, u)
    np.testing.assert_array_equal(o2, out)
    view = kind.view(rec)
    T, N, Hv, Dk, Dv = rec.recurrent.shape
    assert view.state.shape == (T, N, Hv * Dk * Dv) and view.units.shape == view.unit_keep.shape == (T, N, Hv * Dv)
    assert view.keep.shape == ((T, N, Hv * Dk) if cls is KimiDeltaAttention else (T, N, Hv))
    assert (view.out_gate is None) == (cls is GatedDeltaNet) and view.matrix is rec.recurrent
    assert list(kind.states(rec)) == ["recurrent", "conv"]
    text = "the quick brown fox jumps over the lazy dog, then"[:40]
    an = analyze_delta(blk, u, max_lag=6, text=text)
    assert isinstance(an, DeltaAnalysis) and an.meta["kind"] == kind.name
    la = an.layers[0]
    ref = delta_lag_norms(rec.decay, rec.beta, rec.k, 6)
    np.testing.assert_array_equal(la.flow_spectral, ref.spectral)
    np.testing.assert_array_equal(la.head_flow, ref.heads)
    sv = np.linalg.svd(rec.recurrent, compute_uv=False)
    p = sv / sv.sum(axis=-1, keepdims=True)
    plogp = p * np.log(np.where(p > 0, p, 1.0))  # 0 log 0 = 0: an exactly singular state (the first steps' rank 1)
    np.testing.assert_allclose(la.effective_rank, np.exp(-plogp.sum(-1)).mean(axis=1), rtol=1e-10)
    tau = 1 / (1 - rec.decay.mean(axis=(0, 1)))
    np.testing.assert_allclose(la.time_constants, tau, rtol=1e-10)
    np.testing.assert_allclose(la.mean_beta, rec.beta.mean(axis=(0, 1)), rtol=1e-12)
    assert (la.gate is None) == (cls is GatedDeltaNet)
    assert ("output gate" in an.not_measured) == (cls is GatedDeltaNet)
    assert an.explore is not None and an.explore["signals"]["y"].shape == (len(text), Hv * Dv)
    assert "effective rank at the last step" in an.summary()
    page = build_mamba_report(tmp_path / "delta.html", an, title="delta").read_text(encoding="utf-8")
    assert "How full the associative memory is" in page and "Explore the channels" in page
