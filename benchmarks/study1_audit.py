"""Audit of Study 1's world and data (docs/studies/study1.md, "Corrections"): the facts the corrections state, measured.

Builds (or reuses) the study's world and its three ConcreteBatches with the study's own stages and settings
(`StudyConfig`: 4,000 training, 1,500 test and 600 validation scenes, seed 1) under ``--out``, then counts:

- held-out scenes whose full content (things, relations, light and mood) is the content of a negative of a
  training anchor, per dataset: every row but the control trains on those negatives as positive pairs;
- held-out scenes equal to a training scene except for the light and the mood (words no test caption uses);
- the JPEG error of the ConcreteBatch's anchors against the world's PNGs (mean absolute grey-level difference);
- the share of each kind of edit in D_lc and D_hc (by the word the captioner replaced);
- Cement's adaptive margin over each dataset's pairs (docs/method.md §5);
- test negatives of the ADD subsets that name a shape twice;
- swap_obj test items that are true of their picture (two things alike but for their shape, `next to` each other).

    python benchmarks/study1_audit.py --out runs/study1-audit
"""

from __future__ import annotations

import argparse
import io
import json
from collections import Counter
from dataclasses import replace

import numpy as np
from PIL import Image


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/study1-audit")
    args = parser.parse_args()

    import torch

    from concrete_jungle.concretebatch import index_shards, read_member, shard_urls
    from concrete_jungle.experiments.stages import StageConfig, Stages
    from concrete_jungle.experiments.study import StudyConfig
    from concrete_jungle.loss import AdaptiveMargin
    from concrete_jungle.records import read_jsonl
    from concrete_jungle.toyworld.build import named_part
    from concrete_jungle.toyworld.world import SHAPES, parse_caption, word_kind

    study = StudyConfig()
    stages = Stages(StageConfig(out=args.out, world=study.world, model=study.model), progress=True)
    world = stages.world()
    datasets = {mode: stages.plant(world, mode) for mode in ("hc", "lc", "wo")}
    scenes = read_jsonl(world / "scenes.jsonl")
    train_keys = {parse_caption(r["captions"][0]).key() for r in scenes if r["split"] == "train"}
    train_without = {named_part(k) for k in train_keys}
    held_out = {split: [parse_caption(r["captions"][0]) for r in scenes if r["split"] == split]
                for split in ("test", "val")}
    report: dict = {"world": {"train": study.world.train, "test": study.world.test, "val": study.world.val}}

    pngs = {r["id"]: world / "images" / r["image"] for r in scenes}
    margin = AdaptiveMargin()
    for mode, root in datasets.items():
        records = index_shards(shard_urls(root))
        negatives, kinds, conc, errors = set(), Counter(), [], []
        for n, record in enumerate(records):
            meta = json.loads(read_member(record["json"]))
            negatives.add(parse_caption(read_member(record["neg.txt"]).decode()).key())
            kinds[word_kind(meta["keyword"])] += 1
            conc.append(float(meta["concreteness"]))
            if n < 500:  # the codec error, on the first 500 anchors
                jpeg = np.asarray(Image.open(io.BytesIO(read_member(record["jpg"]))).convert("RGB"), np.float64)
                png = np.asarray(Image.open(pngs[meta["id"]]).convert("RGB"), np.float64)
                errors.append(np.abs(jpeg - png).mean())
        m = margin(torch.tensor(conc)).numpy()
        report[f"D_{mode}"] = {
            "pairs": len(records),
            "held_out_scenes_equal_to_a_negative": {split: sum(s.key() in negatives for s in ss)
                                                    for split, ss in held_out.items()},
            "edit_kinds": {k: round(v / len(records), 3) for k, v in kinds.most_common()},
            "margin": {"mean": round(float(m.mean()), 3), "share_below_-1.5": round(float((m < -1.5).mean()), 3)},
            "jpeg_error_grey_levels": round(float(np.mean(errors)), 2),
        }
    report["held_out_equal_to_a_training_scene_but_light_and_mood"] = {
        split: sum(named_part(s.key()) in train_without for s in ss) for split, ss in held_out.items()}

    items = {s: json.loads((world / "test" / "sugarcrepe" / f"{s}.json").read_text()) for s in
             ("add_att", "add_obj", "swap_obj")}
    twice = {s: sum(any(item["negative_caption"].split().count(shape) > 1 for shape in SHAPES)
                    for item in items[s].values()) for s in ("add_att", "add_obj")}
    report["add_negatives_naming_a_shape_twice"] = twice
    by_file = {r["image"].split("/")[-1]: parse_caption(r["captions"][0]) for r in scenes if r["split"] == "test"}
    true_swaps = 0
    for item in items["swap_obj"].values():
        scene = by_file[item["filename"]]
        for i, rel in enumerate(scene.relations):
            a, b = scene.things[i], scene.things[i + 1]
            if rel == "next" and replace(a, shape=b.shape) == b:
                body = item["negative_caption"]
                swapped = body.replace(a.shape, "\0").replace(b.shape, a.shape).replace("\0", b.shape)
                if swapped == item["caption"]:
                    true_swaps += 1
    report["swap_obj"] = {"items": len(items["swap_obj"]), "true_of_the_picture": true_swaps}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
