"""Whether the anchor's caption is still true of the negative picture, as the toy world's viewer reads it: the
decider of ``anchor_true_of_negative`` for toy-world datasets (docs/method.md §3, "Entailed negatives").

A negative picture of which the anchor's caption is still true is a false negative for the image side of a
contrastive loss (adding a colour or a thing to a picture leaves "a cube left of a ball" true). `ViewerScorer` is a
pair scorer (`plant.scorers`) with one score, ``viewer_anchor_true``: 1 when the viewer reads the anchor's caption
true of the negative picture, 0 when it reads it false, None when the stored picture is no scene it can name. The
plant's rule ``viewer_anchor_true>=1`` (``scoring.entailment``) makes that score each negative's decision.

The viewer reads scenes, not pixels, so each picture is matched to its scene first and checked against the stored
pixels, as `separation.pair_verdicts` does: the anchor's scene is the world's scene its caption describes; the
negative picture is the anchor's own picture (an editor that changed nothing), or the scene its caption describes
drawn on the anchor's layout (what `rewrite.ToyEditor` draws), rendered and stored as the plant stores pictures.
Any other picture (a repainted one) is unknown. The caption's light and mood are read too (`viewer.reads_true`
with ``scene_words``): a dim picture is not "bright".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..plant.scorers import ScorePair
from ..records import read_jsonl
from .rewrite import scenes_file
from .separation import stored
from .viewer import reads_true
from .world import CaptionError, Scene, parse_caption


def anchor_true_of(caption: str, negative: Scene) -> bool:
    """Whether the anchor's caption reads true of the negative picture's scene, its light and mood included."""
    return reads_true(caption, negative, scene_words=True)


class ViewerScorer:
    """``viewer_anchor_true`` of each pair of a toy-world plant (see the module); ``world``: the world's folder."""

    scores = ("viewer_anchor_true",)

    def __init__(self, world: str | Path, device: str = "cpu"):
        self.name, self.version = "toyworld-viewer", "viewer-1"  # no weights: the version names the reading
        self.layouts = {row["key"]: row["layout"] for row in read_jsonl(scenes_file(world, "--scorer-option"))}

    @classmethod
    def check_options(cls, world: str | Path, device: str = "cpu") -> None:
        scenes_file(world, "--scorer-option")

    def negative_scene(self, pair: ScorePair) -> Scene | None:
        """The scene the stored negative picture shows, or None where it is none the pair names."""
        try:
            anchor = parse_caption(pair.caption)
        except CaptionError:  # not a full caption: no scene of the world is named by it
            return None
        layout = self.layouts.get(anchor.key())
        if layout is None:
            return None
        anchor = parse_caption(pair.caption, layout)
        if pair.neg_image is None:  # a text-only negative: its picture is the anchor's
            return anchor
        pixels = np.asarray(pair.neg_image.convert("RGB"))
        if np.array_equal(pixels, np.asarray(pair.image.convert("RGB"))):
            return anchor
        try:
            drawn = parse_caption(pair.neg_caption, layout)
        except CaptionError:
            return None
        return drawn if np.array_equal(stored(drawn), pixels) else None

    def score(self, pairs: list[ScorePair]) -> dict[str, list[float | None]]:
        scenes = [self.negative_scene(p) for p in pairs]
        return {"viewer_anchor_true": [None if s is None else float(anchor_true_of(p.caption, s))
                                       for p, s in zip(pairs, scenes)]}
