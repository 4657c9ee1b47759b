"""The pipelines: a model in, measurements and a report (or an exported file) out.

* :mod:`~hiddenstate.pipelines.app`: a trained run's checkpoint -> probes -> report (``hiddenstate
  inspect RUN``, ``hiddenstate demo``).
* :mod:`~hiddenstate.pipelines.inspection`: :func:`~hiddenstate.inspect_model`, any torch, Keras or
  hiddenstate model (or a safetensors file) -> probes -> report, in one call.
* :mod:`~hiddenstate.pipelines.family_inspection`: the same for a model of a registered
  transformers family (recomputed from its own run) or one of our blocks' language models.
* :mod:`~hiddenstate.pipelines.rnns_inside`: the ``torch.nn.RNN/GRU/LSTM`` inside any torch model,
  recomputed from its own run and measured (:func:`~hiddenstate.inspect_model` comes here).
* :mod:`~hiddenstate.pipelines.inspect_command`: which model a path on the command line names.
* :mod:`~hiddenstate.pipelines.export`: a trained run -> ONNX or a ``torch.export`` program.
* :mod:`~hiddenstate.pipelines.analyze`: :func:`~hiddenstate.analyze`, any model the package knows -> the
  analysis of its kind.
"""
