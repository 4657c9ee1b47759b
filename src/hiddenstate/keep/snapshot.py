"""The state as an object you keep: a model's whole state after a prefix, to save, load, fork and continue.

A :class:`Snapshot` holds, exactly, every array of a model's state after the prefix ids (N, T):
every recurrent state (SSM, matrix, RG-LRU, h and c), every convolution window and the keys and
values of the attention layers (``arrays``, each with its layer, part, dtype and batch axis in
``info``), the state's plain values (counters, flags: ``scalars``) and the logits at the
prefix's last position (``next_logits``, (N, V) float64: what generation draws the first token
from). It names the model it came from: ``model_type``, ``config`` (the config's dict) and
``digest`` (SHA-256 over the names, shapes, dtypes and bytes of the model's weights, in sorted
name order), so a snapshot is only ever continued by the model that made it.

Continuing (:meth:`Snapshot.continue_with`) runs the model's own code from the kept state and
equals running prefix + suffix from scratch to round-off; :meth:`Snapshot.fork` repeats each
sequence ``n`` times along the batch, so ``n`` suffixes continue one prefix;
:meth:`Snapshot.generate` draws tokens greedily or by sampling. Where a model's state lives and
how it continues: :mod:`hiddenstate.keep.families` (transformers models of every registered
family), :mod:`hiddenstate.keep.ours` (our character models and Mamba LMs). The file format:
:mod:`hiddenstate.keep.fileformat`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

import numpy as np

__all__ = ["BACKENDS", "Snapshot"]

#: Where each kind of model keeps its state (``Snapshot.backend`` names one).
BACKENDS = {"transformers": "hiddenstate.keep.families", "ours": "hiddenstate.keep.ours"}


def backend(name: str):
    """The module that captures, restores and continues a ``name`` model's state (:data:`BACKENDS`).

    Parameters
    ----------
    name : {"transformers", "ours"}

    Returns
    -------
    module
    """
    return importlib.import_module(BACKENDS[name])


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int; got {value!r:.60}.")
    return int(value)


@dataclass(eq=False, repr=False)
class Snapshot:
    """A model's whole state after a prefix (module docstring).

    Attributes
    ----------
    arrays : dict of str to ndarray
        Every array of the state by name (a path in the model's state object:
        ``cache.layers[3].conv_states[0]``, ``h``, ``layers.0.ssm``), exact (bfloat16 kept as
        its uint16 bits).
    info : dict of str to dict
        Per array: ``layer`` (int or None), ``part`` (``"conv_states"``, ``"recurrent_states"``,
        ``"keys"``, ``"values"``, ``"h"``, ``"c"``, ``"ssm"``, ``"conv"``, ...), ``dtype`` (the
        model's name for it: ``"float32"``, ``"bfloat16"``, ``"int64"``), ``batch_axis`` (int, or
        None for an array without one: a counter).
    scalars : dict of str to (int, float, bool, str or None)
        The state's plain values by path (counters, flags).
    next_logits : ndarray of shape (N, V), float64
        The logits at the prefix's last position.
    model_type : str
        ``config.model_type`` of a transformers model; ``"CharRNN"``, ``"MambaLM"``, ``"Mamba2LM"`` of ours.
    config : dict
        The model's config (transformers: ``config.to_dict()`` without where it came from; ours:
        its constructor's sizes).
    digest : str
        ``"sha256:..."`` of the model's weights.
    prefix_length : int
        T, the tokens the state has seen (positions continue from it).
    backend : {"transformers", "ours"}
    extra : dict
        Anything else the header carries (JSON), default empty.
    """

    arrays: dict
    info: dict
    scalars: dict
    next_logits: np.ndarray
    model_type: str
    config: dict
    digest: str
    prefix_length: int
    backend: str
    extra: dict = field(default_factory=dict)

    @property
    def batch(self) -> int:
        """N, the sequences the snapshot holds."""
        return int(self.next_logits.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays and ``next_logits`` (what :func:`hiddenstate.snapshot_bytes` states before)."""
        return int(sum(a.nbytes for a in self.arrays.values()) + self.next_logits.nbytes)

    def __repr__(self) -> str:
        return (f"Snapshot({self.model_type}, N={self.batch}, T={self.prefix_length}, {len(self.arrays)} arrays, "
                f"{self.nbytes} bytes)")

    def check_model(self, model, *, name: str = "model") -> None:
        """Refuse a model other than the one the snapshot was taken of (its type, config or weights).

        Parameters
        ----------
        model : the model to continue
        name : str, default "model"
            What the message calls it.

        Raises
        ------
        ValueError
            Another model type, config or weight digest (naming the first difference).
        """
        model_type, config, digest = backend(self.backend).describe(model)
        if model_type != self.model_type:
            raise ValueError(f"{name} must be the model the snapshot was taken of, a {self.model_type}; got a "
                             f"{model_type}.")
        if config != self.config:
            keys = sorted(set(config) | set(self.config), key=str)
            k = next(k for k in keys if config.get(k) != self.config.get(k))
            raise ValueError(f"{name} must have the snapshot's config; got {k}={config.get(k)!r:.60} where the "
                             f"snapshot has {self.config.get(k)!r:.60}.")
        if digest != self.digest:
            raise ValueError(f"{name} must have the weights the snapshot was taken with (digest {self.digest[:19]}...); "
                             f"got other weights (digest {digest[:19]}...).")

    def continue_with(self, model, suffix_ids) -> np.ndarray:
        """The model's logits on ``suffix_ids`` continued from this state.

        Equal to the last S positions of the model's forward pass on prefix + suffix, to
        round-off (each family's path: :data:`hiddenstate.keep.families.PATHS`).

        Parameters
        ----------
        model : the model the snapshot was taken of
        suffix_ids : array_like of int, shape (N, S) or (S,)
            (S,) continues every sequence with the same tokens.

        Returns
        -------
        ndarray of shape (N, S, V), float64

        Raises
        ------
        ValueError
            Another model (:meth:`check_model`); ids of another batch, empty, or out of the vocabulary.
        TypeError
            Ids that are not integers.
        """
        self.check_model(model)
        ids = self._suffix(suffix_ids)
        be = backend(self.backend)
        logits, _ = be.step(model, be.restore(model, self), ids, self.prefix_length)
        return logits

    def extend(self, model, suffix_ids) -> Snapshot:
        """The snapshot after prefix + ``suffix_ids``: the model continued from this state, then kept again.

        A long prefix taken in chunks (chunked prefill, or state passed between calls): each
        chunk continues from the last snapshot; the result equals :func:`hiddenstate.snapshot`
        of the whole prefix to round-off. This snapshot is unchanged.

        Parameters
        ----------
        model : the model the snapshot was taken of
        suffix_ids : array_like of int, shape (N, S) or (S,)

        Returns
        -------
        Snapshot
            Of prefix length T + S, its ``next_logits`` the suffix's last position's.

        Raises
        ------
        ValueError, TypeError
            As :meth:`continue_with`.
        """
        self.check_model(model)
        ids = self._suffix(suffix_ids)
        be = backend(self.backend)
        logits, live = be.step(model, be.restore(model, self), ids, self.prefix_length)
        axes = {k: i["batch_axis"] for k, i in self.info.items()}
        arrays, info, scalars = be.take_apart(model, live, axes)
        return Snapshot(arrays, info, scalars, np.array(logits[:, -1], dtype=np.float64), self.model_type,
                        self.config, self.digest, self.prefix_length + ids.shape[1], self.backend, dict(self.extra))

    def _suffix(self, suffix_ids, name="suffix_ids"):
        arr = np.asarray(suffix_ids)
        if arr.dtype == bool or arr.dtype.kind not in "iu":
            raise TypeError(f"{name} must be integer token ids of shape (N, S) or (S,); got dtype {arr.dtype}.")
        if arr.ndim == 1:
            arr = np.broadcast_to(arr, (self.batch, arr.shape[0]))
        if arr.ndim != 2 or arr.shape[0] != self.batch or arr.shape[1] == 0:
            raise ValueError(f"{name} must have shape (N={self.batch}, S) with S >= 1 (or (S,)); got shape "
                             f"{np.shape(suffix_ids)}.")
        V = self.next_logits.shape[1]
        if arr.min() < 0 or arr.max() >= V:
            raise ValueError(f"{name} must lie in [0, vocab_size={V}); got values in [{arr.min()}, {arr.max()}].")
        return np.ascontiguousarray(arr, dtype=np.int64)

    def fork(self, n) -> Snapshot:
        """Each sequence repeated ``n`` times along the batch: N*n sequences, row ``i*n + j`` a copy of ``i``.

        Parameters
        ----------
        n : int
            >= 1.

        Returns
        -------
        Snapshot
            Of batch N*n; the arrays are copies (a fork's continuation never changes this one).

        Raises
        ------
        ValueError
            ``n`` not a positive int.
        """
        n = _positive("n", n)
        arrays = {}
        for k, a in self.arrays.items():
            ax = self.info[k]["batch_axis"]
            arrays[k] = a.copy() if ax is None else np.repeat(a, n, axis=ax)
        return Snapshot(arrays, {k: dict(v) for k, v in self.info.items()}, dict(self.scalars),
                        np.repeat(self.next_logits, n, axis=0), self.model_type, self.config, self.digest,
                        self.prefix_length, self.backend, dict(self.extra))

    def generate(self, model, n_tokens, *, temperature=0.0, top_k=None, rng=None) -> np.ndarray:
        """Draw ``n_tokens`` tokens per sequence from this state: greedy (``temperature=0``) or sampled.

        Parameters
        ----------
        model : the model the snapshot was taken of
        n_tokens : int
            >= 1.
        temperature : float, default 0.0
            0: the most probable token each step (ties: the lowest id); > 0: softmax(logits / temperature).
        top_k : int, optional
            Sample among the ``top_k`` most probable tokens only.
        rng : numpy.random.Generator or int, optional
            The sampling's generator (or seed); unused when greedy.

        Returns
        -------
        ndarray of shape (N, n_tokens), int64

        Raises
        ------
        ValueError
            Another model; ``n_tokens`` or ``top_k`` not a positive int; a negative temperature.
        """
        self.check_model(model)
        n_tokens = _positive("n_tokens", n_tokens)
        if not isinstance(temperature, (int, float, np.floating)) or not temperature >= 0:
            raise ValueError(f"temperature must be a number >= 0 (0: greedy); got {temperature!r:.60}.")
        top_k = None if top_k is None else _positive("top_k", top_k)
        rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        be = backend(self.backend)
        live, logits, out = be.restore(model, self), self.next_logits, []
        for k in range(n_tokens):
            tok = _draw(logits, temperature, top_k, rng)  # (N,)
            out.append(tok)
            if k + 1 < n_tokens:
                lg, live = be.step(model, live, tok[:, None], self.prefix_length + k)
                logits = lg[:, -1]
        return np.stack(out, axis=1)

    def save(self, path):
        """Write the snapshot to a new safetensors file (:func:`hiddenstate.keep.fileformat.save_snapshot`).

        Parameters
        ----------
        path : str or os.PathLike
            A file that does not exist yet (an existing file is never replaced).

        Returns
        -------
        pathlib.Path
        """
        from hiddenstate.keep.fileformat import save_snapshot

        return save_snapshot(self, path)


def _draw(logits, temperature, top_k, rng):
    """One token per row of ``logits`` (N, V): argmax, or a draw from softmax(logits / temperature)."""
    if temperature == 0:
        return np.argmax(logits, axis=1).astype(np.int64)
    z = np.asarray(logits, dtype=np.float64) / temperature
    if top_k is not None and top_k < z.shape[1]:
        kth = np.partition(z, -top_k, axis=1)[:, -top_k][:, None]
        z = np.where(z >= kth, z, -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    u = rng.random((z.shape[0], 1))
    return np.minimum((np.cumsum(p, axis=1) < u).sum(axis=1), z.shape[1] - 1).astype(np.int64)
