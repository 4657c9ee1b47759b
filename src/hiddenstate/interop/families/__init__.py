"""Recurrent models of Hugging Face ``transformers``, one small module per family.

A *family* is one ``config.model_type`` whose recurrent layers our blocks compute exactly. Each
is a :class:`~hiddenstate.interop.families.registry.Family` record in its own module here;
:func:`family_of` finds a model's family (or refuses in one line naming the registered ones),
:func:`recompute_layers` runs the model itself and recomputes the chosen recurrent layers with
our block, every step recorded and each layer held to the model's own output
(:mod:`~hiddenstate.interop.families.hooks`). ``hiddenstate.inspect_model`` dispatches through
this registry; the analyses and the report read the records and the layer map, so adding a
family touches neither. Nothing here imports torch or transformers at module level.

Registered: mamba, mamba2, the Mamba-2 hybrids bamba, nemotron_h, granitemoehybrid, zamba2
(shared attention blocks) and falcon_h1 (attention and SSM side by side, muP multipliers), and
the Mamba-1 variants falcon_mamba, jamba, zamba (Mamba kinds); the delta-rule families qwen3_next,
olmo_hybrid (kind ``gated_delta``) and kimi_linear, glm5_next (its text backbone) and bailing_hybrid
(kind ``kda``, the last two with the safe gate); recurrent_gemma (kind
``rglru``), minimax (kind ``lightning``), lfm2, lfm2_moe and lfm3 (kind ``shortconv``),
xlstm (kind ``mlstm``) and rwkv (kind ``rwkv``); the Qwen3.5 kin of the gated delta rule with split
projections (``layout="qwen3_5"``): qwen3_5_text, qwen3_5 (multimodal, read through its text
backbone), qwen3_5_moe_text, qwen3_5_moe, qwen4_exp_text (a SiLU or sigmoid output gate), lara_mini, and the
MiniCPM-V composites on Qwen3.5's text backbone minicpmv4_6, minicpmv4_7, minicpm_ocr, and qwen4_exp
(multimodal, read through qwen4_exp_text's backbone), jev (a decision head on Qwen3.5's text backbone); inkling_text and inkling_mm_model (kind ``shortconv``:
residual depthwise causal convolutions, one of each layer's four recorded), inkling2_text, inkling2,
inkling2_loop_text, inkling2_loop (the same with an output scale; the looped layers and their message gates, a
recurrence over passes, named and not recorded); zaya (kind ``cca``: ZAYA's CCA projection, causal
convolutions over the queries and keys and a one-token delayed value, its output the attention's
queries, keys and values as one flattened view).

How to add a family
-------------------
Write ``families/<model_type>.py`` defining ``FAMILY = Family(...)`` and add the module to the
import and to ``_MODULES`` below. The fields:

``name``
    ``config.model_type`` (``"bamba"``).
``classes``
    The model class names it recognises, the causal LM and its base model
    (``("BambaForCausalLM", "BambaModel")``). A model is the family's when its class has one of
    these names, comes from ``package`` (default ``"transformers"``) and its
    ``config.model_type`` is ``name``.
``kind``
    Our block of its recurrent layers, the name of a registered :class:`hiddenstate.kinds.Kind`
    (a key of ``BLOCKS``): ``"mamba"`` (:class:`hiddenstate.Mamba`), ``"mamba2"``
    (:class:`hiddenstate.Mamba2`), ``"gated_delta"`` (:class:`hiddenstate.kinds.delta.block.GatedDeltaNet`)
    ``"kda"`` (:class:`hiddenstate.kinds.delta.block.KimiDeltaAttention`), ``"rglru"``
    (:class:`hiddenstate.kinds.rglru.block.RGLRUBlock`), ``"lightning"``
    (:class:`hiddenstate.kinds.lightning.block.LightningAttention`) or ``"shortconv"``
    (:class:`hiddenstate.kinds.shortconv.block.ShortConv`). The kind says how its block
    runs with every step recorded (``Kind.run``), which of the record's arrays are its states
    (``Kind.states``) and what the analyses read of it (``Kind.view``, a
    :class:`~hiddenstate.kinds.RecordView`); a new kind is one
    :func:`hiddenstate.kinds.register_kind` (its record names its analysis, a
    :class:`~hiddenstate.probe.layer_loop.LayerKind`, and its report card).
``layers(model) -> list of LayerInfo``
    The layer map: per layer of the stack, in order, ``LayerInfo(index, role, class_name,
    path, parts)``; ``role`` is ``"recurrent"`` (recorded), ``"attention"``, ``"mlp"``, ``"moe"``
    or another word; ``path`` the mixer's module path in the model as passed (what
    ``model.get_submodule`` reads); ``parts`` (optional) the layer's other modules the report
    shows, each ``(role, class_name, path)`` (Jamba's MoE feed-forward, Zamba's shared attention
    block). :func:`decoder_layer_map` builds it from the attribute names (or dotted paths) of a
    decoder layer, its ``parts=`` the parts.
``to_block(mixer, config) -> block``
    One recurrent mixer (a ``torch.nn.Module``) and the model's config onto our block: float64,
    ``batch_first=True``, the mixer's weights; a ValueError naming the option for anything the
    block does not compute. :func:`~hiddenstate.interop.families.blocks.mamba_block` (with the
    block's ``bcdt_norm``, ``norm_eps``, ``num_heads`` for FalconMamba's, Jamba's and Zamba's
    mixers) and :func:`~hiddenstate.interop.families.blocks.mamba2_block` read every
    ``MambaMixer`` / ``Mamba2Mixer``-like module.
``hooked(args, kwargs, output) -> (u, out)`` or ``(u, out, forward)`` (optional)
    The mixer's input and output (N, T, M) from what its forward hook sees; default its first
    argument (or ``hidden_states=``) and its output (a tuple's first item). ``forward``, a dict,
    is passed to the block's ``forward`` (RecurrentGemma's ``{"reset": position_ids == 0}``).
``rebuild(output, new) -> output`` (optional)
    What the mixer's forward hook returns when an intervention replaces the view ``hooked`` read;
    default ``new`` in place of the output (a tuple's first item). ZAYA's puts its edited
    ``[query | key | value]`` back as the three tensors its attention reads.
``notes`` (optional)
    What surrounds the mixer (norms, multipliers) that stays the model's own.

Example, a family whose mixer needs nothing beyond what ``mamba2_block`` reads (``bamba.py``
adds a named refusal of ``config.hidden_act`` and its MLP part)::

    from hiddenstate.interop.families.blocks import mamba2_block
    from hiddenstate.interop.families.registry import Family, decoder_layer_map

    FAMILY = Family(
        name="bamba",
        classes=("BambaForCausalLM", "BambaModel"),
        kind="mamba2",
        layers=lambda model: decoder_layer_map(model, {"mamba": "recurrent", "self_attn": "attention"}),
        to_block=lambda mixer, config: mamba2_block(mixer),
    )

What the registry gives (nothing of it changes per family)
----------------------------------------------------------
``family_of(model_or_config_or_model_type) -> Family`` (TypeError in one line naming the
registered families), ``find_family(...) -> Family | None``, ``registered() -> tuple of Family``,
``register(family)``; on a ``Family``: ``recognises(model)``, ``layer_map(model)`` (checked),
``mixers(model) -> {index: module}``, ``block(model, index)`` (a trainable float64 copy of one
recurrent mixer), ``convert(mixer, config)``.
``recompute_layers(model, ids, *, layers=None, max_bytes=MAX_BYTES, tol=None) -> Recomputed``
(``family``, ``layer_map``, ``layers``, ``records``, ``errors``, ``tolerance``, ``dtype``);
``estimate_bytes(model, T, N, *, layers=None) -> {index: bytes}``; ``tolerance(dtype)``.
``hiddenstate.inspect_model(model, ids, text=..., layers=..., max_bytes=..., out=...)`` and
:func:`hiddenstate.pipelines.family_inspection.analyze_family_model` run these and the Mamba analyses.

Then a test builds a tiny random model of the family from a small config (CPU, float32, no
download) and checks that ``recompute_layers(model, ids)`` passes (every recurrent layer within
the tolerance of the model's own output) and that the last recorded SSM state equals the
model's cache (``tests/test_families.py`` does this for every registered family).
"""

from hiddenstate.interop.families import (
    bailing_hybrid,
    bamba,
    falcon_h1,
    falcon_mamba,
    glm5_next,
    granitemoehybrid,
    inkling2,
    inkling2_loop,
    inkling2_loop_text,
    inkling2_text,
    inkling_mm_model,
    inkling_text,
    jamba,
    jev,
    kimi_linear,
    lara_mini,
    lfm2,
    lfm2_moe,
    lfm3,
    mamba,
    mamba2,
    minicpm_ocr,
    minicpmv4_6,
    minicpmv4_7,
    minimax,
    nemotron_h,
    olmo_hybrid,
    qwen3_5,
    qwen3_5_moe,
    qwen3_5_moe_text,
    qwen3_5_text,
    qwen3_next,
    qwen4_exp,
    qwen4_exp_text,
    recurrent_gemma,
    rwkv,
    xlstm,
    zamba,
    zamba2,
    zaya,
)
from hiddenstate.interop.families.hooks import MAX_BYTES, Recomputed, estimate_bytes, recompute_layers, tolerance
from hiddenstate.interop.families.registry import (
    BLOCKS,
    Family,
    LayerInfo,
    decoder_layer_map,
    family_of,
    find_family,
    register,
    registered,
)

_MODULES = (mamba, mamba2, bamba, nemotron_h, granitemoehybrid, falcon_mamba, jamba, zamba, zamba2, falcon_h1,
            qwen3_next, olmo_hybrid, kimi_linear, recurrent_gemma, minimax, lfm2,
            xlstm, rwkv, lfm2_moe, lfm3, glm5_next, bailing_hybrid,
            qwen3_5_text, qwen3_5, qwen3_5_moe_text, qwen3_5_moe, qwen4_exp_text, lara_mini,
            minicpmv4_6, minicpmv4_7, minicpm_ocr, qwen4_exp,
            inkling_text, inkling_mm_model, jev, inkling2_text, inkling2, inkling2_loop_text, inkling2_loop, zaya)
for _module in _MODULES:
    register(_module.FAMILY)

__all__ = ["BLOCKS", "MAX_BYTES", "Family", "LayerInfo", "Recomputed", "decoder_layer_map", "estimate_bytes",
           "family_of", "find_family", "recompute_layers", "register", "registered", "tolerance"]
