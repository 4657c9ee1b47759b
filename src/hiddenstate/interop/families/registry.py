"""The family record and the registry: which transformers model is which family, and its layer map.

A :class:`Family` says, for one ``config.model_type`` of Hugging Face ``transformers``, how to
recognise its models, which of their layers are recurrent, and how one recurrent mixer becomes our
block; :func:`family_of` finds it, :func:`registered` lists them. Nothing here imports torch or
transformers: a model is recognised by its class's name, the package its class comes from and
its ``config.model_type``, and the family functions only walk the model's attributes.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from hiddenstate.kinds import BLOCKS, get_kind

__all__ = ["BLOCKS", "ROLES", "Family", "LayerInfo", "decoder_layer_map", "family_of", "find_family",
           "hooked_hidden_states", "rebuilt_output", "register", "registered"]

# BLOCKS (from :mod:`hiddenstate.kinds`): our block of each ``Family.kind``, what :attr:`Family.to_block` must
# return for that kind; a kind registered there (:func:`hiddenstate.kinds.register_kind`) is a kind here.

#: The roles a layer map uses (a family may use another word; only "recurrent" layers are recorded).
ROLES = ("recurrent", "attention", "mlp", "moe")


class LayerInfo(NamedTuple):
    """One layer of a model's layer map.

    Attributes
    ----------
    index : int
        The layer's index in the model's stack (``model.base_model.layers[index]``).
    role : str
        ``"recurrent"`` (a mixer our block recomputes), ``"attention"``, ``"mlp"``, ``"moe"``, ...
    class_name : str
        The class of the layer's mixer (``"BambaMixer"``, ``"BambaAttention"``).
    path : str
        The mixer's module path in the model as passed (``"model.layers.3.mamba"``), as
        ``model.get_submodule(path)`` reads it.
    parts : tuple of (str, str, str), default ()
        The layer's other modules the map shows, each ``(role, class_name, path)``: a Jamba
        layer's feed-forward (``("moe", "JambaSparseMoeBlock", "model.layers.1.feed_forward")``),
        a Zamba hybrid layer's shared attention block. Never recorded; only the report reads them.
    """

    index: int
    role: str
    class_name: str
    path: str
    parts: tuple = ()


def hooked_hidden_states(args, kwargs, output):
    """The default :attr:`Family.hooked`: the mixer's first argument (or ``hidden_states=``) and its output.

    Parameters
    ----------
    args : tuple
        The positional arguments the mixer was called with (what a forward hook sees).
    kwargs : dict
        Its keyword arguments.
    output : torch.Tensor or tuple
        What it returned.

    Returns
    -------
    u : torch.Tensor of shape (N, T, M)
        The mixer's input.
    out : torch.Tensor of shape (N, T, M)
        Its output (the first item of a tuple).
    """
    u = args[0] if args else kwargs["hidden_states"]
    return u, output[0] if isinstance(output, tuple) else output


def rebuilt_output(output, new):
    """The default :attr:`Family.rebuild`: ``new`` in place of the mixer's output (a tuple's first item).

    Parameters
    ----------
    output : torch.Tensor or tuple
        What the mixer returned.
    new : torch.Tensor of shape (N, T, M')
        The replacing view, the shape and dtype of what :attr:`Family.hooked` read as ``out``.

    Returns
    -------
    torch.Tensor or tuple
        ``new``, or ``(new, *output[1:])``.
    """
    return (new, *output[1:]) if isinstance(output, tuple) else new


@dataclass(frozen=True, repr=False)
class Family:
    """One family of transformers models whose recurrent layers our block computes.

    Attributes
    ----------
    name : str
        The family's ``config.model_type`` (``"bamba"``).
    classes : tuple of str
        The model class names it recognises (``("BambaForCausalLM", "BambaModel")``): a model is
        of the family when its class has one of these names, comes from the package
        ``package`` and its ``config.model_type`` is ``name``.
    kind : str
        Our block of its recurrent layers, a registered :class:`hiddenstate.kinds.Kind`'s name, a
        key of ``BLOCKS`` (``"mamba"``, ``"mamba2"``, ``"gated_delta"``, ``"kda"``,
        ``"rglru"``, ``"lightning"``, ``"shortconv"``): the kind says
        how the block is run with every step recorded and what of its record the analyses read.
    layers : callable
        ``layers(model) -> list of LayerInfo``: the layer map, one entry per layer of the
        model's stack, in order (:func:`decoder_layer_map` builds the usual one).
    to_block : callable
        ``to_block(mixer, config) -> block``: one recurrent mixer's weights and sizes as our
        block (of ``BLOCKS[kind]``), float64, ``batch_first=True``; a ValueError
        for what the block does not compute (:mod:`hiddenstate.interop.families.blocks`).
    hooked : callable, optional
        ``hooked(args, kwargs, output) -> (u, out)`` or ``(u, out, forward)``: the mixer's input
        (N, T, M) and output (N, T, M) from what a forward hook sees, and optionally a dict of
        keywords for the block's ``forward`` (``reset``); default the first argument (or
        ``hidden_states=``) and the output (the first item of a tuple). ``out`` is (N, T, M')
        where the block's ``d_out`` says M' (ZAYA's queries, keys and values flattened).
    rebuild : callable, optional
        ``rebuild(output, new) -> output``: what the mixer's forward hook returns when the
        interventions replace the view ``hooked`` read (``new``, a tensor of its shape and dtype);
        default :func:`rebuilt_output` (``new`` in place of the output or a tuple's first item).
    package : str, default "transformers"
        The top-level package the model classes come from.
    notes : str, default ""
        What surrounds the mixer that the recomputation need not know (norms, multipliers
        outside it), for the docs.
    tiny_config : callable, optional
        ``tiny_config() -> transformers config``: a small config of the family (a few layers,
        recurrent and not, widths of 8-16) whose random-weight model builds and runs on a CPU in
        well under a second; the README's table of families and the directory tests build one
        model of every family that has it (``classes[0]``, the causal LM, from this config).
    run : callable, optional
        ``run(model, ids) -> logits``: the model's forward pass on token ids (N, T) (a torch
        int64 tensor on its device), ``use_cache=False``, returning the scores the interventions
        compare, a torch tensor (N, T, V); default ``model(input_ids=ids, use_cache=False).logits``.
        For a model whose own forward needs more than token ids (JEV's decision head: the marks
        of its questions), the run of its text backbone and head on every position.
    head : callable, optional
        With ``run``: ``head(model, hidden) -> scores``, the head on the text backbone's
        (``model.model``) last hidden states (N, T, M), so that the cached paths (snapshots, the
        cache checker) run the backbone with its cache and score what it returns.
    """

    name: str
    classes: tuple
    kind: str
    layers: Callable[[Any], list]
    to_block: Callable[[Any, Any], Any]
    hooked: Callable = field(default_factory=lambda: hooked_hidden_states)
    rebuild: Callable = field(default_factory=lambda: rebuilt_output)
    package: str = "transformers"
    notes: str = ""
    tiny_config: Callable | None = None
    run: Callable | None = None
    head: Callable | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str (the config's model_type); got {self.name!r}.")
        if not isinstance(self.classes, tuple) or not self.classes or not all(isinstance(c, str) for c in self.classes):
            raise TypeError(f"classes must be a non-empty tuple of class names; got {self.classes!r}.")
        get_kind(self.kind)  # a ValueError naming the registered kinds
        for what in ("layers", "to_block", "hooked", "rebuild"):
            if not callable(getattr(self, what)):
                raise TypeError(f"{what} must be callable; got {type(getattr(self, what)).__name__}.")
        for what in ("tiny_config", "run"):
            if getattr(self, what) is not None and not callable(getattr(self, what)):
                raise TypeError(f"{what} must be callable or None; got {type(getattr(self, what)).__name__}.")

    def __repr__(self) -> str:
        return f"Family({self.name!r}, kind={self.kind!r}, classes={self.classes!r})"

    def recognises(self, model) -> bool:
        """Whether ``model`` is one of this family's models (class name, package, ``config.model_type``).

        Parameters
        ----------
        model : object

        Returns
        -------
        bool
        """
        cls = type(model)
        return (cls.__name__ in self.classes and cls.__module__.split(".")[0] == self.package
                and getattr(getattr(model, "config", None), "model_type", None) == self.name)

    def forward(self, model, ids):
        """The model's forward pass on ``ids`` (``use_cache=False``) as the recomputation runs it.

        Parameters
        ----------
        model : a model of this family (its base model too)
        ids : torch.Tensor of int64, shape (N, T)
            On the model's device.

        Returns
        -------
        object
            :attr:`run`'s scores, else the model's own output (a base model's has no logits).
            The caller chooses the grad mode (``torch.no_grad()`` in the recomputation).
        """
        return self.run(model, ids) if self.run is not None else model(input_ids=ids, use_cache=False)

    def logits(self, model, ids):
        """The scores the interventions compare: :attr:`run`, or the model's ``.logits``.

        Parameters
        ----------
        model : a model of this family with a head
        ids : torch.Tensor of int64, shape (N, T)

        Returns
        -------
        torch.Tensor of shape (N, T, V)
        """
        out = self.forward(model, ids)
        return out if self.run is not None else out.logits

    def layer_map(self, model) -> tuple:
        """The model's layers, checked: indices 0 .. L-1 in order, at least one recurrent.

        Parameters
        ----------
        model : a model of this family

        Returns
        -------
        tuple of LayerInfo

        Raises
        ------
        TypeError
            ``model`` is not one of this family's models (:meth:`recognises`): a model type, a
            config, another model.
        ValueError
            The family's ``layers`` gave no recurrent layer or indices out of order.
        """
        if not self.recognises(model):  # a model_type string, a config, anything else: no layers to read
            kind = getattr(getattr(model, "config", None), "model_type", None)
            raise TypeError(f"model must be a {self.package} {' or '.join(self.classes)} (model_type {self.name!r}); "
                            f"got {type(model).__name__}" + (f" of model_type {kind!r}." if kind else "."))
        entries = tuple(LayerInfo(*e) for e in self.layers(model))
        if [e.index for e in entries] != list(range(len(entries))):
            raise ValueError(f"the {self.name} family's layer map must list layers 0 .. L-1 in order; got indices "
                             f"{[e.index for e in entries]}.")
        if not any(e.role == "recurrent" for e in entries):
            raise ValueError(f"model must have at least one recurrent layer; this {self.name} model's layer map has "
                             f"none ({', '.join(sorted({e.role for e in entries}))}).")
        return entries

    def mixers(self, model) -> dict:
        """The recurrent mixer modules, by layer index (the map's ``"recurrent"`` entries).

        Parameters
        ----------
        model : a model of this family

        Returns
        -------
        dict of int to torch.nn.Module

        Raises
        ------
        TypeError, ValueError
            As :meth:`layer_map`.
        """
        return {e.index: model.get_submodule(e.path) for e in self.layer_map(model) if e.role == "recurrent"}

    def block(self, model, index: int):
        """Our block of the recurrent layer ``index`` (float64, ``batch_first=True``).

        Parameters
        ----------
        model : a model of this family
        index : int
            A recurrent layer's index.

        Returns
        -------
        block
            Of ``BLOCKS[kind]`` (Mamba, Mamba2, GatedDeltaNet, ...); a trainable copy of the mixer (its weights are not shared).

        Raises
        ------
        ValueError
            ``index`` is not a recurrent layer; what the block does not compute (from ``to_block``).
        TypeError
            ``index`` is not an int; ``to_block`` returned another type than ``BLOCKS[kind]``.
        """
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (numbers.Integral, np.integer)):
            raise TypeError(f"index must be a recurrent layer's index (an int); got {type(index).__name__} "
                            f"{index!r:.80}.")  # True would be read as layer 1, 0.0 as layer 0
        mixers = self.mixers(model)
        if index not in mixers:
            raise ValueError(f"index must be a recurrent layer of this {self.name} model ({sorted(mixers)}); got "
                             f"{index!r}.")
        return self.convert(mixers[index], model.config)

    def convert(self, mixer, config):
        """``to_block(mixer, config)``, checked to be of ``BLOCKS[kind]``.

        Parameters
        ----------
        mixer : torch.nn.Module
            One of the model's recurrent mixers (:meth:`mixers`).
        config : transformers config
            The model's config.

        Returns
        -------
        block
            Of ``BLOCKS[kind]``.

        Raises
        ------
        TypeError
            ``to_block`` returned another type than ``BLOCKS[kind]``.
        ValueError
            From ``to_block``: what our block does not compute.
        """
        blk = self.to_block(mixer, config)
        if not isinstance(blk, BLOCKS[self.kind]):
            raise TypeError(f"the {self.name} family's to_block must return a {BLOCKS[self.kind].__name__} (kind "
                            f"{self.kind!r}); got {type(blk).__name__}.")
        return blk


_REGISTRY: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add ``family`` to the registry (its ``name`` must be new).

    Parameters
    ----------
    family : Family

    Returns
    -------
    Family
        ``family``.

    Raises
    ------
    TypeError
        Not a Family.
    ValueError
        A family of that name is registered already.
    """
    if not isinstance(family, Family):
        raise TypeError(f"family must be a Family; got {type(family).__name__}.")
    if family.name in _REGISTRY:
        raise ValueError(f"family.name must be new; {family.name!r} is registered already.")
    _REGISTRY[family.name] = family
    return family


def registered() -> tuple:
    """The registered families, in the order they were registered.

    Returns
    -------
    tuple of Family
    """
    return tuple(_REGISTRY.values())


def find_family(model) -> Family | None:
    """The family of a model, a config or a ``model_type``; None when none is registered.

    Parameters
    ----------
    model : transformers model, transformers config, or str
        A model is matched by :meth:`Family.recognises`; a config (an object with
        ``model_type``) or a str by the model type alone.

    Returns
    -------
    Family or None
    """
    if isinstance(model, str):
        return _REGISTRY.get(model)
    if type(model).__name__.endswith("Config") and isinstance(getattr(model, "model_type", None), str):
        return _REGISTRY.get(model.model_type)
    return next((f for f in _REGISTRY.values() if f.recognises(model)), None)


def family_of(model) -> Family:
    """The family of a model, a config or a ``model_type``, or a one-line TypeError naming the registered ones.

    Parameters
    ----------
    model : transformers model, transformers config, or str

    Returns
    -------
    Family

    Raises
    ------
    TypeError
        Nothing registered recognises ``model``.
    """
    found = find_family(model)
    if found is not None:
        return found
    names = ", ".join(_REGISTRY)  # the model types (their classes: registered()); all classes made a 2,100-char line
    if isinstance(model, str):
        got = f"model_type {model!r}"
    else:
        cls = type(model)
        kind = getattr(getattr(model, "config", model), "model_type", None)
        got = f"{cls.__module__.split('.')[0]} {cls.__name__}" + (f" (model_type {kind!r})" if kind else "")
    raise TypeError(f"model must be of a registered recurrent family (model_type {names}; their classes: "
                    f"hiddenstate.interop.families.registered()); got {got}.")


def _attr(obj, dotted: str):
    """``obj.a.b`` for ``dotted`` ``"a.b"``; None where a link is missing or None."""
    for name in dotted.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


#: A decoder layer's feed-forward attributes, tried when a family names no ``parts`` (the first present is shown).
_FEED_FORWARD = ("mlp", "feed_forward", "block_sparse_moe", "moe", "ffn", "ffn_layer", "mlp_block")


def _ffn_role(layer, index) -> str:
    """``"moe"`` for a mixture of experts (its class or its attributes say experts), else ``"mlp"``."""
    module = next(_attr(layer, a) for a in _FEED_FORWARD if _attr(layer, a) is not None)
    name = type(module).__name__.lower()
    return "moe" if ("moe" in name or "sparse" in name or "expert" in name or hasattr(module, "experts")) else "mlp"


def _default_parts(layer, mixer) -> dict:
    """The parts a family that names none shows: the layer's first feed-forward attribute (MLP or MoE), if any."""
    attr = next((a for a in _FEED_FORWARD if _attr(layer, a) is not None and _attr(layer, a) is not mixer), None)
    return {} if attr is None else {attr: _ffn_role}


def decoder_layer_map(model, roles: dict, *, stack: str = "layers", parts: dict | None = None) -> list:
    """The usual layer map: per layer of ``model.base_model.<stack>``, its first present attribute of ``roles``.

    Parameters
    ----------
    model : transformers model
        As passed (a ``...ForCausalLM`` or its base model); ``model.base_model`` holds the stack.
    roles : dict of str to str
        Attribute of a decoder layer -> its role, tried in order; the first attribute that is
        present and not None is the layer's mixer (Bamba: ``{"mamba": "recurrent",
        "self_attn": "attention"}``). An attribute may be a dotted path (Zamba's hybrid layers:
        ``"mamba_decoder.mamba"``). A role may also be a callable ``role(layer, index) -> str``
        (a layer whose one attribute ``mixer`` is of several kinds).
    stack : str, default "layers"
        The attribute (or dotted path) of the base model that holds the layers (a multimodal
        model's text stack: ``"language_model.layers"``).
    parts : dict of str to str, optional
        The layer's other modules to show, attribute (or dotted path) -> role or
        ``role(layer, index)``; every one present becomes an entry of :attr:`LayerInfo.parts`
        (Jamba: ``{"feed_forward": ...}`` giving ``"moe"`` or ``"mlp"``). None: the layer's first
        feed-forward attribute of ``mlp``, ``feed_forward``, ``block_sparse_moe``, ``moe``, ``ffn``,
        ``ffn_layer``, ``mlp_block``, as ``"moe"`` when its class or an ``experts`` attribute says experts, else
        ``"mlp"`` (every family's map lists its MLP or MoE); ``{}``: none.

    Returns
    -------
    list of LayerInfo

    Raises
    ------
    ValueError
        A layer has none of the attributes.
    """
    paths: dict = {}
    for name, m in model.named_modules(remove_duplicate=False):  # a module shared by layers: its first path
        paths.setdefault(id(m), name)
    out = []
    for i, layer in enumerate(_attr(model.base_model, stack) or ()):
        attr = next((a for a in roles if _attr(layer, a) is not None), None)
        if attr is None:
            raise ValueError(f"model.base_model.{stack}[{i}] must have one of the attributes {list(roles)}; its "
                             f"{type(layer).__name__} has none.")
        mixer = _attr(layer, attr)
        role = roles[attr](layer, i) if callable(roles[attr]) else roles[attr]
        extra = []
        for a, r in (_default_parts(layer, mixer) if parts is None else parts).items():
            module = _attr(layer, a)
            if module is not None:
                extra.append((r(layer, i) if callable(r) else r, type(module).__name__, paths[id(module)]))
        out.append(LayerInfo(i, role, type(mixer).__name__, paths[id(mixer)], tuple(extra)))
    return out
