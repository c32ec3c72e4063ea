"""Shared machinery of every benchmark: encode each distinct picture and text once (the files are checked
before any model loads, `checks`).

Encoding is batched, shows a progress bar, and is cached on disk by (model hash, the exact list of distinct items:
a picture by its file's content, reading and box): a second evaluation of the same model reads its embeddings back
instead of recomputing them. Files of one content (and equal crops of them) share one feature, so they tie exactly
wherever they stand in a batch.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..models import ClipModel


class NonFiniteFeatures(ValueError):
    """A model whose features of some input are NaN or infinite: every comparison with them would be decided by
    the tie rule, silently."""


class Crop(NamedTuple):
    """An image converted to RGB first, then cut to ``box`` (x, y, width, height; the whole image when None): how
    ARO, What'sUp and VALSE read their pictures, and torchvision's loaders (clip_benchmark's zero-shot and retrieval
    datasets): ``Image.open(file).convert("RGB")``, so a 16-bit picture is clipped as Pillow converts it, not
    scaled."""

    path: Path
    box: tuple[float, float, float, float] | None = None


def rgb_picture(path: Path):
    """The picture as the official loaders read it, ``Image.open(path).convert("RGB")``, after the safety checks of
    `images.open_image` (a regular file, a sane size from the header)."""
    from PIL import Image

    from ..images import check_file, check_header, npy_frame

    if Path(path).suffix == ".npy":
        return npy_frame(path)
    check_file(path)
    with Image.open(path) as image:
        check_header(image, str(path))
        return image.convert("RGB")


class _Images(torch.utils.data.Dataset):
    def __init__(self, paths, preprocess):
        self.paths, self.preprocess = paths, preprocess

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from ..images import open_image

        item = self.paths[i]
        if isinstance(item, Crop):
            rgb = rgb_picture(item.path)
            if item.box is not None:
                x, y, w, h = item.box
                rgb = rgb.crop((x, y, x + w, y + h))
            return self.preprocess(rgb)
        # the image as opened, as SugarCrepe's and Winoground's reference code passes it: open_clip's transform
        # converts to RGB after resizing, and converting first gives other pixels for palette, RGBA and CMYK files
        with open_image(item) as im:
            return self.preprocess(im)


class Encoder:
    """Normalised image and text embeddings of a `ClipModel`, each unique item encoded once."""

    def __init__(self, clip: ClipModel, device: str = "cpu", batch_size: int = 64, num_workers: int = 0,
                 cache_dir: str | Path | None = None, progress: bool = True, trim_text: bool = True):
        self.clip = clip
        # texts at their length where exact (models/text_encoding.py); False: the full context
        self.trim_text = trim_text
        self.device = device
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.cache_dir = Path(cache_dir) / clip.hash if cache_dir else None
        self.progress = progress
        self.encoded = {"images": 0, "texts": 0}  # items actually run through the model (not cached)
        self._digests: dict[tuple, str] = {}  # (file, size, mtime) -> sha256 of its content
        # each content's feature, kept across calls until `forget_pictures`: a picture met again within a benchmark
        # (another file of it, another of its calls) gets the very same feature, not one of another batch position
        self._pictures: dict[str, torch.Tensor] = {}

    def _cached(self, kind: str, keys: list[str], compute) -> torch.Tensor:
        if self.cache_dir is None:
            return self.finite(kind, keys, compute())
        from safetensors.torch import load_file

        from ..records import atomic_write_safetensors

        digest = hashlib.sha1("\n".join(keys).encode()).hexdigest()[:20]
        path = self.cache_dir / f"{kind}-{digest}.safetensors"
        if path.exists():
            return self.finite(kind, keys, load_file(path)["embeddings"], f" (read from the cache {path})")
        out = self.finite(kind, keys, compute())
        atomic_write_safetensors(path, {"embeddings": out})
        return out

    def finite(self, kind: str, keys: list[str], features: torch.Tensor, where: str = "") -> torch.Tensor:
        """``features``, refused when a row is not finite, naming the first input it is of."""
        bad = (~torch.isfinite(features)).any(dim=-1).nonzero().flatten() if features.numel() else []
        if len(bad):
            first = keys[int(bad[0])]
            first = first if kind == "texts" else f"the picture of sha256 {first.split('|')[0][:12]}"
            raise NonFiniteFeatures(
                f"the model's {kind[:-1]} features are NaN or infinite for {len(bad)} of {len(keys)} inputs "
                f"(first: {first!r}){where}; its weights or its precision make them so: evaluate in fp32 "
                "(--precision fp32) or check the checkpoint")
        return features

    def forget_pictures(self) -> None:
        """Drop the features kept for exact ties (`images`): once a benchmark is scored, its ties are decided, and
        keeping every picture's feature for the next would grow with the run (the disk cache keeps them)."""
        self._pictures.clear()

    def _content(self, item: Path | Crop) -> str:
        """What an image item shows, as the model reads it: its file's content (sha256), how it is read (as opened,
        or converted to RGB first) and its box; two files of one content read alike share one key."""
        path = item.path if isinstance(item, Crop) else item
        st = Path(path).stat()
        stamp = (str(path), st.st_size, st.st_mtime_ns)
        if stamp not in self._digests:  # each file hashed once per encoder
            self._digests[stamp] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        reading = f"rgb|{item.box}" if isinstance(item, Crop) else "opened"
        return f"{self._digests[stamp]}|{reading}"

    @torch.no_grad()
    def images(self, paths: list[Path | Crop]) -> torch.Tensor:
        """One row per path or `Crop` (in order); each distinct content (file content, reading and box) is encoded
        once, so files of one picture get one feature and tie exactly, whatever their place in a batch (a feature
        may differ in its last bits with its batch position)."""
        keys = [self._content(p) for p in paths]
        first = dict(zip(reversed(keys), reversed(paths)))  # one item of each content, its first in the list
        unique = [k for k in dict.fromkeys(keys) if k not in self._pictures]  # not encoded by an earlier call

        def compute():
            from tqdm import tqdm

            loader = torch.utils.data.DataLoader(_Images([first[k] for k in unique], self.clip.preprocess),
                                                 batch_size=self.batch_size, num_workers=self.num_workers)
            # a model loaded in bf16 or fp16 (--precision) takes its pictures in the dtype of its weights
            dtype = max(self.clip.model.visual.parameters(), key=lambda t: t.numel()).dtype
            rows = []
            for batch in tqdm(loader, desc="images", unit="batch", disable=not self.progress, leave=False):
                pixels = batch.to(self.device, dtype=dtype)
                rows.append(F.normalize(self.clip.model.encode_image(pixels).float(), dim=-1).cpu())
            self.encoded["images"] += len(unique)
            return torch.cat(rows) if rows else torch.empty(0)

        if unique:
            self._pictures.update(zip(unique, self._cached("images", unique, compute)))
        if not keys:
            return torch.empty(0)
        return torch.stack([self._pictures[k] for k in keys])

    @torch.no_grad()
    def texts(self, texts: list[str]) -> torch.Tensor:
        """One row per text (in order); each distinct text is encoded once. Texts are batched by length, so that a
        batch cut to its longest caption (`text_encoding.encode_text`) carries little padding."""
        unique = list(dict.fromkeys(texts))

        def compute():
            from tqdm import tqdm

            from ..models.text_encoding import encode_text, pooled_positions, trimmable

            model = self.clip.model
            tokens = self.clip.tokenizer(unique)
            order = torch.arange(len(unique))
            if self.trim_text and trimmable(model) and len(unique):
                order = torch.argsort(pooled_positions(model, tokens), stable=True)
            rows = torch.empty(0)
            for i in tqdm(range(0, len(unique), self.batch_size), desc="texts", unit="batch",
                          disable=not self.progress, leave=False):
                at = order[i: i + self.batch_size]
                out = F.normalize(encode_text(model, tokens[at].to(self.device), trim=self.trim_text).float(), dim=-1)
                if not rows.numel():
                    rows = torch.empty(len(unique), out.shape[1])
                rows[at] = out.cpu()  # back in input order
            self.encoded["texts"] += len(unique)
            return rows

        table = self._cached("texts", unique, compute)
        index = {t: i for i, t in enumerate(unique)}
        return table[[index[t] for t in texts]]
