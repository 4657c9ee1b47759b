"""The ``torch.nn.RNN/GRU/LSTM`` (and cells) inside any torch model, recomputed exactly: :func:`recompute_rnns`.

An audio codec, a speech recogniser's prediction network, a table parser's decoder: many torch
models hold classic recurrent layers among other modules. :func:`find_rnns` lists them by module
path (``torch.nn.RNN``, ``GRU``, ``LSTM``, ``RNNCell``, ``GRUCell``, ``LSTMCell`` and their
subclasses, e.g. a transformers class deriving from one). :func:`recompute_rnns` runs the model
itself on its inputs (eval mode, ``torch.no_grad()``), a forward hook on each recurrent module
keeps what it read (its input and, when given, ``h0``/``(h0, c0)``) and what it returned, and our
layer (:func:`hiddenstate.interop.from_torch`, float64) recomputes the same call. The result is
held to the module's own output and final state:

    error = max(max |ours - theirs| / max |theirs| over the output, the same over h_n (and c_n))

and a module above :func:`hiddenstate.interop.families.tolerance` for its dtype (1.2e-4 for
float32 and float64) is refused with its figure, never analysed silently.

**Several calls of one module.** A decoder stepping token by token calls its LSTM (or cell) once a
step. Consecutive calls where each one starts from exactly the state the previous one returned
(``h0`` equal, element for element, to the previous ``h_n``; for an LSTM ``c0`` too) are joined in
time into one sequence: one recovered RNN whose ``calls`` lists them, recomputed in one pass from the
first call's initial state. Any other call (a fresh or changed state, a bidirectional module, a
PackedSequence) starts a sequence of its own, named ``path[call k]`` (or ``path[calls j-k]``).

**Cells** (``nn.RNNCell``, ``GRUCell``, ``LSTMCell``) are one-step, one-layer layers: the same
weights under ``_l0`` names (a ``GRUCell`` is our GRU with ``reset_after=True``).

**What is refused, by name:** an LSTM with ``proj_size > 0`` (our LSTM has no projection) and an
RNN whose conversion fails are listed in :attr:`RNNsInside.skipped` with the reason, not
recomputed. A PackedSequence input is unpacked (:func:`torch.nn.utils.rnn.pad_packed_sequence`)
and recomputed with ``lengths``. Every call's input is kept in float64 (no memory cap here).
torch is imported only inside the functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hiddenstate.core.validation import real, shape_str
from hiddenstate.interop.pytorch import from_torch

__all__ = ["RNNsInside", "RecoveredRNN", "find_rnns", "recompute_rnns"]


@dataclass(frozen=True)
class RecoveredRNN:
    """One recurrent module of a torch model (or a run of its calls), recomputed by our layer.

    Attributes
    ----------
    name : str
        The module path (``"decoder.lstm"``), with ``[call k]`` or ``[calls j-k]`` (1-based) when
        the module's calls are not one carried sequence.
    path : str
        The module path in the model (``""`` for the model itself).
    module_class : str
        The module's class, with its module (``"torch.nn.modules.rnn.LSTM"``).
    layer : RNN, GRU or LSTM
        Ours, float64, time-major (``batch_first=False``) whatever the module's layout.
    x : ndarray of shape (T, N, I), float64
        The input it read, time-major (a module's ``batch_first`` input transposed; the calls
        joined in time).
    h0 : ndarray of shape (L*D, N, H), a pair of them (LSTM), or None
        The initial state given to the first call (None: zeros).
    lengths : ndarray of int, shape (N,), or None
        Valid steps per sequence of a PackedSequence input.
    output : ndarray of shape (T, N, D*H), float64
        Our recomputed output.
    calls : tuple of int
        The module's calls (0-based, in order) this sequence joins.
    error : float
        ``max`` over the output and the final state(s) of ``max |ours - theirs| / max |theirs|``.
    tolerance : float
        The bound ``error`` was held to.
    dtype : str
        The module's dtype (``"float32"``).
    batch_first : bool
        The module's own layout.
    """

    name: str
    path: str
    module_class: str
    layer: object
    x: np.ndarray
    h0: object
    lengths: np.ndarray | None
    output: np.ndarray
    calls: tuple
    error: float
    tolerance: float
    dtype: str
    batch_first: bool = False


@dataclass(frozen=True)
class RNNsInside:
    """Every recurrent module of a torch model, recomputed (:func:`recompute_rnns`).

    Attributes
    ----------
    model : str
        The model's class name.
    rnns : tuple of RecoveredRNN
        In module order, each module's calls in order.
    calls : dict of str to int
        How many times each found module ran in the forward pass.
    skipped : dict of str to str
        Found modules not recomputed, and why (``proj_size``, never called, ...).
    """

    model: str
    rnns: tuple
    calls: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)

    def __getitem__(self, name: str) -> RecoveredRNN:
        """The recovered RNN of that name (a module path, with ``[call k]`` when so named)."""
        for r in self.rnns:
            if r.name == name:
                return r
        raise KeyError(f"name must be one of {[r.name for r in self.rnns]}; got {name!r}.")


def _torch():
    from hiddenstate.core.extras import require

    return require("torch", "recomputing the RNNs inside a torch model")


def _is_recurrent(torch, module) -> bool:
    from hiddenstate.interop.torch_modules import cho_gru_class

    return isinstance(module, (torch.nn.RNNBase, torch.nn.RNNCellBase, cho_gru_class()))


def find_rnns(module) -> list:
    """The recurrent modules inside a torch model, by module path.

    Parameters
    ----------
    module : torch.nn.Module
        Any model.

    Returns
    -------
    list of (str, torch.nn.Module)
        ``(path, submodule)`` for every ``torch.nn.RNN``, ``GRU``, ``LSTM``, ``RNNCell``,
        ``GRUCell``, ``LSTMCell`` (or subclass) and our ``ChoGRU``, in ``named_modules()`` order;
        the model itself has path ``""``. Empty when there is none.

    Raises
    ------
    TypeError
        ``module`` is not a torch module.
    """
    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module; got {type(module).__module__}.{type(module).__name__}.")
    return [(path, m) for path, m in module.named_modules() if _is_recurrent(torch, m)]


def _our_layer(torch, module):
    """Our float64 time-major layer of ``module`` (a cell's weights under ``_l0`` names)."""
    if isinstance(module, torch.nn.RNNCellBase):
        kind = {"LSTMCell": "lstm", "GRUCell": "gru"}.get(
            next(c.__name__ for c in type(module).__mro__ if c.__module__.startswith("torch.nn")), "rnn")
        state = {f"{k}_l0": v for k, v in module.state_dict().items()}
        return from_torch(state, kind=kind, nonlinearity=getattr(module, "nonlinearity", None))
    return from_torch(module, batch_first=False)


def _f64(t):
    import torch

    return t.detach().to("cpu", dtype=torch.float64).numpy().copy()


def _state_arrays(state):
    if state is None:
        return None
    return tuple(_f64(s) for s in state) if isinstance(state, (tuple, list)) else _f64(state)


def _keep_call(torch, module, args, kwargs, output) -> dict:
    """One call as time-major float64 arrays: x (T, N, I), h0, out (T, N, D*H), hn, lengths."""
    x = args[0] if args else kwargs.get("input")
    h0 = args[1] if len(args) > 1 else kwargs.get("hx")
    if isinstance(module, torch.nn.RNNCellBase):  # one step: (N, I) -> (N, H) (or unbatched (I,))
        out, hn = (output[0], output) if isinstance(output, tuple) else (output, output)
        one = x.dim() == 1

        def lift(t):  # (N, H) or (H,) -> (1, N, H)
            t = _f64(t)
            return t[None, None] if one else t[None]
        h0 = None if h0 is None else (tuple(lift(s) for s in h0) if isinstance(h0, (tuple, list)) else lift(h0))
        hn = tuple(lift(s) for s in hn) if isinstance(hn, tuple) else lift(hn)
        return {"x": lift(x), "h0": h0, "out": lift(out), "hn": hn, "lengths": None}
    out, hn = output
    lengths = None
    if isinstance(x, torch.nn.utils.rnn.PackedSequence):
        from torch.nn.utils.rnn import pad_packed_sequence

        x, lens = pad_packed_sequence(x, batch_first=False)
        out, _ = pad_packed_sequence(out, batch_first=False, total_length=x.shape[0])
        lengths = lens.numpy().astype(np.int64)
    elif getattr(module, "batch_first", False) and x.dim() == 3:
        x, out = x.transpose(0, 1), out.transpose(0, 1)
    x, out, h0, hn = _f64(x), _f64(out), _state_arrays(h0), _state_arrays(hn)
    if x.ndim == 2:  # unbatched (T, I): one sequence
        x, out = x[:, None], out[:, None]
        h0 = None if h0 is None else (tuple(s[:, None] for s in h0) if isinstance(h0, tuple) else h0[:, None])
        hn = tuple(s[:, None] for s in hn) if isinstance(hn, tuple) else hn[:, None]
    return {"x": x, "h0": h0, "out": out, "hn": hn, "lengths": lengths}


def _carries(prev: dict, call: dict, layer) -> bool:
    """Whether ``call`` starts from exactly the state ``prev`` ended in (so they join in time)."""
    if layer.bidirectional or prev["lengths"] is not None or call["lengths"] is not None or call["h0"] is None:
        return False
    a, b = prev["hn"], call["h0"]
    a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
    return len(a) == len(b) and all(u.shape == v.shape and np.array_equal(u, v) for u, v in zip(a, b))


def _rel(ours, theirs) -> float:
    scale = float(np.abs(theirs).max()) if theirs.size else 0.0
    diff = float(np.abs(ours - theirs).max()) if theirs.size else 0.0
    return diff / scale if scale > 0 else diff


def _label(path: str, calls: tuple, total: int) -> str:
    if total == len(calls):
        return path
    return f"{path}[call {calls[0] + 1}]" if len(calls) == 1 else f"{path}[calls {calls[0] + 1}-{calls[-1] + 1}]"


def _recompute(path, module, layer, run: list, calls: tuple, total: int, tol) -> RecoveredRNN:
    """Our layer on the joined calls ``run``, held to the module's outputs and final state."""
    from hiddenstate.interop.families.hooks import tolerance  # the families' registry loads only when needed

    x = np.concatenate([c["x"] for c in run])
    theirs = np.concatenate([c["out"] for c in run])
    first, last = run[0], run[-1]
    if x.shape[-1] != layer.input_size or theirs.shape[:2] != x.shape[:2]:
        raise ValueError(f"{path}'s hooked input must have shape (T, N, I={layer.input_size}) and its output (T, N, "
                         f"...); got {shape_str(x.shape)} and {shape_str(theirs.shape)}.")
    ours, hn, _ = layer.forward(x, first["h0"], lengths=first["lengths"], need_cache=False)
    pairs = [(ours, theirs)] + list(zip(hn if isinstance(hn, tuple) else (hn,),
                                        last["hn"] if isinstance(last["hn"], tuple) else (last["hn"],)))
    err = max(_rel(a, b) for a, b in pairs)
    dtype = str(next(module.parameters()).dtype).replace("torch.", "")
    bound = tolerance(next(module.parameters()).dtype) if tol is None else tol
    name = _label(path, calls, total)
    if not err <= bound:
        raise ValueError(f"{name or 'the model'} ({type(module).__name__}) recomputed by our {type(layer).__name__} "
                         f"differs from the module's own output by {err:.3g} of its largest value, above the tolerance "
                         f"{bound:.3g} for a {dtype} module: not analysed. Check that the module is a plain torch "
                         f"{type(layer).__name__} (a subclass that changes forward is not one), or pass a larger tol.")
    cls = type(module)
    return RecoveredRNN(name=name, path=path, module_class=f"{cls.__module__}.{cls.__name__}", layer=layer, x=x,
                        h0=first["h0"], lengths=first["lengths"], output=ours, calls=calls, error=err,
                        tolerance=bound, dtype=dtype, batch_first=bool(getattr(module, "batch_first", False)))


def recompute_rnns(model, *args, method=None, tol=None, **kwargs) -> RNNsInside:
    """Run a torch model and recompute every ``torch.nn.RNN/GRU/LSTM`` (and cell) inside it with our layers.

    Parameters
    ----------
    model : torch.nn.Module
        Any model holding recurrent modules (:func:`find_rnns`); run in eval mode under
        ``torch.no_grad()`` (its mode is restored and its hooks removed whatever happens).
    *args, **kwargs
        What the model is called with: ``model(*args, **kwargs)`` (e.g. a transformers model's
        ``input_values=...``).
    method : callable, optional
        Called with ``*args, **kwargs`` instead of ``model`` itself, e.g. ``model.generate``
        for a decoder that steps token by token.
    tol : float, optional
        The largest relative error a module may have (finite, >= 0); default
        :func:`hiddenstate.interop.families.tolerance` of each module's dtype.

    Returns
    -------
    RNNsInside
        ``rnns``: one :class:`RecoveredRNN` per module, or per run of calls that carry their state
        (module docstring); ``skipped``: modules not recomputed and why.

    Raises
    ------
    TypeError
        ``model`` is not a torch module; ``method`` is not callable; ``tol`` not a number.
    ValueError
        ``model`` holds no recurrent module, or none that could be recomputed (the reasons
        named: an LSTM with ``proj_size``, never called, ...); ``tol`` negative or not finite;
        a module whose recomputation differs from its own output by more than the tolerance
        (named, with the figure).
    """
    torch = _torch()
    found = find_rnns(model)
    if method is not None and not callable(method):
        raise TypeError(f"method must be callable (e.g. model.generate) or None; got {type(method).__name__}.")
    tol = None if tol is None else real("tol", tol, low=0.0)
    if not found:
        raise ValueError(f"model must hold a torch.nn.RNN, GRU, LSTM or RNN cell to recompute; got a "
                         f"{type(model).__name__} that holds none.")
    layers, skipped = {}, {}
    for path, module in found:
        try:
            layers[path] = _our_layer(torch, module)
        except (ValueError, TypeError) as error:
            skipped[path] = f"{type(module).__name__} not recomputed: {error}"
    seen = {path: [] for path in layers}

    def hook(path):
        def keep(module, a, kw, output):
            seen[path].append(_keep_call(torch, module, a, kw, output))
        return keep

    modules = dict(found)
    handles, training = [], model.training
    try:
        handles = [modules[p].register_forward_hook(hook(p), with_kwargs=True) for p in layers]
        model.eval()
        with torch.no_grad():
            (method or model)(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
        model.train(training)
    rnns = []
    for path, layer in layers.items():
        got = seen[path]
        if not got:
            skipped[path] = f"{type(modules[path]).__name__} not called by the model's forward pass on these inputs"
            continue
        start = 0
        for k in range(1, len(got) + 1):
            if k == len(got) or not _carries(got[k - 1], got[k], layer):
                rnns.append(_recompute(path, modules[path], layer, got[start:k], tuple(range(start, k)), len(got), tol))
                start = k
    if not rnns:
        raise ValueError(f"model must hold a recurrent module hiddenstate can recompute; got a {type(model).__name__} "
                         f"whose {len(found)} are skipped: " + "; ".join(f"{p or 'model'}: {r}" for p, r in skipped.items()))
    return RNNsInside(model=type(model).__name__, rnns=tuple(rnns), calls={p: len(v) for p, v in seen.items()},
                      skipped=skipped)
