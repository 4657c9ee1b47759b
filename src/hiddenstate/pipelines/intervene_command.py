"""``hiddenstate intervene``: edit one recurrent layer's state at a step of a model directory and print the effect per position.

The directory is a ``save_pretrained`` model of a registered family (as ``hiddenstate inspect``
takes one), the ids a ``.npy`` file of integers (T,) or (N, T)
(:func:`~hiddenstate.pipelines.inspect_command.read_ids`). One :class:`~hiddenstate.StateEdit`
(``--layer``, ``--step``, ``--op``, ``--value``, ``--until``, ``--heads``, ``--part``; ``--source``
the ids of another prompt for ``--op replace``, activation patching, or the reference of ``mean``) runs through
:func:`hiddenstate.intervene`; stdout gets one line per sequence and position: the logit
difference, the KL divergence of the clean from the edited next-token distribution, and with
``--target`` the target token's probability, clean and edited. ``--out FILE`` also writes the
same as JSON (a new file, or a previous effects file of this command, replaced; any other file
is refused before the model is loaded). Nothing is written without ``--out``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["MARK", "add_parser", "check_effects_out", "effects_json", "run_intervene"]


def add_parser(sub, index) -> None:
    """Add ``hiddenstate intervene`` and its flags to the command line's subparsers.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        The ``hiddenstate`` parser's subparsers.
    index : callable
        ``index(flag)``: the ``type=`` of a flag that takes a non-negative int (the CLI's one-line
        error names the flag).
    """
    iv = sub.add_parser("intervene", help="change a recurrent layer's state at a step and print the effect per position",
                        description="Edit one recurrent layer's state after a step of a save_pretrained model directory "
                                    "(zero, the mean over the run, scale, add, or replace it with another prompt's, "
                                    "--source), let the model continue from the edited "
                                    "state, and print per sequence and position the logit difference and the KL "
                                    "divergence from the clean run (and the --target token's probability). Writes "
                                    "nothing unless --out is given.")
    iv.add_argument("model_dir", metavar="DIR", help="a save_pretrained model directory of a registered family")
    iv.add_argument("--ids", required=True, metavar="FILE.npy", help="token ids (T,) or (N, T)")
    iv.add_argument("--layer", required=True, type=index("--layer"), metavar="L",
                    help="the recurrent layer's index in the model's layer map")
    iv.add_argument("--step", required=True, type=index("--step"), metavar="T",
                    help="the 0-based position whose state (after reading that token) is edited")
    iv.add_argument("--op", required=True, choices=("zero", "mean", "scale", "add", "replace"), help="the operation")
    iv.add_argument("--value", type=float, metavar="X", help="the factor (scale) or the number added (add)")
    iv.add_argument("--source", metavar="FILE.npy",
                    help="token ids (N or 1 rows, at least --until+1 steps) of another prompt: replace copies its "
                         "state at the same step (activation patching); mean averages over its run")
    iv.add_argument("--part", default="state", choices=("state", "conv"),
                    help="the part of the layer's state edited: the recurrent state (default) or its short "
                         "convolution's window")
    iv.add_argument("--until", type=index("--until"), metavar="U",
                    help="edit the state after every step from --step to U (default --step)")
    iv.add_argument("--heads", metavar="I,J,...", help="only these heads (default all)")
    iv.add_argument("--target", metavar="FILE.npy", help="token ids (N, T) whose probability is printed")
    iv.add_argument("--out", metavar="FILE", help="also write the effects as JSON (a new file, or a previous one of "
                                                 "this command, replaced)")


#: The key and value that mark a JSON file as written by ``hiddenstate intervene`` (so it may be replaced).
MARK = ("hiddenstate", "intervene effects")


def check_effects_out(out) -> Path:
    """``--out``: a new file in an existing directory, or a previous effects file of this command.

    Parameters
    ----------
    out : str or os.PathLike

    Returns
    -------
    Path

    Raises
    ------
    ValueError
        A directory, a file that is not a JSON object marked :data:`MARK`, a missing directory.
    """
    path = Path(out)
    if not path.parent.is_dir():
        raise ValueError(f"--out must lie in an existing directory; got '{path}' ('{path.parent}' is not one). "
                         "Create it first, or choose another --out.")
    if os.path.lexists(path):
        try:
            ours = path.is_file() and not path.is_symlink() and json.loads(path.read_text()).get(MARK[0]) == MARK[1]
        except (OSError, ValueError, AttributeError, UnicodeDecodeError):
            ours = False
        if not ours:
            raise ValueError(f"--out must be a new file or a previous effects file of 'hiddenstate intervene'; got "
                             f"'{path}', which is something else. Choose another --out.")
    return path


def effects_json(run, args) -> dict:
    """What ``--out`` holds: the mark, the model, the edit and :meth:`~hiddenstate.EditRun.effects`.

    Parameters
    ----------
    run : EditRun
    args : argparse.Namespace
        The command's flags (the edit's).

    Returns
    -------
    dict
        ``{"hiddenstate": "intervene effects", "model", "edit": {...}, "effects": {name: (N, T) lists}}``.
    """
    (e,) = run.edits
    edit = {"layer": e.layer, "step": e.step, "until": e.until, "op": e.op, "part": e.part,
            "value": None if e.value is None else float(e.value), "heads": None if e.heads is None else list(e.heads),
            "source": getattr(args, "source", None)}
    return {MARK[0]: MARK[1], "model": run.model, "edit": edit, "effects": run.effects()}


def _lines(run) -> list:
    N, T = run.kl.shape
    head = f"{'seq':>4} {'pos':>5} {'logit_diff':>11} {'KL':>11}"
    head += f" {'p_target clean':>15} {'edited':>11}" if run.target is not None else ""
    lines = [head]
    for n in range(N):
        for t in range(T):
            line = f"{n:>4} {t:>5} {run.logit_diff[n, t]:>11.4g} {run.kl[n, t]:>11.4g}"
            if run.target is not None:
                line += f" {run.clean_target_prob[n, t]:>15.4g} {run.target_prob[n, t]:>11.4g}"
            lines.append(line)
    return lines


def run_intervene(args) -> int:
    """The ``intervene`` subcommand: read the ids, check ``--out``, run the edit, print, write JSON if asked.

    Parameters
    ----------
    args : argparse.Namespace
        ``model_dir``, ``ids``, ``layer``, ``step``, ``op``, ``value``, ``until``, ``heads``,
        ``source``, ``part``, ``target``, ``out``.

    Returns
    -------
    int
        0.

    Raises
    ------
    ValueError, TypeError, FileNotFoundError
        One line each (the CLI prints it, exit status 2): a directory that is not a model
        directory, ids or a target that are not integer ``.npy`` arrays or do not fit the model,
        a layer that is not recurrent, a step past the ids, heads out of range, ``--value``
        missing for add and scale or given for zero and mean, ``--source`` missing for replace
        or of too few steps, a ``--part`` the layer has not, an ``--out`` that is not ours.
    """
    from hiddenstate.edit import StateEdit, intervene
    from hiddenstate.pipelines.inspect_command import layer_list, read_ids, require_model_directory

    require_model_directory(args.model_dir)
    out = None if args.out is None else check_effects_out(args.out)
    ids = read_ids(args.ids, name="--ids")
    target = None if args.target is None else read_ids(args.target, name="--target")
    heads = None if args.heads is None else layer_list("--heads", args.heads)
    source = None if args.source is None else read_ids(args.source, name="--source")
    if args.op == "replace" and source is None:
        raise ValueError("--source must be given for --op replace (the token ids of the prompt whose state is copied, "
                         "a .npy file); got none.")
    if source is not None and args.op not in ("replace", "mean"):
        raise ValueError(f"--source must not be given for --op {args.op} (only replace and mean read another run).")
    edit = StateEdit(args.layer, args.step, args.op, value=args.value, until=args.until, heads=heads, source=source,
                     part=args.part)
    run = intervene(str(args.model_dir), ids, [edit], target=target)
    print(f"{run.model}: {edit!r}")
    print("\n".join(_lines(run)))
    if out is not None:
        out.write_text(json.dumps(effects_json(run, args), indent=1) + "\n")
        print(f"effects: {out}")
    return 0
