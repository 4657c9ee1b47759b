"""Interventions in a transformers model of a registered family: the edited layer's output replaced through its hook.

Two runs of the model itself (``torch.no_grad()``, ``use_cache=False``, eval mode; its mode and
hooks are restored whatever happens): the clean run, whose logits are ``clean_logits`` and whose
hooks keep each edited mixer's input (for ``mean``'s reference states), and the edited run, where
a forward hook on each edited mixer recomputes that layer from the input it is given with our
block (:func:`~hiddenstate.edit.blocks.run_edited`, float64: a clean chain and an edited chain of
the same segments) and returns in place of the mixer's output::

    output="delta" (default):  theirs + (ours_edited - ours_clean)      cast to the model's dtype
    output="ours":             ours_edited

so attention, MLP, MoE and every later recurrent layer run as the model's own code and see the
change. With ``"delta"`` the outputs at positions <= the first edited step are the model's own bit
for bit (the difference is exactly 0 there; a float32 value round-trips through float64), and a
null edit (scale 1, add 0) returns the model's own logits exactly; the edit's effect is the exact
float64 difference of our two chains. ``"ours"`` is our recomputation throughout (the model's
output to round-off, :func:`~hiddenstate.interop.families.hooks.tolerance`). Either way our clean
recomputation is held to the model's own output in the edited run, layer by layer, and a layer
above the tolerance is refused, as :func:`~hiddenstate.interop.families.hooks.recompute_layers`
does.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.edit.blocks import check_edits_for, run_edited
from hiddenstate.edit.result import EditRun, check_target
from hiddenstate.edit.sources import group_by_layer, source_states, target_of
from hiddenstate.interop.families.hooks import tolerance
from hiddenstate.interop.families.registry import family_of
from hiddenstate.kinds import get_kind

__all__ = ["ids_tensor", "intervene_family", "run_model", "vocab_of"]


def vocab_of(model) -> int | None:
    """The model's vocabulary size V (its text config's for a multimodal model), or None if it names none.

    Parameters
    ----------
    model : transformers model

    Returns
    -------
    int or None
    """
    cfg = model.config
    V = getattr(cfg, "vocab_size", None)
    if V is None and callable(getattr(cfg, "get_text_config", None)):  # a multimodal model: its text config's
        V = getattr(cfg.get_text_config(), "vocab_size", None)
    return V


def ids_tensor(model, ids, name="ids"):
    """``ids`` as an int64 torch tensor (N, T) on the model's device, checked against its vocabulary.

    Parameters
    ----------
    model : transformers model
    ids : array_like of int or torch.Tensor, shape (N, T) or (T,)
    name : str, default "ids"
        What the messages call ``ids``.

    Returns
    -------
    torch.Tensor of int64, shape (N, T)

    Raises
    ------
    TypeError, ValueError
        Not integers, not (N, T) with N, T >= 1, outside [0, V).
    """
    import torch

    arr = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    if arr.dtype == bool or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integer token ids of shape (N, T) or (T,); got dtype {arr.dtype}.")
    arr = arr[None] if arr.ndim == 1 else arr
    if arr.ndim != 2 or 0 in arr.shape:
        raise ValueError(f"{name} must have shape (N, T) with N, T >= 1 (or (T,)); got shape {np.shape(ids)}.")
    V = vocab_of(model)
    if V is not None and (arr.min() < 0 or arr.max() >= V):
        raise ValueError(f"{name} must lie in [0, vocab_size={V}); got values in [{arr.min()}, {arr.max()}].")
    return torch.as_tensor(arr.astype(np.int64), device=next(model.parameters()).device)


def run_model(model, ids, hooks: dict) -> np.ndarray:
    """The model's logits (N, T, V) as float64, with ``hooks`` {module: hook} registered for the call only.

    ``torch.no_grad()``, ``use_cache=False``, eval mode; the model's mode is restored and the
    hooks (forward hooks with kwargs) removed whatever happens.

    Parameters
    ----------
    model : transformers model
    ids : torch.Tensor of int64, shape (N, T)
    hooks : dict of torch.nn.Module to callable

    Returns
    -------
    ndarray of shape (N, T, V), float64
    """
    import torch

    handles, training = [], model.training
    try:
        for module, hook in hooks.items():
            handles.append(module.register_forward_hook(hook, with_kwargs=True))
        model.eval()
        with torch.no_grad():
            logits = family_of(model).logits(model, ids)
    finally:
        for h in handles:
            h.remove()
        model.train(training)
    return logits.detach().cpu().double().numpy()


def _capture(family, mixers, layers, seen):
    def hook(i):
        def keep(module, args, kwargs, output):
            got = family.hooked(args, kwargs, output)
            u, out, extra = got if len(got) == 3 else (*got, {})
            seen.setdefault(i, []).append((u.detach().cpu().double().numpy(), extra))
        return keep
    return {mixers[i]: hook(i) for i in layers}


def _clean_states(kind, blk, u, extra) -> dict:
    _, rec = kind.run(blk, u, **extra)
    return {k: np.asarray(v, dtype=np.float64) for k, v in kind.states(rec).items()}


def _once(seen, i, name):
    if len(seen.get(i, ())) != 1:
        raise ValueError(f"layer {i} ({name}) must run once in the model's forward pass to be edited; it ran "
                         f"{len(seen.get(i, ()))} times.")
    return seen[i][0]


def intervene_family(model, ids, edits, *, target=None, output="delta") -> EditRun:
    """Run a transformers model of a registered family on ``ids`` with ``edits`` of its recurrent states.

    Parameters
    ----------
    model : transformers model of a registered family
    ids : array_like of int or torch.Tensor, shape (N, T) or (T,)
    edits : list of StateEdit
        ``layer`` a recurrent layer of the model's layer map.
    target : array_like of int, shape (N, T), optional
        Token ids whose probabilities :class:`EditRun` reads.
    output : {"delta", "ours"}, default "delta"
        What replaces the mixer's output (module docstring).

    Returns
    -------
    EditRun

    Raises
    ------
    TypeError
        A model of no registered family; ids that are not integers; edits that are not StateEdits.
    ValueError
        A layer that is not recurrent (naming its role); a step or until at or past T; a part,
        heads, channels or value the layer's state does not fit; a source of another model or
        shape; a layer whose recomputation leaves the tolerance; an unknown ``output``.
    """
    family = family_of(model)
    if output not in ("delta", "ours"):
        raise ValueError(f"output must be 'delta' or 'ours'; got {output!r:.60}.")
    by_layer = group_by_layer(edits)
    layer_map = family.layer_map(model)
    roles = {e.index: e.role for e in layer_map}
    names = {e.index: e.class_name for e in layer_map}
    recurrent = [e.index for e in layer_map if e.role == "recurrent"]
    for i in by_layer:
        if roles.get(i) != "recurrent":
            raise ValueError(f"layer must be a recurrent layer of this {family.name} model, {recurrent}; got {i} "
                             f"({roles.get(i, 'no such layer')}).")
    ids_t = ids_tensor(model, ids)
    N, T = ids_t.shape
    target = check_target(target, N, T, vocab_of(model) or 2 ** 62)
    kind = get_kind(family.kind)
    mixers = family.mixers(model)
    blocks = {i: family.convert(mixers[i], model.config) for i in by_layer}
    for i, es in by_layer.items():
        for e in es:
            if e.until >= T:
                what = "step" if e.step >= T else "until"
                raise ValueError(f"{what} must lie in [0, T={T}) (a position of the ids); got {getattr(e, what)} in "
                                 f"{e!r}.")
        check_edits_for(family.kind, blocks[i], es, N)

    seen: dict = {}
    clean_logits = run_model(model, ids_t, _capture(family, mixers, list(by_layer), seen))
    clean = {i: _clean_states(kind, blocks[i], *_once(seen, i, names[i])) for i in by_layer}

    def run_ids(i):
        def states(src):
            got: dict = {}
            run_model(model, ids_tensor(model, src, 'source'), _capture(family, mixers, [i], got))
            return _clean_states(kind, blocks[i], *_once(got, i, names[i]))
        return states

    shapes = {i: {f: v.shape[2:] for f, v in clean[i].items()} for i in by_layer}
    targets = {i: [target_of(e, N, clean[i], source_states(e, family.name, shapes[i], run_ids(i))) for e in es]
               for i, es in by_layer.items()}
    tol = tolerance(next(mixers[min(by_layer)].parameters()).dtype)
    done: dict = {}

    def replace(i):
        def hook(module, args, kwargs, out):
            import torch

            got = family.hooked(args, kwargs, out)
            u, theirs, extra = got if len(got) == 3 else (*got, {})
            br = run_edited(family.kind, blocks[i], u.detach().cpu().double().numpy(), by_layer[i],
                            targets=targets[i], forward=extra)
            own = theirs.detach().cpu().double().numpy()
            scale = float(np.abs(own).max())
            err = float(np.abs(br.clean_out - own).max()) / scale if scale > 0 else float(np.abs(br.clean_out).max())
            done.setdefault(i, []).append((br, err))
            new = own + (br.out - br.clean_out) if output == "delta" else br.out
            new = torch.as_tensor(np.ascontiguousarray(new), device=theirs.device).to(theirs.dtype).contiguous()
            return family.rebuild(out, new)
        return hook

    logits = run_model(model, ids_t, {mixers[i]: replace(i) for i in by_layer})
    errors = {}
    for i in by_layer:
        if len(done.get(i, ())) != 1:
            raise ValueError(f"layer {i} ({names[i]}) must run once in the model's forward pass to be edited; it ran "
                             f"{len(done.get(i, ()))} times.")
        errors[i] = done[i][0][1]
        if not errors[i] <= tol:
            raise ValueError(f"layer {i} ({names[i]}) recomputed by our {type(blocks[i]).__name__} block differs from "
                             f"the model's own output by {errors[i]:.3g} of its largest value, above the tolerance "
                             f"{tol:.3g}: the edit is not applied. The {family.name} family's to_block misses part of "
                             f"what the mixer computes.")
    return EditRun(logits=logits, clean_logits=clean_logits, states={i: done[i][0][0].states for i in by_layer},
                   clean_states=clean, edits=tuple(e for es in by_layer.values() for e in es), model=family.name,
                   errors=errors, target=target)
