"""The infrastructure every other part of the package stands on; NumPy only.

* :mod:`~hiddenstate.core.validation`: every argument rule, once ("x must ...; got ...").
* :mod:`~hiddenstate.core.functional`: the stable sigmoid, softmax and cross-entropy.
* :mod:`~hiddenstate.core.params`: parameters in torch's layout (initialisation, shapes, loading in place).
* :mod:`~hiddenstate.core.ragged`: ragged batches without packing (padding, masks, the last valid step).
* :mod:`~hiddenstate.core.files`: atomic writes; :mod:`~hiddenstate.core.resources`: the memory a request may take;
  :mod:`~hiddenstate.core.workspace`: work buffers the kernels reuse across calls.
* :mod:`~hiddenstate.core.extras`: the optional packages and the one-line error that names their extra;
  :mod:`~hiddenstate.core.progress`: progress bars; :mod:`~hiddenstate.core.lazy`: the lazy exports of the
  package ``__init__`` files; :mod:`~hiddenstate.core.oldpaths`: moved module paths kept importable for a release;
  :mod:`~hiddenstate.core.nesting`: why a nested list is not an array.
"""
