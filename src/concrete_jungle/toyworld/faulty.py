"""An editor that ignores some of its prompts on purpose: the toy world's test of the plant's pair scores.

`FaultyToyEditor` edits like `ToyEditor` (the scene the prompt describes, drawn with the anchor's layout), except
that a seeded share of the prompts (``rate``) is ignored, in one of the ways a real editor fails:

- ``keep``: the anchor picture comes back unchanged (an editor whose strength is too low to change anything);
- ``repaint``: another scene is painted, drawn afresh (its things, relations, light, mood and layout), one the
  prompt does not describe (an editor that loses the anchor and the prompt both).

Whether a prompt is ignored, and how, depends only on (``seed``, the edit's seed, the prompt), so a resumed or
re-batched plant makes the same faults. With ``record=FILE`` the editor writes its own account of every picture
it returns, one JSON line each: the edit's seed, the prompt, the fault (null when it followed the prompt) and the
scene it drew (its full caption and layout seed), from which `separation.pair_verdicts` knows what each negative
picture shows. Use: ``plant --editor concrete_jungle.toyworld.faulty:FaultyToyEditor --editor-option world=DIR
--editor-option record=FILE`` (``benchmarks/score_separation.py`` runs it).
"""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from ..plant.keywords import sample_rng
from .rewrite import ToyEditor, WorldInputError, scenes_file
from .viewer import reads_true
from .world import Scene, full_caption, parse_caption, pixel_hash, render, sample_scene

FAULTS = ("keep", "repaint")
REPAINT_DRAWS = 100  # scenes drawn until one the prompt does not describe (a random scene almost never is one)


def fault_kinds(faults) -> tuple[str, ...]:
    """``faults`` as given (``keep,repaint`` or a list) as a tuple of known kinds; anything else is an error."""
    kinds = tuple(k.strip() for k in faults.split(",")) if isinstance(faults, str) else tuple(faults)
    unknown = [k for k in kinds if k not in FAULTS]
    if not kinds or unknown:
        raise WorldInputError(f"--editor-option faults={faults!r}: give one or more of {', '.join(FAULTS)}, "
                              "comma-separated (e.g. faults=keep,repaint)")
    return kinds


class FaultyToyEditor(ToyEditor):
    """`ToyEditor` that ignores a seeded share ``rate`` of its prompts, by the ``faults`` named (see the module)."""

    name = "toyworld-faulty"

    def __init__(self, world: str | Path, rate: float = 0.5, faults="keep,repaint", seed: int = 0,
                 record: str | Path | None = None):
        self.check_options(world, rate, faults, seed, record)
        super().__init__(world)
        self.rate, self.faults, self.seed = float(rate), fault_kinds(faults), int(seed)
        self.record = None if record is None else Path(record)

    @classmethod
    def check_options(cls, world: str | Path, rate: float = 0.5, faults="keep,repaint", seed: int = 0,
                      record: str | Path | None = None) -> None:
        scenes_file(world, "--editor-option")
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
            raise WorldInputError(f"--editor-option rate={rate!r}: give the share of prompts to ignore, 0 to 1")
        fault_kinds(faults)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise WorldInputError(f"--editor-option seed={seed!r}: give an integer")
        if record is not None and not Path(record).parent.is_dir():
            raise WorldInputError(f"--editor-option record={record}: its folder {Path(record).parent} does not "
                                  "exist; name a file in an existing folder (outside the dataset's --out)")

    def fault(self, prompt: str, seed: int) -> str | None:
        """How this editor fails the prompt edited with ``seed``: None (it follows it), ``keep`` or ``repaint``."""
        rng = sample_rng(self.seed, f"fault\x00{seed}\x00{prompt}")
        return self.faults[rng.randrange(len(self.faults))] if rng.random() < self.rate else None

    def repainted(self, prompt: str, seed: int) -> Scene:
        """The other scene a ``repaint`` draws: the first of a seeded sequence that the prompt does not describe."""
        rng = sample_rng(self.seed, f"repaint\x00{seed}\x00{prompt}")
        for _ in range(REPAINT_DRAWS):
            scene = sample_scene(rng)
            if not reads_true(prompt, scene):
                return scene
        raise WorldInputError(f"no scene in {REPAINT_DRAWS} draws that {prompt!r} does not describe")

    def edit(self, images: list[Image.Image], prompts: list[str], seeds: list[int]) -> list[Image.Image]:
        out, lines = [], []
        for image, prompt, seed in zip(images, prompts, seeds):
            layout = self.layouts.get(pixel_hash(image))
            if layout is None:
                raise WorldInputError("an anchor image the toy world did not render: the toy editors re-render "
                                      "toy scenes only")
            fault = self.fault(prompt, seed)
            scene = self.repainted(prompt, seed) if fault == "repaint" else parse_caption(prompt, layout)
            out.append(image.copy() if fault == "keep" else render(scene))
            # a kept picture shows the anchor's scene, which only the world's scenes.jsonl names: recorded as null
            lines.append({"seed": seed, "prompt": prompt, "fault": fault,
                          "drawn": None if fault == "keep" else full_caption(scene), "layout": scene.layout})
        if self.record is not None:
            with self.record.open("a", encoding="utf-8") as f:
                f.writelines(json.dumps(line) + "\n" for line in lines)
        return out
