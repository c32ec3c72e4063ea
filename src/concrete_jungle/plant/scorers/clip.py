"""``agreement``: whether each picture matches its own caption better than the other one, under a CLIP model.

With s the cosine of a picture's and a caption's embeddings, (v, t) the anchor and (v', t') the negative:

- ``agreement_negative`` = s(v', t') - s(v', t): the negative picture shows its own caption more than the anchor's
  (below 0: the editor ignored the prompt, or the rewrite is still true of the edited picture);
- ``agreement_anchor`` = s(v, t) - s(v, t'): the anchor picture shows its caption more than the negative's (below
  0: the rewrite is true of the anchor, a synonym say);
- ``agreement`` = the smaller of the two (``agreement_anchor`` alone for a text-only negative, which has no v').
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import ScorePair


class OpenClipScorer:
    scores = ("agreement", "agreement_anchor", "agreement_negative")

    def __init__(self, model: str = "ViT-L-14", pretrained: str = "openai", seed: int = 0, batch_size: int = 64,
                 device: str = "cpu"):
        from ...models import load_model

        self.clip = load_model(model, pretrained, device=device, seed=seed)
        self.device, self.batch_size = device, batch_size
        self.name = f"open_clip:{model}:{pretrained if pretrained not in (None, '', 'none') else f'none-seed{seed}'}"
        self.version = f"sha1:{self.clip.hash}"  # `models.ClipModel.hash`: the weights' source and the config

    @classmethod
    def check_options(cls, model: str = "ViT-L-14", pretrained: str = "openai", **_) -> None:
        """The model is one open_clip knows and its weights are cached or can be downloaded; nothing is loaded."""
        from pathlib import Path

        from ...configs import open_clip_model_names
        from ...errors import PlantError
        from ...models.pretrained import check_downloadable

        if model not in open_clip_model_names():
            raise PlantError(f"scorer open_clip: {model!r} is not an open_clip model name (open_clip.list_models())")
        if pretrained not in (None, "", "none") and not Path(pretrained).is_file():
            check_downloadable(model, pretrained)

    @torch.no_grad()
    def _images(self, images: list) -> torch.Tensor:
        out = []
        for i in range(0, len(images), self.batch_size):
            batch = torch.stack([self.clip.preprocess(im) for im in images[i: i + self.batch_size]]).to(self.device)
            out.append(F.normalize(self.clip.model.encode_image(batch).float(), dim=-1).cpu())
        return torch.cat(out)

    @torch.no_grad()
    def _texts(self, texts: list[str]) -> torch.Tensor:
        from ...models.text_encoding import encode_text

        out = []
        for i in range(0, len(texts), self.batch_size):
            tokens = self.clip.tokenizer(texts[i: i + self.batch_size]).to(self.device)
            out.append(F.normalize(encode_text(self.clip.model, tokens).float(), dim=-1).cpu())
        return torch.cat(out)

    def score(self, pairs: list[ScorePair]) -> dict[str, list[float | None]]:
        v, t, t2 = self._images([p.image for p in pairs]), self._texts([p.caption for p in pairs]), \
            self._texts([p.neg_caption for p in pairs])
        pictured = [i for i, p in enumerate(pairs) if p.neg_image is not None]
        v2 = dict(zip(pictured, self._images([pairs[i].neg_image for i in pictured]))) if pictured else {}
        anchor = ((v * t).sum(-1) - (v * t2).sum(-1)).tolist()
        negative = [float(v2[i] @ t2[i] - v2[i] @ t[i]) if i in v2 else None for i in range(len(pairs))]
        return {"agreement": [a if n is None else min(a, n) for a, n in zip(anchor, negative)],
                "agreement_anchor": anchor, "agreement_negative": negative}


class ClipSimilarityScorer(OpenClipScorer):
    """Table 1's CLIP similarities, per pair: ``clip_text_sim`` = cos(t, t') of the captions' embeddings and
    ``clip_image_sim`` = cos(v, v') of the pictures' (None for a text-only negative), under the same model options
    as ``open_clip``."""

    scores = ("clip_text_sim", "clip_image_sim")

    def score(self, pairs: list[ScorePair]) -> dict[str, list[float | None]]:
        t, t2 = self._texts([p.caption for p in pairs]), self._texts([p.neg_caption for p in pairs])
        pictured = [i for i, p in enumerate(pairs) if p.neg_image is not None]
        image_sim: list[float | None] = [None] * len(pairs)
        if pictured:
            v = self._images([pairs[i].image for i in pictured])
            v2 = self._images([pairs[i].neg_image for i in pictured])
            for i, value in zip(pictured, (v * v2).sum(-1).tolist()):
                image_sim[i] = value
        return {"clip_text_sim": (t * t2).sum(-1).tolist(), "clip_image_sim": image_sim}
