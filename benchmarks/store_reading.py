"""Reading a set from a store against reading the same images from a folder: samples/s and peak memory.

The benchmark writes N samples (photo-like JPEGs of ``--size`` pixels, one caption each) four ways: a folder of
JPEGs with a JSONL caption file, WebDataset shards as img2dataset writes them, one Parquet file with the image
bytes inside (row groups of 1,000), and a Hugging Face ``save_to_disk`` folder. Each is then read in a fresh
process as `plant` reads its input: every sample (`sources.read_samples`), then every image through
`plant.stages.load_image` (the bytes read, checked and decoded), in input order; rounds alternate, medians.
Memory is the growth of the process's resident set (``VmRSS``, sampled every 500 samples) while it reads, above
what it held after its imports (torch, PIL, pyarrow, datasets): what the reading itself holds.

    python benchmarks/store_reading.py --samples 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

READ = """
import sys, time
from pathlib import Path
import datasets, pyarrow.parquet  # imported by the readers of two of the stores: loaded before, for all
from concrete_jungle.plant.stages import load_image
from concrete_jungle.sources import read_samples

def rss():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS")) / 1024

captions, images = sys.argv[1], sys.argv[2]
before = peak = rss()
start = time.perf_counter()
n = 0
for sample in read_samples([captions]):
    image, data, why = load_image(Path(images), sample.image)
    assert why is None, why
    n += 1
    if n % 500 == 0:
        peak = max(peak, rss())
print(n, time.perf_counter() - start, max(peak, rss()) - before)
"""


def photo(rng: np.random.Generator, size: int) -> bytes:
    y, x = np.mgrid[0:size, 0:size]
    base = np.stack([(x * rng.uniform(0.2, 1.5) + y * rng.uniform(0.2, 1.5)) % 255] * 3, -1)
    pixels = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def write_sets(root: Path, n: int, size: int) -> dict[str, tuple[str, str]]:
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    keys = [f"{i:09d}" for i in range(n)]
    captions = [f"a photo of thing number {i} on a table" for i in range(n)]
    jpegs = [photo(rng, size) for _ in range(n)]
    (root / "folder" / "images").mkdir(parents=True)
    with open(root / "folder" / "captions.jsonl", "w") as f:
        for key, caption, data in zip(keys, captions, jpegs):
            (root / "folder" / "images" / f"{key}.jpg").write_bytes(data)
            f.write(json.dumps({"id": key, "caption": caption, "image": f"{key}.jpg"}) + "\n")
    (root / "wds").mkdir()
    for shard in range(0, n, 10_000):
        with tarfile.open(root / "wds" / f"{shard // 10_000:05d}.tar", "w") as tar:
            for key, caption, data in list(zip(keys, captions, jpegs))[shard: shard + 10_000]:
                for name, content in ((f"{key}.jpg", data), (f"{key}.txt", caption.encode()),
                                      (f"{key}.json", json.dumps({"key": key}).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(content)
                    tar.addfile(info, io.BytesIO(content))
    (root / "parquet").mkdir()
    pq.write_table(pa.table({"key": keys, "caption": captions,
                             "image": [{"bytes": d, "path": None} for d in jpegs]}),
                   root / "parquet" / "set.parquet", row_group_size=1000)
    datasets.Dataset.from_dict({"id": keys, "text": captions, "image": [{"bytes": d, "path": None} for d in jpegs]},
                               features=datasets.Features({"id": datasets.Value("string"),
                                                           "text": datasets.Value("string"),
                                                           "image": datasets.Image()})).save_to_disk(str(root / "hf"))
    return {"folder (JSONL + JPEG files)": (root / "folder" / "captions.jsonl", root / "folder" / "images"),
            "WebDataset shards": (root / "wds", root / "wds"),
            "Parquet (image bytes inside)": (root / "parquet" / "set.parquet", root / "parquet"),
            "Hugging Face save_to_disk": (root / "hf", root)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=128, help="image side in pixels (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sets = write_sets(Path(tmp), args.samples, args.size)
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in sets}
        for _ in range(args.rounds):
            for name, (captions, images) in sets.items():
                out = subprocess.run([sys.executable, "-c", READ, str(captions), str(images)], capture_output=True,
                                     text=True, check=True).stdout.split()
                assert int(out[0]) == args.samples, out
                results[name].append((float(out[1]), float(out[2])))
    folder = statistics.median(t for t, _ in results["folder (JSONL + JPEG files)"])
    print(f"{args.samples} samples, {args.size}x{args.size} JPEGs, {args.rounds} rounds (medians)\n")
    print("| input | seconds | samples/s | vs folder | peak RSS growth (MiB) |\n| --- | --- | --- | --- | --- |")
    for name, runs in results.items():
        t, rss = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        print(f"| {name} | {t:.1f} | {args.samples / t:.0f} | {folder / t:.2f}x | {rss:.0f} |")


if __name__ == "__main__":
    main()
