"""Slipform: fine-tuning an open_clip model on ConcreteBatch (`loop`), its typed config (`config`), its batches
(`data`: ConcreteBatch records and plain pairs from `pairs`, or the preprocessed `image_cache`)."""


def __getattr__(name: str):
    # `from concrete_jungle.train import train` as before the package; imported on use, so checking a config
    # (`train.config`) does not import torch
    if name == "train":
        from .loop import train

        return train
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
