"""The HTML report: self-contained, escapes text, and renders in a real browser without errors.

The browser test runs headless Chromium (Debian package ``chromium``). It injects a probe script
at the top of a copy of the page that records uncaught errors, failed resource loads and
``console.error`` calls, and after ``load`` writes a JSON summary (images loaded, errors) into the
DOM, which ``--dump-dom`` prints. Without a browser the test is skipped, unless the environment
variable ``HIDDENSTATE_REQUIRE_BROWSER`` is set (CI), where a missing browser is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from hiddenstate.probe.fixedpoints import find_fixed_points
from hiddenstate.probe.gatestats import gate_statistics
from hiddenstate.probe.memory import memory_curve
from hiddenstate.probe.pca import pca
from hiddenstate.report import build_report, render_html

TEXT = 'He said "hello (there)" and left.\nShe said "bye".\n<b>not bold</b> & more\n'


def _measurements(rng):
    T, H = len(TEXT), 6
    W = rng.normal(size=(H, H))
    W *= 0.8 / np.linalg.svd(W, compute_uv=False)[0]
    U = rng.normal(size=(H, 3))
    x = rng.normal(size=(T, 3))
    h = np.zeros(H)
    hs = np.empty((T, H))
    for t in range(T):
        h = np.tanh(W @ h + U @ x[t])
        hs[t] = h
    z = 1.0 / (1.0 + np.exp(-rng.normal(size=(T, 1, H)) * 3))

    def F(v):
        return np.tanh(W @ v)

    def J(v):
        return (1.0 - np.tanh(W @ v) ** 2)[:, None] * W

    lags = np.arange(30)
    return dict(
        title="Test report",
        subtitle="tanh RNN, H=6",
        meta={"cell": "RNN", "H": H, "val loss": 1.2345},
        loss={"train": np.linspace(3, 1, 50), "val": (np.arange(0, 50, 10), np.linspace(3, 1.2, 5))},
        gates=[gate_statistics(z, name="layer 0 z"), gate_statistics(z[::-1] ** 2, name="layer 0 r")],
        gradient={"tanh": (lags, 0.8**lags)},
        gradient_refs={"bound 0.9^k": (lags, 0.9**lags)},
        memory={"x": memory_curve(hs, x, max_lag=5)},
        pca=pca(hs),
        fixed_points=find_fixed_points(F, J, hs[::20]),
        text=TEXT,
        text_units={"unit 0": hs[:, 0], "gate z unit 1": z[:, 0, 1]},
        tables={"Pascanu bound": [{"matrix": "weight_hh_l0", "sigma_max": 0.8, "bound": 1.0}]},
    )


@pytest.fixture(scope="module")
def measurements():
    return _measurements(np.random.default_rng(0))


def test_report_is_self_contained(tmp_path, measurements):
    path = build_report(tmp_path / "sub" / "r.html", **measurements)
    assert path.exists()
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    # every src/href is inline data or an in-page anchor: nothing is fetched
    refs = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert refs and all(r.startswith("data:image/png;base64,") or r.startswith("#") for r in refs)
    assert "http://" not in page and "https://" not in page
    assert page.count("<img") == 6  # loss, gates, gradient, memory, pca, eigenvalues
    for anchor in ("loss", "gates", "gradient", "memory", "pca", "fixed", "text"):
        assert f'id="{anchor}"' in page


def test_report_escapes_text(measurements):
    page = render_html(text=TEXT, text_units={"u": np.linspace(-1, 1, len(TEXT))})
    assert "<b>not bold</b>" not in page
    assert "&lt;" in page and "&amp;" in page


def test_empty_report_renders():
    page = render_html()
    assert "No measurements were given" in page


def test_report_errors(tmp_path, rng):
    with pytest.raises(TypeError, match="unknown keyword"):
        build_report(tmp_path / "r.html", colour="red")
    with pytest.raises(ValueError, match="one value per character"):
        build_report(tmp_path / "r.html", text="abc", text_units={"u": np.zeros(2)})
    with pytest.raises(ValueError, match="must be finite"):
        build_report(tmp_path / "r.html", text="abc", text_units={"u": np.array([0.0, np.nan, 1.0])})
    with pytest.raises(ValueError, match="equal-length"):
        build_report(tmp_path / "r.html", loss={"train": (np.arange(3), np.arange(4.0))})


# ---------------------------------------------------------------------------- browser

_PROBE = """<script>
window.__hsErrors = [];
window.addEventListener('error', function (e) {
  var t = e.target;
  if (t && t !== window && (t.src || t.href)) { window.__hsErrors.push('resource failed: ' + (t.alt || t.src || t.href).slice(0, 80)); }
  else { window.__hsErrors.push('uncaught: ' + e.message); }
}, true);
(function () { var ce = console.error;
  console.error = function () { window.__hsErrors.push('console.error: ' + Array.prototype.join.call(arguments, ' ')); ce.apply(console, arguments); };
})();
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var res = {
    images: imgs.length,
    broken: imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); }).map(function (i) { return i.alt; }),
    widths: imgs.map(function (i) { return i.naturalWidth; }),
    errors: window.__hsErrors,
    title: document.title,
    sections: document.querySelectorAll('section').length,
    height: document.body.scrollHeight
  };
  var pre = document.createElement('pre'); pre.id = 'hs-probe'; pre.textContent = JSON.stringify(res);
  document.body.appendChild(pre);
});
</script>"""


def _browser():
    explicit = os.environ.get("HIDDENSTATE_CHROMIUM")
    if explicit:
        return explicit
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_report_renders_in_headless_chromium(tmp_path, request):
    browser = _browser()
    if browser is None:
        msg = ("no Chromium found; install it with `apt-get install chromium` (Debian/Ubuntu) or set "
               "HIDDENSTATE_CHROMIUM=/path/to/chrome to run this test")
        if os.environ.get("HIDDENSTATE_REQUIRE_BROWSER"):
            pytest.fail(msg + " (HIDDENSTATE_REQUIRE_BROWSER is set, so this is an error)")
        pytest.skip(msg)
    measurements = request.getfixturevalue("measurements")  # only built once a browser is known
    path = build_report(tmp_path / "report.html", **measurements)
    page = path.read_text(encoding="utf-8")
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("<head>", "<head>" + _PROBE, 1), encoding="utf-8")
    cmd = [
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
        f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
        "--virtual-time-budget=10000", "--dump-dom", probed.as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = re.search(r'<pre id="hs-probe">(.*?)</pre>', proc.stdout, re.S)
    assert m, "the page never reached its load event:\n" + proc.stderr[-2000:]
    res = json.loads(m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    assert res["title"] == "Test report"
    assert res["images"] == page.count("<img") >= 6
    assert res["broken"] == [], res
    assert all(w > 100 for w in res["widths"]), res
    assert res["errors"] == [], res
    assert res["sections"] >= 8
    assert res["height"] > 1000  # laid out, not collapsed
    # the browser's own console log: no uncaught exception or error message from the page
    console = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln]
    assert not [ln for ln in console if "Uncaught" in ln or "rror" in ln], console
