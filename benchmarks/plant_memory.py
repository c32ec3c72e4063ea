"""Peak resident memory of a whole `concrete-jungle plant` run against the number of captions.

Each size is planted by `concrete-jungle plant` in a process of its own (the rules captioner, no editor, one part,
the local engine with one keyword worker: what the dataset's size alone changes), and its peak resident set is
read from the kernel's record of that child (``os.wait4``'s ``ru_maxrss``). The captions are synthetic COCO-like
sentences (a subject, a colour, a posture, a relation, a place; every caption distinct), in a JSONL file, all naming
one small JPEG: the input's images cost disk, not the plant's memory. Goal: growth from 50,000 to 500,000 captions
under 50 MB (the per-sample state streams through files; docs/scale.md, "Memory").

    python benchmarks/plant_memory.py --sizes 5000,50000,500000
    python benchmarks/plant_memory.py --sizes 2000,20000 --json memory.json     # a short check
    python benchmarks/plant_memory.py --sizes 113287 --estimate                  # `plant --estimate` instead
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUBJECTS = ["dog", "cat", "horse", "car", "bus", "boat", "man", "woman", "child", "bird", "cow", "sheep", "truck",
            "bicycle", "girl", "boy", "train", "elephant", "giraffe", "zebra"]
COLOURS = ["red", "blue", "green", "yellow", "black", "white", "brown", "orange", "grey", "pink"]
POSTURES = ["sitting", "standing", "lying", "parked", "waiting", "resting"]
RELATIONS = ["under", "on", "next to", "in front of", "behind", "near", "beside", "on top of"]
PLACES = ["table", "bench", "bed", "street", "beach", "field", "sofa", "tree", "fence", "building", "river", "road"]
EXTRAS = ["", " with a small ball", " on a sunny day", " in the park", " holding a red umbrella", " at night"]


def write_captions(path: Path, n: int, image: str) -> None:
    """``n`` distinct captions (a running number makes each caption its own), all naming ``image``."""
    rng = random.Random(0)
    with open(path, "w") as f:
        for i in range(n):
            caption = (f"A {rng.choice(COLOURS)} {rng.choice(SUBJECTS)} {rng.choice(POSTURES)} "
                       f"{rng.choice(RELATIONS)} the {rng.choice(PLACES)}{rng.choice(EXTRAS)} number {i}")
            f.write(json.dumps({"id": f"s{i:08d}", "captions": [caption], "image": image}) + "\n")


def write_image(folder: Path) -> str:
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(folder / "a.jpg")
    return "a.jpg"


def run_child(command: list[str]) -> tuple[float, float, float]:
    """(peak RSS in MB, wall seconds, CPU seconds) of ``command`` in a child process."""
    t0 = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)  # this child's own usage, not every child's so far
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command[2:5])} failed: {stderr.decode()[-2000:]}")
    return usage.ru_maxrss / 1024, seconds, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="5000,50000,500000", help="caption counts, one plant each")
    ap.add_argument("--work", help="folder for the inputs and datasets (default: a temporary one, removed)")
    ap.add_argument("--plant-args", default="", help="more plant flags, e.g. '--batch-size 64'")
    ap.add_argument("--estimate", action="store_true", help="run `plant --estimate` (an LLM captioner and the "
                    "diffusers editor named, none loaded) instead of the plant")
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="plant-memory-"))
    rows = []
    try:
        image = write_image(work / "images")
        print(f"| captions | peak RSS MB | seconds | CPU seconds | {'anchors' if args.estimate else 'samples ok'} | "
              "growth MB vs previous | bytes per added caption |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for n in (int(x) for x in args.sizes.split(",")):
            captions = work / f"captions-{n}.jsonl"
            write_captions(captions, n, image)
            out = work / f"cb-{n}"
            shutil.rmtree(out, ignore_errors=True)
            command = [sys.executable, "-m", "concrete_jungle.cli", "plant", "--captions", str(captions), "--images",
                       str(work / "images"), "--out", str(out), "--mode", "hc", "--no-progress",
                       *args.plant_args.split()]
            if args.estimate:
                bill = work / f"estimate-{n}.json"
                command += ["--estimate", "--captioner", "openai", "--model", "Qwen/Qwen3-32B", "--editor",
                            "diffusers", "--json", str(bill)]
            peak, seconds, cpu = run_child(command)
            if args.estimate:
                count = json.loads(bill.read_text())["figures"]["anchors"]["value"]
            else:
                count = json.loads((out / "summary.json").read_text())["ok"]
            growth = peak - rows[-1]["peak_mb"] if rows else None
            per = growth * 2 ** 20 / (n - rows[-1]["captions"]) if rows else None
            rows.append({"captions": n, "peak_mb": round(peak, 1), "seconds": round(seconds, 1),
                         "cpu_seconds": round(cpu, 1), "count": count})
            print(f"| {n:,} | {peak:.0f} | {seconds:.0f} | {cpu:.0f} | {count:,} | "
                  f"{'' if growth is None else f'{growth:+.0f}'} | {'' if per is None else f'{per:.0f}'} |", flush=True)
            shutil.rmtree(out, ignore_errors=True)  # its shards: the next size needs the disk
            captions.unlink()
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
