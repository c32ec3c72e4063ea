"""ConcretePlant: captions and images in, a ConcreteBatch out (paper §2.2, docs/method.md §1-4).

- `config`: `PlantConfig` (what defines the dataset) and `EngineConfig` (how the run is executed);
- `stages`: the stages every engine runs (`Plant`: keywords, rewrite, edit, write) and the part's bookkeeping;
- `local`, `ray`: the engines, each a module with ``extractor(config)`` and ``process(plant, batches, ...)``;
- `merge`: join the parts of a split run.

Engines depend on the stages, never the reverse: `run` hands the chosen engine to `Plant.run`.
"""

from __future__ import annotations

from .config import EngineConfig, PlantConfig, shard_from_environment
from .merge import merge_parts
from .stages import Plant

__all__ = ["EngineConfig", "Plant", "PlantConfig", "merge_parts", "run", "shard_from_environment"]


def run(config: PlantConfig, captioner=None, editor=None, progress: bool = True) -> dict:
    """Make (or resume) this part of the dataset with the engine ``config.engine.name``; its summary.

    ``captioner`` and ``editor``: loaded plugins to use instead of building them from the config (local engine
    only: Ray actors build their own)."""
    if config.engine.name == "ray":
        from . import ray as engine
    else:
        from . import local as engine
    return Plant(config, captioner, editor, progress=progress).run(engine)
