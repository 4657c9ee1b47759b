"""``hiddenstate snapshot``: the whole state of a model directory after the prefix ids, written to a snapshot file.

The directory is a ``save_pretrained`` model of a registered family (as ``hiddenstate inspect``
and ``hiddenstate intervene`` take one), the ids a ``.npy`` file of integers (T,) or (N, T)
(:func:`~hiddenstate.pipelines.inspect_command.read_ids`). ``--out`` must be a new file: it is
checked before the model is loaded, and the snapshot's memory is stated before it is taken
(:func:`hiddenstate.snapshot_bytes`). Load it back in Python with
``hiddenstate.load_snapshot(FILE, model)``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["add_parser", "run_snapshot"]


def add_parser(sub, positive) -> None:
    """Add ``hiddenstate snapshot`` and its flags to the command line's subparsers.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        The ``hiddenstate`` parser's subparsers.
    positive : callable
        ``positive(flag)``: the ``type=`` of a flag that takes a positive int (the CLI's one-line
        error names the flag).
    """
    sp = sub.add_parser("snapshot", help="write a model's whole state after the prefix ids to a snapshot file",
                        description="Run a save_pretrained model directory on the prefix ids and write its whole state "
                                    "(every recurrent and convolution state, the attention layers' keys and values) "
                                    "to a new safetensors file that hiddenstate.load_snapshot(FILE, model) reads "
                                    "back; the memory it takes is printed before it is taken.")
    sp.add_argument("model_dir", metavar="DIR", help="a save_pretrained model directory of a registered family")
    sp.add_argument("--ids", required=True, metavar="FILE.npy", help="token ids (T,) or (N, T): the prefix")
    sp.add_argument("--out", required=True, metavar="FILE", help="the snapshot file to write (a new file)")
    sp.add_argument("--prefix-length", type=positive("--prefix-length"), metavar="T",
                    help="keep the state after the first T tokens of the ids (default all)")


def run_snapshot(args) -> int:
    """The ``snapshot`` subcommand: check ``--out``, read the ids, load the model, state the memory, write.

    Parameters
    ----------
    args : argparse.Namespace
        ``model_dir``, ``ids``, ``out``, ``prefix_length``.

    Returns
    -------
    int
        0.

    Raises
    ------
    ValueError, TypeError, FileNotFoundError
        One line each (the CLI prints it, exit status 2): a directory that is not a model
        directory, an ``--out`` that exists or lies in no directory, ids that are not an integer
        ``.npy`` array or do not fit the model, a prefix length above the ids' length.
    """
    from hiddenstate.core.resources import format_bytes
    from hiddenstate.interop.families.directory import load_model_dir
    from hiddenstate.keep import snapshot, snapshot_bytes
    from hiddenstate.pipelines.inspect_command import read_ids, require_model_directory

    require_model_directory(args.model_dir)
    out = Path(args.out)
    if os.path.lexists(out) or not out.parent.is_dir():
        why = "which exists (a snapshot never replaces a file)" if os.path.lexists(out) else "in no existing directory"
        raise ValueError(f"--out must be a new file in an existing directory; got '{out}', {why}.")
    ids = read_ids(args.ids, name="--ids")
    model = load_model_dir(args.model_dir)
    stated = snapshot_bytes(model, ids, prefix_length=args.prefix_length)
    print(f"{model.config.model_type}: the state after {args.prefix_length or ids.shape[1]} tokens of {ids.shape[0]} "
          f"sequence(s) takes {format_bytes(stated)} ({stated} bytes)")
    snap = snapshot(model, ids, prefix_length=args.prefix_length)
    parts = sorted({i["part"] for i in snap.info.values()})
    print(f"snapshot: {snap.save(out)} ({len(snap.arrays)} arrays: {', '.join(parts)}; {snap.nbytes} bytes)")
    return 0
