"""The layers and cells on arrays of any library that follows the Python array API (torch, CuPy, ...).

A layer's ``forward``/``backward`` (and ``__call__``), a cell's ``forward``/``backward`` and
:meth:`CellKind.step <hiddenstate.classic.cells.base.CellKind.step>` take a torch tensor, a CuPy array or
any array ``array_api_compat`` knows, and then compute in that library, on the input's device:

* :mod:`~hiddenstate.xp.arrays` -- the namespace lookup, copies to and from the host, the
  parameters converted once per change, the input checks;
* :mod:`~hiddenstate.xp.cells` -- the readable reference form of every cell kind: one step
  forward and its exact adjoint, and the scan over T steps with padding and resets;
* :mod:`~hiddenstate.xp.layer` -- layers and directions, lengths, dropout: the array-API
  counterpart of :mod:`hiddenstate.classic.unroll`;
* :mod:`~hiddenstate.xp.step` -- one-step cells and the step map with its Jacobian;
* :mod:`~hiddenstate.kinds.delta.reference` -- the readable reference of the gated delta rule / KDA: one
  step and its exact adjoint.

Results are arrays of the input's library and device, in the layer's dtype; so are the
gradients of ``backward``, parameters' included (the parameters themselves stay NumPy arrays:
bring a gradient back with :func:`to_numpy`). NumPy input takes the tuned NumPy kernels.
"""

from hiddenstate.xp.arrays import is_foreign, namespace, to_numpy

__all__ = ["is_foreign", "namespace", "to_numpy"]
