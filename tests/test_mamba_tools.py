"""The hidden-state tools on Mamba: trace, decay statistics and time constants, gradient against lag, report."""

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.mamba import Mamba
from hiddenstate.mamba_lm import MambaLM
from hiddenstate.probe.mamba import NOT_MEASURED, analyze_mamba, decay_flow, trace_mamba


def lm(seed=0):
    rng = np.random.default_rng(seed)
    m = MambaLM(9, 6, 2, d_state=4, d_conv=3, rng=rng)
    for v in m.params.values():
        v += 0.2 * rng.standard_normal(v.shape)
    return m


def test_decay_flow_is_the_product_of_the_last_decays_and_what_bptt_gives():
    rng = np.random.default_rng(1)
    b = Mamba(4, d_state=3, rng=rng)
    u = rng.standard_normal((12, 2, 4))
    out, final, cache, rec = b.forward(u, record=True)
    spectral, rms = decay_flow(rec.decay, 5)
    for k in range(6):
        prod = np.prod(rec.decay[12 - k:], axis=0).reshape(2, -1)  # (N, Di*S)
        assert spectral[k] == pytest.approx(prod.max(axis=1).mean(), rel=1e-13)
        assert rms[k] == pytest.approx(np.sqrt((prod ** 2).mean(axis=1)).mean(), rel=1e-13)
    # the Jacobian of the final state w.r.t. the initial one, by exact BPTT: diag(prod of all decays)
    G = rng.standard_normal(final.ssm.shape)
    _, _, d0 = b.backward(cache, None, (G, None))
    np.testing.assert_allclose(d0.ssm, G * np.prod(rec.decay, axis=0), rtol=1e-12, atol=1e-15)


def test_analysis_measures_the_decay_as_keep_gate_with_its_time_constants():
    m = lm()
    ids = np.random.default_rng(2).integers(0, 9, (3, 20))
    an = analyze_mamba(m, ids, max_lag=8)
    recs = trace_mamba(m, ids)
    assert len(an.layers) == 2 and an.meta["T"] == 20 and an.meta["N"] == 3
    _, states = m(ids)
    for la, rec, st in zip(an.layers, recs, states):
        np.testing.assert_array_equal(la.record.ssm[-1], st.ssm)
        np.testing.assert_array_equal(la.record.ssm, rec.ssm)
        mean = rec.decay.reshape(-1, 12 * 4).mean(axis=0)
        np.testing.assert_allclose(la.decay.mean, mean, rtol=1e-13)
        np.testing.assert_allclose(la.time_constants, (1 / (1 - mean)).reshape(12, 4), rtol=1e-12)
        np.testing.assert_allclose(la.channel_time_constant, la.time_constants.max(axis=1))
        np.testing.assert_allclose(la.mean_dt, rec.dt.reshape(-1, 12).mean(axis=0), rtol=1e-13)
        assert la.flow_spectral.shape == (9,) and la.flow_spectral[0] == 1
        assert np.all(np.diff(la.flow_spectral) <= 0)  # decays in (0, 1]: the gradient never grows with the lag
        assert la.pca.n_components_for(0.9) >= 1
    assert set(an.not_measured) == set(NOT_MEASURED) and "fixed point" in an.not_measured["fixed points"]
    assert "layer 1: mean decay" in an.summary()


def test_inspect_model_of_our_lm_writes_a_report_and_refuses_to_overwrite_other_files(tmp_path):
    m = lm()
    ids = np.random.default_rng(3).integers(0, 9, (2, 15))
    out = tmp_path / "mamba.html"
    an = hs.inspect_model(m, ids, out=out, max_lag=10)
    page = out.read_text(encoding="utf-8")
    assert "Not measured" in page and "Layer 1" in page and "time constant" in page
    assert an.layers[0].flow_spectral.shape == (11,)
    hs.inspect_model(m, ids, out=out)  # a previous report is replaced
    other = tmp_path / "notes.html"
    other.write_text("mine")
    with pytest.raises(ValueError, match="out must be a new file or a previous hiddenstate report"):
        hs.inspect_model(m, ids, out=other)
    assert other.read_text() == "mine"


def test_inspect_model_of_a_transformers_model_in_one_call(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf = transformers.MambaForCausalLM(transformers.MambaConfig(vocab_size=30, hidden_size=8, state_size=4,
                                                                num_hidden_layers=2)).eval()
    ids = torch.randint(0, 30, (2, 10))
    an = hs.inspect_model(hf, ids, out=tmp_path / "r.html")
    with torch.no_grad():
        cache = hf(ids, use_cache=True).cache
    for i, la in enumerate(an.layers):
        ref = cache.get_recurrent_state(i).double().numpy()
        assert np.abs(la.record.ssm[-1] - ref).max() <= 1e-5 * np.abs(ref).max()
    assert an.meta["model"] == "transformers MambaForCausalLM"


def test_tools_refuse_other_models():
    with pytest.raises(TypeError, match="model must be a hiddenstate MambaLM, Mamba or CharRNN of cell 'mamba'; got GRU"):
        trace_mamba(hs.GRU(2, 3), np.zeros((2, 1, 2)))


def test_inspect_model_of_one_block():
    rng = np.random.default_rng(4)
    b = Mamba(4, d_state=3, rng=rng)
    u = rng.standard_normal((10, 2, 4))
    an = hs.inspect_model(b, u, max_lag=4)
    _, st = b(u)
    assert len(an.layers) == 1 and an.meta["model"] == "hiddenstate Mamba"
    np.testing.assert_array_equal(an.layers[0].record.ssm[-1], st.ssm)
