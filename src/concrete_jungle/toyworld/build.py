"""Write a toy world to disk: training scenes with captions, and a held-out test set.

Layout of ``<dir>``::

    scenes.jsonl                 every scene: id, split, content key, layout seed, pixel hash, image
    captions.jsonl               training samples in the JSONL caption format (`id`, `captions`, `image`)
    images/{train,test}/<id>.png (or .jpg: ``image_format``)
    test/sugarcrepe/<subset>.json  the compositional test in the official SugarCrepe format
    test/attributes/<subset>.json  with ``attribute_subsets``: replace_size, replace_light and replace_mood in the
                                 same format (`attributes.py`), apart so the seven subsets' M.Avg is unchanged
    test/retrieval.json          a Karpathy-format split file (all test images, split "test")
    val/...                      the same for the validation scenes, when ``val`` > 0
    world.json                   the settings it was made with

Test scenes are drawn after the training scenes and kept only when their content (`Scene.key`) is not a
training scene's, so the test has no scene from training; with ``held_out="named"`` they must also differ from
every training scene in something their captions name (a thing or a relation: the light and the mood do not
count: only the attribute subsets' captions name them). ``image_format="jpeg"`` stores every split as JPEG of
quality 95, the codec a ConcreteBatch stores its pictures in, so fine-tuning and test images go through one codec.
Every file is written atomically.
"""

from __future__ import annotations

import io
import json
import random
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from PIL import Image

from ..concretebatch import encode_jpeg
from ..records import atomic_write_json, atomic_write_jsonl
from .attributes import attribute_test
from .rewrite import FALSE_RELATIONS
from .viewer import reads_true
from .world import (
    COLOURS,
    MIRROR,
    SHAPES,
    SIZES,
    TEXTURES,
    Scene,
    Thing,
    captions,
    pixel_hash,
    relation_phrase,
    render,
    sample_scene,
)

SUBSETS = ("add_att", "add_obj", "replace_att", "replace_obj", "replace_rel", "swap_att", "swap_obj")


@dataclass(frozen=True)
class WorldConfig:
    train: int = 2000
    test: int = 600
    val: int = 0  # held-out scenes for choosing settings (the study's step count), never the test
    seed: int = 0
    held_out: str = "content"  # "content": no training scene's content; "named": and not its things and relations
    image_format: str = "png"  # "png", or "jpeg": quality 95 for every split, a ConcreteBatch's codec
    # "construction": a negative is the caption of a changed scene; "viewer": and it must read false of the picture
    # (`viewer.reads_true`), and replace_rel mirrors a relation (left <-> right, above <-> below) so that its
    # negatives use each relation word as often as its positives do
    test_negatives: str = "construction"
    # the test subsets replace_size, replace_light and replace_mood too, in <split>/attributes/ (`attributes.py`)
    attribute_subsets: bool = False

    def __post_init__(self):
        if self.held_out not in ("content", "named"):
            raise ValueError(f"held_out must be content or named, got {self.held_out!r}")
        if self.image_format not in ("png", "jpeg"):
            raise ValueError(f"image_format must be png or jpeg, got {self.image_format!r}")
        if self.test_negatives not in ("construction", "viewer"):
            raise ValueError(f"test_negatives must be construction or viewer, got {self.test_negatives!r}")


# settings added after worlds were made with the others, with the default that makes a world as before: left out
# of `world_settings` at that default, so those worlds keep their world.json and their stage's hash
LATER_SETTINGS = {"attribute_subsets": False}


def world_settings(config: WorldConfig) -> dict:
    """The settings a world is recorded (world.json) and cached (`experiments.stages`) by: every setting, but a
    later one (`LATER_SETTINGS`) only where it differs from its default."""
    return {k: v for k, v in asdict(config).items() if k not in LATER_SETTINGS or v != LATER_SETTINGS[k]}


def named_part(key: str) -> str:
    """A scene key without the light and the mood: what its captions name."""
    return key.rsplit("|", 2)[0]


def sample_world(config: WorldConfig) -> list[tuple[Scene, dict]]:
    """Every scene of the world with its row of ``scenes.jsonl`` but for the pixel hash (id, split, content key,
    layout seed, image path, captions), in the order `build_world` writes them; nothing is rendered, so a world's
    scenes, captions and the negatives made from them can be re-derived from its settings in seconds."""
    rng = random.Random(config.seed)
    # train first, then held-out splits: a held-out scene's content is no earlier scene's (test, then val, so
    # a world with a val split has the same train and test scenes as one without)
    scenes: dict[str, list[Scene]] = {}
    seen: set = set()
    named: set = set()  # the training scenes' things and relations
    for split, n in (("train", config.train), ("test", config.test), ("val", config.val)):
        scenes[split] = []
        while len(scenes[split]) < n:
            s = sample_scene(rng)
            if s.key() in seen or (config.held_out == "named" and split != "train" and named_part(s.key()) in named):
                continue
            seen.add(s.key())
            if split == "train":
                named.add(named_part(s.key()))
            scenes[split].append(s)
    world = []
    for split, split_scenes in scenes.items():
        for i, s in enumerate(split_scenes):
            sid = f"{split}-{i:06d}"
            world.append((s, {"id": sid, "split": split, "key": s.key(), "layout": s.layout,
                              "image": f"{split}/{sid}.{'jpg' if config.image_format == 'jpeg' else 'png'}",
                              "captions": captions(s, random.Random(f"{config.seed}\x00captions\x00{sid}"))}))
    return world


def build_world(out: str | Path, config: WorldConfig, progress: bool = True) -> dict:
    """Render the world into ``out`` (reused when it was already made with the same settings)."""
    from tqdm import tqdm

    out = Path(out)
    done = out / "world.json"
    if done.is_file() and json.loads(done.read_text()).get("config") == world_settings(config):
        return json.loads(done.read_text())
    world = sample_world(config)
    scenes = {split: [s for s, row in world if row["split"] == split] for split in ("train", "test", "val")}
    rows, samples = [], []
    for split in scenes:
        split_rows = [(s, row) for s, row in world if row["split"] == split]
        if split_rows:
            (out / "images" / split).mkdir(parents=True, exist_ok=True)
        for s, row in tqdm(split_rows, desc=f"render {split}", unit="scene", disable=not progress):
            image = render(s)
            name = row["image"]
            if config.image_format == "jpeg":  # the pixels a reader gets back are the ones the editor looks up
                data = encode_jpeg(image, quality=95)
                (out / "images" / name).write_bytes(data)
                image = Image.open(io.BytesIO(data)).convert("RGB")
            else:
                image.save(out / "images" / name)
            rows.append({"id": row["id"], "split": split, "key": row["key"], "layout": row["layout"],
                         "pixel_hash": pixel_hash(image), "image": name, "captions": row["captions"]})
            if split == "train":
                samples.append({"id": row["id"], "captions": row["captions"], "image": name})
    atomic_write_jsonl(out / "captions.jsonl", samples)
    atomic_write_jsonl(out / "scenes.jsonl", rows)

    counts, attributes = {}, {}
    for split in ("test", "val"):  # the same compositional subsets and a retrieval split for each held-out set
        if not scenes[split]:
            continue
        files = [r["image"].split("/")[-1] for r in rows if r["split"] == split]
        items, dropped = compositional_test(scenes[split], files, config.seed,
                                            viewer=config.test_negatives == "viewer")
        if config.attribute_subsets:
            attributes[split] = attribute_test(scenes[split], files, config.seed)
            for subset, entries in attributes[split][0].items():
                atomic_write_json(out / split / "attributes" / f"{subset}.json",
                                  {str(k): e for k, e in enumerate(entries)})
        for subset, entries in items.items():
            atomic_write_json(out / split / "sugarcrepe" / f"{subset}.json",
                              {str(k): e for k, e in enumerate(entries)})
        retrieval = {"images": [{"split": "test", "filename": r["image"].split("/")[-1],
                                 "sentences": [{"raw": c} for c in r["captions"]]}
                                for r in rows if r["split"] == split]}
        atomic_write_json(out / split / "retrieval.json", retrieval)
        counts[split] = {k: len(v) for k, v in items.items()}
        if config.test_negatives == "viewer":
            counts[f"{split}_dropped"] = dropped
    summary = {"config": world_settings(config), "train": config.train, "test": config.test, "val": config.val,
               "test_items": counts["test"], "val_items": counts.get("val", {})} | (
        {"dropped_items": {k: counts[f"{k}_dropped"] for k in ("test", "val") if f"{k}_dropped" in counts}}
        if config.test_negatives == "viewer" else {}) | (
        {"attribute_items": {split: {k: len(v) for k, v in kept.items()} for split, (kept, _) in attributes.items()},
         "attribute_dropped_items": {split: left for split, (_, left) in attributes.items()}}
        if config.attribute_subsets else {})
    atomic_write_json(done, summary)
    return summary


def _other(rng: random.Random, options, current):
    return rng.choice([o for o in options if o != current])


def _with_thing(s: Scene, i: int, **change) -> Scene:
    things = list(s.things)
    things[i] = replace(things[i], **change)
    return replace(s, things=tuple(things))


def negatives(s: Scene, rng: random.Random, mirror_relations: bool = False) -> dict[str, tuple[str, str]]:
    """(caption, negative caption) of this scene for every SugarCrepe subset it can make, built from the scene
    and a changed copy, so the negative is false of the picture by construction. ``mirror_relations``: replace_rel
    turns one left/right/above/below relation into its mirror (none when the scene has no such relation), so the
    negatives' relation words are distributed as the positives' (`WorldConfig.test_negatives`)."""
    out = {}
    n = len(s.things)
    positive = relation_phrase(s)
    i = rng.randrange(n)
    attribute = rng.choice(["colour", "size"] + (["texture"] if s.things[i].texture else []))
    if attribute == "colour":
        changed = _with_thing(s, i, colour=_other(rng, COLOURS, s.things[i].colour))
    elif attribute == "size":
        changed = _with_thing(s, i, size=_other(rng, SIZES, s.things[i].size))
    else:
        changed = _with_thing(s, i, texture=_other(rng, TEXTURES, s.things[i].texture))
    out["replace_att"] = (positive, relation_phrase(changed))
    absent = [x for x in SHAPES if x not in {t.shape for t in s.things}]
    out["replace_obj"] = (positive, relation_phrase(_with_thing(s, i, shape=rng.choice(absent))))
    if n > 1:
        j = rng.randrange(n - 1)
        rels = list(s.relations)
        if not mirror_relations:
            rels[j] = rng.choice(FALSE_RELATIONS[rels[j]])
            out["replace_rel"] = (positive, relation_phrase(replace(s, relations=tuple(rels))))
        elif mirrorable := [k for k, r in enumerate(rels) if r in MIRROR]:
            k = mirrorable[j % len(mirrorable)]
            rels[k] = MIRROR[rels[k]]
            out["replace_rel"] = (positive, relation_phrase(replace(s, relations=tuple(rels))))
        a, b = rng.sample(range(n), 2)
        out["swap_obj"] = (positive, relation_phrase(
            _with_thing(_with_thing(s, a, shape=s.things[b].shape), b, shape=s.things[a].shape)))
        pairs = [(a, b) for a in range(n) for b in range(a + 1, n) if s.things[a].colour != s.things[b].colour]
        if pairs:
            a, b = rng.choice(pairs)
            out["swap_att"] = (positive, relation_phrase(
                _with_thing(_with_thing(s, a, colour=s.things[b].colour), b, colour=s.things[a].colour)))
    if n < 3:
        extra = Thing(rng.choice(absent), rng.choice(list(COLOURS)), rng.choice(list(SIZES)))
        rel = rng.choice(["left", "right", "above", "below"])
        out["add_obj"] = (positive, relation_phrase(replace(s, things=s.things + (extra,),
                                                            relations=s.relations + (rel,))))
    plain = relation_phrase(s, attributes=False)
    k = rng.randrange(n)
    wrong = _other(rng, COLOURS, s.things[k].colour)
    out["add_att"] = (plain, re.sub(rf"\ba {s.things[k].shape}\b", f"a {wrong} {s.things[k].shape}", plain, count=1))
    return out


def compositional_test(scenes: list[Scene], files: list[str], seed: int,
                       viewer: bool = False) -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """The test items per subset, and (with ``viewer``) the items left out because their negative reads true of
    the picture (`viewer.reads_true`), each with its file and captions."""
    items: dict[str, list[dict]] = {k: [] for k in SUBSETS}
    dropped: dict[str, list[dict]] = {k: [] for k in SUBSETS}
    for s, file in zip(scenes, files):
        sid = file.rsplit(".", 1)[0]
        made = negatives(s, random.Random(f"{seed}\x00test\x00{sid}"), mirror_relations=viewer)
        for subset, (caption, negative) in made.items():
            item = {"filename": file, "caption": caption, "negative_caption": negative}
            (dropped if viewer and reads_true(negative, s) else items)[subset].append(item)
    return items, dropped
