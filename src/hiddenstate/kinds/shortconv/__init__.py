"""The gated short convolution of LFM2: a window of the last few inputs as the state.

This folder holds everything of the kind:

* :mod:`~hiddenstate.kinds.shortconv.kernel`: the gated convolution, forward and exact backward (the equations);
* :mod:`~hiddenstate.kinds.shortconv.block`: the ShortConv block.
"""
