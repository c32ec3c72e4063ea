"""COCO-style captions whose negatives are made on the fly by rule swaps (the NegCLIP-style baseline): any caption
file or store `sources.read_samples` reads (COCO ``captions_*.json``, a Karpathy split file, JSONL, CSV,
WebDataset, Parquet, a saved dataset).

Every caption of a sample is a record of its own, as in NegCLIP's and CE-CLIP's COCO sets (id ``<sample>#<i>``,
``source``: the sample and the caption's position); the records have no negatives yet: the import makes them with
the rules captioner (`plant.swaps`). With ``positives`` P > 1, a sample is one record instead (id ``<sample>``): its
first caption the anchor, whose negatives are made, and its next P - 1 captions the picture's other positives (a
sample with fewer has fewer; a blank one is left out). A sample the caption reader skips is a reject with its reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from .. import read_samples
from .base import FormatNeeds, PeerOptions, PeerRecord

NEEDS = FormatNeeds(suffixes=None, pictures="images_or_stores")  # any caption file or store


def read_all(paths: list[Path], options: PeerOptions) -> Iterator[PeerRecord]:
    """Every caption of ``paths`` as a record without negatives (read together: a store's locators are relative to
    the folder every store of the read lies under)."""
    for sample in read_samples(paths, fmt=options.caption_format, split=options.split):
        if sample.error is not None:
            yield PeerRecord(sample.id, source={"sample": sample.id}, error=sample.error)
            continue
        if options.positives > 1:
            yield one_record(sample, options.positives)
            continue
        for i, caption in enumerate(sample.captions):
            record = PeerRecord(f"{sample.id}#{i}", caption=caption, image=sample.image,
                                source={"sample": sample.id, "caption": i},
                                fields={"image": sample.image, "captions": len(sample.captions)})
            if not caption or not caption.strip():
                record.error = "empty caption"
            elif not sample.image:
                record.error = "no image file named for this sample"
            yield record


def one_record(sample, positives: int) -> PeerRecord:
    """A sample as one record: its first caption the anchor, its next ``positives`` - 1 non-blank ones the others."""
    caption, *others = sample.captions or [""]
    record = PeerRecord(sample.id, caption=caption, image=sample.image, source={"sample": sample.id},
                        fields={"image": sample.image, "captions": len(sample.captions)},
                        positives=[c for c in others if c and c.strip()][: positives - 1])
    if not caption or not caption.strip():
        record.error = "empty caption"
    elif not sample.image:
        record.error = "no image file named for this sample"
    return record
