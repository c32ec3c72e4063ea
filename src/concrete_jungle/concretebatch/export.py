"""A ConcreteBatch as Parquet, the form the Hugging Face Hub shares datasets in: one row per record with its
pictures as bytes (the JPEGs of the shards, unchanged), its captions and the metadata columns.

A record's first negative is ``neg_image`` (null when that negative is a caption without a picture, as imported
from NegCLIP or CE-CLIP), ``neg_caption`` and ``concreteness``, as the paper's records have one; its second to K-th
negatives are ``more_negatives``, a list (empty for K = 1) of {caption, image (null without a picture),
concreteness}. The first negative is not repeated there: its picture would be stored twice.

One Parquet file per shard (``train-00000-of-00004.parquet``), whose schema carries the Hugging Face feature
description, so ``datasets.load_dataset("parquet", data_files=...)`` (or ``load_dataset(OUT)`` for ``--to hf``)
gives the pictures as images. Each file is written under a temporary name and renamed.

Each file also records the dataset it was made from (its name and `source_digest`: the digests of its shards), and
so does the dataset card, so an export knows its own files. Into a folder holding an export of the same dataset it
writes only the files missing (a stopped export resumes; a finished one is left as it is). Anything else there is
refused before a file is written, and kept: an export of other shards (``overwrite`` replaces it whole: the new
export is written beside it, in ``.export-staging/``, and takes its place once complete), or a file this command did
not write, such as a hand-written ``README.md``, which is never replaced. Hidden entries (``.git``,
``.gitattributes`` of a cloned Hub repository, locks) are not looked at.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

from ..records import atomic_write_json, atomic_write_text, write_error

COLUMNS = ("id", "image", "caption", "neg_image", "neg_caption", "concreteness", "more_negatives", "keyword",
           "category", "mode", "meta")
NEGATIVE = {"caption": {"dtype": "string", "_type": "Value"}, "image": {"_type": "Image"},
            "concreteness": {"dtype": "float64", "_type": "Value"}}
# a list feature as `datasets` >= 3 reads it (a one-element list of the item's features; 4.0 and later also read
# it, though they write {"_type": "List"})
FEATURES = {c: {"_type": "Image"} if c in ("image", "neg_image") else [NEGATIVE] if c == "more_negatives" else
            {"dtype": "float64" if c == "concreteness" else "string", "_type": "Value"} for c in COLUMNS}
SOURCE_KEY = b"concrete_jungle"  # in each Parquet file's schema metadata: the dataset it was exported from
PARQUET_NAME = re.compile(r"train-\d{5,}-of-\d{5,}\.parquet")
CARD = "README.md"
CARD_MARK = re.compile(r"^<!-- concrete-jungle export of (.*): ([0-9a-f]{64}) -->$", re.M)
STAGING = ".export-staging"  # a replacement being written; complete once it holds DONE
DONE = "complete.json"


class ExportError(ValueError):
    """An output folder that holds what the export may not replace; the message names it, and it is kept."""


def schema(source: dict | None = None):
    import pyarrow as pa

    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    negative = pa.struct([("caption", pa.string()), ("image", image), ("concreteness", pa.float64())])
    types = {"image": image, "neg_image": image, "concreteness": pa.float64(), "more_negatives": pa.list_(negative)}
    fields = [pa.field(c, types.get(c, pa.string())) for c in COLUMNS]
    metadata = {b"huggingface": json.dumps({"info": {"features": FEATURES}})}
    if source is not None:
        metadata[SOURCE_KEY] = json.dumps(source, sort_keys=True)
    return pa.schema(fields, metadata=metadata)


def source_digest(urls: list[str]) -> str:
    """The shards' names and sha256 digests (recorded when the shard was written, else computed), as one digest:
    two exports with the same one hold the same rows."""
    import hashlib

    from ..records import file_digest
    from .shards import recorded_digest

    parts = []
    for url in urls:
        path = Path(url)
        digest = recorded_digest(path.parent, int(path.stem.split("-")[1])) or file_digest(path)
        parts.append(f"{path.name}:{digest}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def export(root: str | Path, out: str | Path, to: str = "parquet", partial: bool = False,
           progress: bool = True, overwrite: bool = False) -> list[Path]:
    """Write every record of the ConcreteBatch ``root`` under ``out`` (``to="hf"``: ``out/data/`` and a dataset
    card); the files written. ``overwrite``: replace an export of another dataset that ``out`` holds."""
    from tqdm import tqdm

    from .shards import shard_urls

    root, out = Path(root), Path(out)
    urls = shard_urls(root, partial)  # damaged, unfinished or unmerged: refused, as every reader does
    source = {"dataset": root.resolve().name, "digest": source_digest(urls)}
    prefix = "data/" if to == "hf" else ""
    files = {f"{prefix}train-{n:05d}-of-{len(urls):05d}.parquet": url for n, url in enumerate(urls)}
    finish_replacement(out)  # one that a stopped --overwrite left complete
    held, foreign = holdings(out)
    if foreign:
        raise ExportError(foreign_message(out, foreign[0]))
    # the files of an export this one is not: of other shards, or laid out otherwise (a card without --to hf)
    earlier = {rel: s for rel, s in held.items() if s["digest"] != source["digest"]
               or (rel not in files and not (rel == CARD and to == "hf"))}
    if earlier and not overwrite:
        names = ", ".join(sorted({s["dataset"] for s in earlier.values()}))
        raise ExportError(f"--out {out} holds an export of {names} other than this export of {root} "
                          f"({len(earlier)} file(s), e.g. {out / min(earlier)}); pass --overwrite to replace it "
                          "(the new export takes its place once complete), or choose another folder")
    target = out / STAGING if earlier else out
    if earlier:
        clear_staging(target, files, source["digest"])
    elif (out / STAGING).is_dir():  # a replacement stopped half-way that is no longer asked for
        shutil.rmtree(out / STAGING)
    for rel, url in tqdm(files.items(), desc="export", unit="shard", disable=not progress):
        if not current(target / rel):
            write_parquet(url, target / rel, source)
    if to == "hf":
        card = dataset_card(root, len(urls), source)
        if not (target / CARD).is_file() or (target / CARD).read_text(encoding="utf-8") != card:
            atomic_write_text(target / CARD, card)
    if earlier:
        atomic_write_json(target / DONE, {"files": sorted(files) + ([CARD] if to == "hf" else [])})
        finish_replacement(out)
    return [out / rel for rel in files]


def current(path: Path) -> bool:
    """Whether ``path`` is a Parquet file of this export's columns: one written before a column was added (an
    export of the same dataset, resumed) is written again, so that a folder never mixes two layouts."""
    import pyarrow.parquet as pq

    return path.is_file() and pq.read_schema(path).names == list(COLUMNS)


def write_parquet(url: str, target: Path, source: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .reading import index_shards, read_member
    from .shards import negatives_of

    rows = {c: [] for c in COLUMNS}
    for record in index_shards([url]):
        meta = json.loads(read_member(record["json"]))
        text = lambda ext: read_member(record[ext]).decode("utf-8")  # noqa: E731
        stored = lambda ext, k: read_member(record[ext])  # noqa: E731  (the JPEG bytes, not decoded)
        negatives = [negative_row(n) for n in negatives_of(meta, record, text, stored)]
        rows["id"].append(str(meta.get("id")))
        rows["image"].append({"bytes": read_member(record["jpg"]), "path": None})
        rows["caption"].append(text("txt"))
        rows["neg_image"].append(negatives[0]["image"])
        rows["neg_caption"].append(negatives[0]["caption"])
        rows["concreteness"].append(float(meta["concreteness"]))
        rows["more_negatives"].append(negatives[1:])
        for key in ("keyword", "category", "mode"):
            rows[key].append(None if meta.get(key) is None else str(meta[key]))
        rows["meta"].append(json.dumps(meta, ensure_ascii=False, sort_keys=True))
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(rows, schema=schema(source)), tmp)
        tmp.rename(target)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_error(target, e) from None


def negative_row(negative: dict) -> dict:
    """A negative (`concretebatch.negatives_of`, its picture as bytes) as a row's struct: a missing picture or rating
    is null."""
    c = negative["concreteness"]
    return {"caption": negative["caption"], "concreteness": None if math.isnan(c) else c,
            "image": None if negative["image"] is None else {"bytes": negative["image"], "path": None}}


def parquet_source(path: Path) -> dict | None:
    """The dataset a Parquet file of ours was exported from; None for any other file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_schema(path).metadata or {}
        return json.loads(metadata[SOURCE_KEY])
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return None


def card_source(path: Path) -> dict | None:
    """The dataset a card of ours describes; None for a card written by hand (or by anything else)."""
    try:
        found = CARD_MARK.search(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None
    return {"dataset": found[1], "digest": found[2]} if found else None


def holdings(out: Path) -> tuple[dict[str, dict], list[Path]]:
    """What ``out`` holds: {path relative to it: the dataset it was exported from} for the files of an export,
    and every other entry (hidden ones are not looked at)."""
    held, foreign = {}, []
    entries = sorted(p for p in out.iterdir() if not p.name.startswith(".")) if out.is_dir() else []
    data = out / "data"
    if data.is_dir() and not data.is_symlink():
        entries.remove(data)
        entries += sorted(p for p in data.iterdir() if not p.name.startswith("."))
    for path in entries:
        source = None
        if path.is_file() and path.parent == out and path.name == CARD:
            source = card_source(path)
        elif path.is_file() and PARQUET_NAME.fullmatch(path.name):
            source = parquet_source(path)
        if source is None:
            foreign.append(path)
        else:
            held[path.relative_to(out).as_posix()] = source
    return held, foreign


def foreign_message(out: Path, path: Path) -> str:
    if path == out / CARD:
        return (f"{path} is a dataset card that `concrete-jungle export` did not write; it is kept, never replaced: "
                "export into an empty folder and copy its data/ here, or move the card away first")
    return (f"--out {out} holds {path}, which `concrete-jungle export` did not write; it is kept: export into an "
            "empty folder (or one holding an export of this dataset), or move it away first")


def clear_staging(staging: Path, files: dict[str, str], digest: str) -> None:
    """Keep the files of this export that a stopped replacement left staged; remove the rest (it is ours)."""
    held, foreign = holdings(staging)
    for rel, source in held.items():
        if rel not in files or source["digest"] != digest:
            (staging / rel).unlink()
    for path in foreign:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    (staging / CARD).unlink(missing_ok=True)  # written again


def finish_replacement(out: Path) -> None:
    """Put a complete staged export in place of the export ``out`` holds: its files moved in, then every file of an
    export that is not among them removed. A stop half-way leaves the staged list, and the next export finishes it."""
    staging = out / STAGING
    done = staging / DONE
    if not done.is_file():
        return
    keep = set(json.loads(done.read_text())["files"])
    for rel in sorted(keep):
        if (staging / rel).is_file():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / rel, out / rel)
    held, _ = holdings(out)
    for rel in sorted(set(held) - keep):
        (out / rel).unlink()
    if (out / "data").is_dir() and not any((out / "data").iterdir()):
        (out / "data").rmdir()
    shutil.rmtree(staging)


def dataset_card(root: Path, files: int, source: dict) -> str:
    summary = root / "summary.json"
    counts = json.loads(summary.read_text()) if summary.is_file() else {}
    return "\n".join([
        # no `configs:` block: datasets finds data/train-* by its own layout rule, and (5.x) keys its cache of a
        # folder with such a block by the folder's name alone, so a second export under the same name would load
        # the first one's rows
        "---", "tags:", "- concrete-jungle", "- hard-negatives", "---", "", f"# {source['dataset']}: a ConcreteBatch",
        "",
        "Hard negatives in concrete-jungle's ConcreteBatch form (made by its ConcretePlant, or imported from another "
        "method's training set): each row holds an image and its caption, and negative captions that change a "
        "concrete keyword, each with its negative image where it has one.", "",
        f"{files} Parquet file(s); records: {counts.get('ok', 'see the files')}.", "",
        "Columns: " + ", ".join(f"`{c}`" for c in COLUMNS) + " (`meta`: the record's full metadata as JSON).", "",
        "`neg_image`, `neg_caption` and `concreteness` are a row's first negative; `neg_image` is null where that "
        "negative is a caption without a picture. `more_negatives` lists its further negatives (empty when it has "
        "one), each with `caption`, `image` (null without a picture) and `concreteness`.", "",
        "```python", "from datasets import load_dataset", "ds = load_dataset(\"parquet\", "
        "data_files=\"data/train-*.parquet\")[\"train\"]",
        "row = ds[0]  # every negative of a row, the first one included:",
        "negatives = [{\"caption\": row[\"neg_caption\"], \"image\": row[\"neg_image\"], "
        "\"concreteness\": row[\"concreteness\"]}, *row[\"more_negatives\"]]", "```", "",
        f"<!-- concrete-jungle export of {source['dataset']}: {source['digest']} -->", ""])
