"""Initial-state tuning with the trainer: only the initial state is a parameter, the weights are frozen.

``train({"tune_initial_state": RUN, "data": TEXT, ...})`` (``hiddenstate train
--tune-initial-state RUN --data TEXT``) runs :class:`StateTuner` instead of
:class:`~hiddenstate.train.steps.Trainer`: the same loop, checkpoints, resume and distributed
runs, with these differences:

* the model (its configuration, weights and vocabulary) is RUN's, and its weights never change;
* the one parameter is the initial state of the recurrent layers, one row in the model's format
  (:mod:`hiddenstate.train.initial_state`), zeros at the start; Adam updates it with the exact
  gradient ``dL/dh0`` (BPTT through every layer, summed over the batch's rows);
* every batch starts from the tuned state: no state is carried between chunks, so each chunk of
  ``seq_len`` characters is read from the state being tuned (what generation starts from);
* validation reads each row of the held-out text from the tuned state
  (:func:`~hiddenstate.train.steps.nll_sum` with ``initial_state``);
* a distributed run all-reduces the state's gradient (one bucket) like a weight's.

The checkpoint holds the frozen weights and the tuned state (``initial_state.*`` arrays), so a
tuning run resumes bit for bit and :attr:`hiddenstate.train.Trained.initial_state` gives the state
to sample from. There is no moving average (``ema`` must be None) and no dropout while tuning.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hiddenstate.train.config import TrainConfig
from hiddenstate.train.initial_state import initial_state_gradient, state_from_arrays, state_to_arrays
from hiddenstate.train.optim import Adam
from hiddenstate.train.rundir import Trained, load
from hiddenstate.train.rundir.snapshot import Snapshot
from hiddenstate.train.steps import Corpus, Trainer, nll_sum, validation_rows

__all__ = ["MODEL_FIELDS", "StateTuner", "tuned_config"]

#: The fields of a TrainConfig that a tuning run takes from the model it tunes.
MODEL_FIELDS = ("cell", "hidden_size", "num_layers", "embedding_dim", "dropout", "weight_drop", "dtype")


def tuned_config(cfg: TrainConfig, given: dict | None = None) -> tuple[TrainConfig, Trained]:
    """A tuning run's configuration: ``cfg`` with the model fields of the run it tunes.

    Parameters
    ----------
    cfg : TrainConfig
        With ``tune_initial_state`` set (a run or checkpoint directory).
    given : dict, optional
        The fields the caller set: a model field (:data:`MODEL_FIELDS`) set to another value
        than the tuned model's is refused.

    Returns
    -------
    cfg : TrainConfig
        The model fields (:data:`MODEL_FIELDS`) replaced by the tuned model's.
    base : Trained
        The model being tuned (:func:`hiddenstate.train.load`).

    Raises
    ------
    FileNotFoundError, ValueError
        No checkpoint there, or one that does not load (the message names ``--tune-initial-state``);
        a model field given with another value than the tuned model's.
    """
    try:
        base = load(cfg.tune_initial_state)
    except (FileNotFoundError, ValueError) as error:
        raise type(error)(f"--tune-initial-state: {error}") from None
    for key, value in (given or {}).items():
        if key in MODEL_FIELDS and value is not None and value != getattr(base.config, key):
            raise ValueError(f"--{key.replace('_', '-')} must be the tuned model's ({getattr(base.config, key)!r}) with "
                             f"--tune-initial-state; got {value!r}. Drop the flag: the model is the one being tuned.")
    return dataclasses.replace(cfg, **{k: getattr(base.config, k) for k in MODEL_FIELDS}), base


class StateTuner(Trainer):
    """A :class:`~hiddenstate.train.steps.Trainer` whose only parameter is the model's initial state.

    Parameters
    ----------
    cfg : TrainConfig
        With ``tune_initial_state`` (after :func:`tuned_config`).
    corpus : Corpus
        The text, encoded with the tuned model's vocabulary.
    world : World
        This process's place in the run.
    base : Trained, optional
        The model to tune (a new run); None when a checkpoint is restored (:meth:`restore`).
    """

    def __init__(self, cfg: TrainConfig, corpus: Corpus, world, base: Trained | None = None):
        super().__init__(cfg, corpus, world)
        if base is not None:
            self.model.load_state_dict(base.model.state_dict())
        self.params = state_to_arrays(self.model, self.model.initial_state(1))  # the parameters Adam sees
        self.groups = [list(self.params)]
        self.opt = Adam(self.params, lr=cfg.lr)

    @property
    def initial_state(self):
        """The tuned state in the model's format (one row), a view of the parameters."""
        return state_from_arrays(self.model, self.params)

    def restore(self, snap: Snapshot) -> None:
        """Continue from a tuning run's checkpoint: frozen weights, tuned state, optimizer, batcher, RNG.

        Parameters
        ----------
        snap : Snapshot
            The checkpoint's contents (its ``initial_state`` the tuned state's arrays).
        """
        super().restore(snap)
        tuned = state_from_arrays(self.model, snap.initial_state or {}, name="the checkpoint's initial_state")
        for key, value in state_to_arrays(self.model, tuned).items():
            np.copyto(self.params[key], value)

    def snapshot(self, val_loss: float | None, elapsed_s: float) -> Snapshot:
        """The checkpoint: the frozen weights, the tuned state and the optimizer's moments over it.

        Parameters
        ----------
        val_loss : float or None
            The last validation loss, nats per character.
        elapsed_s : float
            Seconds trained so far.

        Returns
        -------
        Snapshot
        """
        self.world.check_same_weights(self.params)  # ranks: still one state
        snap = super().snapshot(val_loss, elapsed_s)
        return dataclasses.replace(snap, initial_state={k: v.copy() for k, v in self.params.items()})

    def _loss_and_grads(self, inputs, targets, ready=None):
        loss, d_h0 = initial_state_gradient(self.model, inputs, targets, self.initial_state)
        grads = state_to_arrays(self.model, d_h0)
        if ready is not None:
            ready(grads)
        return loss, grads, None

    def _compute(self, inputs, targets):
        return self.world.local(
            lambda ready=None: self._loss_and_grads(inputs, targets, ready), self.params, self.groups
        )

    def evaluate(self) -> float:
        """The validation loss with every row read from the tuned state.

        Returns
        -------
        float
            Nats per character.
        """
        rows = self.world.val_rows(validation_rows(self.corpus.val_ids).shape[1])
        total, count = nll_sum(self.model, self.corpus.val_ids, rows=rows, initial_state=self.initial_state)
        total, count = self.world.sum(total, count)
        return total / count

    def final_model(self):
        """The model (its weights are the tuned run's, unchanged).

        Returns
        -------
        CharRNN
        """
        return self.model
