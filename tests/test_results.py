"""The documentation's result tables are generated: each table between markers, in the README or
in a page of docs/, equals what scripts/readme_results.py renders from docs/results.json (nothing is
run here), and each is marked in exactly one place."""
import importlib.util
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load_script():
    spec = importlib.util.spec_from_file_location("readme_results", ROOT / "scripts" / "readme_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = load_script()
TEXTS = {path: path.read_text(encoding="utf-8") for path in script.documents()}


def test_the_documents_are_the_readme_and_every_docs_page():
    assert script.documents()[0] == ROOT / "README.md"
    assert set(script.documents()[1:]) == set((ROOT / "docs").rglob("*.md")) and len(TEXTS) >= 10


def test_every_marked_table_equals_the_stored_results():
    tables = script.render(script.load_results())
    found, _, _ = script.marked(TEXTS)
    assert set(found) == set(tables), "run: python scripts/readme_results.py render"
    for name, body in found.items():
        assert body == tables[name], f"table {name!r} differs from docs/results.json; run: " \
                                     "python scripts/readme_results.py render"


def test_every_marked_figure_equals_the_stored_results():
    figures = script.render_figures(script.load_results())
    _, found, _ = script.marked(TEXTS)
    assert set(found) == set(figures), "run: python scripts/readme_results.py render"
    for name, body in found.items():
        assert body == figures[name], f"figure {name!r} differs from docs/results.json"


def test_markers_are_paired_and_each_name_is_marked_in_one_place():
    opened_anywhere = []
    for text in TEXTS.values():
        for kind in ("results", "figure"):
            opened = re.findall(rf"<!-- {kind}:([\w-]+) -->", text)
            assert sorted(opened) == sorted(set(opened))
            assert text.count(f"<!-- /{kind} -->") == len(opened)
            opened_anywhere += [(kind, name) for name in opened]
    assert opened_anywhere and len(opened_anywhere) == len(set(opened_anywhere))
    _, _, places = script.marked(TEXTS)
    assert all(len(paths) == 1 for paths in places.values())
    assert script.problems(TEXTS, script.render(script.load_results()),
                           script.render_figures(script.load_results())) == []


def _generated(texts):
    results = script.load_results()
    return script.problems(texts, script.render(results), script.render_figures(results)) == []


def test_a_changed_digit_in_any_generated_table_or_figure_is_caught():
    assert _generated(TEXTS)
    n = 0
    for path, text in TEXTS.items():
        spans = [m.span("body") for m in [*script.MARKERS.finditer(text), *script.FIGURES.finditer(text)]]
        n += len(spans)
        for start, end in spans:
            k = start + re.search(r"\d", text[start:end]).start()
            edited = text[:k] + str((int(text[k]) + 1) % 10) + text[k + 1:]
            assert not _generated({**TEXTS, path: edited}), (path, text[start:end][:80])
    assert n >= 10


def test_a_table_marked_twice_or_nowhere_is_a_problem(tmp_path):
    tables = {"demo": "new\n", "other": "x\n"}
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    texts = {a: "<!-- results:demo -->\nnew\n<!-- /results -->\n", b: "<!-- results:demo -->\nnew\n<!-- /results -->\n"}
    found = script.problems(texts, tables, {})
    assert any("'demo' is marked in 2 places" in p for _, p in found)
    assert ("nowhere", "table 'other' is measured but no page marks it") in found
    assert script.problems({a: texts[a], b: "<!-- results:other -->\nx\n<!-- /results -->\n"}, tables, {}) == []
    stale = script.problems({a: texts[a].replace("new", "old"), b: "<!-- results:other -->\nx\n<!-- /results -->\n"},
                            tables, {})
    assert stale == [(str(a), "table 'demo' differs from docs/results.json")]


def test_the_results_file_says_where_when_and_how_each_figure_was_measured():
    stored = json.loads((ROOT / "docs" / "results.json").read_text(encoding="utf-8"))
    assert set(stored["results"]) <= set(script.ENTRIES) | set(script.HAND_ONLY)
    for entry, rec in stored["results"].items():
        assert rec["command"] and rec["date"][:2] == "20" and rec["machine"]["cpus"] >= 1, entry
        if rec.get("measured_by", "").startswith("hand"):  # typed from a real run before the script existed
            assert re.search(r"commit [0-9a-f]{7}", rec["source"]) and rec["load"], entry
            assert entry in script.HAND_ONLY or rec["command"] == script.training_command(entry.split(":", 1)[1])
            continue
        assert "measured_by" not in rec and entry in script.ENTRIES, entry
        assert rec["script"].startswith("python scripts/readme_results.py run"), entry
        assert rec["machine"]["numpy"], entry
        assert rec["load_before"] >= 0 and rec["load_after"] >= 0, entry
        assert rec["wall_s"] >= 0 and rec["cpu_s"] >= 0, entry


def test_each_training_entry_is_the_command_it_names():
    assert script.training_command("long") == "hiddenstate train --preset long"
    assert script.training_command("mingru96x3") == \
        "hiddenstate train --preset mingru --steps 1500 --hidden-size 96 --num-layers 3"
    config = script.training_config("mingru96x3")
    assert (config["cell"], config["hidden_size"], config["num_layers"], config["steps"]) == ("mingru", 96, 3, 1500)
    assert set(script.CALIBRATION) <= set(script.TRAININGS)
    assert {e for _, es in script.MINGRU_ROWS for e in es} <= set(script.ENTRIES)


RECORD = {"command": "c", "date": "2030-01-02T03:04:05+00:00", "load_before": 0.5, "load_after": 1.25,
          "machine": {"cpus": 2, "processor": "x86_64", "platform": "p", "python": "3", "numpy": "2"},
          "wall_s": 61.0, "cpu_s": 50.2}


def test_render_writes_the_records_numbers():
    demo = dict(RECORD, steps=900, of_steps=1000, stopped="time", max_minutes=3.0, train_seconds=150.4,
                val_loss=1.72949, val_bpc=2.4951, val_ppl=5.638)
    rep = dict(RECORD, quick=True, title="Adding (Arjovsky 2016)", rows=[["GRU MSE", "0.0003", "low"],
                                                                         ["a|b", "1", "2"]])
    tables = script.render({"demo": demo, "reproduce:adding": rep})
    assert set(tables) == {"demo", "reproduce", "mingru-runs"}  # the demo is the minGRU table's first row too
    assert tables["mingru-runs"].splitlines()[-1].startswith("| GRU 256, the defaults, `--preset demo` (the demo's "
                                                             "table above) | 900 of 1,000 (time) | **1.7295** | ")
    assert "| 900 (time) | **1.729** (2.50 bits/char, perplexity 5.6) | 150 s of 180 s (30 s to spare)" in tables["demo"]
    assert "2030-01-02, 2 CPUs (x86_64), load average 0.50 before / 1.25 after" in tables["demo"]
    lines = tables["reproduce"].splitlines()
    assert "quick settings" in lines[0] and "load average 0.50-1.25" in lines[0]
    assert lines[-2] == "| `adding`: Adding (Arjovsky 2016) | GRU MSE | 0.0003 | low | 61.0 s (50.2 s) |"
    assert lines[-1] == "|  | a\\|b | 1 | 2 |  |"  # a pipe in a cell is escaped


def test_training_rows_and_figures_come_from_the_records():
    hand = {"measured_by": "hand, before", "date": "2026-11-29", "steps": 4000, "of_steps": 4000, "stopped": "steps",
            "val_loss": 1.5825, "val_loss_raw": 1.583, "wall_s": 37 * 60, "cpu_s": None}
    ran = dict(RECORD, steps=700, of_steps=1000, stopped="time", val_loss=1.61234, val_loss_raw=None)
    results = {"train:gru512x2-d0.4-wd0.1-ema": hand, "train:long": ran}
    lines = script.render_calibration(results).splitlines()
    assert lines[-2] == ("| **long preset: 2 x GRU 512, T = 100, dropout 0.4, lr 3e-3** | 700 of 1,000 (time) | "
                         "**1.6123** | 61 s (50 s) | script, 2030-01-02, load 0.5 before, 1.2 after: `train:long` |")
    assert lines[-1].endswith("| 4,000 | 1.5825 (raw weights 1.583) | 37 min (CPU time not recorded) | "
                              "by hand, 2026-11-29: `train:gru512x2-d0.4-wd0.1-ema` |")
    assert script.render_figures(results)["long-range"] == "1.5825 and 1.6123"  # min and max of the long runs
    bench = {"lines": ["forward + backward, N=4, I=H=16, float32", "| T | minGRU scan ms | minGRU loop / scan |",
                       "|---|---|---|", "| 2048 | 3.6 | 1.72 |"]}
    assert script.render_figures({"bench:mingru-small": bench})["scan-small"].startswith(
        "a 1.7x faster scan than the per-step loop at N H = 64, T = 2,048")


def test_run_training_reports_the_run_and_the_raw_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(script.tempfile, "tempdir", str(tmp_path))
    tiny = {"hidden_size": 8, "seq_len": 8, "batch_size": 4, "steps": 12, "eval_every": 6, "save_every": 6}
    rec = script.run_training(tiny | {"ema": 0.9})
    assert (rec["steps"], rec["of_steps"], rec["stopped"]) == (12, 12, "steps")
    assert [s for s, _ in rec["val_curve"]] == [6, 12] and rec["val_curve"][-1][1] == rec["val_loss"]
    assert abs(rec["val_loss_raw"] - rec["val_loss"]) > 1e-3  # 12 steps: the average lags the raw weights
    near = script.run_training(tiny | {"ema": 1e-9})  # an average of (almost) only the last weights
    assert abs(near["val_loss_raw"] - near["val_loss"]) < 1e-3
    assert script.run_training(tiny)["val_loss_raw"] is None


def test_rewrite_replaces_only_what_is_between_markers():
    text = "a\n<!-- results:demo -->\nold\n<!-- /results -->\nb 1.683\n<!-- results:other -->\nkeep\n<!-- /results -->\n"
    new = script.rewrite(text, {"demo": "new\n"})
    assert new == text.replace("old\n", "new\n")
    assert script.readme_tables(new) == {"demo": "new\n", "other": "keep\n"}
    inline = "took <!-- figure:demo-share -->67 s<!-- /figure --> and <!-- figure:x -->1<!-- /figure -->.\n"
    assert script.rewrite(inline, {}, {"demo-share": "70 s"}) == inline.replace("67 s", "70 s")
    assert script.readme_figures(inline) == {"demo-share": "67 s", "x": "1"}


def test_the_check_command_agrees(capsys):
    assert script.main(["check"]) == 0, capsys.readouterr().err


def test_the_readme_counts_the_registered_families():
    """The README's count of families is the registry's (it said 31 after 8 more were registered)."""
    from hiddenstate.interop import families

    text = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    said = re.search(r"in (\d+)\s+families of transformers", text)
    assert said is not None and int(said.group(1)) == len(families.registered())
