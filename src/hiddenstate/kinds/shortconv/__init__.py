"""The gated short convolution of LFM2: a window of the last few inputs as the state.

This folder holds everything of the kind:

* :mod:`~hiddenstate.kinds.shortconv.kernel`: the gated convolution, forward and exact backward (the equations);
* :mod:`~hiddenstate.kinds.shortconv.block`: the ShortConv block;
* :mod:`~hiddenstate.kinds.shortconv.dynamic_kernel`, :mod:`~hiddenstate.kinds.shortconv.dynamic`: Inkling 2's
  dynamic short convolution (input-dependent taps), forward and exact backward, and its block;
* :mod:`~hiddenstate.kinds.shortconv.cca_kernel`, :mod:`~hiddenstate.kinds.shortconv.cca`: ZAYA's CCA projection
  (stacked causal convolutions over queries and keys, a one-token delayed value), forward and exact backward, and
  :mod:`~hiddenstate.kinds.shortconv.cca_view`: its view and the kind ``"cca"``'s record (its state's share too);
* :mod:`~hiddenstate.kinds.shortconv.view`: the RecordView the analyses read, and the kind's record;
* :mod:`~hiddenstate.kinds.shortconv.analysis`: what the analyses measure on its state (and on CCA's);
* :mod:`~hiddenstate.kinds.shortconv.card`: what the family page says of it.
"""
