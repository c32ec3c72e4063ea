"""A tar archive's member index, read from its headers and checked against the file, so that an archive that ends
early is never read as whole.

Python's `tarfile` stops at the first header it cannot read (a cut, a flipped byte) as if the archive ended
there, and reads a member whose data the file does not hold to its end; a shard cut where a sample begins would
read as complete. `scan_tar` reads every header itself (ustar, pax extended headers, GNU long names), checks each
header's checksum, checks that each member's header and data lie within the file, and accepts only two endings:
the end-of-archive blocks (two zero blocks), or the file's end exactly at the end of the last member's padded
data. Anything else is *damage*, reported with the member it falls in when there is one. Zero blocks followed by
more headers are read on (a concatenated archive), so no member after them is lost.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = 512
ZERO = bytes(BLOCK)
REGULAR = (b"0", b"\0", b"7")  # a file's data; "7" is a contiguous file, read as a regular one
EXTENDED = (b"x", b"g", b"L", b"K")  # pax (for the next member, global), GNU long name and long link name


@dataclass
class TarScan:
    """``members``: name -> (offset of its data, size), each regular file's first copy; ``repeated``: name -> the
    header offsets of every copy, for a name the archive holds more than once; ``damage``: why the archive is not
    whole (None when it is); ``cut``: the member the damage falls in, when it falls in one; ``last``: the last whole
    member before the damage; ``end_blocks``: whether the archive ends with its end-of-archive blocks (not only at
    the end of its last member, where a cut between two members would end it too)."""

    members: dict[str, tuple[int, int]] = field(default_factory=dict)
    repeated: dict[str, list[int]] = field(default_factory=dict)
    damage: str | None = None
    cut: str | None = None
    last: str | None = None
    end_blocks: bool = False


class _Damage(Exception):
    def __init__(self, why: str, cut: str | None = None):
        super().__init__(why)
        self.cut = cut


def _number(field_bytes: bytes, at: int, what: str) -> int:
    """A numeric header field: octal text, or GNU's base-256 (first byte 0x80) for values past octal's range."""
    if field_bytes[:1] == b"\x80":
        return int.from_bytes(field_bytes[1:], "big")
    text = field_bytes.split(b"\0", 1)[0].strip()
    try:
        return int(text or b"0", 8)
    except ValueError:
        raise _Damage(f"the header at byte {at} has an unreadable {what} field") from None


def _checksum_matches(header: bytes) -> bool:
    stored = header[148:156].split(b"\0", 1)[0].strip()
    try:
        stored_sum = int(stored, 8)
    except ValueError:
        return False
    unsigned = 256 + sum(header) - sum(header[148:156])  # the checksum field counts as eight spaces
    if stored_sum == unsigned:
        return True
    # some old writers summed signed bytes; tarfile accepts both
    return stored_sum == unsigned - 256 * sum(1 for b in header[:148] + header[156:] if b > 127)


def _pax_records(data: bytes, at: int) -> dict[str, str]:
    """``"%d key=value\\n"`` records of a pax extended header."""
    records, pos = {}, 0
    while pos < len(data) and data[pos:pos + 1] != b"\0":
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space])
        except ValueError:
            raise _Damage(f"the pax extended header at byte {at} is malformed") from None
        record = data[space + 1: pos + length]
        if length <= 0 or space < 0 or not record.endswith(b"\n") or b"=" not in record:
            raise _Damage(f"the pax extended header at byte {at} is malformed")
        key, _, value = record[:-1].partition(b"=")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return records


def _name(header: bytes) -> str:
    name = header[:100].split(b"\0", 1)[0]
    if header[257:265] == b"ustar\x0000":  # POSIX ustar keeps a long name's folder in the prefix field
        prefix = header[345:500].split(b"\0", 1)[0]
        name = prefix + b"/" + name if prefix else name
    return name.decode("utf-8", "surrogateescape")


def _skip_zero_blocks(data, at: int, end: int) -> int:
    """The offset of the first block after ``at`` that is not all zeros, or ``end``."""
    while at < end and data[at: at + BLOCK].count(0) == min(BLOCK, end - at):
        at += BLOCK
    return min(at, end)


def scan_tar(path: str | Path) -> TarScan:
    """The members of the tar archive ``path`` and whether it is whole (see the module's rules)."""
    scan = TarScan()
    end = os.path.getsize(path)
    with open(path, "rb") as f, (mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if end else
                                 contextlib.nullcontext(b"")) as data:
        try:
            _read_members(data, end, scan)
        except _Damage as damage:
            scan.damage, scan.cut = str(damage), damage.cut
    return scan


def _read_members(data, end: int, scan: TarScan) -> None:
    if end == 0:
        raise _Damage("the file is empty (0 bytes), not a tar archive")
    at, pending = 0, {}  # pending: what extended headers say of the next member (its name, its size)
    after = ""  # where the last whole member was, for the messages
    while True:
        if at == end:
            if pending:
                raise _Damage(f"it ends after an extended header, without the member it describes{after}")
            return  # it ends exactly at the end of the last member's padded data
        header = data[at: at + BLOCK]
        if len(header) < BLOCK:
            raise _Damage(f"it ends inside the header at byte {at}{after}")
        if header == ZERO:
            zeros_end = _skip_zero_blocks(data, at, end)
            if zeros_end == end:
                if end - at < 2 * BLOCK:
                    raise _Damage(f"it ends inside its end-of-archive blocks{after}")
                scan.end_blocks = True
                return
            at = zeros_end  # zeros, then more headers: a concatenated archive, read on
            continue
        if not _checksum_matches(header):
            raise _Damage(f"the header at byte {at} is damaged (its checksum does not match){after}")
        kind = header[156:157]
        name = pending.get("path") or _name(header)
        size = pending["size"] if "size" in pending and kind not in EXTENDED else _number(header[124:136], at, "size")
        start = at + BLOCK
        padded = start + (size + BLOCK - 1) // BLOCK * BLOCK
        if start + size > end:
            have = f"{max(end - start, 0)} of its {size} bytes are there, from byte {start}"
            if kind in EXTENDED:
                raise _Damage(f"it ends inside the extended header at byte {at} ({have}){after}")
            raise _Damage(f"it ends inside {name!r} ({have})", name)
        if kind in EXTENDED:
            body = bytes(data[start: start + size])
            if kind == b"x":
                records = _pax_records(body, at)
                pending.update({k: v for k, v in (("path", records.get("path")),) if v is not None})
                if "size" in records:
                    try:
                        pending["size"] = int(records["size"])
                    except ValueError:
                        raise _Damage(f"the pax extended header at byte {at} has an unreadable size") from None
            elif kind == b"g":
                _pax_records(body, at)  # checked, not used: a global header names no member
            elif kind == b"L":
                pending["path"] = body.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        else:
            pending = {}
            if kind in REGULAR and not name.endswith("/"):
                if name in scan.members:
                    scan.repeated.setdefault(name, [scan.members[name][0] - BLOCK]).append(at)
                else:
                    scan.members[name] = (start, size)
                scan.last = name
                after = f" (after {name!r})"
        if padded > end:
            raise _Damage(f"it ends inside the padding after {name!r}")
        at = padded
