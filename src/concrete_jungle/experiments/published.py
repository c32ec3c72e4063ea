"""A study's outputs in a compact form anyone can re-check, and the report computed from them alone.

``<study>/published/`` holds ``design.json`` (the rules' inputs and choices, the validation curve), ``world.json``
(the world's settings and test counts), ``recipes.json`` (how each metric is made from the answers, `stats`),
``answers.jsonl.gz`` (one line per model, seed and answer: row, seed, series, item key, its test scene, value),
``run.json`` (the wall time over every start, and each start's time, code and check of its design:
`stages.StartRecord`, `preregistration`), ``curves.jsonl.gz`` (one line per training step of every row and seed, its
metrics.jsonl row: the training curves; absent from folders published before it existed) and ``digests.json`` (the
sha256 of each, written last).
`concrete-jungle study report DIR` rebuilds every table, interval and verdict from these files: no model, no world,
seconds. It refuses a file whose digest differs from the recorded one (an edit, however consistent, would make its
report print other verdicts as the study's), and the counts it prints come from the answers, checked against
``world.json``.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

from ..records import atomic_write_json, file_digest

FILES = ("design.json", "world.json", "recipes.json", "answers.jsonl.gz", "run.json")
CURVES = "curves.jsonl.gz"  # published since the record of every start; older folders lack it
DIGESTS = "digests.json"
RESTORE = "restore the files as the study published them"
OVERRIDE = "--not-preregistered"  # `study run`'s flag for a start made without a pre-registration


class PublishedError(ValueError):
    """A published folder whose files are missing, damaged, changed since publishing, or not of one study."""


def publish(folder: Path, design: dict, world_info: dict, items: dict, seconds: float, starts: list[dict],
            curves: dict[tuple, list[dict]]) -> None:
    """Write the study's published files; ``items[(row, seed)]["outcomes"]`` are a model's test answers,
    ``starts`` every start of the study (`stages.StartRecord`), ``curves[(row, seed)]`` a model's training log
    (its metrics.jsonl rows)."""
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / "design.json", design)
    atomic_write_json(folder / "world.json", world_info)
    atomic_write_json(folder / "recipes.json", next(iter(items.values()))["outcomes"]["metrics"])
    atomic_write_json(folder / "run.json", run_json(seconds, starts))
    write_gzip_lines(folder / "answers.jsonl.gz", (
        [row, seed, name, key, unit, value] for (row, seed), result in items.items()
        for name, data in result["outcomes"]["series"].items()
        for key, unit, value in zip(data["keys"], data["units"], data["values"])))
    write_gzip_lines(folder / CURVES, ([row, seed, step] for (row, seed), log in curves.items() for step in log))
    write_digests(folder)


def write_gzip_lines(path: Path, lines) -> None:
    """One JSON value a line, gzip-compressed, written atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=9) as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    tmp.rename(path)


def write_digests(folder: Path) -> None:
    """``digests.json``: the sha256 of every published file, written after them all (a folder holding it is whole)."""
    names = FILES + ((CURVES,) if (folder / CURVES).is_file() else ())
    atomic_write_json(folder / DIGESTS, {"sha256": {name: file_digest(folder / name) for name in names}})


def load(folder: str | Path) -> tuple[dict, dict, dict, float]:
    """(design, world settings, items as `publish` took them, seconds) read back from ``folder``, every file checked
    against ``digests.json``; the world's test counts are the answers' (`answer_counts`)."""
    folder = Path(folder)
    missing = [n for n in FILES + (DIGESTS,) if not (folder / n).is_file()]
    if missing == [DIGESTS]:
        raise PublishedError(f"{folder} has no {DIGESTS}, so its files cannot be checked against what the study "
                             "published; a study run writes it when it publishes (the same `concrete-jungle study run` "
                             "command reuses every finished stage and publishes again)")
    if missing:
        raise PublishedError(f"{folder} is not a study's published folder: {', '.join(missing)} missing (a study "
                             "writes them to <out>/published)")
    check_digests(folder)
    recipes = read_json(folder / "recipes.json")
    items = read_answers(folder / "answers.jsonl.gz", recipes)
    seconds = read_json(folder / "run.json").get("seconds")
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds < 0:
        raise PublishedError(f"{folder / 'run.json'}: 'seconds' must be the run's wall time in seconds, got "
                             f"{seconds!r}; {RESTORE}")
    world = checked_world(folder / "world.json", items)
    if (folder / CURVES).is_file():
        read_curves(folder / CURVES, items)
    return read_json(folder / "design.json"), world, items, seconds


def read_curves(path: Path, items: dict) -> dict[tuple, list[dict]]:
    """The training curves as `publish` took them, ``{(row, seed): [metrics row, ...]}``; every model that answered
    the test must have one, its steps in order."""
    curves: dict[tuple, list[dict]] = {}
    line_number = 0
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line_number, line in enumerate(f, 1):
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    entry = None
                if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[2], dict)
                        and isinstance(entry[2].get("step"), int)):
                    raise PublishedError(f"{path} line {line_number} is not a training step [row, seed, metrics "
                                         f"with its step]: {line[:80].strip()!r}; {RESTORE}")
                curves.setdefault((entry[0], entry[1]), []).append(entry[2])
    except (EOFError, OSError, zlib.error, UnicodeDecodeError) as e:
        raise PublishedError(f"{path} is damaged after line {line_number} ({e or type(e).__name__}); "
                             f"{RESTORE}") from None
    lacking = [f"{row!r} seed {seed}" for row, seed in items if not curves.get((row, seed))]
    unordered = [f"{row!r} seed {seed}" for (row, seed), log in curves.items()
                 if [r["step"] for r in log] != sorted(r["step"] for r in log)]
    if lacking or unordered:
        what = (f"has no training curve of {', '.join(lacking[:3])}" if lacking else
                f"holds the steps of {', '.join(unordered[:3])} out of order")
        raise PublishedError(f"{path} {what}; {RESTORE}")
    return curves


def run_record(folder: str | Path) -> dict:
    """``run.json``: the wall time and, since it was recorded, every start with its code (`stages.StartRecord`)."""
    return read_json(Path(folder) / "run.json")


def counts_all_starts(run: dict) -> bool:
    """Whether a study's published wall time is the sum over all its starts (studies published before that sum was
    kept record their last start's alone)."""
    return run.get("starts") == "all" or isinstance(run.get("starts"), list)


def wall_time_words(seconds: float, all_starts: bool = True) -> str:
    """A study's wall time, in words that say what it counts: every start of the study, or the last start's alone,
    which understates a study that was resumed."""
    minutes = f"{seconds / 60:.0f} minutes"
    if all_starts:
        return f"{minutes} (wall time over all its starts)"
    return (f"{minutes} (the wall time of its last start only: these files predate the record of every start's, "
            "so a study that was stopped and resumed took longer, and the total is not in its files)")


def code_words(code: dict | None) -> str:
    """The code a start ran, in words: its commit and whether the package's files differed from it."""
    if not code or code.get("commit") is None:
        return f"code not known ({(code or {}).get('reason', 'not recorded')})"
    if not code["dirty"]:
        return f"commit {code['commit'][:12]}, clean"
    return (f"commit {code['commit'][:12]} with {code['changed_count']} changed file(s) in the package (changes "
            f"sha256 {code['changes_sha256'][:12]})")


def starts_words(run: dict) -> str:
    """Each start of a study and the code it ran (code that changed during a start named too), or that the files
    predate that record."""
    starts = run.get("starts")
    if not isinstance(starts, list):
        return ("The code each start ran is not recorded in these files (they predate that record), nor are the "
                "training curves.")
    parts = []
    for k, start in enumerate(starts, 1):
        words = f"start {k} ({start.get('started') or 'time not recorded'}): {code_words(start.get('code'))}"
        if start.get("code") and start.get("code_at_last_stage") not in (None, start["code"]):
            words += f"; by its last finished stage ({start['last_stage']}): {code_words(start['code_at_last_stage'])}"
        parts.append(words)
    return (f"{len(starts)} start(s): " + "; ".join(parts) + f". Training curves of every row: {CURVES}. "
            + preregistration_words(starts))


def run_json(seconds: float, starts: list[dict]) -> dict:
    """``run.json``: the wall time, every start (its time, code and check of the design) and the run's
    pre-registration in words."""
    # "starts": the seconds are the sum over every start of the study (`stages.WallClock`), and each start's code;
    # files published before it lack the key (their seconds are the last start's), or hold "all" (no code recorded)
    return {"seconds": seconds, "starts": starts} | preregistration_state(starts)


def preregistration_state(starts: list[dict]) -> dict:
    """run.json's ``preregistration``: "not pre-registered" when a start waived its check, "pre-registered" when every
    start passed it; nothing for starts made before the check (`preregistration`)."""
    records = [s.get("preregistration") for s in starts]
    if not any(records):
        return {}
    if any(r and not r["preregistered"] for r in records):
        return {"preregistration": "not pre-registered"}
    return {"preregistration": "pre-registered" if all(records) else
            f"pre-registration checked at {sum(map(bool, records))} of {len(records)} starts"}


def preregistration_words(starts: list[dict]) -> str:
    """The pre-registration of a run's starts, in a report's words."""
    records = [(k, s["preregistration"]) for k, s in enumerate(starts, 1) if s.get("preregistration")]
    if not records:
        return "Pre-registration: not checked by the runner (its starts predate the check)."
    waived = [(k, r) for k, r in records if not r["preregistered"]]
    if waived:
        return ("**Not pre-registered**: " + "; ".join(f"start {k} ran with {OVERRIDE} ({'; '.join(r['reasons'])})"
                                                         for k, r in waived) + ".")
    return (f"Pre-registered: the design committed and the package's source clean at {len(records)} of "
            f"{len(starts)} start(s) (design sha256 {records[0][1]['design_sha256'][:12]}).")


def check_digests(folder: Path) -> None:
    """Every published file has the sha256 ``digests.json`` records for it; else the file that differs. The
    training curves are checked where published (folders from before them lack the file and its digest)."""
    recorded = read_json(folder / DIGESTS).get("sha256")
    names = FILES + ((CURVES,) if (folder / CURVES).is_file() else ())
    if not isinstance(recorded, dict) or sorted(recorded) != sorted(names):
        listed = ", ".join(sorted(recorded)) if isinstance(recorded, dict) else "nothing"
        raise PublishedError(f"{folder / DIGESTS} lists the sha256 of {listed}, not of the folder's {', '.join(names)}"
                             f"; {RESTORE}")
    for name in names:
        if file_digest(folder / name) != recorded[name]:
            raise PublishedError(f"{folder / name} is not the file the study published: its sha256 differs from "
                                 f"the one {DIGESTS} records ({recorded[name][:12]}...); {RESTORE} (a report of "
                                 "changed files would print other numbers as the study's)")


def read_json(path: Path) -> dict:
    """A published JSON object, or an error naming the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PublishedError(f"{path} is damaged (not JSON: {e}); {RESTORE}") from None
    if not isinstance(data, dict):
        raise PublishedError(f"{path} holds a {type(data).__name__}, not the JSON object a study publishes; {RESTORE}")
    return data


def read_answers(path: Path, recipes: dict) -> dict:
    """The answers file as `publish` took it: ``{(row, seed): {"outcomes": {"series": ..., "metrics": recipes}}}``."""
    items: dict = {}
    line_number = 0
    decode = json.JSONDecoder().decode
    current, data = None, None  # the series being filled: a file lists each model's series item after item
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line_number, line in enumerate(f, 1):
                try:
                    answer = decode(line)
                except json.JSONDecodeError:
                    answer = None
                if type(answer) is not list or len(answer) != 6:
                    raise PublishedError(f"{path} line {line_number} is not an answer [row, seed, series, item key, "
                                         f"test scene, value]: {line[:80].strip()!r}; {RESTORE}")
                row, seed, name, key, unit, value = answer
                if (row, seed, name) != current:
                    series = items.setdefault((row, seed), {"outcomes": {"series": {}, "metrics": recipes}})
                    data = series["outcomes"]["series"].setdefault(name, {"keys": [], "units": [], "values": []})
                    current = (row, seed, name)
                data["keys"].append(key)
                data["units"].append(unit)
                data["values"].append(value)
    except (EOFError, OSError, zlib.error, UnicodeDecodeError) as e:
        raise PublishedError(f"{path} is damaged after line {line_number} ({e or type(e).__name__}); "
                             f"{RESTORE}") from None
    if not items:
        raise PublishedError(f"{path} holds no answers; {RESTORE}")
    # a series without items (every swap negative of a world keeps its words: no bag-of-words-differing part) has no
    # line in the file; its recipes still name it, and it holds no answer
    named = {s for recipe in recipes.values() for s in ([recipe["mean"]] if "mean" in recipe else [])
             + list(recipe.get("micro", []))}
    for result in items.values():
        for name in named - result["outcomes"]["series"].keys():
            result["outcomes"]["series"][name] = {"keys": [], "units": [], "values": []}
    return items


def answer_counts(items: dict) -> tuple[int, dict[str, int]]:
    """(test scenes, items per series) of the answers: those of the first model (`outcomes.check_same_items` holds
    every other to the same items)."""
    series = next(iter(items.values()))["outcomes"]["series"]
    scenes = {unit for data in series.values() for unit in data["units"]}
    return len(scenes), {name: len(data["keys"]) for name, data in series.items()}


def checked_world(path: Path, items: dict) -> dict:
    """``world.json`` with its test counts recomputed from the answers; an error naming both where they differ."""
    world = read_json(path)
    missing = [k for k in ("train", "val", "test", "test_items") if k not in world]
    if missing or not isinstance(world["test_items"], dict):
        raise PublishedError(f"{path} lacks the world's {', '.join(missing) or 'test_items'} (a study publishes "
                             f"train, val, test and test_items); {RESTORE}")
    scenes, counts = answer_counts(items)
    answers = path.with_name("answers.jsonl.gz")
    if world["test"] != scenes:
        raise PublishedError(f"{path} says {world['test']} test scenes, {answers} holds answers on {scenes}; the "
                             f"two are not of one study: {RESTORE}")
    for subset, stated in world["test_items"].items():
        if counts.get(subset) != stated:
            raise PublishedError(f"{path} says {subset} has {stated} test items, {answers} holds "
                                 f"{counts.get(subset, 0)}; the two are not of one study: {RESTORE}")
    return world | {"test": scenes, "test_items": {subset: counts[subset] for subset in world["test_items"]}}


def check_rows(folder: str | Path, items: dict, labels: set[str], seeds: list) -> None:
    """The answers hold every row a study's contrasts need, for every seed of its design."""
    lacking = sorted(f"{label!r} seed {seed}" for label in labels for seed in seeds if (label, seed) not in items)
    if lacking:
        raise PublishedError(f"{Path(folder) / 'answers.jsonl.gz'} holds no answers of {', '.join(lacking[:3])}"
                             f"{f' (and {len(lacking) - 3} more)' if len(lacking) > 3 else ''}, which the study's "
                             f"contrasts need; {RESTORE}")
