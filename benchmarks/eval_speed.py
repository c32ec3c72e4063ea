"""Time of our SugarCrepe evaluation against the per-item reference loop, same model and images.

The reference is the SugarCrepe paper's loop: for every item, encode its image and both captions alone
and compare. Ours encodes each unique image (1,560 for 7,511 items) and caption once, in batches, the captions
at the batch's longest caption (sorted by length; `models/text_encoding.py`), and once more at the full 77-token
context (`--no-trim-text`'s path). A random-init open_clip model (`--model`, default the tiny `cj-tiny`) on the
CPU and the official JSON with generated images under the official file names; every path gives the same
per-item answers (checked here too). Goals: cj-tiny >= 4x; ViT-B-32 >= 3x.

    python benchmarks/eval_speed.py --json-dir data/sugarcrepe
    python benchmarks/eval_speed.py --json-dir data/sugarcrepe --model ViT-B-32 --items 150   # per subset
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from concrete_jungle.evaluation import sugarcrepe
from concrete_jungle.evaluation.encoding import Encoder
from concrete_jungle.models import load_model


@torch.no_grad()
def reference(clip, data) -> dict:
    out = {}
    for subset, items in data["items"].items():
        flags = []
        for key, path, caption, negative in items:
            with Image.open(path) as im:
                image = F.normalize(clip.model.encode_image(clip.preprocess(im.convert("RGB"))[None]), dim=-1)
            pos, neg = (F.normalize(clip.model.encode_text(clip.tokenizer([t])), dim=-1) for t in (caption, negative))
            flags.append((key, bool((image @ pos.T) > (image @ neg.T))))
        out[subset] = flags
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json-dir", required=True)
    ap.add_argument("--subsets", default=",".join(sugarcrepe.SUBSETS))
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--model", default="cj-tiny")
    ap.add_argument("--items", type=int, help="the first N items of each subset (the per-item loop is slow)")
    args = ap.parse_args()
    subsets = args.subsets.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        images = Path(tmp)
        names = {v["filename"] for s in subsets
                 for v in json.loads((Path(args.json_dir) / f"{s}.json").read_text()).values()}
        rng = np.random.default_rng(0)
        for name in sorted(names):
            Image.fromarray(rng.integers(0, 255, (480, 640, 3), dtype=np.uint8)).save(images / name, quality=90)
        data = sugarcrepe.load(args.json_dir, images, subsets=subsets)
        if args.items:
            data = {"items": {s: v[: args.items] for s, v in data["items"].items()}, "skipped": data["skipped"]}
        clip = load_model(args.model, "none", seed=0)
        timed, answers = {}, {}
        for name, trim in (("concrete-jungle, full 77-token context", False), ("concrete-jungle", True)):
            t0 = time.perf_counter()
            outcomes = sugarcrepe.evaluate(Encoder(clip, batch_size=args.batch_size, progress=False,
                                                   trim_text=trim), data)["outcomes"]["series"]
            answers[name] = {s: list(zip(v["keys"], map(bool, v["values"]))) for s, v in outcomes.items()}
            timed[name] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref = reference(clip, data)
        ref_t = time.perf_counter() - t0
    n = sum(len(v) for v in data["items"].values())
    same = all(a == ref for a in answers.values())
    used = {it[1] for v in data["items"].values() for it in v}
    print(f"items: {n}, unique images: {len(used)}, images 640x480 JPEG, model {args.model} (random init, CPU, "
          f"{torch.get_num_threads()} threads), batch {args.batch_size}\n")
    print("| | seconds | items/s | speed-up |\n| --- | --- | --- | --- |")
    print(f"| per-item reference loop | {ref_t:.1f} | {n / ref_t:.0f} | 1 |")
    for name, t in timed.items():
        print(f"| {name} | {t:.1f} | {n / t:.0f} | {ref_t / t:.2f}x |")
    print(f"\nsame per-item answers on every path: {same}")


if __name__ == "__main__":
    main()
