"""The Ray engine: ConcretePlant's stages on Ray Data, spread over a cluster (docs/scale.md).

Nothing here re-implements a stage; the actors call the plant's own functions:

- input: the files of a WebDataset, Parquet or saved-dataset input are read by Ray Data tasks in parallel, each
  file by `sources.read_store_file` (the local engine's readers: the same samples, skips and reasons), and come
  back to the driver in order: text and image locators only, never the images. Not `ray.data.read_webdataset` or
  `read_parquet`: those stop the whole job at a damaged tar or row group, and know neither img2dataset's failed
  downloads nor the id rule for keys repeated across shards, so their records would not be the local engine's;
- keyword candidates: `keyword_job.candidates_of` in ``keyword_actors`` actors that keep a spaCy pipeline loaded; the
  sampling stays in the driver, in input order, because the quota counts depend on the order;
- rewrite: `Plant.rewrite` (the captioner, the validation, the retries) in ``rewrite_actors`` actors, each with its
  own captioner (an OpenAI-compatible client, or an LLM in process on its GPU);
- edit: `Plant.edit` (image loading, the editor, the record) in ``edit_actors`` actors of ``edit_gpus`` GPUs each;
- writing: `Plant.write_results` in the driver, the only writer of shards and manifests.

A Ray item is one batch of the local engine, in the same order, so every batch holds the same samples, every
edit sees the same batch, and the shards hold the same records in the same order: the dataset is the local
engine's, byte for byte, but for the manifest rows' ``engine``. Ray retries a task whose actor died (restarting
the actor); the driver, killed, leaves only committed shards, and the same command resumes from them. Data
moves between the stages as JSON and, for the finished records with their JPEG bytes, as pickles made and read
within this job (never a file).
"""

from __future__ import annotations

import json
import pickle
from dataclasses import asdict

from .config import PlantConfig
from .stages import Plant


def start(address: str | None) -> None:
    import ray

    if not ray.is_initialized():
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                 runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}})
    # the driver reads results in input order: every engine writes the same shards
    ray.data.DataContext.get_current().execution_options.preserve_order = True


def _dataset(rows: list[dict]):
    import ray

    return ray.data.from_items(rows, override_num_blocks=max(1, len(rows)))


def _actors(size: int):
    """A pool of ``size`` actors; Ray Data restarts an actor that dies and retries its batch, without limit.

    Each actor takes one call at a time (Ray's default actor concurrency, 1), on its main thread: by default
    Ray Data runs the call on a second thread of the actor, where torch's CPU kernels ran 1.3x slower (a tiny
    SDXL batch in 0.68 s instead of 0.54 s, 1.45 of 2 cores busy instead of 1.9; docs/benchmarks.md).
    ``enable_true_multi_threading`` (Ray >= 2.53) turns that thread off."""
    import ray

    return ray.data.ActorPoolStrategy(size=size, enable_true_multi_threading=True)


class _Candidates:
    """An actor that keeps the spaCy pipeline and ratings loaded and extracts candidates of a batch of texts."""

    def __init__(self, spacy_model, scale):
        from ..nlp import load_spacy
        from .concreteness import load_ratings

        self.nlp, self.ratings = load_spacy(spacy_model), load_ratings(scale)

    def __call__(self, batch):
        from .keyword_job import candidates_of

        texts = json.loads(batch["texts"][0])
        found = candidates_of(texts, self.nlp, self.ratings)
        return {"candidates": [json.dumps([[c.to_dict() for c in cands] for cands in found])]}


def _read_store_file(row: dict) -> dict:
    from ..sources import read_store_file

    return {"samples": pickle.dumps(read_store_file(pickle.loads(row["task"])))}


class RayCandidates:
    """`keyword_job.run_keywords`'s extractor on Ray: candidates of the batches, in order."""

    def __init__(self, spacy_model: str | None, scale: str, actors: int, address: str | None = None):
        self.spacy_model, self.scale, self.actors, self.address = spacy_model, scale, actors, address

    def __enter__(self):
        start(self.address)
        return self

    def __exit__(self, *exc):
        return None

    def read_files(self, tasks: list[tuple]):
        """`sources.read_store_file` of each task in a Ray Data task of its own, the results in order."""
        start(self.address)
        ds = _dataset([{"task": pickle.dumps(t)} for t in tasks]).map(_read_store_file, num_cpus=1)
        for row in ds.iter_rows():
            yield pickle.loads(row["samples"])

    def map(self, batches: list[list[str]]):
        from .keywords import Candidate

        if not batches:
            return
        ds = _dataset([{"texts": json.dumps(texts)} for texts in batches]).map_batches(
            _Candidates, fn_constructor_kwargs={"spacy_model": self.spacy_model, "scale": self.scale},
            batch_size=1, compute=_actors(self.actors), num_cpus=1)
        for row in ds.iter_rows():
            yield [[Candidate(**c) for c in cands] for cands in json.loads(row["candidates"])]


def _plant(config: dict):
    from ..configs import from_dict

    return Plant(from_dict(PlantConfig, config), progress=False)


class _Rewriter:
    def __init__(self, config: dict):
        from .captioners import make_captioner

        self.plant = _plant(config)
        c = self.plant.config
        self.captioner = make_captioner(c.captioner, **c.captioner_options)

    def __call__(self, batch):
        records = json.loads(batch["batch"][0])
        rewritten = self.plant.rewrite(self.captioner, records)
        return batch | {"rewritten": [json.dumps(rewritten)], "captioner": [self.captioner.name]}


class _Editor:
    def __init__(self, config: dict):
        import math

        import torch

        from .editors import make_editor

        self.plant = _plant(config)
        c = self.plant.config
        if not c.engine.edit_gpus:  # Ray starts a worker with one thread: give the editor the CPUs it reserved
            torch.set_num_threads(max(1, math.ceil(c.engine.edit_cpus)))
        self.editor = make_editor(c.editor, **c.editor_options)
        self.scorers = None
        if c.scoring is not None:  # on the editor's device: the GPU this actor holds
            from .scoring import PairScorers, scoring_device

            self.scorers = PairScorers(c.scoring, scoring_device(c.scoring, self.editor))

    def __call__(self, batch):
        records, rewritten = json.loads(batch["batch"][0]), json.loads(batch["rewritten"][0])
        edited = self.plant.edit(int(batch["shard"][0]), records, [tuple(r) for r in rewritten], self.editor,
                                 str(batch["captioner"][0]), self.scorers)
        return {"shard": batch["shard"], "last": batch["last"], "edited": [pickle.dumps(edited)],
                "captioner": batch["captioner"], "editor": [self.editor.name]}


def extractor(config: PlantConfig) -> RayCandidates:
    """Keyword candidates in ``engine.keyword_actors`` spaCy actors."""
    return RayCandidates(config.spacy_model, config.scale, config.engine.keyword_actors, config.engine.address)


def process(plant: Plant, batches: list, n_done: int, total: int) -> tuple[str, str]:
    """The local engine's `process` on Ray: the batches through the actors, written by this process in order."""
    from tqdm import tqdm

    c = plant.config
    start(c.engine.address)
    names: list[str] = []
    if not batches:  # everything was committed by an earlier run (its names are in its config), or rejected
        import yaml

        if (plant.out / "config.yaml").is_file():
            config = yaml.safe_load((plant.out / "config.yaml").read_text())
            return config["captioner_id"], config["editor_id"]
        plant.write_config(c.captioner, c.editor)
        return c.captioner, c.editor
    config = json.loads(json.dumps(asdict(c)))
    ds = _dataset([{"shard": s, "last": last, "batch": json.dumps(batch)} for s, batch, last in batches])
    ds = ds.map_batches(_Rewriter, fn_constructor_kwargs={"config": config}, batch_size=1,
                        compute=_actors(c.engine.rewrite_actors), num_cpus=c.engine.rewrite_cpus)
    ds = ds.map_batches(_Editor, fn_constructor_kwargs={"config": config}, batch_size=1,
                        compute=_actors(c.engine.edit_actors), num_cpus=c.engine.edit_cpus,
                        num_gpus=c.engine.edit_gpus)

    def results():
        for row in ds.iter_rows():
            if not names:  # the first result names the captioner and editor: the dataset's config
                names.extend([str(row["captioner"]), str(row["editor"])])
                plant.write_config(*names)
            yield int(row["shard"]), bool(row["last"]), pickle.loads(row["edited"])

    bar = tqdm(total=total, initial=n_done, desc=f"plant {c.mode} {c.part} (ray)", unit="sample",
               disable=not plant.progress, dynamic_ncols=True)
    try:
        plant.write_results(results(), bar)
    finally:
        bar.close()
    return names[0], names[1]
