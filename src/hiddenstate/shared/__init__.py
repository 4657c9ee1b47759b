"""The pieces the recurrent kinds share: the sequence-block base, the causal convolution, the scans.

* :mod:`~hiddenstate.shared.seqblock`: :class:`~hiddenstate.shared.seqblock.SequenceBlock`, the
  base of every modern block (validation, state checks, the forward/backward envelope).
* :mod:`~hiddenstate.shared.causal_conv`: the depthwise causal convolution (Mamba, Griffin, LFM2),
  restarts included, forward and exact backward.
* :mod:`~hiddenstate.shared.scan`: linear recurrences ``h_t = a_t * h_{t-1} + b_t`` over all steps
  at once (minGRU, minLSTM, Mamba, RWKV, the RG-LRU, mLSTM).
* :mod:`~hiddenstate.shared.ssd`: the chunked matrix form of a recurrence with a scalar decay per
  head (Mamba-2's SSD, mLSTM's chunkwise form) and its exact adjoint.
"""
