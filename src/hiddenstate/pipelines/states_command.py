"""``hiddenstate states``: every step's states of a model directory's recurrent layers, written to a states file.

The directory is a ``save_pretrained`` model of a registered family (as ``hiddenstate inspect``
takes one), the ids a ``.npy`` file of integers (T,) or (N, T)
(:func:`~hiddenstate.pipelines.inspect_command.read_ids`). :func:`hiddenstate.record_states` runs:
each chosen layer proven against the model on a prefix, then the states streamed out of one
forward pass (kept steps and heads only). ``--out`` is checked before the model is loaded: a new
file, or with ``--overwrite`` a previous states file (any other file is never replaced). Each
stage is told on stderr; stdout gets the file and one line per layer (its states' shapes, the
check's figures). Load it back with ``hiddenstate.load_states(FILE)``.
"""

from __future__ import annotations

import sys

__all__ = ["add_parser", "run_states"]


def add_parser(sub, positive) -> None:
    """Add ``hiddenstate states`` and its flags to the command line's subparsers.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        The ``hiddenstate`` parser's subparsers.
    positive : callable
        ``positive(flag)``: the ``type=`` of a flag that takes a positive int.
    """
    sp = sub.add_parser("states", help="write every step's states of a model's recurrent layers to a file",
                        description="Run a save_pretrained model directory on the ids and write every step's states "
                                    "of its recurrent layers to a safetensors states file (one tensor "
                                    "layer{L}.{state} of shape (S, N, ...) each; hiddenstate.load_states(FILE) reads "
                                    "it back). Each layer is first proven against the model's own output on a prefix; "
                                    "for Mamba, Mamba-2 and the delta rule only the kept steps and heads are ever "
                                    "allocated (the other kinds' states are cut out of their records, every step "
                                    "proven).")
    sp.add_argument("model_dir", metavar="DIR", help="a save_pretrained model directory of a registered family")
    sp.add_argument("--ids", required=True, metavar="FILE.npy", help="token ids (T,) or (N, T)")
    sp.add_argument("--out", required=True, metavar="FILE.safetensors",
                    help="the states file to write (a new file; a previous states file with --overwrite)")
    sp.add_argument("--overwrite", action="store_true", help="replace a previous states file at --out")
    sp.add_argument("--layers", metavar="I,J,...", help="the recurrent layers (default all)")
    sp.add_argument("--states", metavar="NAME,...", help="the states kept, e.g. ssm or recurrent (default all)")
    sp.add_argument("--heads", metavar="I,J,...",
                    help="the heads (or channels) kept, along each state's first axis (default all)")
    sp.add_argument("--window", metavar="START:STOP", help="keep the states of positions START to STOP-1 (default all)")
    sp.add_argument("--stride", type=positive("--stride"), default=1, metavar="K",
                    help="keep every K-th step of the window (default 1)")
    sp.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                    help="the states' dtype and the one the kernel computes in (default float32)")
    sp.add_argument("--check-steps", type=positive("--check-steps"), default=None, metavar="K",
                    help="steps of the prefix each layer is proven on against the model (default 64; the kinds "
                         "without a streamed kernel are proven on every step)")
    sp.add_argument("--max-bytes", metavar="SIZE", help="the cap on the estimated memory, checked before the model "
                    "runs: bytes, or with a unit K, M, G or Ki, Mi, Gi, e.g. 8G (default 4Gi)")


def _indices(flag: str, text):
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise ValueError(f"{flag} must be comma-separated indices, e.g. 0,3; got {text!r:.60}.")
    return [int(p) for p in parts]


def _saved(got, out, overwrite: bool):
    try:
        return got.save(out, overwrite=overwrite)
    except ValueError as e:  # the file changed while the model ran
        text = str(e).replace("overwrite=True", "--overwrite")
        raise ValueError("--out" + text[len("path"):] if text.startswith("path ") else text) from None


def run_states(args) -> int:
    """The ``states`` subcommand: check ``--out``, read the ids, load the model, record, write.

    Parameters
    ----------
    args : argparse.Namespace
        ``model_dir``, ``ids``, ``out``, ``overwrite``, ``layers``, ``states``, ``heads``,
        ``window``, ``stride``, ``dtype``, ``check_steps``, ``max_bytes``.

    Returns
    -------
    int
        0.

    Raises
    ------
    ValueError, TypeError, FileNotFoundError
        One line each (the CLI prints it, exit status 2): a directory that is not a model
        directory; an ``--out`` that is a directory or another file (or a states file without
        ``--overwrite``); ids that are not an integer ``.npy`` array or do not fit the model;
        layers, heads or states the model does not have; a window out of range; an estimate
        over ``--max-bytes``; a layer our kernel does not reproduce.
    """
    from hiddenstate.core.resources import parse_bytes
    from hiddenstate.interop.families.directory import load_model_dir
    from hiddenstate.interop.families.hooks import MAX_BYTES
    from hiddenstate.interop.families.states_out import CHECK_STEPS, record_states
    from hiddenstate.interop.states_file import states_target
    from hiddenstate.pipelines.inspect_command import layer_list, read_ids, require_model_directory, window_arg

    require_model_directory(args.model_dir)
    try:
        states_target(args.out, args.overwrite, how="--overwrite")
    except ValueError as e:
        raise ValueError("--out" + str(e)[len("path"):] if str(e).startswith("path ") else str(e)) from None
    ids = read_ids(args.ids, name="--ids")
    layers = None if args.layers is None else layer_list("--layers", args.layers)
    heads = _indices("--heads", args.heads)
    names = None if args.states is None else [s.strip() for s in args.states.split(",")]
    window = window_arg("--window", args.window)
    max_bytes = MAX_BYTES if args.max_bytes is None else parse_bytes(args.max_bytes, name="--max-bytes")

    def stage(line):
        print(f"hiddenstate: {line}", file=sys.stderr, flush=True)

    stage(f"loading {args.model_dir}")
    model = load_model_dir(args.model_dir)
    got = record_states(model, ids, layers=layers, heads=heads, states=names, window=window, stride=args.stride,
                        dtype=args.dtype, check_steps=args.check_steps or CHECK_STEPS, max_bytes=max_bytes,
                        echo=stage)
    saved = _saved(got, args.out, args.overwrite)
    print(f"states: {saved} ({got.nbytes:,} bytes, {got.steps.size} step(s) "
          f"of {ids.shape[0]} sequence(s), {got.dtype})")
    for layer, by_name in got.states.items():
        err = got.errors.get(layer, {})
        part = "" if err.get("state_part") is None else f", state part {err['state_part']:.2g}"
        shapes = ", ".join(f"{n} {tuple(a.shape)}" for n, a in by_name.items())
        print(f"  layer {layer}: {shapes}; output {err.get('output', float('nan')):.2g} of the model's own on the "
              f"first {got.checked_steps} steps{part}")
    return 0
