"""Negatives still true of their anchor: their share in the demo world's D_hc, D_lc and D_wo and in the gate's seven
edit kinds (docs/toyworld.md, "Negatives still true of their anchor").

A negative picture of which the anchor's caption is still true is a false negative for the image side of the loss.
Here the toy world's viewer decides it for every negative (`toyworld.entailment`):

- the demo's three datasets, planted as `concrete-jungle demo --quick` plants them (its world: 800 training and
  300 test scenes, seed 0; the toy captioner and editor, modes hc, lc and wo), with the viewer scorer and the rule
  ``viewer_anchor_true>=1`` (`StageConfig.entailment`), so each record carries its decision;
- the gate's positive control (`experiments.gate.build_positive_control`: the test's generator on training
  scenes, every edit kind), on the gate's pre-registered world settings (docs/studies/gate/design.json) at a small
  size (800 training and 300 test scenes instead of 4,000 and 1,500).

Each table gives, per dataset and edit kind, the negatives whose anchor caption reads true of the negative
picture (true), false, or undecided (unknown), as `concrete-jungle analyze` reports them; the planted sets are
also split by the toy word the keyword edited (shape, colour, texture, size, relation, light, mood). A second
count reads the planted negatives as `toyworld.viewer.reads_true` does by default, without the light and mood.

Expected, written before the first run: no planted negative is entailed (every toy rewrite replaces a word of the
anchor's full caption by one false of its scene, and the light and mood are read), but read without the light and
mood, every light and mood edit is (most of D_lc, few of D_hc); in the gate's positive control every add_att and
add_obj negative is entailed (a colour or a thing added leaves a caption that does not name it true) and no other.

    python benchmarks/entailed_negatives.py --out runs/entailed_negatives
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from concrete_jungle.analysis.entailed import dataset_metas, entailed_shares
from concrete_jungle.concretebatch import iter_records
from concrete_jungle.experiments import gate
from concrete_jungle.experiments.demo import QUICK
from concrete_jungle.experiments.stages import StageConfig, Stages
from concrete_jungle.records import atomic_write_json, atomic_write_text, read_jsonl
from concrete_jungle.toyworld.build import WorldConfig
from concrete_jungle.toyworld.viewer import reads_true
from concrete_jungle.toyworld.world import parse_caption, word_kind

ROOT = Path(__file__).resolve().parents[1]  # the gate's design is read from the repository


def planted(out: Path, world: WorldConfig) -> dict:
    """The demo's three datasets, planted with the viewer's decision: the shares per dataset, per keyword category
    and per toy word kind, and the count of the viewer that does not read the light and mood."""
    stages = Stages(StageConfig(out=str(out), world=world, entailment=True), progress=False)
    folder = stages.world()
    layouts = {r["id"]: r["layout"] for r in read_jsonl(folder / "scenes.jsonl")}
    result = {}
    for mode in ("hc", "lc", "wo"):
        data = stages.plant(folder, mode)
        metas = dataset_metas(data)
        by_word = entailed_shares([m | {"category": word_kind(m["keyword"])} for m in metas])
        without_scene_words = {}
        for r in iter_records(data):
            kind = word_kind(r["meta"]["keyword"])
            drawn = parse_caption(r["neg_caption"], layouts[r["meta"]["id"]])
            counts = without_scene_words.setdefault(kind, [0, 0])
            counts[0] += reads_true(r["caption"], drawn)
            counts[1] += 1
        result[f"D_{mode}"] = {"by_category": entailed_shares(metas), "by_word": by_word["by_kind"],
                               "viewer_without_light_and_mood": without_scene_words}
    return {"world": {"train": world.train, "test": world.test, "seed": world.seed}, "datasets": result}


def positive_control(out: Path, train: int, test: int) -> dict:
    """The gate's positive control on its design's world settings at this size: the shares per edit kind."""
    design = gate.read_design(ROOT / gate.DESIGN)
    design["world"] = design["world"] | {"train": train, "test": test}
    world = Stages(StageConfig(out=str(out), world=WorldConfig(**design["world"])), progress=False).world()
    data = gate.build_positive_control(world, out, design)
    summary = json.loads((data / "summary.json").read_text())
    return {"world": design["world"], "dropped": summary["dropped"], "shares": entailed_shares(dataset_metas(data))}


def row(name: str, kind: str, r: dict) -> str:
    return (f"| {name} | {kind} | {r['negatives']} | {r['true']} | {r['false']} | {r['unknown']} | "
            f"{r['share_true']:.1%} |")


def markdown(result: dict) -> str:
    head = ["| dataset | edit kind | negatives | true | false | unknown | share true |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    w = result["planted"]["world"]
    lines = [f"Demo world ({w['train']} training scenes, seed {w['seed']}), by the toy word the keyword edited (the "
             "keyword's categories: entailed.json):", "", *head]
    for name, d in result["planted"]["datasets"].items():
        lines += [row(name, "all", d["by_category"]["all"])]
        lines += [row(name, kind, r) for kind, r in d["by_word"].items()]
    lines += ["", "Read without the light and mood (`reads_true` alone), true of the negative picture / negatives:", "",
              "| dataset | " + " | ".join(kinds := sorted({k for d in result["planted"]["datasets"].values()
                                                            for k in d["viewer_without_light_and_mood"]})) + " |",
              "| --- |" + " ---: |" * len(kinds)]
    for name, d in result["planted"]["datasets"].items():
        counts = d["viewer_without_light_and_mood"]
        lines.append(f"| {name} | " + " | ".join(f"{counts[k][0]} / {counts[k][1]}" if k in counts else "-"
                                                 for k in kinds) + " |")
    g = result["positive_control"]
    lines += ["", f"The gate's positive control (its world settings, {g['world']['train']} training scenes, seed "
              f"{g['world']['seed']}):", "", *head, row("D_gate", "all", g["shares"]["all"])]
    lines += [row("D_gate", kind, r) for kind, r in g["shares"]["by_kind"].items()]
    lines += ["", "Pairs the generator made and the gate's builder dropped: " + ("; ".join(
        f"{reason}: " + ", ".join(f"{k} {n}" for k, n in kinds.items()) for reason, kinds in g["dropped"].items())
        or "none")]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/entailed_negatives")
    p.add_argument("--gate-train", type=int, default=800, help="training scenes of the gate's world")
    p.add_argument("--gate-test", type=int, default=300, help="test scenes of the gate's world")
    a = p.parse_args()
    out = Path(a.out)
    result = {"planted": planted(out, QUICK["world"]),
              "positive_control": positive_control(out, a.gate_train, a.gate_test)}
    atomic_write_json(out / "entailed.json", result)
    table = markdown(result)
    atomic_write_text(out / "entailed.md", table)
    print(table)


if __name__ == "__main__":
    main()
