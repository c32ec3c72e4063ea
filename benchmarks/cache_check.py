"""What checking an image cache on open costs: `image_cache.check_cache` (size and chunked SHA-1 of every file)
against reading the same files once, and against one epoch of training reads.

A cache of ``--gib`` GiB (ViT-B-32 rows of 2 x 3 x 224 x 224 uint8, random content) is written to a temporary
folder with a `cache.json` as `concrete-jungle cache` writes it; then, rounds alternating, medians:

- ``read``: every file read once in 64 MiB blocks, one thread (the reference: the least any check can cost);
- ``check``: `check_cache`, which `train` runs each time it opens a cache.

Both read from the page cache after the first round (the file was just written), so the ratio is the hashing's
cost, not the disk's; a cache larger than memory is read from disk by both at the disk's speed.

    python benchmarks/cache_check.py --gib 2 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from concrete_jungle.train.image_cache import CHUNK, FILES, check_cache, file_digest

ROW = 2 * 3 * 224 * 224  # one ViT-B-32 record: anchor and negative
PICTURES_PER_S = 15_600  # the H200 training goal (docs/benchmarks.md, "Training data paths")


def write_cache(folder: Path, gib: float) -> int:
    n = int(gib * 2**30) // ROW
    rng = np.random.default_rng(0)
    with open(folder / "images.u8", "wb") as f:
        for start in range(0, n, 1024):
            f.write(rng.integers(0, 256, size=(min(1024, n - start)) * ROW, dtype=np.uint8).tobytes())
    rng.integers(0, 49408, size=(n, 2, 77), dtype=np.int32).tofile(folder / "tokens.i32")
    rng.random(n, dtype=np.float32).tofile(folder / "values.f32")
    files = {name: {"bytes": (folder / name).stat().st_size, "sha1": file_digest(folder / name)} for name in FILES}
    (folder / "cache.json").write_text(json.dumps({"records": n, "files": files}))
    return n


def read_once(folder: Path) -> None:
    for name in FILES:
        with open(folder / name, "rb") as f:
            while f.read(CHUNK):
                pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "cb" / "cache" / "key"
        folder.mkdir(parents=True)
        n = write_cache(folder, args.gib)
        size = sum((folder / name).stat().st_size for name in FILES)
        times = {"read": [], "check": []}
        for _ in range(args.rounds):
            for name, fn in (("read", read_once), ("check", check_cache)):
                start = time.perf_counter()
                fn(folder)
                times[name].append(time.perf_counter() - start)
    read, check = statistics.median(times["read"]), statistics.median(times["check"])
    epoch = 2 * n / PICTURES_PER_S
    print(f"cache of {n} records, {size / 2**30:.2f} GiB, {os.cpu_count()} cores")
    print(f"read once: {read:.2f} s ({size / read / 2**30:.2f} GiB/s)")
    print(f"check_cache: {check:.2f} s ({size / check / 2**30:.2f} GiB/s), {check / read:.2f}x read once")
    print(f"one epoch of these records at {PICTURES_PER_S} pictures/s: {epoch:.1f} s; the check is "
          f"{check / epoch:.2f} of it")


if __name__ == "__main__":
    main()
