"""Export layers and character models to ONNX with the standard ``RNN``, ``GRU`` and ``LSTM`` operators.

The graph uses only the operators of the ONNX standard (opset 14), so any runtime runs it:

==============  ====================================================================================
ours            ONNX
==============  ====================================================================================
``RNN``         ``RNN`` with ``activations`` Tanh, Relu or Sigmoid (Elman's logistic units)
``GRU``         ``GRU``: ``linear_before_reset=0`` is exactly our default Cho et al. (2014) candidate
                ``tanh(W_in x + b_in + W_hn (r * h) + b_hn)``; ``=1`` is ``reset_after=True`` (torch's)
``LSTM``        ``LSTM`` without peepholes
gate rows       GRU r, z, n -> ONNX z, r, h;  LSTM i, f, g, o -> ONNX i, o, f, c
``lengths``     ``sequence_lens``: padding gives zero outputs and ``h_n`` is each row's last valid
                state, the backward direction starting at each row's last valid step (as ours)
layers          one operator per layer, its ``Y`` (T, D, N, H) transposed and reshaped to the next
                layer's input (T, N, D*H)
==============  ====================================================================================

Weights become initializers in the layer's dtype (float32 or float64). Dropout and weight drop
are training-only and not exported; a learned initial state is exported as a constant expanded to
the batch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hiddenstate.core.files import output_file, write_atomically
from hiddenstate.core.validation import boolean
from hiddenstate.interop.kinds import convertible_kind

__all__ = ["OPSET", "charrnn_to_onnx", "to_onnx"]

#: The ONNX opset the exported graphs declare.
OPSET = 14

_ONNX_OPS = {"rnn": "RNN", "gru": "GRU", "lstm": "LSTM"}
_ORDER = {"rnn": (0,), "gru": (1, 0, 2), "lstm": (0, 3, 1, 2)}  # our gate blocks in ONNX's order
_ACTIVATION = {"tanh": "Tanh", "relu": "Relu", "sigmoid": "Sigmoid"}


def _onnx():
    from hiddenstate.core.extras import require

    return require("onnx", "export to ONNX")


def _reorder(w: np.ndarray, kind: str, H: int) -> np.ndarray:
    """Rows of a (G*H, ...) weight (or (G*H,) bias) from our gate order to ONNX's."""
    return np.concatenate([w[k * H:(k + 1) * H] for k in _ORDER[kind]], axis=0)


class _Graph:
    """A small builder: unique names, initializers, nodes."""

    def __init__(self, onnx, dtype):
        self.onnx, self.nodes, self.inits, self.n = onnx, [], [], 0
        self.elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, base: str, array: np.ndarray) -> str:
        name = self.name(base)
        self.inits.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op: str, inputs, n_out: int = 1, base: str | None = None, **attrs):
        outs = [self.name(base or op.lower()) for _ in range(n_out)]
        self.nodes.append(self.onnx.helper.make_node(op, list(inputs), outs, name=self.name(op), **attrs))
        return outs[0] if n_out == 1 else outs


def _layers(g: _Graph, layer, x: str, h0: str | None, c0: str | None, lens: str | None):
    """Append the recurrent layers of ``layer`` reading ``x`` (T, N, I); returns (output, h_n, c_n) names."""
    kind = convertible_kind(layer, "an ONNX graph")
    H, L, D = layer.hidden_size, layer.num_layers, layer.num_directions
    lstm = kind == "lstm"
    p = {k: np.asarray(v) for k, v in layer.params.items()}
    if layer.learn_h0 and h0 is None:  # the learned initial state, (L*D, H) -> (L*D, N, H)
        batch = g.node("Gather", [g.node("Shape", [x]), g.const("axis1", np.array([1], dtype=np.int64))])
        shape = g.node("Concat", [g.const("ld", np.array([L * D], dtype=np.int64)), batch,
                                  g.const("h", np.array([H], dtype=np.int64))], axis=0)
        h0 = g.node("Expand", [g.node("Unsqueeze", [g.const("h0", p["h0"]), g.const("ax", np.array([1]))]), shape])
        if lstm:
            c0 = g.node("Expand", [g.node("Unsqueeze", [g.const("c0", p["c0"]), g.const("ax", np.array([1]))]),
                                   shape])
    h_parts, c_parts = [], []
    inp = x
    for li in range(L):
        W, R, B = [], [], []
        for d in range(D):
            w = layer.weights(li, d)
            W.append(_reorder(np.asarray(w["weight_ih"]), kind, H))
            R.append(_reorder(np.asarray(w["weight_hh"]), kind, H))
            if layer.bias:
                B.append(np.concatenate([_reorder(np.asarray(w["bias_ih"]), kind, H),
                                         _reorder(np.asarray(w["bias_hh"]), kind, H)]))
        ins = [inp, g.const(f"W_l{li}", np.stack(W)), g.const(f"R_l{li}", np.stack(R)),
               g.const(f"B_l{li}", np.stack(B)) if layer.bias else "", lens or ""]
        sl = np.array([li * D], dtype=np.int64), np.array([(li + 1) * D], dtype=np.int64)
        for s0 in (h0, c0) if lstm else (h0,):
            ins.append("" if s0 is None else g.node("Slice", [s0, g.const("start", sl[0]), g.const("end", sl[1]),
                                                              g.const("axis0", np.array([0], dtype=np.int64))]))
        attrs = {"hidden_size": H, "direction": "bidirectional" if D == 2 else "forward"}
        if kind == "gru":
            attrs["linear_before_reset"] = int(layer.reset_after)
        if kind == "rnn":
            attrs["activations"] = [_ACTIVATION[layer.nonlinearity]] * D
        while ins and ins[-1] == "":
            ins.pop()
        outs = g.node(_ONNX_OPS[kind], ins, n_out=3 if lstm else 2, base=f"l{li}", **attrs)
        y, y_h = outs[0], outs[1]
        h_parts.append(y_h)
        if lstm:
            c_parts.append(outs[2])
        y = g.node("Transpose", [y], perm=[0, 2, 1, 3])  # (T, D, N, H) -> (T, N, D, H)
        inp = g.node("Reshape", [y, g.const("tn_dh", np.array([0, 0, D * H], dtype=np.int64))])
    h_n = h_parts[0] if L == 1 else g.node("Concat", h_parts, axis=0)
    c_n = (c_parts[0] if L == 1 else g.node("Concat", c_parts, axis=0)) if lstm else None
    if lens is not None and h0 is not None:  # a row of length 0 keeps its initial state (ONNX gives zeros)
        empty = g.node("Unsqueeze", [g.node("Equal", [lens, g.const("zero", np.array(0, dtype=np.int32))]),
                                     g.const("axes02", np.array([0, 2], dtype=np.int64))])  # (1, N, 1)
        h_n = g.node("Where", [empty, h0, h_n])
        if lstm:
            c_n = g.node("Where", [empty, c0, c_n])
    return inp, h_n, c_n


def _outputs(g: _Graph, results) -> list:
    """Name the graph's results: an Identity node per ``(name, value, shape)`` and its value info."""
    outs = []
    for name, value, shape in results:
        g.nodes.append(g.onnx.helper.make_node("Identity", [value], [name], name=g.name("Identity")))
        outs.append(g.onnx.helper.make_tensor_value_info(name, g.elem, shape))
    return outs


def _save(g: _Graph, inputs, outputs, path, name: str) -> Path:
    onnx = g.onnx
    graph = onnx.helper.make_graph(g.nodes, name, inputs, outputs, initializer=g.inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)],
                                   producer_name="hiddenstate")
    onnx.checker.check_model(model)
    out = output_file(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, model.SerializeToString())
    return out


def to_onnx(layer, path, *, initial_state: bool = True, lengths: bool = False) -> Path:
    """Write an :class:`~hiddenstate.RNN`, :class:`~hiddenstate.GRU` or :class:`~hiddenstate.LSTM` as an ONNX model.

    Parameters
    ----------
    layer : hiddenstate.RNN, GRU or LSTM
        Any number of layers and directions, ``batch_first``, with or without bias, float32 or
        float64, GRU in both forms (``reset_after``), a learned initial state.
    path : str or os.PathLike
        The ``.onnx`` file to write (atomically; parent folders are created).
    initial_state : bool, default True
        Give the graph inputs ``h0`` (L*D, N, H) (and ``c0`` for the LSTM), as ``layer.forward``'s
        ``h0``. False: start from zeros, or from the learned initial state.
    lengths : bool, default False
        Give the graph an input ``lengths`` (N,) int32: the valid steps of each row (ONNX
        ``sequence_lens``).

    Returns
    -------
    pathlib.Path
        The file written. Its graph has the inputs ``x`` (T, N, I) ((N, T, I) with
        ``batch_first``), then ``h0``/``c0`` and ``lengths`` as asked, and the outputs ``output``
        (T, N, D*H) ((N, T, D*H) with ``batch_first``), ``h_n`` (L*D, N, H) and, for the LSTM,
        ``c_n``: the results of ``layer.forward`` (inference).

    Raises
    ------
    TypeError
        ``layer`` is not an RNN, GRU or LSTM layer, a flag is not a bool, or ``path`` is not a
        str or os.PathLike.
    ValueError
        ``path`` ends in a path separator (it names a directory), or is a directory, a device, a
        FIFO: only a regular file is replaced (:func:`hiddenstate.core.files.output_file`).
    ImportError
        The ``onnx`` package is not installed.
    """
    output_file(path)  # before the work: a directory, a device or a FIFO is never replaced
    kind = convertible_kind(layer, "an ONNX graph")
    initial_state, lengths = boolean("initial_state", initial_state), boolean("lengths", lengths)
    onnx = _onnx()
    g = _Graph(onnx, layer.dtype)
    H, LD = layer.hidden_size, layer.num_layers * layer.num_directions
    info = onnx.helper.make_tensor_value_info
    x_shape = ["N", "T", layer.input_size] if layer.batch_first else ["T", "N", layer.input_size]
    inputs = [info("x", g.elem, x_shape)]
    h0 = c0 = lens = None
    if initial_state:
        inputs.append(info("h0", g.elem, [LD, "N", H]))
        h0 = "h0"
        if kind == "lstm":
            inputs.append(info("c0", g.elem, [LD, "N", H]))
            c0 = "c0"
    if lengths:
        inputs.append(info("lengths", onnx.TensorProto.INT32, ["N"]))
        lens = "lengths"
    x = g.node("Transpose", ["x"], perm=[1, 0, 2]) if layer.batch_first else "x"
    out, h_n, c_n = _layers(g, layer, x, h0, c0, lens)
    if layer.batch_first:
        out = g.node("Transpose", [out], perm=[1, 0, 2])
    DH = layer.num_directions * H
    results = [("output", out, ["N", "T", DH] if layer.batch_first else ["T", "N", DH]), ("h_n", h_n, [LD, "N", H])]
    if kind == "lstm":
        results.append(("c_n", c_n, [LD, "N", H]))
    return _save(g, inputs, _outputs(g, results), path, f"hiddenstate_{kind}")


def charrnn_to_onnx(model, path, *, initial_state: bool = True) -> Path:
    """Write a :class:`~hiddenstate.CharRNN` as an ONNX model: ids -> logits, with the state in and out.

    Parameters
    ----------
    model : hiddenstate.CharRNN
    path : str or os.PathLike
        The ``.onnx`` file to write.
    initial_state : bool, default True
        Give the graph inputs ``h0`` (L, N, H) (and ``c0`` for an LSTM).

    Returns
    -------
    pathlib.Path
        The file written. Inputs ``ids`` (T, N) int64, then ``h0``/``c0``; outputs ``logits``
        (T, N, V) (the model's ``forward``), ``h_n`` and for the LSTM ``c_n``.

    Raises
    ------
    TypeError
        ``model`` is not a CharRNN of an RNN, GRU or LSTM, or ``path`` is not a str or os.PathLike.
    ValueError
        ``path`` names a directory, a device or a FIFO (as :func:`to_onnx`).
    ImportError
        The ``onnx`` package is not installed.
    """
    output_file(path)  # before the work
    layer = getattr(model, "rnn", None)
    if layer is None or not hasattr(model, "embed"):
        raise TypeError(f"model must be a hiddenstate CharRNN; got {type(model).__name__}.")
    kind = convertible_kind(layer, "an ONNX graph")
    initial_state = boolean("initial_state", initial_state)
    onnx = _onnx()
    g = _Graph(onnx, layer.dtype)
    info = onnx.helper.make_tensor_value_info
    H, L, V = layer.hidden_size, layer.num_layers, model.vocab_size
    inputs = [info("ids", onnx.TensorProto.INT64, ["T", "N"])]
    h0 = c0 = None
    if initial_state:
        inputs.append(info("h0", g.elem, [L, "N", H]))
        h0 = "h0"
        if kind == "lstm":
            inputs.append(info("c0", g.elem, [L, "N", H]))
            c0 = "c0"
    table = model.embed(np.arange(V))  # (V, I): one-hot rows or the embedding
    x = g.node("Gather", [g.const("embedding", table), "ids"], axis=0)  # (T, N, I)
    out, h_n, c_n = _layers(g, layer, x, h0, c0, None)
    W = np.asarray(model.params["decoder.weight"])  # (V, H)
    logits = g.node("Add", [g.node("MatMul", [out, g.const("decoder_weight_t", W.T)]),
                            g.const("decoder_bias", np.asarray(model.params["decoder.bias"]))])
    results = [("logits", logits, ["T", "N", V]), ("h_n", h_n, [L, "N", H])]
    if kind == "lstm":
        results.append(("c_n", c_n, [L, "N", H]))
    return _save(g, inputs, _outputs(g, results), path, f"hiddenstate_charrnn_{kind}")
