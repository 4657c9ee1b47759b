"""The whole state of a transformers model of a registered family: its cache taken apart into arrays and put back.

After a prefix the model's state is what its own cache holds (``model(ids, use_cache=True)``):
transformers' ``DynamicCache`` keeps, per layer, the convolution windows (``conv_states``) and
the recurrent states (``recurrent_states``: Mamba's and Mamba-2's SSM state, the delta rule's
matrix) of its linear-attention layers and the keys and values of its attention layers, with the
counters that say how far the sequence has run (``cumulative_length``, ``has_previous_state``);
MiniMax adds its lightning layers' ``linear_cache``, xLSTM keeps ``rnn_state`` (C, n, m) per
block, RWKV returns ``state`` (five tensors of shape (N, hidden_size, L)), and RecurrentGemma holds
its RG-LRU and convolution states on the modules themselves (``rg_lru.recurrent_states``,
``conv1d_state``) beside a ``DynamicCache`` for its attention layers.

:func:`capture` walks that object and keeps every tensor as an array, named by its path in the
object (``cache.layers[3].conv_states[0]``), and every plain value (an int, a bool, None) beside
it. :func:`restore` rebuilds the same object: the model runs one token of batch N from an empty
state (which builds the cache's structure: its layer classes, its dicts), and every path is then
set to the kept value; nothing of that token survives. The state is then the model's own and
its own code continues from it (:func:`step`).

How a family continues (:data:`PATHS`): most continue several tokens per call (``"chunk"``);
where transformers' multi-token cached forward is wrong (issue 33), one token per call
(``"tokens"``): Mamba and FalconMamba (their multi-token cached forward ignores the cached SSM
state), RecurrentGemma (its multi-token call restarts the convolution window), and Jamba, Zamba
and MiniMax, whose multi-token continuation leaves round-off (measured: :data:`PATHS`); Zamba2
continues in one call (its one-token path is the one off). RWKV's one-token call with a state
is wrong for a batch of more than one row (the shifted state of shape (N, H) broadcasts against
the input (N, 1, H) into N positions): generation runs it one row at a time. ``position_ids`` are passed wherever ``forward`` takes them (Bamba's
positions are wrong without them), and the cache goes in as ``cache=`` (``past_key_values=`` is
swallowed by ``**kwargs`` in some families and the continuation silently starts from zeros).
"""

from __future__ import annotations

import hashlib
import inspect
import json

import numpy as np

from hiddenstate.interop.families.registry import family_of
from hiddenstate.keep.cache_paths import output_cache

__all__ = ["PATHS", "RWKV_PARTS", "batch_axes", "capture", "check_fits", "config_of", "describe", "digest_of", "estimate", "prefill",
           "restore", "step", "take_apart"]

#: How each family continues from a kept state: "tokens" (one token per call) where transformers' multi-token
#: cached forward is wrong; every other family "chunk" (the whole suffix in one call).
PATHS = {
    # measured with transformers 5.25 on the tiny models of tests/test_snapshot.py (prefix 9, suffix 7, float32),
    # the suffix's logits against the full forward's, relative to their largest value: the multi-token path / one
    # token per call (the restored cache continues bit for bit as the model's own live cache on either path)
    "mamba": "tokens",  # the multi-token cached forward ignores the cached SSM state (issue 33)
    "falcon_mamba": "tokens",  # the same
    "recurrent_gemma": "tokens",  # a multi-token call is a prefill: it restarts the convolution window
    "jamba": "tokens",  # 1.9e-1 / 1.1e-6
    "zamba": "tokens",  # 1.5 / 1.4e-5
    "minimax": "tokens",  # 2.4e-3 / 1.6e-7
    "zamba2": "chunk",  # 5.0e-6 / 5.4e-3: its one-token-a-call path is the one off here
}

#: RWKV's ``state`` list, in order: the channel-mix and time-mix shifts (the previous step's input of each), and
#: the WKV numerator, denominator and running maximum.
RWKV_PARTS = ("ffn_shift", "attn_shift", "num", "den", "max")

#: Config keys that name where a model came from or how it runs, not what it computes.
VOLATILE = ("_name_or_path", "transformers_version", "architectures", "_attn_implementation_autoset",
            "_commit_hash", "torch_dtype", "dtype", "use_cache", "output_hidden_states", "output_attentions",
            "return_dict", "_attn_implementation", "_experts_implementation")

#: Attributes never walked: the model's config, devices and dtypes, and the class a cache replicates.
_SKIP = {"config", "device", "dtype", "layer_class_to_replicate", "offloading", "only_non_sliding"}


def _torch():
    import torch

    return torch


def _jsonable(obj):
    """A config's dict made JSON (dtypes and other objects by their text), sorted."""
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def config_of(model) -> dict:
    """The model's config as a JSON-able dict, without the keys of :data:`VOLATILE`.

    Parameters
    ----------
    model : transformers model

    Returns
    -------
    dict
    """
    cfg = _jsonable(model.config.to_dict())

    def strip(d):
        if isinstance(d, dict):
            return {k: strip(v) for k, v in d.items() if k not in VOLATILE}
        return d
    return strip(cfg)


def digest_of(named) -> str:
    """SHA-256 over the names, shapes, dtypes and bytes of ``named`` arrays, in sorted name order.

    Parameters
    ----------
    named : iterable of (str, array)
        torch tensors (a state dict's items) or NumPy arrays.

    Returns
    -------
    str
        ``"sha256:"`` and 64 hex digits.
    """
    torch = None
    h = hashlib.sha256()
    for name, arr in sorted(named, key=lambda kv: kv[0]):
        if type(arr).__module__.startswith("torch"):
            torch = torch or _torch()
            t = arr.detach().cpu().contiguous()
            dtype = str(t.dtype).removeprefix("torch.")
            t = t.view(torch.uint8) if t.dtype.itemsize == 1 else t.view(getattr(torch, f"int{8 * t.dtype.itemsize}"))
            data, shape = t.numpy().tobytes(), tuple(arr.shape)
        else:
            a = np.ascontiguousarray(arr)
            dtype, data, shape = a.dtype.name, a.tobytes(), a.shape
        h.update(json.dumps([name, list(shape), dtype]).encode())
        h.update(data)
    return "sha256:" + h.hexdigest()


def describe(model) -> tuple:
    """``(model_type, config, digest)`` of a transformers model of a registered family.

    Parameters
    ----------
    model : transformers model

    Returns
    -------
    tuple of (str, dict, str)

    Raises
    ------
    TypeError
        A model of no registered family.
    """
    family = family_of(model)
    return family.name, config_of(model), digest_of(model.state_dict().items())


def _walk(obj, path, arrays, scalars, depth=0):
    torch = _torch()
    if isinstance(obj, torch.Tensor):
        arrays[path] = obj
    elif isinstance(obj, (bool, int, float, str)) or obj is None:
        scalars[path] = obj
    elif depth > 6:
        return
    elif isinstance(obj, (list, tuple)):
        for i, o in enumerate(obj):
            _walk(o, f"{path}[{i}]", arrays, scalars, depth + 1)
    elif isinstance(obj, dict):
        if all(isinstance(k, (int, str)) and not isinstance(k, bool) for k in obj):
            for k, o in obj.items():
                _walk(o, f"{path}[{k!r}]", arrays, scalars, depth + 1)
    elif not isinstance(obj, type) and type(obj).__module__.startswith("transformers.") and hasattr(obj, "__dict__"):
        for k, o in vars(obj).items():
            if k not in _SKIP and not k.startswith("__"):
                _walk(o, f"{path}.{k}", arrays, scalars, depth + 1)


def _recurrent_modules(model):
    return {i: layer.temporal_block for i, layer in enumerate(model.model.layers)
            if hasattr(layer.temporal_block, "rg_lru")}


def _container(model, cache, state):
    """The object that holds the state: {"cache": ..., "state": ..., "modules": ...}."""
    out = {}
    if cache is not None:
        out["cache"] = cache
    if state is not None:
        out["state"] = state
    if family_of(model).name == "recurrent_gemma":
        out["modules"] = {i: {"conv1d_state": m.conv1d_state, "recurrent_states": m.rg_lru.recurrent_states}
                          for i, m in _recurrent_modules(model).items()}
    return out


def _kwargs(model, live, start, n, N):
    torch = _torch()
    params = inspect.signature(model.forward).parameters
    kw = {"use_cache": True}
    if "cache" in live:
        kw["cache" if "cache" in params else "past_key_values"] = live["cache"]
    if "state" in live:
        kw["state"] = live["state"]
    if "position_ids" in params:
        dev = next(model.parameters()).device
        kw["position_ids"] = (torch.arange(start, start + n, device=dev))[None].expand(N, -1)
    return kw


def _call(model, ids_t, live, start):
    """One forward call on ``ids_t`` (N, s) from ``live`` (or from empty); the logits and the new live state."""
    torch = _torch()
    N, s = ids_t.shape
    family = family_of(model)
    if family.name == "recurrent_gemma" and not live:
        from transformers import DynamicCache

        for m in _recurrent_modules(model).values():  # an empty state: the block makes zeros of batch N
            m.conv1d_state, m.rg_lru.recurrent_states = None, None
        live = {"cache": DynamicCache(config=model.config)}
    if family.name == "recurrent_gemma":
        for i, m in _recurrent_modules(model).items():
            got = live.get("modules", {}).get(i)
            if got is not None:
                m.conv1d_state, m.rg_lru.recurrent_states = got["conv1d_state"], got["recurrent_states"]
    if family.name == "rwkv" and s == 1 and N > 1 and "state" in live:
        # RWKV's one-token call with a state broadcasts the shifted state (N, H) against (N, 1, H) into (N, N, H):
        # a batch of N comes back as N positions. Each row alone is right: one call per row.
        rows = [_call(model, ids_t[r:r + 1], {"state": [t[r:r + 1].clone() for t in live["state"]]}, start)
                for r in range(N)]
        return (torch.cat([lg for lg, _ in rows]),
                {"state": [torch.cat([lv["state"][j] for _, lv in rows]) for j in range(len(live["state"]))]})
    runs = model.model if family.head is not None else model  # JEV: its backbone runs the cache, its head scores
    kw = _kwargs(runs, live, start, s, N)
    with torch.no_grad():
        out = runs(input_ids=ids_t, **kw)
        logits = out.logits if family.head is None else family.head(model, out.last_hidden_state)
    cache = output_cache(out, ("cache", "past_key_values")) or live.get("cache")  # not through deprecated aliases
    return logits, _container(model, cache, getattr(out, "state", None))


def _ids_tensor(model, ids):
    torch = _torch()
    return torch.as_tensor(np.asarray(ids, dtype=np.int64), device=next(model.parameters()).device)


def _to_numpy(t):
    """A tensor as an exact NumPy array and its dtype's name (bfloat16 kept as its uint16 bits)."""
    torch = _torch()
    t = t.detach().cpu().contiguous()
    name = str(t.dtype).removeprefix("torch.")
    if t.dtype == torch.bfloat16:
        return t.view(torch.uint16).numpy().copy(), name
    return t.numpy().copy(), name


def _to_torch(arr, dtype_name, device):
    torch = _torch()
    t = torch.from_numpy(np.array(arr, copy=True))
    if dtype_name == "bfloat16":
        t = t.view(torch.bfloat16)
    return t.to(device)


def _layer_part(path):
    """(layer, part) read off a path: ``cache.layers[3].conv_states[0]`` -> (3, "conv_states")."""
    import re

    nums = re.findall(r"(?:layers|linear_cache|rnn_state|modules)\[(\d+)\]", path)
    names = re.findall(r"\.([A-Za-z_]\w*)", path)
    layer = int(nums[0]) if nums else None
    part = names[-1] if names else path.split("[")[0]
    if path.startswith("cache.linear_cache"):
        part = "linear_cache"
    if path.startswith("state["):  # RWKV's five (N, hidden_size, L) tensors: every layer on the last axis
        part, layer = RWKV_PARTS[int(path[6])], None
    if "rnn_state" in path:
        part = ("C", "n", "m")[int(path.rsplit("[", 1)[1].rstrip("]"))]
    if path.startswith("modules"):
        part = re.findall(r"\['(\w+)'\]", path)[-1]
    return layer, part


def _shapes(model, n):
    """The shape of every array of the state after one token of ``n`` rows."""
    _, live = prefill(model, np.zeros((n, 1), dtype=np.int64))
    tensors: dict = {}
    for key, obj in live.items():
        _walk(obj, key, tensors, {})
    return {p: tuple(t.shape) for p, t in tensors.items()}


def batch_axes(model) -> dict:
    """Each array's batch axis (None for one without: a counter), read off the state of one row and of two.

    Parameters
    ----------
    model : transformers model of a registered family

    Returns
    -------
    dict of str to int or None
        By the array's path; the axis whose size is 1 for one row and 2 for two.
    """
    one, two = _shapes(model, 1), _shapes(model, 2)
    axes = {}
    for path, a in one.items():
        b = two.get(path, a)
        diff = [i for i, (x, y) in enumerate(zip(a, b)) if (x, y) == (1, 2)] if len(a) == len(b) else []
        axes[path] = diff[0] if len(diff) == 1 else None
    return axes


def capture(model, ids) -> tuple:
    """Run ``model`` on the prefix ``ids`` (N, T) and take its whole state apart.

    Parameters
    ----------
    model : transformers model of a registered family
    ids : ndarray of int64, shape (N, T)

    Returns
    -------
    arrays : dict of str to ndarray
        Every tensor of the state, by its path, exact (bfloat16 as its uint16 bits).
    info : dict of str to dict
        Per array: ``layer`` (int or None), ``part``, ``dtype`` (the tensor's), ``batch_axis``.
    scalars : dict of str to (int, float, bool, str or None)
        The state's plain values (counters, flags), by path.
    next_logits : ndarray of shape (N, V)
        The logits at the prefix's last position (float64).
    """
    logits, live = prefill(model, ids)
    arrays, info, scalars = take_apart(model, live, batch_axes(model))
    return arrays, info, scalars, logits[:, -1].detach().cpu().double().numpy()


def take_apart(model, live, axes) -> tuple:
    """The live state's tensors as exact arrays by path, with their info, and its plain values.

    Parameters
    ----------
    model : transformers model
    live : dict
        From :func:`prefill`, :func:`restore` or :func:`step`.
    axes : dict of str to int or None
        Each path's batch axis (:func:`batch_axes`).

    Returns
    -------
    arrays, info, scalars
        As :func:`capture`.
    """
    tensors, scalars = {}, {}
    for key, obj in live.items():
        _walk(obj, key, tensors, scalars)
    arrays, info = {}, {}
    for path, t in tensors.items():
        arrays[path], dtype = _to_numpy(t)
        layer, part = _layer_part(path)
        info[path] = {"layer": layer, "part": part, "dtype": dtype, "batch_axis": axes.get(path)}
    return arrays, info, scalars


def _parse(path):
    """A path as a list of steps: ("attr", name) or ("item", key)."""
    import ast
    import re

    steps = []
    for m in re.finditer(r"\.?([A-Za-z_]\w*)|\[([^\]]+)\]", path):
        steps.append(("attr", m.group(1)) if m.group(1) else ("item", ast.literal_eval(m.group(2))))
    return steps


def _set(root, path, value):
    steps = _parse(path)
    obj = root
    for kind, key in steps[:-1]:
        obj = getattr(obj, key) if kind == "attr" and not isinstance(obj, dict) else obj[key]
    kind, key = steps[-1]
    if kind == "attr" and not isinstance(obj, dict):
        setattr(obj, key, value)
    elif isinstance(obj, tuple):
        raise TypeError("tuples are rebuilt whole")
    else:
        obj[key] = value


def restore(model, snap) -> dict:
    """The model's live state (its cache object, RWKV's state list, RecurrentGemma's module states) from ``snap``.

    Parameters
    ----------
    model : transformers model of the snapshot's family
    snap : Snapshot

    Returns
    -------
    dict
        What :func:`step` continues from.
    """
    dev = next(model.parameters()).device
    live = _template(model, snap.batch)
    _check_fits(live, snap)
    # tuples (xLSTM's rnn_state (C, n, m), RWKV's state) are rebuilt whole: lists first, then back to tuples
    live = _thaw(live)
    for path, arr in snap.arrays.items():
        _set(live, path, _to_torch(arr, snap.info[path]["dtype"], dev))
    for path, v in snap.scalars.items():
        _set(live, path, v)
    return _freeze(live)


def _template(model, N):
    """The model's state after one token of N rows: the structure a snapshot's arrays are put into."""
    was = model.training
    model.eval()
    try:
        return _call(model, _ids_tensor(model, np.zeros((N, 1), dtype=np.int64)), {}, 0)[1]
    finally:
        model.train(was)


def check_fits(model, snap) -> None:
    """Refuse a snapshot whose arrays and values are not the places ``model``'s state has (a crafted file).

    Parameters
    ----------
    model : transformers model of the snapshot's family
    snap : Snapshot

    Raises
    ------
    ValueError
        An array the state does not hold, or holds with another dtype or number of axes; an array of
        the state the snapshot lacks; a value at a path the state does not have.
    """
    _check_fits(_template(model, snap.batch), snap)


def _check_fits(live, snap):
    """Refuse a snapshot whose arrays and values are not the places this model's state has (a crafted file).

    Every array must be one of the template's (the state after one token), of the same dtype and
    number of axes, and every template array must be in the snapshot (else the template's token
    would leak into the continuation); every value must sit at one of the template's paths.
    """
    tensors, scalars = {}, {}
    for key, obj in live.items():
        _walk(obj, key, tensors, scalars)
    if set(tensors) != set(snap.arrays):
        odd = sorted(set(tensors) ^ set(snap.arrays))
        raise ValueError(f"snap must hold the arrays of this {snap.model_type} model's state; got a snapshot whose "
                         f"arrays differ from the state's at {odd[:3]}.")
    for path, t in tensors.items():
        arr, info = snap.arrays[path], snap.info[path]
        if info["dtype"] != str(t.dtype).removeprefix("torch.") or arr.ndim != t.ndim:
            raise ValueError(f"snap must hold the arrays of this model's state; got {path!r} as {info['dtype']} of "
                             f"{arr.ndim} axes, where the state holds {t.dtype} of {t.ndim}.")
    extra = sorted(set(snap.scalars) - set(scalars) - set(tensors))
    if extra:
        raise ValueError(f"snap must hold the values of this model's state; got values at {extra[:3]}, which the "
                         "state has no place for.")


def _thaw(obj):
    """Tuples inside the live state turned into lists (so a path can set an item), remembering where."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            obj[k] = _thaw(v)
        return obj
    if isinstance(obj, tuple):
        return _Tuple(_thaw(v) for v in obj)
    if isinstance(obj, list):
        return [_thaw(v) for v in obj]
    if not isinstance(obj, type) and type(obj).__module__.startswith("transformers.") and hasattr(obj, "__dict__"):
        for k, v in list(vars(obj).items()):
            if k not in _SKIP and isinstance(v, (dict, list, tuple)):
                setattr(obj, k, _thaw(v))
    return obj


class _Tuple(list):
    """A tuple of the live state while it is being filled."""


def _freeze(obj):
    if isinstance(obj, _Tuple):
        return tuple(_freeze(v) for v in obj)
    if isinstance(obj, list):
        return [_freeze(v) for v in obj]
    if isinstance(obj, dict):
        for k, v in obj.items():
            obj[k] = _freeze(v)
        return obj
    if not isinstance(obj, type) and type(obj).__module__.startswith("transformers.") and hasattr(obj, "__dict__"):
        for k, v in list(vars(obj).items()):
            if k not in _SKIP and isinstance(v, (dict, list)):
                setattr(obj, k, _freeze(v))
    return obj


def prefill(model, ids) -> tuple:
    """The model run on ``ids`` (N, T) from an empty state: its logits and its own live state (not taken apart).

    Parameters
    ----------
    model : transformers model of a registered family
    ids : ndarray of int64, shape (N, T)

    Returns
    -------
    logits : torch.Tensor of shape (N, T, V)
    live : dict
        The model's own state objects, what :func:`step` continues from.
    """
    was = model.training
    model.eval()
    try:
        return _call(model, _ids_tensor(model, ids), {}, 0)
    finally:
        model.train(was)


def step(model, live, ids, start) -> tuple:
    """Continue the model from ``live`` on ``ids`` (N, S), positions ``start..start+S-1``, by the family's path.

    Parameters
    ----------
    model : transformers model
    live : dict
        From :func:`restore` or a previous :func:`step`.
    ids : ndarray of int64, shape (N, S)
    start : int
        The position of ``ids[:, 0]`` (the prefix length plus what followed).

    Returns
    -------
    logits : ndarray of shape (N, S, V), float64
    live : dict
    """
    torch = _torch()
    ids_t = _ids_tensor(model, ids)
    path = PATHS.get(family_of(model).name, "chunk")
    was = model.training
    model.eval()
    out = []
    try:
        cuts = range(ids.shape[1]) if path == "tokens" else [0]
        for k in cuts:
            piece = ids_t[:, k:k + 1] if path == "tokens" else ids_t
            logits, live = _call(model, piece, live, start + k)
            out.append(logits.detach().cpu().double())
    finally:
        model.train(was)
    return torch.cat(out, dim=1).numpy(), live


def estimate(model, N, T) -> int:
    """Bytes a snapshot of ``model`` after a prefix of shape (N, T) takes, from two runs of one row.

    The state of one row after 1 and after 2 tokens (each array's bytes) gives each array's
    constant part and its growth per token (the attention layers' keys and values grow; the
    recurrent and convolution states do not); a sliding-window layer's growth stops at its window.

    Parameters
    ----------
    model : transformers model
    N, T : int

    Returns
    -------
    int
    """
    one = capture(model, np.zeros((1, 1), dtype=np.int64))
    two = capture(model, np.zeros((1, 2), dtype=np.int64))
    total = N * one[3].shape[1] * 8  # next_logits, float64
    for path, a in one[0].items():
        b = two[0].get(path, a)
        grow = b.nbytes - a.nbytes
        steps = T - 1
        window = _window_of(one, path)
        if grow and window:
            steps = min(T, window - 1) - 1 if window > 1 else 0
        rows = N if one[1][path]["batch_axis"] is not None else 1
        total += rows * (a.nbytes + max(steps, 0) * grow)
    return int(total)


def _window_of(cap, path):
    """The sliding window of the layer holding ``path`` (from its ``sliding_window`` value), or None."""
    base = path.rsplit(".", 1)[0]
    w = cap[2].get(f"{base}.sliding_window")
    return w if isinstance(w, int) and w > 0 else None
