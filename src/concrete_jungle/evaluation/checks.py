"""The benchmark files, checked before any model loads, so that a wrong folder fails in seconds with the file and
the expected layout named: every image read once (present, decodable, its content hashed), the subset files
found, JSON read without losing a repeated key; what a file's items must hold for the evaluation to use them,
checked by each benchmark's ``load`` so that ``eval --check`` finds what the run would trip over after its model
loaded; and the digest of the files a result was computed on, which `report.compare` matches.

Every check is an error of one line naming the file, the item (or line) and the field, and the fix.
"""

from __future__ import annotations

import hashlib
import json
import math
import string
from pathlib import Path
from typing import NamedTuple

from ..records import csv_field_limit, file_digest


class BenchmarkDataError(ValueError):
    """Benchmark files missing or in the wrong layout; the message names the file and the layout."""


class CheckedImages(NamedTuple):
    problems: dict[Path, str]  # why each unusable image is left out ({} when all are fine)
    sha256: dict[Path, str]  # the content of each usable one, for the digest a result carries


def check_images(paths: list[Path], layout: str, skip_missing: bool) -> CheckedImages:
    """Every image read once, opened safely and decoded whole (`images.read_image`), so a file that would fail in
    the middle of a run fails here, before any model loads; its bytes hashed on the way. Without ``skip_missing``
    the first problem is an error."""
    from ..images import ImageRejected, read_image

    problems: dict[Path, str] = {}
    sha256: dict[Path, str] = {}
    for path in dict.fromkeys(paths):
        if not Path(path).exists() and not Path(path).is_symlink():
            problems[path] = "missing"
        else:
            try:
                image, data = read_image(path)
                image.close()
                sha256[path] = hashlib.sha256(data).hexdigest()
            except ImageRejected as e:
                problems[path] = f"unreadable ({e})"
        if problems.get(path) and not skip_missing:
            raise BenchmarkDataError(f"image {path} is {problems[path]}; expected layout: {layout}. "
                                     "Fix the data root, or pass --skip-missing to count and skip such items.")
    return CheckedImages(problems, sha256)


def checked_subsets(data: dict[str, list[tuple]], layout: str, skip_missing: bool, path_at: int = 1) -> dict:
    """Items per subset whose image (tuple field ``path_at``) is usable, how many were skipped per subset, and the
    images' sha256 (``files``)."""
    problems, sha256 = check_images([it[path_at] for items in data.values() for it in items], layout, skip_missing)
    return {"items": {s: [it for it in items if it[path_at] not in problems] for s, items in data.items()},
            "skipped": {s: sum(it[path_at] in problems for it in items) for s, items in data.items()},
            "files": sha256}


def subset_files(json_dir: Path, official: tuple[str, ...], subsets, layout: str) -> dict[str, Path]:
    """The JSON file of each subset to evaluate. ``subsets`` named: exactly those. Otherwise every ``*.json`` in
    ``json_dir``: the official subsets that are there, in their order, then any others (a user's own subset files
    in the same format), so a folder holding three of the seven files evaluates those three."""
    if subsets is not None:
        return {s: json_dir / f"{s}.json" for s in subsets}
    found = {p.stem: p for p in sorted(json_dir.glob("*.json"))} if json_dir.is_dir() else {}
    if not found:
        raise BenchmarkDataError(f"{json_dir} holds no subset files (*.json); expected layout: {layout}")
    return {s: found[s] for s in official if s in found} | {s: p for s, p in found.items() if s not in official}


def unit_of(path: str | Path) -> str:
    """The image an item uses, named the same wherever the data root is: its folder and file name
    (``val2017/000000085329.jpg``). Items of one image are resampled together (`stats`)."""
    return "/".join(Path(path).parts[-2:])


def image_path(image_dir: Path, name: str) -> Path:
    """An image file named by a benchmark file, which must stay inside its image folder."""
    from ..sources import UnsafePathError, join_under

    try:
        return join_under(image_dir, name)
    except UnsafePathError as e:
        raise BenchmarkDataError(f"{e}: a benchmark file may only name images inside its image folder") from None


class _DuplicateKey(Exception):
    pass


def _refuse_duplicates(pairs: list) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:  # json keeps the last silently: one item of the benchmark would be lost
            raise _DuplicateKey(key)
        out[key] = value
    return out


def load_json_file(path: Path, layout: str):
    import json

    if not path.is_file():
        raise BenchmarkDataError(f"{path} not found; expected layout: {layout}")
    try:
        return json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_refuse_duplicates)
    except json.JSONDecodeError as e:
        raise BenchmarkDataError(f"{path}: malformed JSON at line {e.lineno}: {e.msg}") from None
    except _DuplicateKey as e:
        raise BenchmarkDataError(f"{path}: key {e.args[0]!r} appears twice; JSON would keep only the last item of "
                                 "that key, so the file is not a benchmark file as published") from None


def shown(value) -> str:
    """A value as the file has it, cut short: ``null``, ``3``, ``"a dog"``, ``{...}``."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def text_of(value, path: Path, where: str, field: str) -> str:
    """``value`` if it is a string; else an error naming the file, ``where`` in it (the item) and the field."""
    if not isinstance(value, str):
        raise BenchmarkDataError(f"{path}: {where} has {field} {shown(value)}, not text; give it as a JSON string")
    return value


def items_of(raw, path: Path, kind: type, layout: str) -> list:
    """``raw``'s items as ``(key, item)`` pairs: a non-empty list (keyed by position) or dict (by key) of
    ``kind`` (``dict``, ``list``, or ``object`` for any); else an error naming the file and the first item that is
    not one."""
    pairs = list(raw.items()) if isinstance(raw, dict) else list(enumerate(raw)) if isinstance(raw, list) else None
    if pairs is None:
        raise BenchmarkDataError(f"{path}: expected a list or a dict of items, found {type(raw).__name__}; "
                                 f"expected layout: {layout}")
    if not pairs:
        raise BenchmarkDataError(f"{path} holds no items; remove it or give it the benchmark's items")
    for key, item in pairs:
        if not isinstance(item, kind):
            what = {dict: "an object", list: "a list"}[kind]
            raise BenchmarkDataError(f"{path}: item {key!r} is {shown(item)}, not {what}; expected layout: {layout}")
    return pairs


def checked_items(path: Path, items, fields: tuple[str, ...], layout: str) -> list[tuple[str, dict]]:
    """``(key, item)`` pairs of a subset file (a dict keyed by item, or a list), each item a mapping with every
    field a string; a malformed item or an empty file is an error naming the file, the item and the field."""
    pairs = items_of(items, path, object, layout)
    for key, item in pairs:
        missing = [f for f in fields if not isinstance(item, dict) or not isinstance(item.get(f), str)]
        if missing:
            raise BenchmarkDataError(f"{path}: item {key!r} has no text in {', '.join(missing)}; every item needs "
                                     f"{', '.join(fields)}")
    return [(str(key), item) for key, item in pairs]


def pixel_box(item: dict, path: Path, where: str) -> tuple[float, float, float, float]:
    """``(x, y, w, h)`` from ``bbox_x/y/w/h``: numbers whose crop, cut to whole pixels as PIL cuts it (each
    corner rounded), is at least one pixel wide and high; a zero-size or negative box would fail in the run."""
    box = []
    for k in "xywh":
        value = item[f"bbox_{k}"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise BenchmarkDataError(f"{path}: {where} has bbox_{k} {shown(value)}, not a number; a box is four "
                                     "numbers (x, y, width, height in pixels)")
        box.append(float(value))
    x, y, w, h = box
    if round(x + w) <= round(x) or round(y + h) <= round(y):
        raise BenchmarkDataError(f"{path}: {where} has a box of zero or negative size (bbox_w {shown(item['bbox_w'])},"
                                 f" bbox_h {shown(item['bbox_h'])}, less than a pixel once cut to whole pixels); give "
                                 "it a width and height of at least one pixel, or remove the item")
    return x, y, w, h


def outside(box: tuple[float, float, float, float], size: tuple[int, int]) -> bool:
    """Whether the crop of ``box`` lies wholly outside an image of ``size``: PIL fills it with black."""
    x, y, w, h = box
    return round(x) >= size[0] or round(y) >= size[1] or round(x + w) <= 0 or round(y + h) <= 0


def boxes_outside(parts: dict[str, list[tuple[str, object]]]) -> tuple[dict[str, int], list[str]]:
    """Per part (its items' ``(key, Crop)``, pictures already checked and decoded whole), how many boxes lie wholly
    outside their picture, and a note per part that has any: the official code of ARO, CREPE and Hard Positives
    crops such a box as PIL does, to black pixels, and scores the item on it, so we score it too and say so."""
    from PIL import Image

    sizes: dict = {}
    for _, crop in (item for items in parts.values() for item in items):
        if crop.box is not None and crop.path not in sizes:
            with Image.open(crop.path) as im:  # its header
                sizes[crop.path] = im.size
    found = {part: [key for key, crop in items if crop.box is not None and outside(crop.box, sizes[crop.path])]
             for part, items in parts.items()}
    notes = [f"{part}: {len(keys)} item(s) have a box wholly outside their image (items {', '.join(keys[:5])}"
             f"{', ...' if len(keys) > 5 else ''}); each is scored on an all-black crop, as the official code scores "
             "it" for part, keys in found.items() if keys]
    return {part: len(keys) for part, keys in found.items()}, notes


def release_folder(folder: Path, inner: str, *markers: str) -> Path:
    """The folder a benchmark's release lies in: ``folder`` itself, or ``folder/inner``, where the release's own
    download leaves its files (its ``data/``; EqBen's ``eqben_vllm/``), whichever holds one of ``markers`` (globs),
    read as it lies; both is an error naming both."""
    def holds(place: Path) -> bool:
        return any(any(place.glob(marker)) for marker in markers)

    here, there = holds(folder), holds(folder / inner)
    if here and there:
        raise BenchmarkDataError(f"{folder} and {folder / inner} both hold {' or '.join(markers)}: two copies of the "
                                 "release; keep one")
    return folder / inner if there else folder


def numbered_lines(path: Path) -> list[tuple[int, str]]:
    """The non-blank lines of a text file, stripped, with their line numbers (from 1)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise BenchmarkDataError(f"{path} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    return [(n, line.strip()) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]


def _csv_records(path: Path, layout: str, read) -> list:
    """``read(file)`` of a CSV file opened as UTF-8 (a byte-order mark dropped), cells of any length; an error naming
    the file when it is not UTF-8 or not CSV."""
    import csv
    import sys

    try:
        with csv_field_limit(sys.maxsize), open(path, encoding="utf-8-sig", newline="") as f:  # a cell may be long
            return read(f)
    except UnicodeDecodeError as e:
        raise BenchmarkDataError(f"{path} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    except csv.Error as e:
        raise BenchmarkDataError(f"{path}: not a CSV file ({e}); expected layout: {layout}") from None


def csv_lines(path: Path, layout: str) -> list[tuple[int, list[str]]]:
    """(line, cells) of every record of a CSV file, the header too."""
    import csv

    def read(f):
        reader = csv.reader(f)
        return [(reader.line_num, cells) for cells in reader]

    return _csv_records(path, layout, read)


def csv_rows(path: Path, columns: tuple[str, ...], layout: str) -> list[tuple[int, dict]]:
    """(line, row) of every data row of a CSV file whose header names at least ``columns``, each row keyed by the
    header; an error naming the file when a column is missing or there is no row."""
    import csv

    def read(f):
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise BenchmarkDataError(f"{path} has no column {', '.join(missing)}; expected layout: {layout}")
        return [(reader.line_num, row) for row in reader]

    rows = _csv_records(path, layout, read)
    if not rows:
        raise BenchmarkDataError(f"{path} holds no rows; expected layout: {layout}")
    return rows


def partial(benchmark: str, missing: list[str], official: int, wholes: list[str], what: str = "files") -> dict:
    """``{"partial": note}`` when ``missing`` names parts of the release that are not there (of ``official``; ``what``:
    files or subsets), else ``{}``; ``wholes``: the metrics left without a value for it (each over parts not all
    there, as SugarCrepe's ADD, REPLACE and SWAP need all their subsets); the parts present keep their scores."""
    if not missing:
        return {}
    shown_files = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return {"partial": f"{official - len(missing)} of the {official} {what} of {benchmark}'s release are here "
                       f"(missing: {shown_files}), so {', '.join(wholes)} (over {what} not all here) have no value; "
                       f"the scores of the {what} here are given"}


def repeated_names(names: list[str]) -> list[tuple[str, int, int]]:
    """``(name, first position, later position)`` of each class name given again: two classes of one name get the
    same weights, so the later one can never be predicted."""
    first: dict[str, int] = {}
    repeated = []
    for i, name in enumerate(names):
        if name in first:
            repeated.append((name, first[name], i))
        else:
            first[name] = i
    return repeated


def distinct_names(names: list[str], where: list[str], source: str) -> None:
    """Each class name once; ``where[i]`` names the place of ``names[i]`` in ``source`` (a line, a class folder)."""
    for name, a, b in repeated_names(names)[:1]:
        raise BenchmarkDataError(f"{source}: class name {name!r} is given twice ({where[a]} and {where[b]}); each "
                                 "class needs a name of its own, or the second can never be predicted")


def checked_templates(templates: list[str], where: list[str], source: str) -> None:
    """Each prompt fills in the class name at ``{c}`` and nothing else (``str.format(c=...)`` is how it is used)."""
    for template, at in zip(templates, where):
        try:
            fields = {field for _, field, _, _ in string.Formatter().parse(template) if field is not None}
        except ValueError as e:
            raise BenchmarkDataError(f"{source}, {at}: prompt {template!r} is not a format string ({e}); write a "
                                     "literal brace as {{ or }}") from None
        unknown = sorted(fields - {"c"})
        if unknown:
            raise BenchmarkDataError(f"{source}, {at}: prompt {template!r} has the placeholder(s) "
                                     f"{', '.join('{' + f + '}' for f in unknown)}; only {{c}} (the class name) "
                                     "is filled in: remove them, or write a literal brace as {{ or }}")
        if "c" not in fields:
            raise BenchmarkDataError(f"{source}, {at}: prompt {template!r} has no {{c}} where the class name goes")


def tree_sha256(root: Path) -> dict[Path, str]:
    """Every file under ``root`` (a dataset root clip_benchmark's builder reads: it decides which files it opens)."""
    return {p: file_digest(p) for p in sorted(root.rglob("*")) if p.is_file()}


def files_digest(files: dict[Path, str], data_root: Path) -> str:
    """One sha256 of the files a benchmark read (file -> its sha256): over the lines ``<sha256>  <name>`` sorted
    by name, each file named by its path under the data root (or, outside it, by its file name), so the same
    files give the same digest wherever the data root is."""
    def name(path: Path) -> str:
        try:
            return Path(path).relative_to(data_root).as_posix()
        except ValueError:
            return Path(path).name

    lines = sorted((name(path), sha) for path, sha in files.items())
    return hashlib.sha256("".join(f"{sha}  {name}\n" for name, sha in lines).encode()).hexdigest()
