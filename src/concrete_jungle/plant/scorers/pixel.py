"""``image_sim`` without a model: 1 minus the mean absolute difference of the two pictures' pixels (0 to 1).

1.0 is a negative picture identical to the anchor (an editor that ignored its prompt); a local edit stays close to
1, a picture repainted from scratch falls further. It reads pixels, not content: a shifted or recoloured background
costs as much as a changed object, so it is a check for editors that change nothing or everything, and DINO
(``dino``) is the one that measures what the paper's DINOScore does. It runs anywhere, with nothing to download.
"""

from __future__ import annotations

import numpy as np

from . import ScorePair


class PixelScorer:
    scores = ("image_sim",)

    def __init__(self, device: str = "cpu"):
        self.name, self.version = "pixel", "mean-abs-rgb-1"  # no weights: the version names the formula

    def score(self, pairs: list[ScorePair]) -> dict[str, list[float | None]]:
        def similarity(p: ScorePair) -> float:
            a = np.asarray(p.image.convert("RGB"), dtype=np.float32)
            b = np.asarray(p.neg_image.convert("RGB").resize(p.image.size), dtype=np.float32)
            return float(1.0 - np.abs(a - b).mean() / 255.0)

        return {"image_sim": [None if p.neg_image is None else similarity(p) for p in pairs]}
