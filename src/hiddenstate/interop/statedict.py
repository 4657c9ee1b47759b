"""The torch-named state dict that every format maps to: inferring, building and loading layers.

Our layers keep torch's parameter names and layouts (``weight_ih_l{k}`` (G*H, I_k),
``weight_hh_l{k}`` (G*H, H), ``bias_ih_l{k}``, ``bias_hh_l{k}``, ``..._reverse``), so a torch
module, a safetensors file and (after a transpose) Keras weights all pass through one such
dict. This module turns foreign arrays into NumPy, infers the layer a dict describes (the kind
from the rows of ``weight_hh_l0``, :mod:`hiddenstate.interop.kinds`), builds it and loads it
strictly, with messages that name the key and both shapes.
"""

from __future__ import annotations

import re

import numpy as np

from hiddenstate.classic.cells import KINDS
from hiddenstate.core.validation import float_array, shape_str
from hiddenstate.interop.kinds import LAYERS, RECURRENT, gates_hint, kind_from_weight_hh

__all__ = ["KEY", "as_float_array", "build_layer", "layer_from_state", "load_strict", "refuse_learned_state"]

#: A torch-named parameter key: group 1 the name, group 2 the layer index, group 3 ``_reverse``.
KEY = re.compile(r"^(weight_ih|weight_hh|bias_ih|bias_hh)_l(\d+)(_reverse)?$")


def as_float_array(name: str, value) -> np.ndarray:
    """A float ndarray from a NumPy array, a torch tensor or a Keras variable, by the package's dtype rule.

    Parameters
    ----------
    name : str
        What the value is, for the error message (``"state_dict['weight_ih_l0']"``).
    value : array_like, torch.Tensor or keras.Variable
        The values. Float32/float64 are kept; torch float16/bfloat16 tensors are upcast to float64
        (exact; NumPy has no bfloat16); integer tensors and arrays are promoted to float64
        (:func:`hiddenstate.core.validation.float_array`).

    Returns
    -------
    ndarray
        No copy for a float NumPy array.

    Raises
    ------
    TypeError
        bool, complex, object or string values (a bool or complex tensor is refused, not cast).
    ValueError
        A torch tensor on the ``meta`` device (it has a shape but no values).
    """
    if not isinstance(value, np.ndarray):
        inner = getattr(value, "value", None)  # keras.Variable -> backend tensor
        if inner is not None and hasattr(inner, "detach"):
            value = inner
        if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch.Tensor
            if getattr(value, "is_meta", False):
                raise ValueError(f"{name} must hold values; got a torch tensor on the 'meta' device (shapes only, "
                                 "no data). Load the weights first (module.to_empty(device='cpu') and a state dict).")
            t = value.detach().cpu()
            kind = str(t.dtype)
            if kind == "torch.bool" or "complex" in kind:
                raise TypeError(f"{name} must be a floating-point tensor (integers are promoted to float64); got "
                                f"dtype {kind}.")
            if kind not in ("torch.float32", "torch.float64"):
                t = t.double()  # float16, bfloat16 (exact) and integers (promoted)
            value = t.numpy()
    return float_array(name, value, finite=False)  # finiteness is checked where the values are loaded


def build_layer(kind: str, input_size: int, hidden_size: int, num_layers: int, **options):
    """A fresh layer of ``kind`` (weights to be loaded); options the kind does not have are dropped.

    Parameters
    ----------
    kind : str
        A key of :data:`hiddenstate.classic.cells.KINDS`.
    input_size : int
        I, features of each input vector.
    hidden_size : int
        H, hidden units per layer and direction.
    num_layers : int
        L, stacked layers.
    **options
        Constructor options. A kind's math options (``nonlinearity``, ``reset_after``: its
        :attr:`~hiddenstate.classic.cells.CellKind.options`) are passed only to the kind that has them;
        the placeholder weights come from ``numpy.random.default_rng(0)``.

    Returns
    -------
    RNN, GRU or LSTM
        ``LAYERS[kind](input_size, hidden_size, num_layers, **options)``.
    """
    others = {o for k in KINDS.values() for o in k.options} - set(KINDS[kind].options)
    options = {k: v for k, v in options.items() if k not in others}
    return LAYERS[kind](input_size, hidden_size, num_layers, rng=np.random.default_rng(0), **options)


def layer_from_state(state: dict, source: str, *, kind=None, nonlinearity="tanh", batch_first=False,
                     reset_after=True, dropout=0.0, dtype=np.float64, options=None):
    """Infer the layer a torch-named state dict describes, build it and load the dict strictly.

    Parameters
    ----------
    state : dict of str to ndarray
        ``weight_ih_l{k}`` (G*H, I_k), ``weight_hh_l{k}`` (G*H, H), optional ``bias_ih_l{k}``,
        ``bias_hh_l{k}`` (G*H,), ``..._reverse``, optional learned ``h0``/``c0`` (L*D, H).
    source : str
        What the dict is, for error messages (``"state_dict"``, ``"'lstm.safetensors'"``).
    kind : str, optional
        Expected kind; None infers it from the rows of ``weight_hh_l0``.
    nonlinearity : {"tanh", "relu", "sigmoid"}, default "tanh"
        RNN only (shapes cannot tell).
    batch_first : bool, default False
        Input and output as (N, T, features).
    reset_after : bool, default True
        GRU only (shapes cannot tell); True is torch's candidate.
    dropout : float, default 0.0
        Between layers, in training only.
    dtype : {float64, float32}, default float64
    options : mapping, optional
        Further options of ``kind`` (a MinGRU's ``log_space`` and ``scan``).

    Returns
    -------
    RNN, GRU, LSTM, MinGRU or MinLSTM
        Sizes, ``num_layers``, ``bidirectional``, ``bias`` and ``learn_h0`` from the keys and shapes.
        A kind without recurrent weights (``"mingru"``, ``"minlstm"``) must be given as ``kind``:
        its hidden size is the rows of ``weight_ih_l0`` over G.

    Raises
    ------
    ValueError
        An unexpected or missing key, a ``weight_hh_l0`` of no kind's shape or of another kind
        than ``kind``, or anything :func:`load_strict` refuses.
    """
    for key, a in state.items():
        if key in ("h0", "c0"):
            continue
        if not KEY.match(key):
            hint = " (an LSTM with proj_size > 0, which hiddenstate does not support)" if key.startswith(
                "weight_hr") else ""
            raise ValueError(f"{source} has an unexpected key {key!r} of shape {shape_str(a.shape)}{hint}; keys must "
                             f"be weight_ih_l<k>, weight_hh_l<k>, bias_ih_l<k>, bias_hh_l<k> (+ '_reverse'), h0, c0.")
    linear = kind is not None and not KINDS[kind].recurrent
    for key in ("weight_ih_l0",) if linear else ("weight_ih_l0", "weight_hh_l0"):
        if key not in state:
            raise ValueError(f"{source} must contain {key!r}; got keys {sorted(state)}.")
    if linear:
        return _linear_from_state(state, source, kind, batch_first=batch_first, dropout=dropout, dtype=dtype,
                                  options=options)
    w_hh = state["weight_hh_l0"]
    found = kind_from_weight_hh(w_hh)
    if found is None:
        *first, last = [f"{KINDS[name].num_gates} ({LAYERS[name].__name__})" for name in RECURRENT]
        raise ValueError(f"{source}['weight_hh_l0'] must have shape (G*H, H) with G = {', '.join(first)} or {last}; "
                         f"got {shape_str(w_hh.shape)}.")
    H = w_hh.shape[1]
    if kind is None:
        kind = found
    elif kind != found:
        G = KINDS[kind].num_gates
        raise ValueError(f"{source}['weight_hh_l0'] has shape {shape_str(w_hh.shape)}{gates_hint(w_hh.shape[0], H)}; "
                         f"kind={kind!r} needs shape ({G}*H={G * H}, {H}). Load it as kind={found!r}.")
    w_ih = state["weight_ih_l0"]
    if w_ih.ndim != 2:
        raise ValueError(f"{source}['weight_ih_l0'] must have shape (G*H, I); got {shape_str(w_ih.shape)}.")
    num_layers = max(int(m.group(2)) for m in map(KEY.match, state) if m) + 1
    layer = build_layer(kind, w_ih.shape[1], H, num_layers, nonlinearity=nonlinearity, reset_after=reset_after,
                        bias="bias_ih_l0" in state or "bias_hh_l0" in state,
                        bidirectional=any(k.endswith("_reverse") for k in state), batch_first=batch_first,
                        dropout=dropout, learn_h0="h0" in state or "c0" in state, dtype=dtype)
    load_strict(layer, state, source)
    return layer


def _linear_from_state(state, source, kind, *, batch_first, dropout, dtype, options):
    """:func:`layer_from_state` for a kind without recurrent weights: H from ``weight_ih_l0`` (G*H, I)."""
    w_ih, G = state["weight_ih_l0"], KINDS[kind].num_gates
    if w_ih.ndim != 2 or w_ih.shape[0] == 0 or w_ih.shape[0] % G:
        raise ValueError(f"{source}['weight_ih_l0'] must have shape (G*H, I) with G = {G} for kind={kind!r}; got "
                         f"{shape_str(w_ih.shape)}.")
    num_layers = max(int(m.group(2)) for m in map(KEY.match, state) if m) + 1
    layer = build_layer(kind, w_ih.shape[1], w_ih.shape[0] // G, num_layers, bias="bias_ih_l0" in state,
                        bidirectional=any(k.endswith("_reverse") for k in state), batch_first=batch_first,
                        dropout=dropout, learn_h0="h0" in state, dtype=dtype, **dict(options or {}))
    load_strict(layer, state, source)
    return layer


def load_strict(layer, state: dict, source: str, *, check_only: bool = False) -> None:
    """``layer.load_state_dict(state)`` with messages that name the source, the key and both shapes.

    Parameters
    ----------
    layer : RNN, GRU or LSTM
        Loaded in place (its arrays are overwritten).
    state : dict of str to ndarray
        Exactly the layer's keys, each of the layer's shape.
    source : str
        What the dict is, for error messages.
    check_only : bool, default False
        Check the keys and shapes only, loading nothing (``state`` may hold placeholders of the
        shapes, e.g. from a file's header before its tensors are read).

    Raises
    ------
    ValueError
        A missing or unexpected key, a shape that does not fit, a non-finite value. Nothing is
        loaded then.
    """
    missing = sorted(set(layer.params) - set(state))
    extra = sorted(set(state) - set(layer.params))
    if missing or extra:
        raise ValueError(f"{source} does not fit {layer!r}: missing keys {missing}, unexpected keys "
                         f"{[f'{k} {shape_str(state[k].shape)}' for k in extra]}. Nothing was loaded.")
    H = layer.hidden_size
    for key, want in layer.params.items():
        got = state[key].shape
        if got != want.shape:
            what = gates_hint(got[0], H) if key.startswith("weight_hh") and len(got) == 2 and got[1] == H else ""
            raise ValueError(f"{source}[{key!r}] must have shape {shape_str(want.shape)} to load into "
                             f"{type(layer).__name__}(input_size={layer.input_size}, hidden_size={H}, ...); got "
                             f"{shape_str(got)}{what}. Nothing was loaded.")
    if not check_only:
        layer.load_state_dict(state)


def refuse_learned_state(layer, strict: bool, *, holder: str, call: str, use: str) -> None:
    """Raise if ``layer`` has a learned initial state that the target format cannot hold and ``strict``.

    Parameters
    ----------
    layer : RNN, GRU or LSTM
        The layer to convert.
    strict : bool
        The caller's ``strict`` option; False lets the state be left out.
    holder : str
        The target, e.g. ``"a torch module"``.
    call : str
        The conversion function's name, e.g. ``"to_torch"``.
    use : str
        Where the user should pass the state instead, e.g. ``"the module's h0"``.

    Raises
    ------
    ValueError
        ``layer.learn_h0`` and ``strict``.
    """
    if layer.learn_h0 and strict:
        raise ValueError(f"layer has a learned initial state (params['h0']) that {holder} cannot hold; got "
                         f"strict=True. Call {call}(layer, strict=False) and pass "
                         f"layer.initial_state(N, 'learned') as {use}.")
