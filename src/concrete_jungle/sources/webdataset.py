"""WebDataset tar shards, as img2dataset writes them: ``KEY.jpg`` (or png, webp), ``KEY.txt``, ``KEY.json``.

A sample is the members sharing a key (the name up to the first dot of its file name, webdataset's rule); its
caption is ``KEY.txt`` (UTF-8), or a field of ``KEY.json`` named by ``--columns caption=FIELD``; its id is the key
(with the shard's name in front where the key was already read from an earlier shard); its image is located in the
shard (`stores`), never unpacked.

Every sample is read exactly or is a skip with its reason, naming the shard:

- the member index comes from `files.tar_archive.scan_tar`, which knows when an archive ends early: a damaged shard
  gives its samples before the damage, a skip for the sample whose member the damage falls in (never a truncated
  caption) and one skip ``<shard>#damaged`` saying where it stopped;
- img2dataset's metadata beside the shard (``000000.parquet``, ``000000_stats.json``) is checked against it: a
  failed download is a skip with img2dataset's reason; a key it lists as downloaded that the shard lacks is a skip,
  and fewer samples than it counts is damage; a key it marks failed that the shard holds is one skip naming both
  (they disagree, and neither is taken over the other);
- a member the shard holds twice (an appended or concatenated tar), or two members whose names differ only in case
  (``k.txt`` and ``k.TXT``), make their sample a skip naming both;
- a caption that is not UTF-8 is a skip naming the member and the byte.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..files.tar_archive import TarScan, scan_tar
from .base import CaptionSample, ReadOptions, SourceError, SourceFile
from .stores import IMAGE_EXTENSIONS, locator


def split_key(name: str) -> tuple[str, str]:
    """(key, extension) of a member name: ``a/b/000123.neg.jpg`` -> (``a/b/000123``, ``neg.jpg``)."""
    folder, _, base = name.rpartition("/")
    stem, _, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext.lower()


def group_members(scan: TarScan) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """(key -> extension -> member name, key -> why its members cannot be told apart) of a scanned shard. The
    extension is compared lower-cased (``KEY.JPG`` is an image), so ``k.txt`` beside ``k.TXT`` would leave one of
    them unread: that key is a clash naming both. The key of a member the damage falls in is there, with no
    member, even when no member of it is whole."""
    groups: dict[str, dict[str, str]] = {}
    clashes: dict[str, str] = {}
    for name in scan.members:
        key, ext = split_key(name)
        exts = groups.setdefault(key, {})
        if ext in exts and key not in clashes:
            clashes[key] = (f"holds {exts[ext]!r} and {name!r}, whose names differ only in case: which is this "
                            "sample's is not known; rename one")
        exts.setdefault(ext, name)
    if scan.cut:
        groups.setdefault(split_key(scan.cut)[0], {})
    return groups, clashes


@dataclass
class Downloads:
    """What img2dataset's metadata beside a shard says of it: ``failed`` (key -> img2dataset's reason) and
    ``downloaded`` (the keys written into the shard) from its Parquet, ``successes`` from its ``_stats.json``;
    None where that file is not there."""

    failed: dict[str, str] = field(default_factory=dict)
    downloaded: list[str] | None = None
    successes: int | None = None
    parquet: str = ""
    stats: str = ""


def img2dataset_metadata(shard: Path) -> Downloads:
    found = Downloads()
    meta, stats = shard.with_suffix(".parquet"), shard.with_name(f"{shard.stem}_stats.json")
    fix = f"restore img2dataset's file or move it away from {shard.name}"
    if meta.is_file():
        import pyarrow.parquet as pq

        try:
            names = pq.ParquetFile(meta).schema_arrow.names
            rows = pq.read_table(meta, columns=[c for c in ("key", "status", "error_message") if c in names])
        except Exception as e:  # pyarrow's own errors for a file that is not Parquet
            raise SourceError(f"{meta}: img2dataset's metadata of {shard.name} cannot be read ({type(e).__name__}: "
                              f"{e}); {fix}") from None
        if {"key", "status"} <= set(names):
            found.parquet, found.downloaded = meta.name, []
            for row in rows.to_pylist():
                if row["status"] == "success":
                    found.downloaded.append(str(row["key"]))
                else:
                    found.failed[str(row["key"])] = row.get("error_message") or row["status"]
    if stats.is_file():
        try:
            counts = json.loads(stats.read_bytes())
        except ValueError as e:
            raise SourceError(f"{stats}: img2dataset's counts of {shard.name} are not JSON ({e}); {fix}") from None
        if isinstance(counts, dict) and isinstance(counts.get("successes"), int):
            found.stats, found.successes = stats.name, counts["successes"]
    return found


def read(file: SourceFile, options: ReadOptions) -> Iterator[CaptionSample]:
    from .stores import store_name

    store = store_name(file.path, options.root)
    yield from name_repeated(read_shard(file.path, options.columns.get("caption"), store), store, options.seen_ids)


def read_shard(path: Path, caption_field: str | None, store: str) -> Iterator[tuple[CaptionSample, bool]]:
    """The shard's samples on their own, each with whether its id is a key that a repeat in an earlier shard
    renames (`name_repeated`): what a worker can read without knowing the other shards. ``store`` is the shard's
    name in locators (`stores.store_name`)."""
    scan, downloads = scan_tar(path), img2dataset_metadata(path)
    groups, clashes = group_members(scan)
    fd = os.open(path, os.O_RDONLY)
    try:
        def member(name: str) -> bytes:
            offset, size = scan.members[name]
            data = os.pread(fd, size, offset)
            if len(data) != size:
                raise SourceError(f"{path} changed while it was read ({name!r} is shorter); read it again")
            return data

        samples = {key: CaptionSample(key, error=f"{store} {clashes[key]}") if key in clashes else
                   _sample(key, exts, member, scan, downloads, store, caption_field) for key, exts in groups.items()}
    finally:
        os.close(fd)
    yield from ((sample, True) for sample in samples.values())
    for key, why in downloads.failed.items():
        if key not in groups:
            yield CaptionSample(key, error=f"no image: img2dataset could not download it ({why})"), False
    missing = [key for key in downloads.downloaded or [] if key not in groups]
    for key in missing:
        yield CaptionSample(key, error=f"img2dataset's {downloads.parquet} lists it as downloaded, but the shard "
                                       f"{store} does not hold it: the shard is cut or incomplete"), False
    damage = _damage(scan, samples, downloads, len(groups), missing)
    if damage:
        yield CaptionSample(f"{store}#damaged", error=f"the shard {store} is damaged: {damage}"), False


def _damage(scan: TarScan, samples: dict[str, CaptionSample], downloads: Downloads, held: int,
            missing: list[str]) -> str:
    """Why a shard is not whole, in words ("" when it is): its archive's damage, a last sample left incomplete
    where the archive ends without its end-of-archive blocks, or fewer samples than img2dataset wrote."""
    found = []
    if scan.damage:
        found.append(f"{scan.damage}; " + ("nothing after that is read" if scan.last else "none of it is read"))
    elif not scan.end_blocks and scan.last and samples[split_key(scan.last)[0]].error:
        found.append(f"it ends without its end-of-archive blocks right after {scan.last!r}, and its last sample is "
                     "incomplete: it is cut")
    if downloads.successes is not None and held < downloads.successes:
        found.append(f"it holds {held} samples where img2dataset's {downloads.stats} counts {downloads.successes} "
                     "downloads")
    elif missing:
        found.append(f"it lacks {len(missing)} of the {len(downloads.downloaded)} samples img2dataset's "
                     f"{downloads.parquet} lists as downloaded")
    return "; ".join(found)


def _sample(key: str, exts: dict[str, str], member: Callable[[str], bytes], scan: TarScan, downloads: Downloads,
            store: str, caption_field: str | None) -> CaptionSample:
    """One key's sample, or a skip saying why it cannot be read exactly."""
    repeated = next((name for name in exts.values() if name in scan.repeated), None)
    if repeated:
        at = scan.repeated[repeated]
        return CaptionSample(key, error=f"{store} holds its member {repeated!r} {len(at)} times (headers at bytes "
                                        f"{', '.join(map(str, at[:-1]))} and {at[-1]}): which copy is this sample's "
                                        "is not known; write the shard again with each member once")
    if scan.cut and split_key(scan.cut)[0] == key:
        return CaptionSample(key, error=f"the shard {store} is cut inside its member {scan.cut!r}: the sample is "
                                        "not read")
    if key in downloads.failed:
        return CaptionSample(key, error=f"{store} holds it but img2dataset's {downloads.parquet} says its download "
                                        f"failed ({downloads.failed[key]}): the two disagree; download the shard "
                                        "again, or move the metadata away if it is not this shard's")
    caption, why = _caption(key, exts, member, caption_field, store)
    image = next((exts[ext] for ext in IMAGE_EXTENSIONS if ext in exts), None)
    if why is None and image is None:
        why = f"{store} holds no image for this key (jpg, jpeg, png or webp)"
    if why:
        return CaptionSample(key, error=why)
    return CaptionSample(key, [caption], locator(store, image))


def _caption(key: str, exts: dict[str, str], member: Callable[[str], bytes], caption_field: str | None,
             store: str) -> tuple[str | None, str | None]:
    """The caption of a key from its ``.txt``, or from the field of its ``.json``; else the reason."""
    name = exts.get("json" if caption_field else "txt")
    if name is None:
        wanted = f"caption field {caption_field!r} ({key}.json)" if caption_field else f"caption ({key}.txt)"
        return None, f"{store} holds no {wanted} for this key"
    raw = member(name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, (f"{name} in {store} is not UTF-8 text (byte 0x{raw[e.start]:02x} at byte {e.start} of the "
                      "member); write its captions as UTF-8")
    if not caption_field:
        return text, None
    try:
        value = json.loads(text)
    except ValueError:
        return None, f"{name} in {store} is not valid JSON"
    caption = value.get(caption_field) if isinstance(value, dict) else None
    return (caption, None) if isinstance(caption, str) else (None, f"{name} in {store} has no text field "
                                                                   f"{caption_field!r}")


def name_repeated(samples: Iterator[tuple[CaptionSample, bool]], store: str, seen: set[str]) -> Iterator[CaptionSample]:
    """A shard's samples with a key already read from an earlier shard named ``<shard without .tar>/<key>``."""
    prefix = str(PurePosixPath(store).with_suffix(""))
    for sample, keyed in samples:
        if keyed:
            sample.id = sample.id if sample.id not in seen else f"{prefix}/{sample.id}"
            seen.add(sample.id)
        yield sample
