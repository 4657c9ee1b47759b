"""The ``hiddenstate`` command: train, sample, demo, reproduce, inspect.

Every subcommand is a thin layer over the Python API (:mod:`hiddenstate.train`,
:mod:`hiddenstate.reproduce`, :mod:`hiddenstate.report`). Errors the user can fix (a missing or
empty file, a directory given as a file, a prime with unknown characters, a bad flag value) are
one line on stderr, ``hiddenstate: error: ...``, and exit status 2, like argparse's own usage
errors; nothing prints a traceback for them (set ``HIDDENSTATE_DEBUG=1`` to see one).

Examples
--------
::

    hiddenstate train --data input.txt --cell lstm --hidden-size 256 --steps 3000 --out runs/lstm
    hiddenstate train --resume runs/lstm --steps 6000
    hiddenstate sample runs/lstm --prime "ROMEO:" --length 400 --temperature 0.8 --seed 1
    hiddenstate demo
"""

from __future__ import annotations

import argparse
import os
import sys
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


def _number(convert, rule: str, ok):
    """An argparse ``type``: ``convert(text)`` that must satisfy ``ok``; errors say ``must be <rule>``."""
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {rule}; got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {rule}; got {text}")
        return value
    return parse


_positive_int = _number(int, "a positive integer", lambda v: v >= 1)
_nonnegative_int = _number(int, "a non-negative integer", lambda v: v >= 0)
_positive_float = _number(float, "a positive number (finite)", lambda v: 0 < v < float("inf"))
_nonnegative_float = _number(float, "a finite number >= 0", lambda v: 0 <= v < float("inf"))
_dropout = _number(float, "a number in [0, 0.9]", lambda v: 0.0 <= v <= 0.9)
_unit_open = _number(float, "a number strictly between 0 and 1", lambda v: 0.0 < v < 1.0)


def _build_parser() -> argparse.ArgumentParser:
    from hiddenstate.train.model import CELLS

    parser = _Parser(
        prog=PROG,
        description="Recurrent networks (RNN, GRU, LSTM) in NumPy, about the hidden state.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    # -- train -----------------------------------------------------------------------------------
    tr = sub.add_parser("train", help="train a character-level language model on a text file",
                        description="Train a character-level language model with truncated BPTT. "
                                    "Flags left out take the preset's values, or without --preset the defaults shown "
                                    "(the demo model, with no time limit).")
    tr.add_argument("--data", metavar="FILE", help="UTF-8 text file (default: the embedded Shakespeare)")
    tr.add_argument("--cell", choices=CELLS, help="recurrent cell (default gru)")
    tr.add_argument("--hidden-size", type=_positive_int, metavar="H", help="units per layer (default 256)")
    tr.add_argument("--num-layers", type=_positive_int, metavar="L", help="stacked layers (default 1)")
    tr.add_argument("--seq-len", type=_positive_int, metavar="T", help="truncated-BPTT length (default 64)")
    tr.add_argument("--batch-size", type=_positive_int, metavar="N", help="parallel streams (default 32)")
    tr.add_argument("--steps", type=_positive_int, metavar="S", help="total optimizer steps (default 1500)")
    tr.add_argument("--lr", type=_positive_float, help="peak Adam learning rate, decayed to lr/10 on a cosine (default 8e-3)")
    tr.add_argument("--clip", type=_positive_float, help="max global gradient L2 norm (default 5)")
    tr.add_argument("--seed", type=_nonnegative_int, help="seed of the initial weights (default 0)")
    tr.add_argument("--dtype", choices=("float32", "float64"), help="default float32 (about twice as fast as float64)")
    tr.add_argument("--out", metavar="DIR", help="run directory: checkpoint/, log.jsonl, loss.png")
    tr.add_argument("--resume", metavar="DIR", help="continue the run saved in DIR (a run or checkpoint directory)")
    tr.add_argument("--preset", choices=("demo", "long"), help="named configuration: demo (the defaults, at most 3 minutes) or long (see README)")
    tr.add_argument("--max-minutes", type=_positive_float, metavar="M",
                    help="wall-clock limit: stop (with a last evaluation and checkpoint) when reached")
    tr.add_argument("--eval-every", type=_positive_int, metavar="K", help="steps between validation passes")
    tr.add_argument("--save-every", type=_positive_int, metavar="K", help="steps between checkpoints")
    tr.add_argument("--dropout", type=_dropout, metavar="P", help="dropout on layer outputs (default 0)")
    tr.add_argument("--weight-drop", type=_dropout, metavar="P",
                    help="DropConnect on the recurrent weights (Merity et al. 2018; default 0)")
    tr.add_argument("--ema", type=_unit_open, metavar="DECAY",
                    help="evaluate, save and sample an exponential moving average of the weights (e.g. 0.998)")
    tr.add_argument("--embedding-dim", type=_positive_int, metavar="E", help="learned embedding instead of one-hot")
    tr.add_argument("--quiet", action="store_true", help="no progress bar")

    # -- sample ----------------------------------------------------------------------------------
    sa = sub.add_parser("sample", help="generate text from a checkpoint",
                        description="Generate text from a trained model; the same seed gives the same text.")
    sa.add_argument("checkpoint", metavar="CKPT", help="run directory (or its checkpoint/ subdirectory)")
    sa.add_argument("--prime", help="text to start from (default: a newline)")
    sa.add_argument("--length", type=_nonnegative_int, default=500, help="characters to generate (default 500)")
    sa.add_argument("--temperature", type=_nonnegative_float, default=1.0,
                    help="softmax temperature; 0 = greedy (default 1.0)")
    sa.add_argument("--seed", type=_nonnegative_int, default=0, help="sampler seed (default 0)")

    # -- demo ------------------------------------------------------------------------------------
    de = sub.add_parser("demo", help="train the default model on Shakespeare and sample from it",
                        description="Train with the demo preset on the embedded Shakespeare, print a sample "
                                    "and the final validation loss.")
    de.add_argument("--out", default=_DEMO_OUT, metavar="DIR", help=f"run directory (default {_DEMO_OUT})")
    de.add_argument("--steps", type=_positive_int, metavar="S", help="override the preset's steps")
    de.add_argument("--max-minutes", type=_positive_float, metavar="M", help="override the preset's time limit")
    de.add_argument("--quiet", action="store_true", help="no progress bar")

    # -- reproduce -------------------------------------------------------------------------------
    rp = sub.add_parser("reproduce", help="rerun a paper's experiment and compare with its numbers")
    rp.add_argument("name", metavar="NAME", help="one of: elman-xor, elman-letters, elman-sentences, adding, copy, flipflop")
    rp.add_argument("--quick", action="store_true", help="reduced settings (seconds)")
    rp.add_argument("--out", default="reproduce", metavar="DIR", help="directory for the figure")
    rp.add_argument("--seed", type=_nonnegative_int, default=0)

    # -- inspect ---------------------------------------------------------------------------------
    ins = sub.add_parser("inspect", help="write an HTML report of what a trained model's hidden state does")
    ins.add_argument("checkpoint", metavar="CKPT", help="run directory (or its checkpoint/ subdirectory)")
    ins.add_argument("--text", metavar="FILE", help="text to run the model on (default: its validation text)")
    ins.add_argument("--out", default="report.html", metavar="FILE", help="output HTML file")
    return parser


# -- commands ------------------------------------------------------------------------------------
_TRAIN_FIELDS = ("data", "cell", "hidden_size", "num_layers", "seq_len", "batch_size", "steps", "lr", "clip",
                 "seed", "dtype", "out", "max_minutes", "eval_every", "save_every", "embedding_dim", "dropout",
                 "weight_drop", "ema")


def _print_result(result) -> None:
    print(f"checkpoint: {result.checkpoint}")
    print(f"log: {result.log}")
    if result.plot is not None:
        print(f"loss curve: {result.plot}")
    if result.stopped != "steps":
        print(f"stopped early ({result.stopped}) at step {result.step} of {result.config.steps}")
    print(f"validation loss: {result.val_loss:.4f} nats/char ({result.val_bpc:.4f} bits/char, "
          f"perplexity {result.val_ppl:.2f}) after {result.step} steps, {result.seconds:.0f} s")


def _cmd_train(args) -> int:
    from hiddenstate import train as _train

    given = {k: getattr(args, k) for k in _TRAIN_FIELDS if getattr(args, k) is not None}
    if args.resume is not None:
        if args.preset is not None:
            raise _UsageError("--preset cannot be combined with --resume: a resumed run keeps its configuration.")
        result = _train.train(given, resume=args.resume, progress=not args.quiet)
    else:
        config = dict(_train.PRESETS[args.preset]) if args.preset else {}  # no preset: no time limit
        config.update(given)
        result = _train.train(config, progress=not args.quiet)
    _print_result(result)
    return 0


def _cmd_sample(args) -> int:
    from hiddenstate import train as _train

    text = _train.sample(args.checkpoint, prime=args.prime, length=args.length,
                         temperature=args.temperature, seed=args.seed)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def _cmd_demo(args) -> int:
    from hiddenstate import train as _train

    config = dict(_train.PRESETS["demo"])
    config["out"] = args.out
    if args.steps is not None:
        config["steps"] = args.steps
    if args.max_minutes is not None:
        config["max_minutes"] = args.max_minutes
    result = _train.train(config, progress=not args.quiet)
    prime = _DEMO_PRIME if set(_DEMO_PRIME) <= set(result.vocab.chars) else None
    print()
    print("--- sample (temperature 0.8, seed 0) ---")
    print(result.sample(prime=prime, length=600, temperature=0.8, seed=0).rstrip("\n"))
    print("--- end of sample ---")
    print()
    from hiddenstate.app import inspect_checkpoint

    print(f"report: {inspect_checkpoint(result.checkpoint, Path(args.out) / 'report.html')}")
    _print_result(result)
    return 0


def _cmd_reproduce(args) -> int:
    from hiddenstate.experiments import reproduce

    result = reproduce.run(args.name, quick=args.quick, out_dir=args.out, seed=args.seed)
    print(reproduce.format_result(result))
    return 0


def _cmd_inspect(args) -> int:
    from hiddenstate import train as _train

    ckpt = _train.resolve_checkpoint(args.checkpoint)  # one-line errors for bad paths
    if args.text is not None:
        _check_text_file(args.text)
    from hiddenstate.app import inspect_checkpoint

    print(f"report: {inspect_checkpoint(ckpt, args.out, text_file=args.text)}")
    return 0


def _check_text_file(path) -> None:
    from hiddenstate.train.corpus import load_text

    load_text(path)


_COMMANDS = {"train": _cmd_train, "sample": _cmd_sample, "demo": _cmd_demo,
             "reproduce": _cmd_reproduce, "inspect": _cmd_inspect}


def _one_line(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        text = f"{error.strerror}: '{error.filename}'"
    return " ".join(text.split())


_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _blas_threads():
    """Limit BLAS to ``HIDDENSTATE_NUM_THREADS`` threads (default 1) unless the user chose a count.

    The matrices of a recurrent step are small: OpenBLAS's threads cost more than they save, and
    on a busy 2-core machine they made ``train`` and ``inspect`` 20-100x slower (measured).
    Setting ``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS``/``MKL_NUM_THREADS`` leaves BLAS alone.
    """
    import contextlib

    if any(os.environ.get(v) for v in _THREAD_VARS):
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    raw = os.environ.get("HIDDENSTATE_NUM_THREADS", "1")
    try:
        n = int(raw)
    except ValueError:
        raise _UsageError(f"HIDDENSTATE_NUM_THREADS must be a positive integer; got {raw!r}.") from None
    if n < 1:
        raise _UsageError(f"HIDDENSTATE_NUM_THREADS must be a positive integer; got {n}.")
    return threadpool_limits(limits=n, user_api="blas")


def main(argv=None) -> int:
    """Run the ``hiddenstate`` command line; returns the exit status (0 ok, 2 user error, 130 interrupted).

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).
    """
    parser = _build_parser()
    args = parser.parse_args(argv)  # exits with status 2 on unknown flags or bad values
    try:
        with _blas_threads():
            return _COMMANDS[args.command](args)
    except (_UsageError, ValueError, TypeError, OSError, FloatingPointError) as error:
        if os.environ.get("HIDDENSTATE_DEBUG"):
            raise
        print(f"{PROG}: error: {_one_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; the last checkpoint is intact (continue with --resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
