"""Samples/s of a ConcretePlant run with scoring on against the same run with scoring off.

The toy world planted in mode hc with the toy captioner and the toy editor (`toyworld.rewrite`), the captioner and
editor loaded once and handed to every run; keywords are sampled once beforehand and copied into each run's folder
(their cost is spaCy's, `keywords_throughput.py`). Scoring on adds, in every batch, the scorers of
`score_separation.py`: ``open_clip`` and ``clip_sim`` on the toy CLIP `cj-demo` (random init unless ``--weights``
names a pretrained file: the weights' values do not change the arithmetic) and ``pixel``; ``--scorer-set table1``
takes the default scorers instead (BERTScore roberta-large, DINOv2-base, open_clip ViT-L-14 openai), whose weights
must be in the local caches. Rounds alternate off and on. Each run gives its whole time (the scorers' loading
included) and its steady rate after the first written batch (``seconds_to_first_batch`` of its summary); the ratio
is on / off.

    python benchmarks/scoring_throughput.py --scenes 1000 --rounds 3
    python benchmarks/scoring_throughput.py --scenes 2000 --rounds 3 --device cuda --scorer-set table1   # a GPU
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from concrete_jungle import plant
from concrete_jungle.plant import PlantConfig
from concrete_jungle.plant.scoring import ScoringConfig
from concrete_jungle.toyworld.build import WorldConfig, build_world
from concrete_jungle.toyworld.rewrite import ToyCaptioner, ToyEditor


def scoring(scorer_set: str, weights: str, device: str) -> ScoringConfig:
    if scorer_set == "table1":
        return ScoringConfig(device=device)  # the defaults: bertscore, dino, open_clip
    clip = {"model": "cj-demo", "pretrained": weights}
    return ScoringConfig(scorers={"open_clip": dict(clip), "clip_sim": dict(clip), "pixel": {}}, device=device)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenes", type=int, default=1000, help="training scenes of the world (one pair each)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating off/on rounds (medians)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--device", default="cpu", help="where the scorers run")
    ap.add_argument("--scorer-set", choices=("toy", "table1"), default="toy")
    ap.add_argument("--weights", default="none", help="the toy CLIP's weights file (default: random init)")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        world = tmp / "world"
        build_world(world, WorldConfig(train=args.scenes, test=20), progress=False)
        captioner, editor = ToyCaptioner(), ToyEditor(world)
        base = PlantConfig(captions=[str(world / "captions.jsonl")], images=str(world / "images"),
                           out=str(tmp / "warm"), mode="hc", batch_size=args.batch_size, samples_per_shard=500)
        plant.run(base, captioner, editor, progress=False)  # keywords, imports, caches
        scored = PlantConfig(**{**base.__dict__, "scoring": scoring(args.scorer_set, args.weights, args.device)})
        runs: dict[str, list[dict]] = {"off": [], "on": []}
        for r in range(args.rounds):
            for label, config in (("off", base), ("on", scored)):
                out = tmp / f"{label}-{r}"
                out.mkdir()
                for f in (tmp / "warm").glob("keywords-*"):
                    shutil.copy(f, out / f.name)
                t0 = time.perf_counter()
                summary = plant.run(PlantConfig(**{**config.__dict__, "out": str(out)}), captioner, editor,
                                    progress=False)
                wall = time.perf_counter() - t0
                first = min(args.batch_size, summary["ok"])
                steady = (summary["seconds"] - summary["seconds_to_first_batch"]) / max(1, summary["samples"] - first)
                runs[label].append({"seconds": wall, "startup": summary["seconds_to_first_batch"],
                                    "steady_per_sample": steady, "samples": summary["samples"], "ok": summary["ok"]})
    median = {label: {k: statistics.median(x[k] for x in rows) for k in ("seconds", "startup", "steady_per_sample")}
              for label, rows in runs.items()}
    samples = runs["off"][0]["samples"]
    result = {"settings": vars(args), "samples": samples, "runs": runs, "median": median,
              "ratio_whole": median["off"]["seconds"] / median["on"]["seconds"],
              "ratio_steady": median["off"]["steady_per_sample"] / median["on"]["steady_per_sample"]}
    print(f"{samples} samples, batch {args.batch_size}, {args.rounds} alternating rounds (medians), scorers "
          f"{args.scorer_set} on {args.device}\n")
    print("| scoring | whole run samples/s | start-up to the first batch (s) | steady samples/s after it |")
    print("| --- | --- | --- | --- |")
    for label in ("off", "on"):
        m = median[label]
        print(f"| {label} | {samples / m['seconds']:.1f} | {m['startup']:.1f} | {1 / m['steady_per_sample']:.1f} |")
    print(f"\nscoring on / off: {result['ratio_whole']:.3f} of the whole run's rate, {result['ratio_steady']:.3f} of "
          "the steady rate")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
