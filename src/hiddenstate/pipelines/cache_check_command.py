"""``hiddenstate check-cache``: hold a model directory's cached paths to its full forward and say where they part.

The directory is a ``save_pretrained`` model of a registered family (as ``hiddenstate inspect``
and ``intervene`` take one), the ids a ``.npy`` file of integers (T,) or (N, T)
(:func:`~hiddenstate.pipelines.inspect_command.read_ids`), ``--attention-mask`` a ``.npy`` file
of 0s and 1s of the same shape marking right padding. :func:`hiddenstate.check_cache` runs;
stdout gets one line per path (its logits' worst relative error and where it first diverges) and
a last line: every path agrees, or the first diverging path, layer and step. Exit status 0 when
every path agrees, 1 when one diverges, 2 on bad input (one line on stderr). Nothing is written.
"""

from __future__ import annotations

__all__ = ["add_parser", "path_lines", "run_check_cache"]


def add_parser(sub) -> None:
    """Add ``hiddenstate check-cache`` and its flags to the command line's subparsers.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        The ``hiddenstate`` parser's subparsers.
    """
    cc = sub.add_parser("check-cache", help="check that a model's cached paths agree with its full forward",
                        description="Run a save_pretrained model directory's ids through its cache (prefill and "
                                    "continuation at several split points, token-by-token decoding, chunked "
                                    "prefill, a right-padded batch) and hold each path to the full forward, per "
                                    "recurrent layer and step. Exit status 0: every path agrees; 1: one diverges "
                                    "(the first layer and step named); 2: bad input. Writes nothing.")
    cc.add_argument("model_dir", metavar="DIR", help="a save_pretrained model directory of a registered family")
    cc.add_argument("--ids", required=True, metavar="FILE.npy", help="token ids (T,) or (N, T), T >= 2")
    cc.add_argument("--attention-mask", metavar="FILE.npy",
                    help="0s and 1s of the ids' shape: right padding in the ids (default: none)")
    cc.add_argument("--splits", metavar="S,S,...", help="prefix lengths of the split paths (default T/4, T/2, 3T/4)")
    cc.add_argument("--chunks", metavar="K", help="calls of the chunked path (default 3, or T if less)")
    cc.add_argument("--paths", metavar="P,P,...", default=None,
                    help="which of split,decode,chunked,padded to run (default split,decode,chunked; with "
                         "--attention-mask also padded)")


def _ints(flag: str, text: str) -> list:
    try:
        return [int(t) for t in text.split(",")]
    except ValueError:
        raise ValueError(f"{flag} must be integers separated by commas; got {text!r:.60}.") from None


def path_lines(check) -> list:
    """One line per path of a :class:`~hiddenstate.CacheCheck`: its logits' worst error and its first divergence.

    Parameters
    ----------
    check : CacheCheck

    Returns
    -------
    list of str
    """
    lines = []
    for p in check.paths:
        if p.failure is not None:
            lines.append(f"{p.name:>10}  fails at step {p.failed_at}: {p.failure}")
            continue
        first = p.first
        where = "agrees" if first is None else (f"diverges at layer {first[0]}, step {first[1]}" if first[0] is not None
                                                else f"diverges in the logits at step {first[1]}")
        lines.append(f"{p.name:>10}  logits {p.logits_error:.2g}  {where}")
    return lines


def run_check_cache(args) -> int:
    """The ``check-cache`` subcommand: read the ids (and mask), check the cache, print the paths and the verdict.

    Parameters
    ----------
    args : argparse.Namespace
        ``model_dir``, ``ids``, ``attention_mask``, ``splits``, ``chunks``, ``paths``.

    Returns
    -------
    int
        0 when every path agrees with the full forward, 1 when one diverges.

    Raises
    ------
    ValueError, TypeError, FileNotFoundError
        One line each (the CLI prints it, exit status 2): a directory that is not a model
        directory, ids or a mask that are not integer ``.npy`` arrays or do not fit the model,
        splits or chunks out of range, an unknown path, a right-padded batch without a mask.
    """
    from hiddenstate.keep.cache_check import check_cache
    from hiddenstate.pipelines.inspect_command import read_ids, require_model_directory

    require_model_directory(args.model_dir)
    ids = read_ids(args.ids, name="--ids")
    mask = None if args.attention_mask is None else read_ids(args.attention_mask, name="--attention-mask")
    splits = None if args.splits is None else _ints("--splits", args.splits)
    chunks = [None] if args.chunks is None else _ints("--chunks", args.chunks)
    if len(chunks) != 1:
        raise ValueError(f"--chunks must be one integer; got {args.chunks!r:.60}.")
    paths = None if args.paths is None else [p.strip() for p in args.paths.split(",")]
    check = check_cache(str(args.model_dir), ids, splits=splits, chunks=chunks[0], attention_mask=mask, paths=paths)
    print("\n".join(path_lines(check)))
    print(check.line())
    return 0 if check.ok else 1
