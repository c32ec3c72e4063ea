"""ConcreteBatch on disk (SPEC §4): WebDataset tar shards plus a manifest, written crash-safe, read streaming.

Layout of a dataset directory::

    shard-000000.tar ...         one record per anchor: __key__, jpg, txt, neg.jpg, neg.txt, json
    manifests/shard-000000.jsonl one row per processed sample of that shard (ok or rejected), written
                                 atomically after its tar, so a shard is either complete or absent
    manifest.jsonl, rejects.jsonl, summary.json, config.yaml   (when every part is done)

A shard is written to a temporary name and renamed when complete. Tar members carry a fixed mtime, so
re-making a shard gives the same bytes.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from PIL import Image

from .records import atomic_write_jsonl, read_jsonl

SHARD_PATTERN = "shard-{:06d}.tar"


def sample_key(sample_id: str) -> str:
    """A WebDataset key: no dots or slashes (they split keys from extensions); the id itself is in json."""
    return re.sub(r"[^\w-]", "_", sample_id)


def encode_jpeg(image: Image.Image, quality: int = 95) -> bytes:
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


class ShardWriter:
    """Writes one tar shard under a temporary name; `commit` renames it into place."""

    def __init__(self, path: Path):
        import webdataset as wds

        self.path = path
        self.tmp = path.with_name(f".{path.name}.tmp")
        self._file = open(self.tmp, "wb")
        self._tar = wds.TarWriter(self._file, encoder=False, mtime=0.0, user="", group="")
        self.count = 0

    def write(self, key: str, image: bytes, caption: str, neg_image: bytes, neg_caption: str, meta: dict) -> None:
        self._tar.write({
            "__key__": key, "jpg": image, "txt": caption.encode("utf-8"), "neg.jpg": neg_image,
            "neg.txt": neg_caption.encode("utf-8"),
            "json": json.dumps(meta, ensure_ascii=False, sort_keys=True).encode("utf-8"),
        })
        self.count += 1

    def commit(self) -> None:
        self._tar.close()  # closes the file too
        with open(self.tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self._tar.close()
        self.tmp.unlink(missing_ok=True)


def write_shard_manifest(root: Path, shard_index: int, rows: list[dict]) -> None:
    atomic_write_jsonl(root / "manifests" / f"shard-{shard_index:06d}.jsonl", rows)


def read_shard_manifests(root: Path, shard_indices=None) -> dict[int, list[dict]]:
    """The complete shards' manifest rows, by shard index."""
    out = {}
    for path in sorted((root / "manifests").glob("shard-*.jsonl")):
        index = int(path.stem.split("-")[1])
        if shard_indices is None or index in shard_indices:
            out[index] = read_jsonl(path)
    return out


def shard_urls(root: str | Path) -> list[str]:
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"ConcreteBatch directory not found: {root}")
    urls = sorted(str(p) for p in root.glob("shard-*.tar"))
    if not urls:
        raise FileNotFoundError(f"{root} holds no shard-*.tar files; is it a ConcreteBatch directory (made by "
                                "`concrete-jungle plant`)?")
    return urls


def _decode(sample: dict) -> dict:
    meta = json.loads(sample["json"])
    return {
        "key": sample["__key__"],
        "image": Image.open(io.BytesIO(sample["jpg"])).convert("RGB"),
        "caption": sample["txt"].decode("utf-8"),
        "neg_image": Image.open(io.BytesIO(sample["neg.jpg"])).convert("RGB"),
        "neg_caption": sample["neg.txt"].decode("utf-8"),
        "concreteness": float(meta["concreteness"]),
        "meta": meta,
    }


def iter_records(source: str | Path | list[str]) -> Iterator[dict]:
    """Every record of a ConcreteBatch (directory or list of shard paths/URLs), decoded, streaming with
    `webdataset`: dicts with image, caption, neg_image, neg_caption, concreteness, meta."""
    import webdataset as wds

    urls = source if isinstance(source, list) else shard_urls(source)
    for sample in wds.WebDataset(urls, shardshuffle=False, empty_check=False):
        yield _decode(sample)


def iter_quintuples(source: str | Path | list[str]) -> Iterator[tuple]:
    """``(image, caption, neg_image, neg_caption, concreteness)`` per record, for training."""
    for r in iter_records(source):
        yield r["image"], r["caption"], r["neg_image"], r["neg_caption"], r["concreteness"]


def read_manifest(root: str | Path) -> list[dict]:
    path = Path(root) / "manifest.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: the dataset is unfinished or its parts are not merged "
                                "(`concrete-jungle plant merge`)")
    return read_jsonl(path)


def index_shards(urls: list[str]) -> list[dict[str, tuple[str, int, int]]]:
    """For every record of the tar shards: member extension -> (tar path, data offset, size).

    One pass over the tar headers (no image bytes are read), so a training set can be read by random
    access: shuffled per epoch, split across ranks, resumed at an exact position.
    """
    import tarfile

    records: list[dict] = []
    for url in urls:
        by_key: dict[str, dict] = {}
        with tarfile.open(url) as tar:
            for member in tar:
                if not member.isfile():
                    continue
                key, _, ext = member.name.partition(".")
                by_key.setdefault(key, {})[ext] = (url, member.offset_data, member.size)
        records.extend(by_key.values())
    return records


def read_member(location: tuple[str, int, int]) -> bytes:
    path, offset, size = location
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


class IndexedConcreteBatch:
    """Random access to ConcreteBatch records (map-style): ``dataset[i]`` -> dict of decoded fields."""

    def __init__(self, roots: list[str | Path]):
        self.urls = [u for root in roots for u in shard_urls(root)]
        self.records = index_shards(self.urls)
        missing = [r for r in self.records if not {"jpg", "txt", "neg.jpg", "neg.txt", "json"} <= r.keys()]
        if missing:
            raise ValueError(f"{len(missing)} records in {roots} lack some of jpg/txt/neg.jpg/neg.txt/json "
                             f"(e.g. in {next(iter(missing[0].values()))[0]}); is this a ConcreteBatch?")

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> dict:
        r = self.records[i]
        meta = json.loads(read_member(r["json"]))
        return {
            "image": Image.open(io.BytesIO(read_member(r["jpg"]))).convert("RGB"),
            "caption": read_member(r["txt"]).decode("utf-8"),
            "neg_image": Image.open(io.BytesIO(read_member(r["neg.jpg"]))).convert("RGB"),
            "neg_caption": read_member(r["neg.txt"]).decode("utf-8"),
            "concreteness": float(meta["concreteness"]),
            "has_negative": True,
        }
