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
2. Every shard's header is read and checked (:func:`~hiddenstate.interop.safetensors_header.read_header`:
   a regular file, a symbolic link only to one (a dangling link, a loop, a FIFO or a device is
   refused unopened, as every reader of the package does), offsets that tile the file exactly);
   the index's shard names must be plain file names in the directory, every shard it names must
   exist, and every tensor must lie in the shard the index says.
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

import json
import os
import sys
from pathlib import Path

import numpy as np

from hiddenstate.files import open_regular
from hiddenstate.interop.families.hooks import MAX_BYTES, estimate_bytes
from hiddenstate.interop.families.registry import find_family, registered
from hiddenstate.interop.safetensors_header import read_header
from hiddenstate.resources import check_memory, format_bytes

__all__ = ["CONFIG_FILE", "INDEX_FILE", "MAX_JSON_BYTES", "TOKENIZER_FILE", "WEIGHTS_FILE", "is_model_dir",
           "load_model_dir", "open_model_dir", "tokenize", "weight_headers"]

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
TOKENIZER_FILE = "tokenizer.json"
#: The largest ``config.json`` or index read.
MAX_JSON_BYTES = 50_000_000
_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
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


def _offline():
    """Transformers and the hub client never reach a network: set before transformers is imported."""
    os.environ.update(_OFFLINE)
    import transformers

    return transformers


def _json(path: Path, what: str) -> dict:
    """A JSON object from a regular file of at most MAX_JSON_BYTES, with one-line errors."""
    with open_regular(path, name=what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_JSON_BYTES:
            raise ValueError(f"{what} must be at most {format_bytes(MAX_JSON_BYTES)}; got '{path}' of "
                             f"{format_bytes(size)}.")
        raw = f.read()
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ValueError(f"{what} must be a JSON object; got '{path}', which is not JSON "
                         f"({' '.join(str(error).split())[:200]}).") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{what} must be a JSON object; got '{path}', a JSON {type(obj).__name__}.")
    return obj


def _special_floats(obj):
    """transformers' JSON spelling of inf and NaN in a config (``{"__float__": "Infinity"}``) read back as floats."""
    if isinstance(obj, dict):
        if set(obj) == {"__float__"} and obj["__float__"] in ("Infinity", "-Infinity", "NaN"):
            return float(obj["__float__"].replace("Infinity", "inf"))
        return {k: _special_floats(v) for k, v in obj.items()}
    return [_special_floats(v) for v in obj] if isinstance(obj, list) else obj


def _family(directory: Path, cfg: dict):
    """The family of a config.json and the transformers class to build, or a one-line refusal."""
    where = f"'{directory / CONFIG_FILE}'"
    if "auto_map" in cfg:
        raise ValueError(f"{where} asks for custom code (auto_map {cfg['auto_map']!r}"[:300] + "); hiddenstate builds "
                         "transformers' own classes only and never runs code from a model directory "
                         "(trust_remote_code stays off).")
    kind = cfg.get("model_type")
    names = ", ".join(f.name for f in registered())
    family = find_family(kind) if isinstance(kind, str) else None
    if family is None:
        raise ValueError(f"{where} must have the model_type of a registered recurrent family ({names}); got "
                         f"{kind!r}.")
    archs = cfg.get("architectures") or [family.classes[0]]
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ValueError(f"{where} must list its architectures as class names; got {archs!r}"[:300] + ".")
    cls = next((a for a in archs if a in family.classes), None)
    if cls is None:
        raise ValueError(f"{where} must name one of the {family.name} family's classes "
                         f"({', '.join(family.classes)}) in its architectures; got {archs}.")
    return family, cls


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
    wmap = _json(index, "the shard index").get("weight_map")
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


def _stored_form(model, key: str, tensor) -> dict:
    """How ``save_pretrained`` writes one state-dict entry: ``{stored name: tensor}``, by transformers' own mapping.

    transformers 5 renames some families' weights on saving and splits merged ones (NemotronH's
    ``backbone.`` prefix, its experts one tensor each): ``revert_weight_conversion`` is what
    ``save_pretrained`` applies, here to one entry.
    """
    from transformers.core_model_loading import revert_weight_conversion

    try:
        return revert_weight_conversion(model, {key: tensor})
    except Exception as error:  # a many-to-one conversion cannot be inverted one entry at a time
        raise ValueError(f"the {type(model).__name__}'s weight {key!r} must be stored as transformers saves it, one "
                         f"entry at a time; its conversion failed ({type(error).__name__}: {error}).") from None


def _expected(model, headers: dict, source: str) -> tuple:
    """``(forms, ties)``: each state-dict entry's stored names and shapes, a tied one's tie; held to the headers."""
    params = dict(model.named_parameters(remove_duplicate=False))
    aliases = {}
    for name, p in params.items():
        aliases.setdefault(id(p), []).append(name)
    forms = {k: {n: tuple(t.shape) for n, t in _stored_form(model, k, v).items()} for k, v in model.state_dict().items()}
    ties, missing = {}, []
    for k, form in forms.items():
        if all(n in headers for n in form):
            continue
        tie = next((a for a in aliases.get(id(params.get(k)), ()) if a != k and all(n in headers for n in forms[a])),
                   None)
        (missing.extend(n for n in form if n not in headers) if tie is None else ties.__setitem__(k, tie))
    for k in ties:
        del forms[k]
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
    """The model's state dict from the stored tensors: each entry's stored pieces put back where its conversion took them.

    The conversion of an entry only moves its elements (renames, splits, stacks, transposes), so
    running it on the entry's element indices says where each stored element comes from; that
    map must be a permutation (every element once), and it puts the stored values back.
    """
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    out = {}
    for k, form in forms.items():
        stored = _read(headers, list(form), torch)
        numel = int(np.prod(shapes[k], dtype=np.int64))
        ids = torch.arange(numel, dtype=torch.int64).reshape(shapes[k])
        where = _stored_form(model, k, ids)
        if list(where) == [k] and torch.equal(where[k], ids):
            out[k] = stored[k]
            continue
        flat = torch.cat([where[n].reshape(-1) for n in form])
        if set(where) != set(form) or flat.numel() != numel or not bool((torch.bincount(flat, minlength=numel) == 1).all()):
            raise ValueError(f"{source}: transformers' conversion of the weight {k!r} must move each element once; it "
                             "does not, so the stored tensors cannot be put back.")
        value = torch.empty(numel, dtype=stored[next(iter(form))].dtype)
        for n in form:
            value[where[n].reshape(-1)] = stored[n].reshape(-1).to(value.dtype)
        out[k] = value.reshape(shapes[k])
    for k, tie in ties.items():
        out[k] = out[tie]
    return out


def _ids(x, vocab):
    """Token ids (N, T) from ``x``, checked: integers in [0, vocab)."""
    arr = x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
    if arr.dtype == bool or arr.dtype.kind not in "iu":
        raise TypeError(f"x must be integer token ids (T,) or (N, T) (or a str, with a {TOKENIZER_FILE} in the model "
                        f"directory); got dtype {arr.dtype}.")
    arr = arr[None] if arr.ndim == 1 else arr
    if arr.ndim != 2 or 0 in arr.shape:
        raise ValueError(f"x must be token ids of shape (T,) or (N, T), T, N >= 1; got shape {np.shape(x)}.")
    if isinstance(vocab, int) and (arr.min() < 0 or arr.max() >= vocab):
        raise ValueError(f"x must hold token ids in [0, vocab_size={vocab}); got values in [{arr.min()}, {arr.max()}].")
    return arr.astype(np.int64)


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
    if not os.path.lexists(path):
        raise ValueError(f"'{directory}' has no {TOKENIZER_FILE} to tokenise the text with; pass token ids instead "
                         "(--ids FILE.npy of shape (T,) or (N, T) on the command line, an int array in Python).")
    with open_regular(path, name="the tokenizer"):
        pass  # a FIFO or device is refused before the tokenizers library opens it
    tok = _offline().PreTrainedTokenizerFast(tokenizer_file=os.fspath(path))
    ids = np.asarray(tok(text, add_special_tokens=False)["input_ids"], dtype=np.int64)
    if ids.size == 0:
        raise ValueError(f"the text must give at least one token; '{path}' made none of {len(text)} characters.")
    return ids[None]


def _check_records(model, family, ids, layers, max_bytes, weights: int, source: str) -> None:
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
        per = estimate_bytes(model, T, N, layers=layers)
    except ValueError as error:  # a family that checks buffers the zeroed stand-in lacks (Falcon-H1's mup_vector)
        if str(error).startswith("layers must"):
            raise
        check_memory(f"loading {source}", weights, "Use a machine with more memory.")
        return  # recompute_layers checks the records before the model runs
    total = sum(per.values()) + max(per.values())
    if max_bytes is not None and total > max_bytes:
        raise ValueError(f"recording layers {sorted(per)} of {source} on T={T:,} tokens of N={N} sequence(s) would "
                         f"take about {format_bytes(total)} (every step's state, float64; up to "
                         f"{format_bytes(max(per.values()))} a layer), over the cap of {format_bytes(max_bytes)}: "
                         f"record fewer layers (--layers {min(per)} on the command line, layers=[{min(per)}] in "
                         "Python) or give fewer tokens.")
    check_memory(f"loading {source} ({format_bytes(weights)} of weights) and recording {len(per)} layer(s) "
                 f"({format_bytes(total)})", weights + total, "Record fewer layers (--layers, layers=) or give "
                 "fewer tokens; or use a machine with more memory.")


def load_model_dir(directory, ids=None, *, layers=None, max_bytes=MAX_BYTES):
    """Build a registered family's transformers model from a ``save_pretrained`` directory, offline and checked.

    Parameters
    ----------
    directory : str or os.PathLike
        ``config.json`` and ``model.safetensors`` (or the shards of
        ``model.safetensors.index.json``); see the module docstring for every check.
    ids : ndarray of int, shape (N, T), optional
        The ids the model will run on: with them, the records of ``layers`` are checked against
        ``max_bytes`` before the model is built.
    layers : int or list of int, optional
        The recurrent layers that will be recorded (default all).
    max_bytes : int or None, default MAX_BYTES (4 GiB)
        The cap on the records (None: none).

    Returns
    -------
    transformers model
        Of transformers' own class (the config's ``architectures`` entry of the family, else
        the family's causal LM), in the config's dtype, eval mode, on the CPU.

    Raises
    ------
    FileNotFoundError, ValueError, TypeError
        One line each: what :func:`weight_headers` and the module docstring's checks refuse,
        ids out of the vocabulary, records over ``max_bytes`` or weights over this machine's
        memory (with the flag that lowers them).
    """
    d = Path(directory)
    if not is_model_dir(d):
        raise FileNotFoundError(f"model must be a save_pretrained directory holding {CONFIG_FILE}; got '{d}'.")
    cfg = _json(d / CONFIG_FILE, "config.json")
    family, cls_name = _family(d, cfg)
    headers = weight_headers(d)
    transformers = _offline()
    import torch

    cls = getattr(transformers, cls_name)
    config = cls.config_class.from_dict(_special_floats(cfg))
    source = f"the {cls_name} in '{d}'"
    if ids is not None:
        ids = _ids(ids, getattr(config, "vocab_size", None))
    with torch.device("meta"):
        shell = cls._from_config(config)
    forms, ties = _expected(shell, headers, f"'{d}'")
    weights = sum(p.numel() * p.element_size() for p in shell.parameters()) + sum(
        e.nbytes for _, e in headers.values())  # the model, and the tensors read before they are copied into it
    if ids is not None:
        _check_records(shell, family, ids, layers, max_bytes, weights, source)
    else:
        check_memory(f"loading {source}", weights, "Use a machine with more memory.")
    del shell
    if sys.byteorder != "little":
        raise ValueError("loading a model directory needs a little-endian machine (safetensors stores little-endian).")
    model = cls._from_config(config)
    model.load_state_dict(_state_dict(model, forms, ties, headers, f"'{d}'", torch), strict=True)
    return model.eval()


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
        As :func:`load_model_dir` and :func:`tokenize`.
    """
    if not is_model_dir(directory):
        raise FileNotFoundError(f"model must be a model object or a save_pretrained directory holding {CONFIG_FILE}; "
                                f"got '{os.fsdecode(os.fspath(directory))}'.")
    _family(Path(directory), _json(Path(directory) / CONFIG_FILE, "config.json"))  # refusals before tokenising
    ids = tokenize(directory, x) if isinstance(x, str) else x
    model = load_model_dir(directory, ids, layers=layers, max_bytes=max_bytes)
    ids = _ids(ids, getattr(model.config, "vocab_size", None))
    return model, ids, f"transformers {type(model).__name__} from '{os.fsdecode(os.fspath(directory))}'"
