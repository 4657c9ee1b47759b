"""The hidden-state tools on Mamba: trace, decay statistics, gradient against lag, memory, channels, report."""

import base64
import json
import re
import subprocess

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.kinds.ssm.lm import MambaLM
from hiddenstate.kinds.ssm.mamba import Mamba
from hiddenstate.kinds.ssm.mamba_analysis import NEEDS_TEXT, NOT_MEASURED, analyze_mamba, decay_flow, trace_mamba
from hiddenstate.probe.memory import ridge_fit
from hiddenstate.probe.state_memory import state_memory_curve
from hiddenstate.probe.textfeatures import text_features
from hiddenstate.report.family_page import build_mamba_report, mamba_page

TEXT = ('He said "come here", and\nshe left (quietly) for the Big house;\nthen "no" (twice).\n') * 3


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
    assert set(an.not_measured) == {*NOT_MEASURED, "unit features and the explorer"}
    assert "fixed point" in an.not_measured["fixed points"] and an.not_measured["unit features and the explorer"] == NEEDS_TEXT
    assert "layer 1: mean decay" in an.summary() and "memory capacity" in an.summary()


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


def keeper(decays, V=4):
    """A one-layer MambaLM whose state provably holds the recent tokens, by hand.

    The embedding is the identity, so the RMS norm makes token c the vector 2 e_c; ``in_proj``
    copies it to channel c (the other channels read 0); the convolution reads only the current
    input (tap K-1 is 1, bias 0), so ``a_t = silu(2) e_(token t)``: no memory outside the SSM.
    ``dt = softplus(log(e - 1)) = 1`` and ``x_proj`` makes ``B_t = 1`` (up to the norm's eps), so
    state entry s of channel c is ``h_t[c, s] = sum_k decays[s]^k silu(2) [token_(t-k) = c]``.
    With decays (0, 0.1, ...), ``(h[c, 1] - h[c, 0]) / (0.1 silu(2)) = [token_(t-1) = c] + O(0.11)``:
    a linear readout of the state gives the last token. With every decay 0 the state holds only
    the current token; with every decay near 1 it holds a running count of each token, from which
    no linear readout gives even the current one.
    """
    S, Di, pre = len(decays), 2 * V, "layers.0.mixer."
    m = MambaLM(V, V, 1, d_state=S, d_conv=2, rng=np.random.default_rng(0))
    p = m.params
    p["embeddings.weight"][:] = np.eye(V)
    p[pre + "in_proj.weight"][:] = np.vstack([np.eye(V), np.zeros((2 * Di - V, V))])
    p[pre + "conv1d.weight"][:] = np.stack([np.zeros(Di), np.ones(Di)], axis=1)[:, None, :]
    p[pre + "conv1d.bias"][:] = 0
    xp = np.zeros((1 + 2 * S, Di))
    xp[1:1 + S, :V] = 1 / (2 / (1 + np.exp(-2.0)))  # 1 / silu(2): B_t = 1
    p[pre + "x_proj.weight"][:] = xp
    p[pre + "dt_proj.weight"][:] = 0
    p[pre + "dt_proj.bias"][:] = np.log(np.e - 1)
    p[pre + "A_log"][:] = np.log(-np.log(np.asarray(decays, dtype=np.float64)))[None, :]  # exp(dt A) = decays
    return m


def test_memory_curve_reads_the_last_token_from_a_state_built_to_keep_it():
    ids = np.random.default_rng(1).integers(0, 4, (2, 400))  # (N, T), independent tokens
    keeps = analyze_mamba(keeper([1e-12, 0.1, 0.3, 0.6]), ids, max_lag=6)
    rec = keeps.layers[0].record
    np.testing.assert_allclose(rec.decay[:, :, :4], np.broadcast_to([1e-12, 0.1, 0.3, 0.6], (400, 2, 4, 4)),
                               rtol=1e-9)
    np.testing.assert_allclose(rec.B, 1, rtol=1e-4)
    mc = keeps.layers[0].memory
    assert mc.metric == "accuracy" and mc.lags.tolist() == list(range(7))
    assert mc.score[0] == 1 and mc.score[1] == 1  # the current and the last token, read out exactly
    assert 0.2 < mc.chance < 0.35  # four tokens: the most common one's share of the held-out steps
    forgets = analyze_mamba(keeper([1e-12] * 4), ids, max_lag=6).layers[0].memory
    assert forgets.score[0] == 1 and abs(forgets.score[1] - forgets.chance) < 0.1  # lag 1 at chance
    assert keeps.layers[0].memory.capacity > forgets.capacity + 1
    counts = analyze_mamba(keeper([0.999] * 4), ids, max_lag=6).layers[0].memory
    assert np.all(np.abs(counts.score - counts.chance) < 0.1)  # a running count holds no single token
    assert "memory capacity" in keeps.summary() and keeps.meta["memory target"].startswith("the token")


@pytest.mark.parametrize("F", [5, 40])  # the primal form (training rows > F) and the dual one (rows < F)
def test_state_memory_curve_is_ridge_at_every_lag_on_the_same_rows(F):
    rng = np.random.default_rng(2)
    T, N, K, cut = 40, 2, 3, 30
    S = rng.standard_normal((T, N, F)) * rng.uniform(0.1, 3, F)
    y = rng.standard_normal((T, N, 2))
    tok = rng.integers(0, 3, (T, N))
    reg, cls = state_memory_curve(S, y, max_lag=K), state_memory_curve(S, tok, max_lag=K, alpha=0.5)
    Xtr, Xte = S[K:cut].reshape(-1, F), S[cut:].reshape(-1, F)
    mu, sd = Xtr.mean(axis=0), Xtr.std(axis=0)
    for k in range(K + 1):
        W, b = ridge_fit((Xtr - mu) / sd, y[K - k:cut - k].reshape(-1, 2), 1.0)
        yt, yh = y[cut - k:T - k].reshape(-1, 2), (Xte - mu) / sd @ W + b
        assert reg.score[k] == pytest.approx(1 - ((yt - yh) ** 2).sum() / ((yt - yt.mean(axis=0)) ** 2).sum(),
                                             rel=1e-9)
        onehot = (tok[K - k:cut - k].reshape(-1, 1) == np.arange(3)).astype(float)
        W, b = ridge_fit((Xtr - mu) / sd, onehot, 0.5)
        pred = np.argmax((Xte - mu) / sd @ W + b, axis=1)
        assert cls.score[k] == np.mean(pred == tok[cut - k:T - k].reshape(-1))
    assert reg.metric == "r2" and cls.metric == "accuracy"
    with pytest.raises(ValueError, match="alpha"):
        state_memory_curve(S, y, alpha=0)
    with pytest.raises(ValueError, match="max_lag must leave training and test rows"):
        state_memory_curve(S[:4], y[:4], max_lag=3)


def test_a_channel_is_a_unit_its_readout_and_decay_by_hand():
    m = lm()
    ids = np.random.default_rng(5).integers(0, 9, (2, len(TEXT)))
    an = analyze_mamba(m, ids, text=TEXT, max_lag=8)
    feats = text_features(TEXT)
    for i, la in enumerate(an.layers):
        rec, p = la.record, m.layers[i].params
        y = np.einsum("tns,tnds->tnd", rec.C, rec.ssm) + p["D"] * rec.x  # C_t . h_t + D a_t
        np.testing.assert_allclose(la.channels, y, rtol=1e-12, atol=1e-14)
        decay = np.exp(rec.dt[..., None] * -np.exp(p["A_log"])).mean(axis=-1)  # mean_s exp(dt A)
        np.testing.assert_allclose(la.channel_decay, decay, rtol=1e-12)
        for name, u in la.units.items():
            r = [np.corrcoef(y[:, 0, d], feats[name])[0, 1] for d in range(12)]
            np.testing.assert_allclose(u.r, r, rtol=1e-9, atol=1e-12)
            assert u.best_unit == int(np.argmax(np.abs(r)))
    assert set(an.layers[0].units) == {"inside quotes", "position in line", "after newline", "bracket depth",
                                       "whitespace", "upper case"}
    assert "channel" in an.summary() and an.text == TEXT


def _explorer_data(page):
    """The shown (top) layer's explorer data, with the page's T."""
    data = json.loads(re.search(r'<script type="application/json" id="ex-data">(.*?)</script>', page, re.S)
                      .group(1).replace("<\\/", "</"))
    return {**data["layers"][data["layer"]], "T": data["T"], "text": data["text"]}


def test_the_report_shows_the_memory_curve_the_channels_and_the_explorer_with_the_decay(tmp_path):
    m = lm()
    ids = np.random.default_rng(6).integers(0, 9, (2, len(TEXT)))
    an = analyze_mamba(m, ids, text=TEXT, max_lag=8)
    page = build_mamba_report(tmp_path / "m.html", an).read_text(encoding="utf-8")
    skipped = page[page.index('id="skipped"'):]
    assert "memory curve" not in skipped and NEEDS_TEXT not in skipped and "fixed points" in skipped
    assert 'id="memory"' in page and "Memory curve" in page and "capacity" in page
    assert 'id="units"' in page and "Channels that track text features" in page and "position in line" in page
    data = _explorer_data(page)
    assert data["H"] == 12 and data["T"] == len(TEXT) and data["order"] == ["y", "decay", "sigmoid(z)"]
    top = an.layers[-1]
    for name, want in (("y", top.channels[:, 0]), ("decay", top.channel_decay[:, 0])):
        sig = data["signals"][name]
        codes = np.frombuffer(base64.b64decode(sig["codes"]), dtype=np.uint8).reshape(12, -1).T  # (T, Di)
        lo, hi = np.array(sig["lo"]), np.array(sig["hi"])
        np.testing.assert_allclose(lo + codes * (hi - lo) / 255, want, atol=float((hi - lo).max()) / 510 + 1e-12)
    # one definition of a time constant (the card's): per channel, its slowest state entry's 1 / (1 - mean decay)
    slowest = (1 / (1 - top.record.decay.mean(axis=(0, 1)))).max(axis=1)  # (Di,) over both sequences
    np.testing.assert_allclose(data["units"]["time constant"], slowest, rtol=1e-12)
    np.testing.assert_allclose(top.channel_time_constant, slowest, rtol=1e-12)
    assert any(sig == "decay" for _, sig, _ in data["featured"]) and "getElementById('ex-data')" in page  # the script
    # without a text: the card says what the explorer needs, and there is none
    bare = mamba_page(analyze_mamba(m, ids, max_lag=8))
    assert NEEDS_TEXT in bare and 'id="ex-data"' not in bare and 'id="memory"' in bare


def test_inspect_model_passes_the_text_and_tokens_through(tmp_path):
    m = lm()
    ids = np.random.default_rng(7).integers(0, 9, (2, len(TEXT)))
    an = hs.inspect_model(m, ids, text=TEXT, out=tmp_path / "r.html", max_lag=5)
    assert an.explore is not None and an.layers[0].units and "ex-data" in (tmp_path / "r.html").read_text()
    np.testing.assert_array_equal(an.explore["signals"]["decay"], an.layers[-1].channel_decay[:, 0])
    ref = state_memory_curve(an.layers[1].record.ssm.reshape(len(TEXT), 2, -1), ids.T, max_lag=5)
    np.testing.assert_array_equal(an.layers[1].memory.score, ref.score)  # the LM's ids, time-major
    rng = np.random.default_rng(8)
    b = Mamba(4, d_state=3, batch_first=True, rng=rng)
    u = rng.standard_normal((2, 60, 4))  # (N, T, M)
    an = hs.inspect_model(b, u, max_lag=5)  # no tokens: the block's input, regressed
    flat = an.layers[0].record.ssm.reshape(60, 2, -1)
    np.testing.assert_array_equal(an.layers[0].memory.score,
                                  state_memory_curve(flat, u.transpose(1, 0, 2), max_lag=5).score)
    assert an.layers[0].memory.metric == "r2"
    tok = rng.integers(0, 5, (60, 2))
    an = hs.inspect_model(b, u, tokens=tok, max_lag=5)
    assert an.layers[0].memory.metric == "accuracy"
    np.testing.assert_array_equal(an.layers[0].memory.score, state_memory_curve(flat, tok, max_lag=5).score)


def test_bad_text_and_tokens_are_refused_and_short_inputs_skip_the_curve():
    m = lm()
    ids = np.random.default_rng(9).integers(0, 9, (1, 20))
    with pytest.raises(ValueError, match="text must hold the characters of sequence 0, one per step: 1 to T=20"):
        analyze_mamba(m, ids, text="x" * 21)
    with pytest.raises(TypeError, match="text must be a str"):
        analyze_mamba(m, ids, text=b"abc")
    with pytest.raises(ValueError, match=r"tokens must have shape \(T=20, N=1\)"):
        analyze_mamba(m, ids, tokens=ids)  # (N, T): not time-major
    with pytest.raises(TypeError, match="tokens must be an integer array"):
        analyze_mamba(m, ids, tokens=ids.T.astype(float))
    an = analyze_mamba(m, ids[:, :3])
    assert all(la.memory is None for la in an.layers)
    assert "too short for a held-out split" in an.not_measured["memory curve"]
    assert 'id="memory"' not in mamba_page(an) and "memory capacity" not in an.summary()


def test_the_readme_example_of_the_tools_prints_what_it_says(tmp_path, monkeypatch, capsys):
    from tests import _docs

    readme = _docs.text()  # the README and the docs pages
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if "an.layers[0].memory" in b)
    said = [line.split("# ", 1)[1] for line in block.splitlines() if line.startswith("print(")]
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == len(said) == 4
    for out, comment in zip(printed, said):
        assert comment.startswith(out), (out, comment)  # the comment is what it prints, then what it means
    assert (tmp_path / "mamba.html").exists()


_DRIVE = """<script>
window.__errs = [];
window.addEventListener('error', function (e) { window.__errs.push(String(e.message)); });
window.addEventListener('load', function () {
  var res = {errors: []};
  try {
    var spans = document.querySelectorAll('#ex-text span');
    res.n_spans = spans.length;
    res.n_rows = document.querySelectorAll('#ex-units li').length;
    document.querySelector('#ex-units li[data-unit="%(k)d"]').click();
    document.querySelector('#ex-signals button[data-signal="decay"]').click();
    res.title = document.getElementById('ex-title').textContent;
    res.bg = Array.prototype.map.call(spans, function (s) { return getComputedStyle(s).backgroundColor; });
  } catch (e) { res.errors.push(String(e)); }
  res.errors = res.errors.concat(window.__errs);
  var pre = document.createElement('pre'); pre.id = 'hs-drive'; pre.textContent = JSON.stringify(res);
  document.body.appendChild(pre);
});
</script>"""


def test_the_explorer_colours_the_text_by_a_channels_decay_in_headless_chromium(tmp_path):
    from tests.test_report import _browser
    from tests.test_report_explorer import _expected, _same_colour

    browser = _browser()
    if browser is None:
        pytest.skip("no Chromium found; install it with `apt-get install chromium` or set HIDDENSTATE_CHROMIUM")
    m = lm()
    ids = np.random.default_rng(10).integers(0, 9, (1, len(TEXT)))
    an = analyze_mamba(m, ids, text=TEXT, max_lag=5)
    decay = an.layers[-1].channel_decay[:, 0]  # (T, Di)
    k = int(np.argmax(np.ptp(decay, axis=0)))
    page = mamba_page(an).replace("</body>", _DRIVE % {"k": k} + "</body>", 1)
    (tmp_path / "p.html").write_text(page, encoding="utf-8")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000", "--dump-dom",
           (tmp_path / "p.html").as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="hs-drive">(.*?)</pre>', proc.stdout, re.S)
    assert proc.returncode == 0 and found, proc.stderr[-2000:]
    res = json.loads(found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                     .replace("&amp;", "&"))
    assert res["errors"] == [] and res["n_spans"] == len(TEXT) and res["n_rows"] == 12
    assert res["title"].startswith(f"decay gate of unit {k}")
    want, tol = _expected(decay[:, k]), 0.88 / 255 + 0.0005 + 1 / 255  # the gate scale, quantised to 8 bits
    bad = [t for t in range(len(TEXT)) if not _same_colour(res["bg"][t], want[t], tol)]
    assert not bad, [(t, res["bg"][t], want[t]) for t in bad[:5]]


def test_inspect_model_of_a_mamba_lm_refuses_what_it_cannot_measure_and_names_the_source(tmp_path):
    import hiddenstate as hs

    lm = hs.MambaLM(9, 16, 1, d_state=4, rng=np.random.default_rng(0))
    ids = np.random.default_rng(1).integers(0, 9, size=(2, 20))
    with pytest.raises(ValueError, match=r"lengths must be None for a Mamba or Mamba-2 model"):
        hs.inspect_model(lm, ids, lengths=[20, 12])
    with pytest.raises(ValueError, match=r"vocab must be None unless model is a CharRNN"):
        hs.inspect_model(lm, ids, vocab="abcdefghi")
    an = hs.inspect_model(lm, ids, source="my LM", out=tmp_path / "r.html")
    assert an.meta["model"] == "my LM"
    assert "my LM" in (tmp_path / "r.html").read_text()
