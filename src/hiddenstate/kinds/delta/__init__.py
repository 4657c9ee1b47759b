"""The gated delta rule (Yang et al. 2024; Qwen3-Next, OLMo-hybrid) and Kimi Delta Attention.

This folder holds everything of the kind:

* :mod:`~hiddenstate.kinds.delta.kernel`: the delta rule's recurrence on a matrix state, forward and exact backward (the equations);
* :mod:`~hiddenstate.kinds.delta.chunked`: its chunked WY/UT form and exact adjoint;
* :mod:`~hiddenstate.kinds.delta.block_kernel`: the block's projections, convolution and gates around the recurrence, forward and backward;
* :mod:`~hiddenstate.kinds.delta.block`: the blocks GatedDeltaNet and KimiDeltaAttention;
* :mod:`~hiddenstate.kinds.delta.reference`: the array-API reference step;
* :mod:`~hiddenstate.kinds.delta.view`: the RecordView, the non-diagonal Jacobian products and the effective rank;
* :mod:`~hiddenstate.kinds.delta.analysis`: what the analyses measure on the matrix state, per head;
* :mod:`~hiddenstate.kinds.delta.card`: what the family page says of both kinds.
"""

from hiddenstate.core.oldpaths import moved_names

# 0.2's module ``hiddenstate.kinds.delta`` is this folder's ``view`` now: its names still resolve here, with a warning
__getattr__ = moved_names(__name__, "hiddenstate.kinds.delta.view", ('KINDS', 'delta_lag_norms', 'delta_states', 'delta_view', 'effective_rank', 'numerical_rank', 'singular_values'))
