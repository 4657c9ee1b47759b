"""A trained character model as a file other tools run: ONNX, or a ``torch.export`` program.

:func:`export_checkpoint` is ``hiddenstate export RUN --format onnx|torch --out FILE``: it loads
the run (:func:`hiddenstate.train.load`, the moving average of the weights where the run kept
one, as ``sample`` and ``inspect`` use), converts it (:func:`hiddenstate.interop.charrnn_to_onnx`;
:func:`hiddenstate.interop.torch_export.charrnn_to_exported_program`) and writes ``FILE``, which
must not exist: nothing is ever overwritten.
"""

from __future__ import annotations

import os
import pathlib
import tempfile

import numpy as np

from hiddenstate.core.files import names_directory, write_new
from hiddenstate.interop.onnx_export import charrnn_to_onnx
from hiddenstate.interop.torch_export import charrnn_to_exported_program
from hiddenstate.train.blocks import LINEAR_CELLS
from hiddenstate.train.rundir import Trained, load
from hiddenstate.train.rundir.checkpoint import MODEL_FILE

__all__ = ["FORMATS", "check_new_file", "export_checkpoint", "load_hint"]

#: The formats of :func:`export_checkpoint` and what a user loads them with (:func:`load_hint` gives
#: the exact call of one model).
FORMATS = {
    "onnx": "onnxruntime.InferenceSession(FILE).run(None, {'ids': ids, 'h0': h0})  # (+ 'c0' for an LSTM)",
    "torch": "torch.export.load(FILE).module()(ids, h0)  # (+ c0 for an LSTM); torch alone, no hiddenstate",
}


def load_hint(model, format: str, out) -> str:
    """The exact call that runs ``model`` exported as ``format`` to ``out``: input names, shapes, dtype.

    Parameters
    ----------
    model : hiddenstate.CharRNN
        The exported model (its L = ``num_layers``, H = ``hidden_size``, dtype and cell).
    format : {"onnx", "torch"}
        As for :func:`export_checkpoint`.
    out : str or os.PathLike
        The exported file, as the call names it.

    Returns
    -------
    str
        One line, e.g. ``torch.export.load('m.pt2').module()(ids, h0)  # ids (T, N) int64, T >= 1;
        h0 (2, N, 12) float32 -> logits (T, N, V=65), h_n (2, N, 12)``.

    Raises
    ------
    ValueError
        An unknown ``format``.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {sorted(FORMATS)}; got {format!r}.")
    L, H, V, dtype = model.num_layers, model.hidden_size, model.vocab_size, np.dtype(model.dtype).name
    lstm = model.cell == "lstm"
    states = "h0, c0" if lstm else "h0"
    shapes = (f"ids (T, N) int64, T >= 1; {states} ({L}, N, {H}) {dtype} each" if lstm
              else f"ids (T, N) int64, T >= 1; h0 ({L}, N, {H}) {dtype}")
    returns = f"logits (T, N, V={V}), h_n" + (", c_n" if lstm else "")
    file = repr(os.fspath(out))
    if format == "torch":
        return (f"torch.export.load({file}).module()(ids, {states})  # {shapes} -> {returns}; torch alone, "
                "no hiddenstate")
    feeds = "{'ids': ids, 'h0': h0" + (", 'c0': c0}" if lstm else "}")
    note = ("; onnxruntime's CPU kernels of these operators are float32 only: run a float64 graph in "
            "onnx.reference.ReferenceEvaluator" if dtype == "float64" else "")
    return f"onnxruntime.InferenceSession({file}).run(None, {feeds})  # {shapes} (NumPy) -> {returns}{note}"


def check_new_file(out, *, name: str = "out") -> pathlib.Path:
    """``out`` as a path that does not exist yet, in an existing directory.

    Parameters
    ----------
    out : str or os.PathLike
        The file to create.
    name : str, default "out"
        What the messages call it (``"--out"``).

    Returns
    -------
    pathlib.Path

    Raises
    ------
    TypeError
        ``out`` is not a path.
    ValueError
        ``out`` ends in a path separator (``"dir/"`` names a directory), exists (nothing is
        overwritten), or its directory does not.
    """
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path; got {type(out).__name__}.")
    text = os.fspath(out)
    path = pathlib.Path(text)
    if names_directory(text):
        raise ValueError(f"{name} must name a file; got '{text}', which ends in a path separator and so names a "
                         f"directory. Give a file name, e.g. '{path / 'model.onnx'}'.")
    if path.exists() or path.is_symlink():
        raise ValueError(f"{name} must name a new file; got '{path}', which exists (nothing is overwritten). "
                         "Choose another name or remove it yourself.")
    if not path.parent.is_dir():
        raise ValueError(f"{name} must lie in an existing directory; got '{path}' ('{path.parent}' is not one).")
    return path


def export_checkpoint(checkpoint, format: str, out) -> pathlib.Path:
    """Write a trained character model as an ONNX graph or a ``torch.export`` program.

    Parameters
    ----------
    checkpoint : str, os.PathLike or Trained
        A run directory of :func:`hiddenstate.train.train` or its ``checkpoint/`` subdirectory, or
        the model loaded from one.
    format : {"onnx", "torch"}
        ``"onnx"``: :func:`hiddenstate.interop.charrnn_to_onnx` (opset 14; inputs ``ids`` (T, N)
        int64, ``h0`` (and ``c0``) (L, N, H); outputs ``logits`` (T, N, V), ``h_n`` (, ``c_n``)).
        ``"torch"``: a ``.pt2`` file of :func:`torch.export.save`
        (:func:`hiddenstate.interop.torch_export.charrnn_to_exported_program`), loaded with torch
        alone: ``torch.export.load(FILE).module()(ids, h0)``, any T >= 1 and N.
    out : str or os.PathLike
        The file to create; it must not exist.

    Returns
    -------
    pathlib.Path
        ``out``.

    Raises
    ------
    ValueError
        An unknown ``format``; an ``out`` that exists or lies in no directory; a model whose layers
        the format cannot express (minGRU, minLSTM); an invalid checkpoint.
    FileNotFoundError
        No checkpoint at ``checkpoint``.
    ImportError
        onnx or torch is not installed.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {sorted(FORMATS)}; got {format!r}.")
    out = check_new_file(out)
    trained = checkpoint if isinstance(checkpoint, Trained) else load(checkpoint)
    model = trained.model
    if model.cell == "mamba":
        raise ValueError(f"a mamba run cannot be exported as {format}: its selective scan has no standard "
                         "operator. Its weights are already in the run's checkpoint (safetensors; the blocks' "
                         "'rnn.layers.{l}.mixer.' names are transformers' MambaMixer's); `hiddenstate sample` runs "
                         "it, and hiddenstate.train.load(RUN) loads it in Python.")
    if model.cell in LINEAR_CELLS:
        where = ("the run's checkpoint" if trained.path is None
                 else f"'{pathlib.Path(trained.path) / MODEL_FILE}'")
        raise ValueError(f"a {model.cell} run cannot be exported as {format}: its layers have no weight_hh (their "
                         "gates read the input only), so no standard operator computes them. Its weights are already "
                         f"in {where} (safetensors, torch's parameter names); `hiddenstate sample` and `hiddenstate "
                         "inspect` run it, and hiddenstate.train.load(RUN) loads it in Python.")
    if format == "torch":
        data = charrnn_to_exported_program(model)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            data = charrnn_to_onnx(model, pathlib.Path(tmp) / "model.onnx").read_bytes()
    write_new(out, data)  # exclusive create: never replaces a file that appeared meanwhile
    return out
