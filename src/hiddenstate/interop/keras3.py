"""Layers from and to the weights of Keras 3 ``SimpleRNN``, ``GRU`` and ``LSTM``, exactly.

Keras stores ``kernel`` (I, G*H) = ``weight_ih.T`` and ``recurrent_kernel`` (H, G*H) =
``weight_hh.T``, one ``bias`` (G*H,) where we have ``bias_ih`` and ``bias_hh`` (a GRU with
``reset_after=True``: (2, 3H) = [input bias; recurrent bias]), and its GRU gate blocks in the
order z, r, h where ours (and torch's) are r, z, n; LSTM blocks i, f, c, o are ours i, f, g, o.
Where Keras has one bias, importing puts it in ``bias_ih`` and zeros ``bias_hh`` (only the sum
enters the equations) and exporting writes the sum, so a round trip returns the Keras arrays bit
for bit. Only the default activations map (tanh and sigmoid gates; SimpleRNN tanh, relu or
sigmoid). Keras itself is never imported: the arrays go through ``get_weights``/``set_weights``.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.classic.cells import KINDS
from hiddenstate.classic.cells.rnn import NONLINEARITIES
from hiddenstate.classic.recurrent import RecurrentLayer
from hiddenstate.core.validation import boolean, float_dtype, shape_str
from hiddenstate.interop.kinds import convertible_kind, gates_hint, kind_name
from hiddenstate.interop.statedict import as_float_array, build_layer, load_strict, refuse_learned_state

__all__ = ["from_keras", "from_keras_weights", "to_keras_weights"]

#: Keras's class name of each kind.
_KERAS_TITLE = {"rnn": "SimpleRNN", "gru": "GRU", "lstm": "LSTM"}
#: Our kind of each Keras recurrent layer class.
_KERAS_KINDS = {"SimpleRNN": "rnn", "GRU": "gru", "LSTM": "lstm"}
#: Keras's order of the gate blocks, in our block names, where it differs from ours (its candidate ``h`` is our ``n``).
_KERAS_BLOCKS = {"gru": ("z", "r", "n")}


def _reorder(a: np.ndarray, kind: str, H: int, *, to_keras: bool) -> np.ndarray:
    """``a`` with the H-blocks of its last axis in Keras's gate order (``to_keras``) or back in ours."""
    ours = KINDS[kind].blocks
    keras = _KERAS_BLOCKS.get(kind, ours)
    if keras == ours:
        return a
    source, target = (ours, keras) if to_keras else (keras, ours)
    return np.concatenate([a[..., source.index(b) * H:(source.index(b) + 1) * H] for b in target], axis=-1)


def _groups(weights) -> tuple[list, bool]:
    """The per-layer lists of arrays, and whether ``weights`` was a stack (a list of lists)."""
    if not isinstance(weights, (list, tuple)) or len(weights) == 0:
        raise TypeError(f"weights must be a non-empty list of arrays (keras_layer.get_weights()) or a list of such "
                        f"lists; got {type(weights).__name__}.")
    stacked = all(isinstance(w, (list, tuple)) for w in weights)
    if not stacked and any(isinstance(w, (list, tuple)) for w in weights):
        raise TypeError("weights must be a list of arrays or a list of lists of arrays, not a mix; got "
                        f"{[type(w).__name__ for w in weights]}.")
    return (list(weights) if stacked else [weights]), stacked


def _bias(kind: str, bias: np.ndarray, name: str, H: int, reset_after):
    """Our ``((bias_ih, bias_hh), reset_after)`` from one Keras bias (a GRU's checked against ``reset_after``)."""
    G, title = KINDS[kind].num_gates, _KERAS_TITLE[kind]
    if kind != "gru":
        if bias.shape != (G * H,):
            raise ValueError(f"{name} must have shape ({G}*H={G * H},) for a Keras {title}; got "
                             f"{shape_str(bias.shape)}.")
        return (bias, np.zeros_like(bias)), reset_after
    after = {(G * H,): False, (2, G * H): True}.get(bias.shape)
    if after is None:
        raise ValueError(f"{name} must have shape ({G * H},) (reset_after=False) or (2, {G * H}) "
                         f"(reset_after=True) for a Keras GRU with H={H}; got {shape_str(bias.shape)}.")
    if reset_after is not None and after != reset_after:
        raise ValueError(f"{name} has shape {shape_str(bias.shape)}, the bias of a reset_after={after} "
                         f"GRU; got reset_after={reset_after}. Drop the argument or fix the weights.")
    bias = _reorder(bias, kind, H, to_keras=False)
    return (bias[0], bias[1]) if after else (bias, np.zeros_like(bias)), after


def from_keras_weights(kind, weights, *, reset_after=None, bidirectional=False, nonlinearity="tanh",
                       batch_first=False, dtype=np.float64):
    """Build our layer from the weights of a Keras 3 ``SimpleRNN``, ``GRU`` or ``LSTM``.

    Parameters
    ----------
    kind : {"rnn" (or "SimpleRNN"), "gru", "lstm"}, a layer class or a cell kind
    weights : list of arrays, or list of such lists
        What ``keras_layer.get_weights()`` returns: ``[kernel (I, G*H), recurrent_kernel (H, G*H),
        bias]`` (no bias when ``use_bias=False``). With ``bidirectional=True``, what a
        ``keras.layers.Bidirectional`` wrapper returns: the forward layer's arrays, then the
        backward layer's. A list of such lists is a stack (one entry per Keras layer, each
        reading the previous one's full sequence; layer k > 0 has kernel (D*H, G*H)).
        Arrays may be NumPy arrays, torch tensors or Keras variables.
    reset_after : bool, optional
        GRU only. Default: from the bias shape ((3H,) -> False, (2, 3H) -> True). Required for
        a GRU without bias; if given, it must agree with the bias shape.
    bidirectional : bool, default False
        The weights are a ``Bidirectional`` wrapper's (D = 2).
    nonlinearity : {"tanh", "relu", "sigmoid"}, default "tanh"
        SimpleRNN's ``activation`` (RNN only; weights cannot tell).
    batch_first : bool, default False
        Keras data is (N, T, I); set True to feed it unchanged.
    dtype : {float64, float32}, default float64

    Returns
    -------
    RNN, GRU or LSTM
        ``weight_ih = kernel.T``, ``weight_hh = recurrent_kernel.T`` (GRU: z and r blocks
        swapped), ``bias_ih`` = the Keras (input) bias, ``bias_hh`` = the Keras recurrent bias
        (GRU ``reset_after=True``) or zeros.

    Raises
    ------
    ValueError
        A wrong number of arrays, or a shape that does not fit ``kind`` (e.g. LSTM weights given
        as ``kind="gru"``): the message names the array and the shapes.
    TypeError
        ``weights`` is not a list of arrays or of lists of arrays, or an array is not float.
    """
    kind = kind_name("kind", kind)
    bidirectional = boolean("bidirectional", bidirectional)
    batch_first = boolean("batch_first", batch_first)
    dtype = float_dtype("dtype", dtype)
    if reset_after is not None:
        reset_after = boolean("reset_after", reset_after)
        if kind != "gru":
            raise ValueError(f"reset_after must be None for kind={kind!r}; got {reset_after}.")
    if nonlinearity not in NONLINEARITIES:
        raise ValueError(f"nonlinearity must be one of {NONLINEARITIES}; got {nonlinearity!r}.")
    groups, stacked = _groups(weights)
    G, D, title = KINDS[kind].num_gates, 2 if bidirectional else 1, _KERAS_TITLE[kind]
    has_bias = None
    H = None
    state = {}
    for k, group in enumerate(groups):
        where = f"weights[{k}]" if stacked else "weights"
        arrays = [as_float_array(f"{where}[{j}]", a) for j, a in enumerate(group)]
        per = len(arrays) // D
        if len(arrays) % D or per not in (2, 3) or (has_bias is not None and per != 2 + has_bias):
            want = f"{D * 3} ({'forward then backward ' if D == 2 else ''}kernel, recurrent_kernel, bias)"
            if has_bias is False:
                want = f"{D * 2} (no bias, like weights[0])"
            raise ValueError(f"{where} must hold {want} arrays for a Keras {title}"
                             f"{' wrapped in Bidirectional' if D == 2 else ''}; got {len(arrays)} of shapes "
                             f"{[shape_str(a.shape) for a in arrays]}.")
        has_bias = per == 3
        for d in range(D):
            kernel, recurrent = arrays[d * per], arrays[d * per + 1]
            kname, rname = f"{where}[{d * per}] (kernel)", f"{where}[{d * per + 1}] (recurrent_kernel)"
            if recurrent.ndim != 2 or recurrent.shape[0] == 0 or (H is not None and recurrent.shape[0] != H):
                want = "(H, G*H)" if H is None else f"(H={H}, {G}*H={G * H})"
                raise ValueError(f"{rname} must have shape {want}; got {shape_str(recurrent.shape)}.")
            H = recurrent.shape[0]
            if recurrent.shape[1] != G * H:
                what = gates_hint(recurrent.shape[1], H).replace("rows", "columns")
                raise ValueError(f"{rname} must have shape (H, {G}*H) = ({H}, {G * H}) for a Keras {title}; got "
                                 f"{shape_str(recurrent.shape)}{what}.")
            width = None if k == 0 else D * H
            if kernel.ndim != 2 or kernel.shape[1] != G * H or (width is not None and kernel.shape[0] != width):
                legend = f"(I, {G}*H={G * H})" if width is None else f"(D*H={width}, {G}*H={G * H})"
                raise ValueError(f"{kname} must have shape {legend}; got {shape_str(kernel.shape)}.")
            sfx = RecurrentLayer.suffix(k, d)
            state["weight_ih" + sfx] = _reorder(kernel, kind, H, to_keras=False).T
            state["weight_hh" + sfx] = _reorder(recurrent, kind, H, to_keras=False).T
            if has_bias:
                (state["bias_ih" + sfx], state["bias_hh" + sfx]), reset_after = _bias(
                    kind, arrays[d * per + 2], f"{where}[{d * per + 2}] (bias)", H, reset_after)
    if kind == "gru" and reset_after is None:
        raise ValueError("reset_after must be given for a Keras GRU without bias (use_bias=False); got None. "
                         "Keras's default is reset_after=True.")
    layer = build_layer(kind, state["weight_ih_l0"].shape[1], H, len(groups), nonlinearity=nonlinearity,
                        reset_after=reset_after, bias=has_bias, bidirectional=bidirectional, batch_first=batch_first,
                        dtype=dtype)
    load_strict(layer, state, "Keras weights")
    return layer


def to_keras_weights(layer, *, strict=True):
    """The Keras 3 weights of ``layer``, ready for ``keras_layer.set_weights``.

    Parameters
    ----------
    layer : RNN, GRU or LSTM
        A GRU maps to ``keras.layers.GRU(H, reset_after=layer.reset_after)``; an RNN to
        ``keras.layers.SimpleRNN(H, activation=layer.nonlinearity)``; bidirectional layers to
        ``keras.layers.Bidirectional`` (merge_mode "concat").
    strict : bool, default True
        A learned initial state has no place among Keras weights: raise, or leave it out with
        ``strict=False`` (pass it as ``initial_state`` yourself).

    Returns
    -------
    list of ndarray (``num_layers == 1``), or a list of such lists (one per layer)
        ``[kernel (I, G*H), recurrent_kernel (H, G*H), bias]`` per direction (forward first);
        no bias if ``layer.bias`` is False. The single Keras bias is ``bias_ih + bias_hh``; a
        GRU with ``reset_after=True`` gets both, stacked as (2, 3H).

    Raises
    ------
    ValueError
        A learned ``h0`` with ``strict=True``.
    TypeError
        ``layer`` is not one of our sequence layers.
    """
    kind = convertible_kind(layer, "Keras weights")
    strict = boolean("strict", strict)
    refuse_learned_state(layer, strict, holder="Keras weights", call="to_keras_weights", use="the Keras initial_state")
    H = layer.hidden_size
    out = []
    for k in range(layer.num_layers):
        group = []
        for d in range(layer.num_directions):
            w = layer.weights(k, d)
            group += [np.ascontiguousarray(_reorder(w["weight_ih"].T, kind, H, to_keras=True)),  # (I, G*H)
                      np.ascontiguousarray(_reorder(w["weight_hh"].T, kind, H, to_keras=True))]  # (H, G*H)
            if layer.bias:
                two = kind == "gru" and layer.reset_after
                bias = np.stack([w["bias_ih"], w["bias_hh"]]) if two else w["bias_ih"] + w["bias_hh"]
                group.append(np.array(_reorder(bias, kind, H, to_keras=True)))
        out.append(group)
    return out[0] if layer.num_layers == 1 else out


def _keras_kind(layer, name: str) -> str:
    """Our kind of a Keras ``SimpleRNN``/``GRU``/``LSTM`` layer (its class or a base class), else raise."""
    found = next((_KERAS_KINDS[c.__name__] for c in type(layer).__mro__
                  if c.__name__ in _KERAS_KINDS and c.__module__.split(".")[0] == "keras"), None)
    if found is None:
        raise TypeError(f"{name} must be a Keras 3 SimpleRNN, GRU or LSTM layer (or a Bidirectional wrapper of "
                        f"one); got {type(layer).__module__}.{type(layer).__name__}.")
    return found


def _activation(layer, attr: str) -> str:
    """The name of a Keras layer's activation function (``"tanh"``, ``"sigmoid"``, ...)."""
    f = getattr(layer, attr, None)
    return str(getattr(f, "__name__", f))


def _keras_options(layer, name: str, *, backwards: bool) -> tuple[str, str]:
    """``(kind, nonlinearity)`` of one Keras recurrent layer; raise for what our layers cannot compute."""
    kind = _keras_kind(layer, name)
    title = _KERAS_TITLE[kind]
    if not getattr(layer, "built", False):
        raise ValueError(f"{name} must be built (its weights exist only then); got an unbuilt Keras {title}. Call "
                         "layer.build((None, None, I)) or run it on an input once.")
    nonlinearity = _activation(layer, "activation")
    if kind == "rnn" and nonlinearity not in NONLINEARITIES:
        raise ValueError(f"{name}.activation must be one of {NONLINEARITIES} for a SimpleRNN; got {nonlinearity!r}.")
    if kind != "rnn":
        rec = _activation(layer, "recurrent_activation")
        if nonlinearity != "tanh" or rec != "sigmoid":
            raise ValueError(f"{name} must have activation='tanh' and recurrent_activation='sigmoid' (the equations "
                             f"of our {title}); got activation={nonlinearity!r}, recurrent_activation={rec!r}.")
        nonlinearity = "tanh"
    if bool(getattr(layer, "go_backwards", False)) != backwards:
        got = getattr(layer, "go_backwards", False)
        hint = (" Feed the input reversed in time (x[:, ::-1]) to a layer with go_backwards=False, or wrap the "
                "layer in Bidirectional." if not backwards else " Bidirectional's backward layer must read backwards.")
        raise ValueError(f"{name}.go_backwards must be {backwards}; got {got}.{hint}")
    if getattr(layer, "stateful", False):
        raise ValueError(f"{name}.stateful must be False: the state a stateful layer carries between calls is not "
                         "among its weights; got stateful=True. Pass that state as h0 to a copy built with "
                         "stateful=False.")
    return kind, nonlinearity


def from_keras(layer, *, dtype=np.float64):
    """Our layer equivalent to a built Keras 3 ``SimpleRNN``, ``GRU``, ``LSTM`` or ``Bidirectional`` layer.

    Parameters
    ----------
    layer : keras.layers.SimpleRNN, GRU, LSTM or Bidirectional
        Built (weights exist). Its options are read from it: ``units``, a GRU's ``reset_after``
        (from its bias), ``use_bias``, a SimpleRNN's ``activation``. ``return_sequences``,
        ``return_state``, ``unroll``, ``dropout`` and ``recurrent_dropout`` (training only) do not
        change the states and are ignored; a ``Bidirectional``'s ``merge_mode`` only combines
        the two directions' outputs (our layer concatenates them, as ``"concat"``).
    dtype : {float64, float32}, default float64
        Of the layer built (float32 weights become float64 exactly).

    Returns
    -------
    RNN, GRU or LSTM
        ``batch_first=True``: it reads Keras's (N, T, I) input unchanged and gives the states of
        every step, (N, T, D*H), Keras's ``return_sequences=True`` output (``"concat"``).

    Raises
    ------
    TypeError
        ``layer`` is not one of those Keras layers.
    ValueError
        An unbuilt layer; activations other than tanh/sigmoid (SimpleRNN: tanh, relu or sigmoid);
        ``go_backwards=True`` outside ``Bidirectional``; ``stateful=True``; a ``Bidirectional``
        whose two layers differ in kind or options.
    """
    names = {c.__name__ for c in type(layer).__mro__ if c.__module__.split(".")[0] == "keras"}
    if "Bidirectional" in names:
        forward, backward = getattr(layer, "forward_layer", None), getattr(layer, "backward_layer", None)
        kind, nonlinearity = _keras_options(forward, "layer.forward_layer", backwards=False)
        kind_b, nonlinearity_b = _keras_options(backward, "layer.backward_layer", backwards=True)
        if (kind_b, nonlinearity_b) != (kind, nonlinearity) or getattr(forward, "units", None) != getattr(
                backward, "units", None):
            raise ValueError("layer.backward_layer must be the same kind of layer as layer.forward_layer, with the "
                             f"same units and activation; got {type(forward).__name__}({forward.units}, "
                             f"{nonlinearity!r}) and {type(backward).__name__}({backward.units}, {nonlinearity_b!r}).")
        weights = list(forward.weights) + list(backward.weights)  # variables: get_weights() warns under NumPy 2
        return from_keras_weights(kind, weights, bidirectional=True, nonlinearity=nonlinearity, batch_first=True,
                                  dtype=dtype)
    kind, nonlinearity = _keras_options(layer, "layer", backwards=False)
    return from_keras_weights(kind, list(layer.weights), nonlinearity=nonlinearity, batch_first=True,
                              dtype=dtype)
