"""What the checkpoint of a training run holds, defined once for the save and the load side.

:func:`~hiddenstate.train.rundir.checkpoint.save_checkpoint` stores weights, a JSON document and other
arrays; for a run of :func:`~hiddenstate.train.train` they are a :class:`Snapshot`, whose fields
are the entries below. :meth:`Snapshot.save` writes them and :meth:`Snapshot.read` reads them back,
both through the same tables (:data:`META`, :data:`ARRAYS`, :data:`HISTORY`): every key is spelled
once, in a table, with its meaning.

``model.safetensors``
    ``weights``: the model's parameters under torch's names (``rnn.weight_ih_l0`` ...,
    ``decoder.weight``), the moving average when the run has ``ema``.
``meta.json``
    The document :data:`META` describes (configuration, vocabulary, step, RNG state ...).
``optimizer.safetensors``
    The arrays :data:`ARRAYS` describes (optimizer moments, raw weights, carried state, history).

Reading checks all of it first (:mod:`hiddenstate.train.rundir.snapshot_schema`): every entry of
``meta.json`` against its rule, and the weights, raw weights and carried state for finiteness in
the model's dtype, so a bad checkpoint is one ``ValueError`` naming the file and the entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hiddenstate.classic.layers import BY_KIND
from hiddenstate.train.rundir.checkpoint import META_FILE, MODEL_FILE, OPTIMIZER_FILE, load_checkpoint, save_checkpoint
from hiddenstate.train.rundir.snapshot_schema import check_mamba_carry, check_meta, check_weights

__all__ = ["ARRAYS", "HISTORY", "KIND", "META", "Snapshot"]

#: ``meta["kind"]`` of every run checkpoint: what wrote it.
KIND = "hiddenstate.CharRNN"

#: ``meta.json``'s document: key -> meaning. Every key but ``kind`` and ``torch`` is a field of
#: :class:`Snapshot` of the same name.
META = {
    "kind": f"always {KIND!r}: the checkpoint was written by hiddenstate.train",
    "model": "CharRNN.config(): the constructor arguments that rebuild the model",
    "train": "TrainConfig.to_dict(): the run's configuration",
    "vocab": "Vocabulary.to_json(): the characters in id order",
    "step": "optimizer steps done (int)",
    "val_loss": "the last validation loss in nats/char (float), None before the first evaluation",
    "batcher": "StreamBatcher.state_dict(): where the next training batch starts",
    "rng": "rng.bit_generator.state of the run's generator (the dropout masks still to draw)",
    "elapsed_s": "wall-clock seconds of the run so far, summed over resumed parts (float)",
    "text": "the training text: chars, sha256 (of its UTF-8), source, train_chars, val_chars",
    "torch": "a note for people: which torch.nn module loads the 'rnn.' weights",
}

#: ``optimizer.safetensors``: array name -> meaning. A name ending in ``"."`` is a prefix, one
#: array per entry of a dict (``"adam.exp_avg.rnn.weight_hh_l0"``).
ARRAYS = {
    "adam.": "Snapshot.adam: Adam.state_dict() ('step', 'exp_avg.<param>', 'exp_avg_sq.<param>')",
    "weights.": "Snapshot.raw_weights: the trained (not averaged) parameters, only with ema",
    "ema.step": "Snapshot.ema_steps: updates folded into the moving average, int64 (), only with ema",
    "carry.h": "Snapshot.carry: the hidden state carried into the next chunk, (L, N, H)",
    "carry.c": "Snapshot.carry: the LSTM's carried cell state, (L, N, H)",
    "carry.ssm": "Snapshot.carry: a mamba model's carried SSM states, (L, N, Di, S)",
    "carry.conv": "Snapshot.carry: a mamba model's carried convolution inputs, (L, N, Di, K-1)",
    "history.": "Snapshot.history: one 1-D array per entry of HISTORY",
    "initial_state.": "Snapshot.initial_state: the tuned initial state of a --tune-initial-state run, named as "
                      "the carry (h, c, ssm, conv) with one row (L, 1, ...)",
}

#: The loss history of a run (``history.<key>`` in ``optimizer.safetensors``): key -> dtype.
#: ``train_loss`` and ``grad_norm`` (before clipping) have one entry per step (index i is step
#: i+1); ``val_step`` and ``val_loss`` one per validation pass. Losses in nats/char.
HISTORY = {"train_loss": np.float64, "grad_norm": np.float64, "val_step": np.int64, "val_loss": np.float64}

_ADAM, _RAW, _EMA_STEP, _CARRY_H, _CARRY_C, _CARRY_SSM, _CARRY_CONV, _HISTORY, _INITIAL = ARRAYS  # the names, in the table's order
_DERIVED = ("kind", "torch")  # meta entries that are not fields: a constant and a note


def _prefixed(prefix: str, arrays: dict) -> dict:
    return {prefix + key: value for key, value in arrays.items()}


def _unprefixed(prefix: str, arrays: dict) -> dict:
    return {key[len(prefix):]: value for key, value in arrays.items() if key.startswith(prefix)}


def _check_arrays(params: dict, meta: dict, arrays: dict, where_model: str, where_arrays: str) -> None:
    """The arrays of :data:`ARRAYS` and the weights, against ``meta`` (already checked)."""
    model, dtype = meta["model"], meta["model"]["dtype"]
    check_weights(where_model, params, dtype)
    raw = _unprefixed(_RAW, arrays)
    check_weights(where_arrays, _prefixed(_RAW, raw), dtype)
    ema = arrays.get(_EMA_STEP)
    if ema is not None and not (ema.shape == () and ema.dtype.kind in "iu" and int(ema) >= 0):
        raise ValueError(f"{where_arrays}: array '{_EMA_STEP}' must be a non-negative integer scalar; got dtype "
                         f"{ema.dtype}, shape {ema.shape}.")
    if (ema is not None) != bool(raw) or (raw and raw.keys() != params.keys()):
        raise ValueError(f"{where_arrays} must hold '{_EMA_STEP}' and one '{_RAW}<name>' per weight together (a run "
                         f"with ema) or neither; got '{_EMA_STEP}' {'present' if ema is not None else 'absent'} "
                         f"and {len(raw)} of {len(params)} raw weights.")
    carry = {key: arrays[key] for key in (_CARRY_H, _CARRY_C, _CARRY_SSM, _CARRY_CONV) if key in arrays}
    if carry and model.get("cell") == "mamba":
        check_mamba_carry(where_arrays, carry, model, meta["batcher"]["batch_size"])
    elif carry:
        cell = model.get("cell", "gru")
        paired = BY_KIND[cell].kind.has_cell  # the state is (h, c)
        want = (model.get("num_layers", 1), meta["batcher"]["batch_size"], model["hidden_size"])
        if _CARRY_H not in carry or (_CARRY_C in carry) != paired:
            raise ValueError(f"{where_arrays} must hold {'both' if paired else 'only'} '{_CARRY_H}'"
                             f"{' and' if paired else ', not'} '{_CARRY_C}' for cell {cell!r}; got {sorted(carry)}.")
        for key, value in carry.items():
            if value.shape != want:
                raise ValueError(f"{where_arrays}: array '{key}' must have shape (L={want[0]}, N={want[1]}, "
                                 f"H={want[2]}); got {value.shape}.")
        check_weights(where_arrays, carry, dtype, what="array")
    initial = _unprefixed(_INITIAL, arrays)
    tuning = meta["train"].get("tune_initial_state") is not None
    if bool(initial) != tuning:
        raise ValueError(f"{where_arrays} must hold the tuned '{_INITIAL}' arrays exactly when train.tune_initial_state "
                         f"is set; got {len(initial)} such arrays and tune_initial_state "
                         f"{meta['train'].get('tune_initial_state')!r}.")
    check_weights(where_arrays, _prefixed(_INITIAL, initial), dtype, what="array")
    for key, kind in HISTORY.items():
        value = arrays[_HISTORY + key]
        if value.ndim != 1 or value.dtype != np.dtype(kind):
            raise ValueError(f"{where_arrays}: array '{_HISTORY}{key}' must be a 1-D {np.dtype(kind)} array; got "
                             f"dtype {value.dtype}, shape {value.shape}.")


@dataclass
class Snapshot:
    """Everything a training run saves to resume exactly: the contents of its checkpoint.

    Parameters
    ----------
    model, train, vocab, step, val_loss, batcher, rng, elapsed_s, text
        The entries of ``meta.json`` of the same names (see :data:`META`).
    weights : dict of str to ndarray
        ``model.safetensors``: what is evaluated and sampled (the average when ``ema`` is set).
    adam : dict of str to ndarray
        ``Adam.state_dict()``.
    history : dict of str to list
        The keys of :data:`HISTORY`, as Python lists.
    carry : ndarray of shape (L, N, H), a pair of them (LSTM), or None
        The hidden state carried into the next chunk; None at the start of a pass over the text.
    raw_weights : dict of str to ndarray, optional
        With ``ema``: the trained weights that training resumes from.
    ema_steps : int, optional
        With ``ema``: ``ExponentialMovingAverage.n_averaged``.
    initial_state : dict of str to ndarray, optional
        A ``tune_initial_state`` run's tuned state, named arrays of one row
        (:func:`hiddenstate.train.initial_state.state_to_arrays`); the weights are then the frozen
        model's.
    """

    model: dict
    train: dict
    vocab: dict
    step: int
    val_loss: float | None
    batcher: dict
    rng: dict
    elapsed_s: float
    text: dict
    weights: dict = field(repr=False)
    adam: dict = field(repr=False)
    history: dict = field(repr=False)
    carry: np.ndarray | tuple | None = field(default=None, repr=False)
    raw_weights: dict | None = field(default=None, repr=False)
    ema_steps: int | None = None
    initial_state: dict | None = field(default=None, repr=False)

    def torch_note(self) -> str:
        """``meta["torch"]``: which ``torch.nn`` module loads the ``rnn.`` weights.

        Returns
        -------
        str
            E.g. ``"torch.nn.GRU(63, 256, num_layers=1) loads the 'rnn.' weights (prefix stripped)"``.
        """
        m = self.model
        input_size = m["embedding_dim"] if m.get("embedding_dim") else m["vocab_size"]
        if m["cell"] == "mamba":
            return ("no torch.nn module loads the 'rnn.' weights of a mamba model (hiddenstate.kinds.ssm.stack."
                    "MambaStack); its 'rnn.layers.{l}.mixer.' weights are named as in transformers' MambaMixer")
        if not BY_KIND[m["cell"]].kind.recurrent:  # minGRU/minLSTM blocks: torch.nn has no such module
            return (f"no torch.nn module loads the 'rnn.' weights of a {m['cell']} model (residual blocks of "
                    f"linear recurrences, hiddenstate.train.blocks.MinStack); the names follow torch's conventions")
        return (f"torch.nn.{m['cell'].upper()}({input_size}, {m['hidden_size']}, "
                f"num_layers={m['num_layers']}) loads the 'rnn.' weights (prefix stripped)")

    def to_files(self) -> tuple[dict, dict, dict]:
        """The three parts :func:`~hiddenstate.train.rundir.checkpoint.save_checkpoint` writes.

        Returns
        -------
        params : dict of str to ndarray
            ``weights``.
        meta : dict
            The document of :data:`META` (JSON-serializable).
        arrays : dict of str to ndarray
            The arrays of :data:`ARRAYS`; history as float64/int64 1-D arrays.
        """
        meta = {key: getattr(self, key) for key in META if key not in _DERIVED}
        meta = {"kind": KIND, **meta, "torch": self.torch_note()}
        arrays = _prefixed(_ADAM, self.adam)
        if self.raw_weights is not None:
            arrays.update(_prefixed(_RAW, self.raw_weights))
            arrays[_EMA_STEP] = np.array(self.ema_steps, dtype=np.int64)
        if isinstance(self.carry, tuple) and self.model["cell"] == "mamba":
            arrays[_CARRY_SSM] = np.ascontiguousarray(self.carry[0])
            arrays[_CARRY_CONV] = np.ascontiguousarray(self.carry[1])
        elif isinstance(self.carry, tuple):
            arrays[_CARRY_H] = np.ascontiguousarray(self.carry[0])
            arrays[_CARRY_C] = np.ascontiguousarray(self.carry[1])
        elif self.carry is not None:
            arrays[_CARRY_H] = np.ascontiguousarray(self.carry)
        for key, dtype in HISTORY.items():
            arrays[_HISTORY + key] = np.asarray(self.history[key], dtype=dtype)
        arrays.update(_prefixed(_INITIAL, {k: np.ascontiguousarray(v) for k, v in (self.initial_state or {}).items()}))
        return self.weights, meta, arrays

    @classmethod
    def from_files(cls, params: dict, meta: dict, arrays: dict, *, name: str = "checkpoint",
                   path=None) -> Snapshot:
        """The inverse of :meth:`to_files`, after checking every entry (see the module docstring).

        Parameters
        ----------
        params, meta, arrays
            As :func:`~hiddenstate.train.rundir.checkpoint.load_checkpoint` returns them.
        name : str, default "checkpoint"
            What the messages call the checkpoint (e.g. ``"checkpoint 'runs/gru/checkpoint'"``).
        path : str or os.PathLike, optional
            The checkpoint directory, so that messages name the file
            (``"'runs/gru/checkpoint/meta.json': field 'step' must ..."``).

        Returns
        -------
        Snapshot

        Raises
        ------
        ValueError
            ``meta`` is not a run's document (another ``kind``), an entry is missing, of the wrong
            type or range, or inconsistent with another; the weights (or the raw weights, the
            carried state) are not finite in the model's dtype; an array of :data:`ARRAYS` has
            the wrong dtype or shape. The message names the file and the entry.
        """
        if not isinstance(meta, dict) or meta.get("kind") != KIND:
            kind = meta.get("kind") if isinstance(meta, dict) else None
            raise ValueError(f"{name} must be written by hiddenstate.train (kind {KIND!r}); got kind {kind!r}. "
                             "It cannot be loaded as a model.")
        missing = [key for key in META if key not in meta and key != "torch"]
        missing += [_HISTORY + key for key in HISTORY if _HISTORY + key not in arrays]
        if missing:
            raise ValueError(f"{name} must hold every entry of a run checkpoint; missing {missing}. "
                             "It was written by another version or edited.")
        where = (lambda file: f"'{Path(path) / file}'") if path is not None else (lambda file: f"{name} {file}")
        unknown = sorted(set(meta) - set(META))
        if unknown:
            raise ValueError(f"{where(META_FILE)} has unknown entries {unknown}; a run checkpoint holds "
                             f"{sorted(META)}. It was written by another version or edited.")
        check_meta(meta, where(META_FILE))
        _check_arrays(params, meta, arrays, where(MODEL_FILE), where(OPTIMIZER_FILE))
        carry = arrays.get(_CARRY_H)
        if _CARRY_SSM in arrays:
            carry = (arrays[_CARRY_SSM].copy(), arrays[_CARRY_CONV].copy())
        elif carry is not None:
            carry = (carry.copy(), arrays[_CARRY_C].copy()) if _CARRY_C in arrays else carry.copy()
        ema = _EMA_STEP in arrays
        return cls(**{key: meta[key] for key in META if key not in _DERIVED},
                   weights=params, adam=_unprefixed(_ADAM, arrays),
                   history={key: arrays[_HISTORY + key].tolist() for key in HISTORY}, carry=carry,
                   raw_weights=_unprefixed(_RAW, arrays) if ema else None,
                   ema_steps=int(arrays[_EMA_STEP]) if ema else None,
                   initial_state={k: v.copy() for k, v in _unprefixed(_INITIAL, arrays).items()} or None)

    def save(self, directory) -> None:
        """Write the checkpoint to ``directory`` (atomically; see :mod:`hiddenstate.train.rundir.checkpoint`).

        Parameters
        ----------
        directory : str or os.PathLike
            The checkpoint directory (``<run>/checkpoint``); a previous checkpoint there is replaced.
        """
        save_checkpoint(directory, *self.to_files())

    @classmethod
    def read(cls, directory) -> Snapshot:
        """Read and verify the checkpoint in ``directory`` (the checkpoint directory itself).

        Parameters
        ----------
        directory : str or os.PathLike
            A checkpoint directory written by :meth:`save`.

        Returns
        -------
        Snapshot

        Raises
        ------
        FileNotFoundError, ValueError
            From :func:`~hiddenstate.train.rundir.checkpoint.load_checkpoint` (missing, truncated or
            modified files) and :meth:`from_files` (not a run checkpoint, or an entry that breaks
            its rule); the messages name the file.
        """
        params, meta, arrays = load_checkpoint(directory)
        return cls.from_files(params, meta, arrays, name=f"checkpoint '{directory}'", path=directory)
