"""Train a character-level language model: model, corpus, optimizers, checkpoints, the loop.

``hiddenstate.train.train(config)``, ``load(run_dir)``, ``sample(run_dir, ...)`` and
:class:`TrainConfig` are the entry points (:mod:`hiddenstate.train.loop`); the building blocks
are :mod:`~hiddenstate.train.model` (:class:`CharRNN`), :mod:`~hiddenstate.train.corpus`,
:mod:`~hiddenstate.train.optim` and :mod:`~hiddenstate.train.checkpoint`.
"""

from hiddenstate.lazy import attach

_LOOP = "hiddenstate.train.loop"
__all__ = ["PRESETS", "TrainConfig", "TrainResult", "Trained", "evaluate", "load", "lr_at",
           "resolve_checkpoint", "sample", "train"]
__getattr__, __dir__ = attach(__name__, {name: _LOOP for name in __all__} | {
    "checkpoint": "hiddenstate.train.checkpoint", "corpus": "hiddenstate.train.corpus",
    "loop": "hiddenstate.train.loop", "model": "hiddenstate.train.model", "optim": "hiddenstate.train.optim"}, globals())
