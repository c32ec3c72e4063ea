"""Captions/s of the whole keyword job with 1, 2, ... workers, against bare spaCy `nlp.pipe` on one core.

The input is the anchor captions of ``--captions``, each repeated ``--repeat`` times under distinct ids
(SugarCrepe's 4,345 unique positives x 5 = 21,725 captions), written once as JSONL. The job's time
includes reading that file, pre-checks, parsing, candidate extraction (in the worker processes), sampling
and writing the JSONL output; the bare time is `nlp.pipe` over the same captions in this process, the same
pipeline (NER excluded) and batch size. Rounds alternate between all settings so machine noise hits each
alike; medians. Every worker count must write byte-identical output (checked). Goals: 1 worker >= 0.8x bare,
2 workers >= 1.6x one worker on 2 idle cores. Counts above the machine's cores are projected from the measured
1- and 2-worker speed-up (Amdahl), not measured.

    python benchmarks/keywords_throughput.py --captions data/sugarcrepe --repeat 5 --workers 1,2 --rounds 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from concrete_jungle.nlp import load_spacy
from concrete_jungle.plant.concreteness import load_ratings
from concrete_jungle.plant.keyword_job import run_keywords
from concrete_jungle.plant.keywords import SamplerConfig
from concrete_jungle.sources import anchor_caption, read_samples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--captions", nargs="+", required=True)
    ap.add_argument("--repeat", type=int, default=5, help="copies of each caption, under distinct ids")
    ap.add_argument("--workers", default="1,2", help="worker counts to measure, comma-separated")
    ap.add_argument("--project", default="4", help="worker counts to project when the machine has fewer cores")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--mode", default="hc")
    args = ap.parse_args()

    ratings, nlp = load_ratings(), load_spacy()
    texts = [anchor_caption(s.captions) for s in read_samples(args.captions) if not s.error]
    counts = [int(w) for w in args.workers.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "captions.jsonl"
        source.write_text("".join(json.dumps({"id": f"{i}-{k}", "caption": t}) + "\n"
                                  for k in range(args.repeat) for i, t in enumerate(texts)))
        n = len(texts) * args.repeat
        list(nlp.pipe(texts[:512], batch_size=args.batch_size))  # warm-up: first calls allocate
        speed: dict[str, list[float]] = {"bare": [], **{w: [] for w in counts}}
        outputs = {}
        for r in range(args.rounds):
            t0 = time.perf_counter()
            for _ in nlp.pipe((t for _ in range(args.repeat) for t in texts), batch_size=args.batch_size):
                pass
            speed["bare"].append(n / (time.perf_counter() - t0))
            for w in counts:
                out = Path(tmp) / f"kw{r}-{w}.jsonl"
                t0 = time.perf_counter()
                run_keywords([str(source)], str(out), SamplerConfig(mode=args.mode), ratings, nlp,
                             batch_size=args.batch_size, workers=w, progress=False)
                speed[w].append(n / (time.perf_counter() - t0))
                outputs[w] = hashlib.sha256(out.read_bytes()).hexdigest()
    assert len(set(outputs.values())) == 1, f"outputs differ by worker count: {outputs}"
    med = {k: statistics.median(v) for k, v in speed.items()}
    print(f"captions: {n} ({len(texts)} x {args.repeat}), rounds: {args.rounds}, cores: {os.cpu_count()}, "
          f"pipeline: {nlp.meta['name']} {nlp.pipe_names}; output identical for workers {counts}")
    print("| setting | captions/s (median) | vs bare nlp.pipe | vs 1 worker |\n| --- | --- | --- | --- |")
    print(f"| bare nlp.pipe (this process) | {med['bare']:.0f} | 1.00 | |")
    for w in counts:
        print(f"| keywords --workers {w} | {med[w]:.0f} | {med[w] / med['bare']:.2f} | "
              f"{med[w] / med[counts[0]]:.2f} |")
    if 1 in med and 2 in med:
        s2 = med[2] / med[1]
        p = min(1.0, max(0.0, 2 * (1 - 1 / s2)))  # parallel fraction that gives the measured 2-worker speed-up
        for w in (int(x) for x in args.project.split(",") if x):
            if w not in counts:
                print(f"| keywords --workers {w} (projected, Amdahl p = {p:.2f}) | {med[1] / ((1 - p) + p / w):.0f} "
                      f"| {med[1] / ((1 - p) + p / w) / med['bare']:.2f} | {1 / ((1 - p) + p / w):.2f} |")


if __name__ == "__main__":
    main()
