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

This module is the loop and its checkpoint state; the config is `train_config`, the data path `train_data`
(and `image_cache` for datasets preprocessed once).
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import torch

from .checkpoints import resolve_checkpoint
from .configs import ConfigError
from .errors import Interrupted, TrainingError
from .locks import locked
from .loss import CementLoss
from .records import (JsonlAppender, atomic_write_json, atomic_write_jsonl, atomic_write_safetensors,
                      atomic_write_text, read_jsonl_repairing)
from .text_encoding import TrimmedTextCLIP, trim_tokens, trimmable
from .train_config import LOSS_SCHEDULES, OptimConfig, TrainConfig, check_config, count_records
from .train_data import EpochBatches, epoch_batches, training_set

def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """open_clip's rule: no weight decay on gains, biases, norms and the logit scale."""
    exclude = lambda n, p: p.ndim < 2 or "bn" in n or "ln" in n or "bias" in n or "logit_scale" in n  # noqa: E731
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [{"params": [p for n, p in named if exclude(n, p)], "weight_decay": 0.0},
            {"params": [p for n, p in named if not exclude(n, p)], "weight_decay": weight_decay}]


def lr_at(step: int, total: int, config: OptimConfig) -> float:
    """Linear warmup then cosine decay to 0 (open_clip's cosine_lr), as a pure function of the step."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, total - config.warmup)
    return 0.5 * (1 + math.cos(math.pi * progress)) * config.lr


def save_trainer_state(directory: Path, optimizer: torch.optim.Optimizer, position: dict) -> None:
    """Optimizer tensors and RNG state as safetensors, everything else as JSON: no pickles."""
    tensors, scalars = {}, {}
    state = optimizer.state_dict()
    for pid, values in state["state"].items():
        for k, v in values.items():
            if torch.is_tensor(v):
                tensors[f"optimizer.{pid}.{k}"] = v.contiguous()
            else:
                scalars[f"{pid}.{k}"] = v
    tensors["rng.torch"] = torch.get_rng_state()
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    atomic_write_safetensors(directory / "trainer_state.safetensors", tensors)
    py_state = random.getstate()
    atomic_write_text(directory / "trainer_state.json", json.dumps({
        "position": position, "param_groups": state["param_groups"], "optimizer_scalars": scalars,
        "rng_python": [py_state[0], list(py_state[1]), py_state[2]],
    }, indent=1))


def load_trainer_state(directory: Path, optimizer: torch.optim.Optimizer) -> dict:
    from safetensors.torch import load_file

    tensors = load_file(str(directory / "trainer_state.safetensors"))
    meta = json.loads((directory / "trainer_state.json").read_text())
    state: dict = {}
    for key, v in tensors.items():
        if key.startswith("optimizer."):
            _, pid, k = key.split(".", 2)
            state.setdefault(int(pid), {})[k] = v
    for key, v in meta["optimizer_scalars"].items():
        pid, k = key.split(".", 1)
        state.setdefault(int(pid), {})[k] = v
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    torch.set_rng_state(tensors["rng.torch"])
    cuda = [tensors[k] for k in sorted(t for t in tensors if t.startswith("rng.cuda."))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    v, s, g = meta["rng_python"]
    random.setstate((v, tuple(s), g))
    return meta["position"]


# ------------------------------------------------------------------------------------------------ trainer


class StopSignals:
    """While active, Ctrl-C (SIGINT) and SIGTERM (a cluster pre-empting the job) ask the loop to stop after the
    step in progress, so it can save a checkpoint first; a second signal acts as usual (stops at once). Where
    handlers cannot be installed (a thread other than the main one), signals keep their usual effect."""

    def __init__(self):
        self.received: str | None = None
        self.previous: dict = {}

    def __enter__(self):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self.handle)
        return self

    def handle(self, signum, frame):
        import signal

        self.received = signal.Signals(signum).name
        signal.signal(signum, self.previous[signum])  # the next one is not caught

    def __exit__(self, *exc):
        import signal

        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def requested(self, world: int, device: str) -> bool:
        """Whether any rank received a signal: all ranks stop after the same step."""
        if world == 1:
            return self.received is not None
        import torch.distributed as dist

        flag = torch.tensor([self.received is not None], dtype=torch.int32, device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


def distributed() -> tuple[int, int, int]:
    """(rank, world size, local rank), initialising the process group under torchrun."""
    world = int(os.environ.get("WORLD_SIZE", 1))
    if world == 1:
        return 0, 1, 0
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), world, int(os.environ.get("LOCAL_RANK", 0))


def check_pretrained(config: TrainConfig) -> None:
    """The pretrained tag exists for the model (needs open_clip, so it comes after `check_config`)."""
    m = config.model
    if m.checkpoint is not None or m.pretrained in (None, "none") or Path(m.pretrained).is_file():
        return
    import open_clip

    from . import models  # noqa: F401  (registers our model configs, e.g. cj-tiny)

    tags = open_clip.list_pretrained_tags_by_model(m.name)
    if m.pretrained not in tags:
        raise ConfigError(f"model.pretrained {m.pretrained!r} does not exist for {m.name}; known: {tags} "
                          "(or a weights file, or none)")


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
    job at a time writes into ``out``."""
    check_config(config)
    check_pretrained(config)
    rank, _, _ = distributed()
    if rank != 0:  # rank 0 alone writes into out: it holds the lock
        return _train(config, resume, progress, stop_at, label)
    out = Path(config.out)
    with locked(out / ".train.lock", f"--out {out}", "concrete-jungle train"):
        previous = used_run(out)
        if previous and not resume:
            if not overwrite:
                raise ConfigError(f"--out {out} holds a training run ({previous}); continue it with --resume "
                                  "latest, start it over with --overwrite, or choose another --out")
            for old in ("checkpoints", "tensorboard"):
                shutil.rmtree(out / old, ignore_errors=True)
            for old in ("metrics.jsonl", "skipped_pairs.jsonl"):
                (out / old).unlink(missing_ok=True)
        remove_orphans(out / "checkpoints")
        return _train(config, resume, progress, stop_at, label)


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


def _train(config: TrainConfig, resume: str | None, progress: bool, stop_at: int | None, label: str) -> dict:
    rank, world, local_rank = distributed()
    known = count_records(config)
    if not config.data.pairs and 0 <= known < config.batch_size:
        raise ConfigError(f"batch_size {config.batch_size} is larger than the dataset ({known} records)")
    device = config.device or (f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        use_open_clip_cuda_settings()
    out = Path(config.out)
    ckpt_root = out / "checkpoints"

    from .models import load_model, save_checkpoint

    torch.manual_seed(config.seed)
    random.seed(config.seed)
    clip = load_model(config.model.name, config.model.pretrained, config.model.checkpoint, device=device,
                      seed=config.seed)
    model = clip.model.train()
    if config.model.grad_checkpointing:
        model.set_grad_checkpointing(True)

    dataset = training_set(config.data, clip, progress=progress and rank == 0,
                           skip_log=out / "skipped_pairs.jsonl")
    if len(dataset) < config.batch_size:
        raise ConfigError(f"batch_size {config.batch_size} is larger than the dataset ({len(dataset)} records)")
    steps_per_epoch = len(dataset) // config.batch_size
    total = config.steps or config.epochs * steps_per_epoch

    # the fused CUDA kernel updates every parameter in one launch; the CPU keeps the reference implementation
    optimizer = torch.optim.AdamW(param_groups(model, config.optim.weight_decay), lr=config.optim.lr,
                                  betas=(config.optim.beta1, config.optim.beta2), eps=config.optim.eps,
                                  fused=device.startswith("cuda") or None)
    step, epoch, step_in_epoch = 0, 0, 0
    if resume:
        if resume == "latest" and not (ckpt_root / "latest.json").is_file():
            raise ConfigError(f"--resume latest: {ckpt_root} holds no checkpoint yet; leave out --resume to start")
        directory = resolve_checkpoint(ckpt_root / "latest" if resume == "latest" else resume)
        if not (directory / "trainer_state.json").exists():
            raise ConfigError(f"cannot resume from {directory}: no trainer_state.json there")
        from safetensors.torch import load_model as load_weights

        load_weights(model, str(directory / "open_clip_model.safetensors"))
        position = load_trainer_state(directory, optimizer)
        step, epoch, step_in_epoch = position["step"], position["epoch"], position["step_in_epoch"]

    trim = config.model.trim_text and trimmable(model)
    dist_model = TrimmedTextCLIP(model) if trim else model  # open_clip's forward, text at the captions' length
    if world > 1:
        dist_model = torch.nn.parallel.DistributedDataParallel(
            dist_model, device_ids=None if device == "cpu" else [local_rank])
    if config.model.compile:
        dist_model = torch.compile(dist_model)
    schedule = LOSS_SCHEDULES[config.loss.name]
    params = {"none": {}, "static": {"value": config.loss.static_margin}}.get(
        schedule, {"m_min": config.loss.m_min, "m_max": config.loss.m_max, "center": config.loss.center,
                   "tau": config.loss.tau})
    loss_fn = CementLoss(schedule, local_loss=config.loss.local_loss, gather_with_grad=config.loss.gather_with_grad,
                         rank=rank, world_size=world, **params)
    autocast = device.startswith("cuda") and config.model.precision == "amp_bf16"

    metrics_path = out / "metrics.jsonl"
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(out / "config.json", asdict(config))
        # rows after the checkpoint we resume from are redone: drop them so no step is logged twice
        kept = [r for r in read_jsonl_repairing(metrics_path) if r.get("step", 0) <= step]
        atomic_write_jsonl(metrics_path, kept)
    log = JsonlAppender(metrics_path) if rank == 0 else None
    tb = None
    if config.tensorboard and rank == 0:
        from torch.utils.tensorboard import SummaryWriter

        tb = SummaryWriter(str(out / "tensorboard"))

    saved_at = -1  # the step of the last checkpoint this run wrote

    def save(tag: str) -> None:
        nonlocal saved_at
        saved_at = step
        if rank != 0:
            return
        if not all(torch.isfinite(p).all() for p in model.parameters()):
            raise TrainingError(f"the weights are no longer finite after step {step}; stopped without saving them. "
                                f"The last good checkpoint is kept in {ckpt_root}; lower optim.lr")
        name = f"step-{step:07d}"
        # a finished run's last checkpoint is read for its weights; the optimizer state (2x the weights) is
        # kept only where a run can be resumed from it, or when asked for
        keep_state = tag != "final" or config.keep_final_state
        position = {"step": step, "epoch": epoch, "step_in_epoch": step_in_epoch}
        save_checkpoint(ckpt_root / name, model, clip.config,
                        (lambda d: save_trainer_state(d, optimizer, position)) if keep_state else None)
        atomic_write_json(ckpt_root / "latest.json", {"name": name, "step": step, "reason": tag})

    eval_data = load_eval_data(config) if config.eval.every and rank == 0 else None
    from tqdm import tqdm

    bar = tqdm(total=total, initial=step, desc=label, unit="step", disable=not progress or rank != 0,
               dynamic_ncols=True)
    last: dict = {}
    end = min(total, stop_at) if stop_at else total
    stopped_by = None  # the signal that asked the run to stop
    with StopSignals() as signals:
        while step < end and stopped_by is None:
            batches = EpochBatches(len(dataset), config.batch_size, rank, world, config.seed, epoch, step_in_epoch)
            loader = epoch_batches(dataset, batches, config.data.workers, pin_memory=device.startswith("cuda"),
                                   apart=config.data.negatives_apart)
            tick = time.perf_counter()  # a step's time runs from here: waiting for its batch counts
            for image, neg_image, text, neg_text, c, has_negative in loader:
                if step >= end:
                    break
                lr = lr_at(step, total, config.optim)
                batch = (image, neg_image, text, neg_text, c, has_negative)
                out_dict = training_step(dist_model, model, loss_fn, optimizer, batch, lr, config.optim.grad_clip,
                                         device, autocast, getattr(dataset, "normalize", None), trim)
                loss = out_dict["contrastive_loss"]
                if out_dict.get("non_finite"):
                    bar.close()
                    raise TrainingError(f"loss is {loss.item()} at step {step + 1} (lr {lr:.3g}); stopped. The last "
                                        f"good checkpoint is kept in {ckpt_root}; lower optim.lr or check the data")
                step, step_in_epoch = step + 1, step_in_epoch + 1
                # .item() waits for the device to finish the step (the logit scale is clamped after the update), so
                # the time below is the whole step on a GPU too, not the time it took to queue it
                last = {"step": step, "epoch": epoch, "loss": loss.item(), "lr": lr,
                        "logit_scale": model.logit_scale.exp().item()}
                # the hard-negative diagnostics are undefined (NaN) for a batch without negatives: logged as null
                last |= {k: finite_or_none(out_dict[k].item())
                         for k in ("hn_grad_share", "p_pos", "logit_gap", "margin")}
                last["samples_per_s"] = config.batch_size / (time.perf_counter() - tick)
                if log is not None and step % config.log_every == 0:
                    log.write(last)
                    log.flush()
                    if tb is not None:
                        for k, v in last.items():
                            tb.add_scalar(k, v, step)
                bar.update()
                bar.set_postfix(loss=f"{last['loss']:.4f}", **({} if last["hn_grad_share"] is None else
                                                               {"share": f"{last['hn_grad_share']:.3f}"}))
                if eval_data is not None and step % config.eval.every == 0:
                    scores = run_eval(clip, eval_data, device, config.model.trim_text)
                    model.train()
                    if log is not None:
                        log.write({"step": step, **scores})
                if config.save_every and step % config.save_every == 0 and step < end:  # the last step saves below
                    save("periodic")
                tick = time.perf_counter()
                if signals.requested(world, device):  # Ctrl-C, SIGTERM: save, then stop
                    stopped_by = signals.received or "a signal to another rank"
                    break
            if step_in_epoch >= steps_per_epoch:
                epoch, step_in_epoch = epoch + 1, 0
    bar.close()
    if not (stopped_by and saved_at == step):  # a periodic checkpoint of this very step stands
        save("final" if step >= total else "interrupted" if stopped_by else "stopped")
    if log is not None:
        log.close()
    if tb is not None:
        tb.close()
    if stopped_by and step < total:
        raise Interrupted(f"{stopped_by} received: stopped after step {step} of {total} with a checkpoint in "
                          f"{ckpt_root / f'step-{step:07d}'}; continue with the same command and --resume latest")
    return last


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def training_step(dist_model, model, loss_fn: CementLoss, optimizer, batch, lr: float, grad_clip: float | None,
                  device: str, autocast: bool, normalize=None, trim_text: bool = False) -> dict:
    """One optimisation step on a batch of N anchors and their N negatives; the loss's output dict.

    ``normalize`` turns uint8 pictures (from the image cache) into the model's input on the device. With
    ``trim_text`` the tokens are cut to the batch's captions (`text_encoding.trim_tokens`) for a ``dist_model``
    that wraps a `TrimmedTextCLIP`. A non-finite loss takes no step and comes back with ``non_finite`` set.
    """
    image, neg_image, text, neg_text, c, has_negative = batch
    for g in optimizer.param_groups:
        g["lr"] = lr
    # each half goes over from the loader's pinned memory, then joins on the device: a join on the host would
    # copy 1.2 GB per ViT-B-32 step into memory that is not pinned, and the transfer would no longer be async
    images = torch.cat([image.to(device, non_blocking=True), neg_image.to(device, non_blocking=True)])
    if normalize is not None:
        images = normalize(images)
    texts = torch.cat([text.to(device, non_blocking=True), neg_text.to(device, non_blocking=True)])
    if trim_text:  # each rank cuts its own batch: the loss compares features, not tokens
        texts = trim_tokens(model, texts)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        # open_clip's forward: normalised features and exp(logit_scale); through DDP for gradient sync
        image_features, text_features, logit_scale = dist_model(images, texts)[:3]
        out = loss_fn(image_features.float(), text_features.float(), logit_scale.float(), c.to(device),
                      has_negative.to(device), output_dict=True)
    if not torch.isfinite(out["contrastive_loss"]):
        return out | {"non_finite": True}
    optimizer.zero_grad(set_to_none=True)
    out["contrastive_loss"].backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    with torch.no_grad():
        model.logit_scale.clamp_(0, math.log(100))  # as open_clip: a temperature of at most 100
    return out


def load_eval_data(config: TrainConfig) -> dict:
    """The evaluation hook's data, cut to ``eval.subset`` items per subset, checked before training starts."""
    from . import evaluation

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
    from . import evaluation
    from .evaluation.encoding import Encoder

    clip.model.eval()
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        results = evaluation.run(Encoder(clip, device=device, progress=False, trim_text=trim_text), list(loaded),
                                 loaded)
    finally:
        torch.set_float32_matmul_precision(precision)
    return {f"eval/{name}/{k}": v for name, r in results.items() for k, v in r["metrics"].items()}
