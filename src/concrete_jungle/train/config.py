"""Slipform's training config: typed sections, read from YAML with overrides, checked without torch.

`load_config` builds a `TrainConfig` from a YAML file and ``key.path=value`` overrides; every unknown key,
wrong type or bad value is reported at once (`configs.ConfigError`). `check_config` then checks what the
config points at (model name, data folders, evaluation data) before anything heavy is imported, so a wrong
config fails in a fraction of a second, before any data is read or model built.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..configs import ConfigError, apply_overrides, from_dict, load_yaml, open_clip_model_names, raise_problems
from ..loss.options import (
    CEMENT_LOSSES,
    LOSS_NAMES,
    PEER_LOSSES,
    CEClipOptions,
    CLICOptions,
    DeGLAOptions,
    FSCCLIPOptions,
    NegCLIPOptions,
    TripletCLIPOptions,
)
from ..sources import SourceError, expand_paths
from .start import is_peer, start_identity, start_problems
from .workers import default_workers

# the margin parameters each margin schedule of Cement's loss reads (docs/method.md §5), by loss.name; the field's
# losses read none of them
MARGIN_KEYS = ("m_min", "m_max", "center", "tau", "static_margin")
SCHEDULE_READS = {"cement": ("m_min", "m_max", "center", "tau"), "infonce": (), "static": ("static_margin",),
                  "inverse": ("m_min", "m_max", "center", "tau")}
PRECISIONS = ("fp32", "amp_bf16")  # what training does: fp32, or bf16 autocast on CUDA


@dataclass(frozen=True)
class ModelConfig:
    name: str | None = "ViT-B-32"
    pretrained: str | None = "openai"
    checkpoint: str | None = None
    precision: str = "amp_bf16"  # bf16 autocast on CUDA; fp32 on the CPU
    grad_checkpointing: bool = False
    compile: bool = False
    # encode each batch's captions at their length, not the full context, where that is exact (models/text_encoding.py)
    trim_text: bool = True

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise_problems([f"model.precision {self.precision!r} is not one of {', '.join(PRECISIONS)}"])


@dataclass(frozen=True)
class DataConfig:
    concretebatch: list[str] = field(default_factory=list)  # ConcreteBatch directories
    pairs: list[str] = field(default_factory=list)  # caption files of plain pairs (no negative: masked)
    pairs_images: str | None = None  # not needed when every pairs input is a store in one folder
    pairs_split: str | None = None  # Karpathy files: which split(s), e.g. train,restval (never the test images)
    # DataLoader worker processes: at most 4, and no more than the CPUs this process may use (more only contend)
    workers: int = field(default_factory=default_workers)
    # decode and preprocess the whole training set once into memory when it takes at most this many MiB
    # (0: never); each step then reads tensors, no JPEG decoding
    preload_mib: int = 2048
    # false: every hard negative is masked out of the loss (the anchors alone, plain CLIP loss): the control
    # that tells what the negatives add from what more training on the same anchors adds
    negatives: bool = True
    # true: the augmentation control: every negative pair is an ordinary pair of the batch *after* its anchor's
    # (the same pairs and batch shape as with hard negatives, but never an anchor's own negative beside it), so
    # "more pairs" is told apart from "hard contrast"; with loss.name infonce
    negatives_apart: bool = False
    # true: train on the finished shards of an unfinished or unmerged ConcreteBatch (refused otherwise)
    partial: bool = False

    def __post_init__(self):
        problems = [f"data.{k} must be >= 0, got {getattr(self, k)}" for k in ("workers", "preload_mib")
                    if getattr(self, k) < 0]
        raise_problems(problems)


@dataclass(frozen=True)
class LossConfig:
    # cement (adaptive margin) | infonce | static | inverse, or one of the field's losses, each with its section
    # below (docs/peers.md): negclip | tripletclip | ce_clip | fsc_clip | degla | clic
    name: str = "cement"
    m_min: float = -2.0
    m_max: float = 2.0
    center: float = 4.0
    tau: float = 0.15
    static_margin: float = 1.0
    local_loss: bool = False
    gather_with_grad: bool = True
    mask_entailed: bool = False  # mask a negative picture's logit against the anchor caption true of it (method.md §5)
    negclip: NegCLIPOptions = field(default_factory=NegCLIPOptions)
    tripletclip: TripletCLIPOptions = field(default_factory=TripletCLIPOptions)
    ce_clip: CEClipOptions = field(default_factory=CEClipOptions)
    fsc_clip: FSCCLIPOptions = field(default_factory=FSCCLIPOptions)
    degla: DeGLAOptions = field(default_factory=DeGLAOptions)
    clic: CLICOptions = field(default_factory=CLICOptions)

    def __post_init__(self):
        problems = []
        if self.name not in LOSS_NAMES:
            problems.append(f"loss.name {self.name!r} is not one of {', '.join(LOSS_NAMES)}")
        if not self.tau > 0:
            problems.append(f"loss.tau must be > 0, got {self.tau}")
        if self.m_min > self.m_max:
            problems.append(f"loss.m_min {self.m_min} is above loss.m_max {self.m_max}")
        raise_problems(problems + non_finite(self, "loss") + self.unread())

    def unread(self) -> list[str]:
        """Every option that differs from its default but that the loss named, under its own settings, does not
        read: a margin parameter of another schedule or under a peer loss, another loss's section, an option its
        section's other settings switch off (`loss.options`)."""
        if self.name not in LOSS_NAMES:
            return []
        defaults = {f.name: f.default for f in fields(self)}
        reads = SCHEDULE_READS.get(self.name, ())
        who = ("a margin schedule of Cement's loss" if self.name in CEMENT_LOSSES else "a peer loss, which has "
               f"its own section loss.{self.name}")
        problems = [f"loss.{key} {getattr(self, key)} is not read: it is a Cement margin parameter, and loss.name "
                    f"{self.name} ({who}) reads {', '.join(reads) or 'none of them'}; remove it or choose a loss "
                    "that reads it" for key in MARGIN_KEYS if key not in reads and getattr(self, key) != defaults[key]]
        problems += [f"loss.{other} is not read: loss.name is {self.name}; remove the section or set loss.name: "
                     f"{other}" for other in PEER_LOSSES if other != self.name
                     and getattr(self, other) != type(getattr(self, other))()]
        if self.name in PEER_LOSSES:
            problems += getattr(self, self.name).unread()
        if self.mask_entailed and not reads_negative_images(self):
            problems.append(f"loss.mask_entailed is not read: loss.name {self.name} reads no negative picture; "
                            "remove it or choose a loss that reads them")
        return problems


def reads_negative_images(loss: LossConfig) -> bool:
    """Whether the loss reads the negatives' pictures: Cement (every schedule), TripletCLIP, and NegCLIP's later
    version do; CE-CLIP, FSC-CLIP, DeGLA and CLIC have none in their data and read none, so a run of them neither
    decodes nor encodes a picture it would not use."""
    return loss.negclip.negative_images if loss.name == "negclip" else loss.name in (*CEMENT_LOSSES, "tripletclip")


def check_loss_data(loss: LossConfig, negative_pictures: bool) -> None:
    """What a loss refuses of the data it is given: TripletCLIP without a single negative picture, whose second
    half would be empty (NegCLIP's first version under TripletCLIP's name), unless allowed."""
    if loss.name == "tripletclip" and not negative_pictures and not loss.tripletclip.allow_caption_only:
        raise ConfigError("loss.name tripletclip on data whose negatives have no picture: its negative pairs' half "
                          "is empty and the loss is NegCLIP's first version; train it on a set with negative "
                          "pictures (import tripletclip), or set loss.tripletclip.allow_caption_only: true")


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-5
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.98
    eps: float = 1e-6
    warmup: int = 50
    grad_clip: float | None = 1.0

    def __post_init__(self):
        problems = []
        if not self.lr > 0:
            problems.append(f"optim.lr must be > 0, got {self.lr} (flag --lr)")
        if self.warmup < 0:
            problems.append(f"optim.warmup must be >= 0, got {self.warmup}")
        if not self.weight_decay >= 0:
            problems.append(f"optim.weight_decay must be >= 0, got {self.weight_decay}")
        elif self.weight_decay > 1 and 1 <= self.lr * self.weight_decay < float("inf"):  # AdamW: w *= 1 - lr * wd
            problems.append(f"optim.weight_decay {self.weight_decay:g} with optim.lr {self.lr:g} multiplies every "
                            f"weight by {1 - self.lr * self.weight_decay:.3g} each step (AdamW: 1 - lr x "
                            "weight_decay), which zeroes or flips it: lower optim.weight_decay (0.1 is usual)")
        if self.grad_clip is not None and not self.grad_clip > 0:
            problems.append(f"optim.grad_clip must be > 0, or null for no clipping, got {self.grad_clip} (a "
                            "negative norm would flip the gradients)")
        problems += [f"optim.{k} must be in [0, 1), got {getattr(self, k)}" for k in ("beta1", "beta2")
                     if not 0 <= getattr(self, k) < 1]
        if not self.eps > 0:
            problems.append(f"optim.eps must be > 0, got {self.eps}")
        raise_problems(problems + non_finite(self, "optim"))


@dataclass(frozen=True)
class EvalConfig:
    benchmarks: list[str] = field(default_factory=list)
    data_root: str | None = None
    every: int = 0  # steps; 0 = never
    subset: int = 200  # items per benchmark subset

    def __post_init__(self):
        raise_problems([f"eval.{k} must be >= 0, got {getattr(self, k)}" for k in ("every", "subset")
                        if getattr(self, k) < 0])


@dataclass(frozen=True)
class WandbConfig:
    """Weights & Biases logging of the metrics.jsonl rows, on when ``project`` is set (the ``wandb`` extra)."""
    project: str | None = None
    entity: str | None = None
    name: str | None = None  # the run's name there; default: wandb's


LORA_MODULES = ("attn", "mlp")  # a block's attention (q, k, v and output projections), its MLP (c_fc, c_proj)
TOWERS = ("image", "text")


def choices(values: list[str], allowed: tuple[str, ...], where: str) -> list[str]:
    """What is wrong with a list that names some of ``allowed``, each at most once."""
    problems = [f"{where} {v!r} is not one of {', '.join(allowed)}" for v in values if v not in allowed]
    if not values:
        problems.append(f"{where} is empty: name one or more of {', '.join(allowed)}")
    if len(set(values)) < len(values):
        problems.append(f"{where} names an entry twice: {values}")
    return problems


@dataclass(frozen=True)
class LoraConfig:
    """LoRA adapters (`lora.py`): rank 0 trains the model's own weights; a rank r trains adapters of that rank alone,
    every weight of the model frozen."""
    rank: int = 0
    alpha: float = 16.0  # each adapter's output is scaled by alpha / rank
    dropout: float = 0.0  # on each adapter's input, in training
    modules: list[str] = field(default_factory=lambda: list(LORA_MODULES))
    towers: list[str] = field(default_factory=lambda: list(TOWERS))

    def __post_init__(self):
        problems = [] if self.rank >= 0 else [f"regime.lora.rank must be >= 0 (0: no adapters), got {self.rank}"]
        if not self.alpha > 0:
            problems.append(f"regime.lora.alpha must be > 0, got {self.alpha}")
        if not 0 <= self.dropout < 1:
            problems.append(f"regime.lora.dropout must be in [0, 1), got {self.dropout}")
        problems += choices(self.modules, LORA_MODULES, "regime.lora.modules")
        problems += choices(self.towers, TOWERS, "regime.lora.towers")
        raise_problems(problems + non_finite(self, "regime.lora"))


@dataclass(frozen=True)
class FreezeConfig:
    """The weights a run leaves as they are (`regime.py`): no gradient, not in the optimizer."""
    image: bool = False  # the whole image tower
    text: bool = False  # the whole text tower: token and positional embeddings, transformer, ln_final, projection
    # the first K residual blocks of a tower and what feeds them: for the image tower the patch embedding, class
    # token, positional embedding and ln_pre; for the text tower the token and positional embeddings
    image_blocks: int = 0
    text_blocks: int = 0
    logit_scale: bool = False  # the temperature (and a SigLIP model's logit bias)

    def __post_init__(self):
        problems = [f"regime.freeze.{k} must be >= 0, got {getattr(self, k)}" for k in ("image_blocks", "text_blocks")
                    if getattr(self, k) < 0]
        problems += [f"regime.freeze.{t} freezes the whole {t} tower and regime.freeze.{t}_blocks "
                     f"{getattr(self, f'{t}_blocks')} part of it: set one of them" for t in TOWERS
                     if getattr(self, t) and getattr(self, f"{t}_blocks")]
        if self.image and self.text and self.logit_scale:
            problems.append("regime.freeze freezes both towers and the logit scale: nothing is left to train")
        raise_problems(problems)


@dataclass(frozen=True)
class RegimeConfig:
    """What a run trains: every weight (the default), LoRA adapters (`lora`), or the weights `freeze` leaves."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    freeze: FreezeConfig = field(default_factory=FreezeConfig)

    def __post_init__(self):
        if self.lora.rank and self.freeze != FreezeConfig():
            raise_problems(["regime.lora trains its adapters alone, every weight of the model frozen: regime.freeze "
                            "has nothing to add (choose the adapted towers with regime.lora.towers)"])


@dataclass(frozen=True)
class TrainConfig:
    out: str = field(metadata={"flag": "--out DIR"})
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    regime: RegimeConfig = field(default_factory=RegimeConfig)  # what trains: all weights, LoRA, or some frozen
    eval: EvalConfig = field(default_factory=EvalConfig)
    batch_size: int = 1024
    epochs: int = 1
    steps: int | None = None  # overrides epochs when set
    seed: int = 0
    # after each step the temperature exp(logit_scale) is clamped to at most this, as open_clip's trainer does
    # (100: logit_scale in [0, ln 100]); null: never clamped, as TripletCLIP's released train.py
    clamp_logit_scale: float | None = 100.0
    log_every: int = 1
    save_every: int = 500
    # the final checkpoint of a finished run keeps only the weights (what evaluation and fine-tuning read);
    # true keeps the optimizer and RNG state too, as every intermediate checkpoint does
    keep_final_state: bool = False
    tensorboard: bool = False  # needs the tensorboard extra
    wandb: WandbConfig = field(default_factory=WandbConfig)
    device: str | None = None

    def __post_init__(self):
        flags = {"batch_size": "--batch-size", "epochs": "--epochs", "steps": "--steps", "log_every": None}
        problems = [f"{k} must be >= 1, got {getattr(self, k)}" + (f" (flag {f})" if f else "")
                    for k, f in flags.items() if getattr(self, k) is not None and getattr(self, k) < 1]
        bound = self.clamp_logit_scale
        if bound is not None and not (1 <= bound < float("inf")):
            problems.append(f"clamp_logit_scale must be a finite number >= 1 (the largest exp(logit_scale); 100 is "
                            f"open_clip's), or null for no clamp, got {bound}")
        if self.save_every < 0:
            problems.append(f"save_every must be >= 0 (0: only the final checkpoint), got {self.save_every}")
        if not self.out.strip():
            problems.append("out is empty: name the run folder (flag --out)")
        if not 0 <= self.seed < 2**32:  # the data order is drawn from seed * 100003 + epoch, in torch's 64 bits
            problems.append(f"seed must be in [0, 2**32), got {self.seed} (flag --seed)")
        if self.data.negatives_apart and (self.loss.name != "infonce" or not self.data.negatives):
            problems.append("data.negatives_apart takes loss.name infonce and data.negatives true: a negative in "
                            "another batch than its anchor is an ordinary pair, with no margin to apply")
        raise_problems(problems)


def warmup_warning(config: TrainConfig, total: int) -> str | None:
    """A run shorter than its warmup never reaches its learning rate: said at its start, naming both numbers."""
    o = config.optim
    if total >= o.warmup:
        return None
    return (f"warning: the run has {total} steps, fewer than optim.warmup {o.warmup}: the learning rate only climbs, "
            f"to {o.lr * total / o.warmup:.3g} of optim.lr {o.lr:g}; set optim.warmup below {total} "
            f"(--set optim.warmup={max(total // 10, 0)}) to train at the intended rate")


def non_finite(section, name: str) -> list[str]:
    """A NaN or infinite number in a config section is an error where it is read, not a failure steps later."""
    import math

    return [f"{name}.{f.name} must be a finite number, got {getattr(section, f.name)}" for f in fields(section)
            if isinstance(getattr(section, f.name), float) and not math.isfinite(getattr(section, f.name))]


def load_config(path: str | None, overrides: list[str]) -> TrainConfig:
    data = load_yaml(path) if path else {}
    return from_dict(TrainConfig, apply_overrides(data, overrides, TrainConfig), where=str(path or "config"),
                     overrides=overrides)


def pairs_are_stores(paths: list[str]) -> bool:
    """Every input of ``data.pairs`` is a store in one folder, which holds the images too."""
    from ..sources.stores import store_root

    try:
        return store_root(expand_paths(paths)) is not None
    except SourceError:
        return False


def does_not_exist(path: str) -> str:
    """A missing path in words, with what a relative one was resolved against: paths in a config file, in --set
    and in flags are all relative to the current directory (not to the config file), as docs/commands/train.md says."""
    if Path(path).is_absolute():
        return "does not exist"
    return (f"does not exist (relative to the current directory {Path.cwd()}: paths in a config file resolve "
            "against the directory the command runs in, not the file's)")


def missing_log_packages(config: TrainConfig) -> list[str]:
    """The optional loggers a config turns on whose package is not installed, each with the extra that brings it."""
    import importlib.util

    wanted = [("tensorboard", "tensorboard: true", config.tensorboard),
              ("wandb", f"wandb.project {config.wandb.project}", config.wandb.project)]
    return [f"{what} needs the {package} package: pip install 'concrete-jungle[{package}]' (or turn it off)"
            for package, what, on in wanted if on and importlib.util.find_spec(package) is None]


def check_config(config: TrainConfig) -> None:
    """Everything a config points at that can be wrong, all reported at once, before any data is read or
    any model built (and before torch is imported). The pretrained tag is checked by `models.load_model`."""
    problems = []
    m = config.model
    if m.checkpoint is None and not is_peer(m):
        if not m.name:
            problems.append("model: give model.name (flag --model) or model.checkpoint (flag --checkpoint)")
        elif m.name.startswith("local-dir:"):
            folder = m.name.removeprefix("local-dir:")
            if not Path(folder).is_dir():
                problems.append(f"model.name {m.name}: {folder} "
                                + (does_not_exist(folder) if not Path(folder).exists() else "is not a directory"))
        elif not m.name.startswith("hf-hub:") and m.name not in open_clip_model_names():
            problems.append(f"model.name {m.name!r} is not an open_clip model (see open_clip.list_models()), nor "
                            "peer:NAME for a published checkpoint")
    else:
        problems += start_problems(m)  # a checkpoint folder, or a published checkpoint
    d = config.data
    if not d.concretebatch and not d.pairs:
        problems.append("no training data: pass --data DIR [DIR ...] (ConcreteBatch directories), or set "
                        "data.concretebatch and/or data.pairs + data.pairs_images in the config")
    for path in d.concretebatch:
        if not Path(path).exists():
            problems.append(f"data.concretebatch {path} {does_not_exist(path)}")
        elif not Path(path).is_dir() or not list(Path(path).glob("shard-*.tar")):
            problems.append(f"data.concretebatch {path} is not a ConcreteBatch directory (no shard-*.tar in it)")
    for path in d.pairs:
        try:
            expand_paths([path])
        except SourceError as e:
            problems.append(f"data.pairs: {e}")
    if d.pairs and not d.pairs_images and not pairs_are_stores(d.pairs):
        problems.append("data.pairs needs data.pairs_images, the folder their images are in (stores in one folder "
                        "hold their own: WebDataset, Parquet, a saved dataset)")
    elif d.pairs_images and not Path(d.pairs_images).is_dir():
        images = d.pairs_images
        problems.append(f"data.pairs_images {images} "
                        + (does_not_exist(images) if not Path(images).exists() else "is not a directory"))
    if config.eval.every:
        from ..evaluation.names import BENCHMARKS

        if not config.eval.benchmarks or not config.eval.data_root:
            problems.append("eval.every needs eval.benchmarks and eval.data_root")
        unknown = sorted(set(config.eval.benchmarks) - set(BENCHMARKS))
        if unknown:
            problems.append(f"eval.benchmarks {unknown} unknown; choose from {', '.join(BENCHMARKS)}")
        root = config.eval.data_root
        if root and not Path(root).is_dir():
            problems.append(f"eval.data_root {root} "
                            + (does_not_exist(root) if not Path(root).exists() else "is not a directory"))
    problems += missing_log_packages(config)
    world = int(os.environ.get("WORLD_SIZE", 1))
    if config.batch_size % world:
        problems.append(f"batch_size {config.batch_size} is not divisible by the {world} processes")
    raise_problems(problems)


# what a resumed run may change: how long it runs, what it logs, evaluates and keeps, where and how fast it runs.
# Everything else (model, data, loss, optimiser, batch size, seed, precision, text trimming) made the steps so far,
# and config.json records it for the whole run
RESUMABLE = ("out", "steps", "epochs", "log_every", "save_every", "keep_final_state", "tensorboard", "device",
             "eval.benchmarks", "eval.data_root", "eval.every", "eval.subset", "data.workers", "data.preload_mib",
             "model.compile", "model.grad_checkpointing", "wandb.project", "wandb.entity", "wandb.name")


def check_resumable(config: TrainConfig, resume: str | None) -> None:
    """A resumed run keeps the settings it was made with: a change to anything but `RESUMABLE` is refused, naming
    each setting with its recorded and its new value. The record is ``<out>/config.json`` (or, resuming another
    run's checkpoint into a new ``out``, that run's); a key one of them lacks (a field of another version) is not
    compared."""
    import json

    from ..files.identity import changes
    from ..models.checkpoints import CheckpointError, resolve_checkpoint

    if not resume:
        return
    out = Path(config.out)
    recorded = out / "config.json"
    if resume == "latest":
        if not (out / "checkpoints" / "latest.json").is_file():
            return  # nothing to resume: the run says so
    elif not recorded.is_file():
        try:
            recorded = resolve_checkpoint(resume).parents[1] / "config.json"
        except CheckpointError:
            return  # the run names the missing checkpoint
    if not recorded.is_file():
        raise ConfigError(f"--resume {resume}: {recorded} is missing, so the run's settings cannot be checked (a run "
                          "writes it before its first step); restore it, or start over with --overwrite")
    try:
        before = json.loads(recorded.read_text(encoding="utf-8"))
        now = asdict(config) | {"start": start_identity(config.model)}  # the weights it started from, as recorded
        changed = changes(before, now, ignore=RESUMABLE, both=False)
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as e:
        raise ConfigError(f"--resume {resume}: {recorded} is damaged ({e}); it records the run's settings: restore "
                          "it, or start over with --overwrite") from None
    if changed:
        raise ConfigError(f"--resume {resume} continues a run made with other settings: {'; '.join(changed)} "
                          f"(recorded in {recorded}); a resumed run may change only {', '.join(RESUMABLE[1:])}. "
                          "Resume with the recorded settings, or start a new run (another --out, or --overwrite)")


def count_records(config: TrainConfig) -> int:
    """Dataset size from the manifests (metadata only), to check the batch size before reading data;
    -1 when a dataset has no manifest yet (unknown until its shards are indexed)."""
    from ..concretebatch import read_manifest

    n = 0
    for d in config.data.concretebatch:
        if not (Path(d) / "manifest.jsonl").exists():
            return -1
        n += sum(row["status"] == "ok" for row in read_manifest(d))
    return n

