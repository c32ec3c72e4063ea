"""A ConcreteBatch (or a store of plain pairs) preprocessed once for a model: uint8 pixels at its input size and
tokens, read with no decoding.

Decoding and resizing JPEGs costs 5–11 ms a picture on a CPU core, so a GPU step that wants ~15,000 pictures a
second (ViT-B-32 at N = 1024, two pictures per pair) would wait on 16 cores. The cache moves that work out of
training: `build_cache` applies the model's geometric transform (open_clip's resize and centre crop, through
PIL, exactly as training would) once and stores the result as uint8 in a memory-mapped file; a step then
gathers rows and normalises them where they are used, on the GPU. uint8 is a quarter of float32 on the bus.

Layout: ``<dataset>/cache/<key>/`` holds ``images.u8`` (n x (1 + P) x 3 x H x W uint8: the anchor, then a slot per
negative picture, P = K, or none for pairs and for sets whose negatives are captions only), ``tokens.i32``
(n x (1 + K) x context), ``values.f32`` (n x K concreteness values), ``masks.u8`` (n x K x 3: whether each
negative's caption and picture exist, and whether its record says the anchor's caption is true of that picture;
a missing one's slots hold zeros), ``positives.i32`` (n x (P - 1) x context: the tokens of the picture's other
positive captions, zeros where a record has fewer: a caption's tokens never are, they hold its start token) and
``cache.json`` (shapes, the
normalisation, the dataset's shard digests, each file's size and digest), written last; ``<key>`` is a hash of the
transform and
tokenizer, so one dataset keeps a cache per model family. Built in a temporary folder and renamed when complete; a
changed dataset makes its cache stale (not used). Every file's size and digest is checked each time the cache is
opened: a truncated or overwritten file is an error naming it, never pixels or tokens read silently wrong. The
digest is SHA-1 over 64 MiB chunks hashed on all cores (hashlib releases the GIL), so the check costs one read of
the cache at disk speed (docs/benchmarks.md).

A folder of WebDataset shards, Parquet files or a saved dataset (plain image–caption pairs, `stores`) is cached the
same way, with ``"pairs": true``: each record is the pair `pairs.PairsDataset` gives at that index (a picture
that fails to decode replaced by the next that does, logged in ``skipped_pairs.jsonl`` beside the cache), the
picture once and no negative (a batch repeats it in the negative slot, masked, as decoding does). Its identity
is its files' names, sizes and modification times.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from ..concretebatch import IndexedConcreteBatch, dataset_digest, negative_slots, positives_per_record, slots_of
from ..errors import DatasetError
from ..files.locks import locked
from ..records import atomic_write_json

FILES = ("images.u8", "tokens.i32", "values.f32", "masks.u8", "positives.i32")
# 2: K negatives and their masks; 3: and anchor_true_of_negative; 4: and P positives. A format-3 cache is read as one
# of P = 1 (it lacks positives.i32); an older format is stale and rebuilt
FORMAT = 4
READ_FORMATS = (3, 4)
CHUNK = 64 * 2**20


class CacheError(ValueError):
    """A model whose preprocessing cannot be split into a geometric part and a normalisation."""


class CacheDamaged(DatasetError):
    """A cache file whose size or digest is not the one its build wrote."""


def split_preprocess(preprocess) -> tuple[object, torch.Tensor, torch.Tensor]:
    """(geometric transform to a PIL image, mean, std) of an open_clip eval transform: the steps before its
    to-tensor step, and its normalisation."""
    from torchvision import transforms as T

    steps = list(getattr(preprocess, "transforms", []))
    names = [type(s).__name__ for s in steps]
    if len(steps) < 2 or "ToTensor" not in names[-2] or not isinstance(steps[-1], T.Normalize):
        raise CacheError(f"cannot cache images for this preprocessing ({names}): it must end in ToTensor, "
                         "Normalize, as open_clip's does")
    mean, std = (torch.tensor(v, dtype=torch.float32)[:, None, None] for v in (steps[-1].mean, steps[-1].std))
    return T.Compose(steps[:-2]), mean, std


def cache_key(clip) -> str:
    """Everything that decides the cached bytes: the preprocessing and the tokenizer, its class, options,
    vocabulary and what it makes of a probe text (two tokenizers of one class and context can differ in all)."""
    geometric, mean, std = split_preprocess(clip.preprocess)
    spec = {"transform": repr(geometric), "mean": mean.flatten().tolist(), "std": std.flatten().tolist(),
            "tokenizer": tokenizer_fingerprint(clip.tokenizer)}
    return hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


PROBE = "A Red-Ball, 42 CAFÉS?  ünïcode (x) <b>twice</b> twice"


def tokenizer_fingerprint(tokenizer) -> dict:
    vocab = getattr(tokenizer, "encoder", None)  # open_clip's SimpleTokenizer
    if vocab is None and hasattr(getattr(tokenizer, "tokenizer", None), "get_vocab"):  # an HF tokenizer
        vocab = tokenizer.tokenizer.get_vocab()
    options = {k: v for k, v in sorted(vars(tokenizer).items()) if isinstance(v, (str, int, float, bool))}
    return {"class": type(tokenizer).__name__, "options": options, "probe": tokenizer([PROBE]).tolist(),
            "vocabulary": hashlib.sha1(json.dumps(sorted(vocab.items()) if vocab else None).encode()).hexdigest()}


class _Geometric(torch.utils.data.Dataset):
    """A record's anchor and negative pictures after the geometric transform (uint8 CHW, zeros where a picture is
    missing), its captions (K negatives, "" where missing), ratings and masks: from ConcreteBatch records or plain
    pairs (`pairs.PairsDataset`), which both index as dicts."""

    def __init__(self, records, geometric, k: int, pictures: int, p: int = 1):
        self.records, self.geometric, self.k, self.pictures, self.p = records, geometric, k, pictures, p

    def __len__(self):
        return len(self.records)

    def _pixels(self, image):
        return torch.from_numpy(np.asarray(self.geometric(image), dtype=np.uint8).copy()).permute(2, 0, 1)

    def __getitem__(self, i):
        r = self.records[i]
        # each negative in its slot (its type's, where it has one: `slots_of`), the empty slots as in `data.Batch`
        negatives = [{"caption": "", "image": None, "concreteness": 0.0}] * self.k
        masks = torch.zeros(self.k, 3, dtype=torch.uint8)
        for slot, negative in zip(slots_of(r, self.k), r["negatives"]):
            negatives[slot] = negative
            masks[slot] = torch.tensor([1, negative["image"] is not None,
                                        negative.get("anchor_true_of_negative") is True])
        anchor = self._pixels(r["image"])
        pixels = torch.zeros(1 + self.pictures, *anchor.shape, dtype=torch.uint8)
        pixels[0] = anchor
        for k, negative in enumerate(negatives[: self.pictures]):
            if negative["image"] is not None:
                pixels[1 + k] = self._pixels(negative["image"])
        positives = (r.get("positives", [])[1:] + [""] * self.p)[: self.p - 1]  # "": none, zero tokens
        return (pixels, r["caption"], [n["caption"] for n in negatives],
                torch.tensor([n["concreteness"] for n in negatives], dtype=torch.float32), masks, positives)


def is_pairs_store(root: Path) -> bool:
    """Whether ``root`` is a folder of plain pairs in stores (not a ConcreteBatch)."""
    from ..sources import expand_paths
    from ..sources.stores import store_root

    if not root.is_dir() or (root / "manifest.jsonl").is_file() or any(root.glob("shard-*.tar")):
        return False
    try:
        return store_root(expand_paths([root])) is not None
    except ValueError:
        return False


def store_digest(root: Path) -> str:
    """A pairs store's identity: its files' names, sizes and modification times (its cache aside)."""
    parts = [f"{p.relative_to(root)}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in sorted(root.rglob("*"))
             if p.is_file() and "cache" not in p.relative_to(root).parts[:1]]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def source_digest(root: Path) -> str:
    return store_digest(root) if is_pairs_store(root) else dataset_digest(root)


def build_cache(root: str | Path, clip, workers: int = 0, batch_size: int = 256, progress: bool = True,
                partial: bool = False) -> Path:
    """Preprocess every record of the ConcreteBatch (or pairs store) ``root`` for ``clip``'s model; the cache's
    folder. ``partial``: the finished shards of an unfinished dataset (refused otherwise)."""
    root = Path(root)
    folder = root / "cache" / cache_key(clip)
    digest = source_digest(root)
    # one builder per cache: a second job waits for nothing and shares no temporary folder, it is refused
    with locked(folder.with_name(f".{folder.name}.lock"), f"the cache {folder}", "concrete-jungle cache"):
        if cache_is_current(folder, digest):  # built before, perhaps by the job that held the lock before
            try:
                check_cache(folder)
                return folder
            except CacheDamaged as e:
                print(f"note: rebuilding a damaged cache: {e}", file=sys.stderr)
        _build(root, folder, digest, clip, workers, batch_size, progress, partial)
    return folder


def _build(root: Path, folder: Path, digest: str, clip, workers: int, batch_size: int, progress: bool,
           partial: bool) -> None:
    from tqdm import tqdm

    from .pairs import PairsDataset

    geometric, mean, std = split_preprocess(clip.preprocess)
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # what a killed build left
    tmp.mkdir(parents=True)
    pairs = is_pairs_store(root)
    records = PairsDataset([str(root)], None, skip_log=tmp / "skipped_pairs.jsonl") if pairs else \
        IndexedConcreteBatch([root], partial)
    n = len(records)
    k, pictures = negative_slots([records])
    p = positives_per_record([records])
    geometric_records = _Geometric(records, geometric, k, pictures, p)
    first = geometric_records[0][0]
    context = int(clip.tokenizer(["a"]).shape[1])
    shape = [n, 1 + pictures, *first.shape[1:]]  # pairs, and captions-only negatives, store the anchor alone
    images = np.memmap(tmp / "images.u8", dtype=np.uint8, mode="w+", shape=tuple(shape))
    tokens = np.memmap(tmp / "tokens.i32", dtype=np.int32, mode="w+", shape=(n, 1 + k, context))
    values = np.memmap(tmp / "values.f32", dtype=np.float32, mode="w+", shape=(n, k))
    masks = np.memmap(tmp / "masks.u8", dtype=np.uint8, mode="w+", shape=(n, k, 3))
    positive_tokens = np.memmap(tmp / "positives.i32", dtype=np.int32, mode="w+", shape=(n, max(p - 1, 1), context))
    loader = torch.utils.data.DataLoader(geometric_records, batch_size=batch_size, num_workers=workers)
    at = 0
    for pixels, captions, neg_captions, concreteness, mask, positives in tqdm(
            loader, desc=f"cache {root.name}", unit="batch", disable=not progress):
        rows = slice(at, at + len(pixels))
        images[rows] = pixels.numpy()
        tokens[rows, 0] = clip.tokenizer(list(captions)).numpy()
        for j, column in enumerate(neg_captions):  # the default collate gives K lists of the batch's captions
            tokens[rows, 1 + j] = clip.tokenizer(list(column)).numpy() * mask[:, j, :1].numpy()
        values[rows] = concreteness.numpy()
        masks[rows] = mask.numpy()
        for j, column in enumerate(positives):  # a missing positive ("") keeps its zeros
            present = np.array([bool(text) for text in column])[:, None]
            positive_tokens[rows, j] = clip.tokenizer(list(column)).numpy() * present
        at += len(pixels)
    for array in (images, tokens, values, masks, positive_tokens):
        array.flush()
    del images, tokens, values, masks, positive_tokens  # closed before they are digested and renamed
    files = {name: {"bytes": (tmp / name).stat().st_size, "sha1": file_digest(tmp / name)} for name in FILES}
    atomic_write_json(tmp / "cache.json", {"format": FORMAT, "records": n, "negatives": k, "positives": p,
                                           "images": shape,
                                           "context": context,
                                           "mean": mean.flatten().tolist(), "std": std.flatten().tolist(),
                                           "dataset": digest, "transform": repr(geometric), "files": files,
                                           "pairs": pairs})
    shutil.rmtree(folder, ignore_errors=True)  # a stale cache of an older dataset
    tmp.rename(folder)


def cache_is_current(folder: Path, digest: str) -> bool:
    """Whether ``folder`` holds a complete cache of the dataset with this digest (a cache written before files
    carried digests is not: it is rebuilt)."""
    meta = folder / "cache.json"
    if not meta.is_file():
        return False
    written = json.loads(meta.read_text())
    return written.get("dataset") == digest and written.get("format") in READ_FORMATS


def file_digest(path: Path) -> str:
    """SHA-1 of the SHA-1s of the file's 64 MiB chunks, the chunks hashed on all cores."""
    size = path.stat().st_size

    def chunk(start: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(start)
            return hashlib.sha1(f.read(CHUNK)).digest()

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return hashlib.sha1(b"".join(pool.map(chunk, range(0, max(size, 1), CHUNK)))).hexdigest()


def check_cache(folder: Path) -> None:
    """Every file of the cache has the size and digest its build wrote; else `CacheDamaged` naming the file."""
    written = json.loads((folder / "cache.json").read_text())["files"]
    fix = f"rebuild it with `concrete-jungle cache {folder.parent.parent}` and the same model"
    for name in [f for f in FILES if f in written or f != "positives.i32"]:  # format 3 has no positives
        path, expected = folder / name, written[name]
        if not path.is_file():
            raise CacheDamaged(f"damaged image cache: {path} is missing; {fix}")
        size = path.stat().st_size
        if size != expected["bytes"]:
            raise CacheDamaged(f"damaged image cache: {path} has {size} bytes where its build wrote "
                               f"{expected['bytes']} (truncated or overwritten); {fix}")
        if file_digest(path) != expected["sha1"]:
            raise CacheDamaged(f"damaged image cache: the content of {path} is not what its build wrote "
                               f"(digest {expected['sha1'][:12]} expected); {fix}")


def current_cache(root: str | Path, clip) -> Path | None:
    """The folder of ``root``'s complete, current cache for ``clip``, or None."""
    try:
        folder = Path(root) / "cache" / cache_key(clip)
    except CacheError:
        return None
    return folder if cache_is_current(folder, source_digest(Path(root))) else None


class CachedSet:
    """The records of one or more cached ConcreteBatches: `batch` gathers uint8 pictures and tokens (no decoding);
    `normalize` turns the pictures into the model's input where they are used (on the GPU in training). Parts with
    fewer negatives than the most of any part get masked empty slots (`data.Batch`)."""

    def __init__(self, folders: list[Path], negatives: bool = True, negative_images: bool = True):
        self.parts, metas = [], []
        for folder in folders:
            check_cache(folder)
            meta = json.loads((folder / "cache.json").read_text())
            n, k = meta["records"], meta["negatives"]
            self.parts.append((np.memmap(folder / "images.u8", dtype=np.uint8, mode="r", shape=tuple(meta["images"])),
                               np.memmap(folder / "tokens.i32", dtype=np.int32, mode="r",
                                         shape=(n, 1 + k, meta["context"])),
                               np.memmap(folder / "values.f32", dtype=np.float32, mode="r", shape=(n, k)),
                               np.memmap(folder / "masks.u8", dtype=np.uint8, mode="r", shape=(n, k, 3)),
                               np.memmap(folder / "positives.i32", dtype=np.int32, mode="r",
                                         shape=(n, max(meta["positives"] - 1, 1), meta["context"]))
                               if meta.get("positives", 1) > 1 else None))
            metas.append(meta)
        self.k = max([1] + [m["negatives"] for m in metas])
        self.p = max([1] + [m.get("positives", 1) for m in metas])
        self.negative_pictures = any(m["images"][1] > 1 for m in metas)  # the data holds some
        # negative_images false (a loss that reads none): none is gathered, nor encoded
        self.pictures = self.k if self.negative_pictures and negative_images else 0
        self.negatives = negatives
        self.mean = torch.tensor(meta["mean"], dtype=torch.float32)[:, None, None]
        self.std = torch.tensor(meta["std"], dtype=torch.float32)[:, None, None]
        self.offsets = np.cumsum([0] + [len(p[2]) for p in self.parts])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def batch(self, indices: list[int]):
        """(images u8, negative images u8, tokens, negative tokens, concreteness, has_negative,
        has_negative_image, anchor_true_of_negative, positive tokens, has_positive) of these records
        (`data.Batch`)."""
        index = np.asarray(indices)
        part = np.searchsorted(self.offsets, index, side="right") - 1
        shape = self.parts[0][0].shape[2:]
        images = np.zeros((len(index), 1 + self.pictures, *shape), dtype=np.uint8)
        tokens = np.zeros((len(index), 1 + self.k, self.parts[0][1].shape[2]), dtype=np.int32)
        values = np.zeros((len(index), self.k), dtype=np.float32)
        masks = np.zeros((len(index), self.k, 3), dtype=np.uint8)
        positives = np.zeros((len(index), self.p - 1, tokens.shape[2]), dtype=np.int32)
        for p, (imgs, toks, vals, msks, pos) in enumerate(self.parts):
            rows = np.nonzero(part == p)[0]
            local = index[rows] - self.offsets[p]
            slots, k = min(imgs.shape[1], 1 + self.pictures), vals.shape[1]
            images[rows, :slots], tokens[rows, : 1 + k] = imgs[local, :slots], toks[local]
            values[rows, :k] = vals[local]
            masks[rows, :k] = msks[local]
            if pos is not None:
                positives[rows, : pos.shape[1]] = pos[local]
        images, tokens, masks = torch.from_numpy(images), torch.from_numpy(tokens).long(), torch.from_numpy(masks)
        has_negative = masks[..., 0].bool() & self.negatives
        positives = torch.from_numpy(positives).long()
        return (images[:, 0], images[:, 1:], tokens[:, 0], tokens[:, 1:], torch.from_numpy(values), has_negative,
                masks[..., 1].bool() & has_negative & (self.pictures > 0), masks[..., 2].bool() & has_negative,
                positives, positives.any(dim=2))

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 pictures -> the model's float input: the same operations as to-tensor and Normalize."""
        mean, std = self.mean.to(images.device), self.std.to(images.device)
        return images.to(torch.float32).div(255).sub_(mean).div_(std)
