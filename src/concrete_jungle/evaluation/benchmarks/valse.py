"""VALSE (Parcalabescu et al. 2022): a caption against a foil that changes one linguistic phenomenon (existence,
plurality, counting, relations, actions, coreference, noun phrases).

Data: the VALSE release, unchanged: one JSON per piece (``<root>/valse/*.json``, a dict keyed by item id with
``image_file``, ``caption``, ``foil``, ``linguistic_phenomena`` and the annotators' votes ``mturk``), or the
repository cloned into ``<root>/valse/`` (the pieces in its ``data/``). The pictures of the source datasets: in
one folder, ``<root>/valse/images/<image_file>``, or each piece's in the folder the repository's ``config.py``
gives it (`SOURCES`, beside the pieces: ``data/visual7w/images/``, ``data/actions/images_512/``, ...; FOIL-it's
COCO val2014 in ``<root>/coco/val2014/``). A picture in both places is an error naming both.

The rule for contrastive models (the paper's pairwise accuracy acc_r): an item is right when the picture scores
the caption strictly above the foil (captions scored as [foil, caption], numpy's argmax: a tie is wrong). Only the
valid items count, as the release asks: at least two of the three annotators chose the caption and not the foil
(``mturk.caption >= 2``); the others are counted as filtered. Reported: acc_r per piece (file), per phenomenon
(the mean of its pieces) and ``VALSE`` (the mean over pieces, the paper's average).
"""

from __future__ import annotations

from pathlib import Path

from ...outcomes import reported, series
from ...records import file_digest
from ..chance import pick_chance
from ..checks import (
    BenchmarkDataError,
    check_images,
    image_path,
    items_of,
    load_json_file,
    release_folder,
    shown,
    text_of,
    unit_of,
)
from ..choice import subset_picks
from ..encoding import Crop, Encoder
from ..validity import averages, blind_block

LAYOUT = ("<root>/valse/data/<piece>.json (git clone https://github.com/Heidelberg-NLP/VALSE <root>/valse; or the "
          "pieces in <root>/valse/) and the pictures in <root>/valse/images/<image_file> or in the folder config.py "
          "names per piece beside the pieces (data/visual7w/images/, data/plurals/test_images/, "
          "data/relations/test_images/, data/actions/images_512/, data/coref/.../; foil-it: <root>/coco/val2014/)")
MIN_VOTES = 2
COCO = "coco/val2014"  # FOIL-it's pictures, under the data root
# piece -> its pictures' folder beside the pieces, as the repository's config.py (commit 2152d90) gives it
SOURCES = {"existence": "visual7w/images", "plurals": "plurals/test_images", "counting-hard": "visual7w/images",
           "counting-small-quant": "visual7w/images", "counting-adversarial": "visual7w/images",
           "relations": "relations/test_images", "action-replacement": "actions/images_512",
           "actant-swap": "actions/images_512",
           "coreference-standard": "coref/release_too_many_is_this_in_color/images",
           "coreference-hard": "coref/release_v18/test_images", "foil-it": COCO}


def load(root: str | Path, skip_missing: bool = False, coco: str | Path | None = None) -> dict:
    """Valid items per piece: (key, Crop, foil, caption, phenomenon); ``filtered``: items not validated. ``root``:
    the VALSE folder (its pieces in it or in its ``data/``); ``coco``: FOIL-it's COCO val2014 folder."""
    root = Path(root)
    pieces_dir = release_folder(root, "data", "*.json")
    pieces = sorted(pieces_dir.glob("*.json")) if pieces_dir.is_dir() else []
    if not pieces:
        raise BenchmarkDataError(f"{root} holds no VALSE piece (*.json); expected layout: {LAYOUT}")
    data, filtered, files = {}, {}, {}
    for path in pieces:
        raw = load_json_file(path, LAYOUT)
        if not isinstance(raw, dict):
            raise BenchmarkDataError(f"{path}: VALSE files are a dict keyed by item id; expected layout: {LAYOUT}")
        files[path] = file_digest(path)
        rows, dropped = [], 0
        for key, item in items_of(raw, path, dict, LAYOUT):
            if any(f not in item for f in ("image_file", "caption", "foil")):
                raise BenchmarkDataError(f"{path}: item {key!r} needs image_file, caption and foil; expected "
                                         f"layout: {LAYOUT}")
            for field in ("image_file", "caption", "foil"):
                text_of(item[field], path, f"item {key!r}", field)
            votes = item.get("mturk") or {}
            caption_votes = votes.get("caption", 0) if isinstance(votes, dict) else None
            if isinstance(caption_votes, bool) or not isinstance(caption_votes, (int, float)):
                raise BenchmarkDataError(f"{path}: item {key!r} has mturk {shown(item['mturk'])}; it holds the "
                                         'annotators\' votes, {"caption": <count>, "foil": <count>, ...}')
            if caption_votes < MIN_VOTES:
                dropped += 1
                continue
            picture = _picture(root / "images", _source(pieces_dir, path.stem, coco), item["image_file"])
            rows.append((str(key), Crop(picture), item["foil"], item["caption"],
                         str(item.get("linguistic_phenomena") or path.stem)))
        data[path.stem], filtered[path.stem] = rows, dropped
    problems, sha256 = check_images([it[1].path for items in data.values() for it in items], LAYOUT, skip_missing)
    # a piece whose every item the annotators rejected has no score: said, not left as a silent blank
    notes = [f"{piece}: none of its {filtered[piece]} item(s) was validated (at least {MIN_VOTES} annotators "
             "choosing the caption), so it has no score and no part in the averages" for piece, rows in data.items()
             if not rows]
    return {"items": {s: [it for it in items if it[1].path not in problems] for s, items in data.items()},
            "skipped": {s: sum(it[1].path in problems for it in items) for s, items in data.items()},
            "filtered": filtered, "files": files | sha256, "notes": notes}


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """`load` of ``<root>/valse``, FOIL-it's pictures in ``<root>/coco/val2014``."""
    return load(Path(root) / "valse", skip_missing=skip_missing, coco=Path(root) / COCO)


def _source(pieces_dir: Path, piece: str, coco: Path | None) -> Path | None:
    """The folder of a piece's pictures as the repository's config.py places it, or None for a piece it does not
    name."""
    if piece not in SOURCES:
        return None
    if SOURCES[piece] == COCO:
        return coco
    return pieces_dir / SOURCES[piece]


def _picture(one: Path, source: Path | None, name: str) -> Path:
    """A picture in the one folder of every piece or in its piece's source folder: where it is (both is an error
    naming both); where neither holds it, the path reported missing is the one folder's when that folder exists."""
    here = image_path(one, name)
    there = image_path(source, name) if source is not None else None
    if there is None:
        return here
    if here.is_file() and there.is_file():
        raise BenchmarkDataError(f"{here} and {there} are both the VALSE picture {name!r}: two copies; keep one")
    return there if there.is_file() or not one.is_dir() else here


def evaluate(encoder: Encoder, data: dict) -> dict:
    """acc_r per piece, per phenomenon and over pieces (and over items, ``all items (micro)``); ``outcomes`` per
    item (`stats`); the labelled averages (``averages``) and the blind baseline (``blind``)."""
    chosen = subset_picks(encoder, {s: ([it[1] for it in items], [[it[2], it[3]] for it in items])
                                    for s, items in data["items"].items()})
    outcomes = outcomes_of(data, {s: p == 1 for s, p in chosen["picks"].items()})  # the caption is second
    blind = outcomes_of(data, {s: p == 1 for s, p in chosen["blind"].items()})
    return {"metrics": reported(outcomes), "n": {s: len(v) for s, v in data["items"].items()},
            "skipped": data["skipped"], "filtered": data["filtered"], "notes": data["notes"], "outcomes": outcomes,
            "averages": averages(outcomes["metrics"]), "blind": blind_block(blind, chosen["pictures"])}


def outcomes_of(data: dict, answers_of: dict) -> dict:
    """The outcomes of the answers ``answers_of[piece]`` (each item right or not), with the metrics' recipes."""
    answers, recipes, phenomena = {}, {}, {}
    for piece, items in data["items"].items():
        right = answers_of[piece]
        answers[piece] = series([it[0] for it in items], [unit_of(it[1].path) for it in items], right)
        recipes[piece] = {"mean": piece}
        if items:
            phenomena.setdefault(items[0][4], []).append(piece)
    recipes |= {f"phenomenon/{p}": {"macro": pieces} for p, pieces in sorted(phenomena.items())}
    recipes["VALSE"] = {"macro": list(data["items"])}
    recipes["all items (micro)"] = {"micro": list(data["items"])}
    return {"series": answers, "metrics": recipes}


def item_chances(data: dict) -> dict:
    """Each item's chance (`chance.levels`): [foil, caption], the caption second, so a tie is wrong."""
    return {s: [(row[0], pick_chance([row[2], row[3]], 1)) for row in rows] for s, rows in data["items"].items()}
