"""The toy world's grammar: scenes, their captions, a parser back from captions, and a renderer.

A scene is 1-3 things in a chain (thing i stands in relation i to thing i+1), each with a shape, a colour,
a size and maybe a texture, plus two scene-level words of low concreteness: the light (`bright`/`dim`, a
few percent of brightness) and the mood (`calm`/`busy`, a little or more pixel noise). Images are
rendered from the scene alone, so an edit is exact: parse the rewritten caption, render it with the
anchor's layout seed, and only what the caption changed changes.

The words were chosen by their Brysbaert ratings (docs/toyworld.md lists each with the rating the keyword
sampler finds): shapes are concrete nouns (4.7-5.0), colours and textures sit at 3.4-4.5, sizes and
relations at 2.6-3.9, the mood words at 2.3-2.8 -- so `hc` mostly edits shapes and colours, `lc` mostly
edits the light and the mood, whose visual change is small.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, replace

import numpy as np
from PIL import Image, ImageDraw

CANVAS = 64
SUPERSAMPLE = 4
BACKGROUND = (214, 214, 208)

SHAPES = ("ball", "cube", "tent", "ring", "star", "kite", "egg", "cup")
COLOURS = {"red": (214, 40, 40), "blue": (40, 84, 214), "green": (36, 160, 60), "yellow": (236, 204, 30),
           "purple": (128, 56, 176), "pink": (244, 132, 186), "black": (24, 24, 24), "brown": (124, 78, 36)}
SIZES = {"big": 18, "small": 11}  # edge length in pixels
TEXTURES = ("striped", "dotted", "checkered")
# relation of thing i to thing i+1: the phrase written in captions
RELATIONS = {"left": "to the left of", "right": "to the right of", "above": "above", "below": "below",
             "next": "next to", "top": "on top of", "inside": "inside"}
RELATION_OF_PHRASE = {p: k for k, p in RELATIONS.items()}
MIRROR = {"left": "right", "right": "left", "above": "below", "below": "above"}
LIGHTS = {"bright": 1.03, "dim": 0.97}  # brightness factor: 6% apart
MOODS = {"calm": 2.0, "busy": 7.0}  # pixel noise, standard deviation in grey levels
_SIDEWAYS = ("left", "right", "next")
_UPWARD = {"above": 1, "top": 1, "below": -1}  # A <rel> B puts A above (+1) or below (-1) B
GAP = 5  # pixels between things that stand apart (left of, above); `next to` and `on top of` touch

# the words captions use for each value (the first is the canonical one)
SYNONYMS = {"big": ("big",), "small": ("small", "tiny"), "calm": ("calm", "quiet", "peaceful"),
            "busy": ("busy", "lively"), "bright": ("bright",), "dim": ("dim",)}
WORD_VALUE = {w: v for v, ws in SYNONYMS.items() for w in ws}


@dataclass(frozen=True)
class Thing:
    shape: str
    colour: str
    size: str
    texture: str | None = None


@dataclass(frozen=True)
class Scene:
    things: tuple[Thing, ...]
    relations: tuple[str, ...]  # len(things) - 1
    light: str
    mood: str
    layout: int = 0  # seeds the placement jitter, the `next to` side and the noise; not part of the content

    def content(self) -> "Scene":
        """The scene without its layout, with mirrored two-thing relations turned one way (`B right of A` is
        `A left of B`): two scenes with the same content render the same picture up to placement."""
        s = replace(self, layout=0)
        if len(s.things) == 2 and s.relations[0] in ("right", "below"):
            s = replace(s, things=s.things[::-1], relations=(MIRROR[s.relations[0]],))
        return s

    def key(self) -> str:
        c = self.content()
        return "|".join([";".join(f"{t.size} {t.texture or '-'} {t.colour} {t.shape}" for t in c.things),
                         ",".join(c.relations), c.light, c.mood])


def sample_scene(rng: random.Random) -> Scene:
    n = rng.choice((1, 2, 2, 3))
    shapes = rng.sample(SHAPES, n)  # no shape twice: a caption names each thing by its shape
    things = tuple(Thing(s, rng.choice(list(COLOURS)), rng.choice(list(SIZES)),
                         rng.choice(TEXTURES) if rng.random() < 0.4 else None) for s in shapes)
    relations = []
    for i in range(n - 1):
        options = list(RELATIONS)
        if things[i].size != "small" or things[i + 1].size != "big":
            options.remove("inside")  # only a small thing fits inside a big one
        if relations and relations[-1] in ("inside", "top"):
            options = [r for r in options if r not in ("inside", "top", "next")]
        if relations:  # the third thing must not land on the first: not both sideways, not both on one side
            prev = relations[-1]
            options = [r for r in options if r != "inside"
                       and not (r in _SIDEWAYS and prev in _SIDEWAYS)
                       and not (r in _UPWARD and prev in _UPWARD and _UPWARD[r] == -_UPWARD[prev])]
        relations.append(rng.choice(options))
    return Scene(things, tuple(relations), rng.choice(list(LIGHTS)), rng.choice(list(MOODS)), rng.getrandbits(32))



def word_kind(word: str) -> str:
    """What a toy-world word changes when it is edited: shape, colour, texture, relation, size, light or mood
    (``other`` for a word outside the world)."""
    word = word.lower()
    for kind, words in (("shape", SHAPES), ("colour", COLOURS), ("texture", TEXTURES)):
        if word in words:
            return kind
    if word in RELATIONS or word in RELATION_OF_PHRASE:
        return "relation"
    value = WORD_VALUE.get(word)
    return "size" if value in SIZES else "light" if value in LIGHTS else "mood" if value in MOODS else "other"

# ------------------------------------------------------------------------------------------------ captions


def thing_phrase(t: Thing, rng: random.Random | None = None, attributes: bool = True, texture: bool = True) -> str:
    if not attributes:
        return f"a {t.shape}"
    size = rng.choice(SYNONYMS[t.size]) if rng else t.size
    words = [size] + ([t.texture] if texture and t.texture else []) + [t.colour, t.shape]
    return "a " + " ".join(words)


def relation_phrase(s: Scene, rng: random.Random | None = None, attributes: bool = True, texture: bool = True) -> str:
    parts = [thing_phrase(s.things[0], rng, attributes, texture)]
    for i, rel in enumerate(s.relations):
        lead = " " if i == 0 else ", which is "
        parts.append(f"{lead}{RELATIONS[rel]} {thing_phrase(s.things[i + 1], rng, attributes, texture)}")
    return "".join(parts)


def scene_clause(s: Scene, rng: random.Random | None = None) -> str:
    light = rng.choice(SYNONYMS[s.light]) if rng else s.light
    mood = rng.choice(SYNONYMS[s.mood]) if rng else s.mood
    return f"; it is {light} and {mood}"


def full_caption(s: Scene, rng: random.Random | None = None) -> str:
    """Everything the picture shows: the caption an edit is made from (the longest of a scene's captions)."""
    if rng is not None and len(s.things) == 2 and s.relations[0] in MIRROR and rng.random() < 0.5:
        s = replace(s, things=s.things[::-1], relations=(MIRROR[s.relations[0]],))
    return relation_phrase(s, rng) + scene_clause(s, rng)


def captions(s: Scene, rng: random.Random) -> list[str]:
    """Three captions of a scene, as COCO has several: full, without texture and scene words, names only."""
    named = [f"a {t.colour} {t.shape}" for t in s.things]
    names = " and ".join(named) if len(named) < 3 else ", ".join(named[:-1]) + " and " + named[-1]
    return [full_caption(s, rng), relation_phrase(s, rng, texture=False), names]


_RELATION_WORDS = sorted(RELATIONS.items(), key=lambda kv: -len(kv[1]))
_THING = re.compile(r"an? (?P<size>\w+) (?:(?P<texture>striped|dotted|checkered) )?(?P<colour>\w+) (?P<shape>\w+)")


class CaptionError(ValueError):
    pass


def chain_pieces(body: str) -> tuple[list[str], list[str]]:
    """A caption's body (without the scene clause) split into its thing phrases and the relations between them."""
    rel_pattern = "|".join(re.escape(p) for _, p in _RELATION_WORDS)
    pieces = re.split(rf"(?:, which is )?\b({rel_pattern})\b ", body)
    return [p.strip() for p in pieces[::2]], [RELATION_OF_PHRASE[p] for p in pieces[1::2]]


def parse_caption(text: str, layout: int = 0) -> Scene:
    """The scene a full caption describes (inverse of `full_caption`); a caption outside the grammar is an error."""
    text = text.strip().rstrip(".").lower()
    body, _, clause = text.partition("; it is ")
    m = re.fullmatch(r"(\w+) and (\w+)", clause)
    if not m or m[1] not in WORD_VALUE or m[2] not in WORD_VALUE:
        raise CaptionError(f"no '; it is <light> and <mood>' clause in {text!r}")
    light, mood = WORD_VALUE[m[1]], WORD_VALUE[m[2]]
    pieces, relations = chain_pieces(body)
    things = []
    for piece in pieces:
        t = _THING.fullmatch(piece)
        if not t or t["shape"] not in SHAPES or t["colour"] not in COLOURS or WORD_VALUE.get(t["size"], t["size"]) \
                not in SIZES:
            raise CaptionError(f"{piece!r} in {text!r} is not '<size> [texture] <colour> <shape>' of the toy world")
        things.append(Thing(t["shape"], t["colour"], WORD_VALUE.get(t["size"], t["size"]), t["texture"]))
    if light not in LIGHTS or mood not in MOODS or len(relations) != len(things) - 1:
        raise CaptionError(f"{text!r} does not describe a toy scene")
    return Scene(tuple(things), tuple(relations), light, mood, layout)


# ------------------------------------------------------------------------------------------------ rendering


def _offset(rel: str, a: int, b: int, side: int) -> tuple[float, float]:
    """Centre of thing A minus centre of thing B for `A <rel> B`, sizes a and b."""
    apart, touch = (a + b) / 2 + GAP, (a + b) / 2
    return {"left": (-apart, 0), "right": (apart, 0), "above": (0, -apart), "below": (0, apart),
            "next": (side * (touch + 1), 0), "top": (0, -touch), "inside": (0, 0)}[rel]


def layout_positions(s: Scene) -> list[tuple[float, float]]:
    """Centres of the things on the canvas: the chain laid out, centred, moved by a seeded jitter."""
    rng = random.Random(s.layout)
    side = rng.choice((-1, 1))
    sizes = [SIZES[t.size] for t in s.things]
    pos = [(0.0, 0.0)]
    for i, rel in enumerate(s.relations):
        dx, dy = _offset(rel, sizes[i], sizes[i + 1], side)
        pos.append((pos[i][0] - dx, pos[i][1] - dy))
    lo_x = min(x - w / 2 for (x, _), w in zip(pos, sizes))
    hi_x = max(x + w / 2 for (x, _), w in zip(pos, sizes))
    lo_y = min(y - w / 2 for (_, y), w in zip(pos, sizes))
    hi_y = max(y + w / 2 for (_, y), w in zip(pos, sizes))
    slack_x, slack_y = max(0.0, CANVAS - 4 - (hi_x - lo_x)), max(0.0, CANVAS - 4 - (hi_y - lo_y))
    jx, jy = rng.uniform(-0.5, 0.5) * slack_x, rng.uniform(-0.5, 0.5) * slack_y
    cx, cy = CANVAS / 2 - (lo_x + hi_x) / 2 + jx, CANVAS / 2 - (lo_y + hi_y) / 2 + jy
    return [(x + cx, y + cy) for x, y in pos]


def _shape_mask(shape: str, cx: float, cy: float, size: int) -> Image.Image:
    k = SUPERSAMPLE
    mask = Image.new("L", (CANVAS * k, CANVAS * k), 0)
    d = ImageDraw.Draw(mask)
    x0, y0, x1, y1 = (cx - size / 2) * k, (cy - size / 2) * k, (cx + size / 2) * k, (cy + size / 2) * k
    w = size * k
    if shape == "ball":
        d.ellipse((x0, y0, x1, y1), fill=255)
    elif shape == "cube":
        d.rectangle((x0, y0, x1, y1), fill=255)
    elif shape == "tent":
        d.polygon([(x0, y1), (x1, y1), ((x0 + x1) / 2, y0)], fill=255)
    elif shape == "ring":
        d.ellipse((x0, y0, x1, y1), fill=255)
        d.ellipse((x0 + w * 0.28, y0 + w * 0.28, x1 - w * 0.28, y1 - w * 0.28), fill=0)
    elif shape == "star":
        import math

        pts = [((cx + (0.5 if i % 2 == 0 else 0.22) * size * math.sin(i * math.pi / 5)) * k,
                (cy - (0.5 if i % 2 == 0 else 0.22) * size * math.cos(i * math.pi / 5)) * k) for i in range(10)]
        d.polygon(pts, fill=255)
    elif shape == "kite":
        d.polygon([((x0 + x1) / 2, y0), (x1, (y0 + y1) / 2), ((x0 + x1) / 2, y1), (x0, (y0 + y1) / 2)], fill=255)
    elif shape == "egg":
        d.ellipse((x0 + w * 0.18, y0, x1 - w * 0.18, y1), fill=255)
    elif shape == "cup":
        d.polygon([(x0, y0), (x1 - w * 0.25, y0), (x1 - w * 0.35, y1), (x0 + w * 0.1, y1)], fill=255)
        d.ellipse((x1 - w * 0.4, y0 + w * 0.2, x1, y0 + w * 0.65), fill=255)
        d.ellipse((x1 - w * 0.3, y0 + w * 0.32, x1 - w * 0.1, y0 + w * 0.53), fill=0)
    return mask.resize((CANVAS, CANVAS), Image.Resampling.BOX)


def _texture(texture: str | None, colour: tuple[int, int, int]) -> np.ndarray:
    base = np.empty((CANVAS, CANVAS, 3), np.float32)
    base[:] = colour
    if texture is None:
        return base
    yy, xx = np.mgrid[0:CANVAS, 0:CANVAS]
    second = {"striped": (yy // 2) % 2 == 1, "dotted": (yy % 4 == 1) & (xx % 4 == 1),
              "checkered": ((yy // 3) + (xx // 3)) % 2 == 1}[texture]
    # the pattern's second colour: the colour pulled half way to white (black things get grey marks)
    base[second] = np.asarray(colour, np.float32) * 0.5 + 127
    return base


def render(s: Scene) -> Image.Image:
    """The scene as a 64x64 RGB image; the same scene (layout included) always gives the same pixels."""
    canvas = np.empty((CANVAS, CANVAS, 3), np.float32)
    canvas[:] = BACKGROUND
    positions = layout_positions(s)
    inside = {i for i, r in enumerate(s.relations) if r == "inside"}
    # containers first, so a thing inside another is drawn over it
    for i in sorted(range(len(s.things)), key=lambda i: i in inside):
        t = s.things[i]
        alpha = np.asarray(_shape_mask(t.shape, *positions[i], SIZES[t.size]), np.float32)[..., None] / 255
        canvas = canvas * (1 - alpha) + _texture(t.texture, COLOURS[t.colour]) * alpha
    canvas *= LIGHTS[s.light]
    noise = np.random.default_rng(s.layout).normal(0.0, MOODS[s.mood], canvas.shape)
    return Image.fromarray(np.clip(np.rint(canvas + noise), 0, 255).astype(np.uint8))


def pixel_hash(image: Image.Image) -> str:
    return hashlib.sha1(image.convert("RGB").tobytes()).hexdigest()
