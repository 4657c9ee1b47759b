"""Lightning attention (MiniMax): linear attention with a constant decay per head.

This folder holds everything of the kind:

* :mod:`~hiddenstate.kinds.lightning.kernel`: the recurrence on a matrix state, forward and exact backward (the equations);
* :mod:`~hiddenstate.kinds.lightning.block`: the LightningAttention block;
* :mod:`~hiddenstate.kinds.lightning.view`: the RecordView the analyses read, and the kind's record;
* :mod:`~hiddenstate.kinds.lightning.analysis`: what the analyses measure on its state;
* :mod:`~hiddenstate.kinds.lightning.card`: what the family page says of it.
"""
