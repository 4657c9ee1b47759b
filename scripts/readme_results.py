"""Run the experiments whose figures the documentation shows, keep the numbers, and write its tables.

The generated tables of the documentation (the README and the pages of docs/, :data:`DOCUMENTS`)
sit between markers, each name in one place::

    <!-- results:NAME -->
    ...the table, as render() writes it from docs/results.json...
    <!-- /results -->

``docs/results.json`` holds every measurement with the machine, the load average before and
after, the date and the command it came from; ``tests/test_results.py`` checks (without running
anything) that each table between markers equals what :func:`render` makes of that file, so a
figure cannot drift from its measurement. Usage::

    python scripts/readme_results.py run                 # the short entries (7 min on 2026-12-01), then render
    python scripts/readme_results.py run --all           # also every train:NAME (recorded times: 7.5 hours)
    python scripts/readme_results.py run --only demo reproduce:copy
    python scripts/readme_results.py run --quick         # the reproductions at their quick settings
    python scripts/readme_results.py render              # rewrite the pages' tables from the file
    python scripts/readme_results.py check               # exit 1 when a table differs from the file

Entries: ``reproduce:NAME`` (``hiddenstate reproduce NAME``, seed 0), ``demo`` (the demo preset's
training, as ``hiddenstate demo`` runs it), ``train:NAME`` (one training run of :data:`TRAININGS`:
``hiddenstate train`` with that configuration; the long ones take up to 80 minutes each),
``bench:mingru`` (``benchmarks/bench_mingru.py --clock cpu``), ``bench:mingru-small`` (the same at
N H = 64), ``bench:threads`` (``benchmarks/bench_threads.py``, one BLAS thread against two),
``bench:distributed`` (``benchmarks/bench_distributed.py``: 2 processes against 1), ``distributed:long``
(the long preset's model on 2 processes, :data:`DISTRIBUTED_LONG`; 30 minutes), ``families`` (each
registered transformers family's tiny random model, ``Family.tiny_config``, its recurrent layers
recomputed by :func:`hiddenstate.interop.families.recompute_layers`: families registered later are
picked up without an edit here) and ``corpus`` (sizes of the bundled text). Everything runs with one BLAS thread, as the command line
does (``bench:threads`` sets its own). Records whose ``measured_by`` starts with ``hand`` were typed
into the README from real runs before this script existed: they keep the commit that brought them
(``source``) and what is known of the machine and load; ``run --only ENTRY`` replaces one with a
measured record. ``hand:*`` entries are such figures with no command that regenerates them (the
load they describe, or an analysis of a checkpoint no script writes).

Besides the tables, single figures inside sentences are generated the same way, between inline
markers ``<!-- figure:NAME -->...<!-- /figure -->``.
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


def documents() -> list:
    """The files whose marked tables and figures this script writes: the README and every page of docs/."""
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


#: Same as :func:`documents` at import time (the pages may move; the function looks again).
DOCUMENTS = documents()
EXPERIMENTS = ("elman-xor", "elman-letters", "elman-sentences", "adding", "copy", "flipflop")
#: Training runs the README's tables quote: name -> (row label, configuration). ``preset`` names the
#: base of :data:`hiddenstate.train.PRESETS`; the other keys are TrainConfig fields (``--field-name``).
TRAININGS = {
    "gru256-lr8e-3": ("**GRU 256, T = 64, lr 8e-3** (the defaults)", {"preset": "demo", "steps": 1500}),
    "gru256-lr5e-3": ("GRU 256, T = 64, lr 5e-3", {"lr": 5e-3, "steps": 1500}),
    "gru256-lr3e-3": ("GRU 256, T = 64, lr 3e-3", {"lr": 3e-3, "steps": 2000}),
    "lstm256-lr3e-3": ("LSTM 256, T = 64, lr 3e-3", {"cell": "lstm", "lr": 3e-3, "steps": 2000}),
    "gru128-lr3e-3": ("GRU 128, T = 64, lr 3e-3", {"hidden_size": 128, "lr": 3e-3, "steps": 3000}),
    "rnn256-lr2e-3": ("tanh RNN 256, T = 64, lr 2e-3", {"cell": "rnn", "lr": 2e-3, "steps": 3000}),
    "gru512x2-d0.3": ("2 x GRU 512, T = 100, dropout 0.3, lr 2e-3",
                      {"preset": "long", "dropout": 0.3, "lr": 2e-3, "steps": 3000}),
    "long": ("**long preset: 2 x GRU 512, T = 100, dropout 0.4, lr 3e-3**", {"preset": "long"}),
    "gru512x2-d0.5": ("2 x GRU 512, T = 100, dropout 0.5, lr 2e-3",
                      {"preset": "long", "dropout": 0.5, "lr": 2e-3, "steps": 6000}),
    "gru768x2-d0.5-ema": ("2 x GRU 768, T = 100, dropout 0.5, lr 2e-3, EMA 0.998",
                          {"preset": "long", "hidden_size": 768, "dropout": 0.5, "lr": 2e-3, "ema": 0.998}),
    "lstm512x2-d0.5-ema": ("2 x LSTM 512, T = 100, dropout 0.5, lr 3e-3, EMA 0.998",
                           {"preset": "long", "cell": "lstm", "dropout": 0.5, "ema": 0.998}),
    "gru512x2-d0.3-wd0.4-ema": ("2 x GRU 512, T = 100, dropout 0.3, weight drop 0.4, lr 3e-3, EMA 0.998",
                                {"preset": "long", "dropout": 0.3, "weight_drop": 0.4, "ema": 0.998}),
    "gru512x2-d0.4-wd0.1-ema": ("2 x GRU 512, T = 100, dropout 0.4, weight drop 0.1, lr 3e-3, EMA 0.998",
                                {"preset": "long", "weight_drop": 0.1, "ema": 0.998}),
    "gru512x2-d0.3-wd0.2-ema": ("2 x GRU 512, T = 100, dropout 0.3, weight drop 0.2, lr 3e-3, EMA 0.998",
                                {"preset": "long", "dropout": 0.3, "weight_drop": 0.2, "ema": 0.998}),
    "mingru": ("2 minGRU blocks of 128, `--preset mingru`", {"preset": "mingru"}),
    "mamba": ("2 Mamba blocks of d_model 64 (d_state 16), `--preset mamba`", {"preset": "mamba"}),
    "gru256-1500-beside-mingru": ("GRU 256, the defaults with 1,500 steps (measured beside the next row)",
                                  {"preset": "demo", "steps": 1500}),
    "mingru-1500": ("2 minGRU blocks of 128, lr 4e-3 (`--preset mingru` had 1,500 steps then)",
                    {"preset": "mingru", "steps": 1500}),
    "mingru-lr8e-3": ("", {"preset": "mingru", "steps": 1500, "lr": 8e-3}),
    "mingru-lr6e-3": ("", {"preset": "mingru", "steps": 1500, "lr": 6e-3}),
    "mingru-lr1.5e-2": ("", {"preset": "mingru", "steps": 1500, "lr": 1.5e-2}),
    "mingru96x3": ("3 minGRU blocks of 96, lr 4e-3",
                   {"preset": "mingru", "steps": 1500, "hidden_size": 96, "num_layers": 3}),
    "minlstm128x2": ("2 minLSTM blocks of 128, lr 4e-3", {"preset": "mingru", "steps": 1500, "cell": "minlstm"}),
    "mingru256x1-lr8e-3": ("1 minGRU block of 256, lr 8e-3",
                           {"preset": "mingru", "steps": 1500, "hidden_size": 256, "num_layers": 1, "lr": 8e-3}),
    "mingru-long": ("3 minGRU blocks of 256, `--preset mingru-long`", {"preset": "mingru-long"}),
}
#: The calibration table of "Train a character model", and the runs of its "long" range.
CALIBRATION = ("gru256-lr8e-3", "gru256-lr5e-3", "gru256-lr3e-3", "lstm256-lr3e-3", "gru128-lr3e-3", "rnn256-lr2e-3",
               "gru512x2-d0.3", "long", "gru512x2-d0.5", "gru768x2-d0.5-ema", "lstm512x2-d0.5-ema",
               "gru512x2-d0.3-wd0.4-ema", "gru512x2-d0.4-wd0.1-ema", "gru512x2-d0.3-wd0.2-ema")
LONG_RUNS = CALIBRATION[6:]
#: The table of "A character model of linear recurrences": (label or None for the entries' own, entries).
MINGRU_ROWS = (
    ("GRU 256, the defaults, `--preset demo` (the demo's table above)", ("demo",)),
    (None, ("train:mingru",)),
    (None, ("train:mamba",)),
    (None, ("train:gru256-1500-beside-mingru",)),
    (None, ("train:mingru-1500",)),
    ("the same with lr 8e-3 / 6e-3 / 1.5e-2", ("train:mingru-lr8e-3", "train:mingru-lr6e-3", "train:mingru-lr1.5e-2")),
    (None, ("train:mingru96x3",)),
    (None, ("train:minlstm128x2",)),
    (None, ("train:mingru256x1-lr8e-3",)),
    ("GRU 512 x 2, `--preset long` (table above)", ("train:long",)),
    (None, ("train:mingru-long",)),
)
#: What ``run`` measures without --only or --all: everything but the training runs (minutes, not hours).
SHORT_ENTRIES = tuple(f"reproduce:{n}" for n in EXPERIMENTS) + ("demo", "train:mingru", "bench:mingru",
                                                                  "bench:mingru-small", "bench:threads", "bench:layers", "bench:train",
                                                                  "families", "corpus")
#: Figures without a command that regenerates them (kept with their source; see the module docstring).
HAND_ONLY = ("hand:threads", "hand:long-segments", "hand:array-api", "hand:distributed-long")
ENTRIES = (tuple(f"reproduce:{n}" for n in EXPERIMENTS) + ("demo",) + tuple(f"train:{n}" for n in TRAININGS)
           + ("bench:mingru", "bench:mingru-small", "bench:threads", "bench:layers", "bench:train", "families", "corpus",
              "bench:distributed", "distributed:long"))
MARKERS = re.compile(r"<!-- results:(?P<name>[\w-]+) -->\n(?P<body>.*?)<!-- /results -->\n", re.S)
FIGURES = re.compile(r"<!-- figure:(?P<name>[\w-]+) -->(?P<body>.*?)<!-- /figure -->", re.S)


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


def training_config(name: str) -> dict:
    """The full configuration of training run ``name`` of :data:`TRAININGS` (its preset, then its keys)."""
    from hiddenstate.train import PRESETS

    spec = dict(TRAININGS[name][1])
    base = dict(PRESETS[spec.pop("preset")]) if "preset" in spec else {}
    return base | spec


def training_command(name: str) -> str:
    """The ``hiddenstate train`` command line of training run ``name``."""
    spec = dict(TRAININGS[name][1])
    flags = [f"--preset {spec.pop('preset')}"] if "preset" in spec else []
    flags += [f"--{k.replace('_', '-')} {v}" for k, v in spec.items()]
    return " ".join(["hiddenstate train", *flags])


def run_training(config: dict) -> dict:
    """Train ``config`` in a temporary directory; its steps, times and validation losses."""
    import numpy

    from hiddenstate.train import train
    from hiddenstate.train.rundir.snapshot import Snapshot
    from hiddenstate.train.steps import Corpus, evaluate

    config = dict(config)
    with tempfile.TemporaryDirectory() as out:
        config["out"] = str(Path(out) / "run")
        result = train(config, progress=False, verbose=False)
        raw = None
        if result.config.ema is not None:  # the average is what is evaluated and saved; the raw weights too
            result.model.load_state_dict(Snapshot.read(result.checkpoint).raw_weights)
            raw = round(evaluate(result.model, Corpus.read(result.config, None).val_ids), 4)
    steps = numpy.asarray(result.history["val_step"])
    vals = numpy.asarray(result.history["val_loss"])
    record = {"steps": result.step, "of_steps": result.config.steps, "stopped": result.stopped,
              "max_minutes": result.config.max_minutes, "train_seconds": round(result.seconds, 1),
              "val_loss": round(result.val_loss, 4), "val_loss_raw": raw, "val_bpc": round(result.val_bpc, 3),
              "val_ppl": round(result.val_ppl, 2), "train_loss": round(result.train_loss, 3),
              "val_curve": [[int(a), round(float(b), 4)] for a, b in zip(steps, vals)]}
    if result.step >= 3000:  # what the README says of the long runs' curves
        record |= {"val_at_2500": float(vals[steps == 2500][0]) if (steps == 2500).any() else None,
                   "val_min_from_3000": round(float(vals[steps >= 3000].min()), 3),
                   "val_max_from_3000": round(float(vals[steps >= 3000].max()), 3)}
    return record


def run_bench_mingru(*flags: str) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_mingru.py"), "--clock", "cpu", *flags],
                         check=True, capture_output=True, text=True, cwd=ROOT)
    return {"lines": out.stdout.strip().splitlines()}


SMALL_MINGRU = ("--batch", "4", "--hidden", "16", "--lengths", "512", "2048")
#: what ``make bench`` runs (the Makefile's bench target), with the layer table printed as markdown
BENCH_LAYERS = ("--clock", "cpu", "--budget", "6", "--rounds", "7", "--markdown")
BENCH_TRAIN = ("--clock", "cpu")


def run_bench(script: str, *flags: str) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *flags],
                         check=True, capture_output=True, text=True, cwd=ROOT)
    return {"lines": out.stdout.strip().splitlines()}


def run_bench_threads() -> dict:
    thread_vars = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in thread_vars}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_threads.py"), "--preset", "long"],
                         check=True, capture_output=True, text=True, cwd=ROOT, env=env)
    lines = out.stdout.strip().splitlines()
    ms = {int(m[1]): float(m[2]) for line in lines if (m := re.match(r"(\d) BLAS threads? +([\d.]+) ms", line))}
    return {"lines": lines, "ms_one_thread": ms[1], "ms_two_threads": ms[2]}


#: The long-preset run on 2 processes that the README's "More than one process" section reports.
#: The long preset's own recipe (N = 32: 16 rows a rank), its 4,000 steps cut to the 3,200 that two
#: ranks on this 2-core machine take in under 30 minutes (0.46-0.52 s a step measured idle).
DISTRIBUTED_LONG = ["--preset", "long", "--steps", "3200", "--eval-every", "400", "--save-every", "400",
                    "--max-minutes", "30"]


def distributed_command(flags=DISTRIBUTED_LONG) -> str:
    return "torchrun --nproc-per-node 2 -m hiddenstate train " + " ".join(flags)


def run_log_record(run_dir) -> dict:
    """What a finished run directory says of itself: steps, time, the validation curve (its log.jsonl)."""
    lines = [json.loads(line) for line in (Path(run_dir) / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    vals = [[r["step"], round(r["val_loss"], 4)] for r in lines if "val_loss" in r]
    return {"steps": lines[-1]["step"], "train_seconds": round(lines[-1]["elapsed_s"], 1),
            "val_loss": vals[-1][1], "val_curve": vals}


def run_distributed_long() -> dict:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
                        "--master-addr", "127.0.0.1", "--master-port", str(port), "-m", "hiddenstate", "train",
                        *DISTRIBUTED_LONG, "--quiet", "--out", str(Path(out) / "run")],
                       check=True, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"})
        return run_log_record(Path(out) / "run")


def run_corpus() -> dict:
    from hiddenstate.train.corpus import load_text

    text = load_text(None)
    val = text[-round(len(text) * 0.1):]  # the TrainConfig default val_fraction, as train_val_split cuts it
    tempest = val.index("\n\nTHESEUS:\n") + 2  # the Dream's first speaker: the end of The Tempest before it
    return {"chars": len(text), "bytes": len(text.encode("utf-8")), "distinct": len(set(text)),
            "val_chars": len(val), "val_tempest_chars": tempest, "val_dream_chars": len(val) - tempest}


#: The ids each family's tiny model runs on in the ``families`` entry: (N, T), seeded.
FAMILY_IDS = (2, 32)


def run_families() -> dict:
    """Every registered family's tiny random model (its ``tiny_config``), recurrent layers recomputed: worst error."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import numpy as np
    import torch
    import transformers

    from hiddenstate.interop import families

    rows = []
    for family in families.registered():
        row = {"family": family.name, "model": family.classes[0], "block": families.BLOCKS[family.kind].__name__}
        if family.tiny_config is None:
            rows.append({**row, "worst": None, "note": "no tiny_config"})
            continue
        torch.manual_seed(0)
        model = getattr(transformers, family.classes[0])(family.tiny_config()).eval()
        vocab = model.config.get_text_config().vocab_size  # a multimodal model: its text backbone's
        ids = np.random.default_rng(1).integers(0, vocab, FAMILY_IDS)
        rc = families.recompute_layers(model, ids)
        recurrent = [e for e in rc.layer_map if e.role == "recurrent"]
        rows.append({**row, "layer_class": sorted({e.class_name for e in recurrent}), "recurrent": len(recurrent),
                     "layers": len(rc.layer_map), "worst": max(rc.errors), "tolerance": rc.tolerance,
                     "dtype": rc.dtype})
    return {"rows": rows, "ids": list(FAMILY_IDS), "torch": torch.__version__, "transformers": transformers.__version__}


def measure(entry: str, quick: bool) -> dict:
    """Run one entry and return its record (numbers plus command, date, machine and load)."""
    load = round(os.getloadavg()[0], 2)
    if entry.startswith("reproduce:"):
        name = entry.split(":", 1)[1]
        return _measured(f"hiddenstate reproduce {name}{' --quick' if quick else ''} --seed 0", load,
                         lambda: run_reproduce(name, quick))
    if entry == "demo":
        return _measured("hiddenstate demo (its training: the demo preset)", load, run_demo)
    if entry.startswith("train:") and entry[6:] in TRAININGS:
        config = training_config(entry[6:])
        return _measured(training_command(entry[6:]), load, lambda: run_training(config))
    if entry == "bench:mingru":
        return _measured("python benchmarks/bench_mingru.py --clock cpu", load, run_bench_mingru)
    if entry == "bench:mingru-small":
        return _measured("python benchmarks/bench_mingru.py --clock cpu " + " ".join(SMALL_MINGRU), load,
                         lambda: run_bench_mingru(*SMALL_MINGRU))
    if entry == "bench:layers":
        return _measured("python benchmarks/bench_layers.py " + " ".join(BENCH_LAYERS), load,
                         lambda: run_bench("bench_layers.py", *BENCH_LAYERS))
    if entry == "bench:train":
        return _measured("python benchmarks/bench_train.py " + " ".join(BENCH_TRAIN), load,
                         lambda: run_bench("bench_train.py", *BENCH_TRAIN))
    if entry == "bench:threads":
        return _measured("python benchmarks/bench_threads.py --preset long", load, run_bench_threads)
    if entry == "bench:distributed":
        return _measured("python benchmarks/bench_distributed.py", load, lambda: run_bench("bench_distributed.py"))
    if entry == "distributed:long":
        return _measured(distributed_command(), load, run_distributed_long)
    if entry == "families":
        return _measured("recompute_layers(model, ids) of each registered family's tiny random model "
                         f"(Family.tiny_config, seed 0; ids (N, T) = {FAMILY_IDS})", load, run_families)
    if entry == "corpus":
        return _measured("the bundled corpus (hiddenstate.train.corpus.load_text)", load, run_corpus)
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


def _render_lines(entry: str):
    def render_entry(results: dict) -> str:
        rec = results.get(entry)
        if rec is None:
            return ""
        return "\n".join([f"Measured by `python scripts/readme_results.py` ({_when(rec)}): `{rec['command']}`", "",
                          *rec["lines"]]) + "\n"
    return render_entry


def _loss(value: float) -> str:
    """A stored loss as it was measured: 3 decimals, 4 when the record has them."""
    return f"{value:.4f}" if round(value, 3) != round(value, 4) else f"{value:.3f}"


def _duration(seconds) -> str:
    return "" if seconds is None else f"{seconds:.0f} s" if seconds < 600 else f"{seconds / 60:.0f} min"


def _time(rec: dict) -> str:
    wall, cpu = _duration(rec.get("wall_s")), _duration(rec.get("cpu_s"))
    return f"{wall} ({cpu})" if wall and cpu else f"{wall} (CPU time not recorded)" if wall else f"({cpu})" if cpu \
        else ""


def _how(rec: dict) -> str:
    if rec.get("measured_by", "").startswith("hand"):
        return f"by hand, {rec['date'][:10]}"
    return f"script, {rec['date'][:10]}, load {rec['load_before']:.1f} before, {rec['load_after']:.1f} after"


def _training_rows(results: dict, rows, bold=()) -> list:
    """Table rows of training records: (label or None, entries); missing entries are left out."""
    lines = []
    for label, entries in rows:
        recs = [results[e] for e in entries if e in results]
        if len(recs) != len(entries):
            continue
        name = entries[0].split(":", 1)[-1]
        label = label or TRAININGS[name][0]
        steps = " / ".join(dict.fromkeys(f"{r['steps']:,}" + ("" if r["steps"] == r["of_steps"] else
                                                                f" of {r['of_steps']:,} ({r['stopped']})")
                                          for r in recs))
        vals = " / ".join(_loss(r["val_loss"]) + (f" (raw weights {_loss(r['val_loss_raw'])})"
                                                  if r.get("val_loss_raw") is not None else "") for r in recs)
        if entries[0] in bold:
            vals = f"**{vals}**"
        times = " / ".join(t for r in recs if (t := _time(r)))
        how = "; ".join(dict.fromkeys(_how(r) for r in recs))
        lines.append(f"| {label} | {steps} | {vals} | {times} | {how}: {', '.join(f'`{e}`' for e in entries)} |")
    return lines


_TRAINING_HEAD = ["| configuration | steps | validation nats/char | time | measured (entry) |", "|---|---|---|---|---|"]
_TRAINING_CAPTION = ("Wall time, process CPU time in brackets. *by hand*: typed into the README from a real run "
                     "before the script existed (docs/results.json keeps the commit, the command and what is "
                     "known of the load); `python scripts/readme_results.py run --only ENTRY` reruns a row.")


def render_calibration(results: dict) -> str:
    lines = _training_rows(results, [(None, (f"train:{n}",)) for n in CALIBRATION], bold=("train:gru256-lr8e-3",
                                                                                          "train:long"))
    return "\n".join([_TRAINING_CAPTION, "", *_TRAINING_HEAD, *lines]) + "\n" if lines else ""


def render_mingru_runs(results: dict) -> str:
    lines = _training_rows(results, MINGRU_ROWS, bold=("demo", "train:long"))
    return "\n".join([_TRAINING_CAPTION, "", *_TRAINING_HEAD, *lines]) + "\n" if lines else ""


def render_distributed_long(results: dict) -> str:
    rec = results.get("distributed:long") or results.get("hand:distributed-long")  # the measured one first
    if rec is None:
        return ""
    curve = " | ".join(f"{v:.4f}" for _, v in rec["val_curve"])
    how = ("Run by hand, its log read by `scripts/readme_results.py`" if rec.get("measured_by", "").startswith("hand")
           else "Measured by `python scripts/readme_results.py`")
    return "\n".join([f"{how} ({_when(rec)}): `{rec['command']}`", "",
                      "| step | " + " | ".join(str(s) for s, _ in rec["val_curve"]) + " |",
                      "|---" * (1 + len(rec["val_curve"])) + "|",
                      f"| validation nats/char | {curve} |", "",
                      f"{rec['steps']:,} steps in {_duration(rec['train_seconds'])} of training: **{rec['val_loss']:.4f}** "
                      f"nats/char at the end."]) + "\n"


def render_families(results: dict) -> str:
    """The README's table of the supported families: recurrent layer class, our block, worst recomputation error."""
    rec = results.get("families")
    if rec is None:
        return ""
    lines = [f"Measured by `python scripts/readme_results.py run --only families` ({_when(rec)}; torch "
             f"{rec['torch']}, transformers {rec['transformers']}): `{rec['command']}`", "",
             "| family (`model_type`) | recurrent layer class | our block | worst recomputation error |",
             "|---|---|---|---|"]
    for r in rec["rows"]:
        if r["worst"] is None:
            lines.append(f"| `{r['family']}` | | `{r['block']}` | not measured ({r['note']}) |")
            continue
        lines.append(f"| `{r['family']}` ({r['recurrent']} of {r['layers']} layers recurrent) | "
                     f"{', '.join(f'`{c}`' for c in r['layer_class'])} | `{r['block']}` | {r['worst']:.1e} "
                     f"({r['dtype']}; tolerance {r['tolerance']:.1e}) |")
    return "\n".join(lines) + "\n"


RENDERERS = {"reproduce": render_reproduce, "demo": render_demo, "bench-mingru": render_bench_mingru,
             "speed": _render_lines("bench:layers"), "speed-train": _render_lines("bench:train"),
             "calibration": render_calibration, "mingru-runs": render_mingru_runs,
             "distributed": _render_lines("bench:distributed"), "distributed-long": render_distributed_long,
             "families": render_families}


# -- figures inside sentences --------------------------------------------------------------------
def _bench_row(rec: dict, column: str) -> tuple:
    """(T, value) of the last row of a bench_mingru table in ``rec["lines"]``."""
    head = next(line for line in rec["lines"] if line.startswith("| T |"))
    cols = [c.strip() for c in head.strip("|").split("|")]
    last = [c.strip() for c in rec["lines"][-1].strip("|").split("|")]
    return int(last[0]), float(last[cols.index(column)])


def _figure_scan_small(r: dict) -> str:
    rec = r["bench:mingru-small"]
    n, h = (int(re.search(rf"{k}=(\d+)", rec["lines"][0])[1]) for k in ("N", "H"))
    t, ratio = _bench_row(rec, "minGRU loop / scan")
    return f"a {ratio:.1f}x faster scan than the per-step loop at N H = {n * h}, T = {t:,}, process CPU time"


def _context(rec: dict) -> str:
    """`` (wall clock on DATE, N CPUs at load average A before and B after; C s of CPU time)``: a time's context."""
    cpus = rec.get("machine", {}).get("cpus")
    return (f" (wall clock on {rec['date'][:10]}, {cpus} CPUs at load average {rec['load_before']:.1f} before and "
            f"{rec['load_after']:.1f} after; {rec['cpu_s']:.0f} s of CPU time: a busier or slower machine takes longer)")


def _figure_threads(r: dict) -> str:
    rec = r["bench:threads"]
    one, two = rec["ms_one_thread"], rec["ms_two_threads"]
    return (f"on {rec['date'][:10]}, at load average {rec['load_before']:.1f} before and {rec['load_after']:.1f} "
            f"after, a long-preset step took {one:.0f} ms with one BLAS thread and {two:.0f} ms with two "
            f"({one / two:.2f}x the speed of one)")


def _figure_threads_hand(r: dict) -> str:
    h = r["hand:threads"]
    return (f"on an idle machine two threads were {h['idle_speedup_min']:.2f}-{h['idle_speedup_max']:.2f}x faster "
            f"for the long preset; with one other busy process on the 2 cores a step took "
            f"{h['one_busy_two_threads_s']:.2f} s with two threads against {h['one_busy_one_thread_s']:.2f} s with "
            f"one ({h['one_busy_two_threads_s'] / h['one_busy_one_thread_s']:.1f}x slower; with other users' jobs "
            f"at load 3, {h['load3_two_threads_s']:.2f} s against {h['load3_one_thread_s']:.2f} s)")


def _figure_long_range(r: dict) -> str:
    vals = [r[f"train:{n}"]["val_loss"] for n in LONG_RUNS if f"train:{n}" in r]
    if not vals:
        raise KeyError("train:long")
    return f"{_loss(min(vals))} and {_loss(max(vals))}"


def _figure_long_segments(r: dict) -> str:
    s = r["hand:long-segments"]
    return (f"the Tempest end scores {s['tempest_end']:.3f} nats/char, the Dream {s['dream']:.3f}, and the last "
            f"{s['train_tail_chars']:,} characters of the training text {s['train_tail']:.3f}: the gap is "
            f"generalisation to a new play, not optimisation. Much of it is the new speaker names: the lines "
            f"`OBERON:`, `TITANIA:`, `PUCK:` ... are {s['names_chars_percent']:.1f}% of the validation characters "
            f"but {s['names_loss_percent']:.1f}% of its loss ({s['names']:.2f} nats/char there, {s['rest']:.2f} on "
            f"the rest). The figures above are from `evaluate` (32 rows read in parallel); reading the validation "
            f"text as one stream lowers them by {s['one_stream_lower']:.3f} (measured by hand on "
            f"{s['date']}, the `hand:long-segments` entry of docs/results.json)")


def _figure_mingru_gap(r: dict) -> str:
    d, m, g, ml = r["demo"], r["train:mingru"], r["train:long"], r["train:mingru-long"]
    return (f"after {m['steps']:,} steps it ends {m['val_loss'] - d['val_loss']:.2f} nats/char behind the demo's GRU "
            f"after {d['steps']:,} ({_loss(m['val_loss'])} against {_loss(d['val_loss'])}, in {m['cpu_s']:.0f} s of "
            f"CPU time against {d['cpu_s']:.0f} s); with the long preset's budget (it finished its {ml['steps']:,} steps in "
            f"{_duration(ml['wall_s'])} against the GRU's {_duration(g['wall_s'])}) {ml['val_loss'] - g['val_loss']:.2f} "
            f"behind: {_loss(ml['val_loss'])} against {_loss(g['val_loss'])} (its validation loss was "
            f"{_loss(ml['val_at_2500'])} at step 2,500 and stayed between {_loss(ml['val_min_from_3000'])} and "
            f"{_loss(ml['val_max_from_3000'])} from step 3,000 on, while its training loss fell to "
            f"{ml['train_loss']:.2f})")


def _figure_array_api(r: dict) -> str:
    a = r["hand:array-api"]
    return (f"the array-API path on torch CPU tensors took {a['most_min']:.1f}-{a['most_max']:.1f}x the NumPy "
            f"kernels' time in most rows (the Elman RNN {a['rnn_min']:.1f}-{a['rnn_max']:.1f}x), single rows up to "
            f"{a['max']:g}x in the noisier run (measured by hand on {a['date']}, the `hand:array-api` entry of "
            f"docs/results.json)")


FIGURES_RENDERERS = {
    "demo-share": lambda r: f"{r['demo']['train_seconds']:.0f} s of the {60 * r['demo']['max_minutes']:.0f} s{_context(r['demo'])}",
    "mingru-share": lambda r: (f"{r['train:mingru']['steps']:,} steps took {r['train:mingru']['train_seconds']:.0f} s"
                               f" of the {60 * r['train:mingru']['max_minutes']:.0f} s{_context(r['train:mingru'])}"),
    "corpus": lambda r: f"{r['corpus']['bytes'] / 1000:.0f} kB, {r['corpus']['distinct']} distinct characters",
    "corpus-val": lambda r: (f"the last {r['corpus']['val_tempest_chars']:,} characters of The Tempest and then all "
                             f"of A Midsummer Night's Dream ({r['corpus']['val_dream_chars']:,} characters)"),
    "threads": _figure_threads, "threads-hand": _figure_threads_hand, "long-range": _figure_long_range,
    "long-segments": _figure_long_segments, "mingru-gap": _figure_mingru_gap, "scan-small": _figure_scan_small,
    "array-api": _figure_array_api,
}


def render_figures(results: dict) -> dict:
    """Every generated figure inside a sentence: ``{marker name: text}`` (one line, no newline).

    Parameters
    ----------
    results : dict
        The ``results`` of ``docs/results.json``.

    Returns
    -------
    dict of str to str
        One text per name of :data:`FIGURES_RENDERERS` whose entries have been measured.
    """
    out = {}
    for name, fn in FIGURES_RENDERERS.items():
        try:
            out[name] = fn(results)
        except KeyError:  # an entry not measured yet
            continue
    return out


def readme_figures(text: str) -> dict:
    """The texts between the README's ``<!-- figure:NAME -->`` markers, by name."""
    return {m["name"]: m["body"] for m in FIGURES.finditer(text)}


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


def rewrite(text: str, tables: dict, figures: dict | None = None) -> str:
    """``text`` with each marked table and figure replaced by ``tables[name]`` / ``figures[name]``
    (unknown names left alone)."""
    figures = figures or {}
    def put(m):
        body = tables.get(m["name"], m["body"])
        return f"<!-- results:{m['name']} -->\n{body}<!-- /results -->\n"

    def put_figure(m):
        return f"<!-- figure:{m['name']} -->{figures.get(m['name'], m['body'])}<!-- /figure -->"

    return FIGURES.sub(put_figure, MARKERS.sub(put, text))


def marked(texts: dict) -> tuple:
    """``(tables, figures, places)``: every marked table and figure of the documents, by name, and
    ``places[(kind, name)]``, the documents that mark it (one, where all is well).

    Parameters
    ----------
    texts : dict of Path to str
        The documents' texts (:func:`documents`).

    Returns
    -------
    tuple of (dict, dict, dict)
        Tables ``{name: body}``, figures ``{name: text}`` (the first place's, where a name is marked
        twice) and ``{(kind, name): [path, ...]}`` with kind ``"table"`` or ``"figure"``.
    """
    tables, figures, places = {}, {}, {}
    for path, text in texts.items():
        for kind, found, into in (("table", readme_tables(text), tables), ("figure", readme_figures(text), figures)):
            for name, body in found.items():
                into.setdefault(name, body)
                places.setdefault((kind, name), []).append(path)
    return tables, figures, places


def _shown(path) -> str:
    """A document's path as the messages give it: relative to the checkout where it lies inside."""
    path = Path(path)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def problems(texts: dict, tables: dict, figures: dict) -> list:
    """``[(where, problem), ...]``: each marked table or figure that differs from what :func:`render`
    and :func:`render_figures` make of docs/results.json, is marked in more than one place, or is
    not marked anywhere although its entries have been measured."""
    found_tables, found_figures, places = marked(texts)
    out = []
    for (kind, name), paths in sorted(places.items()):
        for path in paths:
            text = texts[path]
            body = (readme_tables if kind == "table" else readme_figures)(text)[name]
            want = (tables if kind == "table" else figures).get(name)
            if body != want:
                out.append((_shown(path), f"{kind} {name!r} differs from docs/results.json"))
        if len(paths) > 1:
            out.append((", ".join(_shown(p) for p in paths), f"{kind} {name!r} is marked in {len(paths)} places"))
    for kind, want, found in (("table", tables, found_tables), ("figure", figures, found_figures)):
        out += [("nowhere", f"{kind} {name!r} is measured but no page marks it") for name in sorted(set(want) - set(found))]
    return out


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
    parser.add_argument("--all", action="store_true", help="also the training runs of TRAININGS (hours)")
    args = parser.parse_args(argv)
    if args.action == "run":
        # One BLAS thread, as the command line runs: threadpool_limits only limits the libraries already
        # loaded, so the variables cover the BLAS that numpy and scipy load later (bench_threads sets its own).
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = "1"
        import numpy  # noqa: F401  (its BLAS is loaded now, so the limits below see it)
        from threadpoolctl import threadpool_limits
        from tqdm.auto import tqdm

        stored = json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.exists() else {"results": {}}
        entries = args.only or [e for e in ENTRIES if args.all or e in SHORT_ENTRIES]
        with threadpool_limits(limits=1, user_api="blas"), tqdm(entries, unit="entry", file=sys.stderr,
                                                                 disable=None) as bar:
            for entry in bar:
                bar.set_description(entry)
                stored["command"] = "python scripts/readme_results.py " + " ".join(argv or sys.argv[1:])
                stored["results"][entry] = {**measure(entry, args.quick), "script": stored["command"]}
                RESULTS.parent.mkdir(exist_ok=True)
                _write(RESULTS, json.dumps(stored, indent=1, sort_keys=True) + "\n")
                bar.write(f"{entry}: {stored['results'][entry]['wall_s']} s", file=sys.stderr)
    results = load_results()
    tables, figures = render(results), render_figures(results)
    texts = {path: path.read_text(encoding="utf-8") for path in documents()}
    if args.action == "check":
        bad = [f"{where}: {problem}" for where, problem in problems(texts, tables, figures)]
        for line in bad:
            print(f"{line} (run: python scripts/readme_results.py render)", file=sys.stderr)
        return 1 if bad else 0
    for path, text in texts.items():
        new = rewrite(text, tables, figures)
        if new != text:
            _write(path, new)
            print(f"rewrote {path.relative_to(ROOT)}")
    missing = [p for w, p in problems({p: rewrite(t, tables, figures) for p, t in texts.items()}, tables, figures)]
    for line in missing:  # a table or figure that no page marks: rendering cannot place it
        print(f"not placed: {line}", file=sys.stderr)
    return 0

if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("readme_results.py: interrupted", file=sys.stderr)
        sys.exit(130)
