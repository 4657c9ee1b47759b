"""Look inside the hidden state: traces, gate statistics, gradient flow, memory, fixed points, PCA, units.

Each module measures one thing on a layer of :mod:`hiddenstate` (or on arrays); all of them read
the cells' one-step maps and kernels (:mod:`hiddenstate.classic.cells`), and :mod:`~.analysis` runs them
together.
"""
