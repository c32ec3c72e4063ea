"""Crash-safe files: atomic writes, and append-only JSONL that a killed process leaves repairable."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import secrets
from pathlib import Path

from .errors import JobError


class WriteError(JobError):
    """A file could not be written (disk full, quota, permissions): nothing half-written is left as done."""


def write_error(path: str | Path, error: OSError) -> WriteError:
    return WriteError(f"could not write {path}: {error.strerror or error}; free space (or fix the permissions) "
                      "and run the same command again: it resumes where it stopped")


def file_digest(path: str | Path, algorithm: str = "sha256") -> str:
    """The hex digest of a file's bytes, read in 4 MiB blocks."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def mean_median(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and median (the mean of the two middle values for an even count); ``None`` for no values."""
    values = sorted(values)
    n = len(values)
    if not n:
        return None, None
    return sum(values) / n, (values[(n - 1) // 2] + values[n // 2]) / 2


def create_temporary(path: Path) -> tuple[int, Path]:
    """A new, uniquely named file beside ``path`` (a descriptor open for writing, its path).

    Created with mode 0666 like any file `open` makes, so the umask decides who can read it;
    `tempfile.mkstemp` would make it 0600 and every result file unreadable to collaborators.
    """
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, rename: readers see old or new, never half."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = create_temporary(path)
    except OSError as e:
        raise write_error(path, e) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise write_error(path, e) from None
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_safetensors(path: str | Path, tensors: dict) -> None:
    """Tensors as a safetensors file, written like every other file here (atomically, honouring the umask:
    safetensors' own ``save_file`` makes its files 0600)."""
    from safetensors.torch import save

    atomic_write_bytes(path, save({k: v.contiguous() for k, v in tensors.items()}))


def atomic_write_json(path: str | Path, data) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def atomic_write_jsonl(path: str | Path, rows: list[dict]) -> None:
    """One JSON object per line, the whole file replaced at once."""
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows))


def read_jsonl(path: str | Path) -> list[dict]:
    """Every record of a JSONL file written whole (atomically); blank lines are skipped."""
    # split on "\n" alone: str.splitlines() also splits on U+0085, U+2028 and others, which JSON writes raw
    # inside strings (ensure_ascii=False), so a caption holding one would be cut in two
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").split("\n") if line.strip()]


def read_jsonl_repairing(path: str | Path) -> list[dict]:
    """The complete records of an append-only JSONL file.

    A last line without its newline is what a killed writer leaves: it is cut off the file (so
    the next append starts on a clean line) and not returned, so its sample is done again, once.
    A complete line that is not valid JSON is corruption, not a crash, and is an error.
    """
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with open(path, "r+b") as f:
            f.truncate(end)
    records = []
    for lineno, line in enumerate(data[:end].split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ValueError(
                f"{path}, line {lineno}: not valid JSON ({e.msg}); the file is corrupt, move it away to start over"
            ) from None
    return records


class JsonlAppender:
    """Appends one JSON record per line; each line is flushed whole, so a crash loses at most a partial line."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        try:
            self._f.write(json.dumps(record, ensure_ascii=False) + "\n")
        except OSError as e:
            raise write_error(self.path, e) from None

    def flush(self) -> None:
        try:
            self._f.flush()
            os.fsync(self._f.fileno())
        except OSError as e:
            raise write_error(self.path, e) from None

    def close(self) -> None:
        self.flush()
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def differing(names: list[str]) -> str:
    """``"sampler differs"``, ``"limit, sampler differ"``: the settings a job found changed, for its message."""
    return f"{', '.join(names)} {'differs' if len(names) == 1 else 'differ'}"


@contextlib.contextmanager
def csv_field_limit(limit: int):
    """csv's field size limit set to ``limit`` for one read and restored after: the limit is the csv module's global
    state, so a reader that raises it for long cells would otherwise change what every later reader accepts."""
    before = csv.field_size_limit(limit)
    try:
        yield
    finally:
        csv.field_size_limit(before)
