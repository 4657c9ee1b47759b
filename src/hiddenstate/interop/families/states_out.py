"""Every step's states of a transformers model's recurrent layers, out and fast: :func:`record_states`.

:func:`~hiddenstate.interop.families.hooks.recompute_layers` runs the model and then recomputes
each recurrent layer in float64 with everything recorded (gates, readouts, selective
parameters): what the analyses need, and several times the model's own time and memory. When
what is wanted is the states themselves (to save, probe or compare), :func:`record_states` takes
the short way, in two passes:

1. **The proof, on a prefix.** The model runs on the first ``check_steps`` tokens (default 64)
   with a forward hook on each chosen mixer, and our kernel (the kind's ``stream``,
   :mod:`hiddenstate.kinds.stream`, in the dtype asked) recomputes each hooked layer from the
   input the model gave it. Its output is held to the mixer's own within
   :func:`~hiddenstate.interop.families.hooks.tolerance` of the model's dtype. For a kind with a
   skip term (Mamba's and Mamba-2's ``D x``) the state's part must be seen too
   (:mod:`hiddenstate.kinds.agreement`): our kernel runs again without the skip term, and where a
   tenth of what is left (the state's part of the output) would hide under the tolerance of the
   whole output, the model's mixer runs again with ``D`` set to 0 and the two state parts are
   held to each other. A layer that fails is refused before anything else runs; the model stops
   after the last chosen layer.
2. **The states, on the whole input.** The model runs once more with each chosen mixer's
   ``forward`` replaced by our kernel: it computes the layer's output (handed on to the rest of
   the model in the model's dtype) and every step's state, which go straight into arrays of the
   kept steps and heads only (a :class:`~hiddenstate.kinds.stream.StateSink`), allocated once.
   The model stops after the last chosen layer (nothing above it is needed). The mixers are
   restored whatever happens.

So the states are those our kernel computes from the inputs the layers received (round-off
apart, the model's: each layer's output differs from the mixer's own by about one rounding of
the dtype, as the check on the prefix measured). In float32 the kernel computes in float32; in
float64 in float64 (a float32 model's states then carry only the model's own round-off).
Kinds without a streamed run (RG-LRU, lightning, short convolutions, mLSTM, RWKV, CCA) take
:func:`~hiddenstate.interop.families.hooks.recompute_layers` (every step proven against the
model) and have their states cut out of its records: the same result, at its cost.

**Memory.** The kept states (``S x N x`` the chosen heads' entries, in ``dtype``) plus one
layer's run: the hooked input and the kernel's scratch, measured as for the records
(:func:`stream_bytes`, the slope between a 64- and a 192-step run under :mod:`tracemalloc`),
checked against ``max_bytes`` before the model runs.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.core.resources import format_bytes, traced_peak
from hiddenstate.core.validation import positive_int, real
from hiddenstate.interop.families.hooks import (
    MAX_BYTES,
    chosen_layers,
    host_array,
    kept_steps,
    model_ids,
    recompute_layers,
    relative_error,
    run_without,
    skip_params,
    tolerance,
    zeroed_block,
)
from hiddenstate.interop.families.registry import family_of
from hiddenstate.kinds import get_kind
from hiddenstate.kinds.agreement import SEE_FRACTION
from hiddenstate.kinds.stream import StateSink, pick

__all__ = ["CHECK_STEPS", "record_states", "stream_bytes"]

#: Steps of the prefix each layer's kernel is proven on against the model: what it proves is the mapping of the
#: mixer's weights and variant onto our kernel (every step runs the same code; the streams themselves are held to
#: the blocks' recorded runs at every step in tests/test_*_stream.py).
CHECK_STEPS = 64


class _Done(Exception):
    """Raised by the last chosen layer: the rest of the model's forward pass is not needed."""


def _dtype(dtype):
    try:
        name = np.dtype(dtype).name
    except (TypeError, ValueError):
        name = repr(dtype)
    if name not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64' (the states' dtype, and the one the kernel computes "
                         f"in); got {dtype!r:.40}.")
    return np.dtype(name)


def stream_bytes(kind, blk, dtype) -> tuple:
    """What a streamed run of one layer holds beyond its kept states, a step of one sequence, and fixed.

    Parameters
    ----------
    kind : Kind
        With a ``stream``.
    blk : block of the kind
    dtype : numpy dtype

    Returns
    -------
    (int, int)
        Bytes a step (the slope between a 64- and a 192-step run without a sink, measured with
        :mod:`tracemalloc`) and the fixed part (>= 0).
    """
    stream = kind.streamer()
    rng = np.random.default_rng(0)
    _, low = traced_peak(stream, blk, rng.normal(size=(1, 64, blk.d_model)).astype(dtype))
    _, high = traced_peak(stream, blk, rng.normal(size=(1, 192, blk.d_model)).astype(dtype))
    step = max(high - low, 0) // 128
    return step, max(low - 64 * step, 0)


def _check_cap(family, chosen, held: dict, run: dict, T: int, N: int, S: int, dtype, max_bytes) -> None:
    """Refuse, before the model runs, kept states and one layer's run that exceed ``max_bytes``."""
    total = sum(held.values()) + max(run.values())
    if total > max_bytes:
        raise ValueError(f"max_bytes ({format_bytes(max_bytes)}) must cover the states: layers {list(chosen)} of this "
                         f"{family.name} model on T={T:,} steps of N={N} sequence(s) would take about "
                         f"{format_bytes(total)}: the kept states ({S:,} step(s) in {dtype.name}) "
                         f"{format_bytes(sum(held.values()))}, one layer's run (its input and the kernel's scratch, "
                         f"every step) {format_bytes(max(run.values()))}. Keep fewer layers, steps (a window, a "
                         "stride), heads or states, give fewer tokens, or raise max_bytes.")


def _state_shapes(kind, blk) -> dict:
    """Per state name, its shape after (T, N): one step of the stream, every state kept."""
    sink = StateSink(1, 1, slice(0, 1), np.float64)
    kind.streamer()(blk, np.zeros((1, 1, blk.d_model)), sink)
    return {k: v.shape[2:] for k, v in sink.arrays.items()}


def _heads(heads, names, shapes: dict, layer: int) -> dict:
    """``heads`` checked against every kept state's first axis: {name: index array} (empty without heads)."""
    if heads is None:
        return {}
    return {n: pick(heads, shapes[n][0] if shapes[n] else 0, f"layer {layer}'s {n!r} state, shape {shapes[n]}")
            for n in names}


def _names(states, shapes: dict, layer: int) -> tuple:
    if states is None:
        return tuple(shapes)
    items = [states] if isinstance(states, str) else list(states)
    bad = [s for s in items if s not in shapes]
    if bad or not items or not all(isinstance(s, str) for s in items):
        raise ValueError(f"states must name states of layer {layer}, {sorted(shapes)}; got {list(items)!r:.80}.")
    return tuple(dict.fromkeys(items))


def _fallback(model, ids, chosen, keep, dtype, heads, states, max_bytes, echo):
    """Kinds without a streamed run: the states cut out of :func:`recompute_layers`' records."""
    from hiddenstate.interop.states_file import SavedStates

    N, T = ids.shape
    family = family_of(model)
    kind, mixers = get_kind(family.kind), family.mixers(model)
    for i in chosen:  # heads and states checked before the model runs: one step of each layer's block
        blk = family.convert(mixers[i], model.config)
        _, rec = kind.run(blk, np.zeros((1, 1, blk.d_model)))
        shapes = {k: v.shape[2:] for k, v in kind.states(rec).items()}
        _heads(heads, _names(states, shapes, i), shapes, i)
    window = None if (keep.start, keep.stop) == (0, T) else (keep.start, keep.stop)
    got = recompute_layers(model, ids, layers=list(chosen), max_bytes=max_bytes, record_dtype=dtype.name,
                           window=window, stride=keep.step, echo=echo)
    kind = get_kind(got.family.kind)
    out = {}
    for i, rec in zip(got.layers, got.records):
        full = kind.states(rec)
        shapes = {k: v.shape[2:] for k, v in full.items()}
        names = _names(states, shapes, i)
        idx = _heads(heads, names, shapes, i)
        out[i] = {n: np.ascontiguousarray(full[n] if n not in idx else full[n][:, :, idx[n]], dtype=dtype)
                  for n in names}
    steps = np.arange(T, dtype=np.int64)[keep]
    return SavedStates(states=out, steps=steps, heads=None if heads is None else tuple(int(h) for h in heads),
                       model=got.family.name, kind=kind.name,
                       errors={i: {"output": float(e), "state_part": e.state_error, "state_size": None}
                               for i, e in zip(got.layers, got.errors)},
                       checked_steps=T, dtype=dtype.name)


def _capture(family, kind, blocks, mixers, chosen, skips, dtype, tol, seen):
    """Forward hooks that hold each chosen layer's kernel to the mixer's output as the prefix runs (``_check``).

    The kernel runs on the input the mixer got; for a kind with a skip term our kernel runs again
    without it (in float32: only the state part's size is wanted) and, where a tenth of that part
    would hide under the tolerance of the whole output, the model's mixer and our kernel run
    without it too and are held to each other.
    """
    stream, last = kind.streamer(), max(chosen)

    def hook(index):
        def keep(module, args, kwargs, output):
            got = family.hooked(args, kwargs, output)
            u, theirs = host_array(got[0]), host_array(got[1])
            x = np.ascontiguousarray(u, dtype=dtype)
            err, state_err, part = relative_error(stream(blocks[index], x), theirs), None, None
            if skips[index] and len(got) == 2:
                twin = zeroed_block(blocks[index], skips[index])
                scale = float(np.abs(theirs).max())
                mine = stream(twin, x.astype(np.float32, copy=False))  # in the dtype asked where that is float32
                part = float(np.abs(mine).max()) / scale if scale > 0 else 0.0
                if not SEE_FRACTION * part > tol:  # the whole output's check cannot see the state: hold it alone
                    alone = host_array(family.hooked(args, kwargs, run_without(module, skips[index], args, kwargs))[1])
                    state_err = relative_error(mine if x.dtype == np.float32 else stream(twin, x), alone)
            seen[index].append((err, state_err, part, output, got[2] if len(got) == 3 else {}))
            if index == last:
                raise _Done
        return keep

    return {i: mixers[i].register_forward_hook(hook(i), with_kwargs=True) for i in chosen}


def _forward(family, model, ids):
    """The model's forward pass in eval mode without gradients, stopped by :class:`_Done`; its mode restored."""
    import torch

    training = model.training
    try:
        model.eval()
        with torch.no_grad():
            family.forward(model, ids)
    except _Done:
        pass
    finally:
        model.train(training)


def _check(family, model, kind, blocks, mixers, chosen, ids, dtype, tol, why, names) -> tuple:
    """Step 1 of the module docstring: each chosen layer's kernel held to the mixer on the prefix ``ids``."""
    skips = {i: skip_params(mixers[i], kind.skip) for i in chosen}
    seen: dict = {i: [] for i in chosen}
    handles = _capture(family, kind, blocks, mixers, chosen, skips, dtype, tol, seen)
    try:
        _forward(family, model, ids)
    finally:
        for h in handles.values():
            h.remove()
    errors, outputs = {}, {}
    for i in chosen:
        if len(seen[i]) != 1:
            raise ValueError(f"layer {i} ({names[i]}) must run once in the model's forward pass to be recorded; it ran "
                             f"{len(seen[i])} times.")
        err, state_err, part, output, extra = seen[i].pop()
        if extra:
            raise ValueError(f"layer {i} ({names[i]}) must take its input alone to be streamed; its family's hook "
                             f"read {sorted(extra)} beside it.")
        what = f"layer {i} ({names[i]}) run by our {type(blocks[i]).__name__} kernel in {dtype.name} differs from the " \
               f"model's own"
        if not err <= tol:
            raise ValueError(f"{what} output on the first {ids.shape[1]} steps by {err:.3g} of its largest value, "
                             f"above the tolerance {tol:.3g}: no states recorded. {why}")
        if state_err is not None and not state_err <= tol:
            raise ValueError(f"{what} output with its skip term ({', '.join(skips[i])}) set to 0 in both on the "
                             f"first {ids.shape[1]} steps by {state_err:.3g} of its largest value, above the "
                             f"tolerance {tol:.3g}: the state part (the recurrence) disagrees, no states "
                             f"recorded. {why}")
        errors[i] = {"output": err, "state_part": state_err, "state_size": part}
        outputs[i] = output
    return errors, outputs


def _replaced(family, kind, blk, sink, output, dtype, calls: list, last: bool):
    """A mixer's ``forward`` replaced: our kernel on its input, the states to ``sink``, the output in the model's dtype."""
    import torch

    stream = kind.streamer()

    def forward(*args, **kwargs):
        u = args[0] if args else kwargs["hidden_states"]
        calls.append(tuple(u.shape))
        out = stream(blk, np.ascontiguousarray(host_array(u), dtype=dtype), sink)
        new = torch.as_tensor(out).to(device=u.device, dtype=u.dtype)
        result = family.rebuild(output, new)
        if last:
            raise _Done
        return result

    return forward


def record_states(model, ids, *, layers=None, heads=None, states=None, window=None, stride: int = 1,
                  dtype="float32", check_steps: int = CHECK_STEPS, max_bytes=MAX_BYTES, echo=None):
    """Every step's states of a transformers model's recurrent layers, proven on a prefix, then streamed out of one run.

    Parameters
    ----------
    model : transformers model of a registered family
        Any dtype (CPU or not: the kernels run on the host); run under ``torch.no_grad()`` in
        eval mode (its mode restored), its mixers restored whatever happens.
    ids : array_like of int or torch.Tensor, shape (N, T) or (T,)
        Token ids, as transformers takes them.
    layers : int or list of int, optional
        The recurrent layers to record (model indices; default all).
    heads : sequence of int, optional
        Indices kept along each kept state's first axis after (S, N): heads of a per-head or
        matrix state, channels of a diagonal one or of a convolution window (default all).
    states : str or sequence of str, optional
        The states kept, by the kind's names (``"ssm"``, ``"conv"``, ``"recurrent"``; default all).
    window : (int, int), optional
        ``(start, stop)``: keep the states after positions start to stop - 1 (default all;
        every step is still computed).
    stride : int, default 1
        Keep every ``stride``-th step of the window, from its first.
    dtype : {"float32", "float64"}, default "float32"
        The states' dtype and the one our kernel computes in.
    check_steps : int, default CHECK_STEPS (64)
        Steps of the prefix on which each layer is proven against the model (at most T; the kinds
        without a streamed kernel are proven on every step).
    max_bytes : int or None, default 4 GiB
        Refuse, before the model runs, a request whose estimate (the kept states and one layer's
        run, :func:`stream_bytes`) exceeds this (None: no cap).
    echo : callable, optional
        ``echo(line)`` is told each stage: the check, the run.

    Returns
    -------
    SavedStates
        ``states[layer][name]`` of shape (S, N, ...) in ``dtype`` (S kept steps; the state after
        reading the token at that position), ``steps`` (S,), ``heads``, ``model``, ``kind``,
        ``errors`` (per layer, on the prefix: ``"output"``, the kernel's error against the
        mixer's output; ``"state_size"``, the largest value of its output without the skip term
        relative to the whole output's, None for a kind without one; ``"state_part"``, the error of
        the two outputs without it where that part was too small for the whole output's check to
        see, else None), ``checked_steps``, ``dtype``; ``.save(path)`` writes the states file that
        :func:`hiddenstate.load_states` reads back.

    Raises
    ------
    TypeError
        ``model`` of no registered family; ids that are not integers; ``layers`` or ``heads``
        that are not ints; ``check_steps`` or ``stride`` not an int; ``max_bytes`` not a number.
    ValueError
        ids not (N, T) in [0, V); layers that are not recurrent; heads or states that the layers'
        states do not have; a window out of range; a dtype other than float32/float64; a request
        over ``max_bytes``; a layer whose kernel disagrees with the model on the prefix (naming
        the layer and the figure).
    """
    from hiddenstate.interop.states_file import SavedStates

    family = family_of(model)
    dtype = _dtype(dtype)
    check_steps = positive_int("check_steps", check_steps)
    if max_bytes is not None:
        max_bytes = real("max_bytes", max_bytes, low=0.0)
    layer_map = family.layer_map(model)
    chosen = chosen_layers(family, model, layer_map, layers)
    ids = model_ids(model, ids)
    N, T = ids.shape
    keep = kept_steps(T, window, stride)
    kind = get_kind(family.kind)
    if kind.stream is None:
        return _fallback(model, ids, chosen, keep, dtype, heads, states, max_bytes, echo)
    mixers = family.mixers(model)
    names = {e.index: e.class_name for e in layer_map}
    blocks = {i: family.convert(mixers[i], model.config) for i in chosen}
    shapes = {i: _state_shapes(kind, blocks[i]) for i in chosen}
    kept_names = {i: _names(states, shapes[i], i) for i in chosen}
    sinks = {i: StateSink(T, N, keep, dtype, _heads(heads, kept_names[i], shapes[i], i), kept_names[i]) for i in chosen}
    S = sinks[chosen[0]].steps.size
    if max_bytes is not None:  # the kept states of every layer; one layer's run at a time (input, kernel's scratch)
        held, run = {}, {}
        for i in chosen:
            step, fixed = stream_bytes(kind, blocks[i], dtype)
            held[i] = N * S * sinks[i].nbytes_per_step({n: shapes[i][n] for n in kept_names[i]})
            run[i] = N * T * (step + 2 * blocks[i].d_model * 8) + fixed
        _check_cap(family, chosen, held, run, T, N, S, dtype, max_bytes)
    param_dtype = next(mixers[chosen[0]].parameters()).dtype
    tol = tolerance(param_dtype)
    why = f"The {family.name} family's to_block misses part of what the mixer computes."
    K = min(check_steps, T)
    if echo is not None:
        echo(f"checking our kernel against the model's own {len(chosen)} recurrent layer(s) on the first {K} of "
             f"{T:,} steps")
    errors, outputs = _check(family, model, kind, blocks, mixers, chosen, ids[:, :K], dtype, tol, why, names)
    calls: dict = {i: [] for i in chosen}
    saved = {i: mixers[i].__dict__.get("forward") for i in chosen}
    if echo is not None:
        echo(f"the {type(model).__name__}'s forward pass on N={N} x T={T:,} tokens with our kernels in "
             f"{len(chosen)} recurrent layer(s), {S:,} step(s) kept in {dtype.name}")
    try:
        for i in chosen:
            mixers[i].forward = _replaced(family, kind, blocks[i], sinks[i], outputs[i], dtype, calls[i],
                                          i == max(chosen))
        _forward(family, model, ids)
    finally:
        for i in chosen:
            if saved[i] is None:
                mixers[i].__dict__.pop("forward", None)
            else:
                mixers[i].forward = saved[i]
    for i in chosen:
        if len(calls[i]) != 1:
            raise ValueError(f"layer {i} ({names[i]}) must run once in the model's forward pass to be recorded; it ran "
                             f"{len(calls[i])} times.")
    return SavedStates(states={i: {n: sinks[i].arrays[n] for n in kept_names[i]} for i in chosen},
                       steps=sinks[chosen[0]].steps.copy(),
                       heads=None if heads is None else tuple(int(h) for h in heads), model=family.name,
                       kind=kind.name, errors=errors, checked_steps=K, dtype=dtype.name)

