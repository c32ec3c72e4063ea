"""Image editors: make the hard-negative image from the anchor image and the rewritten caption.

- ``diffusers``: image-to-image with SDXL-Turbo or any img2img-capable model (`diffusers_img2img.py`)
- ``none``: text-only hard negatives; the anchor image is reused and the record says so
- any other class with this interface, by entry point or ``package.module:Class`` (`plugins.py`); the demo's
  toy world joins that way

An editor is anything with a ``name`` and ``edit(images, prompts, seeds) -> images``. It may also have
``meta_fields(keyword, caption, prompt) -> dict``: fields of its own written into each record's metadata beside the
plant's (the toy editor: ``edit_kind``, the slot the keyword came from).
"""

from __future__ import annotations

from typing import Protocol

from PIL import Image

from ...errors import PlantError


class Editor(Protocol):
    name: str
    reuses_anchor: bool  # True when the negative image is the anchor image itself

    def edit(self, images: list[Image.Image], prompts: list[str], seeds: list[int]) -> list[Image.Image]: ...


def checked_meta_fields(editor, fields, plant_fields: dict) -> dict:
    """What an editor's ``meta_fields`` returned, held to its contract: a dict of named fields, none of them one the
    plant writes itself (``plant_fields``), which it would overwrite."""
    if not isinstance(fields, dict) or not all(isinstance(k, str) for k in fields):
        raise PlantError(f"editor {editor.name!r} returned a {type(fields).__name__} from meta_fields(); it returns a "
                         "dict of field names to JSON values")
    taken = sorted(set(fields) & set(plant_fields))
    if taken:
        raise PlantError(f"editor {editor.name!r}'s meta_fields() names {', '.join(taken)}, which the plant writes "
                         "itself; give its fields other names")
    return fields


class NoEditor:
    """Text-only hard negatives, for users without a GPU: the negative image is the anchor image."""

    name = "none"
    reuses_anchor = True

    def edit(self, images: list[Image.Image], prompts: list[str], seeds: list[int]) -> list[Image.Image]:
        return list(images)


def make_editor(name: str, **options) -> Editor:
    """An editor by name (built-in, registered plugin, or ``package.module:Class``; see `plugins`)."""
    from ...plugins import create

    return create("editor", name, **options)
