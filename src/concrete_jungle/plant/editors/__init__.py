"""Image editors: make the hard-negative image from the anchor image and the rewritten caption.

- ``diffusers``: image-to-image with SDXL-Turbo or any img2img-capable model (`diffusers_img2img.py`)
- ``none``: text-only hard negatives; the anchor image is reused and the record says so
- any other class with this interface, by entry point or ``package.module:Class`` (`plant/plugins.py`); the demo's
  toy world joins that way

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


def make_editor(name: str, **options) -> Editor:
    """An editor by name (built-in, registered plugin, or ``package.module:Class``; see `plugins`)."""
    from ..plugins import create

    return create("editor", name, **options)
