"""Does a model's cache carry its recurrent state right? :func:`check_cache` holds every cached path to the full forward.

For a transformers model of a registered family and token ids (N, T), the full forward
(``use_cache=False``, one call) is the reference, and these paths run the same ids through the
model's cache (:func:`~hiddenstate.keep.cache_paths.run_path`, each call carrying the cache the
last returned, ``position_ids`` passed wherever ``forward`` takes them):

* ``split@s`` for each split point s: a prefill of ids[:, :s], then ids[:, s:] in one cached call
  (a multi-token cached forward);
* ``decode``: a prefill of the first split, then one token a call;
* ``chunked``: a prefill in ``chunks`` near-equal consecutive calls;
* ``padded``: one cached call on a right-padded batch with its ``attention_mask`` (the ids' rows,
  and the same rows cut at the middle split and right-padded with the model's ``pad_token_id``;
  or the ids as given with the ``attention_mask`` given), compared at the real positions only.

Per path, per recurrent layer, at each step t (relative to the scale of the full forward's value,
``err = max |path - full| / max |full|``, the max over the batch and the feature axes; the scale
over all steps):

* ``output_errors[t]``: the mixer's output at step t on this path against the full forward's;
* ``state_errors[t]``: the layer's state after step t, recomputed exactly by our block (float64,
  :attr:`Family.to_block`) from the inputs the mixer received along this path, against the same
  from the full forward's inputs (a layer whose input has left round-off shows here);
* ``cache_errors[s]``: the state the cache holds after each call (ending at step s), against the
  full forward's state after step s (:func:`~hiddenstate.keep.cache_paths.cache_states`; the
  families whose cache does not hold a field are not compared there).

A layer's ``first_step`` is the first step where any of the three leaves the tolerance; the
logits' ``logit_errors[t]`` are held to it too. The tolerance is the recomputation's per dtype
(:func:`~hiddenstate.interop.families.hooks.tolerance`: ``8 eps(dtype) + 1000 eps(float32)``,
1.2e-4 for float32 and float64 models, 8.0e-3 for float16, 6.3e-2 for bfloat16), relative to the
scale as above. Measured on the registered families' tiny float32 models (N = 2, T = 16), the
paths that agree stay within 3.0e-5 in every figure (Bamba's decoding; 19 of the 22 families whose
paths all agree within 1.4e-6), those that part are off by 3.6e-3 to 15 (the table in
docs/guides/cache-check.md). The same models in bfloat16 (float16) on the CPU: Mamba-2, Qwen3-Next and
LFM2 agree within 2.0e-2 (1.0e-3), Bamba's decoding parts at its layer 3 by 0.19 (0.026: its output,
its input in agreement; in float32 3.0e-5, in float64 5.3e-6).

A right-padded batch's cache holds, in every family of transformers 5.25, the state after the
row's pad tokens (0.3 to 3 off the state after its last real token), so the ``padded`` path
diverges everywhere (transformers #48256: left padding, or one call per row, is the remedy for a
recurrence). It runs when asked (``paths=[..., "padded"]``) or when an ``attention_mask`` is given;
the default paths are :data:`DEFAULT_PATHS`, whose verdict means something for every family.
"""

from __future__ import annotations

import numbers
import os
from dataclasses import dataclass, field

import numpy as np

from hiddenstate.interop.families.hooks import tolerance
from hiddenstate.interop.families.registry import family_of
from hiddenstate.keep.cache_paths import PathFailed, run_path
from hiddenstate.kinds import get_kind

__all__ = ["DEFAULT_PATHS", "PATHS", "CacheCheck", "LayerCheck", "PathCheck", "check_cache"]

#: The kinds of path :func:`check_cache` runs, in the order it runs (and reports) them.
PATHS = ("split", "decode", "chunked", "padded")
#: The paths run by default (``padded`` too when an ``attention_mask`` is given).
DEFAULT_PATHS = ("split", "decode", "chunked")


def _max(values) -> float:
    a = np.asarray(list(values), dtype=np.float64)
    a = a[np.isfinite(a)]
    return float(a.max()) if a.size else float("nan")


@dataclass(frozen=True)
class LayerCheck:
    """One recurrent layer on one path, against the full forward (each error relative to its scale).

    Attributes
    ----------
    layer : int
        The layer's index in the model's layer map.
    output_errors : ndarray of float64, shape (T,)
        The mixer's output at each step (NaN at a step no row of the path reaches).
    state_errors : ndarray of float64, shape (T,)
        The state after each step, our recomputation from the inputs the layer saw on this path.
    cache_errors : dict of int to float
        After each call, keyed by its last step: the state the cache holds (NaN: not held).
    first_step : int or None
        The first step where any of the three leaves the tolerance; None: it never does.
    """

    layer: int
    output_errors: np.ndarray
    state_errors: np.ndarray
    cache_errors: dict
    first_step: int | None

    @property
    def output_error(self) -> float:
        """The largest of :attr:`output_errors`."""
        return _max(self.output_errors)

    @property
    def state_error(self) -> float:
        """The largest of :attr:`state_errors`."""
        return _max(self.state_errors)

    @property
    def cache_error(self) -> float:
        """The largest of :attr:`cache_errors` (NaN where the cache's state was not read)."""
        return _max(self.cache_errors.values())


@dataclass(frozen=True)
class PathCheck:
    """One cached path against the full forward.

    Attributes
    ----------
    name : str
        ``"split@s"``, ``"decode"``, ``"chunked"`` or ``"padded"``.
    boundaries : tuple of int
        The calls' spans ``[b_j, b_{j+1})``.
    logit_errors : ndarray of float64, shape (T,)
        ``max |logits - full| / max |full logits|`` at each step (NaN after a failed call).
    layers : tuple of LayerCheck
        The recurrent layers, in model order (empty when the model raised).
    tolerance : float
    failure : str or None
        What the model raised on a call of this path (``"RuntimeError: ..."``), or None.
    failed_at : int or None
        The first step of that call.
    """

    name: str
    boundaries: tuple
    logit_errors: np.ndarray
    layers: tuple
    tolerance: float
    failure: str | None = None
    failed_at: int | None = None

    @property
    def logits_error(self) -> float:
        """The largest of :attr:`logit_errors`."""
        return _max(self.logit_errors)

    @property
    def first(self) -> tuple | None:
        """``(layer, step)`` where the path first leaves the tolerance (layer None: the logits alone, or a failed call)."""
        if self.failure is not None:
            return (None, self.failed_at)
        steps = [(c.first_step, c.layer) for c in self.layers if c.first_step is not None]
        over = np.flatnonzero(self.logit_errors > self.tolerance)
        if steps:
            t, layer = min(steps)
            return (layer, t) if not over.size or t <= over[0] else (None, int(over[0]))
        return (None, int(over[0])) if over.size else None

    @property
    def ok(self) -> bool:
        """Whether every figure of this path is within the tolerance and the model raised nothing."""
        return self.first is None


@dataclass(frozen=True)
class CacheCheck:
    """What :func:`check_cache` found: every path's figures, ``ok`` and the first divergence.

    Attributes
    ----------
    model : str
        The family's name.
    dtype : str
        The model's dtype.
    shape : (int, int)
        The ids' (N, T).
    tolerance : float
        The bound every relative error is held to.
    paths : tuple of PathCheck
        In the order run (:data:`PATHS`).
    """

    model: str
    dtype: str
    shape: tuple
    tolerance: float
    paths: tuple = field(default=())

    @property
    def ok(self) -> bool:
        """Whether every path agrees with the full forward."""
        return all(p.ok for p in self.paths)

    @property
    def first(self) -> tuple | None:
        """``(path, layer, step)`` of the first path (in run order) that diverges, or None: all agree."""
        for p in self.paths:
            if not p.ok:
                return (p.name, *p.first)
        return None

    def line(self) -> str:
        """One line: every path agrees, or where the first divergence is.

        Returns
        -------
        str
        """
        N, T = self.shape
        if self.ok:
            worst = _max(p.logits_error for p in self.paths)
            return (f"{self.model}: every cached path agrees with the full forward (N={N}, T={T}; logits within "
                    f"{worst:.2g} of their scale, tolerance {self.tolerance:.2g})")
        name, layer, step = self.first
        p = next(q for q in self.paths if q.name == name)
        if p.failure is not None:
            return f"{self.model}: the {name} path fails at step {step}: {p.failure}"
        where = f"layer {layer}, step {step}" if layer is not None else f"the logits at step {step}"
        return (f"{self.model}: the {name} path diverges first at {where}{_why(p, layer, step)} (logits "
                f"{p.logits_error:.2g} off the full forward's scale; tolerance {self.tolerance:.2g})")

    def __str__(self) -> str:
        N, T = self.shape
        parts = []
        for p in self.paths:
            if p.failure is not None:
                parts.append(f"{p.name} raises at step {p.failed_at} ({p.failure})")
                continue
            worst = max(p.layers, key=lambda c: max(c.output_error, c.state_error, np.nan_to_num(c.cache_error)),
                        default=None)
            text = f"{p.name} logits {p.logits_error:.2g}"
            if worst is not None:
                text += (f", worst layer {worst.layer} (output {worst.output_error:.2g}, state {worst.state_error:.2g}"
                         f", cache {worst.cache_error:.2g})")
            if not p.ok:
                layer, step = p.first
                text += f" -- diverges at {'layer ' + str(layer) + ', ' if layer is not None else ''}step {step}"
            parts.append(text)
        head = (f"Cache check of a {self.model} model ({self.dtype}, N={N}, T={T}), every figure relative to the full "
                f"forward's scale, tolerance {self.tolerance:.2g}: ")
        verdict = (" Every path agrees." if self.ok else
                   f" {sum(not p.ok for p in self.paths)} of {len(self.paths)} paths diverge; the first: "
                   f"{self.line().split(': ', 1)[1]}.")
        return head + "; ".join(parts) + "." + verdict


def _why(p: PathCheck, layer, step) -> str:
    """What left the tolerance first at (layer, step): its input, its output or the cache's state after a call."""
    if layer is None:
        return ": no recurrent layer's state or output leaves round-off before the logits do"
    c = next(c for c in p.layers if c.layer == layer)
    tol = p.tolerance
    if c.state_errors[step] > tol:
        return (f": its input already differs there ({c.state_errors[step]:.2g} in the state it leads to), so a "
                "layer below it that is not recurrent diverges first")
    if c.output_errors[step] > tol:
        return f": its output is {c.output_errors[step]:.2g} off with its input in agreement"
    if p.name == "padded":
        return (f": the state the cache holds for the rows whose last real token is step {step} (right-padded "
                f"after it) is {c.cache_errors[step]:.2g} off the full forward's state after that step")
    start = max(b for b in p.boundaries if b <= step)
    return (f": the state the cache holds after the call over steps [{start}, {step + 1}) is "
            f"{c.cache_errors[step]:.2g} off with its input in agreement")


def _rel(a, b, scale, axis):
    return np.abs(a - b).max(axis=axis) / scale if scale > 0 else np.abs(a - b).max(axis=axis)


def _step_errors(path, full, valid, scale):
    """(T,) errors of ``path`` (T, Nb, ...) or (Nb, T, ...) given time-major, NaN where no row is valid."""
    T = path.shape[0]
    d = np.abs(path - full).reshape(T, path.shape[1], -1).max(axis=2) / (scale if scale > 0 else 1.0)
    d = np.where(valid.T, d, -np.inf).max(axis=1)
    return np.where(np.isfinite(d), d, np.nan)


def _positive_ints(name, values, lo, hi):
    vals = list(values) if isinstance(values, (list, tuple, np.ndarray)) else [values]
    if not vals or any(isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in vals):
        raise TypeError(f"{name} must be an int or a list of ints; got {values!r:.80}.")
    bad = [int(v) for v in vals if not lo <= v <= hi]
    if bad:
        raise ValueError(f"{name} must lie in [{lo}, {hi}] (a prefix shorter than the ids' T={hi + 1}); got {bad}.")
    return sorted({int(v) for v in vals})


def _mask(attention_mask, shape):
    m = np.asarray(attention_mask)
    if m.shape != shape or m.dtype.kind not in "biu" or not np.isin(m, (0, 1)).all():
        values = np.unique(m)[:6].tolist() if m.dtype.kind in "biuf" else m.dtype
        raise ValueError(f"attention_mask must be 0s and 1s of the ids' shape {shape}; got shape {m.shape}, "
                         f"dtype {m.dtype}, values {values}.")
    lengths = m.sum(axis=1)
    right = (m == (np.arange(shape[1]) < lengths[:, None])).all()
    if not right or lengths.min() < 1:
        raise ValueError("attention_mask must mark right padding (each row 1s, then 0s, at least one 1); got rows "
                         f"of another pattern: {np.flatnonzero(~(m == (np.arange(shape[1]) < lengths[:, None])).all(1)).tolist()[:5] or 'an empty row'}.")
    return lengths.astype(int)


def _as_ids(model, ids):
    """``ids`` as an int64 torch tensor (N, T) on the model's device, checked against its vocabulary."""
    import torch

    arr = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    if arr.dtype == bool or arr.dtype.kind not in "iu":
        raise TypeError(f"ids must be integer token ids of shape (N, T) or (T,); got dtype {arr.dtype}.")
    arr = arr[None] if arr.ndim == 1 else arr
    if arr.ndim != 2 or 0 in arr.shape:
        raise ValueError(f"ids must have shape (N, T) with N, T >= 1 (or (T,)); got shape {np.shape(ids)}.")
    cfg = model.config
    cfg = cfg.get_text_config() if callable(getattr(cfg, "get_text_config", None)) else cfg
    V = getattr(cfg, "vocab_size", None)
    if V is not None and (arr.min() < 0 or arr.max() >= V):
        raise ValueError(f"ids must lie in [0, vocab_size={V}); got values in [{arr.min()}, {arr.max()}].")
    return torch.as_tensor(arr.astype(np.int64), device=next(model.parameters()).device)


def _pad_id(model):
    cfg = model.config
    cfg = cfg.get_text_config() if callable(getattr(cfg, "get_text_config", None)) else cfg
    pad = getattr(cfg, "pad_token_id", None)
    V = getattr(cfg, "vocab_size", None)
    return pad if isinstance(pad, numbers.Integral) and (V is None or 0 <= pad < V) else None


def _refuse_unmasked_padding(ids, pad):
    """Rows ending in runs of ``pad`` of different lengths (one at least 2) look right-padded: a mask is needed."""
    if pad is None or ids.shape[0] < 2:
        return
    runs = [int(np.argmax(row[::-1] != pad)) if (row != pad).any() else len(row) for row in ids]
    if max(runs) >= 2 and len(set(runs)) > 1:
        raise ValueError(f"attention_mask must be given for a right-padded batch: the ids' rows end in runs of "
                         f"pad_token_id={pad} of lengths {runs[:8]}. Pass attention_mask (N, T) with 1 on the real "
                         "tokens, or np.ones_like(ids) if the trailing pad tokens are real tokens.")


def check_cache(model, ids, *, splits=None, chunks: int | None = None, attention_mask=None,
                paths=None) -> CacheCheck:
    """Hold every cached path of a transformers model to its full forward, per recurrent layer and step.

    The paths and figures are the module's (:mod:`hiddenstate.keep.cache_check`); the model runs
    in eval mode under ``torch.no_grad()`` (its mode and hooks restored whatever happens).

    Parameters
    ----------
    model : transformers model of a registered family, or str or os.PathLike
        A directory is a ``save_pretrained`` directory, loaded offline
        (:func:`~hiddenstate.interop.families.directory.load_model_dir`).
    ids : array_like of int, shape (N, T) or (T,)
        Token ids in [0, vocab_size), T >= 2.
    splits : int or list of int, optional
        Prefix lengths s (1 <= s <= T - 1) of the ``split@s`` paths; default T//4, T//2 and
        3T//4 (those >= 1). The first is also the ``decode`` path's prefill, the middle the cut of
        the padded rows.
    chunks : int, optional
        The ``chunked`` path's number of calls (2 <= chunks <= T); default min(3, T).
    attention_mask : array_like of 0/1, shape (N, T), optional
        Right padding in ``ids`` (each row 1s then 0s): the ``padded`` path runs the ids with it
        and compares the real positions; the other paths run the ids as tokens. Without it, ids
        that look right-padded (rows ending in runs of ``pad_token_id`` of different lengths, one
        at least 2 long) are refused.
    paths : sequence of str, optional
        Which of ``"split"``, ``"decode"``, ``"chunked"``, ``"padded"`` to run; default
        :data:`DEFAULT_PATHS`, and ``"padded"`` too when ``attention_mask`` is given (a
        right-padded batch's cache holds the state after the pads in every family: asked for,
        not assumed).

    Returns
    -------
    CacheCheck
        Per path, per layer, per step relative errors, ``ok``, ``first`` (path, layer, step) and
        a one-paragraph ``str()``.

    Raises
    ------
    TypeError
        A model of no registered family; ids that are not integers; splits or chunks not ints.
    ValueError
        T < 2; ids out of the vocabulary; a split outside [1, T - 1] (a prefix as long as the ids
        or longer); chunks outside [2, T]; an unknown path; an attention_mask that is not right
        padding of the ids' shape; a right-padded batch without an attention_mask; a recurrent
        layer our block does not recompute to the tolerance.
    """
    import torch

    if isinstance(model, (str, os.PathLike)):
        from hiddenstate.interop.families.directory import load_model_dir

        model = load_model_dir(model)
    family = family_of(model)
    ids_t = _as_ids(model, ids)
    N, T = ids_t.shape
    if T < 2:
        raise ValueError(f"ids must have T >= 2 steps to be split between calls; got T={T}.")
    if paths is None:
        paths = DEFAULT_PATHS + (("padded",) if attention_mask is not None else ())
    bad = [p for p in (paths if isinstance(paths, (list, tuple)) else [paths]) if p not in PATHS]
    if bad or not paths:
        raise ValueError(f"paths must be a non-empty list of {', '.join(PATHS)}; got {paths!r:.80}.")
    splits = _positive_ints("splits", [s for s in {T // 4, T // 2, 3 * T // 4} if s >= 1] if splits is None
                            else splits, 1, T - 1)
    chunks = min(3, T) if chunks is None else chunks
    if isinstance(chunks, bool) or not isinstance(chunks, numbers.Integral):
        raise TypeError(f"chunks must be an int; got {type(chunks).__name__}.")
    if not 2 <= chunks <= T:
        raise ValueError(f"chunks must lie in [2, T={T}]; got {chunks}.")
    ids_np = ids_t.cpu().numpy()
    lengths = None if attention_mask is None else _mask(attention_mask, (N, T))
    if attention_mask is None:
        _refuse_unmasked_padding(ids_np, _pad_id(model))
    layers = [e.index for e in family.layer_map(model) if e.role == "recurrent"]
    kind = get_kind(family.kind)
    mixers = family.mixers(model)
    tol = tolerance(next(model.parameters()).dtype)
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            full_logits, full_hooked, _ = run_path(model, family, ids_t, [0, T], layers, use_cache=False)
            blocks = {i: family.convert(mixers[i], model.config) for i in layers}
            full = {}
            for i in layers:
                u, theirs, extra = full_hooked[i]
                ours, rec = kind.run(blocks[i], u, **extra)
                err = float(_rel(ours, theirs, np.abs(theirs).max(), None))
                if not err <= tol:
                    raise ValueError(f"layer {i} recomputed by our {type(blocks[i]).__name__} block differs from the "
                                     f"model's own output by {err:.3g} of its scale, above the tolerance {tol:.3g}: "
                                     f"its states cannot be checked. The {family.name} family's to_block misses part "
                                     "of what the mixer computes.")
                full[i] = (theirs, {f: np.asarray(v, dtype=np.float64) for f, v in kind.states(rec).items()})
            shapes = {i: {f: v.shape[1:] for f, v in full[i][1].items()} for i in layers}
            plans = _plans(paths, splits, chunks, T)
            out = []
            for name, bounds in plans:
                if name == "padded":
                    out.append(_padded(model, family, kind, blocks, ids_np, lengths, splits, full_logits, full,
                                       layers, tol, shapes))
                    continue
                out.append(_compare(model, family, kind, blocks, ids_t, name, bounds, full_logits, full, layers,
                                    tol, shapes, np.arange(N), np.full(N, T), None))
    finally:
        model.train(training)
    return CacheCheck(model=family.name, dtype=str(next(model.parameters()).dtype).replace("torch.", ""),
                      shape=(N, T), tolerance=tol, paths=tuple(out))


def _plans(paths, splits, chunks, T):
    plans = []
    if "split" in paths:
        plans += [(f"split@{s}", [0, s, T]) for s in splits]
    if "decode" in paths:
        plans.append(("decode", [0, *range(splits[0], T + 1)]))
    if "chunked" in paths:
        plans.append(("chunked", sorted({round(x) for x in np.linspace(0, T, chunks + 1)})))
    if "padded" in paths:
        plans.append(("padded", [0, T]))
    return plans


def _padded(model, family, kind, blocks, ids_np, lengths, splits, full_logits, full, layers, tol, shapes):
    import torch

    N, T = ids_np.shape
    if lengths is None:  # the rows, and the same rows cut at the middle split and right-padded
        cut = splits[len(splits) // 2]
        pad = _pad_id(model) or 0
        short = ids_np.copy()
        short[:, cut:] = pad
        batch, src = np.concatenate([ids_np, short]), np.concatenate([np.arange(N), np.arange(N)])
        lengths = np.concatenate([np.full(N, T), np.full(N, cut)])
    else:
        batch, src = ids_np, np.arange(N)
    mask = torch.as_tensor((np.arange(T) < lengths[:, None]).astype(np.int64), device=next(model.parameters()).device)
    ids_t = torch.as_tensor(batch, device=mask.device)
    return _compare(model, family, kind, blocks, ids_t, "padded", [0, T], full_logits, full, layers, tol, shapes,
                    src, lengths, mask)


def _compare(model, family, kind, blocks, ids_t, name, bounds, full_logits, full, layers, tol, shapes, src,
             lengths, mask) -> PathCheck:
    T = ids_t.shape[1]
    valid = np.arange(T)[None] < lengths[:, None]  # (Nb, T) the real positions of each row
    try:
        logits, hooked, cached = run_path(model, family, ids_t, bounds, layers, attention_mask=mask,
                                          shapes={i: {f: (len(src), *s[1:]) for f, s in shapes[i].items()}
                                                  for i in layers})
    except PathFailed as failed:
        return PathCheck(name=name, boundaries=tuple(bounds), logit_errors=np.full(T, np.nan), layers=(),
                         tolerance=tol, failure=str(failed), failed_at=failed.step)
    ref = full_logits[src]
    logit_errors = _step_errors(logits.swapaxes(0, 1), ref.swapaxes(0, 1), valid, np.abs(full_logits).max())
    checks = []
    for i in layers:
        theirs, states = full[i]
        u, out, extra = hooked[i]
        out_err = _step_errors(out.swapaxes(0, 1), theirs[src].swapaxes(0, 1), valid, np.abs(theirs).max())
        _, rec = kind.run(blocks[i], u, **extra)
        mine = {f: np.asarray(v, dtype=np.float64) for f, v in kind.states(rec).items()}
        state_err = np.max([_step_errors(mine[f], states[f][:, src], valid, np.abs(states[f]).max())
                            for f in states], axis=0)
        cache_err = {}
        for end, held in cached[i]:
            at = np.minimum(end, lengths - 1)  # each row's state after its last real step of this call
            for step in np.unique(at):
                rows = np.flatnonzero(at == step)
                errs = [float(np.abs(held[f][rows] - states[f][step, src[rows]]).max() / max(np.abs(states[f]).max(),
                                                                                             1e-300))
                        for f in states if held[f] is not None]
                cache_err[int(step)] = max(errs) if errs else float("nan")
        over = [int(np.flatnonzero(a > tol)[0]) for a in (out_err, state_err) if (a > tol).any()]
        over += [s for s, e in cache_err.items() if e > tol]
        checks.append(LayerCheck(layer=i, output_errors=out_err, state_errors=state_err, cache_errors=cache_err,
                                 first_step=min(over) if over else None))
    return PathCheck(name=name, boundaries=tuple(bounds), logit_errors=logit_errors, layers=tuple(checks),
                     tolerance=tol)
