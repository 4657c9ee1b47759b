"""Inspect a recurrent model trained anywhere in one call: torch, Keras, ours -> analysis -> report.

:func:`inspect_model` converts the model exactly (:mod:`hiddenstate.interop`: torch modules and
state dicts, Keras 3 layers), measures its hidden state (:func:`hiddenstate.analyze_model`) and,
given ``out``, writes the HTML report (:func:`hiddenstate.build_report`). The conversion copies
weights; the analysis runs on our layer in float64, whose states equal the original's outputs.
torch and Keras are never imported here: a model is recognised by the package its class comes
from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from hiddenstate.classic.recurrent import RecurrentLayer
from hiddenstate.core.nesting import where_ragged
from hiddenstate.core.validation import float_array, shape_str
from hiddenstate.interop.families import MAX_BYTES, family_of
from hiddenstate.interop.families.directory import open_request, token_strings
from hiddenstate.interop.keras3 import from_keras
from hiddenstate.interop.pytorch import from_torch
from hiddenstate.interop.statedict_file import load_state_dict_file
from hiddenstate.interop.torch_rnns import find_rnns
from hiddenstate.kinds.ssm.mamba_analysis import MambaAnalysis
from hiddenstate.pipelines.app import char_mamba_report, check_report_path
from hiddenstate.pipelines.family_inspection import inspect_recurrent_model, is_recurrent_model
from hiddenstate.pipelines.rnns_inside import InsideAnalysis, inspect_rnns_inside
from hiddenstate.probe.analysis import Analysis, analyze_model
from hiddenstate.report import build_report
from hiddenstate.train.model import CharRNN

__all__ = ["RANDOM_INPUT", "as_layer", "inspect_file", "inspect_model", "read_inputs"]

#: The input ``hiddenstate inspect FILE.safetensors`` uses without ``--inputs``: (T, N) and the distribution.
RANDOM_INPUT = {"T": 100, "N": 8, "distribution": "standard normal"}

_ACCEPTED = ("a torch.nn.RNN/GRU/LSTM module (or its state dict), a built Keras 3 SimpleRNN/GRU/LSTM or "
             "Bidirectional layer (or a Keras Sequential/Model whose one recurrent layer reads its input), a hiddenstate layer (RNN, GRU, LSTM, MinGRU, MinLSTM) or a hiddenstate CharRNN")


def _package(obj) -> str:
    """The top-level package an object's class comes from (``"torch"``, ``"keras"``, ...)."""
    return type(obj).__module__.split(".")[0]


def _is_torch_module(obj) -> bool:
    return any(c.__module__.split(".")[0] == "torch" and c.__name__ == "Module" for c in type(obj).__mro__)


def _holds_rnns(model) -> bool:
    """Whether ``model`` is a torch model (not itself a recurrent module) with RNNs inside (not Keras's)."""
    if _package(model) == "keras" or not _is_torch_module(model) or type(model).__name__ in ("RNN", "GRU", "LSTM",
                                                                                             "ChoGRU"):
        return False
    return bool(find_rnns(model))


def _inside(model, x, h0, lengths, text, vocab, tokens, **options) -> InsideAnalysis:
    """:func:`inspect_model` of a torch model with RNNs inside: what does not apply is refused by name."""
    given = [n for n, v in (("h0", h0), ("lengths", lengths), ("text", text), ("vocab", vocab), ("tokens", tokens))
             if v is not None]
    if given:
        raise ValueError(f"{given[0]} must be None for a torch model with RNNs inside (each RNN's input, state and "
                         f"lengths are what the model passes it); got {given[0]}. Give the model's own inputs as x.")
    return inspect_rnns_inside(model, x, **options)


def _keras_classes(obj) -> set:
    """The names of the Keras classes ``obj`` is an instance of (``{"GRU", "RNN", "Layer", ...}``)."""
    return {c.__name__ for c in type(obj).__mro__ if c.__module__.split(".")[0] == "keras"}


def _keras_recurrent_layer(model):
    """``(i, model.layers[i])``: the one recurrent layer of a Keras Sequential/Model that reads the model's input.

    Accepted only when it is safe: exactly one SimpleRNN/GRU/LSTM/Bidirectional layer, whose input
    is the model's single input (layers before it would change what it reads; layers after it do
    not change its states). Otherwise a TypeError names the layer to pass.
    """
    layers = list(model.layers)
    rnns = [(i, la) for i, la in enumerate(layers) if _keras_classes(la) & {"RNN", "Bidirectional"}]
    what = f"the Keras {type(model).__name__} '{getattr(model, 'name', '')}'"
    listed = ", ".join(f"model.layers[{i}] ({type(la).__name__})" for i, la in rnns)
    if not rnns:
        raise TypeError(f"model must be {_ACCEPTED}; got {what}, which holds no recurrent layer.")
    if len(rnns) > 1:
        raise TypeError(f"model must be {_ACCEPTED}; got {what}, which holds {len(rnns)} recurrent layers ({listed}): "
                        "pass one of them itself, with x the input that layer receives.")
    i, layer = rnns[0]
    try:
        inputs, read = list(model.inputs), layer.input
    except (AttributeError, ValueError):  # an unbuilt model, or a layer called more than once
        inputs, read = [], None
    if len(inputs) != 1 or read is not inputs[0]:
        before = ", ".join(f"model.layers[{j}] ({type(la).__name__})" for j, la in enumerate(layers[:i])
                           if "InputLayer" not in _keras_classes(la))
        raise TypeError(f"model must be {_ACCEPTED}; got {what}, whose recurrent layer {listed} does not read the "
                        f"model's input{f' (it comes after {before}, which change it)' if before else ''}: pass "
                        f"model.layers[{i}] itself, with x the input it receives (the output of the layers before it).")
    return i, layer


def as_layer(model):
    """Our sequence layer equivalent to ``model``, and what ``model`` was.

    Parameters
    ----------
    model : torch.nn.RNN, GRU, LSTM (or ``ChoGRU``), a torch state dict, a Keras 3 layer, or ours
        A torch module is converted by :func:`hiddenstate.interop.from_torch` (its
        ``batch_first`` kept), a Keras ``SimpleRNN``/``GRU``/``LSTM``/``Bidirectional`` by
        :func:`hiddenstate.interop.keras3.from_keras` (``batch_first=True``, as Keras reads
        (N, T, I)); both in float64. A Keras ``Sequential`` or ``Model`` is accepted when it holds
        exactly one recurrent layer and that layer reads the model's input (layers after it, a
        ``Dense`` head, do not change its states); otherwise the TypeError names the layer to
        pass (``model.layers[i]``). A hiddenstate layer is returned as it is; a
        :class:`~hiddenstate.CharRNN` gives its recurrent layers ``model.rnn``.

    Returns
    -------
    layer : RNN, GRU, LSTM, MinGRU or MinLSTM
        The layer to analyse.
    source : str
        A short description of ``model`` for the report (``"torch.nn.LSTM"``).

    Raises
    ------
    TypeError
        ``model`` is none of those (e.g. a ``torch.nn.Linear``), or a Keras model whose recurrent
        layer is not its only one or reads the output of other layers.
    ValueError
        From the conversion: options our layers cannot compute (an LSTM with ``proj_size``, a Keras
        layer with ``go_backwards=True``, ...), named in the message.
    """
    if isinstance(model, CharRNN):
        return model.rnn, f"hiddenstate CharRNN ({model.cell})"
    if isinstance(model, RecurrentLayer) and model.kind is not None:
        return model, f"hiddenstate {type(model).__name__}"
    if isinstance(model, Mapping):
        return from_torch(model), "torch state dict"
    if _package(model) == "keras":  # before torch: on Keras's torch backend a layer is a torch Module too
        if hasattr(model, "layers") and not _keras_classes(model) & {"RNN", "Bidirectional"}:  # Sequential, Model
            i, inner = _keras_recurrent_layer(model)
            layer, what = as_layer(inner)
            return layer, f"{what} (layers[{i}] of keras {type(model).__name__} '{getattr(model, 'name', '')}')"
        layer = from_keras(model)
        inner = getattr(model, "forward_layer", None)
        return layer, (f"keras Bidirectional({type(inner).__name__})" if inner is not None
                       else f"keras {type(model).__name__}")
    if _is_torch_module(model):
        name = type(model).__name__
        if name not in ("RNN", "GRU", "LSTM", "ChoGRU"):
            raise TypeError(f"model must be {_ACCEPTED}; got the torch module {type(model).__module__}.{name}. "
                            "Pass the recurrent submodule itself (e.g. model.lstm).")
        return from_torch(model), f"torch.nn.{name}" if name != "ChoGRU" else "ChoGRU (torch)"
    raise TypeError(f"model must be {_ACCEPTED}; got {type(model).__module__}.{type(model).__name__}.")


def _numpy(name: str, value):
    """A torch tensor or Keras tensor as a NumPy array (others unchanged)."""
    inner = getattr(value, "value", None)  # keras.Variable
    if inner is not None and hasattr(inner, "detach"):
        value = inner
    if hasattr(value, "detach") and hasattr(value, "cpu") and hasattr(value, "numpy"):
        if getattr(value, "is_meta", False):
            raise ValueError(f"{name} must hold values; got a torch tensor on the 'meta' device (a shape, no data).")
        return value.detach().cpu().numpy()
    if type(value).__name__ == "PackedSequence":
        raise TypeError(f"{name} must be a padded tensor or array; got a PackedSequence. Pass the padded input "
                        "(torch.nn.utils.rnn.pad_packed_sequence) and lengths=... instead.")
    return value


def _state(name: str, h0, layer, keras: bool):
    """``h0`` as our layer takes it: arrays (L*D, N, H) (LSTM: a pair), from torch tensors or Keras's list."""
    if h0 is None:
        return None
    lstm = layer.kind.has_cell
    if keras and isinstance(h0, (list, tuple)) and all(np.ndim(_numpy(name, s)) == 2 for s in h0):
        parts = [float_array(f"{name}[{j}]", _numpy(name, s), dtype=np.float64) for j, s in enumerate(h0)]
        per = 2 if lstm else 1
        if len(parts) != per * layer.num_directions:
            raise ValueError(f"{name} must be Keras's initial_state list of {per * layer.num_directions} arrays "
                             f"(N, H) ({'[h, c] ' if lstm else '[h] '}per direction); got {len(parts)}.")
        h = np.stack(parts[0::per])  # (D, N, H)
        return (h, np.stack(parts[1::per])) if lstm else h
    if lstm:
        if not isinstance(h0, (list, tuple)) or len(h0) != 2:
            raise TypeError(f"{name} must be a pair (h0, c0) for an LSTM; got {type(h0).__name__}.")
        return tuple(float_array(f"{name}[{j}]", _numpy(name, s), dtype=np.float64) for j, s in enumerate(h0))
    return float_array(name, _numpy(name, h0), dtype=np.float64)


def _vocab_chars(vocab) -> str | None:
    """The characters in id order of a Vocabulary, a str, or a sequence of one-character strings."""
    if vocab is None:
        return None
    chars = getattr(vocab, "chars", vocab)
    if isinstance(chars, str):
        return chars
    if isinstance(chars, (list, tuple)) and all(isinstance(c, str) and len(c) == 1 for c in chars):
        return "".join(chars)
    raise TypeError(f"vocab must be a hiddenstate Vocabulary, a str or a list of characters in id order; got "
                    f"{type(vocab).__name__}.")


def _char_input(model: CharRNN, x, text, vocab):
    """``(x, tokens, text, fixed_point_input)`` of a character model from ids or a str."""
    chars = _vocab_chars(vocab)
    if chars is not None and len(chars) != model.vocab_size:
        raise ValueError(f"vocab must have the model's {model.vocab_size} characters; got {len(chars)}.")
    if isinstance(x, str):
        if chars is None:
            raise ValueError("vocab must be given to read x as text (the model knows ids, not characters); got None.")
        unknown = sorted(set(x) - set(chars))
        if unknown:
            raise ValueError(f"x must contain only the vocabulary's characters; got {len(unknown)} others: "
                             f"{''.join(unknown[:10])!r}.")
        text = x if text is None else text
        x = np.array([chars.index(c) for c in x], dtype=np.int64)
    try:
        ids = np.asarray(_numpy("x", x))
    except (ValueError, TypeError):  # ragged nested lists
        raise TypeError(f"x must be token ids of shape (T,) or (T, N); got {type(x).__name__} "
                        f"({where_ragged(x, 'x')}).") from None
    if ids.dtype == bool or ids.dtype.kind not in "iu" or ids.ndim not in (1, 2):
        raise TypeError(f"x must be token ids of shape (T,) or (T, N) (integers) or a str for a CharRNN; got "
                        f"dtype {ids.dtype} and shape {shape_str(ids.shape)}.")
    if ids.size and (ids.min() < 0 or ids.max() >= model.vocab_size):
        raise ValueError(f"x must hold ids in [0, {model.vocab_size}); got values in [{ids.min()}, {ids.max()}].")
    ids = ids[:, None] if ids.ndim == 1 else ids  # (T, N)
    if ids.shape[1] == 0:
        raise ValueError(f"x must hold at least one sequence (N >= 1); got shape {shape_str(ids.shape)}.")
    decoded = None if chars is None else "".join(chars[i] for i in ids[:, 0])
    if text is not None and decoded is not None and text != decoded:
        at = next((i for i, (a, b) in enumerate(zip(text, decoded)) if a != b), min(len(text), len(decoded)))
        raise ValueError(f"text must be the characters of x's sequence 0 (the vocabulary decodes {len(decoded)} of "
                         f"them); got a text of {len(text)} that differs at position {at} ({text[at:at + 10]!r} "
                         f"against {decoded[at:at + 10]!r}). Leave text out, or pass x as that text.")
    if text is not None and decoded is None and isinstance(text, str) and len(text) != ids.shape[0]:
        raise ValueError(f"text must have one character per step of x (T={ids.shape[0]}); got {len(text)}.")
    if text is None:
        text = decoded
    space = chars.index(" ") if chars is not None and " " in chars else None
    fp = None if space is None else np.asarray(model.embed(np.array([space])), dtype=np.float64)[0]
    return np.asarray(model.embed(ids), dtype=np.float64), ids, text, fp


def _check_x(x, layer, source: str) -> np.ndarray:
    """``x`` as float64 of the layer's input layout, or a ValueError naming the layout."""
    x = float_array("x", _numpy("x", x), dtype=np.float64)
    layout = "(N, T, I)" if layer.batch_first else "(T, N, I)"
    if x.ndim not in (2, 3) or x.shape[-1] != layer.input_size:
        raise ValueError(f"x must have shape {layout} (or (T, I)) with I = {layer.input_size}, the input size of "
                         f"the {source}; got {shape_str(x.shape)}.")
    return x


def inspect_model(model, x, *, h0=None, lengths=None, text=None, vocab=None, tokens=None, out=None, title=None,
                  max_lag: int = 30, n_fixed_point_starts: int = 32, rng=None, echo=None,
                  source: str | None = None, layers=None, max_bytes=MAX_BYTES,
                  record_dtype="float64", window=None, stride: int = 1) -> Analysis | InsideAnalysis:
    """Measure the hidden state of a recurrent model trained anywhere, and optionally write its report.

    Parameters
    ----------
    model : torch.nn.RNN, GRU or LSTM; Keras 3 SimpleRNN, GRU, LSTM or Bidirectional; ours; a transformers model
        Any ``num_layers``, ``bidirectional`` and ``batch_first`` of a torch module; a built Keras
        layer, or a Keras ``Sequential``/``Model`` whose one recurrent layer reads its input; a
        hiddenstate RNN/GRU/LSTM/MinGRU/MinLSTM; or a :class:`~hiddenstate.CharRNN`.
        Converted exactly (:func:`as_layer`); what cannot be represented raises. A transformers
        model of a registered family (:mod:`hiddenstate.interop.families`: ``MambaForCausalLM``,
        ``Mamba2ForCausalLM``, ``BambaForCausalLM``, ...) runs itself on the ids while its recurrent
        layers are recomputed by our block, each held to the model's own output; it, a
        :class:`~hiddenstate.MambaLM`, :class:`~hiddenstate.kinds.ssm.lm.Mamba2LM`,
        :class:`~hiddenstate.Mamba` or :class:`~hiddenstate.Mamba2` is measured by
        :func:`hiddenstate.pipelines.family_inspection.inspect_recurrent_model` (``x``: token ids (N, T) as
        transformers takes them, or the block's input; ``h0``: our models' initial states; only
        ``out``, ``title``, ``max_lag``, ``text``, ``tokens`` (time-major (T, N); default the ids),
        ``source``, ``layers`` and ``max_bytes`` apply; ``lengths`` and ``vocab`` are refused) and
        its report is :func:`hiddenstate.report.family_page.build_family_report`. So is a CharRNN of
        ``cell="mamba"`` (:func:`hiddenstate.pipelines.app.char_mamba_report`: ``x`` its ids or a str with
        ``vocab``, ``h0`` its state pair; ``lengths`` is refused, no fixed-point search). A path:
        a ``save_pretrained`` directory of a registered family, read offline and checked
        (:func:`hiddenstate.interop.families.directory.open_request`), then as its model.
        Any other torch model (transformers ones included) holding ``torch.nn.RNN/GRU/LSTM``
        modules or cells anywhere in its tree runs itself on ``x`` while each of them is recomputed
        by our layer and held to its own output
        (:func:`hiddenstate.pipelines.rnns_inside.inspect_rnns_inside`); ``h0``, ``lengths``,
        ``text``, ``vocab`` and ``tokens`` are refused (each RNN gets what the model passes it).
    x : array_like or torch.Tensor
        The input, in the model's own layout: torch (T, N, I), or (N, T, I) with
        ``batch_first=True``, or unbatched (T, I); Keras (N, T, I). For a CharRNN: token ids
        (T,) or (T, N), or a str (with ``vocab``). For a model directory: token ids (T,) or
        (N, T), or a str that its ``tokenizer.json`` tokenises.
        For a torch model with RNNs inside: what the model is called with, a tensor (its one
        argument), a tuple (its arguments) or a dict (its keywords, ``{"input_values": x}``).
    h0 : optional
        Initial state: torch's ``h0`` (L*D, N, H) or ``(h0, c0)`` for an LSTM; for Keras also its
        ``initial_state`` list (``[h]``/``[h, c]`` per direction, each (N, H)). Default zeros.
    lengths : array_like of int, shape (N,), optional
        Valid steps per sequence of a right-padded batch.
    text : str, optional
        The characters of sequence 0, one per step: adds the units that track text features and
        the coloured-text view. For a CharRNN it defaults to the decoded ``x`` when ``vocab``
        is known, and a text given with ``vocab`` must be that decoding (refused otherwise).
    vocab : Vocabulary, str or list of str, optional
        A CharRNN's characters in id order: lets ``x`` be text, and gives the text view and the
        fixed points with the input held at ``' '``.
    tokens : array_like of int, shape (T, N) or (T,), optional
        Token ids behind ``x`` (a CharRNN's ids are used by default): the memory curve then
        decodes the token k steps back.
    out : str or os.PathLike, optional
        Write the HTML report there: a new file or a previous hiddenstate report (checked before
        any work, :func:`hiddenstate.pipelines.app.check_report_path`; nothing else is overwritten).
    title : str, optional
        The report's title (default "Inside the hidden state").
    max_lag : int, default 30
        Largest lag of the memory curve and Jacobian products.
    n_fixed_point_starts : int, default 32
        Starts of the fixed-point search (0 skips it).
    rng : numpy.random.Generator, optional
        Fixed-point starts (default ``default_rng(0)``).
    echo : callable, optional
        Called with one line per measurement and its seconds (:func:`hiddenstate.analyze_model`).
    source : str, optional
        What the report calls the model (``meta["model"]`` and the subtitle); default from what
        ``model`` is (``"torch.nn.GRU"``, ``"hiddenstate GRU"``, ...).
    layers : int or list of int, optional
        A transformers model's recurrent layers to record (its own indices; default all). For a
        torch model with RNNs inside: the RNNs to analyse by module path (str or list of str).
    max_bytes : int or None, default 4 GiB
        A transformers model's cap on the recorded states, estimated before the model runs
        (:func:`hiddenstate.pipelines.family_inspection.inspection_bytes`: the records, their
        recomputation and their analyses); ``layers=`` and ``record_dtype="float32"`` lower it.
    record_dtype : {"float64", "float32"}, default "float64"
        A transformers model's records' dtype: ``"float32"`` halves them (the recomputation and
        its check against the model's output stay float64).
    window : (int, int), optional
        A transformers model's positions ``start <= t < stop`` whose states are kept (default all):
        every step is still computed (a state depends on all before it), but each layer's record is
        cut to the kept steps as soon as it is checked, and the analyses and report read only them;
        the memory estimate held to ``max_bytes`` follows. Refused for any other model.
    stride : int, default 1
        With ``window`` (or alone): keep every ``stride``-th step, the first included.

    Returns
    -------
    Analysis or MambaAnalysis
        As :func:`hiddenstate.analyze_model` (``analysis.trace`` holds every step's state of every
        layer and direction); ``meta["model"]`` names what ``model`` was. For a Mamba model a
        :class:`~hiddenstate.kinds.ssm.mamba_analysis.MambaAnalysis` (``layers[l].record`` every step's states;
        for Mamba-2 its subclass :class:`~hiddenstate.kinds.ssm.mamba2_analysis.Mamba2Analysis`, per head; for
        a transformers model ``layers[l].recomputed`` and ``layer_map``). For a torch model with
        RNNs inside an :class:`~hiddenstate.pipelines.rnns_inside.InsideAnalysis`: one Analysis
        per RNN by module path (``an["decoder.lstm"]``), and the recovered RNNs and errors.

    Raises
    ------
    TypeError
        ``model`` is not one of the kinds above (e.g. a ``torch.nn.Linear``; a transformers model
        of no registered family, in one line naming the registered ones); ``x`` of a non-numeric
        dtype; ``vocab`` of the wrong type.
    ValueError
        An option the conversion cannot represent (named); ``x`` whose shape does not fit the
        model, with no sequence (N = 0), or ``lengths`` all 0; a ``text`` that is not what
        ``vocab`` decodes ``x`` to; torch ``meta`` tensors; ``out`` that may not be written;
        ``layers`` of anything but a transformers model (or module paths of a torch model with
        RNNs inside); a recomputed layer (or RNN inside) above the tolerance; ``h0``, ``lengths``,
        ``text``, ``vocab`` or ``tokens`` given for a torch model with RNNs inside; records over
        ``max_bytes``; and the errors of :func:`hiddenstate.analyze_model`.
    """
    out = None if out is None else check_report_path(out)
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a str or None; got {type(title).__name__}.")
    if source is not None and not isinstance(source, str):
        raise TypeError(f"source must be a str or None; got {type(source).__name__}.")
    if isinstance(model, (str, os.PathLike)) and os.path.isdir(model):  # a model directory: x its token ids
        named_dir = model
        model, request, named = open_request(model, x, layers=layers, max_bytes=max_bytes,
                                              record_dtype=record_dtype, window=window, stride=stride)
        if isinstance(x, str) and text is None:  # a text: the tokens' pieces are the units of text (any tokenizer)
            pieces = token_strings(named_dir, request.ids)
            text = "".join(pieces) if all(len(p) == 1 for p in pieces) else pieces
        x, layers, source = request.ids, request.layers, source or named  # read and checked once
    if is_recurrent_model(model):
        if lengths is not None:  # the measurements would average over the padded steps
            raise ValueError("lengths must be None for a Mamba or Mamba-2 model: its analysis reads whole sequences "
                             "(no right-padded batches); got lengths. Inspect sequences of equal length.")
        if vocab is not None:
            raise ValueError("vocab must be None unless model is a CharRNN; got a vocabulary. Pass text= instead.")
        return inspect_recurrent_model(model, x, h0, out=out, title=title, max_lag=max_lag, text=text, tokens=tokens,
                             source=source, layers=layers, max_bytes=max_bytes, record_dtype=record_dtype,
                             window=window, stride=stride)
    if window is not None or stride != 1:
        raise ValueError(f"window and stride apply to a transformers model of a registered family (whose recurrent "
                         f"layers are recomputed and cut to the kept steps); got window={window!r:.40}, "
                         f"stride={stride!r:.20} for a {type(model).__name__}. Pass a shorter x instead.")
    if record_dtype != "float64":
        raise ValueError(f"record_dtype must be 'float64' unless model is a transformers model of a registered family "
                         f"(whose recurrent layers are recomputed and recorded); got {record_dtype!r:.40}.")
    if _holds_rnns(model):  # any torch model with torch.nn.RNN/GRU/LSTM (or cells) inside
        return _inside(model, x, h0, lengths, text, vocab, tokens, layers=layers, out=out, title=title, source=source,
                       max_lag=max_lag, n_fixed_point_starts=n_fixed_point_starts, rng=rng, echo=echo)
    if _package(model) == "transformers":
        family_of(model)  # a model of no registered family: one line naming those there are
    if layers is not None:
        raise ValueError(f"layers must be None unless model is a transformers model of a registered family; got "
                         f"{layers!r} for a {type(model).__name__}.")
    if isinstance(model, CharRNN) and model.cell == "mamba":
        return _inspect_char_mamba(model, x, h0, lengths, text, vocab, tokens, out, title, max_lag, echo, source)
    layer, converted = as_layer(model)
    source = converted if source is None else source
    fp = None
    if isinstance(model, CharRNN):
        x, ids, text, fp = _char_input(model, x, text, vocab)
        tokens = ids if tokens is None else tokens
    else:
        if vocab is not None:
            raise ValueError("vocab must be None unless model is a CharRNN; got a vocabulary. Pass text= to show "
                             "the characters behind the steps.")
        x = _check_x(x, layer, converted)
    batch_axis = 0 if layer.batch_first and not isinstance(model, CharRNN) else 1  # a CharRNN's x is (T, N, I)
    N = x.shape[batch_axis] if x.ndim == 3 else 1  # (T, I): one sequence
    if N == 0:
        raise ValueError(f"x must hold at least one sequence (N >= 1); got shape {shape_str(x.shape)}.")
    if tokens is not None:
        tokens = _numpy("tokens", tokens)
    if lengths is not None:
        lengths = _numpy("lengths", lengths)
        lens = np.asarray(lengths)
        if lens.size and lens.dtype.kind in "iu" and not lens.any():
            raise ValueError(f"lengths must give at least one valid step (a sequence of length >= 1); got all "
                             f"{lens.size} zero, so there is no state to inspect.")
    h0 = _state("h0", h0, layer, keras=converted.startswith("keras"))
    an = analyze_model(layer, x, h0, tokens=tokens, text=text, lengths=lengths, max_lag=max_lag,
                       n_fixed_point_starts=n_fixed_point_starts, fixed_point_input=fp, rng=rng,
                       title_meta={"model": source}, echo=echo)
    if out is not None:
        T, N = an.trace.mask.shape
        subtitle = (f"{source}: {layer.num_layers} layer(s) × {layer.hidden_size} units"
                    f"{', bidirectional' if layer.bidirectional else ''}, converted exactly; measured on {T:,} steps "
                    f"of {N:,} sequence(s)" + ("; fixed points with the input held at ' '." if fp is not None else "."))
        build_report(out, an, title=title or "Inside the hidden state", subtitle=subtitle,
                     max_chars=len(an.text) if an.text else 2000)
    return an


def _inspect_char_mamba(model, x, states, lengths, text, vocab, tokens, out, title, max_lag, echo,
                        source) -> MambaAnalysis:
    """:func:`inspect_model` of a CharRNN of cell "mamba": ids or text in, the Mamba report out."""
    if lengths is not None:
        raise ValueError("lengths must be None for a CharRNN of cell 'mamba' (its stack runs whole sequences); got "
                         "lengths. Inspect each sequence's valid steps as x instead.")
    _, ids, text, _ = _char_input(model, x, text, vocab)  # ids (T, N); text decoded with vocab
    if ids.shape[0] == 0:
        raise ValueError(f"x must have at least one step; got shape {shape_str(ids.shape)}.")
    tokens = None if tokens is None else _numpy("tokens", tokens)
    source = "hiddenstate CharRNN (mamba)" if source is None else source
    T, N = ids.shape
    subtitle = (f"{source}: {model.num_layers} Mamba block(s), d_model {model.hidden_size}, SSM state "
                f"(Di={model.rnn.d_inner}, S={model.rnn.d_state}) per layer; every layer's state measured on "
                f"{T:,} steps of {N:,} sequence(s).")
    return char_mamba_report(model, ids, out, text=text, tokens=tokens, states=states, max_lag=max_lag,
                             model_name=source, title=title or "Inside a Mamba model", subtitle=subtitle, echo=echo)


def read_inputs(path, input_size: int, *, seed: int = 0, name: str = "--inputs") -> tuple[np.ndarray, str]:
    """The input of a layer inspected from its weights alone: a ``.npy`` file, or a seeded random one.

    Parameters
    ----------
    path : str or os.PathLike or None
        A ``.npy`` file of shape (T, N, I), float or integer, read with
        ``numpy.load(allow_pickle=False)``. None: :data:`RANDOM_INPUT`, standard normal
        (T, N, I) = (100, 8, I) from ``numpy.random.default_rng(seed)``.
    input_size : int
        I, the layer's input size.
    seed : int, default 0
        Seed of the random input.
    name : str, default "--inputs"
        What the messages call ``path``.

    Returns
    -------
    x : ndarray of shape (T, N, I), float64
    description : str
        One line saying where ``x`` came from.

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    ValueError
        Not a ``.npy`` file of plain numbers (object arrays need pickle and are refused), or not of
        shape (T, N, I) with T, N >= 1.
    """
    if path is None:
        T, N = RANDOM_INPUT["T"], RANDOM_INPUT["N"]
        x = np.random.default_rng(seed).standard_normal((T, N, input_size))
        return x, (f"random input: standard normal (T, N, I) = ({T}, {N}, {input_size}) from "
                   f"numpy.random.default_rng({seed}) (--inputs FILE.npy for your own, --seed for another draw)")
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise FileNotFoundError(f"{name} '{p}' does not exist (or is not a file); give a .npy file of shape (T, N, I).")
    try:
        x = np.load(p, allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise ValueError(f"{name} must be a .npy file of numbers of shape (T, N, I) (read without pickle); got "
                         f"'{p}': {' '.join(str(error).split())}.") from None
    if not isinstance(x, np.ndarray):
        raise ValueError(f"{name} must be a .npy file holding one array; got '{p}', a {type(x).__name__} (.npz?).")
    if x.ndim != 3 or x.shape[-1] != input_size or 0 in x.shape[:2]:
        raise ValueError(f"{name} must hold an array of shape (T, N, I={input_size}), T, N >= 1; got "
                         f"{shape_str(x.shape)} in '{p}'.")
    x = float_array(name, x, dtype=np.float64)
    return x, f"input: '{p}', (T, N, I) = {shape_str(x.shape)}"


def inspect_file(path, out, *, kind=None, nonlinearity=None, reset_after=None, prefix=None, inputs=None, seed: int = 0,
                 echo=None, n_fixed_point_starts: int = 32, stages=None) -> Analysis:
    """``hiddenstate inspect FILE.safetensors``: the report of a layer known only from its state dict.

    Parameters
    ----------
    path : str or os.PathLike
        A safetensors file of a torch state dict (:func:`hiddenstate.interop.statedict_file.load_state_dict_file`;
        a pickle is refused unread).
    out : str or os.PathLike
        The HTML report to write (a new file or a previous report).
    kind, nonlinearity, reset_after, prefix
        What the names and shapes cannot tell, as for ``load_state_dict_file``.
    inputs : str or os.PathLike, optional
        A ``.npy`` file (T, N, I); default a seeded random input (:func:`read_inputs`).
    seed : int, default 0
        Seed of the random input.
    echo : callable, optional
        Called with each line saying what was inferred, assumed, ignored and fed (e.g. ``print``).
    n_fixed_point_starts : int, default 32
        Starts of the fixed-point search (0 skips it), as for :func:`inspect_model`.
    stages : callable, optional
        Called with one line per measurement and its seconds (``echo`` of
        :func:`hiddenstate.analyze_model`).

    Returns
    -------
    Analysis

    Raises
    ------
    FileNotFoundError, ValueError
        From :func:`load_state_dict_file`, :func:`read_inputs` and :func:`inspect_model`.
    """
    out = check_report_path(out)
    loaded = load_state_dict_file(path, kind=kind, nonlinearity=nonlinearity, reset_after=reset_after, prefix=prefix)
    x, fed = read_inputs(inputs, loaded.layer.input_size, seed=seed)
    lines = [f"inferred: {line}" for line in loaded.inferred] + [f"not inferred: {line}" for line in loaded.assumed]
    if loaded.ignored:
        shown = ", ".join(loaded.ignored[:4]) + (" ..." if len(loaded.ignored) > 4 else "")
        lines.append(f"ignored: {len(loaded.ignored)} tensor(s) not of the recurrent module ({shown})")
    lines.append(fed)
    for line in lines if echo is not None else ():
        echo(line)
    an = inspect_model(loaded.layer, x, out=out, title=f"Inside the hidden state of {os.path.basename(path)}",
                       n_fixed_point_starts=n_fixed_point_starts, echo=stages,
                       source=f"torch state dict '{os.path.basename(path)}' ({type(loaded.layer).__name__})")
    if echo is not None:
        echo(f"report: {out}")
    return an
