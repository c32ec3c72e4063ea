"""A study's pre-registration, checked before each start: the design is in git before anything of the run exists.

`check` refuses a start unless the study's design files and the design section of its docs page are committed as
they are on disk, and the package's source tree is clean (the code that runs is a commit's). `waive` is the same
check turned into a record of what it found, for a start made anyway (`study run --not-preregistered`): the start,
the published ``run.json`` and every report then say "not pre-registered". Either record holds the design's
sha256 (its files and its section), and `stages.StartRecord` refuses a start whose design differs from the first
start's: a run cannot change its design between starts.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

from .published import OVERRIDE
from .stages import PACKAGE, code_version


class PreregistrationError(ValueError):
    """A study start its pre-registration does not allow."""


def git(where: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(where), *args], capture_output=True, timeout=60)


def section(text: str, heading: str) -> str | None:
    """The section of a Markdown page under ``heading`` (its line, to the next heading of its level or above)."""
    start = next((m.start() for m in re.finditer(rf"^{re.escape(heading)}\s*$", text, re.M)), None)
    if start is None:
        return None
    level = len(heading) - len(heading.lstrip("#"))
    end = re.compile(rf"^#{{1,{level}}} ", re.M).search(text, start + len(heading))
    return text[start:end.start() if end else len(text)]


def committed_text(path: Path) -> tuple[str | None, str]:
    """(the file's text at its checkout's HEAD, or None; why not, when None)."""
    if not path.is_file():
        return None, f"{path} does not exist"
    found = git(path.parent, "rev-parse", "--show-toplevel")
    if found.returncode:
        return None, f"{path} is not in a git checkout"
    root = Path(found.stdout.decode().strip())
    relative = path.resolve().relative_to(root.resolve()).as_posix()
    shown = git(root, "show", f"HEAD:{relative}")
    if shown.returncode:
        return None, f"{path} is not committed"
    return shown.stdout.decode("utf-8", "replace"), ""


def findings(design_files: list[Path], page: Path, heading: str, package: Path = PACKAGE,
             settings: dict | None = None) -> tuple[list[str], str]:
    """(what stops the start being pre-registered, in words: empty when nothing does; the design's sha256: its files,
    its section and the ``settings`` the runner resolved from them, such as a profile's)."""
    reasons = []
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode() + b"\0")
    for path in design_files:
        text, why = committed_text(path)
        if text is None:
            reasons.append(why)
        elif text != path.read_text(encoding="utf-8", errors="replace"):
            reasons.append(f"{path} differs from its last commit")
        digest.update(str(path.name).encode() + b"\0" + (path.read_bytes() if path.is_file() else b"") + b"\0")
    on_disk = section(page.read_text(encoding="utf-8"), heading) if page.is_file() else None
    if on_disk is None:
        reasons.append(f"{page} has no section {heading!r}")
    else:
        text, why = committed_text(page)
        if text is None:
            reasons.append(why)
        elif section(text, heading) != on_disk:
            reasons.append(f"the section {heading!r} of {page} is not committed as it stands")
    digest.update(heading.encode() + b"\0" + (on_disk or "").encode())
    code = code_version(package)
    if code["commit"] is None:
        reasons.append(f"the code's commit is not known ({code['reason']})")
    elif code["dirty"]:
        reasons.append(f"the package's source tree {package} has {code['changed_count']} uncommitted change(s) "
                       f"({', '.join(code['changed'][:3])})")
    return reasons, digest.hexdigest()


def check(design_files: list[Path], page: Path, heading: str, package: Path = PACKAGE,
          settings: dict | None = None) -> dict:
    """The start's pre-registration record; refused, naming every reason and the fix, when it is not one."""
    reasons, digest = findings(design_files, page, heading, package, settings)
    if reasons:
        raise PreregistrationError(
            "this study is not pre-registered as it stands: " + "; ".join(reasons) + ". Commit the design and its "
            f"section and leave the package's source clean, then start again (or pass {OVERRIDE}: the run is then "
            "recorded and reported as not pre-registered)")
    return {"preregistered": True, "design_sha256": digest}


def waive(design_files: list[Path], page: Path, heading: str, package: Path = PACKAGE,
          settings: dict | None = None) -> dict:
    """The record of a start made without a pre-registration: what the check found, and the design's sha256."""
    reasons, digest = findings(design_files, page, heading, package, settings)
    return {"preregistered": False, "design_sha256": digest, "reasons": reasons or ["none found; waived by "
                                                                                      f"{OVERRIDE}"]}


def same_design(starts_file: Path, record: dict) -> None:
    """Refuse a start whose design differs from the first recorded start's (``starts_file``: `stages.StartRecord`'s)."""
    starts = json.loads(starts_file.read_text())["starts"] if starts_file.is_file() else []
    first = next((s["preregistration"] for s in starts if s.get("preregistration")), None)
    if first is not None and first["design_sha256"] != record["design_sha256"]:
        raise PreregistrationError(
            f"the design differs from the one this run's first start ran with (design sha256 "
            f"{first['design_sha256'][:12]}, now {record['design_sha256'][:12]}; {starts_file}): a run keeps its "
            "design; restore it, or start a new run in another --out")
