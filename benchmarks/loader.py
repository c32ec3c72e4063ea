"""Pictures/s of each training data path, per CPU core, and what 16 cores would give (the H200 machine's count).

The goal (docs/benchmarks.md): ViT-B-32 at N = 1024 and 35 % MFU needs ~7,800 pairs/s, i.e. ~15,600 pictures/s
decoded, resized to 224 and normalised. Inputs: COCO-like 640x480 JPEGs (quality 90) and 512x512 edits (quality
95, as `plant` writes them), made here with natural-image-like content (smooth gradients, edges and noise, so
they compress like photographs). Each path runs in this process on one thread, rounds alternating, medians:

- ``PIL``: what `train` does without a cache: decode with PIL, open_clip's eval transform (bicubic resize to
  224, centre crop, to-tensor, normalise);
- ``PIL draft``: the same with ``Image.draft`` (the JPEG decoder scales by 1/2, 1/4, 1/8 while decoding; other
  pixels than training, shown for reference);
- ``torchvision decode_jpeg``: libjpeg-turbo into a tensor, antialiased bicubic resize and crop on the tensor
  (the CPU twin of ``decode_jpeg(device="cuda")``; other pixels than PIL's);
- ``image cache``: `concrete-jungle cache`'s path: gather uint8 rows at random from the memory-mapped cache (all a
  CPU does when training on a GPU, which normalises), and the same with the normalisation on the CPU.

The projection multiplies the per-core rate by 16 and assumes perfect scaling: decoding scales with cores; the
cache's gather is a memory copy (150 KB a picture), bounded by memory bandwidth long before 16 cores.

    python benchmarks/loader.py --pictures 256 --rounds 3
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

TARGET = 15_600  # pictures/s: 7,800 pairs/s, ViT-B-32 at N = 1024 and 35 % MFU on one H200


def photo_like(rng: np.random.Generator, width: int, height: int) -> Image.Image:
    """Gradients, a few hard-edged shapes and sensor-like noise: compresses like a photograph, not like noise."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([np.sin(x / rng.uniform(30, 90) + rng.uniform(0, 6)) * 60 + rng.uniform(80, 170)
                     + y * rng.uniform(-0.1, 0.1) for _ in range(3)], axis=-1)
    for _ in range(6):
        cx, cy, r = rng.uniform(0, width), rng.uniform(0, height), rng.uniform(20, 120)
        base[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = rng.uniform(0, 255, 3)
    base += rng.normal(0, 6, base.shape)
    return Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))


def jpegs(n: int, size: tuple[int, int], quality: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        buf = io.BytesIO()
        photo_like(rng, *size).save(buf, "JPEG", quality=quality)
        out.append(buf.getvalue())
    return out


def main() -> None:
    import open_clip
    import torchvision.transforms.v2.functional as TF
    from torchvision.io import decode_jpeg

    from concrete_jungle.train.image_cache import split_preprocess

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pictures", type=int, default=256, help="pictures per input kind and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=224, help="the model's input side (ViT-B-32: 224)")
    ap.add_argument("--cores", type=int, default=16, help="cores to project to")
    args = ap.parse_args()
    torch.set_num_threads(1)

    preprocess = open_clip.image_transform(args.size, is_train=False)
    geometric, mean, std = split_preprocess(preprocess)
    inputs = {"COCO-like 640x480 q90": jpegs(args.pictures, (640, 480), 90, 0),
              "512x512 edit q95": jpegs(args.pictures, (512, 512), 95, 1)}

    def pil(data: bytes) -> torch.Tensor:
        return preprocess(Image.open(io.BytesIO(data)))

    def pil_draft(data: bytes) -> torch.Tensor:
        im = Image.open(io.BytesIO(data))
        im.draft("RGB", (args.size, args.size))
        return preprocess(im)

    def tv(data: bytes) -> torch.Tensor:
        x = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        x = TF.resize(x, [args.size], interpolation=TF.InterpolationMode.BICUBIC, antialias=True)
        x = TF.center_crop(x, [args.size, args.size])
        return x.to(torch.float32).div(255).sub_(mean).div_(std)

    with tempfile.TemporaryDirectory() as tmp:  # a cache file as `concrete-jungle cache` writes it
        rows = 4 * args.pictures
        cache = np.memmap(Path(tmp) / "images.u8", dtype=np.uint8, mode="w+", shape=(rows, 3, args.size, args.size))
        sample = np.asarray(geometric(Image.open(io.BytesIO(inputs["COCO-like 640x480 q90"][0]))), np.uint8)
        cache[:] = sample.transpose(2, 0, 1)
        cache.flush()
        cache = np.memmap(Path(tmp) / "images.u8", dtype=np.uint8, mode="r", shape=(rows, 3, args.size, args.size))
        order = np.random.default_rng(0).permutation(rows)

        def cached(normalise: bool, batch: int = 64) -> int:
            done = 0
            for at in range(0, len(order), batch):
                rows = torch.from_numpy(cache[np.sort(order[at: at + batch])])
                if normalise:
                    rows.to(torch.float32).div(255).sub_(mean).div_(std)
                done += len(rows)
            return done

        rates: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for kind, data in inputs.items():
                for name, fn in (("PIL (training without a cache)", pil), ("PIL draft", pil_draft),
                                 ("torchvision decode_jpeg + resize", tv)):
                    t0 = time.perf_counter()
                    for d in data:
                        fn(d)
                    rates.setdefault((name, kind), []).append(len(data) / (time.perf_counter() - t0))
            for name, normalise in (("image cache: gather uint8 (the CPU's part in GPU training)", False),
                                    ("image cache: gather + normalise on the CPU", True)):
                t0 = time.perf_counter()
                n = cached(normalise)
                rates.setdefault((name, "any source"), []).append(n / (time.perf_counter() - t0))

    print(f"torch {torch.__version__}, 1 thread, {args.pictures} pictures per kind, {args.rounds} rounds (medians); "
          f"target {TARGET:,} pictures/s")
    print(f"| path | input | pictures/s per core | projected to {args.cores} cores | vs target |")
    print("| --- | --- | --- | --- | --- |")
    for (name, kind), values in rates.items():
        rate = statistics.median(values)
        print(f"| {name} | {kind} | {rate:,.0f} | {rate * args.cores:,.0f} | {rate * args.cores / TARGET:.2f}x |")


if __name__ == "__main__":
    main()
