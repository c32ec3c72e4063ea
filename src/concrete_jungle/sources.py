"""Caption sources: read the caption files users have into one stream of `CaptionSample`s.

Formats (detected from the file, or set with ``--format``):

- ``karpathy``: COCO/Flickr Karpathy split file (``dataset_coco.json``): ``images[].sentences[].raw``,
  ``split``, ``filepath``/``filename``; id = ``cocoid`` (else ``imgid``).
- ``coco``: COCO ``captions_*.json``: ``images`` + ``annotations`` grouped per ``image_id``.
- ``sugarcrepe``: the official SugarCrepe JSON (dict of ``{filename, caption, negative_caption}``).
  The positive captions are used, de-duplicated by caption text across all files read
  (the 7 subsets hold 4,345 unique positives); id = image stem + a hash of the caption.
- ``jsonl``: one object per line with ``id`` and ``caption`` (string) or ``captions`` (list),
  optional ``image``.
- ``csv``: a header with ``id``, one or more ``caption*`` columns, optional ``image``.

A file that cannot be read raises `SourceError` naming the file and the fix. A single bad record
(a malformed JSONL line, a record without captions) is yielded with ``error`` set, so the caller can
log it as skipped and go on.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

FORMATS = ("karpathy", "coco", "sugarcrepe", "jsonl", "csv")


class SourceError(ValueError):
    """A caption file that cannot be read as a whole."""


class UnsafePathError(ValueError):
    """A file name from a data file that would read outside the folder it must be in."""


def join_under(root: str | Path, name: str) -> Path:
    """``root / name`` for a file name read from a captions or benchmark file, which must stay inside ``root``.

    The name must be relative and must not climb out with ``..``; this is checked on the name itself, not on
    the resolved path, so symbolic links the user made inside ``root`` keep working. Otherwise a data file
    could make `plant` copy any readable file of the machine into a shard.
    """
    norm = os.path.normpath(name)
    if os.path.isabs(norm) or norm == os.pardir or norm.startswith(os.pardir + os.sep):
        raise UnsafePathError(f"image path {name!r} points outside {root}; image names must be relative to it")
    return Path(root) / norm


_WORD = re.compile(r"\w+|[^\w\s]")


def anchor_caption(captions: list[str]) -> str | None:
    """The caption with the most word tokens (ties: the first), docs/method.md §1; ``None`` if all are blank.

    Tokens are counted with a word/punctuation regex instead of a full spaCy parse of every caption,
    which would cost one parse per caption instead of one per sample.
    """
    best, best_len = None, -1
    for caption in captions:
        n = len(_WORD.findall(caption)) if caption and caption.strip() else -1
        if n > best_len:
            best, best_len = caption, n
    return best if best_len > 0 else None



@dataclass
class CaptionSample:
    id: str
    captions: list[str] = field(default_factory=list)
    image: str | None = None  # path relative to the image root
    error: str | None = None  # set for a record that cannot be used; the reason it is skipped


def _load_json(path: Path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise SourceError(f"{path}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except UnicodeDecodeError as e:
        raise SourceError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _kind_from_suffix(path: Path) -> str:
    """``jsonl``/``csv`` from the extension; ``json`` means the content decides (see `_json_kind`)."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        return suffix[1:]
    if suffix in (".csv", ".tsv"):
        return "csv"
    raise SourceError(f"cannot detect the format of {path} from its extension; set --format to one of {FORMATS}")


def _json_kind(path: Path, data) -> str:
    if isinstance(data, dict) and isinstance(data.get("images"), list):
        if "annotations" in data:
            return "coco"
        if data["images"] and isinstance(data["images"][0], dict) and "sentences" in data["images"][0]:
            return "karpathy"
    if isinstance(data, dict) and data:
        first = next(iter(data.values()))
        if isinstance(first, dict) and {"filename", "caption", "negative_caption"} <= first.keys():
            return "sugarcrepe"
    keys = sorted(data)[:8] if isinstance(data, dict) else type(data).__name__
    raise SourceError(
        f"cannot detect the caption format of {path} (top level: {keys}); expected a Karpathy split file "
        f"(images[].sentences), COCO captions (images + annotations) or SugarCrepe JSON; "
        f"set --format to one of {FORMATS}"
    )


def expand_paths(paths: list[str | Path]) -> list[Path]:
    """Files named directly, plus every caption file inside a named directory (sorted)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.suffix.lower() in (".json", ".jsonl", ".csv", ".tsv"))
            if not found:
                raise SourceError(f"directory {p} holds no .json, .jsonl or .csv caption file")
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            raise SourceError(f"captions file not found: {p}")
    return out


def read_samples(paths: list[str | Path], fmt: str | None = None, split: str | None = None) -> Iterator[CaptionSample]:
    """All samples of ``paths`` in file order. ``split`` filters Karpathy files (``train`` or ``train,restval``)."""
    if fmt is not None and fmt not in FORMATS:
        raise SourceError(f"unknown format {fmt!r}; choose one of {FORMATS}")
    files = expand_paths(paths)
    seen_captions: set[str] = set()  # SugarCrepe de-duplication spans all files
    for path in files:
        kind = fmt or _kind_from_suffix(path)
        if kind == "jsonl":
            samples = _read_jsonl(path)
        elif kind == "csv":
            samples = _read_csv(path)
        else:
            data = _load_json(path)
            if kind == "json":
                kind = _json_kind(path, data)
            if kind == "karpathy":
                samples = _read_karpathy(path, data, split)
            elif kind == "coco":
                samples = _read_coco(path, data)
            else:
                samples = _read_sugarcrepe(path, data, seen_captions)
        yield from map(_valid_text, samples)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _valid_text(sample: CaptionSample) -> CaptionSample:
    """The sample, or a skipped one when its text cannot be written as UTF-8: JSON may escape a lone surrogate
    (``"\\ud800"``), which no UTF-8 file can hold. Its id is kept readable, the surrogate written as an escape."""
    if sample.error is None and not all(map(_encodable, [sample.id, sample.image or "", *sample.captions])):
        return CaptionSample(sample.id.encode("utf-8", "backslashreplace").decode("utf-8"),
                             error="not valid Unicode text (a lone surrogate such as \\ud800)")
    return sample


def _read_karpathy(path: Path, data, split: str | None) -> Iterator[CaptionSample]:
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise SourceError(f"{path}: not a Karpathy split file (no 'images' list)")
    splits = set(split.replace("+", ",").split(",")) if split else None
    for n, img in enumerate(data["images"]):
        if splits is not None and img.get("split") not in splits:
            continue
        sid = str(img.get("cocoid", img.get("imgid", img.get("filename", n))))
        caps = [s.get("raw", "") for s in img.get("sentences", []) if isinstance(s, dict)]
        image = "/".join(p for p in (img.get("filepath"), img.get("filename")) if p) or None
        yield CaptionSample(sid, caps, image, None if caps else "no captions")


def _read_coco(path: Path, data) -> Iterator[CaptionSample]:
    files = {img["id"]: img.get("file_name") for img in data["images"]}
    grouped: dict[int, list[str]] = {i: [] for i in files}
    for ann in data["annotations"]:
        grouped.setdefault(ann["image_id"], []).append(ann.get("caption", ""))
    for image_id, caps in grouped.items():
        yield CaptionSample(str(image_id), caps, files.get(image_id), None if caps else "no captions")


def _read_sugarcrepe(path: Path, data, seen: set[str]) -> Iterator[CaptionSample]:
    if not isinstance(data, dict):
        raise SourceError(f"{path}: SugarCrepe JSON must be a dict keyed by item index")
    for key, item in data.items():  # iterate keys: some official subsets are not contiguous
        caption = item.get("caption") if isinstance(item, dict) else None
        if not isinstance(caption, str):
            yield CaptionSample(f"{path.stem}/{key}", error="no caption field")
            continue
        if caption in seen:
            continue
        seen.add(caption)
        digest = hashlib.sha1(caption.encode("utf-8")).hexdigest()[:10]
        image = item.get("filename")
        yield CaptionSample(f"{Path(image or 'sc').stem}-{digest}", [caption], image)


def _record_sample(record, where: str) -> CaptionSample:
    if not isinstance(record, dict):
        return CaptionSample(where, error="record is not a JSON object")
    sid = record.get("id", record.get("image_id", record.get("key")))
    if sid is None or str(sid).strip() == "":
        return CaptionSample(where, error="record has no 'id'")
    caps = record.get("captions", record.get("caption"))
    if isinstance(caps, str):
        caps = [caps]
    if not isinstance(caps, list) or not all(isinstance(c, str) for c in caps):
        return CaptionSample(str(sid), error="record has no 'caption' string or 'captions' list")
    image = record.get("image", record.get("filename"))
    if image is not None and not isinstance(image, str):
        return CaptionSample(str(sid), error="record's 'image' is not a file name")
    return CaptionSample(str(sid), caps, image)


def _read_jsonl(path: Path) -> Iterator[CaptionSample]:
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                yield CaptionSample(f"{path.name}:{lineno}", error=f"malformed JSON on line {lineno}: {e.msg}")
                continue
            yield _record_sample(record, f"{path.name}:{lineno}")


def _read_csv(path: Path) -> Iterator[CaptionSample]:
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        dialect = "excel-tab" if path.suffix.lower() == ".tsv" else "excel"
        reader = csv.DictReader(f, dialect=dialect)
        header = reader.fieldnames or []
        id_col = next((c for c in ("id", "image_id", "key") if c in header), None)
        cap_cols = [c for c in header if c.lower().startswith("caption")]
        if id_col is None or not cap_cols:
            raise SourceError(
                f"{path}: a caption CSV needs an 'id' column and at least one 'caption' column; its header is {header}"
            )
        image_col = next((c for c in ("image", "filename") if c in header), None)
        for lineno, row in enumerate(reader, start=2):
            caps = [row[c] for c in cap_cols if row.get(c)]
            sid = (row.get(id_col) or "").strip()
            if not sid:
                yield CaptionSample(f"{path.name}:{lineno}", error="row has no id")
                continue
            yield CaptionSample(sid, caps, row.get(image_col) if image_col else None)
