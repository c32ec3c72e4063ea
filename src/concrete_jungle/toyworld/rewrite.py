"""The toy world's captioner and editor, behind the generation pipeline's interfaces.

`ToyCaptioner` rewrites the sampled keyword into another word of its slot (a colour into another colour,
`to the left of` into `above`, `calm` into `busy`), always into something false of the scene; `ToyEditor`
parses the rewritten caption and renders it with the anchor's layout, so the negative image differs from
the anchor exactly where the caption does. `plant --captioner toyworld --editor toyworld --editor-option world=DIR`
runs them like any other captioner and editor (DIR: a world `concrete-jungle demo` wrote, `<out>/world-<hash>`).
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from ..plant.captioners import Reply, RewriteRequest
from ..plant.captioners.validation import replaced_span
from ..plant.keywords import sample_rng
from ..records import read_jsonl
from .world import (
    COLOURS,
    LIGHTS,
    MOODS,
    RELATION_OF_PHRASE,
    RELATIONS,
    SHAPES,
    SIZES,
    SYNONYMS,
    TEXTURES,
    WORD_VALUE,
    parse_caption,
    pixel_hash,
    render,
    word_kind,
)

WORLD_FOLDER = "concrete-jungle demo --out OUT writes one as OUT/world-<hash>"
# for `A <rel> B`, relations that are false of the same picture (`next to` touches, so `left of` is not false)
FALSE_RELATIONS = {"left": ("right", "above", "below"), "right": ("left", "above", "below"),
                   "above": ("below", "left", "right"), "below": ("above", "left", "right"),
                   "next": ("above", "below"), "top": ("below", "left", "right"), "inside": ("next", "above", "below")}


class WorldInputError(ValueError):
    """A toy-world plugin given a folder that is not a toy world, or an image the world did not render."""


def scenes_file(world: str | Path, flag: str) -> Path:
    """The world's scenes.jsonl; a folder without one is an error naming the flag that gave it."""
    path = Path(world) / "scenes.jsonl"
    if not path.is_file():
        raise WorldInputError(f"{path} not found; {flag} world=DIR must name a toy world's folder ({WORLD_FOLDER})")
    return path


class ToyCaptioner:
    """Rewrites a toy-world keyword into a word of the same slot with another meaning; other words fail.

    With ``world`` (the world's folder), a rewrite that describes a held-out (test or validation) scene, light and
    mood included, is refused with the scene's id: trained on as a positive pair, such a negative would put a
    held-out scene into training. The plant asks again with another seed and rejects the sample, with that
    reason, when no attempt escapes."""

    name = "toyworld"

    def __init__(self, world: str | Path | None = None):
        self.held_out: dict[str, str] = {}
        if world is not None:
            self.held_out = {parse_caption(row["captions"][0]).key(): row["id"]
                             for row in read_jsonl(scenes_file(world, "--captioner-option"))
                             if row["split"] != "train"}

    @classmethod
    def check_options(cls, world: str | Path | None = None) -> None:
        """The world's folder holds a world, before a run writes anything."""
        if world is not None:
            scenes_file(world, "--captioner-option")

    def rewrite(self, requests: list[RewriteRequest]) -> list[Reply]:
        return [self._refuse_held_out(self._one(r)) for r in requests]

    def _refuse_held_out(self, reply: Reply) -> Reply:
        if not self.held_out or reply.error:
            return reply
        try:
            key = parse_caption(reply.text).key()
        except ValueError:  # not a full caption: it names no whole scene
            return reply
        if key in self.held_out:
            return Reply("", error=f"the rewrite describes held-out scene {self.held_out[key]}")
        return reply

    def _one(self, r: RewriteRequest) -> Reply:
        rng = sample_rng(r.seed, f"toyworld\x00{r.id}\x00{r.attempt}")
        start, end = replaced_span(r.caption, *r.span, r.category)
        old = r.caption[start:end].lower()
        if old in RELATION_OF_PHRASE:
            new = RELATIONS[rng.choice(FALSE_RELATIONS[RELATION_OF_PHRASE[old]])]
        elif old in SHAPES:
            present = {w for w in r.caption.lower().replace(";", " ").replace(",", " ").split()}
            new = rng.choice([s for s in SHAPES if s not in present])
        elif old in COLOURS:
            new = rng.choice([c for c in COLOURS if c != old])
        elif old in TEXTURES:
            new = rng.choice([t for t in TEXTURES if t != old])
        elif old in WORD_VALUE:
            value = WORD_VALUE[old]
            group = next(g for g in (list(SIZES), list(LIGHTS), list(MOODS)) if value in g)
            new = rng.choice(SYNONYMS[next(v for v in group if v != value)])
        else:
            return Reply("", error=f"not a toy-world word: {old!r}")
        return Reply(r.caption[:start] + new + r.caption[end:])

    def close(self) -> None:
        pass


class ToyEditor:
    """Re-renders the scene a rewritten caption describes, with the layout of the anchor image's scene."""

    name = "toyworld"
    reuses_anchor = False

    def __init__(self, world: str | Path):
        self.layouts = {row["pixel_hash"]: row["layout"] for row in read_jsonl(scenes_file(world, "--editor-option"))}

    @classmethod
    def check_options(cls, world: str | Path) -> None:
        """The world's folder holds a world, before a run writes anything."""
        scenes_file(world, "--editor-option")

    def meta_fields(self, keyword: str, caption: str, prompt: str) -> dict:
        """``edit_kind``: the slot the keyword came from (`world.word_kind`: colour, texture, size, shape, relation,
        light or mood), whose test subset the edit matches (`edit_kinds.EDIT_KIND_SUBSET`)."""
        return {"edit_kind": word_kind(keyword)}

    def edit(self, images: list[Image.Image], prompts: list[str], seeds: list[int]) -> list[Image.Image]:
        out = []
        for image, prompt in zip(images, prompts):
            layout = self.layouts.get(pixel_hash(image))
            if layout is None:
                raise WorldInputError("an anchor image the toy world did not render: the toy editor re-renders "
                                       "toy scenes only; use --editor diffusers for real images")
            out.append(render(parse_caption(prompt, layout)))
        return out
