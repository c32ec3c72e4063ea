"""Samples/s of the whole ConcretePlant pipeline against the bare captioner and editor calls.

Same samples, same batches, same tiny models (random-init Llama and SDXL built from configs: throughput
does not depend on weight values). The bare reference calls `captioner.rewrite` and `editor.edit` on
each batch and nothing else; the pipeline adds image loading, reply cleaning and validation, JPEG
encoding, tar writing, manifests and fsyncs, and overlaps the captioner with the editor. Keywords are
sampled once beforehand (their cost is spaCy's, see keywords_throughput.py). Rounds alternate the two.
Goal: pipeline overhead <= 10% (ratio bare time / pipeline time >= 0.91).

``--engines ray`` (or ``local,ray``) runs the Ray engine on the rules + tiny SDXL setup: a local Ray of
``--ray-cpus`` CPUs started once beforehand (as a cluster is), one rewrite actor (0.25 CPU) and one edit actor
(the other CPUs, as many torch threads as the bare calls use), which run side by side. Goal: overhead <= 15 %
at 2 CPUs.

A Ray run starts its actors, which import torch and diffusers and load their models: a fixed cost per job that
the bare calls and the local engine (handed models already loaded) do not pay. So each row gives the whole run's
ratio, the seconds until the first batch was written (``seconds_to_first_batch`` of the run's summary.json) and
the steady ratio after it: bare time per sample / the run's time per sample after its first batch, the rate a
job larger than the benchmark's goes at.

    python benchmarks/plant_overhead.py --samples 96 --rounds 3
    python benchmarks/plant_overhead.py --samples 768 --rounds 5 --engines local,ray
    python benchmarks/plant_overhead.py --samples 3072 --rounds 2 --engines ray
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from concrete_jungle import plant
from concrete_jungle.models.tiny import build_tiny_causal_lm, build_tiny_sdxl_img2img
from concrete_jungle.plant import EngineConfig, PlantConfig
from concrete_jungle.plant.captioners import RewriteRequest, make_captioner
from concrete_jungle.plant.editors import make_editor
from concrete_jungle.plant.keywords import SamplerConfig
from concrete_jungle.plant.stages import load_image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_plant import make_dataset  # noqa: E402  (the tests' synthetic captions and images)


def bare(records, images, captioner, editor, batch_size, seed=0) -> float:
    t0 = time.perf_counter()
    for b in range(0, len(records), batch_size):
        batch = records[b: b + batch_size]
        reqs = [RewriteRequest(r["id"], r["caption"], r["keyword"], tuple(r["span"]), r["category"], "hc", 0, seed)
                for r in batch]
        replies = captioner.rewrite(reqs)
        if editor is not None:
            ims = [load_image(images, r["image"])[0] for r in batch]
            editor.edit(ims, [x.text or r["caption"] for x, r in zip(replies, batch)], list(range(len(batch))))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--engines", default="local", help="local, ray, or local,ray")
    ap.add_argument("--ray-cpus", type=int, default=2)
    args = ap.parse_args()
    engines = args.engines.split(",")
    if "ray" in engines:
        import ray

        ray.init(num_cpus=args.ray_cpus, include_dashboard=False, log_to_driver=False)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        captions, images = make_dataset(tmp, args.samples, image_size=64)
        lm = make_captioner("transformers", model=str(build_tiny_causal_lm(tmp / "lm")), max_new_tokens=16,
                            batch_size=args.batch_size)
        sdxl_path = str(build_tiny_sdxl_img2img(tmp / "sdxl"))
        sdxl = make_editor("diffusers", model=sdxl_path, size=64, batch_size=args.batch_size, device="cpu")
        rules = make_captioner("rules")
        setups = {"tiny Llama captioner, no editor": (lm, None), "rules captioner + tiny SDXL editor": (rules, sdxl)}
        print(f"samples: {args.samples}, batch size: {args.batch_size}, rounds: {args.rounds} (medians), "
              "max attempts 1\n")
        print("| setup | engine | bare calls samples/s | pipeline samples/s | bare time / pipeline time | "
              "first batch written after (s) | steady ratio after it |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        runs = [(label, captioner, editor, "local") for label, (captioner, editor) in setups.items()
                if "local" in engines]
        if "ray" in engines:
            runs.append(("rules captioner + tiny SDXL editor", rules, sdxl, "ray"))
        for label, captioner, editor, engine in runs:
            base = PlantConfig(captions=[str(captions)], images=str(images), out=str(tmp / "warm"), mode="hc",
                               sampler=SamplerConfig(mode="hc"), max_attempts=1, batch_size=args.batch_size,
                               samples_per_shard=32)
            plant.run(base, captioner, editor or make_editor("none"), progress=False)  # warm-up, keywords
            keyword_file = tmp / "warm" / "keywords-00000-of-00001.jsonl"
            records = [r for r in map(json.loads, keyword_file.read_text().splitlines()) if r["status"] == "ok"]
            # the first batch is cut from the first shard's chunk, so it is no larger than a shard
            first_batch = min(args.batch_size, base.samples_per_shard, len(records))
            bare_t, plant_t, startup_t, steady_t = [], [], [], []
            for r in range(args.rounds):
                out = tmp / f"run-{label[:5]}-{engine}-{r}"
                out.mkdir()
                for f in tmp.joinpath("warm").glob("keywords-*"):
                    shutil.copy(f, out / f.name)
                config = PlantConfig(**{**base.__dict__, "out": str(out)})
                if engine == "ray":  # the actors build the captioner and editor from the config
                    config = PlantConfig(**{**config.__dict__, "captioner": "rules", "editor": "diffusers",
                                            "editor_options": {"model": sdxl_path, "size": 64, "device": "cpu",
                                                               "batch_size": args.batch_size},
                                            "engine": EngineConfig(name="ray", edit_cpus=args.ray_cpus - 0.25)})
                t0 = time.perf_counter()
                summary = plant.run(config, None if engine == "ray" else captioner,
                                    None if engine == "ray" else editor or make_editor("none"), progress=False)
                plant_t.append(time.perf_counter() - t0)
                startup_t.append(summary["seconds_to_first_batch"])
                steady_t.append((summary["seconds"] - summary["seconds_to_first_batch"])
                                / max(1, len(records) - first_batch))
                bare_t.append(bare(records, images, captioner, editor, args.batch_size))
            n = len(records)
            b, p = statistics.median(bare_t), statistics.median(plant_t)
            steady = (b / n) / statistics.median(steady_t)
            print(f"| {label} | {engine} | {n / b:.1f} | {n / p:.1f} | {b / p:.3f} | "
                  f"{statistics.median(startup_t):.1f} | {steady:.3f} |")


if __name__ == "__main__":
    main()
