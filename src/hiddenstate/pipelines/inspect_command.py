"""``hiddenstate inspect``: which model a path names, and the report of it.

A run directory (or its ``checkpoint/``) is a trained character model; so is the
``model.safetensors`` of one of its checkpoints when its ``meta.json`` lies beside it (it is
inspected as the run it is). A file that holds a character model's tensors (``rnn.*`` with
``decoder.weight``) without that ``meta.json`` is refused, naming the command that inspects it:
read as a bare state dict it would be a different model (the recurrent layer alone, fed Gaussian
noise instead of characters). Any other ``.safetensors`` file is a torch RNN/GRU/LSTM state dict
(:func:`hiddenstate.pipelines.inspection.inspect_file`). A run of ``--cell mamba`` gets the Mamba report
(:func:`hiddenstate.pipelines.app.inspect_mamba_checkpoint`) and its summary on stdout;
``--fixed-point-starts N`` with N > 0, which only the other kinds have, is refused. A directory
holding ``config.json`` (and no checkpoint) is a ``save_pretrained`` model directory of a
registered transformers family: its input is ``--ids FILE.npy`` or ``--text FILE`` (tokenised by
the directory's ``tokenizer.json``), ``--layers`` chooses the recorded layers, both held to its
``config.json`` before a weight is read, and it gets the Mamba report (:func:`model_dir_inspect`).
A directory that holds neither a run's ``meta.json`` nor a ``config.json`` is refused naming
both kinds. Errors are
ValueError/OSError with one-line messages naming the flag; the CLI prints them as
``hiddenstate: error: ...`` with exit status 2.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

__all__ = ["FIXED_POINT_STARTS", "character_model_file", "check_report_out", "checkpoint_or_pretrained",
           "is_model_directory", "layer_list", "model_dir_inspect", "read_ids", "run_inspect", "stage_lines"]

#: Starts of the fixed-point search when ``--fixed-point-starts`` is left out.
FIXED_POINT_STARTS = 32

#: Tensor names that only a hiddenstate CharRNN's model file has together
_OUR_DECODER = "decoder.weight"
_OUR_LAYER = "rnn."


def check_report_out(out: str) -> None:
    """``inspect --out``: a report may be written there, and its directory exists.

    Parameters
    ----------
    out : str
        The ``--out`` flag's value.

    Raises
    ------
    ValueError
        ``out`` is not a new file nor a previous report (:func:`hiddenstate.pipelines.app.check_report_path`),
        or its directory does not exist (the CLI creates none, as ``export`` creates none).
    """
    from hiddenstate.pipelines.app import check_report_path

    path = check_report_path(out)
    if not path.parent.is_dir():
        raise ValueError(f"--out must lie in an existing directory; got '{path}' ('{path.parent}' is not one). "
                         "Create it first, or choose another --out.")


def stage_lines():
    """A function that prints ``inspect``'s stage lines on stderr, or None when stderr is a terminal.

    Returns
    -------
    callable or None
        ``line -> None`` printing ``hiddenstate: inspect: <line>`` on stderr, flushed; None on a
        terminal, where the progress bar shows the stages instead.
    """
    if sys.stderr.isatty():
        return None
    return _stage


def _stage(line: str) -> None:
    """Print ``hiddenstate: inspect: <line>`` on stderr, flushed."""
    print(f"hiddenstate: inspect: {line}", file=sys.stderr, flush=True)


def checkpoint_or_pretrained(args):
    """``CKPT`` or, with ``--pretrained``, the shipped checkpoint (``inspect`` and ``sample``).

    Parameters
    ----------
    args : argparse.Namespace
        With ``checkpoint`` (str or None) and ``pretrained`` (bool).

    Returns
    -------
    str or pathlib.Path
        The path to read.

    Raises
    ------
    ValueError
        Both or neither were given.
    """
    if args.pretrained:
        if args.checkpoint is not None:
            raise ValueError(f"--pretrained replaces CKPT; got both ('{args.checkpoint}'). Give one of them.")
        from hiddenstate.train.pretrained import pretrained_path

        return pretrained_path()
    if args.checkpoint is None:
        raise ValueError("CKPT is required: a run directory of `hiddenstate train`, or --pretrained for the demo's "
                         "GRU shipped with the package.")
    return args.checkpoint


def character_model_file(path) -> Path | None:
    """The checkpoint directory of a hiddenstate model file, or None for any other file.

    Parameters
    ----------
    path : str or os.PathLike
        A file given to ``inspect``.

    Returns
    -------
    pathlib.Path or None
        The directory of ``path`` when ``path`` is a checkpoint's ``model.safetensors`` with its
        ``meta.json`` beside it; None when ``path`` is not a regular file, not a safetensors
        file, or holds no character model's tensors (a torch state dict).

    Raises
    ------
    ValueError
        ``path`` holds a character model's tensors (``rnn.*`` and ``decoder.weight``) without a
        ``meta.json`` beside it: its vocabulary and configuration are missing. The message names
        the command that inspects the run.
    """
    from hiddenstate.train.rundir.checkpoint import META_FILE, MODEL_FILE

    p = Path(path)
    if not p.is_file():  # a FIFO, a device, ...: not read here
        return None
    if p.name == MODEL_FILE and (p.parent / META_FILE).is_file():
        return p.parent
    names = _tensor_names(p)
    if names is None or _OUR_DECODER not in names or not any(n.startswith(_OUR_LAYER) for n in names):
        return None
    raise ValueError(f"CKPT '{p}' holds a hiddenstate character model's weights ({_OUR_LAYER}*, {_OUR_DECODER}) "
                     f"but no {META_FILE} lies beside it (its vocabulary and configuration), so it cannot be "
                     "inspected as the model it is; read as a torch state dict it would be its recurrent layer "
                     "alone, fed noise. Inspect the run it belongs to: `hiddenstate inspect RUN_DIR` (the --out "
                     f"of `hiddenstate train`), or put its {META_FILE} back beside it.")


def _tensor_names(path: Path) -> set | None:
    """The tensor names of a safetensors file, from its header only (None if it is not one)."""
    import safetensors

    try:
        with safetensors.safe_open(os.fspath(path), framework="numpy") as f:
            return set(f.keys())  # the header only: no tensor is read
    except Exception:  # not a safetensors file: the state-dict reader gives the message
        return None


def layer_list(name: str, text) -> list:
    """``--layers 0,3,5``: layer indices, comma-separated.

    Parameters
    ----------
    name : str
        The flag (``"--layers"``).
    text : str
        Its value.

    Returns
    -------
    list of int

    Raises
    ------
    ValueError
        Not comma-separated non-negative integers (one line naming ``name``, the rule and ``text``).
    """
    parts = str(text).split(",")
    if not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
        raise ValueError(f"{name} must be comma-separated layer indices, e.g. 0,3; got {text!r}.")
    return [int(p) for p in parts]


def is_model_directory(path) -> bool:
    """Whether ``inspect PATH`` names a ``save_pretrained`` model directory: ``config.json`` and no checkpoint.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    bool
        True for a directory holding ``config.json`` with no ``meta.json`` in it or in its
        ``checkpoint/`` (a run directory never has a ``config.json``).
    """
    p = Path(path)
    return (p.is_dir() and os.path.lexists(p / "config.json") and not (p / "meta.json").exists()
            and not (p / "checkpoint" / "meta.json").exists())


def require_model_directory(path) -> None:
    """Refuse, in one line, a ``DIR`` that is not a ``save_pretrained`` model directory (:func:`is_model_directory`).

    Parameters
    ----------
    path : str or os.PathLike
        What the command's ``DIR`` named.

    Raises
    ------
    ValueError
        ``DIR must be a save_pretrained model directory ...``, naming what was given.
    """
    if not is_model_directory(path):
        raise ValueError(f"DIR must be a save_pretrained model directory (config.json and safetensors weights) of a "
                         f"registered family; got '{path}'.")


def read_ids(path, *, name: str = "--ids"):
    """Token ids from a ``.npy`` file: integers of shape (T,) or (N, T), read without pickle.

    Parameters
    ----------
    path : str or os.PathLike
    name : str, default "--ids"
        What the messages call ``path``.

    Returns
    -------
    ndarray of int, shape (N, T)

    Raises
    ------
    FileNotFoundError, ValueError
        No such file, not a regular file (a FIFO is refused unopened), not a ``.npy`` array of
        integers of shape (T,) or (N, T) with N, T >= 1.
    """
    import numpy as np

    from hiddenstate.core.files import open_regular

    with open_regular(path, name=name) as f:
        try:
            x = np.load(f, allow_pickle=False)
        except (ValueError, OSError, EOFError):  # numpy's own words name pickles and options the user never chose
            raise ValueError(f"{name} must be a .npy file of integer token ids (np.save of an int array of shape (T,) "
                             f"or (N, T)); '{path}' is not one.") from None
    if not isinstance(x, np.ndarray) or x.dtype == bool or x.dtype.kind not in "iu" or x.ndim not in (1, 2) \
            or 0 in x.shape:
        what = f"dtype {x.dtype}, shape {x.shape}" if isinstance(x, np.ndarray) else type(x).__name__
        raise ValueError(f"{name} must hold integer token ids of shape (T,) or (N, T), T, N >= 1; got {what} in "
                         f"'{path}'.")
    return x[None] if x.ndim == 1 else x


def model_dir_inspect(args, path: str) -> int:
    """``hiddenstate inspect DIR``: a ``save_pretrained`` directory of a registered family, its Mamba report.

    ``--layers`` and then the token ids (of ``--ids``, or the tokens of ``--text``) are held to
    the directory's ``config.json`` (``num_hidden_layers``, ``vocab_size``) before a weight is
    read or a model is built. Each stage, once its checks have passed, prints one line on stderr
    (``hiddenstate: inspect: ...``: the model loaded, the memory estimate, the forward pass, each
    layer's recomputation and analyses, the report, the states). With ``--text``, the tokens (any
    tokenizer: each id decoded to the text it adds) are the units of text of the unit features and
    the explorer; with ``--ids`` the "not measured" line says so in terms of the flags.
    ``--max-lag`` sets the gradient curve's largest lag (default: from the data,
    :func:`hiddenstate.probe.caveats.data_lag`).

    Parameters
    ----------
    args : argparse.Namespace
        The ``inspect`` flags: ``--ids`` or ``--text``, ``--layers``, ``--max-bytes`` (the cap on
        the estimated memory, :func:`~hiddenstate.core.resources.parse_bytes`), ``--record-dtype``,
        ``--out``.
    path : str
        The model directory (:func:`is_model_directory`).

    Returns
    -------
    int
        0 when the report was written.

    Raises
    ------
    ValueError, OSError
        One line naming the flag: no input or both inputs, a state-dict flag, ``--fixed-point-starts``
        > 0, ``--layers`` not indices below ``num_hidden_layers``, ids outside ``0 <= id <
        vocab_size``, and what :func:`hiddenstate.inspect_model` refuses of a directory (an unknown
        model type, custom code, a damaged shard, records over the cap: ``--layers`` lowers them).
    """
    from hiddenstate.core.resources import parse_bytes
    from hiddenstate.interop.families import MAX_BYTES
    from hiddenstate.interop.families.config_file import model_request
    from hiddenstate.interop.families.directory import TOKENIZER_FILE, load_model_dir, token_strings, tokenize
    from hiddenstate.interop.families.hooks import kept_steps
    from hiddenstate.pipelines.app import check_report_path
    from hiddenstate.pipelines.family_inspection import inspect_recurrent_model
    from hiddenstate.train.corpus import load_text

    layers = None if args.layers is None else layer_list("--layers", args.layers)
    window, stride = window_arg("--window", getattr(args, "window", None)), getattr(args, "stride", None) or 1
    max_bytes = MAX_BYTES if args.max_bytes is None else parse_bytes(args.max_bytes, name="--max-bytes")
    record_dtype = args.record_dtype or "float64"
    flags = {"kind": args.kind, "nonlinearity": args.nonlinearity, "reset_after": args.reset_after,
             "prefix": args.prefix, "inputs": args.inputs}
    _check_no_state_dict_flags(args, flags, f"the model directory '{path}'")
    if args.fixed_point_starts:
        raise ValueError(f"--fixed-point-starts applies to models of rnn, gru, lstm, mingru or minlstm layers; got "
                         f"{args.fixed_point_starts} for the model directory '{path}', whose recurrent layers are "
                         "selective SSMs (one stable fixed point per input: no search). Leave the flag out.")
    if (args.ids is None) == (args.text is None):
        raise ValueError(f"--ids FILE.npy (token ids (T,) or (N, T)) or --text FILE (tokenised by the directory's "
                         f"tokenizer.json) must give the model directory '{path}' its input; got "
                         f"{'both' if args.ids is not None else 'neither'}.")
    check_report_out(args.out)  # before the work, not after it
    states = states_options(args)  # and where the states go, before the work too
    request = model_request(path, layers, name="--layers")  # config.json, once: before any weight is read
    tokenizer = os.path.join(path, TOKENIZER_FILE)
    text = None
    if args.ids is not None:
        request = request.with_ids(read_ids(args.ids), name=f"--ids '{args.ids}'")
        needs = ("they need the text behind the steps: give --text FILE instead of --ids, tokenised by the model "
                 "directory's tokenizer.json" + ("" if os.path.lexists(tokenizer) else " (this one has none)"))
    else:
        ids = tokenize(path, load_text(args.text, name="--text"))
        request = request.with_ids(ids, name=f"--text '{args.text}', tokenised by '{tokenizer}',")
        pieces = token_strings(path, request.ids)
        # one character per step: the text itself; else the tokens' pieces are the explorer's units of text
        text = "".join(pieces) if all(len(piece) == 1 for piece in pieces) else pieces
        needs = None
    started = time.perf_counter()
    T = request.ids.shape[1]
    kept = len(range(T)[kept_steps(T, window, stride)])  # the window checked against the ids before any weight
    if kept < 2:
        raise ValueError(f"--window and --stride must keep at least 2 steps to analyse; --window "
                          f"{getattr(args, 'window', None) or 'all'} with --stride {stride} keeps {kept} of T={T}.")
    model = load_model_dir(request, max_bytes=max_bytes, record_dtype=record_dtype, kept=kept)
    _stage(f"loaded the {type(model).__name__} from '{path}' in {time.perf_counter() - started:.1f} s")
    source = f"transformers {type(model).__name__} from '{path}'"
    out = check_report_path(args.out)
    analysis = inspect_recurrent_model(model, request.ids, out=out, text=text, source=source, layers=request.layers,
                                       needs_text=needs, max_bytes=max_bytes, record_dtype=record_dtype,
                                       max_lag=getattr(args, "max_lag", None), window=window, stride=stride,
                                       echo=_stage)  # every stage on stderr, a terminal or not: no progress bar here
    print(analysis.summary())
    print(f"report: {out}")
    if states is not None:
        from hiddenstate.interop.states_file import save_states

        _stage(f"writing the states {states['path']}")
        saved = save_states(analysis, states.pop("path"), overwrite=True, **states)
        print(f"states: {saved} (every recorded layer's states; hiddenstate.interop.states_file.load_states reads them)")
    return 0


def window_arg(flag: str, window: str | None) -> tuple[int, int] | None:
    """A ``START:STOP`` flag as two ints (None stays None).

    Parameters
    ----------
    flag : str
        The flag's name, for the message.
    window : str or None
        What the command line gave.

    Returns
    -------
    (int, int) or None

    Raises
    ------
    ValueError
        Not two non-negative integers around one colon.
    """
    if window is None:
        return None
    start, sep, stop = window.partition(":")
    if not sep or not start.strip().isdigit() or not stop.strip().isdigit():
        raise ValueError(f"{flag} must be START:STOP, two step positions (e.g. 0:100); got {window!r}.")
    return int(start), int(stop)


def states_options(args) -> dict | None:
    """The ``--save-states`` flags as :func:`~hiddenstate.interop.states_file.save_states` keywords, checked.

    Parameters
    ----------
    args : argparse.Namespace
        ``save_states``, ``states_window`` (``"START:STOP"``), ``states_stride``, ``states_heads``
        (``"I,J,..."``), ``states_dtype``.

    Returns
    -------
    dict or None
        ``path``, ``window``, ``stride``, ``heads``, ``dtype``; None without ``--save-states``.

    Raises
    ------
    ValueError
        A states flag without ``--save-states``; a window that is not ``START:STOP`` of integers;
        heads that are not indices; a path that is a directory or an existing file other than a
        previous states file.
    """
    from hiddenstate.interop.states_file import states_target

    path = getattr(args, "save_states", None)
    window, heads = getattr(args, "states_window", None), getattr(args, "states_heads", None)
    if path is None:
        extra = [f for f, v in (("--states-window", window), ("--states-heads", heads)) if v is not None]
        if extra:
            raise ValueError(f"{', '.join(extra)} {'needs' if len(extra) == 1 else 'need'} --save-states FILE (the "
                             f"file the states go to); got {', '.join(extra)} alone.")
        return None
    window = window_arg("--states-window", window)
    if heads is not None:
        parts = heads.split(",")
        if not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
            raise ValueError(f"--states-heads must be comma-separated head (or channel) indices, e.g. 0,3; got "
                             f"{heads!r}.")
        heads = [int(p) for p in parts]
    return {"path": states_target(path, overwrite=True), "window": window, "stride": args.states_stride,
            "heads": heads, "dtype": args.states_dtype}


def _run_checkpoint(path: str) -> Path:
    """The checkpoint of the run ``path`` names; a directory that is no run nor model directory says both in one line."""
    from hiddenstate import train as _train

    try:
        return _train.resolve_checkpoint(path)  # one-line errors for bad paths
    except ValueError:
        if not os.path.isdir(path):
            raise
    raise ValueError(f"CKPT must be a training run directory (meta.json in it or in its checkpoint/, as `hiddenstate "
                     "train --out` writes it) or a transformers model directory (config.json and model.safetensors, "
                     f"as save_pretrained writes them); got '{path}', which holds neither.") from None


def _check_no_state_dict_flags(args, flags: dict, what: str) -> None:
    given = [f"--{k.replace('_', '-')}" for k, v in flags.items() if v is not None]
    if given:
        raise ValueError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to a .safetensors state "
                         f"dict only; got {what}.")



def add_model_dir_flags(ins, positive) -> None:
    """The flags of ``hiddenstate inspect DIR`` for a ``save_pretrained`` directory, in their own group.

    Parameters
    ----------
    ins : argparse.ArgumentParser
        The ``inspect`` subcommand's parser.
    positive : callable
        ``positive(flag)``: the CLI's argparse type for a positive int named ``flag``.
    """
    md = ins.add_argument_group("a save_pretrained directory (config.json, safetensors) of a recurrent transformers family")
    md.add_argument("--ids", metavar="FILE.npy", help="token ids (T,) or (N, T); or --text FILE with its tokenizer.json")
    md.add_argument("--layers", metavar="I,J,...",  # read by the command: its errors are the command's one line
                    help="the recurrent layers to record (default all; fewer take less memory)")
    md.add_argument("--max-bytes", metavar="SIZE",  # read by the command: its errors are the command's one line
                    help="the cap on the inspection's estimated memory (records, their recomputation and "
                         "analyses), checked before the model runs: bytes, or with a unit K, M, G (powers of 1000) or "
                         "Ki, Mi, Gi (powers of 1024), e.g. 8G (default 4Gi)")
    md.add_argument("--max-lag", type=positive("--max-lag"), default=None, metavar="K",
                    help="the gradient curve's largest lag (default: from the data, three times each layer's slowest "
                         "time constant, 30 to T-1) and the memory curve's (at most T/3; default up to 128)")
    md.add_argument("--record-dtype", choices=("float64", "float32"), default=None,
                    help="the recorded states' dtype (default float64; float32 halves them, the recomputation "
                         "and its check stay float64)")
    md.add_argument("--window", metavar="START:STOP", help="keep (record, analyse, report) only the states of "
                    "positions START to STOP-1; every step is still computed (default all)")
    md.add_argument("--stride", type=positive("--stride"), default=None, metavar="K",
                    help="keep every K-th step of the window (default 1)")
    md.add_argument("--save-states", metavar="FILE.safetensors",
                    help="also write every recorded step's states of those layers to FILE (safetensors: one tensor "
                         "layer{L}.{state} of shape (S, N, ...) each; a previous states file is replaced)")
    md.add_argument("--states-window", metavar="START:STOP", help="the positions saved (default all)")
    md.add_argument("--states-stride", type=positive("--states-stride"), default=1, metavar="K",
                    help="save every K-th step of the window (default 1)")
    md.add_argument("--states-heads", metavar="I,J,...",
                    help="the heads (or channels) saved, along each state's first axis (default all)")
    md.add_argument("--states-dtype", choices=("float32", "float64"), default="float32",
                    help="the saved dtype (default float32; the recomputation is float64)")


def run_inspect(args) -> int:
    """Run ``hiddenstate inspect`` with its parsed arguments.

    Parameters
    ----------
    args : argparse.Namespace
        The ``inspect`` subcommand's flags (:func:`hiddenstate.cli.main`).

    Returns
    -------
    int
        0 when the report was written.

    Raises
    ------
    ValueError, OSError
        A user error, one line naming the flag (printed by the CLI, exit status 2).
    """
    from hiddenstate import train as _train
    from hiddenstate.pipelines.app import (
        check_report_path,
        inspect_checkpoint,
        inspect_mamba_checkpoint,
        inspected_text,
    )
    from hiddenstate.train.corpus import load_text

    flags = {"kind": args.kind, "nonlinearity": args.nonlinearity, "reset_after": args.reset_after,
             "prefix": args.prefix, "inputs": args.inputs}
    starts = FIXED_POINT_STARTS if args.fixed_point_starts is None else args.fixed_point_starts
    path = os.fspath(checkpoint_or_pretrained(args))
    if is_model_directory(path):
        return model_dir_inspect(args, path)
    given = [f for f, v in (("--ids", getattr(args, "ids", None)), ("--layers", getattr(args, "layers", None)),
                            ("--max-bytes", getattr(args, "max_bytes", None)),
                            ("--record-dtype", getattr(args, "record_dtype", None)),
                            ("--save-states", getattr(args, "save_states", None)),
                            ("--states-window", getattr(args, "states_window", None)),
                            ("--window", getattr(args, "window", None)), ("--stride", getattr(args, "stride", None)),
                            ("--states-heads", getattr(args, "states_heads", None)))
             if v is not None]
    if given:
        raise ValueError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to a save_pretrained model "
                         f"directory (config.json and safetensors weights) only; got '{path}'.")
    # a file is a torch state dict (a pickle is refused, unread), or one of our model files
    if os.path.isfile(path) or path.endswith(".safetensors"):
        ckpt = character_model_file(path)
        if ckpt is None:
            if args.text is not None:
                raise ValueError("--text needs a run directory (a state dict has no vocabulary); use --inputs FILE.npy.")
            from hiddenstate.pipelines.inspection import inspect_file

            check_report_out(args.out)  # before the work, not after it
            inspect_file(path, args.out, seed=args.seed, echo=print,
                         n_fixed_point_starts=starts, stages=stage_lines(), **flags)
            return 0
        _check_no_state_dict_flags(args, flags, f"the model file of the checkpoint '{ckpt}'")
        print(f"model: '{path}' is the model file of the checkpoint '{ckpt}': inspected as that run")
    else:
        _check_no_state_dict_flags(args, flags, f"the run '{path}'")
        ckpt = _run_checkpoint(path)
    check_report_out(args.out)  # before the work, not after it
    if args.text is not None:
        load_text(args.text, name="--text")
    trained = _train.load(ckpt)
    mamba = trained.model.cell == "mamba"
    if mamba and args.fixed_point_starts:  # 0 asks to skip a search that a Mamba model has not: accepted
        raise ValueError(f"--fixed-point-starts applies to models of rnn, gru, lstm, mingru or minlstm layers; got "
                         f"{starts} for the mamba run '{ckpt}', whose SSM step has one stable fixed point per input "
                         "by construction (no search to run; the report's Not measured card says why). Leave the "
                         "flag out.")
    measured = inspected_text(trained, args.text)
    if measured.dropped:
        shown = ", ".join(repr(c) for c in measured.unknown)
        print(f"text: dropped {measured.dropped:,} characters outside the model's vocabulary "
              f"({shown}{' ...' if len(measured.unknown) == 10 else ''}); the report says so too")
    if mamba:
        analysis = inspect_mamba_checkpoint(trained, args.out, text_file=args.text, echo=stage_lines())
        print(analysis.summary())
        report = check_report_path(args.out)
    else:
        report = inspect_checkpoint(trained, args.out, text_file=args.text, n_fixed_point_starts=starts,
                                    echo=stage_lines())
    print(f"report: {report}")
    return 0
