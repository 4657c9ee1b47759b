"""The ``hiddenstate`` command: train, sample, demo, reproduce, inspect, intervene, trace, check-cache, snapshot, states,
export.

Every subcommand is a thin layer over the Python API (:mod:`hiddenstate.train`,
:mod:`hiddenstate.reproduce`, :mod:`hiddenstate.report`). Errors the user can fix (a missing or
empty file, a directory given as a file, a prime with unknown characters, a bad flag value, an
``--out`` that holds a run or other files) are one line on stderr, ``hiddenstate: error: ...``,
naming the flag, and exit status 2, like argparse's own usage errors. A run that fails (it
diverged, the disk is full, memory ran out) is one line too, with status 1. Nothing prints a
traceback (``HIDDENSTATE_DEBUG=1`` shows one); warnings are one line each; SIGINT/SIGTERM in ``train`` save the step.

Examples
--------
::

    hiddenstate train --data input.txt --cell lstm --hidden-size 256 --steps 3000 --out runs/lstm
    hiddenstate train --resume runs/lstm --steps 6000 --processes 2   # 2 processes: torchrun's launcher
    hiddenstate sample runs/lstm --prime "ROMEO:" --length 400 --temperature 0.8 --seed 1
    hiddenstate demo
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import os
import sys
import warnings
from pathlib import Path

__all__ = ["main"]

PROG = "hiddenstate"
_DEMO_OUT = "runs/demo"
_DEMO_PRIME = "HAMLET:\n"


class _UsageError(Exception):
    """An error in the user's input: reported on one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage block), still with exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _convert(name: str, text: str, convert, rule):
    """``rule(name, convert(text))``: a rule of :mod:`hiddenstate.core.validation` applied to a flag's text.

    Text that ``convert`` cannot read goes to the rule as it is, so the message still states the
    rule (``"--steps must be a positive integer; got str 'ten'."``).
    """
    try:
        value = convert(text)
    except ValueError:
        value = text
    return rule(name, value)


def _typed(flag: str, convert, rule):
    """An argparse ``type`` for ``flag``: :func:`_convert`, its error one line without the flag's name
    (argparse prints ``argument --steps: must be a positive integer; got 0``)."""
    def parse(text: str):
        try:
            return _convert(flag, text, convert, rule)
        except (TypeError, ValueError) as error:
            message = " ".join(str(error).split()).removeprefix(f"{flag} ").removesuffix(".")
            raise argparse.ArgumentTypeError(message) from None
    return parse


def _config_flag(parser, field: str, convert, **kwargs) -> None:
    """Add ``--field-name``, converted and checked by the field's rule in ``TrainConfig``'s RULES."""
    from hiddenstate.train.config import RULES

    flag = "--" + field.replace("_", "-")
    parser.add_argument(flag, type=_typed(flag, convert, RULES[field]), **kwargs)


def _build_parser() -> argparse.ArgumentParser:
    from hiddenstate.core.validation import nonnegative_int, positive_int
    from hiddenstate.train.config import DTYPES, PRESETS
    from hiddenstate.train.model import CELLS, SAMPLE_RULES
    from hiddenstate.version import __version__

    parser = _Parser(
        prog=PROG,
        description="Recurrent networks (RNN, GRU, LSTM) in NumPy, about the hidden state.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    # -- train -----------------------------------------------------------------------------------
    tr = sub.add_parser("train", help="train a character-level language model on a text file",
                        description="Train a character-level language model with truncated BPTT. "
                                    "Flags left out take the preset's values, or without --preset the defaults shown "
                                    "(the demo model, with no time limit).")
    tr.add_argument("--data", metavar="FILE", help="UTF-8 text file (default: the embedded Shakespeare)")
    tr.add_argument("--cell", choices=CELLS, help="recurrent cell (default gru)")
    _config_flag(tr, "hidden_size", int, metavar="H", help="units per layer (default 256)")
    _config_flag(tr, "num_layers", int, metavar="L", help="stacked layers (default 1)")
    _config_flag(tr, "seq_len", int, metavar="T", help="truncated-BPTT length (default 64)")
    _config_flag(tr, "batch_size", int, metavar="N", help="parallel streams (default 32)")
    _config_flag(tr, "steps", int, metavar="S", help="total optimizer steps (default 1500)")
    _config_flag(tr, "lr", float, help="peak Adam learning rate, decayed to lr/10 on a cosine (default 8e-3)")
    _config_flag(tr, "clip", float, help="max global gradient L2 norm (default 5)")
    _config_flag(tr, "seed", int, help="seed of the initial weights (default 0)")
    tr.add_argument("--dtype", choices=DTYPES, help="default float32 (about twice as fast as float64)")
    tr.add_argument("--out", metavar="DIR", help="run directory: checkpoint/, log.jsonl, loss.png")
    tr.add_argument("--resume", metavar="DIR", help="continue the run saved in DIR (a run or checkpoint directory)")
    tr.add_argument("--overwrite", action="store_true",
                    help="replace a previous run in --out (its checkpoint, log and plot; never other files)")
    tr.add_argument("--preset", choices=tuple(PRESETS),
                    help="named configuration: demo (the defaults with 1000 steps, at most 3 minutes), long, mingru (minGRU blocks, "
                         "at most 3 minutes), mingru-long or mamba (Mamba blocks, at most 3 minutes; see docs/guides/train.md)")
    _config_flag(tr, "max_minutes", float, metavar="M",
                 help="wall-clock limit: stop (with a last evaluation and checkpoint) when reached")
    _config_flag(tr, "eval_every", int, metavar="K", help="steps between validation passes")
    _config_flag(tr, "save_every", int, metavar="K", help="steps between checkpoints")
    _config_flag(tr, "dropout", float, metavar="P", help="dropout on layer outputs, in [0, 1) (default 0)")
    _config_flag(tr, "weight_drop", float, metavar="P",
                 help="DropConnect on the recurrent weights, in [0, 1) (Merity et al. 2018; default 0)")
    _config_flag(tr, "ema", float, metavar="DECAY",
                 help="evaluate, save and sample an exponential moving average of the weights (e.g. 0.998)")
    _config_flag(tr, "embedding_dim", int, metavar="E", help="learned embedding instead of one-hot")
    tr.add_argument("--tune-initial-state", metavar="RUN", help="train only the initial state of RUN's model (its weights "
                    "frozen) on --data: the checkpoint holds the tuned state, which sample starts from")
    tr.add_argument("--quiet", action="store_true", help="no progress bar")
    tr.add_argument("--processes", type=_typed("--processes", int, positive_int), metavar="K",
                    help="K processes on this machine, one run (torchrun's launcher; needs hiddenstate[distributed])")
    tr.add_argument("--device", default="cpu", metavar="DEV",
                    help="where the steps run: cpu (NumPy, default), torch:cpu, cuda (cuda:K, torch:cuda, cupy): "
                         "the array-API path on torch or CuPy")

    # -- sample ----------------------------------------------------------------------------------
    sa = sub.add_parser("sample", help="generate text from a checkpoint",
                        description="Generate text from a trained model; the same seed gives the same text.")
    sa.add_argument("checkpoint", metavar="CKPT", nargs="?", help="run directory (or its checkpoint/ subdirectory)")
    sa.add_argument("--pretrained", action="store_true",
                    help="the demo's GRU shipped with the package, instead of CKPT (no training needed)")
    sa.add_argument("--prime", help="text to start from (default: a newline)")
    sa.add_argument("--length", type=_typed("--length", int, SAMPLE_RULES["length"]), default=500,
                    help="characters to generate (default 500)")
    sa.add_argument("--temperature", type=_typed("--temperature", float, SAMPLE_RULES["temperature"]), default=1.0,
                    help="softmax temperature; 0 = greedy (default 1.0)")
    sa.add_argument("--top-k", type=_typed("--top-k", int, SAMPLE_RULES["top_k"]), metavar="K",
                    help="draw among the K most likely characters only (default: all)")
    sa.add_argument("--top-p", type=_typed("--top-p", float, SAMPLE_RULES["top_p"]), metavar="P",
                    help="nucleus sampling: the fewest likeliest characters with probability >= P, in (0, 1] "
                         "(applied after --top-k; default: all)")
    sa.add_argument("--seed", type=_typed("--seed", int, nonnegative_int), default=0, help="sampler seed (default 0)")

    # -- demo ------------------------------------------------------------------------------------
    de = sub.add_parser("demo", help="train the default model on Shakespeare and sample from it",
                        description="Train with the demo preset on the embedded Shakespeare, print a sample "
                                    "and the final validation loss.")
    de.add_argument("--out", default=_DEMO_OUT, metavar="DIR",
                    help=f"run directory (default {_DEMO_OUT}; a previous demo run there is replaced)")
    de.add_argument("--overwrite", action="store_true", help="replace a previous run of any configuration in --out")
    _config_flag(de, "steps", int, metavar="S", help="override the preset's steps")
    _config_flag(de, "max_minutes", float, metavar="M", help="override the preset's time limit")
    de.add_argument("--quiet", action="store_true", help="no progress bar")

    # -- reproduce -------------------------------------------------------------------------------
    rp = sub.add_parser("reproduce", help="rerun a paper's experiment and compare with its numbers",
                        description="Rerun a paper's experiment (Elman 1990, the adding and copy tasks, the 3-bit "
                                    "flip-flop of Sussillo & Barak 2013), print its numbers beside the paper's and "
                                    "write a figure.")
    rp.add_argument("name", metavar="NAME", help="one of: elman-xor, elman-letters, elman-sentences, adding, copy, flipflop")
    rp.add_argument("--quick", action="store_true", help="reduced settings (seconds)")
    rp.add_argument("--out", default="reproduce", metavar="DIR", help="directory for the figure (default reproduce)")
    rp.add_argument("--seed", type=_typed("--seed", int, nonnegative_int), default=0,
                    help="seeds the data, the initial weights and the batches (default 0)")

    # -- inspect ---------------------------------------------------------------------------------
    ins = sub.add_parser("inspect", help="write an HTML report of what a trained model's hidden state does",
                         description="Measure a trained model's hidden state on a text (gates, gradient flow, memory, "
                                     "PCA, fixed points, the units that track text features) and write one HTML "
                                     "report. Most of the time goes to the fixed-point search (its cost grows with the "
                                     "hidden size and --fixed-point-starts; 0 skips it), then the BPTT gradient "
                                     "norms and the figures. Each stage is one line on stderr off a terminal (what it measured, its seconds).")
    ins.add_argument("checkpoint", metavar="CKPT", nargs="?", help="run directory (or its checkpoint/ subdirectory), "
                     "its model.safetensors, a .safetensors file of a torch RNN/GRU/LSTM state dict, or a "
                     "save_pretrained model directory of a registered family (Mamba, Mamba-2, the hybrids)")
    ins.add_argument("--pretrained", action="store_true",
                     help="the demo's GRU shipped with the package, instead of CKPT (no training needed)")
    ins.add_argument("--text", metavar="FILE", help="text to run the model on (default: its validation text)")
    ins.add_argument("--out", default="report.html", metavar="FILE",
                     help="output HTML file, in an existing directory (default: report.html in the current directory; "
                          "a previous report is replaced, any other file refused)")
    ins.add_argument("--fixed-point-starts", type=_typed("--fixed-point-starts", int, nonnegative_int), default=None,
                     metavar="N", help="starts of the fixed-point search (default 32; 0 skips the search; none in a mamba run)")
    sd = ins.add_argument_group("a .safetensors state dict (sizes, layers, directions are read off the names and shapes)")
    sd.add_argument("--kind", choices=("rnn", "gru", "lstm", "mingru", "minlstm"),
                    help="default: from the rows of weight_hh_l0; needed for minGRU/minLSTM")
    sd.add_argument("--nonlinearity", choices=("tanh", "relu", "sigmoid"), help="an RNN's (default tanh)")
    sd.add_argument("--reset-after", action=argparse.BooleanOptionalAction, default=None,
                    help="a GRU's candidate: torch's (default) or, with --no-reset-after, Cho et al. 2014")
    sd.add_argument("--prefix", help="the names' part before weight_ih_l0 (default: the one the file has)")
    sd.add_argument("--inputs", metavar="FILE.npy", help="input (T, N, I) (default: standard normal, T=100, N=8)")
    sd.add_argument("--seed", type=_typed("--seed", int, nonnegative_int), default=0, help="seed of the random input (default 0)")
    from hiddenstate.pipelines.inspect_command import add_model_dir_flags

    add_model_dir_flags(ins, lambda flag: _typed(flag, int, positive_int))

    # -- intervene, trace, check-cache, snapshot, states: their flags beside their commands --------------
    import importlib

    for module, rule in (("intervene_command", nonnegative_int), ("trace_command", nonnegative_int),
                         ("cache_check_command", None), ("snapshot_command", positive_int),
                         ("states_command", positive_int)):
        add = importlib.import_module(f"hiddenstate.pipelines.{module}").add_parser
        add(sub) if rule is None else add(sub, lambda flag, rule=rule: _typed(flag, int, rule))

    # -- export ----------------------------------------------------------------------------------
    ex = sub.add_parser("export", help="write a trained model as an ONNX graph or a torch.export program",
                        description="Write a trained model as a file that runs without hiddenstate: an ONNX graph "
                                    "(needs pip install 'hiddenstate[onnx]') or a torch.export program (needs "
                                    "pip install 'hiddenstate[torch]'). Prints how to load it.")
    ex.add_argument("checkpoint", metavar="RUN", help="run directory (or its checkpoint/ subdirectory)")
    ex.add_argument("--format", required=True, choices=("onnx", "torch"),
                    help="onnx (onnxruntime) or torch (.pt2, torch.export.load(FILE).module(), no hiddenstate needed)")
    ex.add_argument("--out", required=True, metavar="FILE", help="the file to create (it must not exist)")
    return parser


# -- commands ------------------------------------------------------------------------------------
def _print_result(result) -> None:
    if result.stopped == "finished":
        print(f"'{result.out}' is finished: step {result.step} of {result.config.steps}, validation loss "
              f"{result.val_loss:.4f} nats/char; nothing to train (add steps: --resume {result.out} --steps S).")
        return
    print(f"checkpoint: {result.checkpoint}")
    print(f"log: {result.log}")
    if result.plot is not None:
        print(f"loss curve: {result.plot}")
    if result.stopped != "steps":
        more = (f"; continue with `{PROG} train --resume {result.out}` (a new --max-minutes budget)"
                if result.stopped == "time" else "")
        print(f"stopped early ({result.stopped}) at step {result.step} of {result.config.steps}{more}")
    print(f"validation loss: {result.val_loss:.4f} nats/char ({result.val_bpc:.4f} bits/char, "
          f"perplexity {result.val_ppl:.2f}) after {result.step} step{'' if result.step == 1 else 's'}, "
          f"{result.seconds:.0f} s")


def _cmd_train(args) -> int:
    import dataclasses

    from hiddenstate import train as _train
    from hiddenstate.train.distributed import follower, launched

    if args.processes is not None and args.processes > 1 and not launched():  # torchrun's launcher, in this process
        from hiddenstate.train.distributed.launch import launch

        return launch(args.argv, args.processes)
    # every TrainConfig field that has a flag and was given
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(_train.TrainConfig)
             if getattr(args, f.name, None) is not None}
    if args.resume is not None:
        if args.preset is not None:
            raise _UsageError("--preset cannot be combined with --resume: a resumed run keeps its configuration.")
        result = _train.train(given, resume=args.resume, overwrite=args.overwrite, progress=not args.quiet,
                              device=args.device)
    else:
        config = dict(_train.PRESETS[args.preset]) if args.preset else {}  # no preset: no time limit
        config.update(given)
        result = _train.train(config, overwrite=args.overwrite, progress=not args.quiet, device=args.device)
    if not follower():  # one rank of a distributed run: rank 0 speaks for the run
        _print_result(result)
    return 0


def _cmd_sample(args) -> int:
    from hiddenstate import train as _train
    from hiddenstate.core.resources import check_memory
    from hiddenstate.pipelines.inspect_command import checkpoint_or_pretrained
    from hiddenstate.train.guards import sampling_memory

    trained = _train.load(checkpoint_or_pretrained(args))
    check_memory(f"--length {args.length}", sampling_memory(trained.model, args.length, len(args.prime or "\n")),
                 "Use a smaller --length.")
    text = _train.sample(trained, prime=args.prime, length=args.length, temperature=args.temperature, seed=args.seed,
                         top_k=args.top_k, top_p=args.top_p)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def _is_demo_run(state) -> bool:
    """A previous run of ``hiddenstate demo``: the demo preset's configuration (steps and limits aside)."""
    from hiddenstate.train import PRESETS, TrainConfig

    if state.kind != "run" or not isinstance(state.config, dict):
        return False
    demo = TrainConfig(**PRESETS["demo"]).to_dict()
    free = {"steps", "max_minutes", "out", "eval_every", "save_every"}
    return all(state.config.get(k) == v for k, v in demo.items() if k not in free)


def _cmd_demo(args) -> int:
    from hiddenstate import train as _train

    config = dict(_train.PRESETS["demo"])
    config["out"] = args.out
    if args.steps is not None:
        config["steps"] = args.steps
    if args.max_minutes is not None:
        config["max_minutes"] = args.max_minutes
    from hiddenstate.train.rundir.ownership import describe

    overwrite = args.overwrite or _is_demo_run(describe(args.out))  # the demo replaces its own previous run
    result = _train.train(config, overwrite=overwrite, progress=not args.quiet)
    prime = _DEMO_PRIME if set(_DEMO_PRIME) <= set(result.vocab.chars) else None
    print()
    print("--- sample (temperature 0.8, seed 0) ---")
    print(result.sample(prime=prime, length=600, temperature=0.8, seed=0).rstrip("\n"))
    print("--- end of sample ---")
    print()
    from hiddenstate.pipelines.app import inspect_checkpoint
    from hiddenstate.pipelines.inspect_command import stage_lines

    print(f"report: {inspect_checkpoint(result.checkpoint, Path(args.out) / 'report.html', echo=stage_lines())}")
    _print_result(result)
    return 0


def _cmd_reproduce(args) -> int:
    from hiddenstate.experiments import reproduce

    if args.name not in reproduce.EXPERIMENTS:  # the argument as the user typed it, before any work
        raise _UsageError(f"NAME must be one of {', '.join(reproduce.EXPERIMENTS)}; got {args.name!r}.")
    result = reproduce.run(args.name, quick=args.quick, out_dir=args.out, seed=args.seed)
    print(reproduce.format_result(result))
    return 0


def _pipeline(module: str, name: str):
    """A command run by ``hiddenstate.pipelines.<module>.<name>(args)``, imported when it runs."""
    def run(args) -> int:
        import importlib

        return getattr(importlib.import_module(f"hiddenstate.pipelines.{module}"), name)(args)
    return run


def _cmd_export(args) -> int:
    from hiddenstate import train as _train
    from hiddenstate.pipelines.export import check_new_file, export_checkpoint, load_hint

    ckpt = _train.resolve_checkpoint(args.checkpoint, name="RUN")  # one-line errors for bad paths
    check_new_file(args.out, name="--out")  # before the work, not after it
    trained = _train.load(ckpt)
    print(f"{args.format}: {export_checkpoint(trained, args.format, args.out)}")
    print(f"load it with: {load_hint(trained.model, args.format, args.out)}")
    return 0


_COMMANDS = {"train": _cmd_train, "sample": _cmd_sample, "demo": _cmd_demo, "reproduce": _cmd_reproduce,
             "export": _cmd_export, **{name: _pipeline(module, f"run_{name.replace('-', '_')}") for name, module in (
                 ("inspect", "inspect_command"), ("intervene", "intervene_command"), ("trace", "trace_command"),
                 ("check-cache", "cache_check_command"), ("snapshot", "snapshot_command"),
                 ("states", "states_command"))}}


def _one_line(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        text = f"{error.strerror}: '{error.filename}'"
    return " ".join(text.split())


#: The API's names of what a command's flags set: a message ``"<name> must ..."`` names the flag.
_TRAIN_NAMES = ("data", "out", "steps", "hidden_size", "num_layers", "seq_len", "batch_size", "lr", "clip", "seed",
                "max_minutes", "eval_every", "save_every", "dropout", "weight_drop", "ema", "embedding_dim",
                "overwrite", "cell", "dtype", "device", "tune_initial_state")
_FLAG_NAMES = {"train": _TRAIN_NAMES, "demo": _TRAIN_NAMES, "sample": ("prime", "length", "temperature", "seed", "top_k", "top_p"),
               "inspect": ("text", "out", "inputs", "kind", "prefix", "ids", "layers"), "reproduce": ("out", "seed"),
               "export": ("out", "format"),
               "intervene": ("layer", "step", "until", "value", "heads", "ids", "target", "source", "part"),
               "trace": ("clean_ids", "corrupted_ids", "target", "layers", "steps", "position", "part", "out"),
               "check-cache": ("ids", "attention_mask", "splits", "chunks", "paths"),
               "snapshot": ("ids", "out", "prefix_length"),
               "states": ("ids", "out", "layers", "heads", "states", "window", "stride", "dtype", "check_steps")}


def _flagged(text: str, command: str) -> str:
    """``text`` with a leading API name (``"prime must ..."``) replaced by the flag the user typed."""
    for name in _FLAG_NAMES.get(command, ()):
        if text.startswith(f"{name} must ") or text.startswith(f"{name}["):
            return "--" + name.replace("_", "-") + text[len(name):]
    return text


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings on one line each, like the errors."""
    print(f"{PROG}: warning: {' '.join(str(message).split())}", file=sys.stderr)


def _report(error: BaseException, command: str) -> int:
    """One line on stderr for an error that ends a command; returns the exit status."""
    from hiddenstate.train.distributed import exit_status
    from hiddenstate.train.guards import RunWriteError, TrainingDiverged

    if (status := exit_status(error, PROG)) is not None:  # a lost rank, a rendezvous, another rank's refusal
        return status
    if isinstance(error, MemoryError):
        print(f"{PROG}: error: out of memory ({_one_line(error)}). Ask for less (a smaller model, --length, "
              "--batch-size), or close other programs.", file=sys.stderr)
        return 1
    if isinstance(error, RecursionError):
        print(f"{PROG}: error: an input nests too deeply to be read ({_one_line(error)}).", file=sys.stderr)
        return 2
    if isinstance(error, KeyError):
        print(f"{PROG}: error: a required entry is missing: {_one_line(error)} (an edited or foreign file?).",
              file=sys.stderr)
        return 2
    from hiddenstate.core.extras import missing_extra

    if isinstance(error, ImportError) and missing_extra(error) is not None:  # an optional package: say which extra
        print(f"{PROG}: error: {missing_extra(error)}", file=sys.stderr)
        return 2
    known = (_UsageError, ValueError, TypeError, OSError, FloatingPointError)
    if not isinstance(error, known):
        print(f"{PROG}: internal error: {type(error).__name__}: {_one_line(error)} (set HIDDENSTATE_DEBUG=1 to "
              "see the traceback, and please report it)", file=sys.stderr)
        return 1
    print(f"{PROG}: error: {_flagged(_one_line(error), command)}", file=sys.stderr)
    full_disk = isinstance(error, OSError) and error.errno == errno.ENOSPC
    return 1 if isinstance(error, (TrainingDiverged, RunWriteError)) or full_disk else 2


def _interrupted(error: KeyboardInterrupt) -> int:
    """The message and exit status of an interrupted command (true about what was saved)."""
    from hiddenstate.train.guards import TrainingInterrupted

    if not isinstance(error, TrainingInterrupted):
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    run = error.checkpoint.parent
    again = (f"; continue with `{PROG} train --resume {run}`" if error.step is not None
             else "; nothing was left behind, so the same command starts it again")
    print(f"{PROG}: {error.describe()}{again}", file=sys.stderr)
    return error.exit_status


_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _blas_threads():
    """Limit BLAS to ``HIDDENSTATE_NUM_THREADS`` threads (default 1) unless the user chose a count.

    The matrices of a recurrent step are small: OpenBLAS's threads cost more than they save, and
    on a busy 2-core machine they made ``train`` and ``inspect`` 20-100x slower (measured).
    Setting ``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS``/``MKL_NUM_THREADS`` leaves BLAS alone.
    Every BLAS is limited, SciPy's included (:func:`~hiddenstate.core.threads.blas_threads`).
    """
    import contextlib

    if any(os.environ.get(v) for v in _THREAD_VARS):
        return contextlib.nullcontext()
    from hiddenstate.core.threads import blas_threads
    from hiddenstate.core.validation import positive_int

    n = _convert("HIDDENSTATE_NUM_THREADS", os.environ.get("HIDDENSTATE_NUM_THREADS", "1"), int, positive_int)
    if n > 1:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        n, notice = _free_threads(n, os.getloadavg()[0], cpus)
        if notice:
            warnings.warn(notice, UserWarning, stacklevel=2)
    return blas_threads(n)


def _free_threads(n: int, load: float, cpus: int) -> tuple:
    """``(threads to use, notice or "")``: one thread when ``n`` would not find ``n`` free CPUs.

    OpenBLAS threads spin and wait for each other at every small product: with one other busy
    process on the 2-core machine, two threads made a ``--preset long`` step 4.4x slower than one
    (2.07 s against 0.47 s, measured), so a ``HIDDENSTATE_NUM_THREADS`` that exceeds the CPUs the
    1-minute load average leaves free falls back to one thread, saying so.
    """
    free = cpus - load
    if n <= free + 0.5:
        return n, ""
    return 1, (f"HIDDENSTATE_NUM_THREADS={n} but the load average is {load:.1f} on {cpus} CPUs: using 1 BLAS "
               "thread, since threads that wait for a busy CPU make training several times slower (set "
               f"OMP_NUM_THREADS={n} to insist).")


def main(argv=None) -> int:
    """Run the ``hiddenstate`` command line.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0 done; 2 a user error (one line on stderr); 1 a run that failed (it
        diverged, the disk is full, memory ran out) or an internal error; 130 interrupted by SIGINT
        and 143 by SIGTERM (``train`` saves the step it was in first). argparse's own usage errors
        and ``--help`` exit (SystemExit, status 2 and 0) instead of returning.
    """
    given = sys.argv[1:] if argv is None else list(argv)
    for i, arg in enumerate(given):  # no path or value holds a NUL byte: the OS would refuse it, naming nothing
        if isinstance(arg, str) and "\0" in arg:
            flag = arg.partition("=")[0] if arg.startswith("-") else given[i - 1] if i and given[i - 1][:1] == "-" \
                else f"argument {i + 1}"
            print(f"{PROG}: error: {flag} must not hold a NUL byte (no path or value can); got {arg!r:.120}.",
                  file=sys.stderr)
            return 2
    parser = _build_parser()
    args = parser.parse_args(argv)  # exits with status 2 on unknown flags or bad values
    args.argv = sys.argv[1:] if argv is None else list(argv)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", UserWarning)  # shown, once each, on one line
            warnings.showwarning = _show_warning
            with _blas_threads():
                return _COMMANDS[args.command](args)
    except KeyboardInterrupt as error:
        from hiddenstate.train.distributed import follower

        with contextlib.redirect_stderr(io.StringIO()) if follower() else contextlib.nullcontext():
            return _interrupted(error)  # rank 0 of a distributed run says what was saved
    except Exception as error:  # a user error is one line, never a traceback
        if os.environ.get("HIDDENSTATE_DEBUG"):
            raise
        from hiddenstate.train.distributed import LostRank, RendezvousFailed, first_of_another_node, follower

        # rank 0 reports what all refused, and the first rank of each other node says it to that node's user
        quiet = follower() and not first_of_another_node() and not isinstance(error, (LostRank, RendezvousFailed))
        with contextlib.redirect_stderr(io.StringIO()) if quiet else contextlib.nullcontext():
            return _report(error, args.command)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
