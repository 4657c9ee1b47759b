"""Training on the array-API path: the character model's steps in torch (CPU or CUDA) or CuPy.

``hiddenstate train --device cuda`` (``train(..., device="cuda")``) runs every training step of
:class:`~hiddenstate.train.model.CharRNN` in the chosen library, on its device: the embedding or
one-hot input, the recurrent layers (the reference steps of :mod:`hiddenstate.xp`), the decoder,
the softmax cross-entropy, the gradient clipping, the Adam step and the moving average of the
weights, and the validation passes. The weights, Adam's moments and the carried state live on the
device between steps; they are copied back into the NumPy model when a checkpoint is saved and at
the end, so checkpoints, ``sample``, ``inspect`` and resuming are those of a CPU run (a run may be
resumed on another device). Dropout and DropConnect masks are drawn from the run's NumPy
generator in the CPU run's order, so a run on ``torch:cpu`` in float64 follows the NumPy run to
round-off (the tests hold it to 1e-10).

=================  ==========================================================================
``cpu``            NumPy and its tuned kernels (the default)
``torch:cpu``      torch tensors on the CPU (the array-API path, e.g. to check it)
``cuda``           the GPU, through torch (or CuPy when torch sees no GPU); ``cuda:1`` ...
``torch:cuda[:k]`` the GPU through torch; ``cupy``: the GPU through CuPy
=================  ==========================================================================

The cells with recurrent weights train here (``gru``, ``lstm``, ``rnn``); ``mamba``, ``mingru`` and
``minlstm`` (residual blocks, :mod:`~hiddenstate.train.blocks`) train on ``cpu`` only.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from hiddenstate.train.blocks import LINEAR_CELLS
from hiddenstate.train.config import lr_at
from hiddenstate.train.distributed.world import LOCAL
from hiddenstate.train.guards import divergence
from hiddenstate.train.steps import Diverged, Trainer, validation_rows
from hiddenstate.xp.arrays import to_namespace, to_numpy
from hiddenstate.xp.layer import XPCache, backward, run_layers

__all__ = ["DEVICES", "DeviceTrainer", "resolve_device"]

#: What ``--device`` accepts (``cuda:K`` and ``torch:cuda:K`` name the K-th GPU).
DEVICES = ("cpu", "torch:cpu", "cuda", "torch:cuda", "cupy")


def _no_gpu(device: str, why: str) -> ValueError:
    return ValueError(f"device must name a GPU that torch or CuPy sees; got {device!r}, but {why}. "
                      "Use --device cpu (NumPy) or --device torch:cpu.")


def resolve_device(device):
    """The namespace and device of a ``--device`` name, or None for NumPy.

    Parameters
    ----------
    device : str
        One of :data:`DEVICES`, or ``cuda:K`` / ``torch:cuda:K``.

    Returns
    -------
    tuple of (module, object) or None
        ``(xp, device)`` for the array-API path; None for ``"cpu"``.

    Raises
    ------
    ValueError
        An unknown name, or a GPU asked for where neither torch nor CuPy sees one (or the library
        is not installed).
    TypeError
        ``device`` is not a string.
    """
    if not isinstance(device, str):
        raise TypeError(f"device must be a string such as 'cpu' or 'cuda'; got {type(device).__name__}.")
    name = device.strip().lower()
    base, _, index = name.partition(":") if not name.startswith("torch:") else ("torch:" + name[6:].partition(":")[0],
                                                                                 "", name[6:].partition(":")[2])
    if index and not index.isdigit():
        raise ValueError(f"device must be one of {', '.join(DEVICES)} (or cuda:K); got {device!r}.")
    if name == "cpu":
        return None
    if base not in ("torch:cpu", "torch:cuda", "cuda", "cupy") or (base == "torch:cpu" and index):
        raise ValueError(f"device must be one of {', '.join(DEVICES)} (or cuda:K); got {device!r}.")
    import array_api_compat

    if base in ("torch:cpu", "torch:cuda", "cuda"):
        try:
            import torch
        except ImportError:
            torch = None
        if torch is None and base != "cuda":
            raise ValueError(f"device {device!r} needs the optional package torch, which is not installed: "
                             "pip install 'hiddenstate[torch]'.")
        if base == "torch:cpu":
            return array_api_compat.array_namespace(torch.zeros(0)), torch.device("cpu")
        if torch is not None and torch.cuda.is_available():
            k = int(index or 0)
            if k >= torch.cuda.device_count():
                raise _no_gpu(device, f"torch sees {torch.cuda.device_count()} GPU(s)")
            t = torch.zeros(0, device=f"cuda:{k}")
            return array_api_compat.array_namespace(t), t.device
        if base == "torch:cuda":
            raise _no_gpu(device, "torch.cuda.is_available() is False")
    try:
        import cupy
    except ImportError:
        raise _no_gpu(device, "torch sees no GPU and CuPy is not installed") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # CuPy raises its own CUDARuntimeError without a driver
        count = 0
    k = int(index or 0)
    if k >= count:
        raise _no_gpu(device, f"CuPy sees {count} GPU(s)")
    with cupy.cuda.Device(k):
        a = cupy.zeros(0)
    return array_api_compat.array_namespace(a), a.device


class DeviceTrainer(Trainer):
    """:class:`~hiddenstate.train.steps.Trainer` whose steps run on the array-API path (module docstring).

    Parameters
    ----------
    cfg : TrainConfig
        The run.
    corpus : Corpus
        Its text as ids.
    accelerator : tuple of (module, object)
        ``(xp, device)`` from :func:`resolve_device`.
    world : World, default LOCAL
        This process's share of a distributed run (:mod:`hiddenstate.train.distributed`).

    Raises
    ------
    ValueError
        A cell this path does not train (``mingru``, ``minlstm``, ``mamba``).
    """

    def __init__(self, cfg, corpus, accelerator, world=LOCAL):
        if cfg.cell in LINEAR_CELLS + ("mamba",):
            raise ValueError(f"cell must be gru, lstm or rnn to train on a device other than cpu; got {cfg.cell!r}. "
                             "Train it with --device cpu.")
        super().__init__(cfg, corpus, world)
        self.xp, self.device = accelerator
        self.push()

    # -- host <-> device -----------------------------------------------------------------------
    def _to(self, arrays: dict) -> dict:
        return {k: to_namespace(v, self.xp, self.device) for k, v in arrays.items()}

    def push(self) -> None:
        """Copy the weights, Adam's moments, the average and the carried state to the device."""
        self.w = self._to(self.model.params)
        self.m, self.v = self._to(self.opt.exp_avg), self._to(self.opt.exp_avg_sq)
        self.avg = None if self.ema is None else self._to(self.ema.average)
        if self.carry is not None and not isinstance(self.carry, dict):
            parts = self.carry if isinstance(self.carry, tuple) else (self.carry,)
            self.carry = {"device": tuple(to_namespace(p, self.xp, self.device) for p in parts)}

    def pull(self) -> None:
        """Copy the weights, Adam's moments and the average back into the NumPy model and optimizer (in place)."""
        for target, source in ((self.model.params, self.w), (self.opt.exp_avg, self.m), (self.opt.exp_avg_sq, self.v),
                               (None if self.ema is None else self.ema.average, self.avg)):
            if target is not None:
                for k, a in source.items():
                    np.copyto(target[k], to_numpy(a))

    def _host_carry(self):
        if self.carry is None:
            return None
        parts = tuple(to_numpy(p) for p in self.carry["device"])
        return parts if self.model.rnn.is_lstm else parts[0]

    def restore(self, snap) -> None:
        """Continue from a checkpoint (as :meth:`Trainer.restore`), then copy the state to the device.

        Parameters
        ----------
        snap : Snapshot
            The checkpoint's contents.
        """
        super().restore(snap)
        self.push()

    def snapshot(self, val_loss, elapsed_s):
        """What the checkpoint of this moment holds (the device's state copied back first).

        Parameters
        ----------
        val_loss : float or None
            The last validation loss.
        elapsed_s : float
            The run's time so far.

        Returns
        -------
        Snapshot
        """
        self.pull()
        carry, self.carry = self.carry, self._host_carry()
        try:
            return super().snapshot(val_loss, elapsed_s)
        finally:
            self.carry = carry

    def final_model(self):
        """The model as saved (the device's weights copied back first).

        Returns
        -------
        CharRNN
        """
        self.pull()
        return super().final_model()

    # -- the model on the device ----------------------------------------------------------------
    def _onehot(self, ids, size):
        xp = self.xp
        eye = xp.eye(size, dtype=getattr(xp, self.model.dtype.name), device=self.device)
        return xp.take(eye, ids, axis=0)

    def forward(self, weights, inputs, state, *, training):
        """The character model's forward pass on the device (:meth:`CharRNN.forward <hiddenstate.train.model.CharRNN.forward>`).

        Parameters
        ----------
        weights : dict of str to array
            The model's parameters on the device.
        inputs : ndarray of shape (T, N), int
            Character ids.
        state : dict or None
            The carried state (``{"device": (h,)}`` or ``(h, c)``, each (L, N, H)); None: zeros.
        training : bool
            Dropout and DropConnect, drawn from the run's generator.

        Returns
        -------
        logits : array of shape (T*N, V)
        state : dict
            The final state, to carry.
        cache : tuple
            What :meth:`loss_and_grads` differentiates.
        """
        xp, model = self.xp, self.model
        T, N = inputs.shape
        ids = to_namespace(inputs.reshape(-1), xp, self.device, np.int64)
        if model.embedding_dim is None:
            x = xp.reshape(self._onehot(ids, model.vocab_size), (T, N, model.vocab_size))
        else:
            x = xp.reshape(xp.take(weights["encoder.weight"], ids, axis=0), (T, N, model.embedding_dim))
        rnn = model.rnn
        p = {k[4:]: v for k, v in weights.items() if k.startswith("rnn.")}
        LD, H = rnn.num_layers * rnn.num_directions, rnn.hidden_size
        dtype = getattr(xp, model.dtype.name)
        parts = 2 if rnn.is_lstm else 1
        state0 = state["device"] if state is not None else tuple(
            xp.zeros((LD, N, H), dtype=dtype, device=self.device) for _ in range(parts))
        hs, finals, directions, masks = run_layers(rnn, p, x, state0, None, (None, None), None, training, self.mask_rng,
                                                   xp, self.device)
        final = {"device": tuple(xp.stack([f[i] for f in finals]) for i in range(parts))}
        mask = None
        if training and model.dropout > 0.0:  # CharRNN.forward's output dropout, the same draws
            keep = self.mask_rng.random((T, N, H), dtype=np.float32) >= model.dropout
            mask = to_namespace(keep.astype(model.dtype) / model.dtype.type(1.0 - model.dropout), xp, self.device)
            hs = hs * mask
        top = xp.reshape(hs, (T * N, H))
        logits = xp.matmul(top, xp.matrix_transpose(weights["decoder.weight"])) + weights["decoder.bias"]
        cache = XPCache(xp=xp, device=self.device, directions=directions, dropout_masks=masks, keep=None, reverse=None,
                        learned=(False,) * parts, shape=(T, N, False), owner=weakref.ref(rnn), keys=tuple(rnn.params))
        return logits, final, (ids, top, mask, cache)

    def log_softmax(self, logits):
        """Row-wise ``log softmax``, shifted by the row maximum.

        Parameters
        ----------
        logits : array of shape (M, V)

        Returns
        -------
        array of shape (M, V)
        """
        xp = self.xp
        shifted = logits - xp.max(logits, axis=1, keepdims=True)
        return shifted - xp.log(xp.sum(xp.exp(shifted), axis=1, keepdims=True))

    def loss_and_grads(self, inputs, targets, state):
        """Mean cross-entropy of a chunk and the gradient of every weight, on the device.

        Parameters
        ----------
        inputs, targets : ndarray of shape (T, N), int
            ``targets[t, n]`` is the character after ``inputs[t, n]``.
        state : dict or None
            The carried state (see :meth:`forward`).

        Returns
        -------
        loss : array, 0-d
            Nats per character.
        grads : dict of str to array
            Same keys as the model's parameters.
        state : dict
            The final state (gradients are cut there).
        """
        xp, model = self.xp, self.model
        T, N = inputs.shape
        logits, final, (ids, top, mask, cache) = self.forward(self.w, inputs, state, training=True)
        M = T * N
        onehot = self._onehot(to_namespace(targets.reshape(-1), xp, self.device, np.int64), model.vocab_size)
        logp = self.log_softmax(logits)
        loss = -xp.sum(logp * onehot) / M
        dy = (xp.exp(logp) - onehot) / M  # d loss / d logits (M, V)
        grads = {"decoder.weight": xp.matmul(xp.matrix_transpose(dy), top),
                 "decoder.bias": xp.sum(xp.sum(xp.reshape(dy, (T, N, -1)), axis=1), axis=0)}
        dhs = xp.reshape(xp.matmul(dy, self.w["decoder.weight"]), (T, N, model.hidden_size))
        if mask is not None:
            dhs = dhs * mask
        rnn_grads, dx, _ = backward(model.rnn, cache, dhs)
        if model.embedding_dim is not None:
            grads["encoder.weight"] = xp.matmul(xp.matrix_transpose(self._onehot(ids, model.vocab_size)),
                                                xp.reshape(dx, (M, -1)))
        grads.update({"rnn." + k: v for k, v in rnn_grads.items()})
        return loss, {k: grads[k] for k in self.w}, final

    # -- one step --------------------------------------------------------------------------------
    def train_step(self) -> dict:
        """One optimizer step on the next (T, N) chunk, on the device.

        Returns
        -------
        dict
            The step's log record (step, train_loss, grad_norm, lr, epoch).
        """
        cfg, xp = self.cfg, self.xp
        self.opt.lr = lr_at(cfg, self.step / cfg.steps)
        if self.batcher.at_epoch_start:
            self.carry = None
        inputs, targets = self.world.shard(self.batcher.next_batch())  # a rank: its rows
        loss_a, grads, self.carry = self.loss_and_grads(inputs, targets, self.carry)
        loss, grads = self.world.average(loss_a, grads)  # a rank: the whole batch's
        loss = float(loss)
        why = divergence(loss, self.model.vocab_size)
        if why:
            raise Diverged(f"the training loss {why}")
        squares = xp.stack([xp.sum(xp.astype(g, xp.float64) ** 2) for g in grads.values()])
        norm = math.sqrt(float(xp.sum(squares)))
        if not math.isfinite(norm):
            raise Diverged(f"the gradient norm became {norm}")
        if norm > cfg.clip:  # clip_grad_norm's rule and scale
            scale = cfg.clip / (norm + 1e-6)
            grads = {k: g * scale for k, g in grads.items()}
        self.adam(grads)
        if self.avg is not None:
            n, weight = self.ema.n_averaged, 1.0 - self.ema.decay
            self.avg = {k: (xp.asarray(p, copy=True) if n == 0 else self.avg[k] + weight * (p - self.avg[k]))
                        for k, p in self.w.items()}
            self.ema.n_averaged += 1
        if not bool(xp.all(xp.stack([xp.all(xp.isfinite(p)) for p in self.w.values()]))):
            raise Diverged("the weights became non-finite")
        self.step += 1
        self.history["train_loss"].append(loss)
        self.history["grad_norm"].append(norm)
        return {"step": self.step, "train_loss": loss, "grad_norm": norm, "lr": self.opt.lr,
                "epoch": self.batcher.epoch}

    def adam(self, grads: dict) -> None:
        """:meth:`Adam.step <hiddenstate.train.optim.Adam.step>` on the device (same order of operations).

        Parameters
        ----------
        grads : dict of str to array
            Same keys as the weights.
        """
        xp, opt = self.xp, self.opt
        beta1, beta2 = opt.betas
        opt.step_count += 1
        bias_correction2_sqrt = (1 - beta2 ** opt.step_count) ** 0.5
        step_size = opt.lr / (1 - beta1 ** opt.step_count)
        for key, g in grads.items():
            if opt.weight_decay != 0:
                g = g + opt.weight_decay * self.w[key]
            self.m[key] = self.m[key] * beta1 + (1 - beta1) * g
            self.v[key] = self.v[key] * beta2 + (1 - beta2) * g * g
            denom = xp.sqrt(self.v[key]) / bias_correction2_sqrt + opt.eps
            self.w[key] = self.w[key] - step_size * self.m[key] / denom

    def evaluate(self) -> float:
        """:func:`~hiddenstate.train.steps.evaluate` of the validation text on the device (the average, if any).

        Returns
        -------
        float
            Nats per character.
        """
        xp, model = self.xp, self.model
        weights = self.avg if (self.avg is not None and self.ema.n_averaged) else self.w
        rows = validation_rows(self.corpus.val_ids)  # (R, N)
        rows = rows[:, self.world.val_rows(rows.shape[1]) or slice(None)]  # a rank: its streams
        R = rows.shape[0]
        total, count, state = 0.0, 0, None
        for start in range(0, R - 1 if rows.shape[1] else 0, 256):
            stop = min(start + 256, R - 1)
            x, y = rows[start:stop], rows[start + 1: stop + 1]
            logits, state, _ = self.forward(weights, x, state, training=False)
            logp = self.log_softmax(xp.astype(logits, xp.float64))
            onehot = xp.astype(self._onehot(to_namespace(y.reshape(-1), xp, self.device, np.int64), model.vocab_size),
                               xp.float64)
            total -= float(xp.sum(logp * onehot))
            count += y.size
        total, count = self.world.sum(total, count)  # a rank: over every rank's streams
        return total / count
