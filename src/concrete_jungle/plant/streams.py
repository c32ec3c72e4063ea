"""A plant's per-sample state goes through files: in memory it holds a batch and counters, never a list of its
samples, so its memory does not grow with the input (docs/scale.md, "Memory").

- `SeenIds`: whether an id came before, in 16 bytes a sample instead of a set of the ids;
- `ValueTally`: the mean and median of values from their counts (concreteness ratings repeat: they are a table's);
- `repair_tail`, `read_records`: the complete records of an append-only JSONL file, one at a time;
- `AtomicJsonl`: a JSONL file written row by row and put in place whole, as `records.atomic_write_jsonl` writes
  a list (the same bytes);
- `SampleSpool`: the input's samples, read once into a temporary file and read back in order.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

from ..records import create_temporary, write_error

_LOW = (1 << 64) - 1


class SeenIds:
    """Whether a sample id came before, for an input of any size.

    Each id is kept as its 128-bit blake2b digest: the newest in a set, the others in 256 buckets (by the digest's
    first byte) of two sorted arrays of 64-bit halves: 16 bytes a sample, where a set of the ids took ~100, and
    a merge copies one bucket at a time. Two different ids share a digest with a probability of about n^2 / 2^129
    (1e-25 for CC12M's 12 million ids)."""

    recent_limit = 1 << 14  # digests held in the set before they are merged into the buckets

    def __init__(self):
        self.recent: set[int] = set()
        self.high = [np.empty(0, np.uint64) for _ in range(256)]
        self.low = [np.empty(0, np.uint64) for _ in range(256)]

    def add(self, sample_id: str) -> bool:
        """Record ``sample_id``; True when it was recorded before."""
        digest = int.from_bytes(hashlib.blake2b(sample_id.encode("utf-8", "surrogatepass"), digest_size=16).digest(),
                                "big")
        if digest in self.recent or self._merged(digest):
            return True
        self.recent.add(digest)
        if len(self.recent) >= self.recent_limit:
            self._merge()
        return False

    def _merged(self, digest: int) -> bool:
        bucket = digest >> 120
        highs, lows = self.high[bucket], self.low[bucket]
        high, low = np.uint64(digest >> 64), np.uint64(digest & _LOW)
        i = int(np.searchsorted(highs, high))
        while i < len(highs) and highs[i] == high:
            if lows[i] == low:
                return True
            i += 1
        return False

    def _merge(self) -> None:
        for bucket, group in itertools.groupby(sorted(self.recent), key=lambda d: d >> 120):
            group = list(group)
            high = np.fromiter((d >> 64 for d in group), np.uint64, len(group))
            low = np.fromiter((d & _LOW for d in group), np.uint64, len(group))
            at = np.searchsorted(self.high[bucket], high)  # a bucket stays sorted by the high half
            self.high[bucket] = np.insert(self.high[bucket], at, high)
            self.low[bucket] = np.insert(self.low[bucket], at, low)
        self.recent.clear()


class ValueTally:
    """Mean and median of the values added, as `records.mean_median` gives them for the list of the values (the same
    floats: the sum runs over the values in sorted order), held as a count per distinct value."""

    def __init__(self):
        self.counts: Counter = Counter()

    def add(self, value) -> None:
        self.counts[value] += 1

    def mean_median(self) -> tuple[float | None, float | None]:
        n = sum(self.counts.values())
        if not n:
            return None, None
        ordered = sorted(self.counts.items())
        mean = sum(itertools.chain.from_iterable(itertools.repeat(v, c) for v, c in ordered)) / n
        return mean, (self._nth(ordered, (n - 1) // 2) + self._nth(ordered, n // 2)) / 2

    @staticmethod
    def _nth(ordered: list, index: int):
        for value, count in ordered:
            if index < count:
                return value
            index -= count
        raise IndexError(index)


def repair_tail(path: Path) -> None:
    """Cut the last line of an append-only JSONL file when it has no newline: what a killed writer leaves (its
    sample is done again, once). Reads the file's end, not the whole file."""
    if not path.exists():
        return
    with open(path, "r+b") as f:
        end = f.seek(0, os.SEEK_END)
        position = end
        while position > 0:
            start = max(0, position - (1 << 16))
            f.seek(start)
            newline = f.read(position - start).rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            position = start
        else:
            keep = 0
        if keep < end:
            f.truncate(keep)


def read_records(path: Path):
    """The records of a JSONL file with every line complete (`repair_tail`), one at a time; a line that is not valid
    JSON is corruption, not a crash, and an error (as `records.read_jsonl_repairing` says it)."""
    if not path.exists():
        return
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}, line {lineno}: not valid JSON ({e.msg}); the file is corrupt, move it away "
                                 "to start over") from None


class AtomicJsonl:
    """``with AtomicJsonl(path) as out: out.write(row)``: one JSON object per line into a temporary file beside
    ``path``, renamed over it when the block ends without an error (removed when it ends with one)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __enter__(self):
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, self.tmp = create_temporary(self.path)
        except OSError as e:
            raise write_error(self.path, e) from None
        self.file = os.fdopen(fd, "wb", buffering=1 << 20)
        return self

    def write(self, row: dict) -> None:
        try:
            self.file.write((json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8"))
        except OSError as e:
            raise write_error(self.path, e) from None

    def __exit__(self, kind, error, traceback):
        try:
            if kind is None:
                self.file.flush()
                os.fsync(self.file.fileno())
            self.file.close()
            if kind is None:
                os.replace(self.tmp, self.path)
        except OSError as e:
            self.tmp.unlink(missing_ok=True)
            raise write_error(self.path, e) from None
        if kind is not None:
            self.tmp.unlink(missing_ok=True)


class SpooledSample:
    """A sample as the keyword stage needs it: its id, image, anchor caption, the reason it cannot be used (a
    reader's) and whether its id came before."""

    __slots__ = ("id", "image", "caption", "error", "repeated")

    def __init__(self, sample_id: str, image: str | None, caption: str | None, error: str | None, repeated: bool):
        self.id, self.image, self.caption, self.error, self.repeated = sample_id, image, caption, error, repeated


class SampleSpool:
    """The input's samples, read once (every input file, before anything is written) into an unnamed temporary file
    in ``folder`` (the output's: the disk chosen for the dataset, not a /tmp that may be memory), then read back in
    input order as often as needed. Holds a count and the ids seen (`SeenIds`), not the samples."""

    def __init__(self, folder: Path):
        self.folder, self.count = folder, 0

    def __enter__(self):
        self.file = tempfile.TemporaryFile(mode="w+b", dir=self.folder, prefix=".samples-", suffix=".tmp")
        return self

    def __exit__(self, *exc):
        self.file.close()

    def fill(self, samples, anchor_caption) -> None:
        """Write ``samples`` (`sources.CaptionSample`), each with its anchor caption (``anchor_caption(captions)``)
        and whether its id came before."""
        seen = SeenIds()
        for sample in samples:
            caption = anchor_caption(sample.captions) if sample.error is None else None
            # ASCII JSON: a lone surrogate (a reader's skipped sample may carry one) is kept as its escape
            self.file.write(json.dumps([sample.id, sample.image, caption, sample.error, seen.add(sample.id)]).encode()
                            + b"\n")
            self.count += 1
        self.file.flush()

    def __iter__(self):
        self.file.seek(0)
        for line in self.file:
            yield SpooledSample(*json.loads(line))
