"""What a viewer reads off a toy picture: whether a caption is true of it, judged from the drawn layout.

The test's negatives are false *by construction* (the caption of a changed scene), but a changed scene can still
describe the same picture: two things alike but for their shape, `next to` each other, read the same with their
shapes swapped. `reads_true` judges a caption against the picture as drawn instead: every thing the caption
describes must be a thing of the picture (with the attributes the caption gives it; a caption may leave some
out), distinct things for distinct descriptions, and every stated relation must hold between the things'
boxes as placed by `world.layout_positions`:

- `to the left of` / `to the right of`: apart sideways (no horizontal overlap) and overlapping vertically;
- `above` / `below`: apart vertically and overlapping horizontally (a thing `on top of` another is above it);
- `next to`: sideways, at most `world.GAP` pixels apart (a thing 5 pixels to the left of another is next to it);
- `on top of`: above and touching (at most 1 pixel apart);
- `inside`: its box within the other's box.

The light and the mood are not read by default (no test caption names them); with ``scene_words`` a caption's
`; it is <light> and <mood>` clause must be the scene's too: the picture is rendered from the scene, so its
brightness and noise are the scene's light and mood.
"""

from __future__ import annotations

import itertools

from .world import (
    COLOURS,
    GAP,
    LIGHTS,
    MOODS,
    SHAPES,
    SIZES,
    TEXTURES,
    WORD_VALUE,
    Scene,
    chain_pieces,
    layout_positions,
)


def described(text: str) -> tuple[list[dict], list[str]]:
    """The things a caption describes (each the attributes it names: shape always, size, texture, colour when
    given) and the relations between consecutive things; the light and mood clause is ignored."""
    pieces, relations = chain_pieces(text.strip().rstrip(".").lower().partition("; it is ")[0])
    things = []
    for piece in pieces:
        words = piece.split()
        if len(words) < 2 or words[0] not in ("a", "an") or words[-1] not in SHAPES:
            raise ValueError(f"{piece!r} in {text!r} is not a toy-world thing ('a [size] [texture] [colour] <shape>')")
        thing = {"shape": words[-1]}
        for w in words[1:-1]:
            slot = "colour" if w in COLOURS else "texture" if w in TEXTURES else \
                "size" if WORD_VALUE.get(w, w) in SIZES else None
            if slot is None:
                raise ValueError(f"{w!r} in {text!r} is not a toy-world size, texture or colour")
            thing[slot] = WORD_VALUE.get(w, w)
        things.append(thing)
    return things, relations


def boxes(scene: Scene) -> list[tuple[float, float, float, float]]:
    """Each thing's box as drawn: (left, top, right, bottom) in pixels."""
    out = []
    for (x, y), t in zip(layout_positions(scene), scene.things):
        half = SIZES[t.size] / 2
        out.append((x - half, y - half, x + half, y + half))
    return out


def relation_holds(rel: str, a: tuple, b: tuple, eps: float = 1e-6) -> bool:
    """Whether box ``a`` stands in ``rel`` to box ``b`` as a viewer reads it."""
    gap_x_left = b[0] - a[2]  # a left of b: a's right edge to b's left edge
    gap_x_right = a[0] - b[2]
    gap_y_above = b[1] - a[3]
    overlap_x = min(a[2], b[2]) - max(a[0], b[0]) > eps
    overlap_y = min(a[3], b[3]) - max(a[1], b[1]) > eps
    if rel == "left":
        return gap_x_left >= -eps and overlap_y
    if rel == "right":
        return gap_x_right >= -eps and overlap_y
    if rel == "above":
        return gap_y_above >= -eps and overlap_x
    if rel == "below":
        return a[1] - b[3] >= -eps and overlap_x
    if rel == "next":
        return overlap_y and (-eps <= gap_x_left <= GAP + eps or -eps <= gap_x_right <= GAP + eps)
    if rel == "top":
        return overlap_x and -eps <= gap_y_above <= 1 + eps
    if rel == "inside":
        return a[0] >= b[0] - eps and a[1] >= b[1] - eps and a[2] <= b[2] + eps and a[3] <= b[3] + eps
    raise ValueError(f"unknown relation {rel!r}")


def scene_words_hold(text: str, scene: Scene) -> bool:
    """Whether the caption's light and mood words (`; it is <light> and <mood>`), where it has them, are the
    scene's; a caption without the clause says nothing of them."""
    clause = text.strip().rstrip(".").lower().partition("; it is ")[2]
    if not clause:
        return True
    values = [WORD_VALUE.get(w) for w in clause.split() if w != "and"]
    if not values or any(v not in LIGHTS and v not in MOODS for v in values):
        raise ValueError(f"{clause!r} in {text!r} is not a toy-world light and mood ('<light> and <mood>')")
    return all(v == (scene.light if v in LIGHTS else scene.mood) for v in values)


def reads_true(text: str, scene: Scene, scene_words: bool = False) -> bool:
    """Whether a viewer of the scene's picture would call the caption true (see the module's rules); with
    ``scene_words``, its light and mood clause must hold too (`scene_words_hold`)."""
    if scene_words and not scene_words_hold(text, scene):
        return False
    things, relations = described(text)
    placed = boxes(scene)
    candidates = [[k for k, t in enumerate(scene.things)
                   if all(getattr(t, slot) == value for slot, value in want.items())] for want in things]
    for chosen in itertools.product(*candidates):
        if len(set(chosen)) == len(chosen) and all(
                relation_holds(rel, placed[chosen[i]], placed[chosen[i + 1]]) for i, rel in enumerate(relations)):
            return True
    return False
