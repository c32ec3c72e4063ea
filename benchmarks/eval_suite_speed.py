"""Evaluation time per 1,000 items of every benchmark of the registry, and, for zero-shot classification and
retrieval, against clip_benchmark's own loop on the same weights and pictures.

A random-init open_clip model (``--model``, default ViT-B-32) on the CPU. Files, written to a temporary data root per
benchmark in the layout `eval` reads: a zero-shot ImageFolder (``--classes`` x ``--per-class`` noise JPEGs,
``--templates`` prompts) and a Flickr30k Karpathy split (``--images`` pictures, five captions each, 6-18 words, which
also serves aro_order), both 320x240; Winoground's fixture with ``--winoground`` examples; every other benchmark's
test fixture in its release layout, as written (tests/benchmark_fixtures.py, `every_benchmark_writer`: a few to a
few dozen items each, 48x40 noise pictures). Seconds are a benchmark's whole evaluation (`evaluation.load_data`
reading its files, then `evaluation.evaluate_one`), the fastest of ``--repeats`` runs, each with a fresh encoder
(nothing cached), scaled linearly to 1,000 items (the result's ``n`` summed over its parts: pictures for zero-shot
and the probes, pictures plus captions for retrieval, examples elsewhere); the fastest run leaves out what a process
pays once (imports, the spaCy pipeline and NLTK for aro_order, the model's first pass). The references:
``zero_shot_classifier`` + ``run_classification`` of clip_benchmark's ``metrics/zeroshot_classification.py`` (what
its ``evaluate`` runs) on torchvision's ImageFolder, and its ``zeroshot_retrieval.evaluate`` on the split's
pictures with their captions, both with ``amp=False`` (our fp32) and the same batch size, loaders without workers,
timed alike (fastest of the repeats, each run beside ours). Per item, the same decisions are asserted: each
picture's predicted class (argmax), each query's top-1 hit, and Recall@1/5/10 equal (to 1e-6: clip_benchmark's are
float32 means). Goal: >= 2x clip_benchmark. ``--quick``: the tiny model, a few pictures, one run (the test's).

    python benchmarks/eval_suite_speed.py --classes 10 --per-class 4 --images 16 --repeats 3
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
from benchmark_fixtures import every_benchmark_writer, write_winoground  # noqa: E402
from concrete_jungle.evaluation import BENCHMARKS, evaluate_one, load_data  # noqa: E402
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


def writers(args, rng) -> dict:
    """A fixture writer per benchmark (name -> a function of its data root), the scaled ones where the test's
    fixture is too small to time (zero-shot, retrieval and its order tasks, Winoground)."""
    return every_benchmark_writer() | {
        "zeroshot": lambda root: write_zeroshot(root, args.classes, args.per_class, args.templates, rng),
        "retrieval": lambda root: write_flickr(root, args.images, rng),
        "aro_order": lambda root: write_flickr(root, args.images, rng),
        "winoground": lambda root: write_winoground(root / "winoground", "caption {} one", "one caption {}",
                                                    n=args.winoground)}


def items_of(n) -> int:
    """A result's ``n`` summed over its parts (nested for NegBench's retrieval)."""
    return n if isinstance(n, int) else sum(map(items_of, n.values()))


def same_as_clip_benchmark(name: str, clip, encoder, result: dict, data: dict, batch_size: int, checks: list):
    """clip_benchmark's loop on ``data``, timed, and whether its per-item decisions are ours (None, None where it
    has no such loop); the check's line goes to ``checks``."""
    if name == "zeroshot":
        reference, ref_seconds = timed(lambda: reference_zeroshot(clip, data, batch_size))
        same = torch.equal(our_zeroshot_argmax(encoder, data), reference)
        checks.append(f"zero-shot: each picture's argmax class equal: {same}")
        return ref_seconds, same
    if name == "retrieval":
        (ref_metrics, scores), ref_seconds = timed(lambda: reference_retrieval(clip, data, batch_size))
        series = result["outcomes"]["series"]
        owner = torch.tensor([i for i, (_, caps) in enumerate(data["items"]) for _ in caps])
        t2i = torch.equal(scores.argmax(dim=1) == owner, torch.tensor(series["t2i_rank"]["values"]) == 0)
        i2t = torch.equal(owner[scores.argmax(dim=0)] == torch.arange(len(data["items"])),
                          torch.tensor(series["i2t_rank"]["values"]) == 0)
        recalls = all(abs(result["metrics"][k] - ref_metrics[k]) < 1e-6 for k in ref_metrics)
        checks.append(f"retrieval: each caption's and picture's top-1 hit equal: {t2i and i2t}; "
                      f"Recall@1/5/10 equal: {recalls}")
        return ref_seconds, t2i and i2t and recalls
    return None, None


def time_benchmark(name: str, root: Path, clip, args, checks: list) -> dict:
    """The fastest of ``args.repeats`` evaluations of benchmark ``name`` (and of clip_benchmark's loop where it has
    one), each with a fresh encoder; exits where a decision differs from clip_benchmark's."""
    best = {"seconds": float("inf"), "ref_seconds": None}
    for _ in range(args.repeats):
        encoder = Encoder(clip, batch_size=args.batch_size, progress=False)
        data, read = timed(lambda: load_data(name, root, name == "vtab"))  # vtab: one task of its nineteen
        result, evaluated = timed(lambda: evaluate_one(name, encoder, data))
        row = {"items": items_of(result["n"]), "seconds": read + evaluated, "read": read} | {
            f"{kind}_encoded": count for kind, count in encoder.encoded.items()}
        ref_seconds, same = same_as_clip_benchmark(name, clip, encoder, result, data, args.batch_size, checks)
        if same is False:
            sys.exit("\n".join(checks) + f"\n{name}: the decisions differ from clip_benchmark's")
        if ref_seconds is not None:
            best["ref_seconds"] = min(ref_seconds, best["ref_seconds"] or ref_seconds)
        if row["seconds"] < best["seconds"]:
            best |= row
    return best


def table(rows: dict) -> list[str]:
    lines = ["| benchmark | items timed | pictures, texts encoded | seconds (of which reading) | s per 1,000 items "
             "| clip_benchmark s per 1,000 | speed-up |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, r in rows.items():
        per, items = 1000 / r["items"], r["items"]
        ref = "" if r["ref_seconds"] is None else f"{per * r['ref_seconds']:.1f}"
        ratio = "" if r["ref_seconds"] is None else f"**{r['ref_seconds'] / r['seconds']:.2f}×**"
        lines.append(f"| {name} | {items} | {r['images_encoded']}, {r['texts_encoded']} | {r['seconds']:.2f} "
                     f"({r['read']:.2f}) | {per * r['seconds']:.1f} | {ref} | {ratio} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--per-class", type=int, default=4)
    ap.add_argument("--templates", type=int, default=8)
    ap.add_argument("--images", type=int, default=16, help="retrieval pictures (five captions each; at least 10)")
    ap.add_argument("--winoground", type=int, default=8, help="Winoground examples")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="runs per benchmark; the fastest is reported")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--only", nargs="+", choices=BENCHMARKS, metavar="NAME",
                    help="time these benchmarks alone (default: every one of the registry)")
    ap.add_argument("--quick", action="store_true",
                    help="the tiny random model (cj-tiny), 3 classes x 2 pictures, 10 retrieval pictures, one run")
    args = ap.parse_args(argv)
    if args.quick:
        args.model, args.classes, args.per_class, args.templates, args.images, args.winoground, args.repeats = (
            "cj-tiny", 3, 2, 2, 10, 3, 1)
    if args.images < 10:
        ap.error(f"--images {args.images}: clip_benchmark's Recall@10 needs at least 10 pictures; give --images 10 "
                 "or more")
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    clip = load_model(args.model, "none", seed=0)
    rows, checks = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        write = writers(args, rng)
        names = args.only or list(BENCHMARKS)
        for name in names:
            write[name](Path(tmp) / name)
            rows[name] = time_benchmark(name, Path(tmp) / name, clip, args, checks)
            print(f"{len(rows)}/{len(names)} {name}: {rows[name]['seconds']:.2f} s for {rows[name]['items']} "
                  "items", file=sys.stderr, flush=True)
    print(f"model {args.model} (random init, CPU fp32, {args.threads} threads), batch {args.batch_size}, fastest "
          f"of {args.repeats} run(s) per benchmark; per 1,000 items scaled linearly from the items timed; torch "
          f"{torch.__version__}\n")
    print("\n".join(table(rows)))
    print("\n" + "\n".join(dict.fromkeys(checks)))


if __name__ == "__main__":
    main()
