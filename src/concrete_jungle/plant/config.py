"""A plant run's settings: what defines the dataset (`PlantConfig`) and how it is executed (`EngineConfig`)."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..configs import ConfigError
from ..errors import PlantError
from .keywords import SamplerConfig
from .scoring import Gate, ScoringConfig, parse_gates


@dataclass(frozen=True)
class EngineConfig:
    """How a plant run is executed; it changes no record. ``local``: this process (a thread rewrites while the
    process edits). ``ray``: Ray Data across a cluster: keyword candidates in ``keyword_actors`` spaCy actors,
    rewrites in ``rewrite_actors`` captioner actors, edits in ``edit_actors`` editor actors of ``edit_gpus`` GPUs
    each, this process writing the shards (docs/scale.md)."""

    name: str = "local"
    address: str | None = None  # a Ray cluster (auto, ray://host:10001); none: a local one
    keyword_actors: int = 1
    rewrite_actors: int = 1
    edit_actors: int = 1
    edit_gpus: float = 0.0
    # CPUs Ray reserves per actor: a rewrite actor mostly waits on its LLM server; an edit actor without a GPU
    # computes on its CPUs (its torch uses that many threads)
    rewrite_cpus: float = 0.25
    edit_cpus: float = 1.0

    def __post_init__(self):
        problems = [f"engine.{k} must be >= 1, got {getattr(self, k)}"
                    for k in ("keyword_actors", "rewrite_actors", "edit_actors") if getattr(self, k) < 1]
        if self.name not in ("local", "ray"):
            problems.append(f"engine.name {self.name!r} is not local or ray")
        problems += [f"engine.{k} must be >= 0, got {getattr(self, k)}"
                     for k in ("edit_gpus", "rewrite_cpus", "edit_cpus") if getattr(self, k) < 0]
        if problems:
            raise ConfigError(*problems)


@dataclass(frozen=True)
class PlantConfig:
    captions: list[str]
    images: str
    out: str
    mode: str = "hc"
    format: str | None = None
    split: str | None = None
    columns: dict = field(default_factory=dict)  # a store's caption, image and id columns (sources.read_samples)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    scale: str = "brysbaert"
    spacy_model: str | None = None
    captioner: str = "rules"
    captioner_options: dict = field(default_factory=dict)
    editor: str = "none"
    editor_options: dict = field(default_factory=dict)
    max_attempts: int = 3
    batch_size: int = 16
    samples_per_shard: int = 1000
    num_shards: int = 1
    shard_index: int = 0
    engine: EngineConfig = field(default_factory=EngineConfig)
    limit: int | None = None  # only the first N samples of the input: to try settings on a few
    scoring: ScoringConfig | None = None  # scores on every pair (None: none are computed)
    gates: list[str] = field(default_factory=list)  # thresholds on the scores, e.g. agreement>=0.0 (no setting of
    # the dataset: a re-plant with other gates decides again from the stored scores)

    def __post_init__(self):
        if self.sampler.mode != self.mode:
            object.__setattr__(self, "sampler", SamplerConfig(**{**asdict(self.sampler), "mode": self.mode}))
        if not 0 <= self.shard_index < self.num_shards:
            raise ConfigError(f"shard index {self.shard_index} is not in [0, {self.num_shards})")
        for name in ("max_attempts", "batch_size", "samples_per_shard", "num_shards"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"limit must be >= 1 (or null: every sample), got {self.limit}")
        gates = parse_gates(self.gates)
        if gates and self.scoring is None:
            raise ConfigError(f"gate {gates[0]} needs scores: turn scoring on (--score, or scoring: {{}} in the "
                              "config)")

    @property
    def parsed_gates(self) -> list[Gate]:
        return parse_gates(self.gates)

    def check_inputs(self) -> None:
        """The caption files and image folder exist and the captioner and editor import as classes with their
        methods: checked before any file is written or any model loads."""
        from ..sources import expand_paths
        from .plugins import load_class

        expand_paths(self.captions)
        out = Path(self.out)
        if (out / "checkpoints").is_dir() or (out / "metrics.jsonl").is_file():
            raise PlantError(f"--out {out} holds a training run (checkpoints/, metrics.jsonl); write the dataset "
                             "to a folder of its own")
        check_dataset_folder(out)
        if not Path(self.images).is_dir():
            raise PlantError(f"image directory not found: {self.images}; pass the folder the captions' image "
                             "paths are relative to with --images")
        load_class("captioner", self.captioner)  # imported and checked, not built: that may load a model
        load_class("editor", self.editor)
        self.check_images()

    def check_plugins(self, captioner: bool = True, editor: bool = True) -> list[str]:
        """The captioner and editor take their options and can work with them (a server that answers, weights
        that can be had; `plugins.check`), without loading a model: checked before the keyword stage writes
        anything. ``captioner`` or ``editor`` False: one handed in already built, not checked. Returns the notes
        they give (what their options will cost)."""
        from .plugins import check
        from .scoring import check_scoring

        notes = [check("captioner", self.captioner, self.captioner_options) if captioner else None,
                 check("editor", self.editor, self.editor_options) if editor else None]
        return [note for note in notes if note] + check_scoring(self.scoring, self.parsed_gates)

    def check_images(self, probe: int = 20) -> None:
        """A wrong --images is an error before any file is written or model loaded, not a run of rejects: some
        of the first ``probe`` images the captions name must be there."""
        import itertools

        from ..sources import UnsafePathError, join_under, read_samples
        from ..sources.stores import SEP

        def exists(name: str) -> bool:  # a file, or the store a locator names (stores.py)
            try:
                return join_under(self.images, name.partition(SEP)[0]).exists()
            except UnsafePathError:
                return False

        samples = itertools.islice(read_samples(self.captions, fmt=self.format, split=self.split,
                                                columns=self.columns), self.limit)
        named = list(itertools.islice((s.image for s in samples if s.error is None and s.image), probe))
        if named and not any(map(exists, named)):
            raise PlantError(f"none of the first {len(named)} images exist under {self.images} (named by the "
                             f"captions, e.g. {Path(self.images) / named[0]}); check --images")

    @property
    def part(self) -> str:
        return f"{self.shard_index:05d}-of-{self.num_shards:05d}"

    def dataset_settings(self) -> dict:
        """What defines the dataset (every part of a run must agree); run-time knobs left out."""
        d = asdict(self)
        for runtime in ("out", "shard_index", "batch_size", "spacy_model", "engine", "gates"):
            d.pop(runtime)
        if d["scoring"] is None:  # as datasets made before scores existed hold it: not at all
            d.pop("scoring")
        elif d["scoring"]["entailment"] is None:  # as scored datasets made before entailment rules hold it
            d["scoring"].pop("entailment")
        return d


# what `plant` writes into its --out (and `cache` into a dataset: cache/); hidden files are locks and temporary files
PART = r"-\d{5,}-of-\d{5,}"
DATASET_ENTRY = re.compile(rf"shard-\d{{6,}}\.tar|(manifest|rejects)({PART})?\.jsonl|summary({PART})?\.(json|md)"
                           rf"|config\.yaml|keywords{PART}(\.jsonl|\.config\.json|\.summary\.json)|manifests|cache"
                           r"|gated")  # gated/: the records of pairs a gate rejected (gates.py)
STARTED = re.compile(rf"keywords{PART}\.config\.json")  # the first file a run writes


def check_dataset_folder(out: Path) -> None:
    """``out`` is new, empty or a dataset `plant` made (which is resumed): a folder holding anything else is refused
    naming the file, which is kept. A file of one of plant's names (summary.json, config.yaml, ...) is plant's only
    beside the keyword settings plant writes first: in any other folder it is someone else's."""
    if not out.is_dir():
        return
    names = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    stray = next((n for n in names if not DATASET_ENTRY.fullmatch(n)), None)
    if stray is None and names and not any(map(STARTED.fullmatch, names)):
        stray = names[0]
    if stray is not None:
        raise PlantError(f"--out {out} holds {out / stray}, which is not a file of a dataset `plant` made; it is "
                         "kept: write the dataset to a new or empty folder (a folder plant made is resumed)")


def hoist_mode(data: dict, where: str) -> dict:
    """A config's settings (a file and its --set) with the keyword mode at the top level, where `PlantConfig` reads
    it: given as ``sampler.mode`` it moves there. Given both ways it is an error naming both keys: one would silently
    win, and the other's dataset be made."""
    sampler = data.get("sampler")
    if not (isinstance(sampler, dict) and "mode" in sampler):
        return data
    if "mode" in data:
        raise ConfigError(f"{where}: the mode is given twice, as mode ({data['mode']}) and sampler.mode "
                          f"({sampler['mode']}); give it once, as mode")
    return {**data, "mode": sampler["mode"], "sampler": {k: v for k, v in sampler.items() if k != "mode"}}


def shard_from_environment() -> tuple[int, int]:
    """(index, count) from torchrun (RANK/WORLD_SIZE) or a SLURM array; (0, 1) otherwise."""
    env = os.environ
    if "WORLD_SIZE" in env and "RANK" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"])
    if "SLURM_ARRAY_TASK_ID" in env and "SLURM_ARRAY_TASK_COUNT" in env:
        return int(env["SLURM_ARRAY_TASK_ID"]) - int(env.get("SLURM_ARRAY_TASK_MIN", 0)), int(
            env["SLURM_ARRAY_TASK_COUNT"])
    return 0, 1


