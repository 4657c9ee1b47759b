"""Train a character-level language model on a text file with truncated BPTT, and resume it exactly.

The char-rnn job (Karpathy 2015) with this package's own layers and BPTT:

* the text is encoded with a :class:`~hiddenstate.train.corpus.Vocabulary`; the last
  ``val_fraction`` (10 %) is the validation split;
* :class:`~hiddenstate.train.corpus.StreamBatcher` cuts the training part into ``N`` parallel
  streams read ``T`` characters at a time; the hidden state is carried from one chunk to the next
  and gradients are cut at the chunk boundary (truncated BPTT, Williams & Peng 1990), and reset
  when a pass over the text starts again;
* Adam (Kingma & Ba 2015), gradient clipping by global L2 norm (Pascanu, Mikolov & Bengio 2013),
  and a cosine learning-rate decay to ``lr * lr_min_ratio`` (:func:`~hiddenstate.train.config.lr_at`);
* optionally (``ema``), an exponential moving average of the weights (Polyak & Juditsky 1992) is
  what is evaluated, saved as the model and sampled from; training itself uses the raw weights;
* every step is logged to ``<out>/log.jsonl`` (:mod:`hiddenstate.train.history`); the validation
  loss (nats/char, also bits/char and perplexity) every ``eval_every`` steps; ``<out>/loss.png``
  is drawn at the end;
* ``<out>/checkpoint`` holds a :class:`~hiddenstate.train.rundir.snapshot.Snapshot`: the weights under
  torch's names plus everything that makes ``resume`` continue the very same run (optimizer
  moments, batcher position, the carried hidden state, the RNG state, the elapsed time, the history).

Examples
--------
>>> from hiddenstate.train import TrainConfig, train, sample
>>> result = train(TrainConfig(steps=300, hidden_size=64, out="runs/tiny"))   # doctest: +SKIP
>>> print(sample("runs/tiny", prime="ROMEO:", length=200, seed=1))            # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hiddenstate.core.files import write_atomically
from hiddenstate.core.resources import check_memory
from hiddenstate.core.validation import boolean
from hiddenstate.train.config import TrainConfig, make_config
from hiddenstate.train.corpus import Vocabulary
from hiddenstate.train.device import DeviceTrainer, resolve_device
from hiddenstate.train.distributed import World, check_cores, join
from hiddenstate.train.guards import (
    DeferredSignals,
    TrainingInterrupted,
    training_memory,
)
from hiddenstate.train.history import kept_log_lines, loss_metrics, plot_history
from hiddenstate.train.model import CharRNN
from hiddenstate.train.rundir import (
    CHECKPOINT_DIR,
    LOG_FILE,
    PLOT_FILE,
    Trained,
    load,
    resolve_checkpoint,
    run_dir_of,
    sample,
    training_text_path,
)
from hiddenstate.train.rundir.ownership import check_not_in_use, checkpoint_step, claim, describe
from hiddenstate.train.steps import Corpus, Progress, StepLoop, Trainer, evaluate
from hiddenstate.train.tuning import MODEL_FIELDS, StateTuner, tuned_config

__all__ = ["TrainResult", "evaluate", "train"]


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes
    ----------
    model, vocab, config
        The trained model (the moving average when ``ema`` is set, as saved), its vocabulary and
        the run's configuration.
    step : int
        Steps completed (equal to ``config.steps`` unless the time limit or the callback stopped it).
    val_loss, val_bpc, val_ppl : float
        Final validation loss in nats/char, bits/char and perplexity.
    train_loss : float
        Mean training loss over the last ``min(100, steps)`` steps (nats/char).
    history : dict of str to ndarray
        ``train_loss`` and ``grad_norm`` per step (index i is step i+1), ``val_step`` and
        ``val_loss`` for every evaluation.
    seconds : float
        Wall-clock time of the run, summed over resumed parts.
    chars_per_s : float
        Training characters per second in this call.
    stopped : {"steps", "time", "callback", "finished"}
        ``"finished"``: a resumed run that was already at ``config.steps`` (nothing trained; the
        checkpoint's last validation loss).
    out, checkpoint, log, plot : pathlib.Path
        The run directory, its checkpoint, its log and its loss plot.
    initial_state : ndarray or pair, optional
        A ``tune_initial_state`` run's tuned state (one row, the model's format; a copy), which
        :meth:`sample` starts from; None for a run that trained the weights.
    """

    model: CharRNN
    vocab: Vocabulary
    config: TrainConfig
    step: int
    val_loss: float
    val_bpc: float
    val_ppl: float
    train_loss: float
    history: dict = field(repr=False)
    seconds: float
    chars_per_s: float
    stopped: str
    out: Path
    checkpoint: Path
    log: Path
    plot: Path | None
    initial_state: object = field(default=None, repr=False)

    def sample(self, prime: str | None = None, length: int = 500, *, temperature: float = 1.0,
               seed: int | None = 0, top_k: int | None = None, top_p: float | None = None) -> str:
        """Generate text from the trained model (:func:`~hiddenstate.train.sample` with this source).

        Parameters
        ----------
        prime : str, optional
            Text to condition on (default a newline).
        length : int, default 500
            Characters to generate after the prime.
        temperature : float, default 1.0
            Softmax temperature (>= 0; 0 is greedy).
        seed : int or None, default 0
            Seeds the sampler.
        top_k : int, optional
            Draw among the k most likely characters only (None: all).
        top_p : float in (0, 1], optional
            Nucleus sampling: the smallest set of likeliest characters reaching this mass (None: all).

        Returns
        -------
        str
            ``prime`` followed by ``length`` generated characters.
        """
        return sample(self, prime=prime, length=length, temperature=temperature, seed=seed, top_k=top_k, top_p=top_p)

    def summary(self) -> str:
        """One line: steps, time and the final validation loss in nats, bits and perplexity.

        Returns
        -------
        str
        """
        return (f"step {self.step}/{self.config.steps} in {self.seconds:.0f} s: validation loss "
                f"{self.val_loss:.4f} nats/char ({self.val_bpc:.4f} bits/char, perplexity {self.val_ppl:.2f})")


def _given_value(config, name: str):
    """The value of field ``name`` a caller gave (None: not given; a TrainConfig's default is not given)."""
    if isinstance(config, dict):
        return config.get(name)
    if isinstance(config, TrainConfig) and getattr(config, name) != getattr(TrainConfig(), name):
        return getattr(config, name)
    return None


def _with_absolute_data(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` with ``data`` as an absolute path, so the run finds its text from any folder."""
    if cfg.data is None:
        return cfg
    return dataclasses.replace(cfg, data=os.path.abspath(cfg.data))


def _plot_title(cfg: TrainConfig, val_loss: float) -> str:
    return (f"{cfg.cell.upper()} H={cfg.hidden_size} L={cfg.num_layers} T={cfg.seq_len} N={cfg.batch_size} "
            f"lr={cfg.lr:g}" + (f" dropout={cfg.dropout:g}" if cfg.dropout else "")
            + (f" weight_drop={cfg.weight_drop:g}" if cfg.weight_drop else "")
            + f" {cfg.dtype}; final val {val_loss:.3f} nats/char")


def train(config: TrainConfig | dict | None = None, *, resume=None, overwrite: bool = False, progress: bool = True,
          callback: Callable[[dict], bool | None] | None = None, verbose: bool = True, device: str = "cpu") -> TrainResult:
    """Train a :class:`~hiddenstate.train.model.CharRNN` on a text with truncated BPTT.

    The run directory (``out``) is claimed first (:func:`~hiddenstate.train.rundir.ownership.claim`): it
    must be new or empty (or hold the leftovers of a run killed before its first checkpoint), or,
    with ``overwrite``, a previous run; other files are never written over. A lock on it keeps a
    second process out while this one trains. SIGINT (Ctrl-C) and SIGTERM are held until the end
    of the current step, which is then saved: :class:`~hiddenstate.train.guards.TrainingInterrupted`
    is raised (a second signal stops at once; the last checkpoint stays whole). A run that ends
    before saving anything leaves the directory as it found it.

    Parameters
    ----------
    config : TrainConfig or dict, optional
        The run. A dict gives only the fields to set (the rest take TrainConfig's defaults, or,
        with ``resume``, the checkpoint's values). ``data`` is recorded as an absolute path.
    resume : path, optional
        A run or checkpoint directory to continue. The model, data and optimization settings come
        from the checkpoint; only ``data`` (a moved file; its contents must be the same),
        ``steps``, ``eval_every``, ``save_every``, ``max_minutes`` and ``out`` may be changed
        (other differing fields raise ValueError). Continuing a run stopped
        at step k gives the same losses, bit for bit, as the run that never stopped.
        ``max_minutes`` limits each call: a resumed part has a new time budget.
    overwrite : bool, default False
        Replace a previous run in ``out`` (its checkpoint, log and plot; nothing else there).
    progress : bool, default True
        Show a tqdm progress bar on stderr (step, train loss, validation loss, chars/s, time left).
    callback : callable, optional
        Called after every step with that step's log record (a dict); returning True stops the
        run there (with a last evaluation and checkpoint).
    verbose : bool, default True
        Print a line when resuming, and one at each evaluation when there is no progress bar.
    device : str, default "cpu"
        Where the steps run: ``"cpu"`` (NumPy), ``"torch:cpu"``, ``"cuda"`` (``"cuda:K"``,
        ``"torch:cuda"``, ``"cupy"``): the array-API path, :mod:`hiddenstate.train.device`. Not part
        of the run's configuration: a run may be resumed on another device.

    Returns
    -------
    TrainResult
        Its ``model`` holds the weights that were saved: the moving average when ``ema`` is set.
        ``plot`` is None (with a warning) when the loss plot could not be written.

    Raises
    ------
    FileNotFoundError, IsADirectoryError
        A missing data file or checkpoint, or a directory given as the data file.
    ValueError, TypeError
        An invalid setting, an empty or non-UTF-8 data file, a text with fewer than 2 distinct
        characters or too short for one batch, a model that cannot fit in memory, an ``out`` that
        must not be written into (or in use by another process), a resume whose data or settings
        do not match its checkpoint, or whose log lists a step twice.
    TrainingDiverged
        A ``FloatingPointError``: the loss became non-finite or exploded (the message names
        ``--lr`` and ``--clip``); the last checkpoint saved before it is kept.
    TrainingInterrupted
        A ``KeyboardInterrupt``: SIGINT or SIGTERM; what was saved is in its attributes.
    OSError
        Writing failed (e.g. a full disk): the message names the file and the checkpoint on disk.
    """
    t_start = time.perf_counter()
    parent = os.getppid()  # a rank's launcher, watched while it trains (guards.DeferredSignals)
    overwrite = boolean("overwrite", overwrite)
    world = join(device)  # LOCAL, unless torchrun started this process as one rank of a run
    try:
        return _train(world, config, resume, overwrite, t_start, progress=progress and world.leader,
                      callback=callback, verbose=verbose and world.leader, device=device, parent=parent)
    finally:
        world.leave()


def _train(world: World, config, resume, overwrite: bool, t_start: float, *, progress: bool, callback, verbose: bool,
           device: str, parent: int) -> TrainResult:
    """:func:`train` in this process's world: the leader (the only process of a one-process run) owns ``out``."""
    accelerator = resolve_device(world.run_device(device))  # before anything is claimed: no GPU is one message
    world.check_request({"config": config if isinstance(config, (dict, type(None))) else dataclasses.asdict(config),
                         "resume": None if resume is None else str(resume), "overwrite": overwrite, "device": device})
    with DeferredSignals(relay_grace_s=10.0 if world.size > 1 else 0.0,
                         watch_parent=parent if world.size > 1 else None) as signals:
        lock, wrote_log = None, False
        try:
            if world.leader:
                try:
                    lock, state, loaded, cfg, same = _claim(config, resume, overwrite)
                except Exception as error:
                    world.share(failed=error)  # the other ranks stop quietly; this one says why
                world.share((cfg, loaded))
                out = lock.path
            else:
                (cfg, loaded), state, same = world.share(), None, True
                out = Path(cfg.out)
                if _given_value(config, "data") is not None:  # this machine's copy of the text (checked below)
                    cfg = dataclasses.replace(cfg, data=os.path.abspath(_given_value(config, "data")))
            trainer, error, sha256 = None, None, ""
            try:
                tuning = cfg.tune_initial_state is not None
                if tuning and accelerator is not None:
                    raise ValueError(f"--tune-initial-state runs on the cpu device; got --device {device!r}.")
                base = tuned_config(cfg)[1] if tuning and loaded is None else None  # every rank reads it
                corpus = Corpus.read(cfg, loaded, base)
                sha256 = corpus.info["sha256"]
                estimate = training_memory(cfg, corpus.vocab.size)
                check_memory(f"training a {cfg.cell.upper()} of --hidden-size {cfg.hidden_size} x --num-layers "
                             f"{cfg.num_layers} ({estimate['parameters']:,} parameters)", estimate["bytes"],
                             "Lower --hidden-size or --num-layers (or --batch-size and --seq-len).")
                trainer = (StateTuner(cfg, corpus, world, base) if tuning else Trainer(cfg, corpus, world)
                           if accelerator is None else DeviceTrainer(cfg, corpus, accelerator, world))
                if loaded is not None:
                    trainer.restore(loaded.snapshot)
            except (ValueError, TypeError, OSError, MemoryError) as failure:
                error = failure
            world.check_ready(error, text_sha256=sha256, batch_size=cfg.batch_size)  # ranks: all ready, or none steps
            check_cores(world)
            if world.leader:
                kept = [] if loaded is None else kept_log_lines(loaded.run_dir / LOG_FILE, trainer.step)
                if state.kind in ("run", "unfinished") and not same:
                    lock.clear()  # a previous run (overwrite) or a killed one's leftovers: never other files
                wrote_log = True
                # atomically: a kill while the log is cut back to the checkpoint must not lose its first part
                write_atomically(out / LOG_FILE, "".join(line + "\n" for line in kept).encode("utf-8"))
            finished = loaded is not None and trainer.step >= cfg.steps and trainer.history["val_step"][-1:] == [
                trainer.step]  # nothing to train: the result is the checkpoint's, in one line
            if loaded is not None and verbose and not finished:
                budget = (f"; --max-minutes {cfg.max_minutes:g}: a new time budget for this part"
                          if cfg.max_minutes is not None else "")
                into = "" if same else f" into '{out}'"
                print(f"resuming '{loaded.run_dir}' at step {trainer.step} of {cfg.steps}{into}{budget}", flush=True)
            return _finish(trainer, out, loaded, signals, t_start, progress=progress, callback=callback,
                           verbose=verbose)
        except KeyboardInterrupt as error:
            if isinstance(error, TrainingInterrupted) or signals.forced is None or lock is None:
                raise
            raise TrainingInterrupted(signals.forced, step=checkpoint_step(lock.path),
                                      checkpoint=lock.path / CHECKPOINT_DIR, saved=False) from None
        finally:
            if lock is not None:
                if wrote_log and checkpoint_step(lock.path) is None:  # nothing saved: leave nothing
                    for name in (LOG_FILE, PLOT_FILE):
                        with contextlib.suppress(OSError):
                            (lock.path / name).unlink()
                lock.release()


def _not_pretrained(ckpt, resume) -> None:
    """Refuse to resume a shipped pretrained checkpoint (it keeps no optimizer state), saying what to run instead."""
    shipped_dir = Path(__file__).resolve().parents[1] / "data" / "pretrained"  # train.pretrained's (it imports us)
    for shipped in sorted(shipped_dir.iterdir()) if shipped_dir.is_dir() else ():
        name = shipped.name
        if shipped.is_dir() and os.path.samefile(ckpt, shipped):
            raise ValueError(f"--resume '{resume}' is the shipped pretrained model {name}, and the pretrained model keeps "
                             "no optimizer state (only what inference needs), so it cannot be resumed; train one like "
                             "it with `hiddenstate train --preset demo --out DIR` (it is the demo preset, 1,000 steps "
                             "from seed 0) and resume that DIR. Sample or inspect it as it is with --pretrained.")


def _claim(config, resume, overwrite: bool):
    """Claim the run directory; load the checkpoint to resume. Returns (lock, state, loaded, cfg, same)."""
    if resume is None:
        cfg = _with_absolute_data(make_config(config))
        if cfg.tune_initial_state is not None:  # the model fields are those of the model being tuned
            given = {k: _given_value(config, k) for k in MODEL_FIELDS}
            cfg = dataclasses.replace(tuned_config(cfg, given)[0], tune_initial_state=os.path.abspath(cfg.tune_initial_state))
        lock, state = claim(cfg.out, overwrite=overwrite)
        return lock, state, None, cfg, False
    if isinstance(resume, (str, os.PathLike)) and os.path.isdir(resume):
        check_not_in_use(resume, "--resume")  # another process trains there (maybe before its first save)
    if isinstance(resume, (str, os.PathLike)) and os.path.isdir(resume) and describe(resume).kind == "unfinished":
        raise ValueError(f"--resume '{resume}' holds no checkpoint: the run there was stopped before its first save. "
                         f"Start it again with `hiddenstate train --out {resume}` and its flags.")
    ckpt = resolve_checkpoint(resume, name="--resume")
    _not_pretrained(ckpt, resume)
    run_dir = run_dir_of(ckpt)
    target = Path(_given_value(config, "out") or run_dir)
    same = os.path.abspath(target) == os.path.abspath(run_dir)
    if same and overwrite:
        raise ValueError("--overwrite cannot be combined with --resume of the same directory: a resumed run continues "
                         "its checkpoint. Drop --overwrite (or resume into another --out).")
    if not same:
        check_not_in_use(run_dir, "--resume")  # another process may be training in the run being resumed
    lock, state = claim(target, overwrite=overwrite, resuming=same)
    try:
        loaded = load(ckpt)
        cfg = make_config(config, saved=loaded.config, out=target)
        if _given_value(config, "data") is None:  # an older run recorded a relative path
            cfg = dataclasses.replace(cfg, data=training_text_path(loaded.config, run_dir))
        return lock, state, loaded, _with_absolute_data(cfg), same
    except BaseException:
        lock.release()
        raise


def _tuned(trainer):
    """A copy of a tuning run's state (None for a run that trained the weights)."""
    state = getattr(trainer, "initial_state", None)
    return None if state is None else tuple(a.copy() for a in state) if isinstance(state, tuple) else state.copy()


def _finish(trainer: Trainer, out: Path, loaded: Trained | None, signals: DeferredSignals, t_start: float, *,
            progress: bool, callback, verbose: bool) -> TrainResult:
    """Run the steps of a claimed run directory, then plot and return the result."""
    cfg, corpus = trainer.cfg, trainer.corpus
    elapsed_before = 0.0 if loaded is None else float(loaded.snapshot.elapsed_s)

    def clock() -> float:  # the run's time, over all its parts (logged and saved)
        return elapsed_before + (time.perf_counter() - t_start)

    def part_clock() -> float:  # this call's time (what --max-minutes limits)
        return time.perf_counter() - t_start

    first_step = trainer.step
    history = trainer.history
    if loaded is not None and first_step >= cfg.steps and history["val_step"][-1:] == [first_step]:
        m = loss_metrics(history["val_loss"][-1])  # a finished run resumed: no bar, no pass, nothing written
        return TrainResult(model=trainer.final_model(), vocab=corpus.vocab, config=cfg, step=first_step,
                           val_loss=m["val_loss"], val_bpc=m["val_bpc"], val_ppl=m["val_ppl"],
                           train_loss=float(np.mean(history["train_loss"][-100:])) if history["train_loss"] else math.nan,
                           history={k: np.asarray(v) for k, v in history.items()}, seconds=elapsed_before,
                           chars_per_s=0.0, stopped="finished", out=out, checkpoint=out / CHECKPOINT_DIR,
                           log=out / LOG_FILE, plot=out / PLOT_FILE if (out / PLOT_FILE).is_file() else None,
                           initial_state=_tuned(trainer))
    budget_s = None if cfg.max_minutes is None else cfg.max_minutes * 60.0
    leader = trainer.world.leader  # only the leader (rank 0 of a distributed run) writes the run directory
    with open(out / LOG_FILE if leader else os.devnull, "a", encoding="utf-8") as log_file:
        meter = Progress(cfg, first_step, bar=progress, verbose=verbose, budget_s=budget_s)
        run = StepLoop(trainer, out, log_file, clock=clock, part_clock=part_clock, budget_s=budget_s, progress=meter,
                   callback=callback, signals=signals, saved_step=None if loaded is None else trainer.step)
        t_loop = time.perf_counter()
        try:
            stopped, last_val = run.run()
        finally:
            meter.close()
    loop_s = time.perf_counter() - t_loop
    if last_val is None:  # nothing to do (already at cfg.steps) and never evaluated
        last_val = run.guarded(trainer.evaluate, "the validation pass", trainer.step)
    model = trainer.final_model()
    chars_per_s = (trainer.step - first_step) * cfg.batch_size * cfg.seq_len / loop_s if trainer.step > first_step else 0.0
    try:
        plot = None if not leader else plot_history(trainer.history, out / PLOT_FILE, vocab_size=corpus.vocab.size,
                            title=_plot_title(cfg, last_val))
    except (OSError, ValueError, RuntimeError, MemoryError) as error:  # the run itself is complete and saved
        warnings.warn(f"could not write the loss plot '{out / PLOT_FILE}' ({' '.join(str(error).split())}); the run "
                      f"is complete and its checkpoint of step {trainer.step} is saved.", UserWarning, stacklevel=3)
        plot = None
    m = loss_metrics(last_val)
    history = trainer.history
    return TrainResult(model=model, vocab=corpus.vocab, config=cfg, step=trainer.step, val_loss=m["val_loss"],
                       val_bpc=m["val_bpc"], val_ppl=m["val_ppl"],
                       train_loss=float(np.mean(history["train_loss"][-100:])) if history["train_loss"] else math.nan,
                       history={k: np.asarray(v) for k, v in history.items()}, seconds=clock(),
                       chars_per_s=chars_per_s, stopped=stopped, out=out, checkpoint=out / CHECKPOINT_DIR,
                       log=out / LOG_FILE, plot=plot, initial_state=_tuned(trainer))
