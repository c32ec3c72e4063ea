"""How well each planted-pair score separates good pairs from bad ones, on the toy world, with its viewer as judge.

A toy world (the demo's 2,000 training scenes) is planted in mode hc with the toy captioner and
`toyworld.faulty.FaultyToyEditor`, which ignores half of its prompts by a seeded rule: a quarter come back as the
anchor picture unchanged (``keep``), a quarter as another scene painted from scratch (``repaint``). Every pair is
scored in the plant (no gates) by scorers that run on a CPU with nothing to download:

- ``open_clip`` on the demo's toy CLIP (`cj-demo`, pretrained 250 steps with plain CLIP loss on the world's
  captions, as `concrete-jungle demo` does): ``agreement``, ``agreement_anchor``, ``agreement_negative``;
- ``clip_sim`` on the same model: ``clip_text_sim`` cos(t, t'), ``clip_image_sim`` cos(v, v');
- ``pixel``: ``image_sim`` = 1 - mean |v - v'| / 255.

BERTScore's and DINOv2's weights cannot be had offline, so ``text_sim`` and DINO's ``image_sim`` are not measured
here. The viewer (`toyworld.viewer.reads_true`) labels each pair (`toyworld.separation`): good when the negative
caption is false of the anchor's scene and true of the negative picture's scene. The table gives, per score, the
ROC AUC of good against bad pairs (the score turned so that its gate's side is up) with a stratified bootstrap
95 % interval, against all bad pairs and against each cause of bad on its own.

Design and hypothesis, written before the first run:

- ``agreement_negative`` (>=) should separate both faults: a kept picture gives s(v, t') - s(v, t), the anchor
  margin with its sign turned, below 0 wherever the toy CLIP tells the two captions apart on the anchor (about 79 %
  of D_hc pairs for the demo's baseline); a repainted picture shows neither caption, so its margin sits near 0,
  while a faithful edit's is positive. Expected AUC >= 0.85 against keep, >= 0.75 against repaint.
- ``agreement`` (>=, the smaller margin) should separate about as well, a little worse: on good pairs the anchor
  margin adds its own noise to the minimum.
- ``agreement_anchor`` (>=) never looks at the negative picture: AUC about 0.5 against either editor fault. Only a
  bad caption (a negative that still reads true of the anchor: a light or mood edit, which the viewer does not read)
  can move it, and D_hc holds few of those.
- ``image_sim`` (pixel, <=) separates ``keep`` perfectly (a kept picture is the anchor's JPEG, similarity exactly
  1, above every real edit: AUC 1.0) and is turned the wrong way for ``repaint`` (a repainted picture is *less*
  similar than a local edit: AUC near 0), so against all bad pairs it lands in between, near 0.5: one threshold
  cannot catch both faults, a band (two gates) can.
- ``clip_image_sim`` (<=): the same pattern, less extreme.
- ``clip_text_sim`` (<=) depends on the captions alone, which the editor does not touch: about 0.5 against either
  editor fault (a check that the procedure does not find separation where there can be none).

What this does not show: how the scores behave on real pictures with real models (ViT-L-14, DINOv2, BERTScore);
the oracle judges truth only, not closeness (a faithful edit that also moved everything else would count as good).

    python benchmarks/score_separation.py --out runs/score_separation
    python benchmarks/score_separation.py --out /tmp/sep --scenes 200 --pretrain-steps 0   # minutes: random-init CLIP

Writes ``separation.md`` (the tables), ``separation.json`` (settings, models, counts, tables) and ``verdicts.jsonl``
(every pair's verdict and scores) into ``--out``; the world, the baseline and the planted dataset are kept there in
folders named by their settings, and reused by a rerun with the same settings.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from concrete_jungle import plant
from concrete_jungle.experiments.stages import StageConfig, Stages, stage_dir
from concrete_jungle.models.checkpoints import WEIGHTS_FILE
from concrete_jungle.plant import PlantConfig
from concrete_jungle.plant.scoring import ScoringConfig
from concrete_jungle.records import atomic_write_json, atomic_write_jsonl, atomic_write_text
from concrete_jungle.toyworld.build import WorldConfig
from concrete_jungle.toyworld.separation import (
    counts,
    gate_shares,
    gate_shares_markdown,
    medians,
    medians_markdown,
    pair_verdicts,
    separation,
    separation_markdown,
)

# docs/method.md's recommended agreement gate, its negative margin alone, and a gate on an exact copy of the anchor
GATE_SETS = ["agreement>=0.0", "agreement_negative>=0.0", "image_sim<1.0", "agreement>=0.0,image_sim<1.0"]


def toy_clip(out: Path, scenes: int, pretrain_steps: int, seed: int) -> tuple[Path, str]:
    """The world, and the toy CLIP's weights for the scorers: the demo's baseline, pretrained ``pretrain_steps``
    (0: random init, ``none``)."""
    stages = Stages(StageConfig(out=str(out), world=WorldConfig(train=scenes, test=60, seed=seed),
                                pretrain_steps=max(pretrain_steps, 1)), progress=False)
    world = stages.world()
    if pretrain_steps == 0:
        return world, "none"
    return world, str(stages.baseline(world) / WEIGHTS_FILE)


def scorers(weights: str) -> ScoringConfig:
    clip = {"model": "cj-demo", "pretrained": weights}
    return ScoringConfig(scorers={"open_clip": dict(clip), "clip_sim": dict(clip), "pixel": {}}, device="cpu")


def plant_faulty(out: Path, world: Path, weights: str, rate: float, faults: str, seed: int) -> tuple[Path, Path]:
    """D_hc through the faulty editor, scored (reused when made before with the same settings): the dataset and
    the editor's record."""
    settings = {"world": str(world), "weights": weights, "rate": rate, "faults": faults, "seed": seed}
    d = stage_dir(out, "D_hc-faulty", settings)
    dataset, record = d / "D_hc", d / "editor_record.jsonl"
    if not (dataset / "summary.json").is_file():
        plant.run(PlantConfig(
            captions=[str(world / "captions.jsonl")], images=str(world / "images"), out=str(dataset), mode="hc",
            captioner="concrete_jungle.toyworld.rewrite:ToyCaptioner",
            editor="concrete_jungle.toyworld.faulty:FaultyToyEditor",
            editor_options={"world": str(world), "rate": rate, "faults": faults, "seed": seed, "record": str(record)},
            scoring=scorers(weights), batch_size=64, samples_per_shard=500), progress=False)
    return dataset, record


def models(dataset: Path) -> dict[str, str]:
    """Each score's model, as the plant recorded it (the first record's ``score_models``)."""
    from concrete_jungle.concretebatch import iter_records

    return next(iter_records(dataset))["meta"]["score_models"]


def report(result: dict) -> str:
    s, c = result["settings"], result["counts"]
    clip = "random init" if s["pretrain_steps"] == 0 else f"pretrained {s['pretrain_steps']} steps"
    causes = ", ".join(f"{k} {v}" for k, v in sorted(c["by_cause"].items()))
    lines = ["# Score separation on the toy world (`benchmarks/score_separation.py`)", "",
             f"D_hc of {s['scenes']} scenes, toy captioner, `FaultyToyEditor` (rate {s['rate']}, faults {s['faults']}, "
             f"seed {s['seed']}); toy CLIP `cj-demo` {clip}; {c['pairs']} pairs: {causes}.", "",
             "ROC AUC of good against bad pairs (each score turned so that its gate's side is up; stratified "
             f"bootstrap 95 % interval, {s['resamples']} draws):", "", result["markdown"],
             "Median score per cause:", "", result["medians_markdown"],
             "Pairs each set of gates keeps (a pair passes a set when it passes every gate in it), per cause:", "",
             result["gates_markdown"], "Models:", ""]
    lines += [f"- `{score}`: `{model}`" for score, model in result["models"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/score_separation")
    ap.add_argument("--scenes", type=int, default=2000, help="training scenes of the world (default %(default)s)")
    ap.add_argument("--pretrain-steps", type=int, default=250,
                    help="the toy CLIP's pretraining steps (default %(default)s, the demo's); 0: random init")
    ap.add_argument("--rate", type=float, default=0.5, help="share of prompts the editor ignores")
    ap.add_argument("--faults", default="keep,repaint")
    ap.add_argument("--seed", type=int, default=0, help="the world's and the editor's seed")
    ap.add_argument("--resamples", type=int, default=2000, help="bootstrap draws per interval")
    ap.add_argument("--gates", action="append", metavar="GATE[,GATE...]",
                    help="a set of gates whose kept pairs to count per cause (repeatable; default: "
                    f"{' / '.join(GATE_SETS)})")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    out = Path(args.out)
    world, weights = toy_clip(out, args.scenes, args.pretrain_steps, args.seed)
    dataset, record = plant_faulty(out, world, weights, args.rate, args.faults, args.seed)
    verdicts = pair_verdicts(dataset, world, record)
    table = separation(verdicts, args.resamples, args.seed)
    per_cause = medians(verdicts)
    shares = gate_shares(verdicts, args.gates or GATE_SETS)
    result = {"settings": vars(args), "world": str(world), "dataset": str(dataset), "models": models(dataset),
              "counts": counts(verdicts),
              "separation": table, "medians": per_cause, "markdown": separation_markdown(table),
              "medians_markdown": medians_markdown(per_cause), "gates": shares,
              "gates_markdown": gate_shares_markdown(shares), "seconds": round(time.perf_counter() - started, 1)}
    atomic_write_jsonl(out / "verdicts.jsonl", verdicts)
    atomic_write_json(out / "separation.json", result)
    atomic_write_text(out / "separation.md", report(result))
    print(report(result))
    return result


if __name__ == "__main__":
    main()
