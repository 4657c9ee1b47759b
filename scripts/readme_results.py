"""Run the experiments whose figures the README shows, keep the numbers, and write the README's tables.

The README's generated tables sit between markers::

    <!-- results:NAME -->
    ...the table, as render() writes it from docs/results.json...
    <!-- /results -->

``docs/results.json`` holds every measurement with the machine, the load average before and
after, the date and the command it came from; ``tests/test_results.py`` checks (without running
anything) that each table between markers equals what :func:`render` makes of that file, so a
figure cannot drift from its measurement. Usage::

    python scripts/readme_results.py run                 # everything (about 10 min of CPU), then render
    python scripts/readme_results.py run --only demo reproduce:copy
    python scripts/readme_results.py run --quick         # the reproductions at their quick settings
    python scripts/readme_results.py render              # rewrite the README's tables from the file
    python scripts/readme_results.py check               # exit 1 when a table differs from the file

Entries: ``reproduce:NAME`` (``hiddenstate reproduce NAME``, seed 0), ``demo`` (the demo preset's
training, as ``hiddenstate demo`` runs it) and ``bench:mingru`` (``benchmarks/bench_mingru.py
--clock cpu``). Everything runs with one BLAS thread, as the command line does.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results.json"
README = ROOT / "README.md"
EXPERIMENTS = ("elman-xor", "elman-letters", "elman-sentences", "adding", "copy", "flipflop")
ENTRIES = tuple(f"reproduce:{n}" for n in EXPERIMENTS) + ("demo", "bench:mingru")
MARKERS = re.compile(r"<!-- results:(?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /results -->\n", re.S)


# -- measuring -----------------------------------------------------------------------------------
def machine() -> dict:
    """The machine a measurement ran on (no host name: nothing identifying)."""
    import numpy

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"platform": platform.platform(terse=True), "processor": platform.machine(), "cpus": cpus,
            "python": platform.python_version(), "numpy": numpy.__version__}


def _measured(command: str, started_load: float, fn) -> dict:
    date = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    children0 = os.times()
    data = fn()
    children1 = os.times()
    cpu = time.process_time() - cpu0 + (children1.children_user - children0.children_user
                                         + children1.children_system - children0.children_system)
    return {"command": command, "date": date, "machine": machine(), "load_before": started_load,
            "load_after": round(os.getloadavg()[0], 2), "wall_s": round(time.perf_counter() - wall0, 1),
            "cpu_s": round(cpu, 1), **data}


def run_reproduce(name: str, quick: bool) -> dict:
    from hiddenstate.experiments import reproduce

    with tempfile.TemporaryDirectory() as out:
        result = reproduce.run(name, quick=quick, out_dir=out, seed=0)
    return {"quick": quick, "title": result["title"], "rows": [list(map(str, r)) for r in result["rows"]]}


def run_demo() -> dict:
    from hiddenstate.train import PRESETS, train

    config = dict(PRESETS["demo"])
    with tempfile.TemporaryDirectory() as out:
        config["out"] = str(Path(out) / "demo")
        result = train(config, progress=False, verbose=False)
    return {"steps": result.step, "of_steps": result.config.steps, "stopped": result.stopped,
            "max_minutes": result.config.max_minutes, "train_seconds": round(result.seconds, 1),
            "val_loss": round(result.val_loss, 4), "val_bpc": round(result.val_bpc, 3),
            "val_ppl": round(result.val_ppl, 2)}


def run_bench_mingru() -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_mingru.py"), "--clock", "cpu"],
                         check=True, capture_output=True, text=True, cwd=ROOT)
    return {"lines": out.stdout.strip().splitlines()}


def measure(entry: str, quick: bool) -> dict:
    """Run one entry and return its record (numbers plus command, date, machine and load)."""
    load = round(os.getloadavg()[0], 2)
    if entry.startswith("reproduce:"):
        name = entry.split(":", 1)[1]
        return _measured(f"hiddenstate reproduce {name}{' --quick' if quick else ''} --seed 0", load,
                         lambda: run_reproduce(name, quick))
    if entry == "demo":
        return _measured("hiddenstate demo (its training: the demo preset)", load, run_demo)
    if entry == "bench:mingru":
        return _measured("python benchmarks/bench_mingru.py --clock cpu", load, run_bench_mingru)
    raise ValueError(f"entry must be one of {', '.join(ENTRIES)}; got {entry!r}.")


# -- rendering -----------------------------------------------------------------------------------
def _when(rec: dict) -> str:
    m = rec["machine"]
    return (f"{rec['date'][:10]}, {m['cpus']} CPUs ({m['processor']}), load average {rec['load_before']:.2f} "
            f"before / {rec['load_after']:.2f} after")


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|")


def render_reproduce(results: dict) -> str:
    recs = [results[f"reproduce:{n}"] for n in EXPERIMENTS if f"reproduce:{n}" in results]
    if not recs:
        return ""
    quick = {r["quick"] for r in recs}
    settings = "quick settings (`--quick`)" if quick == {True} else "full settings" if quick == {False} else \
        "full settings except those marked quick"
    loads = [r["load_before"] for r in recs] + [r["load_after"] for r in recs]
    lines = [f"Measured by `python scripts/readme_results.py` ({settings}, seed 0, one BLAS thread) on "
             f"{recs[0]['date'][:10]}, {recs[0]['machine']['cpus']} CPUs, load average "
             f"{min(loads):.2f}-{max(loads):.2f}; wall time, process CPU time in brackets:", "",
             "| task (`NAME`) | quantity | ours | paper | time |", "|---|---|---|---|---|"]
    for name, rec in zip([n for n in EXPERIMENTS if f"reproduce:{n}" in results], recs):
        for k, (quantity, ours, paper) in enumerate(rec["rows"]):
            head = f"`{name}`{' (quick)' if rec['quick'] and quick != {True} else ''}: {_cell(rec['title'])}"
            time_ = f"{rec['wall_s']:.1f} s ({rec['cpu_s']:.1f} s)"
            lines.append(f"| {head if k == 0 else ''} | {_cell(quantity)} | {_cell(ours)} | {_cell(paper)} | "
                         f"{time_ if k == 0 else ''} |")
    return "\n".join(lines) + "\n"


def render_demo(results: dict) -> str:
    rec = results.get("demo")
    if rec is None:
        return ""
    margin = 60 * rec["max_minutes"] - rec["train_seconds"]
    return "\n".join([
        f"Measured by `python scripts/readme_results.py` ({_when(rec)}):", "",
        "| `hiddenstate demo` | steps | validation nats/char | training time (budget) | wall time (CPU time) |",
        "|---|---|---|---|---|",
        f"| GRU 256, T = 64, lr 8e-3 (the defaults), {rec['of_steps']:,} steps | {rec['steps']:,} "
        f"({rec['stopped']}) | **{rec['val_loss']:.3f}** ({rec['val_bpc']:.2f} bits/char, perplexity "
        f"{rec['val_ppl']:.1f}) | {rec['train_seconds']:.0f} s of {60 * rec['max_minutes']:.0f} s "
        f"({margin:.0f} s to spare) | {rec['wall_s']:.0f} s ({rec['cpu_s']:.0f} s) |",
    ]) + "\n"


def render_bench_mingru(results: dict) -> str:
    rec = results.get("bench:mingru")
    if rec is None:
        return ""
    return "\n".join([f"Measured by `python scripts/readme_results.py` ({_when(rec)}): `{rec['command']}`", "",
                      *rec["lines"]]) + "\n"


RENDERERS = {"reproduce": render_reproduce, "demo": render_demo, "bench-mingru": render_bench_mingru}


def render(results: dict) -> dict:
    """Every generated table: ``{marker name: markdown text}`` (each ends in a newline).

    Parameters
    ----------
    results : dict
        The ``results`` of ``docs/results.json`` (entry name -> record).

    Returns
    -------
    dict of str to str
        One table per marker name of :data:`RENDERERS` whose entries have been measured.
    """
    return {name: text for name, fn in RENDERERS.items() if (text := fn(results))}


def load_results(path=RESULTS) -> dict:
    """The entries of ``docs/results.json`` (empty if the file does not exist yet)."""
    path = Path(path)
    return json.loads(path.read_text(encoding="utf-8"))["results"] if path.exists() else {}


def readme_tables(text: str) -> dict:
    """The bodies between the README's ``<!-- results:NAME -->`` markers, by name."""
    return {m["name"]: m["body"] for m in MARKERS.finditer(text)}


def rewrite(text: str, tables: dict) -> str:
    """``text`` with each marked table replaced by ``tables[name]`` (unknown names left alone)."""
    def put(m):
        body = tables.get(m["name"], m["body"])
        return f"<!-- results:{m['name']} -->\n{body}<!-- /results -->\n"
    return MARKERS.sub(put, text)


def _write(path: Path, text: str) -> None:
    """Replace ``path`` atomically (a temporary file beside it, then ``os.replace``)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("run", "render", "check"))
    parser.add_argument("--only", nargs="+", choices=ENTRIES, metavar="ENTRY", help=f"of: {', '.join(ENTRIES)}")
    parser.add_argument("--quick", action="store_true", help="the reproductions at their quick settings")
    args = parser.parse_args(argv)
    if args.action == "run":
        from threadpoolctl import threadpool_limits
        from tqdm.auto import tqdm

        stored = json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.exists() else {"results": {}}
        entries = args.only or ENTRIES
        with threadpool_limits(limits=1, user_api="blas"), tqdm(entries, unit="entry", file=sys.stderr,
                                                                 disable=None) as bar:
            for entry in bar:
                bar.set_description(entry)
                stored["command"] = "python scripts/readme_results.py " + " ".join(argv or sys.argv[1:])
                stored["results"][entry] = {**measure(entry, args.quick), "script": stored["command"]}
                RESULTS.parent.mkdir(exist_ok=True)
                _write(RESULTS, json.dumps(stored, indent=1, sort_keys=True) + "\n")
                bar.write(f"{entry}: {stored['results'][entry]['wall_s']} s", file=sys.stderr)
    text = README.read_text(encoding="utf-8")
    tables = render(load_results())
    if args.action == "check":
        found = readme_tables(text)
        bad = sorted(n for n in set(found) | set(tables) if found.get(n) != tables.get(n))
        for name in bad:
            print(f"README table {name!r} differs from docs/results.json (run: python scripts/readme_results.py "
                  "render)", file=sys.stderr)
        return 1 if bad else 0
    new = rewrite(text, tables)
    if new != text:
        _write(README, new)
        print(f"rewrote {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("readme_results.py: interrupted", file=sys.stderr)
        sys.exit(130)
