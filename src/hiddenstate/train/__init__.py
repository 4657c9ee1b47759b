"""Train a character-level language model: model, corpus, optimizers, checkpoints, the loop.

``hiddenstate.train.train(config)``, ``load(run_dir)``, ``sample(run_dir, ...)`` and
:class:`TrainConfig` are the entry points. One concept per module:

* :mod:`~hiddenstate.train.model` -- :class:`CharRNN`, one-hot/embedding -> recurrent layers -> ``W_hy``;
* :mod:`~hiddenstate.train.corpus` -- vocabulary, the embedded text, the truncated-BPTT batcher;
* :mod:`~hiddenstate.train.optim` -- Adam, SGD, the moving average of the weights, gradient clipping;
* :mod:`~hiddenstate.train.config` -- :class:`TrainConfig`, its rules, :data:`PRESETS`, :func:`lr_at`;
* :mod:`~hiddenstate.train.rundir` -- a run directory: :func:`resolve_checkpoint`, :func:`load`,
  :class:`Trained`, :func:`sample`; its subpackage holds the machinery of the directory:
  ``checkpoint`` (safetensors + JSON, saved atomically, loaded after size and digest checks;
  ``checkpoint_record``: the strict JSON record), ``snapshot`` (what a run's checkpoint holds,
  :class:`Snapshot`, checked by ``snapshot_schema``) and ``ownership`` (who may write a run
  directory: refusals, ``--overwrite``, the lock);
* :mod:`~hiddenstate.train.distributed` -- one run over several processes on ``torch.distributed``
  (torchrun, ``--processes``): what a rank does, how rows are sharded, the collectives;
* :mod:`~hiddenstate.train.history` -- ``log.jsonl`` and :func:`plot_history`;
* :mod:`~hiddenstate.train.guards` -- signals saved at the end of a step, divergence, disk errors;
* :mod:`~hiddenstate.train.initial_state` -- ``h0`` in the model's format, ``dL/dh0``, named arrays;
* :mod:`~hiddenstate.train.steps` -- one training step, validation, the carried state;
* :mod:`~hiddenstate.train.tuning` -- initial-state tuning (``tune_initial_state``): only ``h0`` trains;
* :mod:`~hiddenstate.train.loop` -- :func:`train`, :class:`TrainResult`, :func:`evaluate`;
* :mod:`~hiddenstate.train.pretrained` -- :func:`load_pretrained`, the demo's GRU shipped with the package.

Imports flow down that list's dependencies only (loop -> rundir -> snapshot -> checkpoint, ...);
nothing here imports ``probe``, ``report.page``, ``app`` or ``cli``.
"""

from hiddenstate.core.lazy import attach

_EXPORTS = {
    "PRESETS": "hiddenstate.train.config",
    "TrainConfig": "hiddenstate.train.config",
    "lr_at": "hiddenstate.train.config",
    "Snapshot": "hiddenstate.train.rundir.snapshot",
    "Trained": "hiddenstate.train.rundir",
    "load": "hiddenstate.train.rundir",
    "resolve_checkpoint": "hiddenstate.train.rundir",
    "sample": "hiddenstate.train.rundir",
    "plot_history": "hiddenstate.train.history",
    "load_pretrained": "hiddenstate.train.pretrained",
    "check_initial_state": "hiddenstate.train.initial_state",
    "initial_state_gradient": "hiddenstate.train.initial_state",
    "TrainResult": "hiddenstate.train.loop",
    "evaluate": "hiddenstate.train.loop",
    "train": "hiddenstate.train.loop",
}
_SUBMODULES = ("checkpoint", "checkpoint_record", "config", "corpus", "device", "generate", "guards", "history",
               "initial_state", "loop", "model", "optim", "ownership", "pretrained", "rundir", "snapshot",
               "snapshot_schema", "steps", "tuning")
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = attach(__name__, _EXPORTS | {name: f"hiddenstate.train.{name}" for name in _SUBMODULES},
                              globals())
