"""The stages every toy-world experiment shares (the demo, the studies), their cache and their rows.

A stage lives in ``<out>/<stage>-<hash of its settings>`` and is reused when it has finished, so a second run
with the same settings only re-writes the report, and changing a setting re-runs what depends on it. A stage keeps
the seconds it took in its folder (``seconds.json``), so a report made from reused stages still says what they cost.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..records import atomic_write_json
from ..toyworld.build import WorldConfig, build_world


@dataclass(frozen=True)
class Finetune:
    """One fine-tuning setting: a row of the results table."""

    label: str
    loss: str  # cement | infonce | static | inverse
    mode: str  # the ConcreteBatch it trains on: hc | lc | wo
    negatives: bool = True  # False: the control, the same anchors and steps with every negative masked
    apart: bool = False  # True: the augmentation control, each negative pair in the batch after its anchor's
    # True: the anchor caption's logit against a negative picture of which it is true is masked (loss.mask_entailed)
    mask_entailed: bool = False


# the fine-tune that separates "hard negatives teach" from "more training on these captions teaches"
CONTROL = Finetune("control (D_hc anchors, no negatives)", "infonce", "hc", negatives=False)
BASELINE = "CLIP baseline"
BLIND = "blind:"  # the prefix of a subset's blind answers among a checkpoint's outcomes (`Stages.evaluate`)
STAGE_SECONDS = "seconds.json"  # in a stage's folder: the seconds the stage took when it was made
# the toy world's decider of anchor_true_of_negative, by class path (the registered name needs installed metadata)
VIEWER, VIEWER_RULE = "concrete_jungle.toyworld.entailment:ViewerScorer", "viewer_anchor_true>=1"


def baseline_label(model: str) -> str:
    """The baseline as the reports and the figures name it."""
    return f"the {BASELINE} ({model})"


@dataclass(frozen=True)
class StageConfig:
    """The stages' settings; the defaults are the demo's (`demo.DemoConfig`)."""

    out: str = "runs/demo"
    world: WorldConfig = field(default_factory=WorldConfig)
    model: str = "cj-demo"
    batch_size: int = 64
    pretrain_steps: int = 250
    pretrain_lr: float = 2e-3
    finetune_steps: int = 40
    finetune_lr: float = 2e-3  # the pretraining's peak: the tiny model is far from converged
    seeds: tuple[int, ...] = (0, 1, 2)
    analysis_pairs: int = 512
    gradient_batch_sizes: tuple[int, ...] = (8, 16, 32, 64, 128, 256)
    gallery_sample: int = 120
    no_leak: bool = False  # the toy captioner refuses a negative that is a held-out scene (toyworld.rewrite)
    # the viewer decides each planted negative's anchor_true_of_negative (toyworld.entailment); off: unknown
    entailment: bool = False
    # captions encoded at their length (models/text_encoding.py) in training, evaluation and analysis; False: the full
    # context, the computation of runs made before that existed (equal up to float rounding, which compounds)
    trim_text: bool = True



def settings_hash(settings: dict) -> str:
    return hashlib.sha1(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:8]


def stage_dir(out: Path, name: str, settings: dict) -> Path:
    d = out / f"{name}-{settings_hash(settings)}"
    d.mkdir(parents=True, exist_ok=True)
    atomic_write_json(d / "stage.json", settings)
    return d


def link_latest(link: Path, target: Path) -> None:
    """``<out>/D_hc`` -> the latest D_hc stage, so other commands and configs can name it without its hash."""
    tmp = link.with_name(f".{link.name}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target.resolve().relative_to(link.parent.resolve()), target_is_directory=True)
    tmp.replace(link)


def log(message: str, console=None) -> None:
    from tqdm import tqdm

    with tqdm.external_write_mode():  # an open bar (the demo's time left) is cleared, then drawn again below
        (console.print if console is not None else print)(message)


class WallClock:
    """The wall time an experiment's work has taken over all its starts, kept in ``path``: a start adds its time
    up to its last `lap` (a stopped or killed start loses at most the time of the stage it was in), so a run
    finished after three starts reports the three, and one that reuses every stage adds only its own seconds."""

    def __init__(self, path: Path):
        self.path = path
        self.before = json.loads(path.read_text())["seconds"] if path.is_file() else 0.0
        self.started = time.perf_counter()

    def lap(self) -> float:
        """Record and return the seconds so far, this start's included."""
        seconds = self.before + time.perf_counter() - self.started
        atomic_write_json(self.path, {"seconds": seconds})
        return seconds


PACKAGE = Path(__file__).resolve().parents[1]  # the concrete_jungle package whose code a run runs


def code_version(package: Path = PACKAGE) -> dict:
    """The code a run runs: the package's version, the git commit of the checkout ``package`` is in, whether the
    package's files differ from that commit (``dirty``: the changed and untracked paths, and a sha256 of the
    changes, so two dirty starts can be told apart). Without git, or outside a checkout that versions the
    package (an installed wheel), ``commit`` and ``dirty`` are None and ``reason`` says why."""
    from .. import __version__

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(package), *args], capture_output=True, text=True, check=True,
                              timeout=60).stdout

    known = {"version": __version__}
    try:
        git("ls-files", "--error-unmatch", "__init__.py")  # the checkout versions this package, not only holds it
        commit = git("rev-parse", "HEAD").strip()
        root = Path(git("rev-parse", "--show-toplevel").strip())
        status = git("status", "--porcelain", "-z", "--untracked-files=all", "--", ".").split("\0")
        diff = subprocess.run(["git", "-C", str(package), "diff", "HEAD", "--binary", "--", "."], capture_output=True,
                              check=True, timeout=60).stdout
    except FileNotFoundError:
        return known | {"commit": None, "dirty": None, "reason": "git is not installed"}
    except subprocess.CalledProcessError as e:
        first = (e.stderr or "").strip().splitlines()[:1]
        return known | {"commit": None, "dirty": None,
                        "reason": f"{package} is not in a git checkout that versions it ({' '.join(first)})"}
    except subprocess.TimeoutExpired:
        return known | {"commit": None, "dirty": None, "reason": "git did not answer within 60 seconds"}
    entries = iter(status)
    changed, untracked = [], []
    for entry in entries:  # "XY path", and after a rename's entry the old path as an entry of its own
        if entry:
            changed.append(entry[3:])
            if entry[0] in "RC":
                next(entries, None)
            elif entry.startswith("??"):
                untracked.append(entry[3:])
    digest = hashlib.sha256(diff)
    for name in untracked:  # not in the diff: their contents go into the digest
        path = root / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b""))
    return known | {"commit": commit, "dirty": bool(changed), "changed": changed[:20], "changed_count": len(changed),
                    "changes_sha256": digest.hexdigest() if changed else None}


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class StartRecord:
    """Each start of an experiment (each time it is run or resumed), kept in ``path``: when it began, the code it
    ran (`code_version`) and, read again at every `lap`, the code at its last finished stage, so that code changed
    while a start ran shows as well as code changed between starts; ``preregistration``, the start's check of its
    design (`preregistration.check` or `waive`). A run begun before this record existed has its earlier starts
    counted, unknown."""

    def __init__(self, path: Path, earlier_seconds: float = 0.0, preregistration: dict | None = None):
        self.path = path
        if path.is_file():
            self.starts = json.loads(path.read_text())["starts"]
        else:  # earlier starts left wall time (`WallClock`) but no record of their code
            self.starts = [{"started": None, "code": None, "reason": "a start made before the code of each start "
                            "was recorded"}] if earlier_seconds else []
        code = code_version()
        self.starts.append({"started": utc_now(), "code": code, "last_stage": utc_now(), "code_at_last_stage": code}
                           | ({"preregistration": preregistration} if preregistration else {}))
        atomic_write_json(path, {"starts": self.starts})

    def lap(self) -> list[dict]:
        """Record the code at this point of the start; every start so far."""
        self.starts[-1] |= {"last_stage": utc_now(), "code_at_last_stage": code_version()}
        atomic_write_json(self.path, {"starts": self.starts})
        return self.starts


class Stages:
    """The stages an experiment on the toy world is made of, each cached in ``<out>/<stage>-<hash of its
    settings>`` and reused once finished: render the world, pretrain the baseline, plant a ConcreteBatch,
    fine-tune, evaluate, analyse, draw a gallery. ``config`` is a `StageConfig`."""

    def __init__(self, config: StageConfig, progress: bool = True, console=None):
        self.c = config
        self.out = Path(config.out)
        self.progress = progress
        self.console = console
        self.seconds: dict[str, float] = {}  # this start's, per stage
        # per stage: (seconds it took when it was made, or None if its folder kept none; whether reused now)
        self.stage_times: dict[str, list[tuple[float | None, bool]]] = {}

    def timed(self, name: str, fn, *args):
        start = time.perf_counter()
        result = fn(*args)
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        return result

    def text_setting(self) -> dict:
        """The text length as a stage setting, named only when it is the full context: the stages of runs that
        encode captions at their length keep their folders."""
        return {} if self.c.trim_text else {"trim_text": False}

    def reused(self, what: str) -> None:
        log(f"    reused: {what} (finished by an earlier run with the same settings)", self.console)

    def account(self, stage: str, record: Path, start: float, reused: bool) -> None:
        """Note the seconds a stage took: measured from ``start`` and kept in ``record`` (in the stage's folder)
        when it was made now, read back from ``record`` when it was reused."""
        if reused:
            seconds = json.loads(record.read_text())["seconds"] if record.is_file() else None
        else:
            seconds = time.perf_counter() - start
            atomic_write_json(record, {"seconds": seconds})
        self.stage_times.setdefault(stage, []).append((seconds, reused))

    def world(self) -> Path:
        d = stage_dir(self.out, "world", asdict(self.c.world))
        reused = (d / "world.json").is_file()
        if reused:
            self.reused(f"the toy world in {d.name}")
        start = time.perf_counter()
        build_world(d, self.c.world, progress=self.progress)
        self.account("world", d / STAGE_SECONDS, start, reused)
        return d

    def train(self, name: str, settings: dict, config, label: str) -> Path:
        """Train (or resume, or reuse) a model; the final checkpoint's directory."""
        from ..train.loop import train

        d = stage_dir(self.out, name, settings)
        checkpoints = d / "run" / "checkpoints"
        latest = json.loads((checkpoints / "latest.json").read_text()) if (checkpoints / "latest.json").is_file() \
            else None
        start, reused = time.perf_counter(), latest is not None and latest["reason"] == "final"
        if reused:
            self.reused(label)
        else:
            # a stage folder is the stage's own: a run killed before its first checkpoint starts over
            train(config(str(d / "run")), resume="latest" if latest else None, progress=self.progress, label=label,
                  overwrite=True)
            latest = json.loads((checkpoints / "latest.json").read_text())
        self.account(name.split("-")[0], d / STAGE_SECONDS, start, reused)  # baseline, finetune
        return checkpoints / latest["name"]

    def baseline(self, world: Path, save_every: int = 0) -> Path:
        """Pretrain the CLIP baseline on the world's training captions; ``save_every`` keeps intermediate
        checkpoints, for a learning curve."""
        from ..train.config import DataConfig, LossConfig, ModelConfig, OptimConfig, TrainConfig

        c = self.c
        settings = {"world": str(world), "model": c.model, "batch_size": c.batch_size, "steps": c.pretrain_steps,
                    "lr": c.pretrain_lr} | ({"save_every": save_every} if save_every else {}) | self.text_setting()
        return self.train("baseline", settings, lambda out: TrainConfig(
            out=out, model=ModelConfig(name=c.model, pretrained="none", precision="fp32", trim_text=c.trim_text),
            data=DataConfig(pairs=[str(world / "captions.jsonl")], pairs_images=str(world / "images"), workers=0),
            loss=LossConfig(name="infonce"), optim=OptimConfig(lr=c.pretrain_lr, warmup=20, weight_decay=0.1),
            batch_size=c.batch_size, steps=c.pretrain_steps, seed=0, save_every=save_every), label=BASELINE)

    def plant(self, world: Path, mode: str) -> Path:
        from .. import plant
        from ..plant import PlantConfig
        from ..plant.scoring import ScoringConfig

        settings = {"world": str(world), "mode": mode} | ({"no_leak": True} if self.c.no_leak else {}) | (
            {"entailment": VIEWER_RULE} if self.c.entailment else {})
        d = stage_dir(self.out, f"D_{mode}", settings) / f"D_{mode}"
        start, reused = time.perf_counter(), (d / "summary.json").is_file()
        if reused:
            self.reused(f"D_{mode}")
        else:
            # the toy world's captioner and editor by class path: the registered names (`toyworld`) need the
            # package's installed metadata, the demo runs from a source tree too
            plant.run(PlantConfig(captions=[str(world / "captions.jsonl")], images=str(world / "images"), out=str(d),
                                  mode=mode, captioner="concrete_jungle.toyworld.rewrite:ToyCaptioner",
                                  captioner_options={"world": str(world)} if self.c.no_leak else {},
                                  editor="concrete_jungle.toyworld.rewrite:ToyEditor",
                                  editor_options={"world": str(world)}, batch_size=64, samples_per_shard=500,
                                  scoring=ScoringConfig(scorers={VIEWER: {"world": str(world)}}, device="cpu",
                                                        entailment=VIEWER_RULE) if self.c.entailment else None),
                      progress=self.progress)
        self.account("plant", d.parent / STAGE_SECONDS, start, reused)
        link_latest(self.out / f"D_{mode}", d)
        return d

    def finetune(self, baseline: Path, data: Path, row: Finetune, seed: int, batch_size: int | None = None,
                 steps: int | None = None, save_every: int = 0) -> Path:
        """Fine-tune the baseline on a dataset (the config's batch size and steps unless given); ``save_every``
        keeps intermediate checkpoints, for a learning curve."""
        from ..train.config import DataConfig, LossConfig, ModelConfig, OptimConfig, TrainConfig

        c = self.c
        batch_size, steps = batch_size or c.batch_size, steps or c.finetune_steps
        settings = {"baseline": str(baseline), "data": str(data), "loss": row.loss, "seed": seed,
                    "batch_size": batch_size, "steps": steps, "lr": c.finetune_lr} | (
            {} if row.negatives else {"negatives": False}) | ({"apart": True} if row.apart else {}) | (
            {"save_every": save_every} if save_every else {}) | (
            {"mask_entailed": True} if row.mask_entailed else {}) | self.text_setting()
        kind = "-control" if not row.negatives else "-apart" if row.apart else \
            "-mask-entailed" if row.mask_entailed else ""
        name = f"finetune-{data.name}-{row.loss}{kind}-s{seed}"
        return self.train(name, settings, lambda out: TrainConfig(
            out=out, model=ModelConfig(name=None, pretrained=None, checkpoint=str(baseline), precision="fp32",
                                       trim_text=c.trim_text),
            data=DataConfig(concretebatch=[str(data)], workers=0, negatives=row.negatives, negatives_apart=row.apart),
            loss=LossConfig(name=row.loss, mask_entailed=row.mask_entailed),
            optim=OptimConfig(lr=c.finetune_lr, warmup=5, weight_decay=0.1),
            batch_size=batch_size, steps=steps, seed=seed, save_every=save_every),
            label=f"{row.label}, seed {seed}")

    def evaluate(self, checkpoint: Path, test: dict, name: str = "toy_eval.json", per_item: bool = False,
                 blind: bool = False) -> dict:
        """Metrics of a checkpoint on held-out data (`test_data`), kept in the checkpoint's folder as ``name`` (a
        saved checkpoint never changes); with ``per_item``, also every item's answer and every query's rank (its
        outcomes, `stats`); with ``blind``, each compositional item's blind answer too (the test's mean picture in
        place of its own: `sugarcrepe.evaluate`), as the series and metric ``blind:<subset>``."""
        import torch

        from ..evaluation import retrieval, sugarcrepe
        from ..evaluation.encoding import Encoder
        from ..models import load_model

        path = checkpoint / name
        record = path.with_name(f"{path.stem}.{STAGE_SECONDS}")  # beside the answers: one per evaluation
        start = time.perf_counter()
        if path.is_file():
            self.account("evaluate", record, start, True)
            return json.loads(path.read_text())
        device = "cuda" if torch.cuda.is_available() else "cpu"
        encoder = Encoder(load_model(checkpoint=checkpoint, device=device), device=device, batch_size=256,
                          progress=False, trim_text=self.c.trim_text)
        scored = sugarcrepe.evaluate(encoder, test["sugarcrepe"], blind_answers=blind)
        ranked = retrieval.evaluate(encoder, test["retrieval"])
        metrics = scored["metrics"] | ranked["metrics"]
        # both benchmarks' answers as one set of outcomes: the series and recipes have distinct names
        outcomes = {part: scored["outcomes"][part] | ranked["outcomes"][part] for part in ("series", "metrics")}
        if blind:
            blind_series = {f"{BLIND}{s}": v for s, v in scored["blind"]["series"].items()}
            outcomes["series"] |= blind_series
            outcomes["metrics"] |= {name: {"mean": name} for name in blind_series}
            metrics |= {f"{BLIND}{s}": v for s, v in scored["blind"]["metrics"].items() if s in test["sugarcrepe"]
                        ["items"]}
        result = {"metrics": metrics, "outcomes": outcomes} if per_item else metrics
        self.account("evaluate", record, start, False)  # before the answers, whose file marks it finished
        atomic_write_json(path, result)
        return result

    def analyse(self, baseline: Path, datasets: dict[str, Path]) -> dict:
        """Table 1 and Fig. 5 (`analysis.analyze_datasets`) and Fig. 6 (gradient share), under the baseline."""
        from ..analysis import statistics as analysis
        from ..analysis.figures import gradient_share_title, plot_gradient_share
        from ..models import load_model

        c = self.c
        settings = {"baseline": str(baseline), "datasets": {k: str(v) for k, v in datasets.items()},
                    "pairs": c.analysis_pairs, "batch_sizes": list(c.gradient_batch_sizes)} | self.text_setting()
        d = stage_dir(self.out, "analysis", settings)
        start = time.perf_counter()
        if (d / "done.json").is_file():
            self.reused("the analysis")
            self.account("analysis", d / STAGE_SECONDS, start, True)
            return json.loads((d / "done.json").read_text())
        clip = load_model(checkpoint=baseline)
        stats = analysis.analyze_datasets(list(datasets.values()), clip, d, limit=c.analysis_pairs,
                                          progress=self.progress, trim_text=c.trim_text,
                                          reference=baseline_label(c.model))
        # the same features Table 1 used, from the analysis's cache
        image, text, conc, _, _ = analysis.concretebatch_features(clip, datasets["hc"], limit=c.analysis_pairs,
                                                                  cache_dir=d / "embeddings", progress=False,
                                                                  trim_text=c.trim_text)
        sizes = [n for n in c.gradient_batch_sizes if n <= conc.shape[0]]
        batches = 8
        samples = analysis.gradient_share_samples(image, text, conc, clip.model.logit_scale.exp().item(), sizes,
                                                  batches=batches)
        curves = analysis.means(samples)
        plot_gradient_share(curves, d / "gradient_share.png",
                            gradient_share_title("D_hc", conc.shape[0], baseline_label(c.model)),
                            analysis.spread(samples), batches)
        done = {"dir": str(d), "summaries": {k: v["summary"] for k, v in stats["datasets"].items()},
                "modes": {k: v["mode"] for k, v in stats["datasets"].items()},
                "gradient_share": {s: {str(n): v for n, v in pts.items()} for s, pts in curves.items()}}
        self.account("analysis", d / STAGE_SECONDS, start, False)  # before done.json, which marks it finished
        atomic_write_json(d / "done.json", done)
        return done

    def gallery(self, datasets: dict[str, Path], analysis_dir: Path) -> Path:
        from ..analysis.gallery import build_gallery

        # the gallery is drawn again at every start (the stages it shows may have changed): its own page is replaced
        return build_gallery([datasets["hc"], datasets["lc"]], self.out / "gallery", sample=self.c.gallery_sample,
                             stats=analysis_dir / "stats.json", overwrite=True)

    def test_data(self, world: Path, split: str = "test") -> dict:
        """The world's held-out compositional subsets and retrieval split (``test``, or ``val`` to choose on)."""
        from ..evaluation import retrieval, sugarcrepe

        return {"sugarcrepe": sugarcrepe.load(world / split / "sugarcrepe", world / "images" / split),
                "retrieval": retrieval.load(world / split / "retrieval.json", world / "images" / split)}
