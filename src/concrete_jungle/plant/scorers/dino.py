"""``image_sim``: the DINOv2 cosine of the anchor and negative pictures (the paper's DINOScore), with any
`transformers` DINOv2 (name or path); `analyze` computes Table 1's DINOScore with the same class."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import ScorePair, weights_version


class DinoScorer:
    scores = ("image_sim",)

    def __init__(self, model: str = "facebook/dinov2-base", device: str = "cpu"):
        from transformers import AutoImageProcessor, AutoModel

        self.name = f"dino:{model}"
        self.processor = AutoImageProcessor.from_pretrained(model)
        self.model = AutoModel.from_pretrained(model).to(device).eval()
        self.device = device
        self.version = weights_version(model, self.model)

    @classmethod
    def check_options(cls, model: str = "facebook/dinov2-base", **_) -> None:
        from ..hub import check_model_available

        check_model_available(model, "--scorer-option dino.model=", "config.json")

    @torch.no_grad()
    def similarity(self, a: list, b: list) -> list[float]:
        def embed(images):
            inputs = self.processor(images=images, return_tensors="pt").to(self.device)
            return F.normalize(self.model(**inputs).pooler_output.float(), dim=-1)

        return (embed(a) * embed(b)).sum(-1).cpu().tolist()

    def score(self, pairs: list[ScorePair]) -> dict[str, list[float | None]]:
        pictured = [p for p in pairs if p.neg_image is not None]
        values = iter(self.similarity([p.image for p in pictured], [p.neg_image for p in pictured])
                      if pictured else [])
        return {"image_sim": [next(values) if p.neg_image is not None else None for p in pairs]}
