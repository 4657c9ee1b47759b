"""How a transformers model of a registered family is run through its cache, and where its cache keeps each state.

:func:`run_path` feeds a model its ids in consecutive calls (``boundaries`` [0, b1, ..., T]), each
call carrying the cache the previous one returned, as generation does, and keeps what each
recurrent mixer read and returned on the way (forward hooks, :attr:`Family.hooked`) and every
recurrent layer's state in the cache after each call (:func:`cache_states`). One call over all of
``[0, T)`` with ``use_cache=False`` is the full forward every path is held to.

What a family needs to continue from a cache, read off transformers 5.25 (each a trap a user
falls into silently):

* the carried object's keyword: ``cache=`` for most (``Mamba2ForCausalLM.forward`` swallows the
  older ``past_key_values=`` in ``**kwargs`` and starts from an empty state), ``state=`` for RWKV;
  it comes back as the output's ``cache`` (``past_key_values``) or ``state``;
* ``position_ids`` wherever ``forward`` takes them (Bamba's continuation is off without them);
* RecurrentGemma returns no cache: its recurrent blocks keep their state on themselves
  (``rg_lru.recurrent_states``, ``conv1d_state``) and its attention layers in a cache the caller
  makes: the base model's ``_setup_cache`` zeroes the blocks' state before the first call and a
  ``DynamicCache(config=...)`` is passed to every call.

Where the cache keeps layer i's state, in our record's fields: ``get_recurrent_state(i)`` (the SSM
or delta-rule matrix), ``get_conv_state(i)[..., 1:]`` (transformers keeps the last K inputs, our
record the K - 1 a later step reads), MiniMax's ``get_linear_cache(i)``, xLSTM's
``rnn_state[i]`` (C, n, m), RWKV's ``state[1:][..., i]`` and RecurrentGemma's block attributes.
A field whose cache entry has another number of elements is not compared (None).
"""

from __future__ import annotations

import inspect
import itertools

import numpy as np

__all__ = ["PathFailed", "cache_states", "carry_keyword", "output_cache", "run_path"]


class PathFailed(RuntimeError):
    """The model raised on a call of a path: ``step`` the call's first step, the message its error's.

    Parameters
    ----------
    step : int
        The first step of the call that raised.
    message : str
        What the model raised, in one line.
    """

    def __init__(self, step: int, message: str):
        super().__init__(message)
        self.step = step


def carry_keyword(model) -> str:
    """The keyword ``model.forward`` takes the carried cache by: ``"cache"``, ``"state"`` or ``"past_key_values"``.

    Parameters
    ----------
    model : transformers model

    Returns
    -------
    str
    """
    params = inspect.signature(model.forward).parameters
    return next((k for k in ("cache", "state", "past_key_values", "cache_params") if k in params), "cache")


def output_cache(out, names=("cache", "past_key_values", "state", "cache_params")):
    """The first of ``names`` the model's output holds, not through a deprecated alias (a property), or None.

    transformers 5.25's outputs keep ``past_key_values`` and ``cache_params`` as properties that read
    ``cache`` and log a deprecation: reading them would warn the user of a misuse that is not theirs.

    Parameters
    ----------
    out : transformers ModelOutput
    names : tuple of str
        The attributes tried, in order.

    Returns
    -------
    object or None
    """
    for name in names:
        if isinstance(getattr(type(out), name, None), property):
            continue
        got = getattr(out, name, None)
        if got is not None:
            return got
    return None


def _carried(out, kw, before):
    for name in ("cache", "past_key_values", "state", "cache_params") if kw != "state" else ("state",):
        got = output_cache(out, (name,))
        if got is not None:
            return got
    return before


def _numpy(t):
    """A float64 copy: a float64 tensor's ``.double().numpy()`` would share the memory the next call updates in place."""
    return np.array(t.detach().cpu().double().numpy(), copy=True)


def _fit(ours_shape, theirs):
    """``theirs`` (N, ...) reshaped to ``ours_shape`` when the sizes agree, else None."""
    if theirs is None or int(np.prod(theirs.shape)) != int(np.prod(ours_shape)):
        return None
    return np.asarray(theirs, dtype=np.float64).reshape(ours_shape)


def cache_states(model, family, carry, layer: int, shapes: dict) -> dict:
    """Layer ``layer``'s state as the cache holds it after a call, in our record's fields.

    Parameters
    ----------
    model : transformers model of ``family``
    family : Family
    carry : the cache (or RWKV's state list) the call returned
    layer : int
        The recurrent layer's index in the layer map.
    shapes : dict of str to tuple
        Our record's fields and their per-step shapes (N, ...).

    Returns
    -------
    dict of str to ndarray or None
        Each field as float64 of its shape, or None where this family's cache does not hold it
        (or holds another number of elements).
    """
    names = list(shapes)
    got: dict = dict.fromkeys(names)
    try:
        if family.name == "rwkv":
            got.update({f: _numpy(s[..., layer]) for f, s in zip(names, carry[1:])})
        elif family.name == "xlstm":
            got.update({f: _numpy(s) for f, s in zip(names, carry.rnn_state[layer])})
        elif family.name == "recurrent_gemma":
            blk = model.get_submodule(family.layer_map(model)[layer].path)
            got.update(rg=_numpy(blk.rg_lru.recurrent_states), conv=_numpy(blk.conv1d_state))
        elif family.kind == "lightning":
            got[names[0]] = _numpy(carry.get_linear_cache(layer))
        else:
            for f in names:
                if f == "conv":  # a layer with several conv states (Inkling's four): the recorded mixer's
                    idx = getattr(family.mixers(model)[layer], "conv_idx", 0)
                    conv = carry.get_conv_state(layer, state_idx=idx) if idx else carry.get_conv_state(layer)
                    want = int(np.prod(shapes[f]))
                    got[f] = None if conv is None else _numpy(conv if conv.numel() == want else conv[..., 1:])
                else:
                    state = carry.get_recurrent_state(layer)
                    got[f] = None if state is None else _numpy(state)
    except (AttributeError, ValueError, IndexError, TypeError, KeyError):
        pass
    return {f: _fit(shapes[f], got.get(f)) for f in names}


def run_path(model, family, ids, boundaries, layers, *, use_cache=True, attention_mask=None, shapes=None):
    """Run ``model`` on ``ids`` in calls ``[b_j, b_{j+1})``, each carrying the previous call's cache.

    Parameters
    ----------
    model : transformers model of ``family`` (eval mode, under ``torch.no_grad()``)
    family : Family
    ids : torch.Tensor of int64, shape (N, T)
    boundaries : sequence of int
        ``0 = b_0 < b_1 < ... < b_k = T``: one call per span.
    layers : sequence of int
        The recurrent layers whose mixers are hooked.
    use_cache : bool, default True
        False: the full forward (one span, no cache).
    attention_mask : torch.Tensor of shape (N, T), optional
        Passed to every call, cut to what the model has seen so far plus the call's span.
    shapes : dict of int to dict, optional
        Per layer, our record's fields and shapes (N, ...): the cache's states are read after each
        call (:func:`cache_states`).

    Returns
    -------
    logits : ndarray of float64, shape (N, T, V)
    hooked : dict of int to (u, out, extra)
        Per layer, its input and output (N, T, M) float64 joined along time, and the hook's
        extra keyword arguments (arrays (N, t) joined along time).
    cached : dict of int to list of (int, dict)
        Per layer, after each call: the last step it covered and :func:`cache_states`.

    Raises
    ------
    RuntimeError
        A mixer that runs other than once per call (the path cannot be followed step by step).
    PathFailed
        The model raised on a cached call (``step`` its first step).
    """
    import torch

    mixers, whole = family.mixers(model), model
    if family.head is not None:  # a head the forward cannot run from ids alone (JEV's decisions): the backbone
        model = model.model  # runs the cache, the head scores its last hidden states
    kw = carry_keyword(model)
    pos = "position_ids" in inspect.signature(model.forward).parameters
    seen: dict = {i: [] for i in layers}

    def hook(i):
        def keep(module, args, kwargs, output):
            got = family.hooked(args, kwargs, output)
            u, out, extra = got if len(got) == 3 else (*got, {})
            seen[i].append((_numpy(u), _numpy(out), extra))
        return keep

    N, T = ids.shape
    carry, logits, cached = None, [], {i: [] for i in layers}
    base = getattr(model, "base_model", model)
    if use_cache and hasattr(base, "_setup_cache"):  # RecurrentGemma: its blocks hold the state, we hold the cache
        from transformers import DynamicCache

        base._setup_cache(model.config, N, ids.device, next(model.parameters()).dtype)
        carry = DynamicCache(config=model.config)
    handles = [mixers[i].register_forward_hook(hook(i), with_kwargs=True) for i in layers]
    try:
        for a, b in itertools.pairwise(boundaries):
            more = {"position_ids": torch.arange(a, b, device=ids.device)[None].expand(N, -1)} if pos else {}
            if attention_mask is not None:
                more["attention_mask"] = attention_mask[:, :b]
            if carry is not None:
                more[kw] = carry
            try:
                out = model(input_ids=ids[:, a:b], use_cache=use_cache, **more)
            except Exception as error:  # whatever transformers raises is the finding
                if not use_cache:
                    raise
                text = " ".join(str(error).split())[:200]
                raise PathFailed(a, f"{type(error).__name__}: {text}") from None
            scores = out.logits if family.head is None else family.head(whole, out.last_hidden_state)
            if tuple(scores.shape[:2]) != (N, b - a):
                raise PathFailed(a, f"the call on steps [{a}, {b}) returned logits of shape {tuple(scores.shape)}; "
                                    f"(N={N}, {b - a}, V) was expected")
            logits.append(_numpy(scores))
            if use_cache:
                carry = _carried(out, kw, carry)
            for i in layers:
                if len(seen[i]) != len(logits):
                    raise RuntimeError(f"layer {i}'s mixer ran {len(seen[i]) - len(logits) + 1} times in the call "
                                       f"over steps [{a}, {b}); once was expected.")
                if shapes is not None:
                    cached[i].append((b - 1, cache_states(whole, family, carry, i, shapes[i])))
    finally:
        for h in handles:
            h.remove()
    hooked = {}
    for i in layers:
        u = np.concatenate([s[0] for s in seen[i]], axis=1)
        out = np.concatenate([s[1] for s in seen[i]], axis=1)
        extra = {k: np.concatenate([np.asarray(s[2][k]) for s in seen[i]], axis=1) for k in seen[i][0][2]}
        hooked[i] = (u, out, extra)
    return np.concatenate(logits, axis=1), hooked, cached
