"""The gated short convolution of LFM2: a window of the last few inputs as the state.

This folder holds everything of the kind:

* :mod:`~hiddenstate.kinds.shortconv.kernel`: the gated convolution, forward and exact backward (the equations);
* :mod:`~hiddenstate.kinds.shortconv.block`: the ShortConv block;
* :mod:`~hiddenstate.kinds.shortconv.view`: the RecordView the analyses read, and the kind's record;
* :mod:`~hiddenstate.kinds.shortconv.analysis`: what the analyses measure on its state;
* :mod:`~hiddenstate.kinds.shortconv.card`: what the family page says of it.
"""
