"""Image editors: make the hard-negative image from the anchor image and the rewritten caption.

- ``diffusers``: image-to-image with SDXL-Turbo or any img2img-capable model (`diffusers_img2img.py`)
- ``none``: text-only hard negatives; the anchor image is reused and the record says so
- ``toyworld``: the offline demo's exact re-renderer (`toyworld/rewrite.py`; option ``world``)

An editor is anything with a ``name`` and ``edit(images, prompts, seeds) -> images``.
"""

from __future__ import annotations

from typing import Protocol

from PIL import Image


class Editor(Protocol):
    name: str
    reuses_anchor: bool  # True when the negative image is the anchor image itself

    def edit(self, images: list[Image.Image], prompts: list[str], seeds: list[int]) -> list[Image.Image]: ...


class NoEditor:
    """Text-only hard negatives, for users without a GPU: the negative image is the anchor image."""

    name = "none"
    reuses_anchor = True

    def edit(self, images: list[Image.Image], prompts: list[str], seeds: list[int]) -> list[Image.Image]:
        return list(images)


EDITORS = ("none", "diffusers", "toyworld")


def make_editor(name: str, **options) -> Editor:
    if name == "none":
        return NoEditor()
    if name == "diffusers":
        from .diffusers_img2img import DiffusersEditor

        return DiffusersEditor(**options)
    if name == "toyworld":
        from ..toyworld.rewrite import ToyEditor

        return ToyEditor(**options)
    raise ValueError(f"editor {name!r} is not one of {EDITORS}")
