"""`concrete-jungle demo`: the whole method, offline, on a CPU, in minutes, on the rendered toy world.

Stages, each in ``<out>/<stage>-<hash of its settings>`` and reused when it has finished (so a second run
with the same settings only re-writes the report; changing a setting re-runs what depends on it):

1. world: render training scenes and a held-out compositional test (`toyworld.build`);
2. baseline: pretrain a tiny open_clip model (`cj-demo`, random init) with plain CLIP loss on the
   anchor pairs -- the "CLIP baseline";
3. plant: ConcreteBatch in modes hc, lc and wo, through `Plant` with the toy captioner and editor;
4. fine-tune the baseline with InfoNCE, static margin and Cement on D_hc, and Cement on D_lc and D_wo,
   for every seed, with the same steps;
5. evaluate every model on the toy SugarCrepe and retrieval with the evaluation suite; analyse the
   datasets (Table 1, Fig. 5) and the gradient share (Fig. 6) with `analysis`; a gallery of D_hc and D_lc;
   `report.md` with the tables and plots.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .records import atomic_write_json, atomic_write_text, read_jsonl
from .toyworld.build import WorldConfig, build_world

@dataclass(frozen=True)
class Finetune:
    """One fine-tuning setting: a row of the results table."""

    label: str
    loss: str  # cement | infonce | static | inverse
    mode: str  # the ConcreteBatch it trains on: hc | lc | wo
    negatives: bool = True  # False: the control, the same anchors and steps with every negative masked


CONTROL = Finetune("control (D_hc anchors, no negatives)", "infonce", "hc", negatives=False)
# the paper's Table 2 rows that the toy world can make, after the control that separates "hard negatives
# teach" from "more training on these captions teaches"
FINETUNES = (CONTROL, Finetune("D_hc + InfoNCE", "infonce", "hc"), Finetune("D_hc + static margin", "static", "hc"),
             Finetune("D_hc + Cement", "cement", "hc"), Finetune("D_lc + Cement", "cement", "lc"),
             Finetune("D_wo + Cement", "cement", "wo"))
BASELINE = "CLIP baseline"
TEST_COLUMNS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj", "M.Avg")
RETRIEVAL_COLUMNS = ("text_retrieval_recall@1", "image_retrieval_recall@1")


@dataclass(frozen=True)
class DemoConfig:
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


QUICK = dict(world=WorldConfig(train=800, test=300), pretrain_steps=120, finetune_steps=25, seeds=(0,),
             analysis_pairs=256, gradient_batch_sizes=(8, 16, 32, 64, 128), gallery_sample=60)


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
    (console.print if console is not None else print)(message)


class Demo:
    def __init__(self, config: DemoConfig, progress: bool = True, console=None):
        self.c = config
        self.out = Path(config.out)
        self.progress = progress
        self.console = console
        self.seconds: dict[str, float] = {}

    def timed(self, name: str, fn, *args):
        start = time.perf_counter()
        result = fn(*args)
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        return result

    def reused(self, what: str) -> None:
        log(f"    reused: {what} (finished by an earlier run with the same settings)", self.console)

    # -- stages
    def world(self) -> Path:
        d = stage_dir(self.out, "world", asdict(self.c.world))
        if (d / "world.json").is_file():
            self.reused(f"the toy world in {d.name}")
        build_world(d, self.c.world, progress=self.progress)
        return d

    def train(self, name: str, settings: dict, config, label: str) -> Path:
        """Train (or resume, or reuse) a model; the final checkpoint's directory."""
        from .train import train

        d = stage_dir(self.out, name, settings)
        checkpoints = d / "run" / "checkpoints"
        latest = json.loads((checkpoints / "latest.json").read_text()) if (checkpoints / "latest.json").is_file() \
            else None
        if latest is not None and latest["reason"] == "final":
            self.reused(label)
        else:
            train(config(str(d / "run")), resume="latest" if latest else None, progress=self.progress, label=label)
            latest = json.loads((checkpoints / "latest.json").read_text())
        return checkpoints / latest["name"]

    def baseline(self, world: Path) -> Path:
        from .train_config import DataConfig, LossConfig, ModelConfig, OptimConfig, TrainConfig

        c = self.c
        settings = {"world": str(world), "model": c.model, "batch_size": c.batch_size, "steps": c.pretrain_steps,
                    "lr": c.pretrain_lr}
        return self.train("baseline", settings, lambda out: TrainConfig(
            out=out, model=ModelConfig(name=c.model, pretrained="none", precision="fp32"),
            data=DataConfig(pairs=[str(world / "captions.jsonl")], pairs_images=str(world / "images"), workers=0),
            loss=LossConfig(name="infonce"), optim=OptimConfig(lr=c.pretrain_lr, warmup=20, weight_decay=0.1),
            batch_size=c.batch_size, steps=c.pretrain_steps, seed=0, save_every=0), label=BASELINE)

    def plant(self, world: Path, mode: str) -> Path:
        from .plant import Plant, PlantConfig

        settings = {"world": str(world), "mode": mode}
        d = stage_dir(self.out, f"D_{mode}", settings) / f"D_{mode}"
        if (d / "summary.json").is_file():
            self.reused(f"D_{mode}")
        else:
            # the toy world's captioner and editor by class path: the registered names (`toyworld`) need the
            # package's installed metadata, the demo runs from a source tree too
            Plant(PlantConfig(captions=[str(world / "captions.jsonl")], images=str(world / "images"), out=str(d),
                              mode=mode, captioner="concrete_jungle.toyworld.rewrite:ToyCaptioner",
                              editor="concrete_jungle.toyworld.rewrite:ToyEditor",
                              editor_options={"world": str(world)}, batch_size=64, samples_per_shard=500),
                  progress=self.progress).run()
        link_latest(self.out / f"D_{mode}", d)
        return d

    def finetune(self, baseline: Path, data: Path, row: Finetune, seed: int, batch_size: int | None = None,
                 steps: int | None = None, save_every: int = 0) -> Path:
        """Fine-tune the baseline on a dataset (the config's batch size and steps unless given); ``save_every``
        keeps intermediate checkpoints, for a learning curve."""
        from .train_config import DataConfig, LossConfig, ModelConfig, OptimConfig, TrainConfig

        c = self.c
        batch_size, steps = batch_size or c.batch_size, steps or c.finetune_steps
        settings = {"baseline": str(baseline), "data": str(data), "loss": row.loss, "seed": seed,
                    "batch_size": batch_size, "steps": steps, "lr": c.finetune_lr} | (
            {} if row.negatives else {"negatives": False}) | ({"save_every": save_every} if save_every else {})
        name = f"finetune-{data.name}-{row.loss}{'' if row.negatives else '-control'}-s{seed}"
        return self.train(name, settings, lambda out: TrainConfig(
            out=out, model=ModelConfig(name=None, pretrained=None, checkpoint=str(baseline), precision="fp32"),
            data=DataConfig(concretebatch=[str(data)], workers=0, negatives=row.negatives),
            loss=LossConfig(name=row.loss), optim=OptimConfig(lr=c.finetune_lr, warmup=5, weight_decay=0.1),
            batch_size=batch_size, steps=steps, seed=seed, save_every=save_every),
            label=f"{row.label}, seed {seed}")

    def evaluate(self, checkpoint: Path, test: dict, name: str = "toy_eval.json", per_item: bool = False) -> dict:
        """Metrics of a checkpoint on held-out data (`test_data`), kept in the checkpoint's folder as ``name`` (a
        saved checkpoint never changes); with ``per_item``, also every SugarCrepe item's answer."""
        import torch

        from .evaluation import retrieval, sugarcrepe
        from .evaluation.encoding import Encoder
        from .models import load_model

        path = checkpoint / name
        if path.is_file():
            return json.loads(path.read_text())
        device = "cuda" if torch.cuda.is_available() else "cpu"
        encoder = Encoder(load_model(checkpoint=checkpoint, device=device), device=device, batch_size=256,
                          progress=False)
        scored = sugarcrepe.evaluate(encoder, test["sugarcrepe"])
        metrics = scored["metrics"] | retrieval.evaluate(encoder, test["retrieval"])["metrics"]
        result = {"metrics": metrics, "per_item": scored["per_item"]} if per_item else metrics
        atomic_write_json(path, result)
        return result

    def analyse(self, baseline: Path, datasets: dict[str, Path]) -> dict:
        """Table 1 and Fig. 5 (`analysis.analyze_datasets`) and Fig. 6 (gradient share), under the baseline."""
        from . import analysis
        from .models import load_model

        c = self.c
        settings = {"baseline": str(baseline), "datasets": {k: str(v) for k, v in datasets.items()},
                    "pairs": c.analysis_pairs, "batch_sizes": list(c.gradient_batch_sizes)}
        d = stage_dir(self.out, "analysis", settings)
        if (d / "done.json").is_file():
            self.reused("the analysis")
            return json.loads((d / "done.json").read_text())
        clip = load_model(checkpoint=baseline)
        stats = analysis.analyze_datasets(list(datasets.values()), clip, d, limit=c.analysis_pairs,
                                          progress=self.progress)
        # the same features Table 1 used, from the analysis's cache
        image, text, conc, _, _ = analysis.concretebatch_features(clip, datasets["hc"], limit=c.analysis_pairs,
                                                                  cache_dir=d / "embeddings", progress=False)
        sizes = [n for n in c.gradient_batch_sizes if n <= conc.shape[0]]
        curves = analysis.gradient_share_by_batch_size(image, text, conc, clip.model.logit_scale.exp().item(), sizes)
        analysis.plot_gradient_share(curves, d / "gradient_share.png",
                                     "Hard-negative gradient share on D_hc under the CLIP baseline (Fig. 6)")
        done = {"dir": str(d), "summaries": {k: v["summary"] for k, v in stats["datasets"].items()},
                "modes": {k: v["mode"] for k, v in stats["datasets"].items()},
                "gradient_share": {s: {str(n): v for n, v in pts.items()} for s, pts in curves.items()}}
        atomic_write_json(d / "done.json", done)
        return done

    def gallery(self, datasets: dict[str, Path], analysis_dir: Path) -> Path:
        from .gallery import build_gallery

        return build_gallery([datasets["hc"], datasets["lc"]], self.out / "gallery", sample=self.c.gallery_sample,
                             stats=analysis_dir / "stats.json")

    def test_data(self, world: Path, split: str = "test") -> dict:
        """The world's held-out compositional subsets and retrieval split (``test``, or ``val`` to choose on)."""
        from .evaluation import retrieval, sugarcrepe

        return {"sugarcrepe": sugarcrepe.load(world / split / "sugarcrepe", world / "images" / split),
                "retrieval": retrieval.load(world / split / "retrieval.json", world / "images" / split)}

    # -- the whole run
    def run(self) -> dict:
        c = self.c
        started = time.perf_counter()
        self.out.mkdir(parents=True, exist_ok=True)
        log("[1/5] rendering the toy world", self.console)
        world = self.timed("world", self.world)
        log("[2/5] pretraining the CLIP baseline (plain CLIP loss on anchor pairs)", self.console)
        baseline = self.timed("baseline", self.baseline, world)
        log("[3/5] ConcretePlant: D_hc, D_lc, D_wo", self.console)
        datasets = {m: self.timed("plant", self.plant, world, m) for m in ("hc", "lc", "wo")}
        log(f"[4/5] fine-tuning {len(FINETUNES)} settings x {len(c.seeds)} seed(s)", self.console)
        runs = {(row.label, seed): self.timed("finetune", self.finetune, baseline, datasets[row.mode], row, seed)
                for row in FINETUNES for seed in c.seeds}
        log("[5/5] evaluating, analysing, writing the report", self.console)
        test = self.test_data(world)
        from tqdm import tqdm

        models = [((BASELINE, None), baseline)] + list(runs.items())
        scores = {key: self.timed("evaluate", self.evaluate, ckpt, test)
                  for key, ckpt in tqdm(models, desc="evaluate", unit="model", disable=not self.progress)}
        analysed = self.timed("analysis", self.analyse, baseline, datasets)
        gallery = self.timed("gallery", self.gallery, datasets, Path(analysed["dir"]))
        curves = self.timed("report", plot_training_curves, runs, self.out / "training_curves.png")
        self.seconds["total"] = time.perf_counter() - started
        world_info = json.loads((world / "world.json").read_text())
        table = results_table(scores)
        result = {"table": table, "scores": {f"{k[0]}|{k[1]}": v for k, v in scores.items()},
                  "findings": findings(table, world_info["test_items"]), "analysis": analysed,
                  "seconds": self.seconds, "config": asdict(c)}
        atomic_write_json(self.out / "results.json", result)
        atomic_write_text(self.out / "report.md", report(c, result, world_info, datasets, analysed, gallery, curves,
                                                         self.out))
        return result


# ------------------------------------------------------------------------------------------------ report


def results_table(scores: dict) -> dict[str, dict[str, tuple[float, float, int]]]:
    """Row label -> column -> (mean, standard deviation over seeds, number of seeds), in percent."""
    table = {}
    for label in dict.fromkeys(name for name, _ in scores):
        rows = [v for (name, _), v in scores.items() if name == label]
        table[label] = {}
        for col in TEST_COLUMNS + RETRIEVAL_COLUMNS:
            vals = [100 * r[col] for r in rows]
            table[label][col] = (statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0, len(vals))
    return table


def plot_training_curves(runs: dict, path: Path) -> Path:
    """Loss and hard-negative gradient share per step of every fine-tune (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), dpi=110)
    for label in dict.fromkeys(k[0] for k in runs):
        logs = [[r for r in read_jsonl(ckpt.parent.parent / "metrics.jsonl") if "loss" in r]
                for (name, _), ckpt in runs.items() if name == label]
        steps = [r["step"] for r in logs[0]]
        for ax, key in zip(axes, ("loss", "hn_grad_share")):
            values = [[log_[i][key] for log_ in logs] for i in range(len(steps))]
            if all(v is not None for row in values for v in row):  # the control has no hard-negative share
                ax.plot(steps, [statistics.fmean(row) for row in values], label=label)
    for ax, title in zip(axes, ("Cement / InfoNCE loss", "hard-negative gradient share")):
        ax.set_xlabel("fine-tuning step")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def rich_table(table: dict):
    """The results table for the terminal."""
    from rich.table import Table

    cols = TEST_COLUMNS + RETRIEVAL_COLUMNS
    out = Table(title="toy compositional test (%, mean ± sd over seeds) and Recall@1")
    out.add_column("model")
    for c in cols:
        out.add_column(c.replace("text_retrieval_recall@1", "I→T R@1").replace("image_retrieval_recall@1", "T→I R@1"),
                       justify="right")
    for label, row in table.items():
        out.add_row(label, *(_cell(row[c]).replace(" ± ", "±") for c in cols))
    return out


def _cell(v: tuple[float, float, int]) -> str:
    mean, std, n = v
    return f"{mean:.1f} ± {std:.1f}" if n > 1 else f"{mean:.1f}"


def table_markdown(table: dict) -> str:
    cols = TEST_COLUMNS + RETRIEVAL_COLUMNS
    names = [c.replace("text_retrieval_recall@1", "I→T R@1").replace("image_retrieval_recall@1", "T→I R@1")
             for c in cols]
    lines = ["| model | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(cols)]
    lines += [f"| {label} | " + " | ".join(_cell(row[c]) for c in cols) + " |" for label, row in table.items()]
    return "\n".join(lines)


def findings(table: dict, n_items: dict[str, int]) -> list[str]:
    """What the table says about the paper's claims, stated from the numbers, whichever way they fall.

    A difference counts when it exceeds twice its noise: the larger of the seed-to-seed standard error and
    the binomial standard error of an M.Avg over this many test items (per model; conservative, as both
    models answer the same items).
    """
    subsets = TEST_COLUMNS[:-1]

    def noise(label: str) -> tuple[float, float]:
        row = table[label]
        binomial = math.sqrt(sum((p := row[s][0] / 100) * (1 - p) / n_items[s] for s in subsets)) / len(subsets)
        _, std, n = row["M.Avg"]
        return 100 * binomial, std / math.sqrt(n) if n > 1 else 0.0

    def compare(a: str, b: str) -> str:
        ma, mb = table[a]["M.Avg"][0], table[b]["M.Avg"][0]
        (ba, sa), (bb, sb) = noise(a), noise(b)
        se = max(math.hypot(ba, bb), math.hypot(sa, sb))
        delta = ma - mb
        verdict = "beats" if delta > 2 * se else "trails" if delta < -2 * se else "is within noise of"
        return f"{a} {verdict} {b}: M.Avg {ma:.1f} vs {mb:.1f}, {signed(delta)} points (standard error {se:.1f})."

    return [compare("D_hc + InfoNCE", CONTROL.label), compare("D_hc + Cement", "D_hc + InfoNCE"),
            compare("D_hc + Cement", "D_hc + static margin"), compare("D_hc + Cement", "D_lc + Cement"),
            compare("D_hc + Cement", "D_wo + Cement"), compare(CONTROL.label, BASELINE),
            compare("D_hc + Cement", BASELINE)]


def signed(x: float, digits: int = 1) -> str:
    """``+1.2``, ``-0.3``, and ``+0.0`` for anything that rounds to zero (never ``-0.0``)."""
    x = round(x, digits)
    return f"{x if x else 0.0:+.{digits}f}"


def dataset_finding(summaries: dict) -> str:
    """How the edits of D_hc and D_lc differ, in the two numbers the paper's argument rests on."""
    hc, lc = summaries["D_hc"], summaries["D_lc"]
    closer = "closer to" if lc["clip_v"] > hc["clip_v"] else "no closer to"
    return (f"Image side: the negative images of D_lc are {closer} "
            f"their anchors than those of D_hc (CLIP-V {lc['clip_v']:.3f} vs {hc['clip_v']:.3f}); the baseline tells "
            f"the true caption from the negative (I2T) in {100 * hc['i2t']:.1f}% of D_hc pairs and "
            f"{100 * lc['i2t']:.1f}% of D_lc pairs.")


def report(c: DemoConfig, result: dict, world_info: dict, datasets: dict, analysed: dict, gallery: Path,
           curves: Path, out: Path) -> str:
    from .analysis import LABELS, SCHEDULES, table1_markdown

    rel = lambda p: Path(p).resolve().relative_to(out.resolve()).as_posix()  # noqa: E731
    seconds = ", ".join(f"{k} {v:.0f} s" for k, v in result["seconds"].items())
    lines = [
        "# concrete-jungle demo: the method on a rendered toy world", "",
        f"{world_info['train']} training scenes, {world_info['test']} held-out test scenes (no training scene "
        f"among them); model `{c.model}` from random init, pretrained {c.pretrain_steps} steps with CLIP loss, "
        f"then fine-tuned {c.finetune_steps} steps at batch size {c.batch_size} per setting, seeds "
        f"{', '.join(map(str, c.seeds))}. Time of this invocation (a stage reused from an earlier run counts "
        f"~0 s): {seconds}.", "",
        "## Compositional test and retrieval (like the paper's Table 2)", "",
        "Accuracy (%) on the toy SugarCrepe subsets (items per subset: " +
        ", ".join(f"{k} {v}" for k, v in world_info["test_items"].items()) + ") and Recall@1 (%) on the test "
        "images; mean ± standard deviation over seeds.", "",
        table_markdown(result["table"]), "", "### What it shows", "",
        *[f"- {f}" for f in result["findings"]],
        "", "The control row is the D_hc + InfoNCE fine-tune with every hard negative masked out: "
        "the same anchors, steps and data order, so D_hc + InfoNCE minus the control is what the hard negatives "
        "add. The world is not tuned to favour any setting; these are the numbers this run produced. A run of "
        "this size cannot separate the losses; `concrete-jungle demo --study` is the experiment powered to "
        "(docs/toyworld.md).", "",
        "## The hard negatives (like the paper's Table 1)", "",
        f"Statistics of each ConcreteBatch under the CLIP baseline (first {c.analysis_pairs} pairs; "
        "`concrete-jungle analyze`; BERTScore and DINOScore need real models and are left out here). The paper's "
        "columns are COCO with SDXL-Turbo edits under PE-Core-L, shown for orientation only: the toy world has "
        "a few dozen words and 64-pixel renders, so its values (unique keywords above all) are not comparable; "
        "compare the toy datasets with each other.", "",
        table1_markdown(analysed["summaries"], analysed["modes"]), "",
        dataset_finding(analysed["summaries"]), "",
        f"Full analysis: [{rel(Path(analysed['dir']) / 'report.md')}]({rel(Path(analysed['dir']) / 'report.md')}); "
        f"gallery of D_hc and D_lc side by side: [{rel(gallery)}]({rel(gallery)}).", "",
        "## Training curves", "", f"![training curves]({rel(curves)})", "",
        "## Hard-negative gradient share against batch size (like the paper's Fig. 6)", "",
        f"![gradient share]({rel(Path(analysed['dir']) / 'gradient_share.png')})", "",
    ]
    curves = analysed["gradient_share"]
    schedules = [s for s in SCHEDULES if s in curves]
    lines += ["| N | " + " | ".join(LABELS[s] for s in schedules) + " |", "| --- |" + " --- |" * len(schedules)]
    lines += [f"| {n} | " + " | ".join(f"{curves[s][n]:.3f}" for s in schedules) + " |"
              for n in sorted(curves[schedules[0]], key=int)]
    return "\n".join(lines) + "\n"
