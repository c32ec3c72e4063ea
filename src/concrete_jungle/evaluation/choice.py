"""Benchmarks of one picture and a few captions, one of them right (ARO, What'sUp, VALSE): the scores and the pick.

The pick is numpy's ``argmax`` over the captions' cosine similarities, as the official code of all three takes it:
the first of equal scores wins, so a tie counts for the caption listed first. Each benchmark lists its captions in
its official order, and so inherits its official tie rule (ARO's true caption is listed second: a tie is wrong;
What'sUp's first: a tie is right). Each caption's score is its own dot product with the picture, so two equal
captions score exactly alike (a matrix product may round them apart, depending on the BLAS kernel).
"""

from __future__ import annotations

import numpy as np
import torch

from .encoding import Crop, Encoder


def pick(pictures: torch.Tensor, texts: torch.Tensor) -> np.ndarray:
    """The rule: the index of the option each picture (a row of ``pictures``) scores highest among its options
    (``texts[i]``, one row an option), the first of equal scores."""
    scores = (pictures[:, None, :] * texts).sum(-1)
    return scores.numpy().argmax(axis=1)


def encoded(encoder: Encoder, images: list[Crop], options: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The pictures' features and their options' (items x options x features), in fp32."""
    k = len(options[0])
    return encoder.images(images), encoder.texts([t for row in options for t in row]).reshape(len(options), k, -1)


def picks(encoder: Encoder, images: list[Crop], options: list[list[str]]) -> np.ndarray:
    """The index of the caption each picture scores highest (first of equal scores), in fp32."""
    if not images:
        return np.zeros(0, dtype=np.int64)
    return pick(*encoded(encoder, images, options))


def subset_picks(encoder: Encoder, subsets: dict[str, tuple[list[Crop], list[list[str]]]]) -> dict:
    """Per subset (its pictures and each picture's options): ``picks``, as `picks` takes them, and ``blind``, the
    same rule with every picture replaced by the mean picture of all the subsets (`validity.blind`); ``pictures``:
    how many distinct pictures that mean averages."""
    from .validity import blind, mean_picture

    features = {s: encoded(encoder, images, options) for s, (images, options) in subsets.items() if images}
    names = [image for images, _ in subsets.values() for image in images]
    none = np.zeros(0, dtype=np.int64)  # a subset whose every item was skipped
    out: dict = {"pictures": len(set(names)), "picks": dict.fromkeys(subsets, none),
                 "blind": dict.fromkeys(subsets, none)}
    if features:
        mean = mean_picture(torch.cat([pictures for pictures, _ in features.values()]), names)
        for s, (pictures, texts) in features.items():
            out["picks"][s], out["blind"][s] = pick(pictures, texts), blind(pick, mean, len(texts), texts)
    return out
