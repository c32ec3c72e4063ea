"""Captions/s of the whole keyword sampler against bare spaCy `nlp.pipe` on the same captions.

Both use the same pipeline with the same components (the sampler's: NER excluded) and batch size;
rounds alternate between the two so machine noise hits both alike. The sampler's time includes
reading the caption files, anchor selection, pre-checks, candidate extraction, sampling and writing
the JSONL output; the bare time is `nlp.pipe` over the anchor captions alone. Goal: ratio >= 0.8.

    python benchmarks/keywords_throughput.py --captions data/sugarcrepe --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from concrete_jungle.concreteness import load_ratings
from concrete_jungle.keywords import SamplerConfig, load_spacy, run_keywords
from concrete_jungle.sources import anchor_caption, read_samples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--captions", nargs="+", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--mode", default="hc")
    args = ap.parse_args()

    ratings, nlp = load_ratings(), load_spacy()
    texts = [anchor_caption(s.captions) for s in read_samples(args.captions) if not s.error]
    n = len(texts)
    list(nlp.pipe(texts[:512], batch_size=args.batch_size))  # warm-up: first calls allocate
    bare, full = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            t0 = time.perf_counter()
            for _ in nlp.pipe(texts, batch_size=args.batch_size):
                pass
            bare.append(n / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            run_keywords(args.captions, str(Path(tmp) / f"kw{r}.jsonl"), SamplerConfig(mode=args.mode), ratings, nlp,
                         batch_size=args.batch_size, progress=False)
            full.append(n / (time.perf_counter() - t0))
    b, f = statistics.median(bare), statistics.median(full)
    print(f"captions: {n}, rounds: {args.rounds}, pipeline: {nlp.meta['name']} {nlp.pipe_names}")
    print("| | captions/s (median) |\n| --- | --- |")
    print(f"| bare nlp.pipe | {b:.0f} |\n| keyword sampler (whole job) | {f:.0f} |")
    print(f"ratio sampler / bare: {f / b:.3f} (goal >= 0.8)")


if __name__ == "__main__":
    main()
