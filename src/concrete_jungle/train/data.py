"""Slipform's data path: the training set, its per-epoch batches, and how they reach the step.

- `TrainingSet`: ConcreteBatch records and plain pairs (`pairs.PairsDataset`) as tensors (preprocessed images,
  tokens, c, mask); decoded per item by DataLoader workers.
- `PreloadedSet`: the same tensors for a whole small dataset, decoded and preprocessed once, so each step
  indexes memory instead of decoding JPEGs; bitwise the same batches as `TrainingSet`.
- `image_cache.CachedSet`: a dataset preprocessed once by `concrete-jungle cache` (uint8 pixels and tokens in
  memory-mapped files): batches are gathered, not decoded, and normalised on the device; bitwise the same
  inputs as the other two. Used whenever every ConcreteBatch of the config has a current cache for the model.
- `EpochBatches`: every epoch a seeded permutation split into disjoint per-rank slices; (epoch, step) is the
  exact data position a checkpoint stores.
- `epoch_batches`: one epoch's batches from any of the three, from a given step on; with ``apart``, each batch's
  negative half is the next batch's (the augmentation control, `DataConfig.negatives_apart`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch

from ..concretebatch import negative_slots, positives_per_record, slots_of
from ..errors import TrainingError
from .config import DataConfig
from .pairs import PairsDataset

# One batch of n anchors with K negatives each (`loss.layout`): images (n, 3, H, W), negative images (n, P, 3, H, W)
# with P = K, or P = 0 when no negative of the set has a picture, tokens (n, L), negative tokens (n, K, L),
# concreteness (n, K), has_negative (n, K), has_negative_image (n, K) and anchor_true_of_negative (n, K: the record
# says the anchor's caption is true of that negative's picture; unknown is false). A missing negative's slots hold
# zeros that no step encodes: the masks leave them out of the forward and the loss. Then the picture's other positive
# captions: their tokens (n, P - 1, L) and has_positive (n, P - 1), P the most of any record (a missing one: zeros,
# masked), encoded only for a loss that reads them (`objective.POSITIVE_EXTRAS`).
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
              torch.Tensor, torch.Tensor, torch.Tensor]


class TrainingSet(torch.utils.data.Dataset):
    """ConcreteBatch records and plain pairs as tensors: preprocessed images and tokenized captions.
    ``negative_images`` false: for a loss that reads no negative picture, none is served (P = 0), so none is
    decoded or encoded (the parts should then skip reading them too: `IndexedConcreteBatch`)."""

    def __init__(self, parts, preprocess, tokenizer, negatives: bool = True, negative_images: bool = True):
        self.parts, self.preprocess, self.tokenizer, self.negatives = parts, preprocess, tokenizer, negatives
        self.k, pictures = negative_slots(parts)
        self.p = positives_per_record(parts)
        self.negative_pictures = pictures > 0  # the data holds some
        self.pictures = pictures if negative_images else 0
        self.offsets = [0]
        for p in parts:
            self.offsets.append(self.offsets[-1] + len(p))

    def __len__(self):
        return self.offsets[-1]

    def __getitem__(self, i):
        part = next(j for j in range(len(self.parts)) if i < self.offsets[j + 1])
        r = self.parts[part][i - self.offsets[part]]
        image = self.preprocess(r["image"])
        negatives = r["negatives"] if r["has_negative"] and self.negatives else []
        slots = slots_of(r, self.k) if negatives else []  # each negative in its slot (its type's, where it has one)
        has_negative, has_image = torch.zeros(self.k, dtype=torch.bool), torch.zeros(self.k, dtype=torch.bool)
        entailed = torch.zeros(self.k, dtype=torch.bool)
        has_negative[slots] = True
        pictures = torch.zeros(self.pictures, *image.shape)
        c = torch.zeros(self.k, dtype=torch.float32)
        for slot, negative in zip(slots, negatives):
            c[slot] = negative["concreteness"]
            entailed[slot] = negative.get("anchor_true_of_negative") is True
            if negative["image"] is not None and self.pictures:
                has_image[slot] = True
                pictures[slot] = self.preprocess(negative["image"])
        positives = r.get("positives", [])[1:]
        tokens = self.tokenizer([r["caption"]] + [n["caption"] for n in negatives] + positives)
        neg_tokens = torch.zeros(self.k, tokens.shape[1], dtype=tokens.dtype)
        neg_tokens[slots] = tokens[1: 1 + len(negatives)]
        pos_tokens = torch.zeros(self.p - 1, tokens.shape[1], dtype=tokens.dtype)
        pos_tokens[: len(positives)] = tokens[1 + len(negatives):]
        has_positive = torch.arange(self.p - 1) < len(positives)
        return image, pictures, tokens[0], neg_tokens, c, has_negative, has_image, entailed, pos_tokens, has_positive

    def bytes_in_memory(self) -> int:
        """What `PreloadedSet` would hold: both preprocessed images and both token rows of every item."""
        if not len(self):
            return 0
        first = self[0]
        return len(self) * sum(t.numel() * t.element_size() for t in first)


class PreloadedSet:
    """Every item of a `TrainingSet`, decoded and preprocessed once, kept as stacked tensors."""

    def __init__(self, dataset: TrainingSet, workers: int = 0, progress: bool = True):
        from tqdm import tqdm

        loader = torch.utils.data.DataLoader(dataset, batch_size=256, num_workers=workers)
        columns: list[list[torch.Tensor]] = [[] for _ in range(10)]
        for batch in tqdm(loader, desc="preload", unit="batch", disable=not progress, leave=False):
            for column, tensor in zip(columns, batch, strict=True):
                column.append(tensor)
        self.tensors = tuple(torch.cat(c) for c in columns)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]

    def batch(self, indices: list[int]) -> Batch:
        index = torch.tensor(indices)
        return tuple(t.index_select(0, index) for t in self.tensors)


class EpochBatches(torch.utils.data.Sampler):
    """This rank's index batches for one epoch, from `start_step` on (the DistributedSampler equivalent)."""

    def __init__(self, n: int, batch_size: int, rank: int, world: int, seed: int, epoch: int, start_step: int = 0,
                 shift: int = 0):
        self.steps = n // batch_size
        self.order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch)).tolist()
        self.per_rank = batch_size // world
        self.args = (n, batch_size, rank, world, seed, epoch, start_step)
        self.batch_size, self.rank, self.start_step, self.shift = batch_size, rank, start_step, shift

    def __len__(self):
        return self.steps - self.start_step

    def __iter__(self):
        for s in range(self.start_step, self.steps):
            at = ((s + self.shift) % self.steps) * self.batch_size + self.rank * self.per_rank
            yield self.order[at: at + self.per_rank]

    def next_batches(self) -> "EpochBatches":
        """The same epoch one batch ahead: step s gets step s + 1's indices (the last step the first's)."""
        if self.steps < 2:
            raise TrainingError(f"data.negatives_apart needs at least 2 batches an epoch; the data holds "
                                f"{self.steps} of {self.batch_size}")
        return EpochBatches(*self.args, shift=self.shift + 1)

    def first_batch(self) -> "EpochBatches":
        """The epoch's first batch alone, as `next_batches` gives it to the last step (its error for an epoch of
        one batch included)."""
        ahead = self.next_batches()
        n, batch_size, rank, world, seed, epoch, _ = ahead.args
        return EpochBatches(n, batch_size, rank, world, seed, epoch, start_step=self.steps - 1, shift=ahead.shift)


def training_set(data: DataConfig, clip, progress: bool = True, skip_log: Path | None = None,
                 negative_images: bool = True):
    """The training set of a config's data (`source_set`), preloaded into memory when it is decoded and fits
    ``data.preload_mib`` (`in_memory`)."""
    return in_memory(source_set(data, clip, skip_log, negative_images), data, progress)


def source_set(data: DataConfig, clip, skip_log: Path | None = None, negative_images: bool = True):
    """The training set of a config's data as it is stored: its image caches when every ConcreteBatch and every
    pairs input has a current one (pairs: a store folder cached with `concrete-jungle cache`), else decoded per
    step. ``skip_log``: where pairs skipped at their step are recorded (`PairsDataset`). ``negative_images``
    false (a loss that reads none): no negative picture is read, decoded or served. Either set says whether the
    data holds negative pictures (``negative_pictures``)."""
    from ..concretebatch import IndexedConcreteBatch, shard_urls
    from .image_cache import CachedSet, current_cache, is_pairs_store

    for root in data.concretebatch:  # damaged, unfinished or unmerged: refused before a cache is used too
        shard_urls(root, data.partial)
    # plain pairs have a cache when they are a store folder cached for this model (`concrete-jungle cache`)
    pair_caches = [current_cache(p, clip) if is_pairs_store(Path(p)) else None for p in data.pairs]
    caches = [current_cache(root, clip) for root in data.concretebatch] + pair_caches
    if caches and all(caches):
        return CachedSet(caches, negatives=data.negatives, negative_images=negative_images)
    parts = [IndexedConcreteBatch(data.concretebatch, data.partial, negative_images)] if data.concretebatch else []
    if data.pairs:
        parts.append(PairsDataset(data.pairs, data.pairs_images, data.pairs_split, skip_log))
    return TrainingSet(parts, clip.preprocess, clip.tokenizer, negatives=data.negatives,
                       negative_images=negative_images)


def in_memory(dataset, data: DataConfig, progress: bool = True):
    """A decoded set whose tensors fit ``data.preload_mib``, decoded once into memory (`PreloadedSet`); any other
    set as it is."""
    if not isinstance(dataset, TrainingSet):
        return dataset
    if len(dataset) and dataset.bytes_in_memory() <= data.preload_mib * 2**20:
        return PreloadedSet(dataset, workers=data.workers, progress=progress)
    return dataset


class _Batches(torch.utils.data.Dataset):
    """A set with a ``batch(indices)`` method as a DataLoader dataset whose items are whole batches, so that
    worker processes gather them (the memory-mapped cache) while the device computes."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, indices):
        return self.dataset.batch(indices)


def epoch_batches(dataset, batches: EpochBatches, workers: int, pin_memory: bool,
                  apart: bool = False) -> Iterator[Batch]:
    """One epoch's batches: indexed from memory for a `PreloadedSet`, gathered from the cache by DataLoader
    workers for a `CachedSet`, else decoded by DataLoader workers. With ``apart``, a batch's anchors come with the
    negative pairs of the next batch's anchors, counted as ordinary pairs (every negative once an epoch, never in
    its anchor's batch)."""
    if not apart:
        yield from _epoch_batches(dataset, batches, workers, pin_memory)
        return
    # each batch is fetched once and paired with the one before it; the last step's partner is the epoch's first
    # batch, kept from the start or, in an epoch resumed past it, fetched once more
    last_partner = batches.first_batch()  # made before any fetch: an epoch of one batch has none, a clear error
    first = previous = None
    for batch in _epoch_batches(dataset, batches, workers, pin_memory):
        if previous is None and batches.start_step == 0:
            first = batch
        if previous is not None:
            yield _with_negatives_of(previous, batch)
        previous = batch
    if previous is not None:
        if first is None:
            first = next(_epoch_batches(dataset, last_partner, workers, pin_memory))
        yield _with_negatives_of(previous, first)


def _with_negatives_of(anchors: Batch, later: Batch) -> Batch:
    """``anchors``'s anchor pairs (and their other positives) with ``later``'s negative pairs, as ordinary pairs
    (`epoch_batches`)."""
    return anchors[0], later[1], anchors[2], later[3], later[4], later[5], later[6], later[7], anchors[8], anchors[9]


def _epoch_batches(dataset, batches: EpochBatches, workers: int, pin_memory: bool) -> Iterator[Batch]:
    if isinstance(dataset, PreloadedSet):
        for indices in batches:
            yield dataset.batch(indices)
        return
    if hasattr(dataset, "batch"):  # a CachedSet: the sampler's index lists go to the workers whole
        yield from torch.utils.data.DataLoader(_Batches(dataset), batch_size=None, sampler=batches,
                                               num_workers=workers, pin_memory=pin_memory)
        return
    yield from torch.utils.data.DataLoader(dataset, batch_sampler=batches, num_workers=workers, pin_memory=pin_memory)


def data_path(dataset, workers: int) -> tuple[str, str]:
    """Which way a run's batches are made (``cache``, ``preload`` or ``decode``), and that in words with why: the
    three differ by an order of magnitude in speed, and a run says which one it took."""
    if hasattr(dataset, "normalize"):
        return "cache", "the image cache (preprocessed pixels, memory-mapped: no decoding)"
    if isinstance(dataset, PreloadedSet):
        return "preload", ("decoded once into memory (it fits data.preload_mib); each step reads tensors")
    by = f"{workers} worker process(es)" if workers else "the main process (data.workers 0)"
    return "decode", (f"decoded every step by {by} (larger than data.preload_mib; "
                      "`concrete-jungle cache` builds an image cache that needs no decoding)")

