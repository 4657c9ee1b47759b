"""An edit inside one block's run: the prefix recorded, the state edited, the suffix continued from it.

:func:`run_edited` runs one of our blocks (of a registered kind, ``batch_first``) on its input u
(N, T, M) in segments cut after every edited step: ``u[:, :s0+1]``, then ``u[:, s0+1:s1+1]``, ...,
each segment starting from the previous one's final state (the block's ``forward(u, state)``
carries it), with the edits of that step applied to the state in between. The same segments run
once more without edits: that clean chain and the edited one share every step up to the first
edit bit for bit, so the difference of their outputs is exactly 0 at positions <= the first
edited step and is the edit's whole effect after it. Chaining is exact (a segmented run equals
one run to float64 round-off; ``tests/test_interventions.py`` holds every kind to it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hiddenstate.edit.ops import apply_op, part_fields
from hiddenstate.kinds import get_kind

__all__ = ["BlockRun", "boundaries", "check_edits_for", "run_edited", "state_fields"]


@dataclass(frozen=True)
class BlockRun:
    """One block's edited and clean runs on the same input.

    Attributes
    ----------
    out : ndarray of shape (N, T, M), float64
        The edited run's output.
    clean_out : ndarray of shape (N, T, M), float64
        The clean run's (the same segments, no edit).
    states : dict of str to ndarray (T, N, ...)
        The edited run's state after every step (after the edit, at an edited step), by field.
    clean_states : dict of str to ndarray (T, N, ...)
        The clean run's.
    """

    out: np.ndarray
    clean_out: np.ndarray
    states: dict
    clean_states: dict


def state_fields(kind_name: str, blk) -> tuple:
    """The names of ``blk``'s state fields, in its state tuple's order (a one-step dry run's record).

    Parameters
    ----------
    kind_name : str
    blk : block of that kind

    Returns
    -------
    tuple of str
    """
    kind = get_kind(kind_name)
    _, rec = kind.run(blk, np.zeros((1, 1, blk.d_model)))
    return tuple(kind.states(rec))


def boundaries(edits, T: int) -> list:
    """The sorted steps after which some edit changes the state, each checked to lie in [0, T).

    Parameters
    ----------
    edits : sequence of StateEdit
    T : int
        Steps of the run.

    Returns
    -------
    list of int

    Raises
    ------
    ValueError
        An edit's ``step`` or ``until`` at or past T.
    """
    for e in edits:
        if e.until >= T:
            what = "step" if e.step >= T else "until"
            raise ValueError(f"{what} must lie in [0, T={T}) (a position of the ids); got {getattr(e, what)} in {e!r}.")
    return sorted({s for e in edits for s in e.steps()})


def _sliced(forward: dict, a: int, b: int) -> dict:
    """The block's extra keywords (``reset``, (N, T)) for steps a .. b-1."""
    return {k: (v[:, a:b] if isinstance(v, np.ndarray) and v.ndim == 2 else v) for k, v in forward.items()}


def _chain(kind, blk, u, cuts, edit_at, forward):
    """Run ``u`` in segments ending after each cut; ``edit_at(step, states dict) -> states dict`` in between."""
    N, T, _ = u.shape
    state, outs, pieces, start = None, [], [], 0
    for end in [*cuts, T - 1]:
        if end < start:
            continue
        out, rec = kind.run(blk, u[:, start:end + 1], state=state, **_sliced(forward, start, end + 1))
        st = {k: np.array(v, dtype=np.float64, copy=True) for k, v in kind.states(rec).items()}
        if edit_at is not None and end in cuts:
            last = edit_at(end, {k: v[-1] for k, v in st.items()})
            for k, v in last.items():
                st[k][-1] = v
        state = tuple(v[-1] for v in st.values())
        outs.append(np.asarray(out, dtype=np.float64))
        pieces.append(st)
        start = end + 1
    states = {k: np.concatenate([p[k] for p in pieces], axis=0) for k in pieces[0]}
    return np.concatenate(outs, axis=1), states


def run_edited(kind_name: str, blk, u, edits, *, targets=None, forward=None) -> BlockRun:
    """Run ``blk`` on ``u`` with ``edits`` applied to its state, and the same segments without them.

    Parameters
    ----------
    kind_name : str
        The block's kind (``"mamba2"``).
    blk : block of that kind, ``batch_first=True``
    u : ndarray of shape (N, T, M)
        The block's input.
    edits : sequence of StateEdit
        This layer's edits, applied in order at each step they cover.
    targets : sequence of callable or None, optional
        Per edit, ``target(field, step) -> ndarray`` (the reference mean or the replacing state,
        :func:`~hiddenstate.edit.ops.apply_op`'s ``target``), or None.
    forward : dict, optional
        More keywords of the block's ``forward`` with (N, T) arrays (RecurrentGemma's ``reset``),
        sliced per segment.

    Returns
    -------
    BlockRun

    Raises
    ------
    ValueError
        A step past T; a part, heads or channels the block's state has not; a value of another shape.
    """
    kind = get_kind(kind_name)
    u = np.asarray(u, dtype=np.float64)
    forward = dict(forward or {})
    targets = list(targets) if targets is not None else [None] * len(edits)
    cuts = boundaries(edits, u.shape[1])
    fields = state_fields(kind_name, blk)
    plan = [(e, t, part_fields(kind_name, e.part, fields, with_stabiliser=e.op in ("mean", "replace")))
            for e, t in zip(edits, targets)]

    def edit_at(step, states):
        states = dict(states)
        for e, target, names in plan:
            if step in e.steps():
                for f in names:
                    states[f] = apply_op(kind_name, f, states[f], e, target=None if target is None else target(f, step))
        return states

    clean_out, clean_states = _chain(kind, blk, u, cuts, None, forward)
    out, states = _chain(kind, blk, u, cuts, edit_at, forward)
    return BlockRun(out=out, clean_out=clean_out, states=states, clean_states=clean_states)


def check_edits_for(kind_name: str, blk, edits: list, N: int) -> None:
    """Refuse, before any model runs, a part, heads, channels or value that ``blk``'s state does not fit.

    Parameters
    ----------
    kind_name : str
    blk : block of that kind
    edits : list of StateEdit
        This layer's edits.
    N : int
        Sequences of the run.

    Raises
    ------
    ValueError
        Naming the argument (``part``, ``heads``, ``channels``, ``value``).
    """
    kind = get_kind(kind_name)
    _, rec = kind.run(blk, np.zeros((1, 1, blk.d_model)))
    shapes = {k: (N,) + v.shape[2:] for k, v in kind.states(rec).items()}
    for e in edits:
        names = part_fields(kind_name, e.part, tuple(shapes), with_stabiliser=e.op in ("mean", "replace"))
        if e.value is not None and e.value.ndim and len(names) > 1:
            raise ValueError(f"value must be a number for part={e.part!r} of a {kind_name} layer, whose part has the "
                             f"fields {list(names)}; got an array of shape {e.value.shape}. Name one field as part=.")
        for f in names:
            probe = np.zeros(shapes[f])
            apply_op(kind_name, f, probe, e, target=e.value if e.value is not None else probe)
