"""The README's result tables are generated: each table between markers equals what
scripts/readme_results.py renders from docs/results.json (nothing is run here)."""
import importlib.util
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def load_script():
    spec = importlib.util.spec_from_file_location("readme_results", ROOT / "scripts" / "readme_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = load_script()


def test_every_marked_readme_table_equals_the_stored_results():
    tables = script.render(script.load_results())
    found = script.readme_tables(README)
    assert set(found) == set(tables), "run: python scripts/readme_results.py render"
    for name, body in found.items():
        assert body == tables[name], f"README table {name!r} differs from docs/results.json; run: " \
                                     "python scripts/readme_results.py render"


def test_markers_are_paired_and_unique():
    opened = re.findall(r"<!-- results:([\w-]+) -->", README)
    assert sorted(opened) == sorted(set(opened)) and opened
    assert README.count("<!-- /results -->") == len(opened)


def test_the_results_file_says_where_when_and_how_each_figure_was_measured():
    stored = json.loads((ROOT / "docs" / "results.json").read_text(encoding="utf-8"))
    assert set(stored["results"]) <= set(script.ENTRIES)
    for entry, rec in stored["results"].items():
        assert rec["command"] and rec["script"].startswith("python scripts/readme_results.py run"), entry
        assert rec["date"][:2] == "20", entry
        assert rec["machine"]["cpus"] >= 1 and rec["machine"]["numpy"], entry
        assert rec["load_before"] >= 0 and rec["load_after"] >= 0, entry
        assert rec["wall_s"] > 0 and rec["cpu_s"] >= 0, entry


RECORD = {"command": "c", "date": "2030-01-02T03:04:05+00:00", "load_before": 0.5, "load_after": 1.25,
          "machine": {"cpus": 2, "processor": "x86_64", "platform": "p", "python": "3", "numpy": "2"},
          "wall_s": 61.0, "cpu_s": 50.2}


def test_render_writes_the_records_numbers():
    demo = dict(RECORD, steps=900, of_steps=1000, stopped="time", max_minutes=3.0, train_seconds=150.4,
                val_loss=1.72949, val_bpc=2.4951, val_ppl=5.638)
    rep = dict(RECORD, quick=True, title="Adding (Arjovsky 2016)", rows=[["GRU MSE", "0.0003", "low"],
                                                                         ["a|b", "1", "2"]])
    tables = script.render({"demo": demo, "reproduce:adding": rep})
    assert set(tables) == {"demo", "reproduce"}
    assert "| 900 (time) | **1.729** (2.50 bits/char, perplexity 5.6) | 150 s of 180 s (30 s to spare)" in tables["demo"]
    assert "2030-01-02, 2 CPUs (x86_64), load average 0.50 before / 1.25 after" in tables["demo"]
    lines = tables["reproduce"].splitlines()
    assert "quick settings" in lines[0] and "load average 0.50-1.25" in lines[0]
    assert lines[-2] == "| `adding`: Adding (Arjovsky 2016) | GRU MSE | 0.0003 | low | 61.0 s (50.2 s) |"
    assert lines[-1] == "|  | a\\|b | 1 | 2 |  |"  # a pipe in a cell is escaped


def test_rewrite_replaces_only_what_is_between_markers():
    text = "a\n<!-- results:demo -->\nold\n<!-- /results -->\nb 1.683\n<!-- results:other -->\nkeep\n<!-- /results -->\n"
    new = script.rewrite(text, {"demo": "new\n"})
    assert new == text.replace("old\n", "new\n")
    assert script.readme_tables(new) == {"demo": "new\n", "other": "keep\n"}


def test_the_check_command_agrees(capsys):
    assert script.main(["check"]) == 0, capsys.readouterr().err
