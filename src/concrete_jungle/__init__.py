"""concrete-jungle: concreteness-aware hard negatives (ConcretePlant) and Cement loss for compositional CLIP.

The packages are the pipeline, in its order: `sources` (captions and images in), `plant` (ConcretePlant:
keywords, rewrite, edit), `concretebatch` (the dataset on disk, `concretebatch.export` to share it), `train`
(Slipform), `evaluation` (benchmarks), `analysis` (Table 1, Fig. 5-6, the gallery); `toyworld` and `experiments`
(the demo and the studies) and `cli` (the command) sit on top. The low helpers (`loss`, `models`, `files`,
`records`, ...) import no stage. docs/architecture.md is the map.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

__version__ = "0.2.0"

# Modules that moved into their stage's package in 0.2: the old names still import, with a DeprecationWarning,
# until 0.3 (docs/architecture.md, "Moved modules"). A package's old name covers its submodules too.
MOVED = {
    "stores": "sources.stores",
    "keywords": "plant.keywords",
    "keyword_job": "plant.keyword_job",
    "concreteness": "plant.concreteness",
    "captioners": "plant.captioners",
    "editors": "plant.editors",
    "sdxl": "plant.editors.sdxl",
    "train_config": "train.config",
    "train_data": "train.data",
    "pairs": "train.pairs",
    "image_cache": "train.image_cache",
    "analysis_figures": "analysis.figures",
    "gallery": "analysis.gallery",
    # and, before 0.3, the models' modules into models/ and the low file helpers into files/
    "checkpoints": "models.checkpoints",
    "registry": "models.pretrained",
    "wise_ft": "models.wise_ft",
    "token_features": "models.token_features",
    "text_encoding": "models.text_encoding",
    "tiny": "models.tiny",
    "loss_options": "loss.options",
    "plugins": "plant.plugins",
    "export": "concretebatch.export",
    "stats": "outcomes",
    "analysis.statistics": "analysis.dataset_statistics",
    "locks": "files.locks",
    "outputs": "files.outputs",
    "identity": "files.identity",
    "tar_archive": "files.tar_archive",
}


def moved_to(name: str) -> str | None:
    """The current name of a module imported by its name before 0.2, or None."""
    prefix = __name__ + "."
    if not name.startswith(prefix):
        return None
    rest = name[len(prefix):]
    for old, new in MOVED.items():
        if rest == old or rest.startswith(old + "."):
            return prefix + new + rest[len(old):]
    return None


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old module name as a module whose names are the new module's (the same objects)."""

    def find_spec(self, name, path=None, target=None):
        new = moved_to(name)
        spec = importlib.util.find_spec(new) if new else None
        if spec is None:
            return None
        return importlib.util.spec_from_loader(name, self, is_package=spec.submodule_search_locations is not None)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        new = moved_to(module.__name__)
        warnings.warn(f"{module.__name__} moved to {new}; the old name goes in 0.3", DeprecationWarning,
                      stacklevel=2)
        target = importlib.import_module(new)
        module.__dict__.update({k: v for k, v in vars(target).items() if not k.startswith("__")})
        module.__getattr__ = lambda attr: getattr(target, attr)
        module.__doc__ = target.__doc__


sys.meta_path.append(_MovedModules())
