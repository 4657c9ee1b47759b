"""The report at real scale: a BPE tokenizer's tokens as the units of text, every layer, every head, one look.

A tiny byte-level BPE tokenizer is trained (``tokenizers``) on a few sentences in ``tmp_path`` and
saved beside a tiny random Qwen3-Next (gated delta rule: a matrix state per head) in its model
directory; ``hiddenstate inspect DIR --text FILE`` writes the report, and headless Chromium
drives its explorer: the spans are the tokens (decoded from their ids), the layer selector
switches the layer shown, the head selector filters the units and picks the head drawn, and the
matrix view decodes to the head's state S_t. Plus the pieces by hand: the time-constant
definition, legend digits, the input warnings, the data-chosen lag, wide tables, chart ticks, and
the common header of every kind's report.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

import hiddenstate as hs  # noqa: E402
from hiddenstate.cli import main  # noqa: E402
from hiddenstate.interop import families  # noqa: E402
from hiddenstate.probe.caveats import MIN_LAG, data_lag, input_warnings  # noqa: E402
from hiddenstate.probe.gatestats import unit_time_constants  # noqa: E402
from hiddenstate.probe.textfeatures import inside_quotes  # noqa: E402
from hiddenstate.probe.tokens import token_features, token_pieces  # noqa: E402
from hiddenstate.report.cards import per_unit_rows  # noqa: E402
from hiddenstate.report.explorer import decode  # noqa: E402
from hiddenstate.report.family_page import build_family_report  # noqa: E402
from hiddenstate.report.layout import line_chart  # noqa: E402
from hiddenstate.report.textview import legend_number, legible  # noqa: E402
from tests.test_report import _PROBE, _browser  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SENTENCES = ['The cat sat on the mat. "Where is the cat?" asked the dog.',
             "The dog sat on the log, and the cat ran to the café.",
             "A cat, a dog and a bird (the small one) sat in the sun all day long."]
TEXT = "\n".join(SENTENCES * 3)


def _family(name):
    return next(f for f in families.registered() if f.name == name)


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory):
    """A Qwen3-Next of 3 layers (2 recurrent) with random weights and a byte-level BPE tokenizer.json beside it."""
    d = tmp_path_factory.mktemp("bpe") / "qwen3_next"
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(SENTENCES, trainer=trainer)
    config = _family("qwen3_next").tiny_config()
    config.vocab_size = tok.get_vocab_size()
    torch.manual_seed(0)
    model = transformers.Qwen3NextForCausalLM(config).eval()
    model.save_pretrained(d)
    tok.save(os.fspath(d / "tokenizer.json"))
    (d.parent / "text.txt").write_text(TEXT, encoding="utf-8")
    return model, tok, d


@pytest.fixture(scope="module")
def bpe_report(bpe_dir, tmp_path_factory):
    model, tok, d = bpe_dir
    out = tmp_path_factory.mktemp("out") / "report.html"
    assert main(["inspect", os.fspath(d), "--text", os.fspath(d.parent / "text.txt"), "--out", os.fspath(out)]) == 0
    ids = np.array(tok.encode(TEXT).ids)
    return out.read_text(encoding="utf-8"), ids


def _payload(page):
    m = re.search(r'<script type="application/json" id="ex-data">(.*?)</script>', page, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


def test_the_tokens_are_the_units_of_text(bpe_dir, bpe_report):
    _, tok, _ = bpe_dir
    page, ids = bpe_report
    data = _payload(page)
    pieces = [tok.decode([int(i)]) for i in ids]
    assert any(len(p) > 1 for p in pieces)  # a real BPE: multi-character tokens (once refused: "not single characters")
    want = [p if p and "\ufffd" not in p else tok.id_to_token(int(i)) for p, i in zip(pieces, ids)]
    assert data["tokens"] is True and data["T"] == ids.size and data["text"] == want
    assert "".join(p for p in want if "\ufffd" not in p).startswith("The cat sat")
    assert data["shown"] == [legible(p) for p in want]
    # the unit features read the tokens: the quote feature comes from the text around each token
    assert 'id="units"' in page and "after reading each token" in page
    assert [lay["name"] for lay in data["layers"]] == ["layer 0", "layer 2"]  # every recurrent layer, not the top one
    top = data["layers"][-1]
    assert top["heads"] == 4 and top["H"] == 4 * 6 and top["matrix"]["H"] == 4  # Hv=4 heads of Dv=6
    assert top["matrix"]["R"] == 8 and top["matrix"]["C"] == 6 and top["matrix"]["steps"][-1] == ids.size - 1


def test_a_partial_byte_shows_the_tokens_own_name():
    class Tok:
        def decode(self, ids):
            return {0: " the", 1: "\ufffd", 2: ""}[ids[0]]

        def id_to_token(self, i):
            return {1: "Ã", 2: "<s>"}[i]

    assert token_pieces(Tok(), np.array([0, 1, 2])) == [" the", "Ã", "<s>"]
    with pytest.raises(TypeError, match="tokenizer must have a decode"):
        token_pieces(object(), [0])
    with pytest.raises(ValueError, match=r"ids must have shape \(T,\)"):
        token_pieces(Tok(), np.zeros((2, 2), dtype=int))


def test_legible_pieces_and_token_features_by_hand():
    assert legible(" ") == "␣" and legible("\n") == "↵\n" and legible("a\tb") == "a→b" and legible("") == "∅"
    assert legible(" the") == " the" and legible("x\ny") == "x↵\ny"
    f = token_features(["The", " cat", ' "', "hi", '"', "\n", "A"])
    # each token's feature is the character feature at its last character
    np.testing.assert_array_equal(f["word start"], [1, 1, 1, 0, 0, 1, 1])  # "\n" starts with whitespace
    # the tokens end at characters 2, 6, 8, 10, 11, 12, 13 of 'The cat "hi"\nA'
    np.testing.assert_array_equal(f["inside quotes"], inside_quotes('The cat "hi"\nA')[[2, 6, 8, 10, 11, 12, 13]])
    np.testing.assert_array_equal(f["upper case"], [0, 0, 0, 0, 0, 0, 1])


def test_the_time_constant_is_one_definition_by_hand():
    # a Mamba channel of two entries kept 0.5 and 0.9 on average: 1/(1 - 0.5) = 2, 1/(1 - 0.9) = 10 -> the slowest, 10
    tau = np.array([[2.0, 10.0], [4.0, 1.0]])  # (Di=2, S=2)
    np.testing.assert_allclose(unit_time_constants(tau, 2), [10.0, 4.0])
    # a head shared by P=3 channels: each has its head's
    np.testing.assert_allclose(unit_time_constants(np.array([5.0, 1.25]), 6), [5, 5, 5, 1.25, 1.25, 1.25])
    assert unit_time_constants(np.array([1.0, 2.0]), 3) is None
    with pytest.raises(ValueError, match="time_constants must have at least one axis"):
        unit_time_constants(3.0, 1)


def test_legend_numbers_keep_three_significant_digits():
    assert legend_number(-3.2e-05) == "-3.20e-05" and legend_number(3.2e-05) == "3.20e-05"  # was "-0.00 to 0.00"
    assert legend_number(0.0) == "0" and legend_number(0.5) == "0.5" and legend_number(0.0012345) == "0.00123"
    assert legend_number(-4.5678) == "-4.57" and legend_number(12345.0) == "12300" and legend_number(2.5e6) == "2.50e+06"


def test_the_warnings_say_what_the_input_cannot_show():
    # the README's 24-token example: 24 - round(0.75 * 24) = 6 steps scored
    w = input_warnings(24, 1, scored=6, ids=np.arange(24), has_text=False)
    assert len(w) == 3 and "only 6 held-out step(s)" in w[0] and f"{1 / math.sqrt(6):.2f}" in w[0]
    assert "PCA of the states rests on 24 point(s)" in w[1]
    assert "random token ids: 100% of its 24 distinct ids occur only once" in w[2]
    assert input_warnings(400, 2, scored=200, ids=np.tile(np.arange(10), 80), has_text=False) == []
    assert not any("random" in s for s in input_warnings(400, 1, scored=100, ids=np.arange(400), has_text=True))


def test_the_lag_is_chosen_from_the_data():
    assert data_lag(1000, [2.0, 300.0]) == 900  # 3 slowest time constants
    assert data_lag(1000, [2.0]) == MIN_LAG and data_lag(20, [2.0]) == 19  # at least 30, at most T - 1
    assert data_lag(500, [np.inf]) == 499 and data_lag(100, None) == MIN_LAG


def test_the_random_ids_and_short_input_warnings_reach_the_report(bpe_dir, tmp_path):
    model, _, _ = bpe_dir
    ids = np.random.default_rng(0).integers(0, model.config.vocab_size, (1, 24))
    an = hs.inspect_model(model, ids, out=tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert len(an.meta["warnings"]) == 3
    assert all(f"<b>Note:</b> {html.escape(w)}</p>" in page for w in an.meta["warnings"])


def test_wide_tables_wrap_or_are_summarised_and_charts_have_ticks():
    wrapped = per_unit_rows([("tau", np.arange(40.0), "{:.3g}")], [str(j) for j in range(40)])
    assert wrapped.count("<table>") == 3 and "<th></th>" not in wrapped  # 16 + 16 + 8 columns
    summary = per_unit_rows([("tau", np.arange(256.0), "{:.3g}")], [str(j) for j in range(256)])
    # min, 10%, median, 90%, max of 0..255 and where the max is: 0, 25.5, 127.5, 229.5, 255, unit 255
    assert re.findall(r"<td>([^<]*)</td>", summary) == ["0", "25.5", "128", "230", "255", "255"]
    svg = line_chart({"a": np.linspace(1, 0, 31)}, "c")
    assert re.findall(r">(\d+)</text>", svg) == ["0", "1", "0", "15", "30"]  # y ticks 0, (0.5), 1; x ticks 0, 15, 30


def test_every_report_has_the_same_header_and_navigation(tmp_path, bpe_report):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((60, 2, 4))
    pages = {"gru": hs.build_report(tmp_path / "g.html", hs.analyze_model(hs.GRU(4, 6, rng=rng), x,
                                                                          n_fixed_point_starts=2, rng=rng))}
    for name, blk in (("mamba", hs.Mamba(8, d_state=4, rng=rng)),
                      ("delta", hs.GatedDeltaNet(8, num_k_heads=2, head_k_dim=4, rng=rng))):
        an = hs.analyze(blk, rng.standard_normal((60, 2, 8)))
        pages[name] = build_family_report(tmp_path / f"{name}.html", an)
    pages = {k: p.read_text(encoding="utf-8") for k, p in pages.items()}
    pages["qwen3_next (hybrid, BPE)"] = bpe_report[0]
    for name, page in pages.items():
        head = re.search(r"<header><h1>[^<]+</h1>(<p class=\"sub\">.*?</p>)?<div class=\"chips\">.*?</div></header>"
                         r"<nav>(.*?)</nav><main>", page, re.S)
        assert head, name
        links = re.findall(r'<a href="#([^"]+)">', head.group(2))
        assert len(links) >= 3 and all(f'id="{a}"' in page for a in links), (name, links)
        assert "<th></th>" not in page and page.count('class="card') >= 3, name
        assert "<footer>hiddenstate " in page, name
    styles = {re.search(r"<style>(.*?)</style>", page, re.S).group(1) for page in pages.values()}
    assert len(styles) == 1 and "--ink:#202124" in styles.pop()  # one style sheet for every report


_DRIVE = """<script>
window.addEventListener('load', function () {
  var res = {errors: []};
  try {
    var X = window.hsExplorer;
    res.spans = Array.prototype.map.call(document.querySelectorAll('#ex-text span'), function (s) { return s.textContent; });
    res.layer0 = document.getElementById('ex-layer').value;
    res.rows_all = document.querySelectorAll('#ex-units li').length;
    res.title_top = document.getElementById('ex-title').textContent;
    X.chooseLayer(0);
    res.title_l0 = document.getElementById('ex-title').textContent;
    res.value_l0 = X.value('y', 5, 7);
    X.chooseHead(%(head)d);
    res.rows_head = Array.prototype.map.call(document.querySelectorAll('#ex-units li'), function (li) { return +li.dataset.unit; });
    res.canvas_head = document.getElementById('ex-canvas').dataset.head;
    res.matrix_hidden = document.getElementById('ex-matrix').hidden;
    var slider = document.getElementById('ex-step');
    slider.value = slider.max; slider.dispatchEvent(new Event('input'));
    res.canvas_step = document.getElementById('ex-canvas').dataset.step;
    res.cells = [];
    for (var r = 0; r < 8; r++) { var row = []; for (var c = 0; c < 6; c++) row.push(X.cell(r, c)); res.cells.push(row); }
    res.mtitle = document.getElementById('ex-mtitle').textContent;
    res.legend = document.getElementById('ex-legend').textContent;
  } catch (e) { res.errors.push(String(e)); }
  res.errors = res.errors.concat(window.__hsErrors || []);
  var pre = document.createElement('pre'); pre.id = 'hs-drive'; pre.textContent = JSON.stringify(res);
  document.body.appendChild(pre);
});
</script>"""


def test_the_explorer_switches_layers_and_heads_in_headless_chromium(bpe_dir, bpe_report, tmp_path):
    browser = _browser()
    if browser is None:
        if os.environ.get("HIDDENSTATE_REQUIRE_BROWSER"):
            pytest.fail("no Chromium found (HIDDENSTATE_REQUIRE_BROWSER is set, so this is an error)")
        pytest.skip("no Chromium found; install it with `apt-get install chromium` or set HIDDENSTATE_CHROMIUM")
    model, _, _ = bpe_dir
    page, ids = bpe_report
    data = _payload(page)
    head = 2
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("<head>", "<head>" + _PROBE, 1).replace("</body>", _DRIVE % {"head": head}
                                                                            + "</body>", 1), encoding="utf-8")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000", "--dump-dom", probed.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r'<pre id="hs-drive">(.*?)</pre>', proc.stdout, re.S)
    assert m, proc.stderr[-2000:]
    res = json.loads(m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    assert res["errors"] == [], res["errors"]
    # one span per token, each the token's legible text (no line break inside a span)
    assert res["spans"] == [s.rstrip("\n") for s in data["shown"]] and len(res["spans"]) == ids.size
    assert res["layer0"] == "1" and res["rows_all"] == 24 and ", layer 2" in res["title_top"]
    assert ", layer 0" in res["title_l0"]
    # the layer selector switched the data: layer 0's unit 5 at step 7 is layer 0's own readout o
    rc = families.recompute_layers(model, ids[None])
    o0 = rc.records[0].o.reshape(ids.size, 1, -1)[:, 0]  # (T, Hv*Dv)
    assert abs(res["value_l0"] - o0[7, 5]) <= np.ptp(o0[:, 5]) / 510 + 1e-9
    # the head selector lists that head's Dv=6 units and draws that head's state
    assert sorted(res["rows_head"]) == list(range(6 * head, 6 * head + 6)) and res["canvas_head"] == str(head)
    assert res["matrix_hidden"] is False and res["canvas_step"] == str(ids.size - 1)
    S = rc.records[0].recurrent[ids.size - 1, 0, head]  # (Dk=8, Dv=6) after the last token
    mat = data["layers"][0]["matrix"]
    span = mat["hi"][head] - mat["lo"][head]
    np.testing.assert_allclose(np.array(res["cells"]), S, atol=span / 510 + 1e-9)
    assert res["mtitle"].startswith(f"head {head} state S_t at step {ids.size - 1}")
    assert re.search(r"values \S+ to \S+, mean", res["legend"])
    assert decode  # the page's decoding is the module's (tests/test_report_explorer.py)


def test_layers_past_the_budget_are_left_out_whole_the_top_layer_never():
    from hiddenstate.report.explorer import explorer_html

    rng = np.random.default_rng(0)
    layers = [{"name": f"layer {i}", "signals": {"y": rng.normal(size=(50, 10)), "decay": rng.uniform(size=(50, 10))}}
              for i in range(3)]
    per = 4 * math.ceil(50 * 10 / 3)  # base64 of one signal: 500 bytes -> 668 characters
    for budget, names, left in ((2 * per + 10, ["layer 2"], "layer 1 (its every signal), layer 0 (its every signal)"),
                                (3 * per, ["layer 1", "layer 2"], "layer 1 decay, layer 0 (its every signal)"),
                                (1, ["layer 2"], "layer 2 decay, layer 1 (its every signal)")):
        frag = explorer_html({"text": ["ab"] * 50, "layers": layers}, max_bytes=budget)
        assert [lay["name"] for lay in _payload(frag)["layers"]] == names, budget
        assert f"Left out to keep the page small: {left}" in frag, budget


def test_saturation_counts_the_output_gate_not_a_decay():
    from hiddenstate.kinds.base import RecordView
    from hiddenstate.probe.state_units import view_explore_data

    T, N, U = 40, 1, 4
    decay = np.full((T, N, U), 0.99)  # a decay always > 0.9: once counted as "saturated" half of the time
    out_gate = np.tile(np.array([0.05, 0.5, 0.95, 0.5]), (T, N, 1))  # unit 0 shut, 2 open, 1 and 3 in between
    view = RecordView(state=np.ones((T, N, 3)), keep=decay, keep_shape=(U,), keep_name="decay", lag_norms=None,
                      units=np.zeros((T, N, U)), unit_keep=decay, out_gate=out_gate)
    ex = view_explore_data(view, "x" * T, None, name="layer 0")
    np.testing.assert_array_equal(ex["units"]["saturation"], [1.0, 0.0, 1.0, 0.0])
    np.testing.assert_allclose(ex["units"]["time constant"], 1 / (1 - 0.99))  # 100 steps, the card's definition
    assert ex["heads"] == 0 and ex["matrix"] is None and ex["name"] == "layer 0"
