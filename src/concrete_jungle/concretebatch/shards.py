"""ConcreteBatch on disk (docs/method.md §4): WebDataset tar shards plus a manifest, written crash-safe (read back by
`reading`).

Layout of a dataset directory::

    shard-000000.tar ...         one record per anchor: __key__, jpg, txt, neg.jpg, neg.txt, json; a record
                                 with K > 1 negatives adds neg2.jpg, neg2.txt ... negK.jpg, negK.txt, one with
                                 P > 1 positive captions of its picture (``txt`` the first) pos2.txt ... posP.txt
    manifests/shard-000000.jsonl one row per processed sample of that shard (ok or rejected), written
                                 atomically after its tar, so a shard is either complete or absent
    manifest.jsonl, rejects.jsonl, summary.json, config.yaml   (when every part is done)

A negative always has its caption; its picture may be absent (the negatives of NegCLIP, FSC-CLIP and CE-CLIP are
captions only): the loss then masks that picture (`loss.layout`). The record's json holds ``concreteness`` (the
first negative's rating) and, for K > 1, a negative without a picture or one whose entailment was decided,
``negatives``: one dict per negative with at least its ``concreteness``, and where decided
``anchor_true_of_negative`` (whether the anchor's caption is true of that negative's picture; absent or null:
unknown) and ``entailment`` (how it was decided).

A shard is written to a temporary name and renamed when complete. Tar members carry a fixed mtime, so
re-making a shard gives the same bytes.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
from itertools import count
from pathlib import Path

from PIL import Image

from ..errors import DatasetError
from ..records import atomic_write_jsonl, atomic_write_text, file_digest, read_jsonl, write_error

SHARD_PATTERN = "shard-{:06d}.tar"


def sample_key(sample_id: str) -> str:
    """A WebDataset key for a sample id: readable and collision-free.

    A key may hold no dot or slash (WebDataset splits a member name into key and extension at the first dot),
    so the id is sanitised and cut to 48 characters; the BLAKE2b hash of the exact id (its UTF-8 bytes,
    surrogates escaped) tells apart ids that sanitise alike (``a.b``, ``a_b``, ``a/b``) or differ only in
    case or Unicode normalisation. The id itself is in the record's json.
    """
    digest = hashlib.blake2b(sample_id.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', sample_id)[:48]}-{digest}"


def encode_jpeg(image: Image.Image, quality: int = 95) -> bytes:
    image.convert("RGB").save(buf := io.BytesIO(), format="JPEG", quality=quality)
    return buf.getvalue()


class _HashingFile:
    """A file opened for writing that hashes what goes through it (no second read of a finished shard)."""

    def __init__(self, file, digest):
        self.file, self.digest = file, digest

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class ShardWriter:
    """Writes one tar shard under a temporary name; `commit` renames it into place and returns its sha256."""

    def __init__(self, path: Path):
        import webdataset as wds

        self.path = path
        self.tmp = path.with_name(f".{path.name}.tmp")
        self._file = open(self.tmp, "wb")
        self._digest = hashlib.sha256()
        self._tar = wds.TarWriter(_HashingFile(self._file, self._digest), encoder=False, mtime=0.0, user="",
                                  group="")
        self.count = 0

    def write(self, key: str, image: bytes, caption: str, neg_image: bytes | None, neg_caption: str, meta: dict,
              more_negatives: list[tuple[bytes | None, str]] = (), more_positives: list[str] = ()) -> None:
        """One record: the anchor, its first negative, ``more_negatives`` as (picture or None, caption), and
        ``more_positives``, the picture's other true captions."""
        sample = {"__key__": key, "jpg": image, "txt": caption.encode("utf-8")}
        sample |= {positive_member(j): text.encode("utf-8") for j, text in enumerate(more_positives, 1)}
        for k, (picture_bytes, text) in enumerate([(neg_image, neg_caption), *more_negatives]):
            jpg, txt = negative_members(k)
            sample[txt] = text.encode("utf-8")
            if picture_bytes is not None:
                sample[jpg] = picture_bytes
        sample["json"] = json.dumps(meta, ensure_ascii=False, sort_keys=True).encode("utf-8")
        try:
            self._tar.write(sample)
        except OSError as e:
            raise write_error(self.tmp, e) from None
        self.count += 1

    def commit(self) -> str:
        try:
            self._tar.close()  # closes the file too
            with open(self.tmp, "rb") as f:
                os.fsync(f.fileno())
        except OSError as e:
            raise write_error(self.tmp, e) from None
        os.replace(self.tmp, self.path)
        return self._digest.hexdigest()

    def abort(self) -> None:
        try:
            self._tar.close()
        except OSError:
            pass  # the shard is thrown away; the error that made us abort is the one to report
        self.tmp.unlink(missing_ok=True)


def negative_members(k: int) -> tuple[str, str]:
    """The member extensions (picture, caption) of a record's k-th negative (0-based): ``neg.jpg``/``neg.txt``
    for the first, as the paper's records have it, ``neg{k+1}.jpg``/``neg{k+1}.txt`` for the others."""
    stem = "neg" if k == 0 else f"neg{k + 1}"
    return f"{stem}.jpg", f"{stem}.txt"


def positive_member(j: int) -> str:
    """The member of a record's j-th positive caption (0-based): ``txt``, then ``pos2.txt`` ... (its picture's
    other true captions, as COCO's five per image)."""
    return "txt" if j == 0 else f"pos{j + 1}.txt"


def negative_count(members) -> int:
    """K: how many negative captions a record's members hold (``neg.txt``, ``neg2.txt``, ... without a gap)."""
    k = 0
    while negative_members(k)[1] in members:
        k += 1
    return k


def positive_count(members) -> int:
    """P: how many positive captions a record's members hold (``txt``, ``pos2.txt``, ... without a gap)."""
    return next(p for p in count(1) if positive_member(p) not in members)


def anchor_truth(entry: dict, record_id, k: int) -> tuple[bool | None, dict | None]:
    """(``anchor_true_of_negative``, ``entailment``) of a negative's entry in its record's ``negatives``: whether the
    anchor's caption is true of the negative's picture (None: unknown, as every negative of a dataset made before
    the field existed) and how that was decided. A value of another type is a damaged record."""
    value, how = entry.get("anchor_true_of_negative"), entry.get("entailment")
    if not (value is None or isinstance(value, bool)) or not (how is None or isinstance(how, dict)):
        raise DatasetError(f"record {record_id!r}, negative {k + 1}: anchor_true_of_negative is {value!r} and "
                           f"entailment {how!r}; they are true, false or null and a dict or null: re-make the dataset")
    return value, how


def negatives_of(meta: dict, members, read_text, read_picture) -> list[dict]:
    """A record's negatives as dicts: caption, picture (or None when the record has none), concreteness,
    ``anchor_true_of_negative`` and ``entailment`` (`anchor_truth`). The ratings come from ``meta["negatives"]``
    when the record has it, else the first from ``meta["concreteness"]``; a record without it has no entailment
    decided (None)."""
    k = negative_count(members)
    entries = meta.get("negatives") or [{"concreteness": meta["concreteness"]}]
    if len(entries) != k:
        raise DatasetError(f"record {meta.get('id')!r} has {k} negative captions but {len(entries)} ratings in its "
                           "json; re-make the dataset")
    ratings = [entry.get("concreteness") for entry in entries]
    bad = [r for r in ratings if r is not None and (isinstance(r, bool) or not isinstance(r, (int, float))
                                                     or not math.isfinite(r))]
    if bad:  # a margin from an infinite rating is one end of the schedule, without a word
        raise DatasetError(f"record {meta.get('id')!r} has the concreteness rating {bad[0]!r} in its json; a rating "
                           "is a finite number (or null: not rated): re-make the dataset")
    out = []
    for i, entry in enumerate(entries):
        jpg, txt = negative_members(i)
        rating = ratings[i]
        entailed, how = anchor_truth(entry, meta.get("id"), i)
        out.append({"caption": read_text(txt), "image": read_picture(jpg, i) if jpg in members else None,
                    "concreteness": float(rating) if rating is not None else float("nan"),
                    "anchor_true_of_negative": entailed, "entailment": how})
    return out


def slots_of(record: dict, k: int) -> list[int]:
    """The batch slot (0..K-1) of each of a record's negatives: the one its type names where its format has negatives
    of fixed types (``slot`` in each negative's json entry, written by `import`: CE-CLIP's relation, adj, noun and
    verb rewrites), so that a type a record lacks leaves its slot empty and never shifts the others into it; else
    its position."""
    entries = (record.get("meta") or {}).get("negatives") or []
    if entries and all("slot" in e for e in entries):
        slots = [int(e["slot"]) for e in entries]
        if max(slots) >= k or len(set(slots)) < len(slots):
            raise DatasetError(f"record {record['meta'].get('id')!r} puts its negatives in slots {slots}, of "
                               f"{k}: the dataset's summary.json names fewer slots, or two negatives share one; "
                               "re-make the dataset with `concrete-jungle import`")
        return slots
    return list(range(len(record["negatives"])))


def negative_slots(parts) -> tuple[int, int]:
    """(K, P) of a training set's parts (record sets with `negatives_per_record` and `has_negative_pictures`): the
    most negatives a record holds (at least 1, so that every batch has the loss's layout), and K picture slots when
    any negative has a picture, else none."""
    k = max([p.negatives_per_record() for p in parts] + [1])
    return k, k if any(p.has_negative_pictures() for p in parts) else 0


def positives_per_record(parts) -> int:
    """P: the most positive captions a record of these parts holds (plain pairs keep one)."""
    return max([1] + [p.positives_per_record() for p in parts if hasattr(p, "positives_per_record")])


def shard_name(shard_index: int) -> str:
    return SHARD_PATTERN.format(shard_index)


def shard_files(root: Path, shard_index: int) -> tuple[Path, Path, Path]:
    """The files of one shard: the tar, its manifest rows, its recorded sha256."""
    stem = Path(shard_name(shard_index)).stem
    return root / shard_name(shard_index), root / "manifests" / f"{stem}.jsonl", root / "manifests" / f"{stem}.sha256"


def recorded_digest(root: Path, shard_index: int) -> str | None:
    """The sha256 written with a shard when it was completed; None for a shard written by other tools."""
    return d.read_text().split()[0] if (d := shard_files(root, shard_index)[2]).is_file() else None


def dataset_digest(root: str | Path) -> str:
    """The dataset's identity: its shards' names and recorded digests (sizes where none is recorded). Read from
    the records of the digests, not from the shards: deciding whether a cache is current reads no shard."""
    parts = []
    for path in sorted(Path(root).glob("shard-*.tar")):
        recorded = recorded_digest(path.parent, int(path.stem.split("-")[1]))
        parts.append(f"{path.name}:{recorded or path.stat().st_size}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def write_shard_manifest(root: Path, shard_index: int, rows: list[dict], digest: str) -> None:
    """The shard's sha256 (``sha256sum -c`` format, relative to the dataset), then its rows: a shard whose rows
    file exists is complete and has its digest."""
    _, rows_path, digest_path = shard_files(root, shard_index)
    atomic_write_text(digest_path, f"{digest}  {shard_name(shard_index)}\n")
    atomic_write_jsonl(rows_path, rows)


def read_shard_manifests(root: Path, shard_indices=None) -> dict[int, list[dict]]:
    """The complete shards' manifest rows, by shard index."""
    paths = {int(path.stem.split("-")[1]): path for path in sorted((root / "manifests").glob("shard-*.jsonl"))}
    return {index: read_jsonl(path) for index, path in paths.items() if shard_indices is None or index in shard_indices}


def shard_problem(root: Path, shard_index: int) -> str | None:
    """Why a shard its manifest calls complete cannot be trusted (missing, or not the bytes written), or None.
    A shard without a recorded digest (written by other tools) is taken as it is."""
    path = shard_files(root, shard_index)[0]
    if not path.is_file():
        return f"{path} is missing"
    recorded = recorded_digest(root, shard_index)
    if recorded is not None and recorded != file_digest(path):
        return f"{path} is damaged: its sha256 differs from the one recorded when it was written"
    return None


def unfinished(root: Path) -> str | None:
    """Why the dataset in ``root`` is not a finished one, or None: a plant run that has not ended (its keyword files
    but no summary.json), an import that has not ended (its config.yaml, written first, but no summary.json), or the
    parts of a split run not merged (naming the parts that have not finished). Shards another tool wrote, without
    plant's or import's files, are taken as they are."""
    if (root / "summary.json").is_file() and (root / "manifest.jsonl").is_file():
        return None
    parts = sorted(root.glob("manifest-*-of-*.jsonl"))
    if not parts:
        if any(root.glob("keywords-*-of-*.jsonl")):
            return f"{root} is unfinished (no summary.json): re-run the plant command that made it to finish it"
        if (root / "config.yaml").is_file():
            return (f"{root} is unfinished (no summary.json): re-run the `concrete-jungle import` command that made "
                    "it to finish it")
        return None
    k = int(parts[0].stem.split("-of-")[1])
    missing = sorted(set(range(k)) - {int(p.stem.split("-")[1]) for p in parts})
    state = f"parts {missing} of {k} have not finished" if missing else "parts are not merged"
    return (f"{root} is a split run whose {state}: finish them (plant --shard-index i), then `concrete-jungle plant "
            f"merge {root}`")


def shard_urls(root: str | Path, partial: bool = False) -> list[str]:
    """The shards of a dataset, each checked against its recorded digest; every shard the manifest names must
    exist. A damaged dataset is a `DatasetError` naming the shard, never a partial read; an unfinished or
    unmerged one too, unless ``partial`` asks for the finished shards it holds."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"ConcreteBatch directory not found: {root}")
    urls = sorted(str(p) for p in root.glob("shard-*.tar"))
    if not urls:
        raise FileNotFoundError(f"{root} holds no shard-*.tar files; is it a ConcreteBatch directory (made by "
                                "`concrete-jungle plant`)?")
    problem = unfinished(root)
    if problem and not partial:
        raise DatasetError(f"{problem} (or pass --partial / data.partial: true to use the finished shards it "
                           "holds)")
    named = {int(Path(u).stem.split("-")[1]) for u in urls} | set(read_shard_manifests(root))
    if (root / "manifest.jsonl").is_file():
        named |= {int(Path(r["shard"]).stem.split("-")[1]) for r in read_jsonl(root / "manifest.jsonl")
                  if r.get("status") == "ok" and r.get("shard")}
    for index in sorted(named):
        problem = shard_problem(root, index)
        if problem:
            raise DatasetError(f"{problem}; re-run the `concrete-jungle plant` command that made {root} to redo it")
    return urls
