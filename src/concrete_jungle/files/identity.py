"""What made a reusable piece of work (a grid's cell, a seed's run, a start's evaluation): its settings and the
digests of its inputs, recorded beside it, so that a re-run reuses it only where that is unchanged.

An identity is a JSON object (nested settings, input digests). `changes` names every entry that differs between a
recorded one and the one a re-run would make, with both values; `check_reusable` reads ``identity.json`` in the
piece's folder and refuses one made otherwise, naming what differs. The record is written when the piece is started
(`record`): a piece stopped half-way is continued only under the identity it was started with.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import JobError
from ..records import atomic_write_json

RECORD = "identity.json"


class IdentityError(JobError):
    """Work done under other settings or on other inputs than a re-run's; the message names what differs."""


def flat(settings: dict, prefix: str = "") -> dict:
    """``{"optim": {"lr": 1}}`` as ``{"optim.lr": 1}``."""
    out = {}
    for key, value in settings.items():
        if isinstance(value, dict) and value:
            out |= flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def changes(before: dict, now: dict, ignore: tuple[str, ...] = (), both: bool = True) -> list[str]:
    """``"optim.lr 0.002 -> 0.01"`` for each entry whose value differs (through JSON: a tuple is its list);
    ``both=False`` compares only the entries both hold (another version's record lacks some, or has others)."""
    before, now = flat(json.loads(json.dumps(before))), flat(json.loads(json.dumps(now)))
    keys = [k for k in now if k in before] if not both else list(dict.fromkeys([*before, *now]))
    return [f"{k} {json.dumps(before.get(k, 'absent'))} -> {json.dumps(now.get(k, 'absent'))}" for k in keys
            if k not in ignore and before.get(k, "absent") != now.get(k, "absent")]


def check_reusable(folder: Path, identity: dict, what: str, fix: str) -> None:
    """Nothing when ``folder`` holds no record (nothing made yet) or one of this identity; else an `IdentityError`
    naming ``what``, each entry that differs, and ``fix``."""
    path = Path(folder) / RECORD
    if not path.is_file():
        return
    try:
        before = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise IdentityError(f"{path} is damaged ({e}): it records what {what} was made from; {fix}") from None
    changed = changes(before, identity)
    if changed:
        raise IdentityError(f"{what} was made from other settings or inputs ({'; '.join(changed[:6])}"
                            f"{'; ...' if len(changed) > 6 else ''}; recorded in {path}): {fix}")


def record(folder: Path, identity: dict) -> None:
    atomic_write_json(Path(folder) / RECORD, identity)
