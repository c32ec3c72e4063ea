"""Benchmarks of one picture and a few captions, one of them right (ARO, What'sUp, VALSE): the scores and the pick.

The pick is numpy's ``argmax`` over the captions' cosine similarities, as the official code of all three takes it:
the first of equal scores wins, so a tie counts for the caption listed first. Each benchmark lists its captions in
its official order, and so inherits its official tie rule (ARO's true caption is listed second: a tie is wrong;
What'sUp's first: a tie is right). Each caption's score is its own dot product with the picture, so two equal
captions score exactly alike (a matrix product may round them apart, depending on the BLAS kernel).
"""

from __future__ import annotations

import numpy as np

from .encoding import Crop, Encoder


def picks(encoder: Encoder, images: list[Crop], options: list[list[str]]) -> np.ndarray:
    """The index of the caption each picture scores highest (first of equal scores), in fp32."""
    if not images:
        return np.zeros(0, dtype=np.int64)
    pictures = encoder.images(images)
    k = len(options[0])
    texts = encoder.texts([t for row in options for t in row]).reshape(len(options), k, -1)
    scores = (pictures[:, None, :] * texts).sum(-1)
    return scores.numpy().argmax(axis=1)
