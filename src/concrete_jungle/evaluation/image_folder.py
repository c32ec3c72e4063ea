"""An ImageFolder split read as torchvision's ``ImageFolder`` reads it (clip_benchmark's folder datasets are that
class): the class folders and their indices, the pictures of each class in torchvision's order, and what it leaves
out, said rather than skipped in silence.

torchvision's rule (``datasets/folder.py``: ``find_classes``, ``make_dataset``, ``IMG_EXTENSIONS``): the classes are
the sub-folders of the split sorted as text (``10`` before ``3``; a hidden folder is a class too), class ``k`` the
k-th of them; a class's pictures are every file under its folder, sub-folders included (symbolic links followed),
the folders walked in the sorted order of their paths and each folder's files sorted, whose name ends, in any
case, in one of `IMG_EXTENSIONS`. Another file (a ``.gif``, a ``.txt``) is not read by torchvision either: it is
counted and named in a note.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")  # torchvision's


def class_folders(split: Path) -> list[str]:
    """The class folders of ``split`` in torchvision's order (class ``k`` is the k-th)."""
    return sorted(entry.name for entry in os.scandir(split) if entry.is_dir())


def pictures(split: Path, classes: list[str]) -> tuple[list[tuple[Path, int]], list[Path]]:
    """(picture, class index) in torchvision's order, and the files under the class folders it does not read."""
    items, others = [], []
    for k, name in enumerate(classes):
        for folder, _, files in sorted(os.walk(os.path.join(split, name), followlinks=True)):
            for file in sorted(files):
                path = Path(folder) / file
                if file.lower().endswith(IMG_EXTENSIONS):
                    items.append((path, k))
                else:
                    others.append(path)
    return items, others


def not_read_note(split: Path, others: list[Path]) -> list[str]:
    """The note on the files of a split torchvision does not read: how many, and a few of them by name."""
    if not others:
        return []
    named = ", ".join(str(p.relative_to(split)) for p in others[:3]) + (", ..." if len(others) > 3 else "")
    return [f"{split}: {len(others)} file(s) in the class folders are not read ({named}): their names do not end in "
            f"one of torchvision's image extensions ({' '.join(IMG_EXTENSIONS)}), and torchvision's ImageFolder "
            "does not read them either"]


def empty_classes_note(split: Path, classes: list[str], items: list[tuple[Path, int]]) -> list[str]:
    """The note on class folders without a picture: kept as classes (the classifier offers them; no image tests
    them), where torchvision's ImageFolder refuses the split unless ``allow_empty=True``."""
    present = {y for _, y in items}
    empty = [c for k, c in enumerate(classes) if k not in present]
    if not empty:
        return []
    named = ", ".join(empty[:3]) + (", ..." if len(empty) > 3 else "")
    return [f"{split}: {len(empty)} class folder(s) hold no picture ({named}): kept as classes, which the classifier "
            "offers and no image tests (torchvision's ImageFolder refuses such a split unless allow_empty=True)"]


def naming_order(classes: list[str]) -> list[int]:
    """The class indices in the order a list of class names gives their names: by number when every class folder is
    named by a whole number (``3 ... 10``, whose names a list gives as three ... ten, while torchvision's indices put
    ``10`` first), else torchvision's own order."""
    if classes and all(re.fullmatch(r"[0-9]+", c) for c in classes):
        return sorted(range(len(classes)), key=lambda k: (int(classes[k]), classes[k]))
    return list(range(len(classes)))


def by_index(classes: list[str], names: list[str]) -> list[str]:
    """``names`` (one per class, in `naming_order`) rearranged by class index."""
    out = [""] * len(classes)
    for k, name in zip(naming_order(classes), names):
        out[k] = name
    return out
