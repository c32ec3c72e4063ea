"""Evaluation time per 1,000 items of the benchmarks whose files this script can write, and, for zero-shot
classification and retrieval, against clip_benchmark's own loop on the same weights and pictures.

A random-init open_clip model (``--model``, default ViT-B-32) on the CPU. Files, written to a temporary data root
in the layouts `eval` reads: a zero-shot ImageFolder (``--classes`` x ``--per-class`` noise JPEGs, ``--templates``
prompts), a Flickr30k Karpathy split (``--images`` pictures, five captions each, 6-18 words, which also serves
aro_order), and the test fixtures of SugarCrepe, SugarCrepe++ and Winoground (tests/benchmark_fixtures.py).
Seconds are per benchmark's whole evaluation (`evaluation.evaluate_one`, reading included), scaled to 1,000 items
(the result's ``n``: pictures for zero-shot, pictures and captions for retrieval, the queries). The references:
``zero_shot_classifier`` + ``run_classification`` of clip_benchmark's ``metrics/zeroshot_classification.py`` (what
its ``evaluate`` runs) on torchvision's ImageFolder, and its ``zeroshot_retrieval.evaluate`` on the split's
pictures with their captions, both with ``amp=False`` (our fp32) and the same batch size, loaders without workers.
Per item, the same decisions are asserted: each picture's predicted class (argmax), each query's top-1 hit, and
Recall@1/5/10 equal (to 1e-6: clip_benchmark's are float32 means). Goal: >= 2x clip_benchmark.

    python benchmarks/eval_suite_speed.py --classes 10 --per-class 4 --images 16
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from benchmark_fixtures import write_data_root, write_winoground  # noqa: E402

from concrete_jungle.evaluation import evaluate_one, load_data  # noqa: E402
from concrete_jungle.evaluation.benchmarks import zeroshot  # noqa: E402
from concrete_jungle.evaluation.encoding import Crop, Encoder  # noqa: E402
from concrete_jungle.models import load_model  # noqa: E402

WORDS = ("a dog cat man woman child red blue green small large wooden old young sits stands runs on under "
         "beside near the table street field beach sofa window bicycle car kite ball tree house").split()


def noise_jpeg(path: Path, rng, size=(320, 240)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(path, quality=90)


def write_zeroshot(root: Path, classes: int, per_class: int, templates: int, rng) -> Path:
    folder = root / "zeroshot" / "synthetic"
    names = [f"thing {k}" for k in range(classes)]
    for k in range(classes):
        for i in range(per_class):
            noise_jpeg(folder / "test" / f"c{k:03d}" / f"{i}.jpg", rng)
    (folder / "classnames.txt").write_text("\n".join(names) + "\n")
    prompts = ["a photo of a {c}.", "a blurry photo of a {c}.", "a close-up photo of the {c}.", "a drawing of a {c}.",
               "a photo of the large {c}.", "a photo of a small {c}.", "a bright photo of a {c}.", "art of the {c}."]
    (folder / "templates.txt").write_text("\n".join((prompts * templates)[:templates]) + "\n")
    return folder


def write_flickr(root: Path, images: int, rng) -> Path:
    folder = root / "flickr30k"
    listed = []
    for i in range(images):
        noise_jpeg(folder / "images" / f"{i}.jpg", rng)
        captions = [" ".join(rng.choice(WORDS, size=rng.integers(6, 19))) for _ in range(5)]
        listed.append({"split": "test", "filename": f"{i}.jpg", "sentences": [{"raw": c} for c in captions]})
    (folder / "dataset_flickr30k.json").write_text(json.dumps({"images": listed}))
    return folder


class Recording(torch.nn.Module):
    """The model with every encoder output kept, so that the reference's features give its per-item decisions
    (clip_benchmark's retrieval returns only the recalls)."""

    def __init__(self, model):
        super().__init__()
        self.model, self.images, self.texts = model, [], []

    def encode_image(self, x):
        self.images.append(self.model.encode_image(x))
        return self.images[-1]

    def encode_text(self, x):
        self.texts.append(self.model.encode_text(x))
        return self.texts[-1]


class Captioned(torch.utils.data.Dataset):
    """(picture, its captions), as clip_benchmark's caption datasets yield them."""

    def __init__(self, items, preprocess):
        self.items, self.preprocess = items, preprocess

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, captions = self.items[i]
        with Image.open(path) as im:
            return self.preprocess(im.convert("RGB")), captions


@torch.no_grad()
def reference_zeroshot(clip, data: dict, batch_size: int) -> torch.Tensor:
    """Each picture's argmax class by clip_benchmark's loop, in ``data``'s item order."""
    from clip_benchmark.metrics import zeroshot_classification as zsc
    from torchvision.datasets import ImageFolder

    d = data["datasets"]["synthetic"]
    dataset = ImageFolder(str(d["folder"]), transform=clip.preprocess)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=0)
    weights = zsc.zero_shot_classifier(clip.model, clip.tokenizer, d["classes"], d["templates"], "cpu", amp=False)
    logits, _ = zsc.run_classification(clip.model, weights, loader, "cpu", amp=False)
    at = {Path(p): i for i, (p, _) in enumerate(dataset.samples)}
    return logits.argmax(dim=1)[[at[Path(p)] for p, _ in data["items"]["synthetic"]]]


@torch.no_grad()
def reference_retrieval(clip, data: dict, batch_size: int) -> tuple[dict, torch.Tensor]:
    """clip_benchmark's recalls and its scores (captions x pictures, in ``data``'s order)."""
    from clip_benchmark.datasets.builder import image_captions_collate_fn
    from clip_benchmark.metrics import zeroshot_retrieval

    recording = Recording(clip.model)
    loader = torch.utils.data.DataLoader(Captioned(data["items"], clip.preprocess), batch_size=batch_size,
                                         num_workers=0, collate_fn=image_captions_collate_fn)
    metrics = zeroshot_retrieval.evaluate(recording, loader, clip.tokenizer, "cpu", amp=False,
                                          recall_k_list=[1, 5, 10])
    images = F.normalize(torch.cat(recording.images), dim=-1)
    texts = F.normalize(torch.cat(recording.texts), dim=-1)
    return metrics, texts @ images.T


@torch.no_grad()
def our_zeroshot_argmax(encoder: Encoder, data: dict) -> torch.Tensor:
    """Each picture's argmax class from the features `zeroshot.evaluate` used (its encoder keeps them)."""
    d = data["datasets"]["synthetic"]
    images = encoder.images([Crop(p) for p, _ in data["items"]["synthetic"]])
    return ((100.0 * images) @ zeroshot.classifier(encoder, d["classes"], d["templates"])).argmax(dim=1)


def timed(call):
    t0 = time.perf_counter()
    out = call()
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--per-class", type=int, default=4)
    ap.add_argument("--templates", type=int, default=8)
    ap.add_argument("--images", type=int, default=16, help="retrieval pictures (five captions each; at least 10)")
    ap.add_argument("--winoground", type=int, default=8, help="Winoground examples")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    clip = load_model(args.model, "none", seed=0)
    rows, checks = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_zeroshot(root, args.classes, args.per_class, args.templates, rng)
        write_flickr(root, args.images, rng)
        write_data_root(root)
        write_winoground(root / "winoground", "caption {} one", "one caption {}", n=args.winoground)
        for name in ("zeroshot", "retrieval", "aro_order", "sugarcrepe", "sugarcrepe_pp", "winoground"):
            encoder = Encoder(clip, batch_size=args.batch_size, progress=False)
            result, seconds = timed(lambda: evaluate_one(name, encoder, load_data(name, root, False)))
            data = load_data(name, root, False)
            items = result["n"] if isinstance(result["n"], int) else sum(result["n"].values())
            if name == "zeroshot":
                reference, ref_seconds = timed(lambda: reference_zeroshot(clip, data, args.batch_size))
                same = torch.equal(our_zeroshot_argmax(encoder, data), reference)
                checks.append(f"zero-shot: each picture's argmax class equal: {same}")
            elif name == "retrieval":
                (ref_metrics, scores), ref_seconds = timed(lambda: reference_retrieval(clip, data, args.batch_size))
                series = result["outcomes"]["series"]
                owner = torch.tensor([i for i, (_, caps) in enumerate(data["items"]) for _ in caps])
                t2i = torch.equal(scores.argmax(dim=1) == owner, torch.tensor(series["t2i_rank"]["values"]) == 0)
                i2t = torch.equal(owner[scores.argmax(dim=0)] == torch.arange(len(data["items"])),
                                  torch.tensor(series["i2t_rank"]["values"]) == 0)
                recalls = all(abs(result["metrics"][k] - ref_metrics[k]) < 1e-6 for k in ref_metrics)
                same = t2i and i2t and recalls
                checks.append(f"retrieval: each caption's and picture's top-1 hit equal: {t2i and i2t}; "
                              f"Recall@1/5/10 equal: {recalls}")
            else:
                ref_seconds = same = None
            rows.append((name, items, seconds, ref_seconds))
            if same is False:
                sys.exit("\n".join(checks) + f"\n{name}: the decisions differ from clip_benchmark's")
    print(f"model {args.model} (random init, CPU fp32, {args.threads} threads), batch {args.batch_size}, "
          f"pictures 320x240 JPEG; torch {torch.__version__}\n")
    print("| benchmark | items | seconds | s per 1,000 items | clip_benchmark s per 1,000 | speed-up |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, items, seconds, ref_seconds in rows:
        per = 1000 * seconds / items
        ref = "" if ref_seconds is None else f"{1000 * ref_seconds / items:.1f}"
        ratio = "" if ref_seconds is None else f"**{ref_seconds / seconds:.2f}x**"
        print(f"| {name} | {items} | {seconds:.1f} | {per:.1f} | {ref} | {ratio} |")
    print("\n" + "\n".join(checks))


if __name__ == "__main__":
    main()
