"""``hiddenstate trace``: causal tracing of a model directory's recurrent states over layers x steps.

The directory is a ``save_pretrained`` model of a registered family (as ``hiddenstate inspect``
and ``hiddenstate intervene`` take one); ``--clean-ids`` and ``--corrupted-ids`` are ``.npy``
files of integers of the same shape, (T,) or (N, T)
(:func:`~hiddenstate.pipelines.inspect_command.read_ids`), ``--target`` the token whose
probability at ``--position`` (default the last) is read. :func:`hiddenstate.causal_trace` runs
the clean and corrupted ids and the first cell, the cost line (edited runs, the seconds of one,
the estimate) is printed, then the rest of the sweep runs. ``--out DIR`` receives
``trace.json`` (the matrix, the probabilities, the layers and steps), ``trace.png`` (the
heatmap) and ``trace.html`` (a self-contained page); the directory must be new, empty, or a
previous output of this command (its three files replaced), checked before the model is loaded.
Nothing is written anywhere else.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["FILES", "MARK", "add_parser", "check_trace_out", "run_trace", "step_list"]

#: The key and value that mark ``trace.json`` as written by ``hiddenstate trace`` (so its directory may be reused).
MARK = ("hiddenstate", "causal trace")
#: The files written under ``--out``.
FILES = ("trace.json", "trace.png", "trace.html")


def add_parser(sub, index) -> None:
    """Add ``hiddenstate trace`` and its flags to the command line's subparsers.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        The ``hiddenstate`` parser's subparsers.
    index : callable
        ``index(flag)``: the ``type=`` of a flag that takes a non-negative int.
    """
    tr = sub.add_parser("trace", help="causal tracing: restore the clean state of each (layer, step) into a corrupted run",
                        description="Run a save_pretrained model directory on clean and corrupted token ids; for every "
                                    "recurrent layer and step, restore the clean run's state of that layer after that "
                                    "step into the corrupted run, let the model continue, and measure the --target "
                                    "token's probability at the last position (the indirect effect, Meng et al. 2022). "
                                    "Prints the sweep's cost before it runs; writes trace.json, trace.png (the "
                                    "heatmap) and trace.html under --out only.")
    tr.add_argument("model_dir", metavar="DIR", help="a save_pretrained model directory of a registered family")
    tr.add_argument("--clean-ids", required=True, metavar="FILE.npy", help="the clean prompt's token ids (T,) or (N, T)")
    tr.add_argument("--corrupted-ids", required=True, metavar="FILE.npy",
                    help="the corrupted prompt's token ids, the clean ids' shape")
    tr.add_argument("--target", required=True, type=index("--target"), metavar="TOKEN",
                    help="the token id whose probability is read")
    tr.add_argument("--layers", metavar="I,J,...", help="the recurrent layers traced (default all)")
    tr.add_argument("--steps", metavar="A:B|I,J,...", help="the restored steps (default every step before --position)")
    tr.add_argument("--position", type=index("--position"), metavar="P",
                    help="the position whose next-token probability is read (default the last)")
    tr.add_argument("--part", default="state", choices=("state", "conv"),
                    help="the part of the state restored (default state)")
    tr.add_argument("--out", required=True, metavar="DIR",
                    help="the directory of trace.json, trace.png and trace.html (new, empty, or a previous one of "
                         "this command)")


def step_list(text) -> list:
    """``--steps 2:6`` (steps 2, 3, 4, 5) or ``--steps 1,4,7``.

    Parameters
    ----------
    text : str

    Returns
    -------
    list of int

    Raises
    ------
    ValueError
        Neither form, or an empty range.
    """
    text = str(text).strip()
    if ":" in text:
        a, _, b = text.partition(":")
        if a.strip().isdigit() and b.strip().isdigit() and int(a) < int(b):
            return list(range(int(a), int(b)))
        raise ValueError(f"--steps must be START:STOP with START < STOP (e.g. 0:8) or comma-separated steps; got "
                         f"{text!r}.")
    parts = text.split(",")
    if not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
        raise ValueError(f"--steps must be START:STOP (e.g. 0:8) or comma-separated steps, e.g. 1,4; got {text!r}.")
    return [int(p) for p in parts]


def check_trace_out(out) -> Path:
    """``--out``: a new directory, an empty one, or a previous output of this command.

    Parameters
    ----------
    out : str or os.PathLike

    Returns
    -------
    Path

    Raises
    ------
    ValueError
        A file; a directory holding anything but a previous trace's files (marked :data:`MARK`).
    """
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out must be a directory (new, empty, or a previous one of 'hiddenstate trace'); got "
                         f"'{path}', which is a file. Choose another --out.")
    if path.is_dir():
        names = {p.name for p in path.iterdir()}
        try:
            data = json.loads((path / FILES[0]).read_text()) if FILES[0] in names else {}
            ours = isinstance(data, dict) and data.get(MARK[0]) == MARK[1]
        except (OSError, ValueError, UnicodeDecodeError):
            ours = False
        if names and not (ours and names <= set(FILES) and all((path / n).is_file() for n in names)):
            raise ValueError(f"--out must be a new or empty directory, or a previous one of 'hiddenstate trace'; got "
                             f"'{path}', which holds other files. Choose another --out (nothing was written).")
    return path


def run_trace(args) -> int:
    """The ``trace`` subcommand: check everything, print the cost, sweep, write the three files.

    Parameters
    ----------
    args : argparse.Namespace
        ``model_dir``, ``clean_ids``, ``corrupted_ids``, ``target``, ``layers``, ``steps``,
        ``position``, ``part``, ``out``.

    Returns
    -------
    int
        0.

    Raises
    ------
    ValueError, TypeError, FileNotFoundError
        One line each (the CLI prints it, exit status 2): a directory that is not a model
        directory, ids that are not integer ``.npy`` arrays or not of the same shape, a target
        outside the vocabulary, a layer that is not recurrent, a step at or past the position, an
        ``--out`` that is not ours.
    """
    from hiddenstate.edit.causal import causal_trace
    from hiddenstate.pipelines.inspect_command import layer_list, read_ids, require_model_directory
    from hiddenstate.report.figures import save_png
    from hiddenstate.report.tracing import trace_page

    require_model_directory(args.model_dir)
    out = check_trace_out(args.out)
    clean = read_ids(args.clean_ids, name="--clean-ids")
    corrupted = read_ids(args.corrupted_ids, name="--corrupted-ids")
    if clean.shape != corrupted.shape:
        raise ValueError(f"--corrupted-ids must have the shape of --clean-ids {clean.shape} (the same positions, "
                         f"token for token); got {corrupted.shape}.")
    layers = None if args.layers is None else layer_list("--layers", args.layers)
    steps = None if args.steps is None else step_list(args.steps)
    trace = causal_trace(str(args.model_dir), clean, corrupted, target=args.target, layers=layers, steps=steps,
                         position=args.position, part=args.part, on_cost=lambda cost: print(cost, flush=True))
    print(repr(trace))
    fig = trace.plot()
    out.mkdir(parents=True, exist_ok=True)
    (out / FILES[0]).write_text(json.dumps({MARK[0]: MARK[1], **trace.to_dict()}, indent=1) + "\n")
    save_png(fig, out / FILES[1])
    (out / FILES[2]).write_text(trace_page(trace), encoding="utf-8")
    print(f"written: {', '.join(str(out / f) for f in FILES)}")
    return 0
