"""Lightning attention (MiniMax): linear attention with a constant decay per head.

This folder holds everything of the kind:

* :mod:`~hiddenstate.kinds.lightning.kernel`: the recurrence on a matrix state, forward and exact backward (the equations);
* :mod:`~hiddenstate.kinds.lightning.block`: the LightningAttention block.
"""
