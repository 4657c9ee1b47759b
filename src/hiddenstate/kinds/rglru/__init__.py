"""The RG-LRU of Griffin / RecurrentGemma (De et al. 2024): a gated diagonal linear recurrence.

This folder holds everything of the kind:

* :mod:`~hiddenstate.kinds.rglru.kernel`: the recurrence, forward and exact backward (the equations);
* :mod:`~hiddenstate.kinds.rglru.block`: the RGLRUBlock (with its causal convolution).
"""
