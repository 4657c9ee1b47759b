"""A ``save_pretrained`` directory of a registered family, read offline and checked: :func:`open_model_dir`.

Where users keep models: a directory holding ``config.json`` and the weights, one
``model.safetensors`` or shards ``model-0000k-of-0000n.safetensors`` listed by
``model.safetensors.index.json``, as ``save_pretrained`` writes them. What happens, in order,
before a byte of a weight is read:

1. ``config.json`` is read (a regular file, at most :data:`MAX_JSON_BYTES`, a JSON object);
   ``auto_map`` (custom code that ``trust_remote_code`` would run) is refused, and so is a
   ``model_type`` of no registered family (one line naming the registered ones) and an
   ``architectures`` entry that is not one of the family's transformers classes. The model class
   is transformers' own (``getattr(transformers, name)``): no code from the directory ever runs.
   Every field is held to the family's config class by type and range
   (:mod:`~hiddenstate.interop.families.config_check`: a negative or string ``hidden_size``, a
   NaN epsilon, a ``dtype`` of ``"bogus"`` are one line each).
   The layers asked for and the token ids are held to its ``num_hidden_layers`` and
   ``vocab_size`` (:mod:`~hiddenstate.interop.families.config_file`), before a model is built.
   All of it is read and checked once, into a
   :class:`~hiddenstate.interop.families.config_file.ModelRequest` that the loader takes (pass one
   as ``directory`` to skip reading again).
2. Every shard's header is read and checked (:func:`~hiddenstate.interop.safetensors_header.read_header`:
   a regular file, a symbolic link only to one (a dangling link, a loop, a FIFO or a device is
   refused unopened, as every reader of the package does), offsets that tile the file exactly);
   the index's shard names must be plain file names in the directory, every shard it names must
   exist, and every tensor must lie in the shard the index says. ``num_hidden_layers`` must not
   exceed the layers the headers hold (a model of 2,000 layers is never built for weights of 2).
3. The model is built on torch's ``meta`` device (no memory); its state dict's names and shapes
   are held to the headers' (missing and unexpected keys named; a tied head, which
   ``save_pretrained`` leaves out, is its tie's); with the ids known, the records of the chosen
   layers (:func:`~hiddenstate.interop.families.hooks.estimate_bytes`) are checked against
   ``max_bytes`` and the weights against this machine's memory, each in one line that says what
   it would take and what lowers it.
4. Only then is the model built for real and the weights read (every tensor, checked against the
   file's size again) and loaded with ``load_state_dict(strict=True)``.

No network access, ever: ``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1`` and
``HF_HUB_DISABLE_TELEMETRY=1`` are set in the environment before transformers is imported here,
and nothing here calls the hub (no ``from_pretrained``). Text is tokenised only by a
``tokenizer.json`` in the directory (transformers' ``PreTrainedTokenizerFast``, from that file);
without one, token ids are needed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from hiddenstate.core.files import open_regular
from hiddenstate.core.resources import check_memory, format_bytes
from hiddenstate.core.validation import real
from hiddenstate.interop.families.config_check import check_layer_count
from hiddenstate.interop.families.config_file import (
    CONFIG_FILE,
    MAX_JSON_BYTES,
    ModelRequest,
    model_request,
    offline_transformers,
    read_json,
    special_floats,
)
from hiddenstate.interop.families.hooks import MAX_BYTES, estimate_bytes, kept_steps
from hiddenstate.interop.safetensors_header import read_header

__all__ = ["CONFIG_FILE", "INDEX_FILE", "MAX_JSON_BYTES", "TOKENIZER_FILE", "WEIGHTS_FILE", "ModelRequest",
           "is_model_dir", "load_model_dir", "model_request", "open_model_dir", "open_request", "token_strings",
           "tokenize", "weight_headers"]

WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
TOKENIZER_FILE = "tokenizer.json"
_TORCH_DTYPES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64", "I64": "int64",
                 "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def is_model_dir(path) -> bool:
    """Whether ``path`` is a directory holding a ``config.json`` (what ``save_pretrained`` writes).

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    bool
    """
    return isinstance(path, (str, os.PathLike)) and os.path.isdir(path) and os.path.lexists(
        os.path.join(path, CONFIG_FILE))


def _shard_name(index: Path, name) -> str:
    if (not isinstance(name, str) or not name.endswith(".safetensors") or name in (".", "..")
            or any(s and s in name for s in (os.sep, os.altsep, "/")) or "\0" in name):
        raise ValueError(f"'{index}' must name its shards as .safetensors files in its own directory; got {name!r}.")
    return name


def weight_headers(directory) -> dict:
    """The checked headers of a model directory's weights, by tensor name (no tensor is read).

    Parameters
    ----------
    directory : str or os.PathLike
        A ``save_pretrained`` directory: ``model.safetensors`` (read first, as transformers
        does), else the shards that ``model.safetensors.index.json`` names.

    Returns
    -------
    dict of str to (SafetensorsHeader, TensorEntry)
        Each tensor's shard header and entry.

    Raises
    ------
    FileNotFoundError
        No weights, or a shard the index names is missing (named).
    ValueError
        A shard or index that is not a regular file (a FIFO, a device, a loop of links), a
        damaged header (:func:`~hiddenstate.interop.safetensors_header.read_header`), a shard
        name that leaves the directory, a tensor that is not where the index says or lies in
        two shards.
    """
    d = Path(directory)
    single, index = d / WEIGHTS_FILE, d / INDEX_FILE
    if os.path.lexists(single):
        header = read_header(single, name="weights")
        return {k: (header, e) for k, e in header.tensors.items()}
    if not os.path.lexists(index):
        raise FileNotFoundError(f"'{d}' must hold {WEIGHTS_FILE} or {INDEX_FILE} with its shards (as save_pretrained "
                                "writes them); it has neither (pickled pytorch_model.bin files are never read).")
    wmap = read_json(index, "the shard index").get("weight_map")
    if not isinstance(wmap, dict) or not wmap:
        raise ValueError(f"'{index}' must map tensor names to shard files under 'weight_map'; got {wmap!r}"[:300] + ".")
    out = {}
    for shard in sorted({_shard_name(index, v) for v in wmap.values()}):
        if not os.path.lexists(d / shard):
            raise FileNotFoundError(f"'{index}' names the shard '{shard}', which is missing from '{d}'. Copy the "
                                    "whole model directory.")
        header = read_header(d / shard, name="a shard")
        for k, e in header.tensors.items():
            if wmap.get(k) != shard:
                raise ValueError(f"'{d / shard}' holds the tensor {k!r}, which '{index}' places "
                                 f"{'nowhere' if k not in wmap else 'in ' + repr(wmap[k])}. The directory is damaged.")
            out[k] = (header, e)
    lost = sorted(set(wmap) - set(out))
    if lost:
        raise ValueError(f"'{index}' places {len(lost)} tensor(s) in shards whose headers do not hold them "
                         f"({', '.join(lost[:5])}{' ...' if len(lost) > 5 else ''}). The directory is damaged.")
    return out


def _stored_form(model, entries: dict) -> dict:
    """How ``save_pretrained`` writes state-dict entries: ``{stored name: tensor}``, by transformers' own mapping.

    transformers 5 renames some families' weights on saving, splits merged ones (NemotronH's
    ``backbone.`` prefix, its experts one tensor each) and fuses split ones (Lara-mini's
    ``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``, ``in_proj_a`` into one ``in_proj``):
    ``revert_weight_conversion`` is what ``save_pretrained`` applies, here to ``entries``.
    """
    from transformers.core_model_loading import revert_weight_conversion

    try:
        return revert_weight_conversion(model, dict(entries))
    except Exception as error:  # a many-to-one conversion cannot be inverted one entry at a time
        raise ValueError(f"the {type(model).__name__}'s weights {', '.join(map(repr, entries))} must be stored as "
                         f"transformers saves them; their conversion failed ({type(error).__name__}: {error}).") from None


def _groups(model) -> dict:
    """``{keys: {stored name: shape}}``: the state dict's entries grouped by the stored tensors they share.

    An entry stored alone is a group of one; entries that ``save_pretrained`` fuses into one tensor
    (Lara-mini's four input projections) are one group, whose stored form is converted together.
    """
    sd = model.state_dict()
    order = {k: i for i, k in enumerate(sd)}
    single = {k: _stored_form(model, {k: v}) for k, v in sd.items()}
    members: dict = {}  # stored name -> the set of entries stored in it (one set object per group)
    for k, form in single.items():
        group = {k}.union(*(members.get(n, ()) for n in form))
        for key in group:
            for n in single[key]:
                members[n] = group
    out, done = {}, set()
    for k, form in single.items():
        if k in done:
            continue
        keys = tuple(sorted(members[next(iter(form))], key=order.get)) if form else (k,)
        done.update(keys)
        joint = form if len(keys) == 1 else _stored_form(model, {key: sd[key] for key in keys})
        out[keys] = {n: tuple(t.shape) for n, t in joint.items()}
    return out


def _expected(model, headers: dict, source: str) -> tuple:
    """``(forms, ties)``: each group of state-dict entries' stored names and shapes, a tied one's tie; held to the headers."""
    params = dict(model.named_parameters(remove_duplicate=False))
    aliases = {}
    for name, p in params.items():
        aliases.setdefault(id(p), []).append(name)
    forms = _groups(model)
    alone = {keys[0]: form for keys, form in forms.items() if len(keys) == 1}
    ties, missing = {}, []
    for keys, form in forms.items():
        if all(n in headers for n in form):
            continue
        tie = None if len(keys) > 1 else next(
            (a for a in aliases.get(id(params.get(keys[0])), ()) if a != keys[0] and a in alone
             and all(n in headers for n in alone[a])), None)
        (missing.extend(n for n in form if n not in headers) if tie is None else ties.__setitem__(keys[0], tie))
    for k in ties:
        del forms[(k,)]
    unexpected = sorted(set(headers) - {n for form in forms.values() for n in form})
    if missing or unexpected:
        show = (lambda ks: ", ".join(ks[:5]) + (f" ... ({len(ks)} in all)" if len(ks) > 5 else ""))
        raise ValueError(f"{source} must hold exactly the {type(model).__name__}'s weights; "
                         + "; ".join(t for t in (f"missing: {show(missing)}" if missing else "",
                                                 f"unexpected: {show(unexpected)}" if unexpected else "") if t) + ".")
    for form in forms.values():
        for n, shape in form.items():
            e = headers[n][1]
            if e.shape != shape or e.dtype not in _TORCH_DTYPES:
                raise ValueError(f"{source}[{n!r}] must be a {_TORCH_DTYPES.get(e.dtype, 'readable')} tensor of shape "
                                 f"{shape}; got {e.dtype} of shape {e.shape}.")
    return forms, ties


def _read(headers: dict, names, torch) -> dict:
    """The named tensors as torch tensors, read shard by shard (each shard's size checked again)."""
    by_file: dict = {}
    for n in names:
        h, e = headers[n]
        by_file.setdefault(h.path, (h, []))[1].append(e)
    out = {}
    for path, (h, entries) in by_file.items():
        with open_regular(path, name="a shard") as f:
            if os.fstat(f.fileno()).st_size != h.size:
                raise ValueError(f"'{path}' changed while it was being read (its size is no longer {h.size}).")
            for e in sorted(entries, key=lambda e: e.start):
                f.seek(e.start)
                buf = np.empty(e.nbytes, dtype=np.uint8)
                if e.nbytes and f.readinto(memoryview(buf)) != e.nbytes:
                    raise ValueError(f"'{path}' changed while it was being read ({e.name!r} is cut short).")
                out[e.name] = torch.from_numpy(buf).view(getattr(torch, _TORCH_DTYPES[e.dtype])).reshape(e.shape)
    return out


def _state_dict(model, forms: dict, ties: dict, headers: dict, source: str, torch) -> dict:
    """The model's state dict from the stored tensors: each group's stored pieces put back where its conversion took them.

    The conversion of a group of entries only moves their elements (renames, splits, fusions,
    stacks, transposes), so running it on the elements' indices (numbered through the group's
    entries in turn) says where each stored element comes from; that map must be a permutation
    (every element once), and it puts the stored values back.
    """
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    out = {}
    for keys, form in forms.items():
        stored = _read(headers, list(form), torch)
        sizes = [int(np.prod(shapes[k], dtype=np.int64)) for k in keys]
        starts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        ids = {k: torch.arange(starts[i], starts[i + 1], dtype=torch.int64).reshape(shapes[k])
               for i, k in enumerate(keys)}
        where = _stored_form(model, ids)
        if len(keys) == 1 and list(where) == list(keys) and torch.equal(where[keys[0]], ids[keys[0]]):
            out[keys[0]] = stored[keys[0]]
            continue
        numel = starts[-1]
        flat = torch.cat([where[n].reshape(-1) for n in form])
        if set(where) != set(form) or flat.numel() != numel or not bool((torch.bincount(flat, minlength=numel) == 1).all()):
            raise ValueError(f"{source}: transformers' conversion of the weights {', '.join(map(repr, keys))} must move "
                             "each element once; it does not, so the stored tensors cannot be put back.")
        value = torch.empty(numel, dtype=stored[next(iter(form))].dtype)
        for n in form:
            value[where[n].reshape(-1)] = stored[n].reshape(-1).to(value.dtype)
        for i, k in enumerate(keys):
            out[k] = value[starts[i]:starts[i + 1]].reshape(shapes[k])
    for k, tie in ties.items():
        out[k] = out[tie]
    return out


def _tokenizer(directory):
    """The directory's tokenizer.json as transformers' fast tokenizer, offline (a one-line refusal without one)."""
    path = Path(directory) / TOKENIZER_FILE
    if not os.path.lexists(path):
        raise ValueError(f"'{directory}' has no {TOKENIZER_FILE} to tokenise the text with; pass token ids instead "
                         "(--ids FILE.npy of shape (T,) or (N, T) on the command line, an int array in Python).")
    read_json(path, TOKENIZER_FILE)  # a FIFO or device refused unopened; an empty or plain text file in one line
    return offline_transformers().PreTrainedTokenizerFast(tokenizer_file=os.fspath(path))


def token_strings(directory, ids) -> list:
    """What the directory's ``tokenizer.json`` decodes each token of sequence 0 to, one by one.

    Parameters
    ----------
    directory : str or os.PathLike
        A model directory with a ``tokenizer.json``.
    ids : ndarray of int, shape (N, T)
        Token ids.

    Returns
    -------
    list of str
        T strings, the text each token adds: a character-level tokenizer gives one character
        each; a token that is one byte of a multi-byte character (it decodes to U+FFFD) or a
        special token (it decodes to nothing) gives its own name (``"<0xE2>"``, ``"âĢ"``).

    Raises
    ------
    ValueError
        As :func:`tokenize`: no ``tokenizer.json``, or not a regular file.
    """
    tok = _tokenizer(directory)
    out = []
    for i in np.asarray(ids)[0].tolist():
        piece = tok.decode([i])
        # a byte of a multi-byte character decodes to U+FFFD, a special token to nothing: the token's own name
        out.append(piece if piece and "\ufffd" not in piece else str(tok.convert_ids_to_tokens(i)))
    return out


def tokenize(directory, text: str) -> np.ndarray:
    """``text`` as token ids (1, T) by the directory's ``tokenizer.json``, offline.

    Parameters
    ----------
    directory : str or os.PathLike
        A model directory.
    text : str

    Returns
    -------
    ndarray of int64, shape (1, T)

    Raises
    ------
    ValueError
        No ``tokenizer.json`` in the directory (token ids are needed: ``--ids FILE.npy`` on the
        command line), or it is not a regular file, or the text gives no token.
    """
    path = Path(directory) / TOKENIZER_FILE
    ids = np.asarray(_tokenizer(directory)(text, add_special_tokens=False)["input_ids"], dtype=np.int64)
    if ids.size == 0:
        raise ValueError(f"the text must give at least one token; '{path}' made none of {len(text)} characters.")
    return ids[None]


def _check_records(model, family, ids, layers, max_bytes, weights: int, source: str,
                   record_dtype: str = "float64", kept=None) -> None:
    """Records of the chosen layers under max_bytes, weights within memory: one line each (before any allocation)."""
    import torch

    seen = set()
    for i, mixer in family.mixers(model).items():  # the first mixer of each size is measured: make it real
        key = tuple((k, tuple(v.shape)) for k, v in mixer.state_dict().items())
        if key not in seen and (layers is None or i in np.atleast_1d(layers)):
            seen.add(key)
            mixer.to_empty(device="cpu")
            with torch.no_grad():
                for t in (*mixer.parameters(), *mixer.buffers()):
                    t.zero_()
    N, T = ids.shape
    try:
        per = estimate_bytes(model, T, N, layers=layers, record_dtype=record_dtype, kept=kept)
    except ValueError as error:  # a family that checks buffers the zeroed stand-in lacks (Falcon-H1's mup_vector)
        if str(error).startswith("layers must"):
            raise
        check_memory(f"loading {source}", weights, "Use a machine with more memory.")
        return  # recompute_layers checks the records before the model runs
    total = sum(per.values()) + max(per.values())
    if max_bytes is not None and total > max_bytes:
        raise ValueError(f"recording layers {sorted(per)} of {source} on T={T:,} tokens of N={N} sequence(s) would "
                         f"take about {format_bytes(total)} (every step's state, {record_dtype}; up to "
                         f"{format_bytes(max(per.values()))} a layer), over the cap of {format_bytes(max_bytes)}: "
                         f"record fewer layers (--layers {min(per)} on the command line, layers=[{min(per)}] in "
                         "Python) or give fewer tokens.")
    check_memory(f"loading {source} ({format_bytes(weights)} of weights) and recording {len(per)} layer(s) "
                 f"({format_bytes(total)})", weights + total, "Record fewer layers (--layers, layers=) or give "
                 "fewer tokens; or use a machine with more memory.")


def _max_bytes(max_bytes):
    """``max_bytes`` checked: None (no cap) or a number of bytes >= 0 (a negative cap is not a cap on the records)."""
    return None if max_bytes is None else real("max_bytes", max_bytes, low=0.0)


def _given(request, **given) -> None:
    """Refuse arguments that a :class:`ModelRequest` already holds."""
    extra = [k for k, v in given.items() if v is not None]
    if extra:
        raise TypeError(f"{' and '.join(extra)} must be None when directory is a ModelRequest (it holds the checked "
                        f"{' and '.join(extra)}); got {', '.join(type(given[k]).__name__ for k in extra)}.")


def load_model_dir(directory, ids=None, *, layers=None, max_bytes=MAX_BYTES, record_dtype="float64", kept=None):
    """Build a registered family's transformers model from a ``save_pretrained`` directory, offline and checked.

    Parameters
    ----------
    directory : str, os.PathLike or ModelRequest
        ``config.json`` and ``model.safetensors`` (or the shards of
        ``model.safetensors.index.json``); see the module docstring for every check. A
        :class:`~hiddenstate.interop.families.config_file.ModelRequest` (:func:`model_request`)
        is that directory with its ``config.json``, layers and ids already checked (``ids`` and
        ``layers`` must then be None).
    ids : ndarray of int, shape (N, T), optional
        The ids the model will run on: with them, the records of ``layers`` are checked against
        ``max_bytes`` before the model is built.
    layers : int or list of int, optional
        The recurrent layers that will be recorded (default all).
    max_bytes : int or None, default MAX_BYTES (4 GiB)
        The cap on the records (None: none).
    record_dtype : {"float64", "float32"}, default "float64"
        The dtype the records will be kept in (what the cap is held to).
    kept : int, optional
        Steps of each sequence the records will keep (a window and stride; default all T).

    Returns
    -------
    transformers model
        Of transformers' own class (the config's ``architectures`` entry of the family, else
        the family's causal LM), in the config's dtype, eval mode, on the CPU.

    Raises
    ------
    FileNotFoundError, ValueError, TypeError
        One line each: what :func:`weight_headers` and the module docstring's checks refuse,
        ``layers`` outside ``config.json``'s ``num_hidden_layers`` and ids outside its
        ``vocab_size`` (both before a header is read), records over ``max_bytes`` or weights over
        this machine's memory (with the flag that lowers them); ``ids`` or ``layers`` with a
        ModelRequest.
    """
    max_bytes = _max_bytes(max_bytes)
    if isinstance(directory, ModelRequest):
        _given(directory, ids=ids, layers=layers)
        request = directory
    else:
        d = Path(directory)
        if not is_model_dir(d):
            raise FileNotFoundError(f"model must be a save_pretrained directory holding {CONFIG_FILE}; got '{d}'.")
        request = model_request(d, layers)  # from config.json: before a header is read
        if ids is not None:
            request = request.with_ids(ids, name="ids")
    d, ids, layers = request.directory, request.ids, request.layers
    headers = weight_headers(d)
    check_layer_count(request.config, headers, request.where, f"'{d}'")  # 2,000 layers would hang the build
    import torch

    from hiddenstate.core.threads import follow_policy

    follow_policy()  # torch loaded inside the CLI's thread limit: its pool follows it

    cls = getattr(offline_transformers(), request.class_name)
    config = request.config  # transformers' _from_config copies it
    if type(config) is not cls.config_class:  # a model_type whose config class is not the architecture's
        config = cls.config_class.from_dict(special_floats(request.cfg))
    source = f"the {request.class_name} in '{d}'"
    with torch.device("meta"):
        shell = cls._from_config(config)
    forms, ties = _expected(shell, headers, f"'{d}'")
    weights = sum(p.numel() * p.element_size() for p in shell.parameters()) + sum(
        e.nbytes for _, e in headers.values())  # the model, and the tensors read before they are copied into it
    if ids is not None:
        _check_records(shell, request.family, ids, layers, max_bytes, weights, source, record_dtype, kept)
    else:
        check_memory(f"loading {source}", weights, "Use a machine with more memory.")
    del shell
    if sys.byteorder != "little":
        raise ValueError("loading a model directory needs a little-endian machine (safetensors stores little-endian).")
    model = cls._from_config(config)
    model.load_state_dict(_state_dict(model, forms, ties, headers, f"'{d}'", torch), strict=True)
    return model.eval()


def open_request(directory, x, *, layers=None, max_bytes=MAX_BYTES, record_dtype="float64", window=None,
                 stride: int = 1):
    """``inspect_model(DIR, x)``: the directory's model and the checked request it was loaded by.

    Parameters
    ----------
    directory : str or os.PathLike
        A ``save_pretrained`` directory of a registered family (:func:`load_model_dir`).
    x : array_like of int, shape (T,) or (N, T), or str
        Token ids, or a text that the directory's ``tokenizer.json`` tokenises (:func:`tokenize`).
    layers : int or list of int, optional
        The recurrent layers to record (default all).
    max_bytes : int or None, default MAX_BYTES
        The cap on their records, checked before the model is built.
    record_dtype : {"float64", "float32"}, default "float64"
        The dtype the records will be kept in (what the cap is held to).
    window : (int, int), optional
        The positions the records will keep (:func:`~hiddenstate.interop.families.hooks.kept_steps`;
        default all), checked against the ids and held to the cap as such.
    stride : int, default 1
        Every ``stride``-th step of the window.

    Returns
    -------
    model : transformers model
    request : ModelRequest
        ``config.json``, the layers and the ids (N, T), each read and checked once.
    source : str
        What the report calls the model (``"transformers MambaForCausalLM from 'DIR'"``).

    Raises
    ------
    FileNotFoundError, ValueError, TypeError
        As :func:`open_model_dir`.
    """
    max_bytes = _max_bytes(max_bytes)  # before config.json is read: a cap of -5 bytes is no cap on the records
    shown = os.fsdecode(os.fspath(directory)) if isinstance(directory, (str, os.PathLike)) else repr(directory)
    if not is_model_dir(directory):
        run = any(os.path.isfile(os.path.join(shown, *p)) for p in (("meta.json",), ("checkpoint", "meta.json")))
        raise FileNotFoundError(f"model must be a model object or a transformers model directory ({CONFIG_FILE} and "
                                f"safetensors weights, as save_pretrained writes them); got '{shown}', which has no "
                                f"{CONFIG_FILE}" + (": it is a training run directory (meta.json): pass "
                                                    f"hiddenstate.train.load('{shown}').model" if run else "") + ".")
    request = model_request(directory, layers)  # config.json's refusals and num_hidden_layers before tokenising
    name = "x"
    if isinstance(x, str):
        x = tokenize(directory, x)
        name = f"x, tokenised by '{Path(directory) / TOKENIZER_FILE}',"
    request = request.with_ids(x, name=name)  # vocab_size before the model is built
    kept = len(range(request.ids.shape[1])[kept_steps(request.ids.shape[1], window, stride)])
    model = load_model_dir(request, max_bytes=max_bytes, record_dtype=record_dtype, kept=kept)
    return model, request, f"transformers {type(model).__name__} from '{shown}'"


def open_model_dir(directory, x, *, layers=None, max_bytes=MAX_BYTES):
    """``inspect_model(DIR, x)``: the directory's model and ``x`` as its token ids.

    Parameters
    ----------
    directory : str or os.PathLike
        A ``save_pretrained`` directory of a registered family (:func:`load_model_dir`).
    x : array_like of int, shape (T,) or (N, T), or str
        Token ids, or a text that the directory's ``tokenizer.json`` tokenises (:func:`tokenize`).
    layers : int or list of int, optional
        The recurrent layers to record (default all).
    max_bytes : int or None, default MAX_BYTES
        The cap on their records, checked before the model is built.

    Returns
    -------
    model : transformers model
    ids : ndarray of int64, shape (N, T)
    source : str
        What the report calls the model (``"transformers MambaForCausalLM from 'DIR'"``).

    Raises
    ------
    FileNotFoundError, ValueError, TypeError
        ``directory`` has no ``config.json`` (one line that says so, and what a training run
        directory takes instead); ``layers`` and then the ids (``x``, or the tokens of the text)
        held to ``config.json`` before the model is built; and as :func:`load_model_dir` and
        :func:`tokenize`.
    """
    model, request, source = open_request(directory, x, layers=layers, max_bytes=max_bytes)
    return model, request.ids, source
