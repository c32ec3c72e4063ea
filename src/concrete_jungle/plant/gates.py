"""The gated store: the records of pairs that failed a gate, kept beside their shard, so that a re-plant with other
gates decides again from the stored scores without a new rewrite, edit or score (docs/method.md §4).

``gated/shard-NNNNNN.tar`` holds the gated records of shard NNNNNN, in manifest order, as the shard holds its kept
ones, and ``gated/shard-NNNNNN.sha256`` its digest; both are written before the shard's manifest rows, which mark
the shard complete. No reader of the dataset looks into ``gated/``.

Re-gating a finished shard writes the new shard and gated store under temporary names, removes the shard's rows
(the shard is then not done), renames both into place and writes the new digests and rows. A kill between the
removal and the new rows costs that shard's rewrites and edits again (it is made anew), never a wrong record; a
gated store that is missing or damaged likewise makes its shard anew.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from ..concretebatch import ShardWriter, sample_key, shard_files, shard_name, write_shard_manifest
from ..records import atomic_write_text, file_digest, read_jsonl
from .scoring import Gate, gate_reason


def gated_files(out: Path, index: int) -> tuple[Path, Path]:
    """The gated store of shard ``index``: its tar and its recorded sha256."""
    name = shard_name(index)
    return out / "gated" / name, out / "gated" / f"{Path(name).stem}.sha256"


class GatedWriter:
    """The gated records of one shard in progress; `commit` puts them (or, with none, nothing: an earlier store of
    that shard is removed) in place with their digest."""

    def __init__(self, out: Path, index: int):
        self.tar, self.digest = gated_files(out, index)
        self.writer: ShardWriter | None = None

    def write(self, *record) -> None:
        if self.writer is None:
            self.tar.parent.mkdir(exist_ok=True)
            self.writer = ShardWriter(self.tar)
        self.writer.write(*record)

    def commit(self) -> None:
        if self.writer is None:
            self.tar.unlink(missing_ok=True)
            self.digest.unlink(missing_ok=True)
            return
        atomic_write_text(self.digest, f"{self.writer.commit()}  {self.tar.name}\n")

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()


def regated_rows(rows: list[dict], gates: list[Gate]) -> list[dict]:
    """A finished shard's manifest rows decided again under ``gates``: every scored pair (kept or gated) is kept or
    gated anew; other rows (rejected before a pair was made) stay as they are."""
    out = []
    for row in rows:
        if "scores" not in row or not (row["status"] == "ok" or row.get("stage") == "gate"):
            out.append(row)
            continue
        base = {k: v for k, v in row.items() if k not in ("status", "reason", "stage")}
        reason = gate_reason(gates, row["scores"])
        out.append(base | ({"status": "ok"} if reason is None else
                           {"status": "rejected", "reason": reason, "stage": "gate"}))
    return out


def regate_shards(out: Path, indices, gates: list[Gate]) -> tuple[int, set[int]]:
    """Decide the finished shards ``indices`` again under ``gates`` and rewrite those whose decisions change, from
    their stored records. Returns (shards rewritten, shards to make anew: their gated store is missing or damaged;
    their rows are removed)."""
    rewritten, remake = 0, set()
    for index in sorted(indices):
        rows_path = shard_files(out, index)[1]
        rows = read_jsonl(rows_path)
        new = regated_rows(rows, gates)
        if new == rows:
            continue
        if rewrite_shard(out, index, rows, new):
            rewritten += 1
        else:
            rows_path.unlink()
            remake.add(index)
    return rewritten, remake


def rewrite_shard(out: Path, index: int, rows: list[dict], new: list[dict]) -> bool:
    """Shard ``index`` and its gated store rewritten with the decisions of ``new`` (rows in the order of ``rows``),
    the records' bytes as they were; False (nothing changed) when the gated store it needs is missing or damaged."""
    shard_path, rows_path, _ = shard_files(out, index)
    gated_tar, gated_digest = gated_files(out, index)
    if any(r.get("stage") == "gate" for r in rows) and not (
            gated_tar.is_file() and gated_digest.is_file()
            and gated_digest.read_text().split()[0] == file_digest(gated_tar)):
        return False
    kept, held = tar_records(shard_path), tar_records(gated_tar)
    writer, gated = ShardWriter(shard_path), GatedWriter(out, index)
    try:
        for old, row in zip(rows, new):
            source = kept if old["status"] == "ok" else held if old.get("stage") == "gate" else None
            if source is None:
                continue
            key, members = next(source, (None, None))
            if key != sample_key(old["id"]):  # the stores do not hold what the rows say: make the shard anew
                writer.abort()
                gated.abort()
                return False
            (writer if row["status"] == "ok" else gated).write(*record_of(key, members))
    except BaseException:
        writer.abort()
        gated.abort()
        raise
    rows_path.unlink()  # first: without its rows the shard is not done, whatever a kill leaves of the rest
    gated.commit()
    write_shard_manifest(out, index, new, writer.commit())
    return True


def tar_records(path: Path):
    """(key, {extension: bytes}) of each record of a tar this package wrote, in order, one at a time."""
    if not path.is_file():
        return
    with tarfile.open(path) as tar:
        key, members = None, {}
        for member in tar:
            if not member.isfile():
                continue
            name, _, ext = member.name.partition(".")
            if key is not None and name != key:
                yield key, members
                members = {}
            key = name
            members[ext] = tar.extractfile(member).read()
        if key is not None:
            yield key, members


def record_of(key: str, members: dict) -> tuple:
    """`ShardWriter.write`'s arguments for a planted record read back: the same members, so the same bytes."""
    return (key, members["jpg"], members["txt"].decode("utf-8"), members.get("neg.jpg"),
            members["neg.txt"].decode("utf-8"), json.loads(members["json"]))
