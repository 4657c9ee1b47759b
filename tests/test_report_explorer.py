"""The report's explorer: 8-bit activations that decode to the trace's values, and a page that reacts.

The browser test drives headless Chromium like ``tests/test_report.py``: a script injected into a
copy of the page clicks a unit in the list, switches to a gate, hovers a character and selects a
span, and writes what the page then shows (computed background colours, read-outs, matches) as
JSON into the DOM. Each is compared with what Python computes from the trace itself.
"""

from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import pytest

import hiddenstate as hs
from hiddenstate.probe.analysis import analyze_model
from hiddenstate.report import build_report, render_html
from hiddenstate.report.explorer import decode, explorer_html, quantize
from hiddenstate.report.textview import background, colour_scale, legend_number
from tests.test_report import _PROBE, _browser

TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "First Citizen:\nYou are all resolved rather to die than to famish?\n") * 2


def _onehot(text):
    chars = sorted(set(text))
    ids = np.array([chars.index(c) for c in text])
    return np.eye(len(chars))[ids][:, None, :], ids[:, None]


@pytest.fixture(scope="module")
def gru_analysis():
    rng = np.random.default_rng(5)
    x, tok = _onehot(TEXT)
    layer = hs.GRU(x.shape[2], 24, rng=rng)
    return analyze_model(layer, x, tokens=tok, text=TEXT, grad_steps=30, n_fixed_point_starts=4, rng=rng)


def test_quantize_decodes_to_within_half_a_level():
    rng = np.random.default_rng(0)
    v = np.concatenate([rng.normal(size=(300, 5)), np.full((300, 1), 0.25)], axis=1)  # last unit constant
    codes, lo, hi = quantize(v)
    assert codes.dtype == np.uint8 and codes.shape == (6, 300)
    np.testing.assert_array_equal(lo, v.min(axis=0))
    np.testing.assert_array_equal(hi, v.max(axis=0))
    back = decode(codes, lo, hi)
    err = np.abs(back - v).max(axis=0)
    assert np.all(err <= (hi - lo) / 510 + 1e-12) and err[-1] == 0.0
    assert codes[:, v.argmin(axis=0)[0]][0] == 0 and codes[0, v.argmax(axis=0)[0]] == 255
    with pytest.raises(ValueError, match="finite"):
        quantize(np.array([[0.0], [np.nan]]))


def test_colour_scale_by_hand():
    assert colour_scale(-0.5, 0.25) == ("diverging", -0.5, 0.5)
    assert colour_scale(0.1, 0.9) == ("gate", 0.0, 1.0)
    assert colour_scale(0.0, 3.0) == ("sequential", 0.0, 3.0)
    assert background(-0.25, "diverging", -0.5, 0.5) == (0, 114, 178, 0.88 * 0.5)
    assert background(0.75, "gate", 0.0, 1.0) == (213, 94, 0, 0.88 * 0.75)
    assert background(2.0, "sequential", 2.0, 2.0)[3] == 0.0  # an empty scale is white


def test_analysis_feeds_the_explorer(gru_analysis):
    an = gru_analysis
    ex = an.explore
    T = len(TEXT)
    assert list(ex["signals"]) == ["h", "z", "r"]  # the state, then the kind's keep gate first
    np.testing.assert_array_equal(ex["signals"]["h"], an.trace.output[:T, 0])
    np.testing.assert_array_equal(ex["signals"]["z"], an.trace[0].gates["z"][:T, 0])
    tau = 1.0 / (1.0 - an.trace[0].gates["z"][:T, 0].mean(axis=0))
    np.testing.assert_allclose(ex["units"]["time constant"], tau)
    np.testing.assert_allclose(ex["norm"], np.linalg.norm(an.trace.output[:T, 0], axis=1))
    # the bundled text has no double quote: that feature is skipped, and says why
    assert "inside quotes" not in an.units
    assert "no double quote" in an.skipped["feature 'inside quotes'"]
    keep = [g for g in an.gates if g.keep]
    assert [g.name for g in keep] == ["layer 0 z"]  # from the kind's declared keep gate, not the name
    kw = an.report_kwargs()
    assert kw["explore"] is ex and kw["text_units"] is None and "feature 'inside quotes'" in kw["skipped"]


def test_page_stays_small_for_2000_characters_and_512_units():
    rng = np.random.default_rng(1)
    T, H = 2000, 512
    text = "".join(rng.choice(list("abcdefgh ij\n"), size=T))
    h = np.tanh(rng.normal(size=(T, H)))
    gates = {g: 1 / (1 + np.exp(-rng.normal(size=(T, H)))) for g in ("z", "r")}
    units = {"best feature": [f"f{j % 7}" for j in range(H)], "|r|": rng.uniform(size=H),
             "time constant": rng.uniform(1, 50, size=H), "saturation": rng.uniform(size=H)}
    explore = {"text": text, "signals": {"h": h, **gates}, "units": units, "featured": [("a", "h", 3)],
               "norm": np.linalg.norm(h, axis=1)}
    # random values are the worst case for size (nothing compresses)
    page = render_html(explore=explore, text=text, pca=None, loss={"train": np.linspace(3, 1, 500)})
    assert len(page.encode("utf-8")) < 5_000_000, len(page)
    assert "Left out" not in page  # h, z and r all fit
    lstm = {**explore, "signals": {"h": h, "f": gates["z"], "i": gates["r"], "o": gates["r"][::-1]}}
    body = explorer_html(lstm)
    assert len(body) < 4_600_000 and "Left out to keep the page small: o" in body


def test_explorer_rejects_bad_data():
    with pytest.raises(TypeError, match="explore must be a mapping"):
        explorer_html([1, 2])
    with pytest.raises(ValueError, match=r"explore\['signals'\]\['h'\] must have shape"):
        explorer_html({"text": "abc", "signals": {"h": np.zeros((2, 4))}})
    with pytest.raises(ValueError, match="one entry per unit"):
        explorer_html({"text": "abc", "signals": {"h": np.zeros((3, 4))}, "units": {"|r|": np.zeros(3)}})
    with pytest.raises(ValueError, match="names unit 9"):
        explorer_html({"text": "abc", "signals": {"h": np.zeros((3, 4))}, "featured": [("x", "h", 9)]})


_DRIVE = """<script>
window.addEventListener('load', function () {
  var res = {errors: []};
  try {
    var T = %(T)d, K = %(k)d, G = %(g)d, A = %(a)d, B = %(b)d;
    document.getElementById('ex-thr').value = '%(thr)s';
    var spans = document.querySelectorAll('#ex-text span');
    res.n_spans = spans.length;
    res.n_rows = document.querySelectorAll('#ex-units li').length;
    document.querySelector('#ex-units li[data-unit="' + K + '"]').click();
    res.title = document.getElementById('ex-title').textContent;
    res.h_bg = Array.prototype.map.call(spans, function (s) { return getComputedStyle(s).backgroundColor; });
    document.querySelector('#ex-signals button[data-signal="z"]').click();
    res.z_bg = Array.prototype.map.call(spans, function (s) { return getComputedStyle(s).backgroundColor; });
    res.legend = document.getElementById('ex-legend').textContent;
    document.querySelector('#ex-signals button[data-signal="h"]').click();
    spans[G].dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
    res.readout = document.getElementById('ex-readout').textContent;
    var sel = window.getSelection(), r = document.createRange();
    r.setStart(spans[A].firstChild || spans[A], 0); r.setEnd(spans[B].firstChild || spans[B], 1);
    sel.removeAllRanges(); sel.addRange(r);
    document.getElementById('ex-text').dispatchEvent(new MouseEvent('mouseup', {bubbles: true}));
    res.matches = Array.prototype.map.call(document.querySelectorAll('#ex-matches button'), function (b) { return +b.dataset.unit; });
    res.match_head = document.querySelector('#ex-matches div').textContent;
    document.getElementById('ex-thr').value = '5';  // above every value: the same span matches no unit
    document.getElementById('ex-thr').dispatchEvent(new Event('input'));
    res.match_head_5 = document.querySelector('#ex-matches div').textContent;
    document.getElementById('ex-thr').value = '%(thr)s';
    document.getElementById('ex-thr').dispatchEvent(new Event('input'));
    document.getElementById('ex-search').value = 'unit ' + K;
    document.getElementById('ex-search').dispatchEvent(new Event('input'));
    res.found = Array.prototype.map.call(document.querySelectorAll('#ex-units li'), function (li) { return +li.dataset.unit; });
    document.getElementById('ex-search').value = '1';
    document.getElementById('ex-search').dispatchEvent(new Event('input'));
    res.found_1 = Array.prototype.map.call(document.querySelectorAll('#ex-units li'), function (li) { return +li.dataset.unit; });
    res.title_1 = document.getElementById('ex-title').textContent;
  } catch (e) { res.errors.push(String(e)); }
  res.errors = res.errors.concat(window.__hsErrors || []);
  var pre = document.createElement('pre'); pre.id = 'hs-drive'; pre.textContent = JSON.stringify(res);
  document.body.appendChild(pre);
});
</script>"""


def _rgba(css: str) -> tuple[float, ...]:
    nums = [float(v) for v in re.findall(r"[0-9.]+", css)]
    return tuple(nums) if len(nums) == 4 else (*nums, 1.0)


def _expected(values: np.ndarray) -> list[tuple]:
    mode, a, b = colour_scale(values.min(), values.max())
    return [background(float(v), mode, a, b) for v in values]


def _same_colour(css: str, want: tuple, tol: float) -> bool:
    got = _rgba(css)
    if want[3] == 0.0:  # a fully transparent background may read as rgba(0, 0, 0, 0)
        return got[3] <= tol
    return got[:3] == want[:3] and abs(got[3] - want[3]) <= tol


def test_explorer_reacts_in_headless_chromium(tmp_path, gru_analysis):
    browser = _browser()
    if browser is None:
        import os

        if os.environ.get("HIDDENSTATE_REQUIRE_BROWSER"):
            pytest.fail("no Chromium found (HIDDENSTATE_REQUIRE_BROWSER is set, so this is an error)")
        pytest.skip("no Chromium found; install it with `apt-get install chromium` or set HIDDENSTATE_CHROMIUM")
    an = gru_analysis
    T, H = len(TEXT), 24
    h = an.trace.output[:T, 0]  # (T, H): the trace, not the explorer's copy
    z = an.trace[0].gates["z"][:T, 0]
    k = int(np.argmax(np.ptp(h, axis=0)))
    g, thr = 20, 0.2  # hover step, "on" threshold
    q = decode(*quantize(h))  # what the page decodes
    on = q > thr
    # a span of 4 characters on which several units, but not all, are on throughout
    a = next(t for t in range(10, T - 4) if 2 <= on[t:t + 4].all(axis=0).sum() < H)
    b = a + 3
    page = build_report(tmp_path / "r.html", an).read_text(encoding="utf-8")
    drive = _DRIVE % {"T": T, "k": k, "g": g, "a": a, "b": b, "thr": thr}
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("<head>", "<head>" + _PROBE, 1).replace("</body>", drive + "</body>", 1),
                      encoding="utf-8")
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000", "--dump-dom", probed.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r'<pre id="hs-drive">(.*?)</pre>', proc.stdout, re.S)
    assert m, proc.stderr[-2000:]
    res = json.loads(m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    assert res["errors"] == [], res["errors"]
    assert res["n_spans"] == T and res["n_rows"] == H
    assert res["title"].startswith(f"unit {k} · tracks ")
    # quantisation moves a value by at most half a level: (hi - lo) / 510 of the range, i.e. at
    # most 0.88 / 255 in opacity; the page writes 3 decimals and the browser keeps 1/255 steps
    tol = 0.88 / 255 + 0.0005 + 1 / 255
    want_h, want_z = _expected(h[:, k]), _expected(z[:, k])
    bad = [t for t in range(T) if not _same_colour(res["h_bg"][t], want_h[t], tol)]
    assert not bad, [(t, res["h_bg"][t], want_h[t]) for t in bad[:5]]
    bad = [t for t in range(T) if not _same_colour(res["z_bg"][t], want_z[t], tol)]
    assert not bad, [(t, res["z_bg"][t], want_z[t]) for t in bad[:5]]
    assert res["h_bg"] != res["z_bg"]  # the colours changed with the signal
    assert f"values {legend_number(z[:, k].min())} to {legend_number(z[:, k].max())}" in res["legend"]
    # hover: the value, the norm and the most active units at that step
    top = np.lexsort((np.arange(H), -np.abs(h[g])))[:5]
    assert f"‖h‖ = {np.linalg.norm(h[g]):.3f}" in res["readout"]
    assert f"h = {h[g, k]:+.3f}" in res["readout"] or abs(float(re.search(r"h = ([-+0-9.]+)", res["readout"]).group(1))
                                                          - h[g, k]) <= np.ptp(h[:, k]) / 510 + 5e-4
    listed = [int(u) for u in re.findall(r"(\d+) \(", res["readout"].split("top units:")[1])]
    assert listed[0] == top[0] and set(listed) <= set(np.argsort(-np.abs(h[g]))[:7])
    # select a span: units on (h > thr) at every step of it, rarest elsewhere first
    hits = [j for j in range(H) if on[a:b + 1, j].all()]
    rest = {j: (on[:, j].sum() - on[a:b + 1, j].sum()) / (T - (b - a + 1)) for j in hits}
    assert len(hits) >= 2 and res["matches"] == sorted(hits, key=lambda j: (rest[j], j))[:20]
    assert res["match_head"].startswith(f"{len(hits)} unit")
    # a new threshold redoes the match of the same span at once (no new selection needed)
    assert res["match_head_5"] == f"0 units with h > 5 on all of steps {a}–{b}."
    assert k in res["found"]
    # a bare number: that unit first (and shown), then every row whose text contains it (10, 11, ...)
    assert res["found_1"][0] == 1 and res["title_1"].startswith("unit 1 ")
    assert set(range(10, 20)) <= set(res["found_1"][1:]) and 1 not in res["found_1"][1:]
