"""An agreement figure that can see the recurrence: :class:`Agreement`, the state's share of a readout.

A recomputed layer is held to the model's own output (``max |ours - theirs| / max |theirs|``,
:func:`hiddenstate.interop.families.hooks.recompute_layers`). That figure says nothing about the
state where the state hardly shows in the output: a Mamba readout is ``y = C h + D x``, and with
small projections (Falcon-H1 at its muP multipliers, any hybrid at transformers' default
initialisation) the skip ``D x`` carries nearly all of it, so a block with decays ten times wrong
still agrees to 2e-5, inside the float32 tolerance 1.2e-4.

**The state's share.** Per recurrent layer, of the readout before the gate and the output
projection::

    share = var(y - skip) / var(y)            (over the layer's T steps, N sequences and channels)

where ``y - skip`` is the state-dependent part: for Mamba and Mamba-2, ``C h`` (``y`` minus
``D x``, the record's ``y`` and ``x``); a kind without a direct term (the delta rule's and KDA's
``o = S^T q``, the mLSTM's and RWKV's readouts, the RG-LRU's ``h``, lightning attention's
``q KV``, a short convolution's window) has no skip term beside its state's readout: share 1
(RWKV's readout weighs the current token by its bonus inside the same ratio; its analysis reports
that share apart).

**Can the whole-output check see it?** It bounds an error at ``tol`` of the output's largest
value; the state part's spread is ``sqrt(share)`` of the readout's. The check is said to see the
recurrence when an error of a tenth of the state part would exceed the tolerance:
``0.1 sqrt(share) > tol`` (share > 1.4e-6 at the float32 tolerance 1.2e-4).

**The state-part check.** For the kinds with a skip term (Mamba, Mamba-2: ``Kind.skip`` names
``D``), the layer is run again with ``D`` set to 0, by the model's own mixer (a copy of it) and
by our block, on the same hooked input: what is left is read out of the state alone, and it is
held to the same tolerance relative to its own largest value (``state_error``). A block whose
decays are wrong is refused there whatever the share. Where no such check ran and the share is
too small, the figure says so instead of claiming agreement (:meth:`Agreement.phrase`).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["SEE_FRACTION", "Agreement", "readout_share", "sees_state"]

#: The fraction of the state part an error must be for the whole-output check to count as seeing it.
SEE_FRACTION = 0.1


def readout_share(y, skip) -> float:
    """``var(y - skip) / var(y)``: the state-dependent part's share of a readout's variance.

    Parameters
    ----------
    y : ndarray
        The readout (any shape; Mamba's ``C h + D x``, (T, N, Di) or (T, N, H, P)), float.
    skip : ndarray
        The direct term of the same shape (``D x``).

    Returns
    -------
    float
        In [0, inf) (about [0, 1]; above 1 where ``C h`` and ``D x`` cancel); 0.0 for a
        constant readout.

    Raises
    ------
    ValueError
        ``y`` and ``skip`` of different shapes.
    """
    y, skip = np.asarray(y, dtype=np.float64), np.asarray(skip, dtype=np.float64)
    if y.shape != skip.shape:
        raise ValueError(f"skip must have the readout's shape {y.shape}; got {skip.shape}.")
    total = float(np.var(y))
    return float(np.var(y - skip)) / total if total > 0 else 0.0


def sees_state(share: float, tol: float) -> bool:
    """Whether a whole-output check at ``tol`` sees an error of a tenth of the state part: ``0.1 sqrt(share) > tol``.

    Parameters
    ----------
    share : float
        :func:`readout_share`, >= 0.
    tol : float
        The check's relative tolerance.

    Returns
    -------
    bool
    """
    return SEE_FRACTION * math.sqrt(max(share, 0.0)) > tol


class Agreement(float):
    """A recomputed layer's agreement with the model: the whole output's error (the float) and the state's share.

    It is the float ``max |ours - theirs| / max |theirs|`` (what ``Recomputed.errors`` always
    held), with the state's share of the readout and, where it ran, the state-part check.

    Parameters
    ----------
    error : float
        The whole output's relative error.
    share : float, default 1.0
        :func:`readout_share` (1.0: the kind has no skip term beside its state's readout).
    state_error : float, optional
        ``max |ours - theirs| / max |theirs|`` of the layer run with its skip term set to 0 by
        both (None: no such check ran).
    tolerance : float, default 1.2e-4
        The bound both errors were held to.

    Attributes
    ----------
    share, state_error, tolerance
        As given.
    """

    share: float
    state_error: float | None
    tolerance: float

    def __new__(cls, error, share=1.0, state_error=None, tolerance=1.2e-4):
        self = super().__new__(cls, error)
        self.share = float(share)
        self.state_error = None if state_error is None else float(state_error)
        self.tolerance = float(tolerance)
        return self

    def __reduce__(self):
        return (type(self), (float(self), self.share, self.state_error, self.tolerance))

    @property
    def seen(self) -> bool:
        """Whether the state was checked: a state-part check ran, or the whole-output check sees it (:func:`sees_state`)."""
        return self.state_error is not None or sees_state(self.share, self.tolerance)

    def phrase(self) -> str:
        """What the check proved, in a few words (the summary's and the card's).

        Returns
        -------
        str
            ``"6.1e-07 of the model's own output; the state's share 6e-09 of the readout, its part
            held to 3.1e-07 with the skip D x set to 0 in both"``, or ``"..., no skip term beside the
            state's readout"``, or ``"...; the state's share 6e-09 of the readout: too small for this
            check to see the recurrence"``.
        """
        head = f"{float(self):.2g} of the model's own output"
        if self.state_error is not None:
            return (f"{head}; the state's share {self.share:.2g} of the readout, its part held to "
                    f"{self.state_error:.2g} with the skip D x set to 0 in both")
        if self.share >= 1.0:
            return f"{head}, no skip term beside the state's readout"
        if not self.seen:
            return (f"{head}; the state's share {self.share:.2g} of the readout: too small for this check to see "
                    "the recurrence")
        return f"{head}; the state's share {self.share:.2g} of the readout"
