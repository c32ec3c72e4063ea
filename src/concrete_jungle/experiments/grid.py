"""A data x loss grid: every dataset trained with every loss from one start, evaluated on the same items.

Is it the negatives or the loss? Each cell of the grid is one fine-tune: the same start model, training recipe
(a training config file and ``--set`` overrides), steps and seed, hence the same data order on a dataset; only
the cell's dataset (a row) and loss (a column) change. Every cell and the start are evaluated on the same
benchmark items, and each cell's gain over the start is given with its 95 % interval (the paired bootstrap over
images of `eval --compare`). A table (Markdown), a heat-map (PNG) and the numbers (JSON) are written.

Resumable cell by cell: a cell whose final checkpoint exists is reused, an interrupted one resumes from its latest
checkpoint, each only under the identity it was started with (`identity`: its training config, the digests of its
dataset and of the start model), recorded in the cell's ``identity.json``; a cell made otherwise is refused, naming
what differs. An evaluation is reused only where it is of the same model, benchmark files and rule
(`leaderboard.complete`), else it is done again. Layout: ``<out>/start/eval/``,
``<out>/cells/<dataset>--<loss>/{run,eval}/`` (`cell_name`), ``<out>/grid.{md,json}``, ``<out>/grid-<benchmark>.png``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..configs import from_dict, load_yaml, raise_problems
from ..outcomes import RESAMPLES
from ..records import atomic_write_json, atomic_write_text
from ..train.config import LossConfig, load_config
from ..train.start import start_identity


@dataclass(frozen=True)
class GridEval:
    benchmarks: list[str] = field(default_factory=lambda: ["sugarcrepe"])
    data_root: str | None = None  # the folder `concrete-jungle eval --data-root` reads
    toy_world: str | None = None  # or: a rendered toy world's held-out subsets (its test/sugarcrepe)
    metric: str | None = None  # the metric the table and heat-map show (default: each benchmark's headline)
    resamples: int = RESAMPLES
    batch_size: int = 256

    def __post_init__(self):
        problems = []
        if (self.data_root is None) == (self.toy_world is None):
            problems.append("eval: give one of eval.data_root (benchmark data) or eval.toy_world (a rendered toy "
                            "world)")
        if self.resamples < 1:
            problems.append(f"eval.resamples must be >= 1 (bootstrap resamples of each cell's interval), got "
                            f"{self.resamples}")
        if self.batch_size < 1:
            problems.append(f"eval.batch_size must be >= 1, got {self.batch_size}")
        if self.toy_world is not None and self.benchmarks != ["sugarcrepe"]:
            problems.append("eval.benchmarks: a toy world holds its sugarcrepe-style subsets only")
        raise_problems(problems)


@dataclass(frozen=True)
class GridConfig:
    out: str
    datasets: dict[str, str]  # row label -> ConcreteBatch folder
    losses: dict[str, LossConfig]  # column label -> the loss section of a training config
    eval: GridEval
    train: str | None = None  # a training config file: the recipe every cell shares (model, optim, batch, steps)
    set: list[str] = field(default_factory=list)  # overrides of it, as `train --set`

    def __post_init__(self):
        problems = [f"{what}: give at least one" for what, value in (("datasets", self.datasets),
                                                                     ("losses", self.losses)) if not value]
        problems += [f"{what} label {label!r}: use letters, digits, '_' and '-' (it names a folder)"
                     for what, labels in (("datasets", self.datasets), ("losses", self.losses)) for label in labels
                     if not label.replace("_", "").replace("-", "").isalnum()]
        problems += [f"set: {item!r} sets {item.split('=')[0]}, which each cell sets itself"
                     for item in self.set if item.split("=")[0].strip() in ("out", "data.concretebatch")
                     or item.split("=")[0].strip().startswith("loss")]
        raise_problems(problems)


def load_grid_config(path: str | Path, overrides: list[str] = ()) -> GridConfig:
    from ..configs import apply_overrides

    data = load_yaml(path)
    return from_dict(GridConfig, apply_overrides(data, list(overrides), GridConfig), where=str(path),
                     overrides=list(overrides))


def cell_name(dataset: str, loss: str) -> str:
    """``<dataset>--<loss>``, which tells its two labels apart where neither holds ``--`` and the ``--`` between
    them touches no other ``-``; else a digest of both labels is added (``a---b--<12 hex>``), so that two cells never
    share a folder (``a`` x ``-b`` and ``a-`` x ``b``)."""
    if "--" not in dataset and "--" not in loss and not dataset.endswith("-") and not loss.startswith("-"):
        return f"{dataset}--{loss}"
    digest = hashlib.sha256(json.dumps([dataset, loss]).encode()).hexdigest()[:12]
    return f"{dataset}--{loss}--{digest}"


def cell_config(grid: GridConfig, dataset: str, loss: str):
    """The training config of one cell: the shared recipe, the row's dataset, the column's loss."""
    base = load_config(grid.train, [*grid.set, f"out={Path(grid.out) / 'cells' / cell_name(dataset, loss) / 'run'}"])
    return replace(base, data=replace(base.data, concretebatch=[grid.datasets[dataset]]), loss=grid.losses[loss])


def eval_data(grid: GridConfig) -> dict:
    """The benchmarks' data, read and checked once for every cell."""
    from .. import evaluation
    from ..evaluation.benchmarks import sugarcrepe
    from ..evaluation.checks import files_digest

    if grid.eval.toy_world:
        world = Path(grid.eval.toy_world)
        data = sugarcrepe.load(world / "test" / "sugarcrepe", world / "images" / "test")
        data["benchmark_files_sha256"] = files_digest(data.pop("files"), world)
        return {"sugarcrepe": data}
    return {name: evaluation.load_data(name, Path(grid.eval.data_root), skip_missing=False)
            for name in grid.eval.benchmarks}


def finished_checkpoint(run: Path) -> Path | None:
    latest = run / "checkpoints" / "latest.json"
    if not latest.is_file():
        return None
    written = json.loads(latest.read_text())
    return run / "checkpoints" / written["name"] if written.get("reason") == "final" else None


def evaluate(clip, loaded: dict, out: Path, grid: GridConfig, device: str, log=print) -> dict[str, Path]:
    """Each benchmark's result file in ``out``: kept where an earlier start wrote it of this model, on these
    benchmark files and under this rule (`leaderboard.complete`), else evaluated (again)."""
    from .. import evaluation
    from ..evaluation.encoding import Encoder
    from ..evaluation.leaderboard import complete

    files = {name: out / f"{name}.json" for name in loaded}
    model = clip()
    todo = [name for name in loaded if name not in complete(out, model.hash, loaded)]
    stale = [name for name in todo if files[name].is_file()]
    if stale:
        log(f"grid: {out}: {', '.join(stale)} evaluated again (the result there is of other benchmark files, "
            "another rule or another model)")
    if todo:
        encoder = Encoder(model, device=device, batch_size=grid.eval.batch_size, progress=False)
        evaluation.run(encoder, todo, loaded, out=out, overwrite=True)
    return files


def cell_identity(config, start: dict) -> dict:
    """A cell's identity: its training config (where it is written aside), its datasets' digests, the start's."""
    from ..concretebatch import dataset_digest

    settings = {k: v for k, v in asdict(config).items() if k != "out"}
    return {"train": settings, "datasets_sha256": {d: dataset_digest(d) for d in config.data.concretebatch},
            "start": start}


def outputs(grid: GridConfig) -> list[str]:
    """The files a grid writes into its ``out`` (beside ``start/`` and ``cells/``)."""
    return ["grid.json", "grid.md", *(f"grid-{name}.png" for name in grid.eval.benchmarks)]


def run_grid(grid: GridConfig, progress: bool = True, log=print, overwrite: bool = False) -> dict:
    """Train and evaluate every cell (reusing finished ones of the same identity), then compare each with the start;
    the table. ``overwrite``: replace grid files in ``out`` that a grid did not write (`files.outputs.claim`)."""
    import torch

    from ..files.identity import RECORD, check_reusable, record
    from ..files.outputs import claim, written
    from ..models import load_model
    from ..train.loop import train

    out = Path(grid.out)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    configs = {(d, name): cell_config(grid, d, name) for d in grid.datasets for name in grid.losses}
    loaded = eval_data(grid)  # checked before any training
    first = next(iter(configs.values()))
    model = first.model
    start = start_identity(model)
    identities = {key: cell_identity(config, start) for key, config in configs.items()}
    for (dataset, loss), config in configs.items():  # every cell checked before any trains
        check_reusable(Path(config.out).parent, identities[(dataset, loss)], f"the grid's cell {dataset} x {loss}",
                       f"restore them, or run the grid into another out (or remove {Path(config.out).parent} to "
                       "train that cell again)")
    claim(out, outputs(grid), "grid", overwrite)
    start_files = evaluate(lambda: load_model(model.name, model.pretrained, model.checkpoint, device=device),
                           loaded, out / "start" / "eval", grid, device, log)
    cells = {}
    for (dataset, loss), config in configs.items():
        run = Path(config.out)
        checkpoint = finished_checkpoint(run)
        if not (run.parent / RECORD).is_file() and checkpoint is None:
            record(run.parent, identities[(dataset, loss)])  # before its first step: resumed only as started
        if checkpoint is None:
            log(f"grid: training {cell_name(dataset, loss)} ({config.steps} steps)")
            resume = "latest" if (run / "checkpoints" / "latest.json").is_file() else None
            train(config, resume=resume, progress=progress, label=cell_name(dataset, loss), overwrite=True)
            checkpoint = finished_checkpoint(run)
        elif (run.parent / RECORD).is_file():
            log(f"grid: reused {cell_name(dataset, loss)} (finished by an earlier start, of the same recipe, "
                "dataset and start)")
        else:
            log(f"grid: reused {cell_name(dataset, loss)} (finished by an earlier start that recorded no "
                f"{RECORD}: its recipe, dataset and start are not checked)")
        cells[(dataset, loss)] = evaluate(lambda: load_model(checkpoint=checkpoint, device=device), loaded,
                                          run.parent / "eval", grid, device, log)
    table = grid_table(grid, start_files, cells)
    write_outputs(grid, table, out)
    written(out, outputs(grid))
    return table


def headline(name: str, metric: str | None) -> str:
    from ..evaluation.names import BENCHMARKS

    return metric or BENCHMARKS[name].headlines[0]


def grid_table(grid: GridConfig, start_files: dict[str, Path], cells: dict) -> dict:
    """Per benchmark, per cell: the start's and the cell's headline metric, the gain in points and its interval."""
    from ..evaluation.report import compare

    table = {"datasets": list(grid.datasets), "losses": list(grid.losses), "benchmarks": {}}
    for name, start in start_files.items():
        metric = headline(name, grid.eval.metric)
        rows = {}
        for (dataset, loss), files in cells.items():
            comparison = compare([start, files[name]], resamples=grid.eval.resamples)
            row = next((r for r in comparison["rows"] if r["metric"] == metric), None)
            if row is None:
                raise ValueError(f"eval.metric {metric!r} is not a metric of {name}; its metrics: "
                                 f"{[r['metric'] for r in comparison['rows']]}")
            difference = row["differences"][0]
            rows[cell_name(dataset, loss)] = {"start": row["values"][0], "value": row["values"][1],
                                              "gain": difference["estimate"], "ci95": difference["ci95"]}
        table["benchmarks"][name] = {"metric": metric, "cells": rows}
    table["config"] = asdict(grid)
    return table


def grid_markdown(table: dict) -> str:
    """Per benchmark: rows datasets, columns losses, each cell the value and its gain over the start [95 %]."""
    lines = []
    for name, part in table["benchmarks"].items():
        cells = part["cells"]
        start = next(iter(cells.values()))["start"]
        lines += [f"### {name}: {part['metric']} (start: {100 * start:.2f})", "",
                  "| dataset | " + " | ".join(table["losses"]) + " |", "|" + " --- |" * (1 + len(table["losses"]))]
        for dataset in table["datasets"]:
            row = [cells[cell_name(dataset, loss)] for loss in table["losses"]]
            lines.append(f"| {dataset} | " + " | ".join(
                f"{100 * c['value']:.2f} ({c['gain']:+.2f} [{c['ci95'][0]:+.2f}, {c['ci95'][1]:+.2f}])"
                if c["ci95"] else f"{100 * c['value']:.2f}" for c in row) + " |")
        lines += ["", f"Each cell: {part['metric']} in %, then its gain over the start in points with the 95 % "
                  "interval (paired bootstrap over images, "
                  f"{table['config']['eval']['resamples']} resamples).", ""]
    return "\n".join(lines)


def write_outputs(grid: GridConfig, table: dict, out: Path) -> None:
    from ..analysis.figures import plot_grid

    atomic_write_json(out / "grid.json", table)
    atomic_write_text(out / "grid.md", grid_markdown(table))
    for name, part in table["benchmarks"].items():
        gains = [[part["cells"][cell_name(d, loss)]["gain"] for loss in table["losses"]] for d in table["datasets"]]
        intervals = [[part["cells"][cell_name(d, loss)]["ci95"] for loss in table["losses"]]
                     for d in table["datasets"]]
        plot_grid(gains, intervals, table["datasets"], table["losses"], out / f"grid-{name}.png",
                  f"{name}: gain in {part['metric']} over the start (points, 95 % interval)")


def toy_grid(out: str | Path, world: dict | None = None, pretrain_steps: int = 120, steps: int = 25,
             batch_size: int = 64, losses: tuple[str, ...] = ("infonce", "cement", "negclip"), seed: int = 0,
             progress: bool = True, log=print) -> GridConfig:
    """The grid of the toy world, made ready to run: the world rendered, the CLIP baseline pretrained (the start),
    D_hc planted, and a NegCLIP-style set of rule swaps imported from the same anchor captions; a `GridConfig` with
    those two rows and ``losses`` as columns, written to ``<out>/grid.yaml``."""
    import yaml

    from ..plant.imported import ImportConfig, run_import
    from ..toyworld.build import WorldConfig
    from .stages import StageConfig, Stages

    out = Path(out)
    stages = Stages(StageConfig(out=str(out / "stages"), world=WorldConfig(**(world or {"train": 800, "test": 300})),
                                pretrain_steps=pretrain_steps, batch_size=batch_size), progress=progress)
    log("grid: the toy world, its CLIP baseline and D_hc")
    rendered = stages.world()
    baseline = stages.baseline(rendered)
    d_hc = stages.plant(rendered, "hc")
    swaps = out / "stages" / "swaps"
    if not (swaps / "summary.json").is_file():
        log("grid: NegCLIP-style rule swaps of the same anchor captions")
        run_import(ImportConfig(format="coco-swaps", inputs=[str(rendered / "captions.jsonl")],
                                images=str(rendered / "images"), out=str(swaps), seed=seed), progress=progress)
    spec = {"out": str(out), "datasets": {"D_hc": str(d_hc), "swaps": str(swaps)},
            "losses": {name: {"name": name} for name in losses},
            "eval": {"toy_world": str(rendered), "resamples": 2000},
            "set": ["model.name=null", "model.pretrained=null", f"model.checkpoint={baseline}",
                    "model.precision=fp32", "data.workers=0", f"batch_size={batch_size}", f"steps={steps}",
                    "optim.lr=0.002", "optim.warmup=5", f"seed={seed}", "save_every=0"]}
    (out / "grid.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return load_grid_config(out / "grid.yaml")
