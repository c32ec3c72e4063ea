"""The plant tests' inputs, written by the tests: captions of a small grammar (subject, colour, relation, place)
with a random JPEG each; the `plant` command line over them; a planted dataset's fingerprint (its shards' and
manifest's digests), and a wait for a condition of a running job."""

from __future__ import annotations

import hashlib
import json
import time

import numpy as np
from PIL import Image

SUBJECTS = ["dog", "cat", "horse", "car", "bus", "boat", "man", "woman", "child", "bird"]
COLOURS = ["red", "blue", "green", "yellow", "black", "white"]
PLACES = ["table", "bench", "bed", "street", "beach", "field", "sofa", "tree"]
RELATIONS = ["under", "on", "next to", "in front of", "behind", "near"]


def make_dataset(root, n, image_size=32):
    """n samples: JSONL captions with two captions each, and a JPEG per sample."""
    rng = np.random.default_rng(0)
    (root / "images").mkdir(parents=True, exist_ok=True)
    with open(root / "captions.jsonl", "w") as f:
        for i in range(n):
            s, c, p, r = (SUBJECTS[i % 10], COLOURS[(i // 10) % 6], PLACES[(i // 60) % 8], RELATIONS[(i // 3) % 6])
            caps = [f"A {s}.", f"A {c} {s} sitting {r} the {p}"]
            f.write(json.dumps({"id": f"img{i:05d}", "captions": caps, "image": f"img{i:05d}.jpg"}) + "\n")
            Image.fromarray(rng.integers(0, 255, (image_size, image_size, 3), dtype=np.uint8)).save(
                root / "images" / f"img{i:05d}.jpg")
    return root / "captions.jsonl", root / "images"


def plant_args(captions, images, out, *extra):
    return ["plant", "--captions", str(captions), "--images", str(images), "--out", str(out), "--mode", "hc",
            "--no-progress", *map(str, extra)]


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def dataset_fingerprint(out):
    return {p.name: digest(p) for p in sorted(out.glob("shard-*.tar"))} | {"manifest": digest(out / "manifest.jsonl")}


def wait_for(condition, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False
