"""What a command wrote in its output folder, so that it replaces only that.

A writer (``tradeoff``, ``eval --models``, ``wise-ft``, ``grid``) names the files and folders it is about to write
in ``--out``; `claim` refuses any of them that is there and that this command did not write (a hand-written
``tradeoff.md``, another command's ``leaderboard.md``, a file edited since), before anything is written, and
records the claim in ``<out>/.outputs.json``; `written` records each file's sha256 once it is written. A file
claimed but not yet recorded is the command's own (a run stopped between the two), so the same command resumes.
``--overwrite`` replaces them anyway. A folder is claimed by name alone (what is inside is its writer's to check).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..records import atomic_write_json, file_digest

MANIFEST = ".outputs.json"


class OutputError(ValueError):
    """An output folder that holds what this command may not replace; the message names the file and the fix."""


def output_folder(out: str | Path, flag: str = "--out") -> Path:
    """``out`` as a folder to write into: a file there is refused (not written over, not written beside)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"{flag} {out} is a file, not a folder: give a folder to write into (a new one is made)")
    return out


def read_manifest(out: Path) -> dict:
    path = out / MANIFEST
    if not path.is_file():
        return {}
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise OutputError(f"{path} is damaged ({e}): it records what was written into {out}; remove it and pass "
                          "--overwrite to replace that folder's files, or choose another --out") from None
    return manifest if isinstance(manifest, dict) else {}


def ours(path: Path, entry: dict | None, command: str) -> bool:
    if not isinstance(entry, dict) or entry.get("command") != command:
        return False
    sha256 = entry.get("sha256")
    return sha256 is None or not path.is_file() or file_digest(path) == sha256


def claim(out: str | Path, names: list[str], command: str, overwrite: bool = False) -> Path:
    """Refuse, naming the first, any of ``names`` in ``out`` that ``command`` did not write (unless ``overwrite``);
    then record them as this command's; the folder."""
    out = output_folder(out)
    manifest = read_manifest(out)
    mine = {name: ours(out / name, manifest.get(name), command) for name in names}  # each file hashed once
    for name in names:
        path = out / name
        if path.exists() and not overwrite and not mine[name]:
            why = "was edited after" if (manifest.get(name) or {}).get("command") == command else "was not written by"
            raise OutputError(f"{path} {why} `concrete-jungle {command}`, which would replace it: pass --overwrite "
                              "to replace it, or choose another --out")
    for name in names:
        if not mine[name] or overwrite:
            manifest[name] = {"command": command, "sha256": None}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / MANIFEST, manifest)
    return out


def written(out: str | Path, names: list[str]) -> None:
    """Record the sha256 of each of ``names`` (files) just written into ``out``: a later edit is then seen."""
    out = Path(out)
    manifest = read_manifest(out)
    for name in names:
        manifest[name] = {**manifest.get(name, {}), "sha256": file_digest(out / name)}
    atomic_write_json(out / MANIFEST, manifest)
