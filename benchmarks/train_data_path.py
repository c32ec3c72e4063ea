"""End-to-end `train()` on one of its data paths against the same training step on batches already resident.

A synthetic COCO-size ConcreteBatch (anchors 640x480 JPEG quality 90, negatives 512x512 quality 95, as `plant`
writes them; ``--records`` of them, cycling 256 distinct pictures) is planted with the real shard writer. Then
`train()` runs ``--steps`` steps on it through the chosen path:

- ``cache``: cached for the model first with `image_cache.build_cache` (timed: the one-off decode); steps gather
  uint8 rows through DataLoader workers, copy them to the device and normalise there;
- ``preload``: decoded and preprocessed once into memory (a dataset within ``data.preload_mib``);
- ``decode``: decoded per step by DataLoader workers (no cache, no preloading).

The reference is `training_step` on one batch kept on the device (the model's compute alone: forward, backward,
AdamW). Same model, N, precision and optimizer. Reported: pairs/s of each (median over the steps after the
first 5), their ratio, and for ViT-B-32 the model FLOPs utilisation. Goals: on the GPU, cache end to end >= 0.90
of resident; on the CPU, the preloaded step costs <= 1.10x the resident one.

    python benchmarks/train_data_path.py --model ViT-B-32 --n 1024 --device cuda --precision amp_bf16 --path cache
    python benchmarks/train_data_path.py --model cj-demo --n 64 --device cpu --precision fp32 --path preload
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from loader import photo_like  # noqa: E402


def _jpeg(args) -> bytes:
    seed, size, quality = args
    buf = io.BytesIO()
    photo_like(np.random.default_rng(seed), *size).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def plant_synthetic(root: Path, records: int, per_shard: int = 1000) -> None:
    from concrete_jungle.concretebatch import ShardWriter, sample_key, shard_name, write_shard_manifest

    with Pool(os.cpu_count()) as pool:
        anchors = pool.map(_jpeg, [(i, (640, 480), 90) for i in range(256)])
        negatives = pool.map(_jpeg, [(10_000 + i, (512, 512), 95) for i in range(256)])
    words = "a red blue green car dog cat bench table next to under on the small large".split()
    rng = np.random.default_rng(0)
    root.mkdir(parents=True)
    for shard in range(0, (records + per_shard - 1) // per_shard):
        writer, rows = ShardWriter(root / shard_name(shard)), []
        for i in range(shard * per_shard, min(records, (shard + 1) * per_shard)):
            caption = " ".join(rng.choice(words, 12))
            c = float(rng.uniform(2, 5))
            writer.write(sample_key(str(i)), anchors[i % 256], caption, negatives[i % 256], caption + " again",
                         {"id": str(i), "concreteness": c})
            rows.append({"id": str(i), "shard": shard_name(shard), "status": "ok", "concreteness": c})
        write_shard_manifest(root, shard, rows, writer.commit())


def main() -> None:
    import torch

    from concrete_jungle.loss import CementLoss
    from concrete_jungle.models import load_model
    from concrete_jungle.train.config import load_config
    from concrete_jungle.train.image_cache import CachedSet, build_cache
    from concrete_jungle.train.loop import param_groups, train, use_open_clip_cuda_settings
    from concrete_jungle.train.objective import StepContext, training_step

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", default="amp_bf16", choices=["fp32", "amp_bf16"])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--path", choices=["cache", "preload", "decode"], default="cache")
    ap.add_argument("--records", type=int, help="default: 6 N (three steps' worth of pairs, twice)")
    ap.add_argument("--workers", type=int, default=min(12, os.cpu_count() or 1))
    ap.add_argument("--gflops-per-pair", type=float, default=8.82 + 5.96, help="ViT-B-32 image + text forward")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    args = ap.parse_args()
    records = args.records or 6 * args.n
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "D_synthetic"
        t0 = time.perf_counter()
        plant_synthetic(root, records)
        planted = time.perf_counter() - t0
        clip = load_model(args.model, "none", device=args.device)
        print(f"{records} records planted in {planted:.0f} s")
        t0 = time.perf_counter()
        folder = build_cache(root, clip, workers=args.workers, progress=False)  # also the reference's batch
        cached_s = time.perf_counter() - t0
        print(f"cached in {cached_s:.0f} s ({2 * records / cached_s:.0f} pictures/s with {args.workers} workers, "
              f"{sum(p.stat().st_size for p in folder.iterdir()) / 2**30:.2f} GiB)")
        if args.path != "cache":  # preload or decode: the trainer must not find the cache
            folder = folder.rename(folder.with_name("reference"))
        preload = {"cache": 0, "preload": 1 << 20, "decode": 0}[args.path]
        config = load_config(None, [f"out={tmp}/run", f"model.name={args.model}", "model.pretrained=none",
                                    f"model.precision={args.precision}", f"device={args.device}",
                                    f"data.concretebatch=['{root}']", f"data.workers={args.workers}",
                                    f"data.preload_mib={preload}", f"batch_size={args.n}", f"steps={args.steps}",
                                    "save_every=0", "optim.warmup=2"])
        train(config, progress=False)
        rows = [json.loads(line) for line in open(f"{tmp}/run/metrics.jsonl")]
        end_to_end = statistics.median(r["samples_per_s"] for r in rows[5:])

        # the reference: the same step on one batch that never leaves the device
        device = args.device
        if device.startswith("cuda"):
            use_open_clip_cuda_settings()
        model = load_model(args.model, "none", device=device).model.train()
        optimizer = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-5, fused=device.startswith("cuda") or None)
        dataset = CachedSet([folder])
        batch = tuple(t.to(device) for t in dataset.batch(list(range(args.n))))
        loss = CementLoss("cement")
        autocast = device.startswith("cuda") and args.precision == "amp_bf16"
        step = StepContext(model, model, loss, optimizer, device, 1.0, autocast, dataset.normalize)
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            out = training_step(step, batch, 1e-5)
            out["contrastive_loss"].item()
            times.append(time.perf_counter() - t0)
        resident = args.n / statistics.median(times[5:])
    print(f"{args.model}, N = {args.n}, {args.device}, {args.precision}, torch {torch.__version__}, "
          f"{args.workers} workers")
    print("| | pairs/s | ms/step | MFU |\n| --- | --- | --- | --- |")
    for name, rate in ((f"train() end to end, {args.path}", end_to_end),
                       ("training step, batch resident on the device", resident)):
        mfu = rate * 3 * args.gflops_per_pair * 1e9 / (args.peak_tflops * 1e12)  # the FLOPs are ViT-B-32's
        print(f"| {name} | {rate:,.0f} | {1000 * args.n / rate:.1f} | "
              f"{f'{100 * mfu:.1f} %' if args.model == 'ViT-B-32' else '-'} |")
    print(f"end to end / resident: {end_to_end / resident:.3f} (step cost {resident / end_to_end:.3f}x)")


if __name__ == "__main__":
    main()
