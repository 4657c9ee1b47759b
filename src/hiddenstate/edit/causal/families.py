"""Causal tracing in a transformers model of a registered family: one forward pass of the model per cell.

:meth:`FamilyTracer.setup` runs the model on the clean and on the corrupted ids once each, with
hooks that keep every traced mixer's input and output, and recomputes each traced layer with our
float64 block on the corrupted input, held to the model's own output (a layer outside
:func:`~hiddenstate.interop.families.hooks.tolerance` is refused, as :func:`hiddenstate.intervene`
refuses it). The sweep goes layer by layer: :meth:`FamilyTracer.prepare` recomputes one layer's
states from the kept inputs, the clean run's (the restored part, every step) and the corrupted
run's (every field, every step), and lets the previous layer's go, so the memory held is one
layer's states, not all of them.

A cell (layer l, step t) then costs two runs of l's block over the steps after t and one forward
pass of the model. The block continues from the corrupted state after step t twice: with the
part restored from the clean run, and as it is; the mixer's output in the model's pass is its
own output in the corrupted run plus the difference of the two, after step t::

    out[:, t+1:] = theirs_corrupted[:, t+1:] + (ours_restored - ours_corrupted)

the same ``"delta"`` form as :func:`hiddenstate.intervene` (whose cell, ``StateEdit(l, t,
"replace", source=clean_ids)`` on the corrupted ids, it equals to round-off), so the layers
above run as the model's own code and see the change. Layers below l are not changed by it, so
their inputs are the corrupted run's, kept from the setup; with identical clean and corrupted
ids the difference is exactly 0 and every cell returns the corrupted logits bit for bit.
"""

from __future__ import annotations

import numpy as np

from hiddenstate.edit.blocks import state_fields
from hiddenstate.edit.families import ids_tensor, run_model, vocab_of
from hiddenstate.edit.ops import part_fields
from hiddenstate.interop.families.hooks import tolerance
from hiddenstate.interop.families.registry import family_of
from hiddenstate.kinds import get_kind

__all__ = ["FamilyTracer"]


def _keep(family, mixers, layers, seen):
    def hook(i):
        def keep(module, args, kwargs, output):
            got = family.hooked(args, kwargs, output)
            u, out, extra = got if len(got) == 3 else (*got, {})
            seen.setdefault(i, []).append((u.detach().cpu().double().numpy(), out, extra))
        return keep
    return {mixers[i]: hook(i) for i in layers}


def _sliced(extra: dict, a: int) -> dict:
    """The block's extra keywords (``reset``, (N, T)) for steps a .. T-1."""
    return {k: (v[:, a:] if isinstance(v, np.ndarray) and v.ndim == 2 else v) for k, v in extra.items()}


class FamilyTracer:
    """The clean and corrupted runs of a transformers model, kept for a sweep of restored cells.

    Parameters
    ----------
    model : transformers model of a registered family

    Attributes
    ----------
    name : str
        The family.
    V : int or None
        The vocabulary size.
    recurrent : list of int
        The recurrent layers of the model's layer map.

    Raises
    ------
    TypeError
        A model of no registered family.
    """

    def __init__(self, model):
        self.model, self.family = model, family_of(model)
        layer_map = self.family.layer_map(model)
        self.roles = {e.index: e.role for e in layer_map}
        self.classes = {e.index: e.class_name for e in layer_map}
        self.recurrent = [e.index for e in layer_map if e.role == "recurrent"]
        self.name, self.V = self.family.name, vocab_of(model)
        self.kind_name = self.family.kind
        self.kind = get_kind(self.kind_name)

    def check_layer(self, i: int) -> None:
        """Refuse a layer that is not recurrent.

        Parameters
        ----------
        i : int

        Raises
        ------
        ValueError
            Naming the layer's role.
        """
        if self.roles.get(i) != "recurrent":
            raise ValueError(f"layers must be recurrent layers of this {self.name} model, {self.recurrent}; got {i} "
                             f"({self.roles.get(i, 'no such layer')}).")

    def _once(self, seen, i):
        if len(seen.get(i, ())) != 1:
            raise ValueError(f"layer {i} ({self.classes[i]}) must run once in the model's forward pass to be traced; "
                             f"it ran {len(seen.get(i, ()))} times.")
        return seen[i][0]

    def setup(self, clean, corrupted, layers, part: str):
        """Run the clean and corrupted ids, keep the traced layers' inputs and outputs, check each recomputation.

        Parameters
        ----------
        clean, corrupted : ndarray of int64, shape (N, T)
        layers : list of int
            Recurrent layers (checked).
        part : str
            The restored part (:func:`~hiddenstate.edit.ops.part_fields`).

        Returns
        -------
        clean_logits, corrupted_logits : ndarray of shape (N, T, V), float64
        held_bytes : int
            Bytes of the inputs and outputs kept.

        Raises
        ------
        ValueError
            A part the layers' state has not; a layer whose recomputation leaves the tolerance.
        """
        model, kind = self.model, self.kind
        self.mixers, self.part = self.family.mixers(model), part
        self.blocks = {i: self.family.convert(self.mixers[i], model.config) for i in layers}
        for blk in self.blocks.values():  # a part the state has not: refused before the model runs
            part_fields(self.kind_name, part, state_fields(self.kind_name, blk), with_stabiliser=True)
        self.ids = ids_tensor(model, corrupted)
        seen_clean, seen = {}, {}
        clean_logits = run_model(model, ids_tensor(model, clean), _keep(self.family, self.mixers, layers, seen_clean))
        corrupted_logits = run_model(model, self.ids, _keep(self.family, self.mixers, layers, seen))
        self.clean, self.corrupted, self.held, held = {}, {}, (None, None), 0
        tol = tolerance(next(self.mixers[layers[0]].parameters()).dtype)
        for i in layers:
            blk = self.blocks[i]
            u, out, extra = self._once(seen, i)
            ours, _ = kind.run(blk, u, **extra)
            theirs = out.detach().cpu().double().numpy()
            scale = float(np.abs(theirs).max())
            err = float(np.abs(ours - theirs).max()) / scale if scale > 0 else float(np.abs(ours).max())
            if not err <= tol:
                raise ValueError(f"layer {i} ({self.classes[i]}) recomputed by our {type(blk).__name__} block differs "
                                 f"from the model's own output by {err:.3g} of its largest value, above the tolerance "
                                 f"{tol:.3g}: it cannot be traced. The {self.name} family's to_block misses part of "
                                 f"what the mixer computes.")
            self.corrupted[i] = (u, theirs, out.dtype, out.device, extra)
            self.clean[i] = self._once(seen_clean, i)[::2]  # its input and extra keywords
            held += u.nbytes + theirs.nbytes + self.clean[i][0].nbytes
        return clean_logits, corrupted_logits, held

    #: The sweep's order: layer by layer (one layer's states held at a time, :meth:`prepare`).
    group = "layer"

    def prepare(self, i: int, t) -> int:
        """Hold layer ``i``'s states, every step: the clean run's restored part, the corrupted run's whole state.

        Two runs of the layer's block over all steps; the previous layer's states are let go.

        Parameters
        ----------
        i : int
        t : int or None
            Unused (the states serve every step).

        Returns
        -------
        int
            Bytes of the states held.
        """
        if self.held[0] != i:
            kind, blk = self.kind, self.blocks[i]
            u_clean, extra_clean = self.clean[i]
            states = kind.states(kind.run(blk, u_clean, **extra_clean)[1])
            names = part_fields(self.kind_name, self.part, tuple(states), with_stabiliser=True)
            u, _, _, _, extra = self.corrupted[i]
            corr = {f: np.asarray(v, dtype=np.float64) for f, v in kind.states(kind.run(blk, u, **extra)[1]).items()}
            self.held = (i, ({f: np.asarray(states[f], dtype=np.float64) for f in names}, corr))
        return sum(v.nbytes for d in self.held[1] for v in d.values())

    def cell(self, i: int, t: int) -> np.ndarray:
        """The corrupted run's logits with layer ``i``'s part restored after step ``t`` (module docstring).

        Parameters
        ----------
        i : int
            A layer given to :meth:`setup`.
        t : int
            A step in [0, T-1).

        Returns
        -------
        ndarray of shape (N, T, V), float64
        """
        import torch

        self.prepare(i, t)
        kind, blk = self.kind, self.blocks[i]
        clean, corr = self.held[1]
        u, theirs, dtype, device, extra = self.corrupted[i]
        base = tuple(v[t] for v in corr.values())
        restored = tuple(clean[f][t] if f in clean else v[t] for f, v in corr.items())
        more = _sliced(extra, t + 1)
        out_r, _ = kind.run(blk, u[:, t + 1:], state=restored, **more)
        out_b, _ = kind.run(blk, u[:, t + 1:], state=base, **more)
        new = theirs.copy()
        new[:, t + 1:] += np.asarray(out_r, dtype=np.float64) - np.asarray(out_b, dtype=np.float64)
        new = torch.as_tensor(new, device=device).to(dtype).contiguous()

        def replace(module, args, kwargs, out):
            return self.family.rebuild(out, new)  # the mixer's own output form (ZAYA's (q, k, v) from its view)

        return run_model(self.model, self.ids, {self.mixers[i]: replace})
