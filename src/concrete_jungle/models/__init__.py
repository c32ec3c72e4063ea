"""The models: open_clip loading and saving (`factory`), where a checkpoint of ours is (`checkpoints`), the field's
published checkpoints by name (`pretrained`), WiSE-FT (`wise_ft`), per-token features (`token_features`), captions
encoded at their length (`text_encoding`) and tiny models for tests (`tiny`).

The factory's names import from the package too (``from concrete_jungle.models import load_model``), on first use:
importing the package or its torch-free modules (`checkpoints`, `pretrained`) does not import torch.
"""

# the factory's public names, importable as concrete_jungle.models.<name> (tests/test_models.py checks the list)
FACTORY_NAMES = frozenset({
    "ARCHITECTURE_FILE", "CONFIG_DIR", "CONFIG_FILE", "HF_HUB", "HUB_WEIGHTS", "LINEAGE_DISTANCE", "NUMPY_GLOBALS",
    "WEIGHTS_FILE", "ClipModel", "ModelError", "cached_weights", "check_architecture", "check_downloadable",
    "check_model", "check_weights_file", "checkpoint_digest", "config_digest", "describe_model", "file_digest",
    "finite", "hub_files", "lineage", "load_hub", "load_model", "load_peer", "non_finite", "open_clip_weights",
    "read_weights", "reference_tags", "resolve_checkpoint", "save_checkpoint", "uses_quick_gelu",
})


def __getattr__(name: str):
    if name in FACTORY_NAMES:
        from . import factory

        return getattr(factory, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | FACTORY_NAMES)
