"""Slipform: fine-tune an open_clip model with Cement loss on ConcreteBatch (paper §3, docs/method.md §6).

Run with ``concrete-jungle train --config configs/slipform_vitb32.yaml [--set key=value ...]``, or under
``torchrun --nproc_per_node K -m concrete_jungle.cli train ...`` for data parallel (nccl on GPU, gloo on
CPU). ``batch_size`` is the global number of anchors per step (each rank takes batch_size / K), so a
config means the same run on any number of GPUs.

Data order: every epoch is a permutation of the whole dataset seeded by (seed, epoch); step s of the
epoch gives rank r the slice [s*N + r*N/K, s*N + (r+1)*N/K) — no sample twice per epoch across ranks, and
(epoch, step) is the exact data position a checkpoint stores. The learning rate is a function of the
step (cosine with warmup), so resuming restores it exactly; 20 steps straight and 10 + resume + 10 give
bitwise the same weights on the CPU.

This module is the run, read top to bottom: `train` guards the output folder, `Run` holds the steps (set up,
resume, one step, evaluate, checkpoint, stop) and `Run.loop` calls them. Its checkpointed state is `state`, its
process (rank, signals) `process`, the config `config`, the batches `data`.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import sys
import time
import uuid
from dataclasses import asdict, replace
from functools import cached_property
from pathlib import Path

import torch

from ..configs import ConfigError
from ..errors import Interrupted, TrainingError
from ..files.locks import locked
from ..models.checkpoints import WEIGHTS_FILE, resolve_checkpoint
from ..models.text_encoding import TrimmedTextCLIP, trimmable
from ..records import JsonlAppender, atomic_write_json, atomic_write_jsonl, read_jsonl_repairing
from .config import (
    TrainConfig,
    check_config,
    check_loss_data,
    check_resumable,
    count_records,
    reads_negative_images,
    warmup_warning,
)
from .data import EpochBatches, data_path, epoch_batches, in_memory, source_set
from .objective import Objective, StepContext, training_step, unused_data
from .process import StopSignals, distributed
from .regime import Regime
from .start import check_pretrained, start_identity
from .state import how_to_continue, load_trainer_state, lr_at, param_groups, save_trainer_state
from .workers import capped_workers

WANDB_RUN = "wandb_run.json"  # the Weights & Biases run id, so that a resumed run logs into the same run
DIAGNOSTICS = ("hn_grad_share", "p_pos", "logit_gap", "margin")  # Cement's; a peer loss may give some of them


def use_open_clip_cuda_settings() -> None:
    """What open_clip_train sets on CUDA: TF32 for the float32 matmuls outside autocast (the loss), and cuDNN
    choosing its fastest kernel for the patch convolution."""
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.benchmark = True


def train(config: TrainConfig, resume: str | None = None, progress: bool = True, stop_at: int | None = None,
          label: str = "train", overwrite: bool = False) -> dict:
    """Train; ``stop_at`` ends the run after that step with a checkpoint (continue with ``resume``).
    ``label`` names the run on its progress bar (the demo runs many). An ``out`` that holds a run is refused
    unless the run is resumed or ``overwrite`` starts it over (its checkpoints and metrics removed first); one
    job at a time writes into ``out``. A resumed run keeps its settings but for those `config.RESUMABLE` names."""
    check_config(config)
    check_pretrained(config.model)
    check_resumable(config, resume)
    rank, _, _ = distributed()
    if rank != 0:  # rank 0 alone writes into out: it holds the lock
        return run(config, resume, progress, stop_at, label)
    out = Path(config.out)
    with locked(out / ".train.lock", f"--out {out}", "concrete-jungle train"):
        previous = used_run(out)
        if previous and not resume:
            if not overwrite:
                raise ConfigError(f"--out {out} holds a training run ({previous}); "
                                  f"{how_to_continue(out / 'checkpoints')}")
            for old in ("checkpoints", "tensorboard", "wandb"):
                shutil.rmtree(out / old, ignore_errors=True)
            for old in ("metrics.jsonl", "skipped_pairs.jsonl", WANDB_RUN):
                (out / old).unlink(missing_ok=True)
        remove_orphans(out / "checkpoints")
        return run(config, resume, progress, stop_at, label)


def used_run(out: Path) -> str:
    """The checkpoints (and log) of a run ``out`` holds, in words; "" when it holds no checkpoint (a run killed
    before its first one has nothing to resume or to lose)."""
    steps = sorted((out / "checkpoints").glob("step-*")) if (out / "checkpoints").is_dir() else []
    logged = (out / "metrics.jsonl").is_file() and (out / "metrics.jsonl").stat().st_size > 0
    return ", ".join([f"{len(steps)} checkpoint(s)"] + ["metrics.jsonl"] * logged) if steps else ""


def remove_orphans(ckpt_root: Path) -> None:
    """The temporary files and folders of saves a killed run left (``.step-N.tmp``, ``.latest.json.*.tmp``):
    never data, and no other job writes here while this one holds the lock."""
    for orphan in ckpt_root.glob(".*.tmp") if ckpt_root.is_dir() else []:
        if orphan.is_dir():
            shutil.rmtree(orphan)
        else:
            orphan.unlink(missing_ok=True)


class Run:
    """One training run's steps, in the order `loop` calls them: `set_up` (model, data, optimizer), `resume`
    (weights, optimizer, RNG and data position of a checkpoint), `prepare` (the forward and the loss), `open_logs`,
    then per step `step`, `log`, `evaluate` and `save`, and at the end `finish`. The position (step, epoch,
    step_in_epoch) is the one state the steps share."""

    def __init__(self, config: TrainConfig, progress: bool = True, label: str = "train"):
        self.rank, self.world, self.local_rank = distributed()
        workers = capped_workers(config.data.workers, "data.workers", note=self.rank == 0)
        config = replace(config, data=replace(config.data, workers=workers))  # the run records what it used
        self.config, self.progress, self.label = config, progress, label
        self.out = Path(config.out)
        self.ckpt_root = self.out / "checkpoints"
        self.step_count, self.epoch, self.step_in_epoch = 0, 0, 0
        self.saved_at = -1  # the step of the last checkpoint this run wrote
        self.log_file = self.tb = self.wandb = self.eval_data = None
        self.resumed_from = None  # the checkpoint folder resumed from

    def set_up(self) -> None:
        """The device, the seeded model, the training set and the optimizer."""
        config = self.config
        known = count_records(config)
        if not config.data.pairs and 0 <= known < config.batch_size:
            raise ConfigError(f"batch_size {config.batch_size} is larger than the dataset ({known} records)")
        self.device = config.device or (f"cuda:{self.local_rank}" if torch.cuda.is_available() else "cpu")
        if self.device.startswith("cuda"):
            use_open_clip_cuda_settings()

        from ..models import load_model

        torch.manual_seed(config.seed)
        random.seed(config.seed)
        self.start = start_identity(config.model)  # recorded in config.json, compared on resume
        self.clip = load_model(config.model.name, config.model.pretrained, config.model.checkpoint,
                               device=self.device, seed=config.seed)
        self.model = self.clip.model.train()
        self.regime = Regime(self.model, config.regime)  # frozen weights and adapters, before the optimizer
        if config.model.grad_checkpointing:
            self.model.set_grad_checkpointing(True)
        reads_pictures = reads_negative_images(config.loss)
        stored = source_set(config.data, self.clip, skip_log=self.out / "skipped_pairs.jsonl",
                            negative_images=reads_pictures)
        check_loss_data(config.loss, stored.negative_pictures)  # before a preload decodes the whole set
        for note in unused_data(config.loss, stored) if self.rank == 0 else []:
            print(note, file=sys.stderr)
        self.dataset = in_memory(stored, config.data, progress=self.progress and self.rank == 0)
        if len(self.dataset) < config.batch_size:
            raise ConfigError(f"batch_size {config.batch_size} is larger than the dataset ({len(self.dataset)} "
                              "records)")
        self.steps_per_epoch = len(self.dataset) // config.batch_size
        self.total = config.steps or config.epochs * self.steps_per_epoch
        self.data_path, how = data_path(self.dataset, config.data.workers)
        if self.rank == 0:
            print(f"data: {how}", file=sys.stderr)
            if line := self.regime.describe():
                print(line, file=sys.stderr)
            if warning := warmup_warning(config, self.total):
                print(warning, file=sys.stderr)
        # the fused CUDA kernel updates every parameter in one launch; the CPU keeps the reference implementation
        o = config.optim
        self.optimizer = torch.optim.AdamW(param_groups(self.model, o.weight_decay), lr=o.lr, betas=(o.beta1, o.beta2),
                                           eps=o.eps, fused=self.device.startswith("cuda") or None)

    def resume(self, resume: str | None) -> None:
        """Continue from a checkpoint (``latest`` or a path): its weights, optimizer, RNG and data position."""
        if not resume:
            return
        if resume == "latest" and not (self.ckpt_root / "latest.json").is_file():
            raise ConfigError(f"--resume latest: {self.ckpt_root} holds no checkpoint yet; leave out --resume to "
                              "start")
        directory = resolve_checkpoint(self.ckpt_root / "latest" if resume == "latest" else resume)
        if not (directory / "trainer_state.json").exists():
            finished = resume == "latest" or directory.parent == self.ckpt_root
            raise ConfigError(f"cannot resume from {directory}: no trainer_state.json there"
                              + (f"; {how_to_continue(self.ckpt_root)}" if finished else ""))
        from safetensors import SafetensorError
        from safetensors.torch import load_model as load_weights

        weights = directory / WEIGHTS_FILE
        try:
            if self.regime.lora:  # the weights file holds the merged model; the run trains adapters on its start
                self.regime.load(directory, earlier_checkpoint(directory))
            else:
                load_weights(self.model, str(weights))
        except (SafetensorError, OSError, RuntimeError) as e:  # cut short, or tensors of another model
            reason = " ".join(str(e).split())[:300]
            raise TrainingError(f"{weights} cannot be read into the run's model ({reason}); "
                                f"{earlier_checkpoint(directory)}") from None
        position = load_trainer_state(directory, self.optimizer, earlier_checkpoint(directory))
        self.resumed_from = directory
        self.step_count, self.epoch, self.step_in_epoch = (position["step"], position["epoch"],
                                                           position["step_in_epoch"])

    def prepare(self) -> None:
        """The forward the steps call (text at the captions' length, DDP, compile) and the loss."""
        config = self.config
        self.objective = Objective(config.loss, self.model, self.rank, self.world)
        if self.resumed_from is not None:
            self.objective.load(self.resumed_from)
        # a loss that reads more than the pooled features (tokens, a teacher's) gets them at the full context
        self.trim = config.model.trim_text and trimmable(self.model) and not self.objective.needs
        # open_clip's forward, cut text, or with token features
        forward = TrimmedTextCLIP(self.model) if self.trim else self.objective.forward(self.model)
        if self.world > 1:
            forward = torch.nn.parallel.DistributedDataParallel(
                forward, device_ids=None if self.device == "cpu" else [self.local_rank])
        if config.model.compile:
            forward = torch.compile(forward)
        self.forward = forward
        self.loss_fn = self.objective.loss_fn
        self.autocast = self.device.startswith("cuda") and config.model.precision == "amp_bf16"

    def open_logs(self) -> None:
        """config.json, metrics.jsonl (rows after the resumed step dropped: they are redone), TensorBoard, and the
        evaluation hook's data (checked before the first step)."""
        if self.rank != 0:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        # the settings, and how the batches were made (cache, preload or decode: `data_path`)
        atomic_write_json(self.out / "config.json", asdict(self.config) | {"data_path": self.data_path,
                                                                           "start": self.start})
        metrics_path = self.out / "metrics.jsonl"
        kept = [r for r in read_jsonl_repairing(metrics_path) if r.get("step", 0) <= self.step_count]
        atomic_write_jsonl(metrics_path, kept)
        self.log_file = JsonlAppender(metrics_path)
        if self.config.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(self.out / "tensorboard"))
        if self.config.wandb.project:
            self.wandb = open_wandb(self.config)
        if self.config.eval.every:
            self.eval_data = load_eval_data(self.config)

    @cached_property
    def step_context(self) -> StepContext:
        """What every step shares, taken at the first step (after `prepare`)."""
        return StepContext(self.forward, self.model, self.loss_fn, self.optimizer, self.device,
                           self.config.optim.grad_clip, self.autocast, getattr(self.dataset, "normalize", None),
                           self.trim, self.objective.teacher, self.config.clamp_logit_scale)

    def step(self, batch: tuple, tick: float) -> dict:
        """One optimisation step; its metrics row. ``tick`` is when the step began waiting for its batch."""
        lr = lr_at(self.step_count, self.total, self.config.optim)
        out = training_step(self.step_context, batch, lr)
        loss = out["contrastive_loss"]
        if out.get("non_finite"):
            raise TrainingError(f"loss is {loss.item()} at step {self.step_count + 1} (lr {lr:.3g}); stopped. The "
                                f"last good checkpoint is kept in {self.ckpt_root}; lower optim.lr or check the data")
        self.step_count, self.step_in_epoch = self.step_count + 1, self.step_in_epoch + 1
        # .item() waits for the device to finish the step (the logit scale is clamped after the update), so the
        # time below is the whole step on a GPU too, not the time it took to queue it
        row = {"step": self.step_count, "epoch": self.epoch, "loss": loss.item(), "lr": lr,
               "logit_scale": self.model.logit_scale.exp().item()}
        # the hard-negative diagnostics are undefined (NaN) for a batch without negatives: logged as null
        row |= {k: finite_or_none(out[k].item()) if k in out else None for k in DIAGNOSTICS}
        # a peer loss's own terms (`negclip/i2t`, ...), as they come
        row |= {k: finite_or_none(float(v)) for k, v in out.items() if "/" in k}
        row["samples_per_s"] = self.config.batch_size / (time.perf_counter() - tick)
        return row

    def log(self, row: dict) -> None:
        if self.log_file is None or self.step_count % self.config.log_every:
            return
        self.log_file.write(row)
        self.log_file.flush()
        if self.tb is not None:
            for k, v in row.items():
                self.tb.add_scalar(k, v, self.step_count)
        if self.wandb is not None:
            self.wandb.log(row, step=self.step_count)

    def evaluate(self) -> None:
        """The evaluation hook, every ``eval.every`` steps, logged to metrics.jsonl."""
        if self.eval_data is None or self.step_count % self.config.eval.every:
            return
        scores = run_eval(self.clip, self.eval_data, self.device, self.config.model.trim_text)
        self.model.train()
        if self.log_file is not None:
            self.log_file.write({"step": self.step_count, **scores})
        if self.wandb is not None:
            self.wandb.log(scores, step=self.step_count)

    def save(self, tag: str) -> None:
        """A checkpoint of this step (``periodic``, ``final``, ``interrupted``, ``stopped``), written by rank 0."""
        from ..models import save_checkpoint

        self.saved_at = self.step_count
        if self.rank != 0:
            return
        if not all(torch.isfinite(p).all() for p in self.model.parameters()):
            raise TrainingError(f"the weights are no longer finite after step {self.step_count}; stopped without "
                                f"saving them. The last good checkpoint is kept in {self.ckpt_root}; lower optim.lr")
        name = f"step-{self.step_count:07d}"
        # a finished run's last checkpoint is read for its weights; the optimizer state (2x the weights) is kept
        # only where a run can be resumed from it, or when asked for
        keep_state = tag != "final" or self.config.keep_final_state
        position = {"step": self.step_count, "epoch": self.epoch, "step_in_epoch": self.step_in_epoch}
        def beside_weights(directory: Path) -> None:
            self.regime.save(directory)  # a LoRA run's adapters, in every checkpoint
            if keep_state:
                save_trainer_state(directory, self.optimizer, position)
                self.objective.save(directory)

        save_checkpoint(self.ckpt_root / name, self.regime.checkpoint_model(), self.clip.config, beside_weights)
        atomic_write_json(self.ckpt_root / "latest.json", {"name": name, "step": self.step_count, "reason": tag})

    def loop(self, stop_at: int | None = None) -> dict:
        """Steps until ``stop_at`` (or the end), epoch by epoch, then `finish`; the last metrics row."""
        from tqdm import tqdm

        config = self.config
        end = min(self.total, stop_at) if stop_at else self.total
        bar = tqdm(total=self.total, initial=self.step_count, desc=self.label, unit="step",
                   disable=not self.progress or self.rank != 0, dynamic_ncols=True)
        last: dict = {}
        stopped_by = None  # the signal that asked the run to stop
        try:
            with StopSignals() as signals:
                while self.step_count < end and stopped_by is None:
                    batches = EpochBatches(len(self.dataset), config.batch_size, self.rank, self.world, config.seed,
                                           self.epoch, self.step_in_epoch)
                    loader = epoch_batches(self.dataset, batches, config.data.workers,
                                           pin_memory=self.device.startswith("cuda"), apart=config.data.negatives_apart)
                    tick = time.perf_counter()  # a step's time runs from here: waiting for its batch counts
                    for batch in loader:
                        if self.step_count >= end:
                            break
                        last = self.step(batch, tick)
                        self.log(last)
                        bar.update()
                        bar.set_postfix(loss=f"{last['loss']:.4f}", **({} if last["hn_grad_share"] is None else
                                                                       {"share": f"{last['hn_grad_share']:.3f}"}))
                        self.evaluate()
                        if config.save_every and self.step_count % config.save_every == 0 and self.step_count < end:
                            self.save("periodic")  # the last step saves in `finish`
                        tick = time.perf_counter()
                        if signals.requested(self.world, self.device):  # Ctrl-C, SIGTERM: save, then stop
                            stopped_by = signals.received or "a signal to another rank"
                            break
                    if self.step_in_epoch >= self.steps_per_epoch:
                        self.epoch, self.step_in_epoch = self.epoch + 1, 0
        finally:
            bar.close()
        self.finish(stopped_by)
        return last

    def finish(self, stopped_by: str | None) -> None:
        """The last checkpoint (unless a periodic one of this very step stands), logs closed; a run stopped by a
        signal before its end raises `Interrupted`, saying how to continue."""
        if not (stopped_by and self.saved_at == self.step_count):
            self.save("final" if self.step_count >= self.total else "interrupted" if stopped_by else "stopped")
        if self.log_file is not None:
            self.log_file.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
        if stopped_by and self.step_count < self.total:
            raise Interrupted(f"{stopped_by} received: stopped after step {self.step_count} of {self.total} with a "
                              f"checkpoint in {self.ckpt_root / f'step-{self.step_count:07d}'}; continue with the "
                              "same command and --resume latest")


def open_wandb(config: TrainConfig):
    """A Weights & Biases run for ``config`` (wandb's documented `wandb.init`), the one a resumed run started."""
    import wandb

    out = Path(config.out)
    recorded = out / WANDB_RUN
    run_id = json.loads(recorded.read_text())["id"] if recorded.is_file() else uuid.uuid4().hex[:12]
    atomic_write_json(recorded, {"id": run_id})
    w = config.wandb
    return wandb.init(project=w.project, entity=w.entity, name=w.name, id=run_id, resume="allow", dir=str(out),
                      config=asdict(config))


def earlier_checkpoint(directory: Path) -> str:
    """What to do when a checkpoint cannot be resumed from."""
    return (f"resume from an earlier checkpoint of the run (--resume {directory.parent}/step-NNNNNNN), or start over "
            "with --overwrite")


def run(config: TrainConfig, resume: str | None, progress: bool, stop_at: int | None, label: str) -> dict:
    """A run's steps in order; the last metrics row."""
    steps = Run(config, progress, label)
    steps.set_up()
    steps.resume(resume)
    steps.prepare()
    steps.open_logs()
    return steps.loop(stop_at)


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def load_eval_data(config: TrainConfig) -> dict:
    """The evaluation hook's data, cut to ``eval.subset`` items per subset, checked before training starts."""
    from .. import evaluation

    loaded = {}
    for name in config.eval.benchmarks:
        data = evaluation.load_data(name, Path(config.eval.data_root), skip_missing=True)
        if isinstance(data, dict) and isinstance(data.get("items"), dict):
            data = {**data, "items": {k: v[: config.eval.subset] for k, v in data["items"].items()}}
        elif isinstance(data, dict) and isinstance(data.get("items"), list):
            data = {**data, "items": data["items"][: config.eval.subset]}
        loaded[name] = data
    return loaded


def run_eval(clip, loaded: dict, device: str, trim_text: bool = True) -> dict:
    """The evaluation hook's scores, computed in full fp32 as the benchmarks' reference code does: training
    on CUDA allows TF32 matmuls (`use_open_clip_cuda_settings`), which would shift scores near a tie."""
    from .. import evaluation
    from ..evaluation.encoding import Encoder

    clip.model.eval()
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        results = evaluation.run(Encoder(clip, device=device, progress=False, trim_text=trim_text), list(loaded),
                                 loaded)
    finally:
        torch.set_float32_matmul_precision(precision)
    return {f"eval/{name}/{k}": v for name, r in results.items() for k, v in r["metrics"].items()}
