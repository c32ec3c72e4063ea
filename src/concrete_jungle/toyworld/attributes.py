"""Three more compositional test subsets, of the edit kinds the toy captioner makes and SugarCrepe lacks:
``replace_size``, ``replace_light`` and ``replace_mood`` (`WorldConfig.attribute_subsets`).

Each item is a test scene's caption and the same caption with one word replaced: a thing's size
(``replace_size``: "a big red cube ..." -> "a small red cube ..."), or the scene's light or mood in the caption's
`; it is <light> and <mood>` clause (``replace_light``, ``replace_mood``). An item is kept only when the viewer
reads its caption true of the picture and its negative false (`viewer.reads_true` with ``scene_words``, the light
and the mood read too); the others are returned as dropped. They are drawn from a random stream of their own
(seeded by the world's seed and the scene's id), so a world with them has the very seven SugarCrepe-form subsets
of one without; they are written to ``<split>/attributes/``, apart from ``<split>/sugarcrepe/``, so the seven
subsets' M.Avg is what it was.
"""

from __future__ import annotations

import random
from dataclasses import replace

from .viewer import reads_true
from .world import LIGHTS, MOODS, SIZES, Scene, relation_phrase, scene_clause

ATTRIBUTE_SUBSETS = ("replace_size", "replace_light", "replace_mood")


def _other(options, current: str) -> str:
    (other,) = [o for o in options if o != current]  # two sizes, two lights, two moods
    return other


def attribute_negatives(s: Scene, rng: random.Random) -> dict[str, tuple[str, str]]:
    """(caption, negative caption) of this scene for each attribute subset: one thing's size replaced (the thing
    drawn from ``rng``), or the scene's light or mood replaced in the caption's scene clause."""
    i = rng.randrange(len(s.things))
    things = list(s.things)
    things[i] = replace(things[i], size=_other(SIZES, things[i].size))
    positive = relation_phrase(s)
    with_clause = positive + scene_clause(s)
    return {"replace_size": (positive, relation_phrase(replace(s, things=tuple(things)))),
            "replace_light": (with_clause, positive + scene_clause(replace(s, light=_other(LIGHTS, s.light)))),
            "replace_mood": (with_clause, positive + scene_clause(replace(s, mood=_other(MOODS, s.mood))))}


def attribute_test(scenes: list[Scene], files: list[str],
                   seed: int) -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """The items per attribute subset, in the SugarCrepe item format, and the items left out because the viewer
    does not read their caption true and their negative false of the picture, each with its file and captions."""
    items: dict[str, list[dict]] = {k: [] for k in ATTRIBUTE_SUBSETS}
    dropped: dict[str, list[dict]] = {k: [] for k in ATTRIBUTE_SUBSETS}
    for s, file in zip(scenes, files):
        sid = file.rsplit(".", 1)[0]
        made = attribute_negatives(s, random.Random(f"{seed}\x00attributes\x00{sid}"))
        for subset, (caption, negative) in made.items():
            item = {"filename": file, "caption": caption, "negative_caption": negative}
            kept = reads_true(caption, s, scene_words=True) and not reads_true(negative, s, scene_words=True)
            (items if kept else dropped)[subset].append(item)
    return items, dropped
