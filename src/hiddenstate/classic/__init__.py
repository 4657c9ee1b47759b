"""The classic recurrent engine: Elman RNN, GRU, LSTM, minGRU and minLSTM, with exact BPTT.

* :mod:`~hiddenstate.classic.cells`: one module per cell kind (its equations, scan kernels and
  their exact backward, recorded gates, step Jacobian) and the registry ``KINDS`` that names them.
* :mod:`~hiddenstate.classic.layers`: the sequence layers (:class:`~hiddenstate.RNN`,
  :class:`~hiddenstate.GRU`, :class:`~hiddenstate.LSTM`, :class:`~hiddenstate.MinGRU`,
  :class:`~hiddenstate.MinLSTM`) on the engine of :mod:`~hiddenstate.classic.recurrent`,
  :mod:`~hiddenstate.classic.unroll` and :mod:`~hiddenstate.classic.prepared`.
* :mod:`~hiddenstate.classic.textbook`: the seeds' step functions (``elman_step``,
  ``hidden_state_update``, ...), written as the papers write them.
* :mod:`~hiddenstate.classic.gradcheck`: the public finite-difference gradient checker.
"""
