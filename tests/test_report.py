"""The HTML report: self-contained, escapes text, and renders in a real browser without errors.

The browser test runs headless Chromium (Debian package ``chromium``). It injects a probe script
at the top of a copy of the page that records uncaught errors, failed resource loads and
``console.error`` calls, and after ``load`` writes a JSON summary (images loaded, errors) into the
DOM, which ``--dump-dom`` prints. Without a browser the test is skipped, unless the environment
variable ``HIDDENSTATE_REQUIRE_BROWSER`` is set (CI), where a missing browser is a failure.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest

import hiddenstate.report
from hiddenstate.probe.fixedpoints import find_fixed_points
from hiddenstate.probe.gatestats import gate_statistics
from hiddenstate.probe.memory import memory_curve
from hiddenstate.probe.pca import pca
from hiddenstate.report import build_report, render_html
from hiddenstate.report.plots import (
    eigenvalue_figure,
    gates_figure,
    gradient_figure,
    is_keep_gate,
    loss_figure,
    memory_figure,
    pca_figure,
)
from hiddenstate.report.textview import text_views_html

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


def test_style_sheet_and_script_are_package_data_inlined_once():
    static = pathlib.Path(hiddenstate.report.__file__).parent / "static"
    css = (static / "report.css").read_text(encoding="utf-8")
    js = (static / "report.js").read_text(encoding="utf-8")
    page = render_html()
    assert page.count(css) == 1 and page.count(js) == 1
    assert page.index("<style>") < page.index(css) < page.index("</style>")
    assert page.index("<script>") < page.index(js) < page.index("</script>")
    assert "<link" not in page and "<script src" not in page


def test_package_data_ships_the_static_files():
    tomllib = pytest.importorskip("tomllib")
    root = pathlib.Path(__file__).resolve().parents[1]
    with open(root / "pyproject.toml", "rb") as f:
        globs = tomllib.load(f)["tool"]["setuptools"]["package-data"]["hiddenstate.report"]
    static = pathlib.Path(hiddenstate.report.__file__).parent / "static"
    files = sorted(p.name for p in static.iterdir() if p.is_file())
    assert {"report.css", "report.js"} <= set(files)
    assert all(any(fnmatch.fnmatch(f"static/{name}", g) for g in globs) for name in files), (files, globs)


def test_report_imports_no_probe_train_or_app():
    forbidden = ("hiddenstate.probe", "hiddenstate.train", "hiddenstate.pipelines.app", "hiddenstate.cli",
                 "hiddenstate.experiments")
    package = pathlib.Path(hiddenstate.report.__file__).parent
    seen = set()
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # function-local ones too
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, (path.name, node.module)
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            seen.update(names)
            bad = [n for n in names if n.startswith(forbidden)]
            assert not bad, (path.name, bad)
    assert "hiddenstate.report.figures" in seen  # the walk saw the package's own imports


def test_render_html_checks_its_options():
    with pytest.raises(ValueError, match="max_chars must be a positive integer; got 0"):
        render_html(max_chars=0)
    with pytest.raises(TypeError, match="max_chars must be a positive integer; got float"):
        render_html(max_chars=2.5)
    with pytest.raises(TypeError, match="project_fixed_points must be a bool; got str"):
        render_html(project_fixed_points="yes")


def test_text_view_truncates_and_colours_by_sign():
    text = "ab\ncd"
    page = render_html(text=text, text_units={"u": [1.0, -1.0, 0.0, 0.5, -0.5]}, max_chars=4)
    assert "(first 4 of 5 characters)" in page
    spans = re.findall(r'<span (?:class="nl" )?style="([^"]*)" data-t="(\d+)" data-v="([^"]*)"', page)
    assert [(t, v) for _, t, v in spans] == [("0", "1.000"), ("1", "-1.000"), ("2", "0.000"), ("3", "0.500")]
    # diverging scale symmetric about 0 with max |v| = 1: alpha 0.88 * |v|, warm + and cool -
    assert spans[0][0] == "background:rgba(213,94,0,0.88);color:#fff"
    assert spans[1][0] == "background:rgba(0,114,178,0.88);color:#fff"
    assert spans[3][0] == "background:rgba(213,94,0,0.44)"
    assert '<span class="nl"' in page  # the newline is a marked span, not a raw line break only


def test_text_view_of_gate_values_uses_zero_to_one():
    frag = text_views_html("xyz", {"gate": np.array([0.25, 0.5, 1.0])})
    alphas = [float(a) for a in re.findall(r"background:rgba\(213,94,0,([0-9.]+)\)", frag)]
    assert alphas == [0.22, 0.44, 0.88]  # 0.88 * v on the fixed [0, 1] scale
    assert frag.count("<pre") == 1 and ">0<" in frag and ">1<" in frag  # legend_number: 3 significant digits


def test_build_report_takes_a_duck_typed_analysis(tmp_path):
    class Measured:
        def report_kwargs(self):
            return {"title": "from analysis", "meta": {"H": 3}, "loss": np.linspace(2, 1, 5)}

    page = build_report(tmp_path / "a.html", Measured()).read_text(encoding="utf-8")
    assert "<title>from analysis</title>" in page and 'id="loss"' in page and "H: <b>3</b>" in page
    page = build_report(tmp_path / "b.html", Measured(), title="given").read_text(encoding="utf-8")
    assert "<title>given</title>" in page  # a keyword overrides the analysis


def test_figures_one_per_measurement(measurements):
    fig = loss_figure({"train": np.array([3.0, 2.0, np.nan, 1.25])})
    assert [t.get_text() for t in fig.axes[0].texts] == ["1.250"]  # last finite value
    gates = measurements["gates"]
    assert [is_keep_gate(g.name) for g in gates] == [True, False]
    assert len(gates_figure(gates).axes) == 2  # scatter + time constants of the keep gate
    assert len(gates_figure(gates[1:]).axes) == 1
    assert is_keep_gate("layer 1 forget") and is_keep_gate("F") and not is_keep_gate("") and not is_keep_gate("o")
    assert len(pca_figure(measurements["pca"], measurements["fixed_points"]).axes) == 3  # + colour bar
    fig = gradient_figure({"g": (np.arange(4), np.array([1.0, 0.1, 0.0, 0.01]))})
    assert fig.axes[0].get_yscale() == "log" and len(fig.axes[0].lines) == 1
    fig = eigenvalue_figure(measurements["fixed_points"])
    assert {t.get_text() for t in fig.axes[0].get_legend().get_texts()} == {p.kind for p in measurements["fixed_points"]}
    fig = memory_figure(measurements["memory"])
    assert fig.axes[0].get_ylabel() == "held-out R²"


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
  var nl = document.querySelector('pre.chars span.nl');
  if (nl) { nl.dispatchEvent(new MouseEvent('mouseover', {bubbles: true})); }
  var imgs = Array.prototype.slice.call(document.images);
  var res = {
    images: imgs.length,
    broken: imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); }).map(function (i) { return i.alt; }),
    widths: imgs.map(function (i) { return i.naturalWidth; }),
    errors: window.__hsErrors,
    title: document.title,
    sections: document.querySelectorAll('section').length,
    height: document.body.scrollHeight,
    readout: nl ? document.getElementById(nl.parentNode.dataset.readout).textContent : null
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
    # hovering a newline reads out its step, the character as JSON writes it, and its value
    t = TEXT.index("\n")
    assert re.fullmatch(rf't = {t}   "\\n"   value -?[0-9]+\.[0-9]{{3}}', res["readout"]), res["readout"]
    # the browser's own console log: no uncaught exception or error message from the page
    console = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln]
    assert not [ln for ln in console if "Uncaught" in ln or "rror" in ln], console


def test_build_report_never_overwrites_a_file_that_is_not_a_report(tmp_path):
    from hiddenstate.report import build_report

    precious = tmp_path / "notes.html"
    precious.write_text("my own notes", encoding="utf-8")
    with pytest.raises(ValueError, match="exists and is something else"):
        build_report(precious, title="t", meta={"a": 1})
    assert precious.read_text(encoding="utf-8") == "my own notes"
    first = build_report(tmp_path / "r.html", title="first", meta={"a": 1})
    again = build_report(first, title="second", meta={"a": 2})  # a previous report is replaced
    assert "second" in again.read_text(encoding="utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.html", "r.html"]  # no temporary left
