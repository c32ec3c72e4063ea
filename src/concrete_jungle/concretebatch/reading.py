"""Reading a ConcreteBatch back: its records streamed shard by shard (`iter_records`, checked against the recorded
digests first), or any record by id from an index of the shards' members (`IndexedConcreteBatch`, what training's
random access reads). The layout they read is `shards`' (docs/method.md §4)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from PIL import Image

from ..errors import DatasetError
from ..records import read_jsonl
from .shards import negative_count, negative_members, negatives_of, positive_count, positive_member, shard_urls


def picture(data: bytes, where: str) -> Image.Image:
    """A record's picture, decoded by the safe opener (`images.image_from_bytes`) as RGB. A picture that fails is
    a damaged dataset, not a hostile input (`plant` stores only JPEGs it encoded or checked, and readers check
    every recorded shard digest first): the job stops naming the record, rather than shift the records after it."""
    from ..images import ImageRejected, image_from_bytes

    try:
        return image_from_bytes(data, where).convert("RGB")
    except ImageRejected as e:
        raise DatasetError(f"{e}; the dataset is damaged: re-run the `concrete-jungle plant` command that made it")\
            from None


def record_fields(meta: dict, members, read: callable, where: str, negative_pictures: bool = True) -> dict:
    """The decoded fields of a record whose members ``read(ext)`` returns as bytes: image, caption, the first
    negative as neg_image (None without a picture), neg_caption and concreteness, every negative in ``negatives``
    (`negatives_of`) and every positive caption in ``positives`` (the caption first). ``negative_pictures`` false:
    no negative's picture is read or decoded (each is None), for a reader that uses none."""
    def read_picture(ext: str, k: int):
        if not negative_pictures:
            return None
        return picture(read(ext), f"the picture of negative {k + 1} of {where}")

    negatives = negatives_of(meta, members, lambda ext: read(ext).decode("utf-8"), read_picture)
    return {
        "image": picture(read("jpg"), f"the image of {where}"),
        "caption": read("txt").decode("utf-8"),
        "positives": [read(positive_member(j)).decode("utf-8") for j in range(positive_count(members))],
        "neg_image": negatives[0]["image"],
        "neg_caption": negatives[0]["caption"],
        "concreteness": negatives[0]["concreteness"],
        "negatives": negatives,
        "meta": meta,
    }


def decoded(members, read: callable, location: dict, negative_pictures: bool = True) -> dict:
    """`record_fields` of one indexed record, its json checked: a record whose json does not parse, or lacks what
    a record holds (its ``concreteness``), is a `DatasetError` naming the record and its shard, not a KeyError."""
    url, offset, _ = location["json"]
    where = f"the record at byte {offset} of {url}"
    try:
        meta = json.loads(read("json"))
        if not isinstance(meta, dict):
            raise ValueError(f"its json is a {type(meta).__name__}, not an object")
        where = f"record {meta.get('id')!r} of {url}"
        return record_fields(meta, members, read, where, negative_pictures)
    except (KeyError, ValueError, TypeError) as e:
        what = f"its json has no {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
        raise DatasetError(f"{where} cannot be read ({what}); is it a ConcreteBatch shard? Re-make it with "
                           "`concrete-jungle plant` or `import`") from None


def iter_records(source: str | Path | list[str], partial: bool = False) -> Iterator[dict]:
    """Every record of a ConcreteBatch (directory or list of shard paths), decoded, in shard order: dicts with
    image, caption, neg_image, neg_caption, concreteness, negatives, meta. ``partial``: the finished shards of an
    unfinished dataset (`shard_urls`). The shards are indexed first (`index_shards`), so a cut or malformed shard
    stops the read before any record of it is used."""
    urls = source if isinstance(source, list) else shard_urls(source, partial)
    for location in index_shards(urls):
        members = {ext: read_member(at) for ext, at in location.items()}
        yield decoded(members, members.__getitem__, location)


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


MEMBERS = frozenset({"jpg", "txt", "neg.txt", "json"})  # a negative's picture may be absent
NUMBERED_MEMBER = re.compile(r"neg\d*\.(jpg|txt)|pos\d+\.txt")


def index_shards(urls: list[str]) -> list[dict[str, tuple[str, int, int]]]:
    """For every record of the tar shards: member extension -> (tar path, data offset, size).

    One pass over the tar headers (`files.tar_archive.scan_tar`; no image bytes are read), so a training set can
    be read by random access: shuffled per epoch, split across ranks, resumed at an exact position. A shard that is
    not whole (cut inside a member, or between two records, where it ends without its end-of-archive blocks), a
    record missing a member or with a gap in its negatives (``neg.txt`` and ``neg3.txt`` without ``neg2.txt``), or
    a key that appears twice is a `DatasetError` naming the shard (and, for a key, both sample ids): a record is
    never lost, shortened or merged into another.
    """
    from ..files.tar_archive import scan_tar

    records: list[dict] = []
    seen: dict[str, dict] = {}
    for url in urls:
        in_shard: dict[str, dict] = {}
        try:
            scan = scan_tar(url)
        except OSError as e:
            raise DatasetError(f"{url} cannot be read ({type(e).__name__}: {e})") from None
        damage = scan.damage or (None if scan.end_blocks else "it ends without its end-of-archive blocks, so it "
                                 "may be cut between two records")
        if damage:
            raise DatasetError(f"{url} is damaged: {damage}; re-run the `concrete-jungle plant` or `import` "
                               "command that made it to redo it")
        for name, (offset, size) in scan.members.items():
            key, _, ext = name.partition(".")
            if key in seen or ext in in_shard.get(key, {}) or name in scan.repeated:
                first = (seen.get(key) or in_shard.get(key) or {ext: (url,)})[ext][0]
                raise DatasetError(f"key {key!r} appears twice ({first} and {url}; sample ids "
                                   f"{ids_under_key(key, [first, url])}): two samples would be merged "
                                   "into one record")
            in_shard.setdefault(key, {})[ext] = (url, offset, size)
        for key, members in in_shard.items():
            if not MEMBERS <= members.keys():
                raise DatasetError(f"{url}: record {key!r} lacks {sorted(MEMBERS - members.keys())}; "
                                   "is this a ConcreteBatch shard?")
            k, p = negative_count(members), positive_count(members)
            numbered = [m for i in range(k) for m in negative_members(i)] + [positive_member(j) for j in range(p)]
            stray = sorted(ext for ext in members if NUMBERED_MEMBER.fullmatch(ext) and ext not in numbered)
            if stray:
                raise DatasetError(f"{url}: record {key!r} holds {', '.join(stray)} but only {k} negative caption(s) "
                                   f"and {p} positive(s) without a gap ({', '.join(numbered)}); the shard is damaged: "
                                   "re-make the dataset")
        seen.update(in_shard)
        records.extend(in_shard.values())
    return records


def ids_under_key(key: str, urls: list[str]) -> list:
    """The sample ids of every record stored under ``key`` in these shards (to name them in an error)."""
    import tarfile

    ids = []
    for url in dict.fromkeys(urls):
        with tarfile.open(url) as tar:
            ids += [json.loads(tar.extractfile(m).read()).get("id") for m in tar if m.name == f"{key}.json"]
    return ids


def read_member(location: tuple[str, int, int]) -> bytes:
    with open(location[0], "rb") as f:
        f.seek(location[1])
        return f.read(location[2])


class IndexedConcreteBatch:
    """Random access to ConcreteBatch records (map-style): ``dataset[i]`` -> dict of decoded fields."""

    def __init__(self, roots: list[str | Path], partial: bool = False, negative_pictures: bool = True):
        self.urls = [u for root in roots for u in shard_urls(root, partial)]
        self.records = index_shards(self.urls)
        self.negative_pictures = negative_pictures  # false: records come without their negatives' pictures
        summaries = [Path(root) / "summary.json" for root in roots]
        self.typed_slots = [len(json.loads(p.read_text(encoding="utf-8")).get("slots", [])) for p in summaries
                            if p.is_file()]

    def __len__(self) -> int:
        return len(self.records)

    def negatives_per_record(self) -> int:
        """K: the most negatives a record holds (read from the index, no record decoded), or the number of types of
        a format whose negatives sit in their type's slot (`slots_of`; its summary.json names them)."""
        return max([negative_count(r) for r in self.records] + self.typed_slots, default=0)

    def positives_per_record(self) -> int:
        """P: the most positive captions a record holds (read from the index)."""
        return max([positive_count(r) for r in self.records], default=1)

    def has_negative_pictures(self) -> bool:
        """Whether any negative of any record has its picture (sets of captions-only negatives have none)."""
        k = self.negatives_per_record()
        return any(negative_members(i)[0] in r for r in self.records for i in range(k))

    def __getitem__(self, i: int) -> dict:
        r = self.records[i]
        return decoded(r, lambda ext: read_member(r[ext]), r, self.negative_pictures) | {"has_negative": True}
