"""The hidden-state tools on Mamba-2: trace, head decays, gradient against lag against BPTT, memory, units, report."""

import html
import re

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.core.functional import sigmoid
from hiddenstate.kinds.ssm.lm import Mamba2LM
from hiddenstate.kinds.ssm.mamba2 import Mamba2
from hiddenstate.kinds.ssm.mamba2_analysis import NOT_MEASURED2, Mamba2Analysis, analyze_mamba2, head_flow, trace_mamba2
from hiddenstate.kinds.ssm.mamba_analysis import MambaAnalysis
from hiddenstate.probe.state_memory import state_memory_curve
from hiddenstate.probe.textfeatures import text_features

TEXT = ('He said "come here", and\nshe left (quietly) for the Big house;\nthen "no" (twice).\n') * 2


def lm(seed=0, **kw):
    rng = np.random.default_rng(seed)
    m = Mamba2LM(11, 8, 2, d_state=4, d_conv=3, head_dim=4, n_groups=2, rng=rng, **kw)
    for v in m.params.values():
        v += 0.2 * rng.standard_normal(v.shape)
    return m


def block(seed=1):
    rng = np.random.default_rng(seed)
    b = Mamba2(6, d_state=3, d_conv=3, head_dim=3, n_groups=2, rng=rng)  # H = 4 heads of P = 3, S = 3
    for v in b.params.values():
        v += 0.2 * rng.standard_normal(v.shape)
    return b


def hand_y(rec, D):
    """y_t[h, p] = sum_s h_t[h, p, s] C_t[group(h), s] + D_h x_t[h, p], by loops over the heads."""
    T, N, H, P, S = rec.ssm.shape
    G = rec.C.shape[2]
    y = np.empty((T, N, H, P))
    for h in range(H):
        C = rec.C[:, :, h // (H // G)]  # (T, N, S)
        y[:, :, h] = np.einsum("tnps,tns->tnp", rec.ssm[:, :, h], C) + D[h] * rec.x[:, :, h]
    return y.reshape(T, N, H * P)


def test_the_lag_curve_is_what_bptt_through_the_block_gives():
    b = block()
    u = np.random.default_rng(2).standard_normal((12, 2, 6))
    K = 7
    an = analyze_mamba2(b, u, max_lag=K)
    la = an.layers[0]
    rec = la.record
    assert la.flow_spectral.shape == (K + 1,) and la.head_flow.shape == (K + 1, 4)
    for k in range(1, K + 1):
        # restart the block at step T-k from the recorded states and backpropagate a final-state gradient
        s0 = (rec.ssm[12 - k - 1], rec.conv[12 - k - 1])
        out, final, cache = b.forward(u[12 - k:], s0)
        np.testing.assert_allclose(final.ssm, rec.ssm[-1], rtol=1e-12, atol=1e-14)
        G = np.random.default_rng(k).standard_normal(final.ssm.shape)
        _, _, (d_h, _) = b.backward(cache, None, (G, None))  # G^T dh_T/dh_{T-k}
        J = b.backward(cache, None, (np.ones_like(G), None))[2].ssm  # the Jacobian's diagonal (N, H, P, S)
        np.testing.assert_allclose(d_h, G * J, rtol=1e-12, atol=1e-15)  # it is diagonal
        np.testing.assert_allclose(J, J[:, :, :1, :1] * np.ones_like(J), rtol=1e-13)  # one value per head
        flat = J.reshape(2, -1)
        assert la.flow_spectral[k] == pytest.approx(flat.max(axis=1).mean(), rel=1e-12)
        assert la.flow_rms[k] == pytest.approx(np.sqrt((flat ** 2).mean(axis=1)).mean(), rel=1e-12)
        np.testing.assert_allclose(la.head_flow[k], J[:, :, 0, 0].mean(axis=0), rtol=1e-12)
    assert la.flow_spectral[0] == la.flow_rms[0] == 1.0
    np.testing.assert_array_equal(head_flow(rec.decay, 3), la.head_flow[:4])


def test_block_analysis_measures_head_decays_gates_and_the_unit_by_hand():
    b = block()
    u = np.random.default_rng(3).standard_normal((30, 2, 6))
    an = analyze_mamba2(b, u, max_lag=6)
    la = an.layers[0]
    rec = la.record
    # the decay, from the parameters alone: dt = softplus(u W_dt + dt_bias), exp(dt * -exp(A_log))
    W = b.params["in_proj.weight"]
    Di, H = 12, 4
    dt = np.logaddexp(0.0, u @ W[-H:].T + b.params["dt_bias"])
    decay = np.exp(dt * -np.exp(b.params["A_log"]))  # (T, N, H)
    np.testing.assert_allclose(rec.decay, decay, rtol=1e-13)
    mean = decay.reshape(-1, H).mean(axis=0)
    np.testing.assert_allclose(la.decay.mean, mean, rtol=1e-13)
    np.testing.assert_allclose(la.decay.right, (decay > 0.9).reshape(-1, H).mean(axis=0))
    np.testing.assert_allclose(la.time_constants, 1 / (1 - mean), rtol=1e-12)
    np.testing.assert_allclose(la.mean_dt, dt.reshape(-1, H).mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(la.channel_time_constant, np.repeat(1 / (1 - mean), 3), rtol=1e-12)
    z = u @ W[:Di].T  # the gate's pre-activation
    np.testing.assert_allclose(la.gate.mean, sigmoid(z).reshape(-1, Di).mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(la.channels, hand_y(rec, b.params["D"]), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(la.channel_decay, np.repeat(decay, 3, axis=-1), rtol=1e-13)
    # the memory curve regresses the block's input from the whole flattened state
    flat = rec.ssm.reshape(30, 2, -1)
    assert flat.shape[-1] == 4 * 3 * 3
    ref = state_memory_curve(flat, u, max_lag=6)
    np.testing.assert_allclose(an.layers[0].memory.score, ref.score, rtol=1e-12)
    assert la.memory.metric == "r2" and an.meta["memory target"].startswith("the block's input")
    # PCA of the flattened state: the variance ratios are the centred singular values squared
    X = flat.reshape(-1, flat.shape[-1])
    sv = np.linalg.svd(X - X.mean(axis=0), compute_uv=False)
    ratio = sv ** 2 / (sv ** 2).sum()
    k = la.pca.explained_variance_ratio.size
    np.testing.assert_allclose(la.pca.explained_variance_ratio, ratio[:k], rtol=1e-9, atol=1e-12)
    assert la.pca.n_components_for(0.9) == int(np.searchsorted(np.cumsum(ratio), 0.9) + 1)
    assert an.meta["kind"] == "mamba2" and an.meta["num_heads"] == 4 and an.meta["head_dim"] == 3
    assert isinstance(an, Mamba2Analysis) and isinstance(an, MambaAnalysis)
    assert an.not_measured["fixed points"] == NOT_MEASURED2["fixed points"]
    assert "pass text=" in an.not_measured["unit features and the explorer"]


def _cell(page, layer, label):
    """The value of a row of layer ``layer``'s card in the report."""
    sec = re.search(f'<section id="layer{layer}">(.*?)</section>', page, re.S).group(1)
    return re.search(f"<tr><th>{re.escape(html.escape(label))}</th><td>(.*?)</td></tr>", sec).group(1)


def test_inspect_model_of_a_mamba2lm_writes_the_report_of_its_numbers(tmp_path):
    m = lm()
    T = len(TEXT)
    ids = np.random.default_rng(4).integers(0, 11, (2, T))
    out = tmp_path / "r.html"
    an = hs.inspect_model(m, ids, text=TEXT, out=out, max_lag=9)
    page = out.read_text(encoding="utf-8")
    logits, states, _, recs = m.forward(ids, record=True)
    assert isinstance(an, Mamba2Analysis) and an.meta["model"] == "hiddenstate Mamba2LM"
    assert "SSM state (H=4, P=4, S=4) with one decay per head" in page
    for i, (la, rec, st) in enumerate(zip(an.layers, recs, states)):
        np.testing.assert_array_equal(la.record.ssm[-1], st.ssm)
        mean = rec.decay.reshape(-1, 4).mean(axis=0)
        tau = 1 / (1 - mean)
        assert _cell(page, i, "mean head decay exp(dt A_h)") == f"{mean.mean():.4f}"
        assert _cell(page, i, "longest head time constant") == f"{tau.max():.4g} steps (head {np.argmax(tau)})"
        assert _cell(page, i, "mean step size dt") == f"{rec.dt.mean():.4g}"
        prod = np.prod(rec.decay[-9:], axis=0)  # (N, H): the last 9 decays of each head
        assert _cell(page, i, "|dh_T/dh_(T-9)| (largest entry / RMS)") == (
            f"{prod.max(axis=1).mean():.3g} / {np.sqrt((prod ** 2).mean(axis=1)).mean():.3g}")
        np.testing.assert_allclose(la.channels, hand_y(rec, m.layers[i].params["D"]), rtol=1e-12, atol=1e-14)
        # the memory curve decodes the token k steps back from the flattened state
        ref = state_memory_curve(rec.ssm.reshape(T, 2, -1), ids.T, max_lag=9)
        np.testing.assert_allclose(la.memory.score, ref.score)
        # the channels that track a text feature: Pearson r of y (sequence 0) with the feature
        y = hand_y(rec, m.layers[i].params["D"])[:, 0]
        for name, unit in la.units.items():
            f = text_features(TEXT)[name]
            r = np.array([np.corrcoef(y[:, d], f)[0, 1] for d in range(16)])
            assert unit.best_unit == int(np.nanargmax(np.abs(r)))
            assert float(unit.top_r[0]) == pytest.approx(r[unit.best_unit], abs=1e-9)
            assert f"{unit.best_unit} (r = {float(unit.top_r[0]):+.2f})" in page
    best = max(an.layers[0].units.items(), key=lambda kv: abs(float(kv[1].top_r[0])))[1].best_unit
    assert f"head-channel {best} (head {best // 4}, row {best % 4}) tracks" in an.summary().splitlines()[1]
    ex = an.explore
    np.testing.assert_allclose(ex["signals"]["y"], hand_y(recs[-1], m.layers[-1].params["D"])[:, 0], rtol=1e-12,
                               atol=1e-14)
    np.testing.assert_array_equal(ex["signals"]["decay"], np.repeat(recs[-1].decay[:, 0], 4, axis=-1))
    assert "its head's exp(dt A<sub>h</sub>)" in page and "H*P*S entries" in page
    assert "fixed points" in page and "dt x B^T" in page


def test_inspect_model_of_a_transformers_mamba2_in_one_call(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.Mamba2Config(vocab_size=30, hidden_size=8, state_size=4, num_hidden_layers=2, expand=2,
                                    head_dim=4, num_heads=4, n_groups=2, conv_kernel=3, chunk_size=4)
    hf = transformers.Mamba2ForCausalLM(cfg).eval()
    ids = torch.randint(0, 30, (2, 24))
    out = tmp_path / "r.html"
    an = hs.inspect_model(hf, ids, out=out, max_lag=6)
    with torch.no_grad():
        cache = hf(ids, use_cache=True).cache
    assert an.meta["model"] == "transformers Mamba2ForCausalLM" and isinstance(an, Mamba2Analysis)
    page = out.read_text(encoding="utf-8")
    assert "transformers Mamba2ForCausalLM" in page
    A = {i: -np.exp(hf.backbone.layers[i].mixer.A_log.detach().double().numpy()) for i in range(2)}
    for i, la in enumerate(an.layers):
        ref = cache.get_recurrent_state(i).double().numpy()
        assert np.abs(la.record.ssm[-1] - ref).max() <= 1e-5 * np.abs(ref).max()
        np.testing.assert_allclose(la.record.decay, np.exp(la.record.dt * A[i]), rtol=1e-13)
        assert _cell(page, i, "mean head decay exp(dt A_h)") == f"{la.record.decay.mean():.4f}"


def test_bad_inputs_are_refused_with_clear_messages(tmp_path):
    m, b = lm(), block()
    ids = np.random.default_rng(5).integers(0, 11, (2, 12))
    with pytest.raises(TypeError, match="model must be a hiddenstate Mamba2LM or Mamba2; got Mamba"):
        trace_mamba2(hs.Mamba(4, d_state=2), np.zeros((3, 1, 4)))
    with pytest.raises(ValueError, match=r"text must hold the characters of sequence 0.*1 to T=12 characters; got 13"):
        hs.inspect_model(m, ids, text="x" * 13)
    with pytest.raises(TypeError, match="text must be a str or None; got int"):
        analyze_mamba2(m, ids, text=3)
    with pytest.raises(ValueError, match="max_lag"):
        hs.inspect_model(m, ids, max_lag=0)
    with pytest.raises(ValueError, match=r"tokens must have shape \(T=12, N=2\)"):
        hs.inspect_model(m, ids, tokens=np.zeros((2, 12), dtype=int))
    with pytest.raises(TypeError, match="tokens must be an integer array"):
        hs.inspect_model(b, np.zeros((12, 2, 6)), tokens=np.zeros((12, 2)))
    with pytest.raises(ValueError, match=r"u must have shape \(T, N, M\) with M=6; got \(12, 2, 5\)"):
        hs.inspect_model(b, np.zeros((12, 2, 5)))
    with pytest.raises(ValueError, match=r"ids must lie in \[0, V=11\)"):
        hs.inspect_model(m, ids + 11)
    with pytest.raises(ValueError, match="lengths must be None for a Mamba or Mamba-2 model"):
        hs.inspect_model(m, ids, lengths=[12, 5])
    with pytest.raises(ValueError, match="x must have at least one step; got T = 0"):
        analyze_mamba2(b, np.zeros((0, 2, 6)))
    other = tmp_path / "notes.html"
    other.write_text("mine")
    with pytest.raises(ValueError):
        hs.inspect_model(m, ids, out=other)
    assert other.read_text() == "mine"


def test_the_ssd_scan_gives_the_same_analysis():
    ids = np.random.default_rng(6).integers(0, 11, (2, 20))
    a, b = analyze_mamba2(lm(), ids, max_lag=5), analyze_mamba2(lm(scan="ssd"), ids, max_lag=5)
    for x, y in zip(a.layers, b.layers):
        np.testing.assert_allclose(y.record.ssm, x.record.ssm, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(y.flow_spectral, x.flow_spectral, rtol=1e-12)
        np.testing.assert_allclose(y.channels, x.channels, rtol=1e-10, atol=1e-13)
