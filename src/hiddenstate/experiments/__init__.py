"""Paper reproductions (``hiddenstate reproduce NAME``) and the synthetic tasks they train on.

=============  ===============================================================================
module         holds
=============  ===============================================================================
reproduce      the registry :data:`~hiddenstate.experiments.reproduce.EXPERIMENTS`, the quick
               settings and :func:`~hiddenstate.experiments.reproduce.run` (the CLI's entry)
harness        :func:`~hiddenstate.experiments.harness.record`, the one epilogue every
               experiment ends with (figure, wall time, result dict), and ``format_result``
training       the shared model (a layer plus a linear readout), losses and training loops
elman          Elman (1990): temporal XOR, letter sequences, lexical classes
arjovsky       Arjovsky, Shah & Bengio (2016): the adding problem and copying memory
flipflop       Sussillo & Barak (2013): the 3-bit flip-flop and its fixed points
tasks          every data generator (re-exports ``sentences`` and ``encoding``)
sentences      Elman's sentence corpus: tables, templates, likelihood vectors
encoding       one-hot codes
=============  ===============================================================================

Imports go one way: ``encoding`` -> ``sentences`` -> ``tasks``, and ``tasks``, ``harness``,
``training`` -> the three paper modules -> ``reproduce``. From outside the package only the
core modules, :mod:`hiddenstate.probe`, :mod:`hiddenstate.train.optim` and
:mod:`hiddenstate.report.figures` are imported.
"""
