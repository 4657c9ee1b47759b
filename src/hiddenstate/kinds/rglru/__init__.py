"""The RG-LRU of Griffin / RecurrentGemma (De et al. 2024): a gated diagonal linear recurrence.

This folder holds everything of the kind:

* :mod:`~hiddenstate.kinds.rglru.kernel`: the recurrence, forward and exact backward (the equations);
* :mod:`~hiddenstate.kinds.rglru.block`: the RGLRUBlock (with its causal convolution);
* :mod:`~hiddenstate.kinds.rglru.view`: the RecordView the analyses read, and the kind's record;
* :mod:`~hiddenstate.kinds.rglru.analysis`: what the analyses measure on its state;
* :mod:`~hiddenstate.kinds.rglru.card`: what the family page says of it.
"""
