"""Recurrent layers of a transformers model recomputed exactly, with every step's state: :func:`recompute_layers`.

Attention, MLP and MoE layers are not re-implemented: the transformers model itself runs on the
token ids (``torch.no_grad()``, ``use_cache=False``, eval mode), a forward hook on each chosen
recurrent mixer keeps what it read and what it returned, and our block (the family's
:attr:`~hiddenstate.interop.families.registry.Family.to_block`, float64) recomputes that layer
from the same input with ``record=True``: every step's SSM and convolution state and selective
parameters. The recomputed output is held to the one the hook saw, layer by layer:

    error = max |ours - theirs| / max |theirs|            (over the layer's whole (N, T, M) output)

and a layer above :func:`tolerance` for the model's dtype is refused with its figure, never
analysed silently.

**The tolerance.** transformers' Mamba mixers compute in float32 part of the way whatever the
model's dtype (``A = -exp(A_log.float())``, the gated norm in float32) and round their output to
the model's dtype, so the bound is ``8 eps(dtype) + 1000 eps(float32)`` (1.2e-4 for a float32 or
float64 model, 8.0e-3 for float16, 6.3e-2 for bfloat16). Measured on random weights (one
sequence, 2 CPUs), the worst layer's error: a 4-layer ``MambaForCausalLM`` of the 130M width
(``hidden_size`` 768): 9.8e-7 in float32 (8 eps) at T = 512 and 1.1e-6 at T = 2,048, 4.9e-8
in float64 at T = 2,048 (the float32 parts), 1.5e-3 in float16 (1.6 eps) and 1.3e-2 in bfloat16
(1.6 eps) at T = 512. A 4-layer ``BambaForCausalLM`` (``hidden_size`` 256, 3 Mamba-2 layers
of 8 heads x 64 x 64, chunk 64) drawn with ``initializer_range=0.3``, so that the SSM's readout
``C h`` outweighs the skip ``D x`` 900 times (at transformers' default 0.02 it is 1/1000 of it,
and the output would hardly test the recurrence): 3.5e-6 in float32 at T = 512, 1.4e-5 at
2,048, 8.0e-6 (its last layer) at 8,192 (about 100 eps, not growing with T), 1.2e-5 in float64
at 2,048, 1.2e-3 in float16 and 1.1e-2 in bfloat16 at 512. So float32 sits 8 to 100 times inside
its bound, the 16-bit types 5 to 7 times. A mapping that misses part of the mixer's math is off
by far more where that part matters (a 4-layer Bamba of ``hidden_size`` 16 at default weights:
D 1% off, 1.0e-2; the gated norm's eps 10 times too large, 0.68) -- and by little where it does
not: an ignored clamp of dt at 0.5 changes that model's output by 5e-6, since its output is almost
all ``D x`` (the tests draw their weights so that ``C h`` dominates).

**The state's part.** The whole output's figure is no evidence about the state where the state
hardly shows in it: at transformers' default initialisation (0.02) a Falcon-H1 mixer's readout
``y = C h + D x`` is ``D x`` but for a share ``var(C h) / var(y)`` of 4e-12 (a tiny model with
``ssm_multipliers`` of 0.25 to 0.5 and ``ssm_in_multiplier`` 1.25, tests/test_agreement.py), and a block whose decays are ten times too fast
still agrees to 3.8e-7 to 6.4e-7. So every recorded layer also reports the state's share of its readout
(:class:`~hiddenstate.kinds.agreement.Agreement`, the kind's ``share``), and a kind with a skip
term (``Kind.skip``: Mamba's and Mamba-2's ``D``) is held a second time on the state's part
alone: in the forward hook the model's own mixer runs again on the same arguments with ``D``
set to 0 (its ``forward``, the parameter restored at once), our block likewise, and the two are
held to the same tolerance relative to that output's own largest value. The same wrong decays
differ there by 0.08 to 0.17 and are refused; the right block agrees to 1.4e-7 to 3e-7 (the
tests' tiny models, float32). This costs one more run of each such mixer, the model's and ours
(without its record), and one more hooked (N, T, M) output a layer until it is checked. Kinds
without a skip term read all of their output out of the state (share 1): the whole output's
figure is the state's.

The delta-rule families (kinds ``gated_delta`` and ``kda``) are computed by transformers in
float32 whatever the model's dtype (``torch_chunk_gated_delta_rule`` and
``chunk_kimi_delta_attention`` cast q, k, v, g and beta to float32; the gated norms compute in
float32), and their output has no skip term: all of it is read out of the matrix state.
Measured on the tests' 3-layer models (N = 2, mixers' decays mostly 0.5 to 1), the worst
layer's error and the final state's against the cache: ``Qwen3NextForCausalLM`` 8.3e-7 and
3.7e-7 at T = 150, 1.3e-6 and 3.8e-7 at T = 1,024, in bfloat16 1.5e-2 and 4.4e-3;
``OlmoHybridForCausalLM`` 1.1e-6 / 1.9e-7, 9.9e-7 / 8.3e-7, 1.1e-2 / 4.7e-3;
``KimiLinearForCausalLM`` 1.1e-6 / 1.6e-7, 1.2e-6 / 8.2e-7, 1.8e-2 / 5.4e-3: float32 about 100
times inside its bound, bfloat16 3.5 to 6 times.

The RG-LRU, lightning and short-convolution families (kinds ``rglru``, ``lightning``, ``shortconv``),
measured on the tests' tiny models (N = 2, transformers' own initialisation), the worst layer's
error and the final state's against the model's own (``rg_lru.recurrent_states`` and
``conv1d_state``, ``cache.get_linear_cache``, ``cache.get_conv_state``): ``RecurrentGemmaForCausalLM``
3.4e-7 / 3.3e-7 at T = 150, 4.2e-7 / 5.4e-7 at T = 1,024; ``MiniMaxForCausalLM`` 2.8e-7 / 2.6e-7,
5.5e-7 / 8.9e-7; ``Lfm2ForCausalLM`` 1.9e-7 / 1.3e-7, 1.8e-7 / 1.3e-7 (at ``hidden_size`` 256, T =
2,048: 8.6e-7, 7.5e-7, 5.6e-7). In bfloat16 at T = 150: MiniMax 1.8e-2, LFM2 5.1e-3, but
RecurrentGemma 5.9e-2 and 7.0e-2 at T = 512, above the bound: transformers computes the RG-LRU's
gates and ``a_t = exp(-8 r_t softplus(Lambda))`` in the model's dtype (the recurrence only is
accumulated in float32), and a decay near 1 rounded to bfloat16 changes the time constant a lot;
its own bfloat16 block differs from the same block in float32 on the same input by 6.6e-2 at
T = 512. A bfloat16 RecurrentGemma is refused on long inputs; a float32 copy of it is not.

ZAYA's CCA projection (kind ``cca``) returns the attention's queries, keys and values: the
family's hook reads them as one (N, T, Cq + 2 Ck) view, and the block's ``d_out`` gives the width
the output is held to (and the memory estimates count). Measured on the 3-layer
``ZayaForCausalLM`` of its family's ``tiny_config`` (seed 0, transformers' own initialisation;
ids N = 2, T = 24 drawn in [0, 50)): the worst layer's error
1.0e-7, the final window and delayed value against ``cache.get_conv_state`` and
``get_recurrent_state`` 1.2e-7 and 9.6e-8.

xlstm (kind ``mlstm``) and rwkv (kind ``rwkv``) are all-recurrent. Measured on 2-layer
``xLSTMForCausalLM`` (``hidden_size`` 128, 4 heads of Dk 16, Dv 32, gate weights drawn so that
the stabiliser switches) and 3-layer ``RwkvForCausalLM`` (``hidden_size`` 64), N = 2, the
worst layer's error and the final state's against the cache: xLSTM 1.4e-5 / 1.4e-6 at T = 24,
2.4e-5 / 8.2e-7 at T = 256 and 2.4e-5 / 2.0e-6 at T = 1,024 (transformers' float32 arithmetic:
with the model and its ``inference_state_dtype`` in float64 the error is 3.9e-15); RWKV 2.9e-7 /
5.7e-7, 3.5e-7 / 4.4e-6 and 4.7e-7 / 6.8e-6, in bfloat16 at T = 256 6.6e-3 / 7.8e-3 (a bfloat16
xLSTM does not run on the CPU in transformers 5.25 itself: its kernel mixes float32 and bfloat16).

**Memory.** The records of all chosen layers are kept (the analyses read them): per layer and
per step of each sequence, the bytes one recorded step of that block takes, in float64 or, with
``record_dtype="float32"``, half (the recomputation and its check stay float64; each record is
cast once checked). What a layer costs a step is measured by dry runs of its block
(:func:`step_costs`: its record, and the peak of its recording run, record, output and scratch,
as the slope between a 64-step and a 192-step run under :mod:`tracemalloc`). Before the model runs
and before any record exists, the records and the hooked inputs and outputs
(:func:`estimate_bytes`, plus one layer's worth; a kind with a skip term keeps its output
without it too) are checked against ``max_bytes``; ``layers=``
lowers them. :func:`recompute_bytes` follows the recomputation layer by layer (records made,
hooked arrays waiting, the layer's run), and
:func:`hiddenstate.pipelines.family_inspection.inspection_bytes`, which ``inspect_model`` checks,
adds the analyses: within 20% of the peak :mod:`tracemalloc` measures around ``inspect_model``
(tests/test_memory_estimate.py; the model's own forward pass, torch's allocations, is not
counted). The hooked inputs and outputs are copied into NumPy arrays of the model's dtype as the
forward pass goes.
"""

from __future__ import annotations

import copy
import numbers
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from hiddenstate.core.resources import traced_peak
from hiddenstate.core.validation import nonnegative_int, positive_int, real, shape_str
from hiddenstate.interop.families.registry import Family, family_of
from hiddenstate.kinds import get_kind, record_forward
from hiddenstate.kinds.agreement import Agreement

__all__ = ["MAX_BYTES", "Recomputed", "StepCost", "check_cap", "estimate_bytes", "kept_steps", "recompute_bytes",
           "recompute_layers", "step_costs", "tolerance"]

#: The default cap on :func:`estimate_bytes` (4 GiB).
MAX_BYTES = 4 * 2 ** 30


def tolerance(dtype) -> float:
    """The largest relative error a recomputed layer of a model of ``dtype`` may have: ``8 eps(dtype) + 1000 eps(float32)``.

    Parameters
    ----------
    dtype : torch.dtype or numpy dtype
        The model's floating dtype.

    Returns
    -------
    float
        1.2e-4 for float32 and float64, 8.0e-3 for float16, 6.3e-2 for bfloat16 (the module
        docstring gives what was measured against it).

    Raises
    ------
    TypeError
        Not a floating dtype.
    """
    if type(dtype).__module__.split(".")[0] == "torch":  # a torch dtype (bfloat16 has no NumPy twin)
        import torch

        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch or NumPy dtype; got {dtype!r}.")
        eps = float(torch.finfo(dtype).eps)
    else:
        try:  # np.finfo would read a number (2.5) or a complex dtype as a float dtype; np.dtype(None) is float64
            dt = None if dtype is None else np.dtype(dtype)
        except (TypeError, ValueError):
            dt = None
        if dt is None or dt.kind != "f":
            raise TypeError(f"dtype must be a floating torch or NumPy dtype; got {dtype!r:.80}.")
        eps = float(np.finfo(dt).eps)
    return 8 * eps + 1000 * float(np.finfo(np.float32).eps)


@dataclass(frozen=True)
class Recomputed:
    """The chosen recurrent layers of a transformers model, recomputed with every step recorded.

    Attributes
    ----------
    family : Family
        The model's family.
    layer_map : tuple of LayerInfo
        Every layer of the model (index, role, class name, path).
    layers : tuple of int
        The recorded layers' indices, in model order.
    records : tuple of records of the family's kind
        Per recorded layer, every step's states and gates, time-major (T, N, ...): a MambaRecord,
        Mamba2Record or DeltaRecord (:func:`hiddenstate.kinds.get_kind` of ``family.kind`` reads
        its states and its :class:`~hiddenstate.kinds.RecordView`).
    errors : tuple of Agreement
        Per recorded layer, ``max |ours - theirs| / max |theirs|`` of its output: a float (an
        :class:`~hiddenstate.kinds.agreement.Agreement`) that also carries the state's share of
        the layer's readout and, for a kind with a skip term (Mamba's ``D x``), the error of the
        layer run with that term set to 0 in the model's mixer and in our block (the state's part
        alone, held to the same tolerance).
    tolerance : float
        The bound every error was held to (:func:`tolerance` of ``dtype``).
    dtype : str
        The model's dtype (``"float32"``).
    steps : ndarray of int or None
        The positions (0 to T-1) whose states the records keep, in order, when a ``window`` or
        ``stride`` chose them; None: every step.
    """

    family: Family
    layer_map: tuple
    layers: tuple
    records: tuple
    errors: tuple
    tolerance: float
    dtype: str
    steps: np.ndarray | None = None


def model_ids(model, ids):
    """``ids`` as a torch int64 tensor (N, T) on the model's device, checked against the vocabulary."""
    import torch

    if isinstance(ids, torch.Tensor):
        arr = ids.detach().cpu().numpy()
    else:
        try:
            arr = np.asarray(ids)
        except (ValueError, TypeError):
            raise TypeError(f"ids must be token ids of shape (N, T) or (T,); got a ragged {type(ids).__name__}.") from None
    if arr.dtype == bool or arr.dtype.kind not in "iu":
        raise TypeError(f"ids must be integer token ids of shape (N, T) (as transformers takes them) or (T,); got "
                        f"dtype {arr.dtype}.")
    arr = arr[None] if arr.ndim == 1 else arr
    if arr.ndim != 2 or 0 in arr.shape:
        raise ValueError(f"ids must have shape (N, T) with N, T >= 1 (or (T,) for one sequence); got "
                         f"{shape_str(np.shape(ids))}.")
    V = getattr(model.config, "vocab_size", None)
    if V is not None and (arr.min() < 0 or arr.max() >= V):
        raise ValueError(f"ids must lie in [0, vocab_size={V}); got values in [{arr.min()}, {arr.max()}].")
    device = next(model.parameters()).device
    return torch.as_tensor(arr.astype(np.int64), device=device)


def host_array(t) -> np.ndarray:
    """A hooked tensor copied into a NumPy array of its dtype (bfloat16, which NumPy lacks, as float32)."""
    import torch

    t = t.detach().cpu()
    return np.array((t.float() if t.dtype == torch.bfloat16 else t).numpy())


def chosen_layers(family: Family, model, layer_map, layers) -> tuple:
    """The recurrent layer indices to record: all by default, else ``layers`` checked."""
    recurrent = [e.index for e in layer_map if e.role == "recurrent"]
    if layers is None:
        return tuple(recurrent)
    if isinstance(layers, np.ndarray) and layers.ndim <= 1:
        items = layers.reshape(-1).tolist() if layers.dtype.kind in "iu" else [layers]
    else:
        items = list(layers) if isinstance(layers, (list, tuple, range)) else [layers]
    if any(isinstance(i, (bool, np.bool_)) or not isinstance(i, (numbers.Integral, np.integer)) for i in items):
        # int() would read 2.5 as 2, True as 1 and "1" as 1
        raise TypeError(f"layers must be a recurrent layer index (an int) or a list of them; got {layers!r:.80}.")
    wanted = sorted({int(i) for i in items})
    bad = [i for i in wanted if i not in recurrent]
    if bad or not wanted:
        roles = {e.index: e.role for e in layer_map}
        which = ", ".join(f"{i} ({roles.get(i, 'no such layer')})" for i in bad) or "none"
        raise ValueError(f"layers must be recurrent layers of this {family.name} model, {recurrent}; got {which}.")
    return tuple(wanted)


class StepCost(NamedTuple):
    """What one recurrent layer of a model costs per recorded step of one sequence (dry runs of its block).

    Attributes
    ----------
    record : int
        Bytes its float64 record takes a step (a 2-step run).
    run : int
        Bytes the block's recording run holds at its peak, a step: record, output and scratch
        (the slope between a 64-step and a 192-step run, measured with :mod:`tracemalloc`).
    fixed : int
        What that peak holds whatever the steps (>= 0).
    d_model : int
        The layer's width M (its hooked input and output are (N, T, M)).
    itemsize : int
        Bytes of one element of the hooked input and output as kept (the model's dtype;
        bfloat16, which NumPy lacks, as float32).
    block : SequenceBlock
        The converted block (float64).
    d_out : int, default 0
        The width of its hooked output where it differs from M (ZAYA's ``[query | key | value]``);
        0: M.
    """

    record: int
    run: int
    fixed: int
    d_model: int
    itemsize: int
    block: object
    d_out: int = 0

    def widths(self, copies: int) -> int:
        """The widths of the ``copies`` hooked (N, T, .) arrays a layer keeps: its input and its output(s).

        Parameters
        ----------
        copies : int
            The arrays kept: the input, then ``copies - 1`` outputs.

        Returns
        -------
        int
            Their widths summed (features per (n, t)).
        """
        return self.d_model + (copies - 1) * (self.d_out or self.d_model)


def _copies(model) -> int:
    """How many (N, T, M) arrays the hook keeps a layer: its input and output, and for a kind with a skip term its output without it."""
    return 3 if get_kind(family_of(model).kind).skip else 2


def _run_and_share(kind, blk, u):
    """The block's recording run, then the state's share of its readout with the run's output and record held."""
    out, rec = kind.run(blk, u)
    if kind.share is not None:
        kind.share(blk, rec)
    return out, rec


def _dry_run(kind, blk) -> tuple:
    """Record bytes a step (a 2-step run); the run's peak bytes a step and its fixed part (64- and 192-step runs: whole chunks of 64).

    The run's peak includes the kind's ``share`` (its readout's state part), computed beside the record."""
    _, rec = kind.run(blk, np.zeros((1, 2, blk.d_model)))
    rng = np.random.default_rng(0)  # not zeros: a share of a zero readout may take a shortcut
    _, low = traced_peak(_run_and_share, kind, blk, rng.normal(size=(1, 64, blk.d_model)))
    _, high = traced_peak(_run_and_share, kind, blk, rng.normal(size=(1, 192, blk.d_model)))
    step = max(high - low, 0) // 128
    return sum(a.nbytes for a in rec if isinstance(a, np.ndarray)) // 2, step, max(low - 64 * step, 0)


def step_costs(model, *, layers=None) -> dict:
    """Per chosen recurrent layer, what a recorded step costs (:class:`StepCost`; layers of one size measured once).

    Parameters
    ----------
    model : transformers model of a registered family
    layers : int or list of int, optional
        Recurrent layer indices (default all).

    Returns
    -------
    dict of int to StepCost
        In model order.

    Raises
    ------
    TypeError, ValueError
        ``model`` of no registered family; ``layers`` not recurrent layers.
    """
    family = family_of(model)
    chosen = chosen_layers(family, model, family.layer_map(model), layers)
    mixers = family.mixers(model)
    seen, out = {}, {}
    for i in chosen:
        params = mixers[i].state_dict()
        shapes = tuple((k, tuple(v.shape)) for k, v in params.items())
        if shapes not in seen:  # layers of the same sizes cost the same
            blk = family.convert(mixers[i], model.config)
            seen[shapes] = (*_dry_run(get_kind(family.kind), blk), blk)
        record, run, fixed, blk = seen[shapes]
        size = next(iter(params.values())).element_size() if params else 4
        out[i] = StepCost(record, run, fixed, blk.d_model, 4 if size == 2 else size, blk, getattr(blk, "d_out", 0))
    return out


def kept_steps(T: int, window=None, stride: int = 1) -> slice:
    """The steps a record keeps: ``window`` (start, stop) of the T positions, every ``stride``-th, as a slice.

    Parameters
    ----------
    T : int
        Steps of the input.
    window : tuple of int, optional
        ``(start, stop)`` with ``0 <= start < stop <= T`` (default the whole input).
    stride : int, default 1
        Keep every ``stride``-th step of the window, from its first.

    Returns
    -------
    slice

    Raises
    ------
    TypeError, ValueError
        A window that is not two ints in that range; a stride that is not a positive int.
    """
    stride = positive_int("stride", stride)
    if window is None:
        return slice(0, T, stride)
    items = list(window) if isinstance(window, (tuple, list)) else None
    if (items is None or len(items) != 2
            or any(isinstance(i, (bool, np.bool_)) or not isinstance(i, (numbers.Integral, np.integer)) for i in items)):
        raise TypeError(f"window must be (start, stop), two step positions (ints); got {window!r:.60}.")
    start, stop = (int(i) for i in items)
    if not 0 <= start < stop <= T:
        raise ValueError(f"window must be (start, stop) with 0 <= start < stop <= T={T}; got ({start}, {stop}). Choose "
                         "positions inside the input.")
    return slice(start, stop, stride)


#: Steps per piece of a windowed recomputation, a multiple of 64 (the chunked kernels' chunk): at least
#: this, else about an eighth of the input (:func:`_segment`).
SEGMENT = 256


def _segment(T: int) -> int:
    """Steps per piece of a windowed recomputation of T steps: about T / 8, a multiple of 64, at least :data:`SEGMENT`."""
    return max(SEGMENT, 64 * -(-T // 512))


def _segmentable(kind, extra, N: int, T: int) -> bool:
    """Whether a layer can be recomputed piece by piece: the kind's default run, and extras (N, T) if any."""
    return kind.run is record_forward and all(getattr(v, "shape", None) == (N, T) for v in extra.values())


def _run_kept(kind, blk, u, extra, keep: slice, cast):
    """A layer's output on u (N, T, M) and its record of the ``keep`` steps only, in ``cast``, piece by piece.

    The block runs over pieces of :func:`_segment` steps, its state carried from one to the
    next (the same recurrence, cut at chunk boundaries); each piece's record is copied into the
    kept arrays (allocated once, at the first piece that keeps a step) and freed, so the whole
    record never exists: the peak is one piece's run beside the kept steps.
    """
    N, T = u.shape[:2]
    L, steps = _segment(T), np.arange(T)[keep]
    out, state, kept, filled, fixed, rtype = np.empty_like(u), None, None, 0, None, None
    for s in range(0, T, L):
        e = min(s + L, T)
        part = {k: v[:, s:e] for k, v in extra.items()}
        here = steps[(steps >= s) & (steps < e)] - s
        o, state, cache, rec = blk.forward(u[:, s:e], state=state, record=True, **part)
        del cache  # (for a backward pass: not kept into the next piece's run)
        out[:, s:e] = o
        rtype = type(rec)
        if kept is None and here.size:
            fixed = [not (isinstance(a, np.ndarray) and a.ndim >= 2 and a.shape[:2] == (e - s, N)) for a in rec]
            kept = [a if f else np.empty((steps.size, N) + a.shape[2:], dtype=cast if a.dtype == np.float64 else
                                         a.dtype) for a, f in zip(rec, fixed)]
        if here.size:
            for a, f, dst in zip(rec, fixed, kept):
                if not f:
                    dst[filled:filled + here.size] = a[here]
            filled += here.size
        del o, rec
    return out, rtype(*kept)


def _output_in_pieces(blk, u, extra):
    """The block's output on u (N, T, M) run piece by piece (:func:`_segment`), its state carried: no record kept."""
    T, L = u.shape[1], _segment(u.shape[1])
    state, parts = None, []
    for s in range(0, T, L):
        o, state = blk.forward(u[:, s:s + L], state=state, **{k: v[:, s:s + L] for k, v in extra.items()})[:2]
        parts.append(o)
    return np.concatenate(parts, axis=1)


def _cut(a: np.ndarray, keep: slice, cast, T: int, N: int) -> np.ndarray:
    """A record's array: its kept steps (a time-major (T, N, ...) array) in ``cast`` (float64 arrays), copied."""
    part = a[keep] if a.ndim >= 2 and a.shape[:2] == (T, N) else a
    return part.astype(cast if a.dtype == np.float64 else a.dtype)


def _record_dtype(record_dtype):
    """``record_dtype`` checked: np.float64 or np.float32."""
    if not isinstance(record_dtype, str | type | np.dtype) or str(np.dtype(record_dtype) if not isinstance(
            record_dtype, str) else record_dtype) not in ("float64", "float32"):
        raise ValueError(f"record_dtype must be 'float64' or 'float32' (the records' dtype; the recomputation itself is "
                         f"float64 either way); got {record_dtype!r:.60}.")
    return np.dtype(record_dtype).type


def recompute_bytes(model, T: int, N: int, *, layers=None, record_dtype="float64", costs=None, kept=None) -> int:
    """The peak of what :func:`recompute_layers` allocates beside the model's own forward pass (NumPy arrays).

    Layer after layer, in model order: the records already made (in ``record_dtype``), the
    hooked inputs and outputs not yet recomputed, and this layer's float64 input and output, its
    block's run (:class:`StepCost`) and the comparison of the outputs (or the cast of its record);
    the largest of these sums.

    Parameters
    ----------
    model : transformers model of a registered family
    T, N : int
        Steps and sequences.
    layers : int or list of int, optional
        Recurrent layer indices (default all).
    record_dtype : {"float64", "float32"}, default "float64"
        The records' dtype.
    costs : dict of int to StepCost, optional
        :func:`step_costs` of the same model and layers (default: measured here).
    kept : int, optional
        Steps of each sequence the records keep (a ``window`` and ``stride``; default T).

    Returns
    -------
    int

    Raises
    ------
    TypeError, ValueError
        As :func:`step_costs`; ``T`` or ``N`` not a non-negative int; ``record_dtype`` neither.
    """
    T, N = nonnegative_int("T", T), nonnegative_int("N", N)
    half = _record_dtype(record_dtype) == np.float32
    costs = step_costs(model, layers=layers) if costs is None else costs
    pieces = get_kind(family_of(model).kind).run is record_forward  # a window is recomputed piece by piece
    steps = T * N
    copies = _copies(model)
    hooked = {i: steps * c.widths(copies) * c.itemsize for i, c in costs.items()}
    done, peak = 0, 0
    for i, c in costs.items():
        io = steps * max(c.d_model, c.d_out) * 8  # one float64 (N, T, M) array (or the wider output)
        cast = 0 if c.itemsize == 8 else io  # a model not in float64: each hooked array's float64 copy
        cut = kept is not None and kept < T  # a window (and stride): the records keep fewer steps than T
        record, kept_record = steps * c.record, (kept if cut else T) * N * c.record
        run = c.fixed + steps * c.run
        layer = 2 * cast + max(run, record + 3 * io, record + record // 2 + io if half else 0)
        if copies == 3:  # the state-part check: the model's output without its skip, and our block's run
            layer = max(layer, 3 * cast + record + 4 * io + run)
        if cut and pieces:  # piece by piece: one piece's run beside the kept steps
            piece = c.fixed + min(_segment(T), T) * N * c.run
            check = 3 * cast + 4 * io + piece if copies == 3 else 0  # the check runs in pieces too
            layer = max(check, 2 * cast + io + piece + kept_record // (2 if half else 1))
            record = kept_record
        elif cut:  # the kept steps copied out of the whole record
            layer = max(layer, 2 * cast + record + io + kept_record // (2 if half else 1))
            record = kept_record
        peak = max(peak, done + sum(hooked[j] for j in costs if j >= i) + layer)
        done += record // 2 if half else record
    return peak


def estimate_bytes(model, T: int, N: int, *, layers=None, record_dtype="float64", costs=None, kept=None) -> dict:
    """What recording ``layers`` of ``model`` on N sequences of T steps takes, before anything runs.

    Parameters
    ----------
    model : transformers model of a registered family
    T, N : int
        Steps and sequences.
    layers : int or list of int, optional
        Recurrent layer indices (default all).
    record_dtype : {"float64", "float32"}, default "float64"
        The records' dtype.
    costs : dict of int to StepCost, optional
        :func:`step_costs` of the same model and layers (default: measured here).
    kept : int, optional
        Steps of each sequence the records keep (a ``window`` and ``stride``; default T).

    Returns
    -------
    dict of int to int
        Bytes per chosen layer: its record and its hooked input and output. The total
        :func:`recompute_layers` checks against its cap is their sum plus the largest one (one
        layer's recomputation); :func:`recompute_bytes` follows the recomputation layer by
        layer, and :func:`hiddenstate.pipelines.family_inspection.inspection_bytes` adds the
        analyses.

    Raises
    ------
    TypeError, ValueError
        ``model`` of no registered family (:func:`~hiddenstate.interop.families.registry.family_of`);
        ``layers`` not recurrent layers; ``T`` or ``N`` not a non-negative int.
    """
    T, N = nonnegative_int("T", T), nonnegative_int("N", N)
    half = _record_dtype(record_dtype) == np.float32
    copies = _copies(model)
    kept = T if kept is None else min(nonnegative_int("kept", kept), T)
    return {i: N * (kept * (c.record // 2 if half else c.record) + T * c.widths(copies) * c.itemsize)
            for i, c in (step_costs(model, layers=layers) if costs is None else costs).items()}


def _size(n: float) -> str:
    """``n`` bytes in B, KiB, MiB or GiB (three figures)."""
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def check_cap(family, per_layer: dict, T: int, N: int, max_bytes, dtype: str = "float64", total=None) -> None:
    """Refuse, in one line, a request whose estimated ``total`` (default: the sum of ``per_layer`` plus its largest) exceeds ``max_bytes``.

    Parameters
    ----------
    family : Family
    per_layer : dict of int to int
        Bytes per chosen layer (:func:`estimate_bytes`).
    T, N : int
        Steps and sequences.
    max_bytes : float or None
        The cap (None: none).
    dtype : str, default "float64"
        The records' dtype, for the message.
    total : int, optional
        The estimate checked.

    Raises
    ------
    ValueError
        ``max_bytes (...) must cover the records: ...``, naming the layers, the sizes and what lowers them.
    """
    total = sum(per_layer.values()) + max(per_layer.values()) if total is None else total
    if max_bytes is not None and total > max_bytes:
        raise ValueError(f"max_bytes ({_size(max_bytes)}) must cover the records: recording layers "
                         f"{sorted(per_layer)} of this {family.name} model on T={T} steps of N={N} sequence(s) "
                         f"would take about {_size(total)} (every step's state, {dtype}; up to "
                         f"{_size(max(per_layer.values()))} a layer). Pass layers=[...] with fewer recurrent layers, "
                         f"fewer steps, record_dtype='float32', or a larger max_bytes.")


def relative_error(ours, theirs) -> float:
    """``max |ours - theirs| / max |theirs|`` (``max |ours|`` where theirs is all zero)."""
    scale = float(np.abs(theirs).max())
    return float(np.abs(ours - theirs).max()) / scale if scale > 0 else float(np.abs(ours).max())


def skip_params(mixer, names: tuple) -> tuple:
    """The kind's skip parameters (``("D",)``) when the mixer has them all under those names, else ()."""
    own = dict(mixer.named_parameters())
    return names if names and all(k in own for k in names) else ()


def run_without(module, names: tuple, args, kwargs):
    """The mixer's own ``forward`` on the same arguments with its parameters ``names`` set to 0 (restored after)."""
    import torch

    own = dict(module.named_parameters())
    kept = {k: own[k].detach().clone() for k in names}
    try:
        with torch.no_grad():
            for k in names:
                own[k].zero_()
            return module.forward(*args, **kwargs)  # not module(...): its hooks stay out of it
    finally:
        with torch.no_grad():
            for k in names:
                own[k].copy_(kept[k])


def zeroed_block(blk, names: tuple):
    """A shallow copy of our block with its parameters ``names`` set to 0 (its own stay as they are)."""
    twin = copy.copy(blk)
    twin.params = {**blk.params, **{k: np.zeros_like(blk.params[k]) for k in names}}
    return twin


def recompute_layers(model, ids, *, layers=None, max_bytes=MAX_BYTES, tol=None, record_dtype="float64", window=None,
                     stride: int = 1, echo=None) -> Recomputed:
    """Run a transformers model on ``ids`` and recompute its recurrent layers with our block, every step recorded.

    Parameters
    ----------
    model : transformers model of a registered family
        Any dtype and device; run in eval mode under ``torch.no_grad()`` with
        ``use_cache=False`` (its mode is restored afterwards), its hooks removed whatever happens.
    ids : array_like of int or torch.Tensor, shape (N, T) or (T,)
        Token ids, as transformers takes them.
    layers : int or list of int, optional
        The recurrent layers to record (model indices; default all).
    max_bytes : int or None, default MAX_BYTES (4 GiB)
        Refuse, before the model runs, a request whose :func:`estimate_bytes` total exceeds this
        (None: no cap); a finite number >= 0.
    tol : float, optional
        The largest relative error a layer may have (a finite number >= 0); default
        :func:`tolerance` of the model's dtype.
    record_dtype : {"float64", "float32"}, default "float64"
        The stored records' dtype: ``"float32"`` halves them. The recomputation and its check
        against the model's output are float64 either way; each layer's record is cast once
        checked.
    window : (int, int), optional
        ``(start, stop)``: keep only the states of positions start to stop - 1 (default all;
        :func:`kept_steps`). Every step is still computed (the state at ``start`` depends on all
        before it); each layer's record is cut to the kept steps once checked, so the records of
        all layers take only those steps (the estimate checked against ``max_bytes`` follows).
    stride : int, default 1
        Keep every ``stride``-th step of the window.
    echo : callable, optional
        ``echo(line)`` is told each stage once the checks have passed: the forward pass, then
        each layer's recomputation (the command line prints them on stderr).

    Returns
    -------
    Recomputed
        ``steps`` the kept positions when ``window`` or ``stride`` chose them.

    Raises
    ------
    TypeError
        ``model`` of no registered family (one line naming the registered ones); ids that are
        not integers; ``layers`` that are not ints; ``max_bytes`` or ``tol`` that is not a number.
    ValueError
        ids not (N, T) in [0, V); ``layers`` that are not recurrent layers; ``max_bytes`` or
        ``tol`` negative, NaN or infinite; a request over
        ``max_bytes`` (one line with the bytes, and that ``layers=`` lowers them); a layer whose
        recomputed output differs from the model's own by more than the tolerance (naming the
        layer and the figure); a mixer that ran more or less than once, or hooked tensors of
        another shape than (N, T, M).
    """
    import torch

    family = family_of(model)
    if max_bytes is not None:
        max_bytes = real("max_bytes", max_bytes, low=0.0)
    if tol is not None:  # checked before the model runs
        tol = real("tol", tol, low=0.0)
    cast = _record_dtype(record_dtype)
    layer_map = family.layer_map(model)
    chosen = chosen_layers(family, model, layer_map, layers)
    ids = model_ids(model, ids)
    N, T = ids.shape
    keep = kept_steps(T, window, stride)
    kept = len(range(T)[keep])
    half = 2 if cast is np.float32 else 1  # the records kept, and every step's hooked input and output
    per = {i: N * (kept * (c.record // half) + T * c.widths(_copies(model)) * c.itemsize)
           for i, c in step_costs(model, layers=chosen).items()}
    check_cap(family, per, T, N, max_bytes, np.dtype(cast).name)
    mixers = family.mixers(model)
    seen: dict = {i: [] for i in chosen}

    kind = get_kind(family.kind)
    skips = {i: skip_params(mixers[i], kind.skip) for i in chosen}

    def hook(index):
        def keep(module, args, kwargs, output):
            got = family.hooked(args, kwargs, output)
            u, out, extra = got if len(got) == 3 else (*got, {})
            alone = None
            if skips[index]:  # the model's own mixer again, its skip term set to 0: the state's part alone
                alone = host_array(family.hooked(args, kwargs, run_without(module, skips[index], args, kwargs))[1])
            seen[index].append((host_array(u), host_array(out), extra, alone))
        return keep

    handles = []
    training = model.training
    try:
        for i in chosen:
            handles.append(mixers[i].register_forward_hook(hook(i), with_kwargs=True))
        model.eval()
        if echo is not None:
            echo(f"the {type(model).__name__}'s forward pass on N={N} x T={T:,} tokens, {len(chosen)} recurrent "
                 "layer(s) hooked")
        with torch.no_grad():
            family.forward(model, ids)
    finally:
        for h in handles:
            h.remove()
        model.train(training)
    dtype = next(mixers[chosen[0]].parameters()).dtype
    default = tolerance(dtype)
    why = (f"The {family.name} family's to_block misses part of what the mixer computes." if tol is None else
           f"tol={tol:g} was passed: it must be at least the model's round-off (the default for this model is "
           f"{default:.3g}).")
    tol = default if tol is None else tol
    names = {e.index: e.class_name for e in layer_map}
    records, errors = [], []
    for k, i in enumerate(chosen):
        if echo is not None:
            echo(f"recomputing layer {i} ({names[i]}) in float64, {k + 1} of {len(chosen)}")
        if len(seen[i]) != 1:
            raise ValueError(f"layer {i} ({names[i]}) must run once in the model's forward pass to be recomputed; it "
                             f"ran {len(seen[i])} times.")
        u, theirs, extra, alone = seen[i].pop()
        u, theirs = (np.asarray(t, dtype=np.float64) for t in (u, theirs))
        blk = family.convert(mixers[i], model.config)
        width = getattr(blk, "d_out", blk.d_model)  # ZAYA's [query | key | value] is wider than M
        if u.shape != (N, T, blk.d_model) or theirs.shape != (N, T, width):
            raise ValueError(f"layer {i} ({names[i]})'s hooked input and output must have shape (N={N}, T={T}, "
                             f"M={blk.d_model}) and (N, T, {width}); got {shape_str(u.shape)} and "
                             f"{shape_str(theirs.shape)}.")
        pieces = kept < T and _segmentable(kind, extra, N, T)
        ours, rec = _run_kept(kind, blk, u, extra, keep, cast) if pieces else kind.run(blk, u, **extra)
        err = relative_error(ours, theirs)
        what = f"layer {i} ({names[i]}) recomputed by our {type(blk).__name__} block differs from the model's own"
        if not err <= tol:
            raise ValueError(f"{what} output by {err:.3g} of its largest value, above the tolerance {tol:.3g} "
                             f"for a {str(dtype).replace('torch.', '')} model: not analysed. {why}")
        state_err = None
        if alone is not None:  # the state's part alone, ours against the model's
            twin = zeroed_block(blk, skips[i])  # piece by piece under a window: the whole run's arrays never exist
            mine = _output_in_pieces(twin, u, extra) if pieces else twin.forward(u, **extra)[0]
            state_err = relative_error(mine, np.asarray(alone, np.float64))
            if not state_err <= tol:
                raise ValueError(f"{what} output with its skip term ({', '.join(skips[i])}) set to 0 in both by "
                                 f"{state_err:.3g} of its largest value, above the tolerance {tol:.3g}: the state "
                                 f"part (the recurrence) disagrees, not analysed. {why}")
        err = Agreement(err, 1.0 if kind.share is None else kind.share(blk, rec), state_err, tol)
        if not pieces and (cast is not np.float64 or kept < T):  # copies: the whole record is freed
            rec = type(rec)(*(_cut(a, keep, cast, T, N) if isinstance(a, np.ndarray) else a for a in rec))
        records.append(rec)
        errors.append(err)
        del u, theirs, ours, alone
    return Recomputed(family=family, layer_map=layer_map, layers=chosen, records=tuple(records), errors=tuple(errors),
                      tolerance=tol, dtype=str(dtype).replace("torch.", ""),
                      steps=None if kept == T else np.arange(T)[keep])
