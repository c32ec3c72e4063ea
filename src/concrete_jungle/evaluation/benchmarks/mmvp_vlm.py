"""MMVP-VLM (Tong et al. 2024, "Eyes Wide Shut?"): 135 pairs of "CLIP-blind" images, each image with a short statement
true of it and not of the other, in 9 visual patterns of 15 pairs (orientation, presence of features, state,
quantity, position, colour, structure, text, viewpoint).

Data: the MMVP_VLM release on Hugging Face (``MMVP/MMVP_VLM``), unchanged: ``Questions.csv`` (a header, then one row
per statement: ``Question ID, Type, Statement``, the two statements of a pair on consecutive rows, ids 2k - 1 and
2k) and ``MLLM_VLM Images/<Type>/<Question ID>.jpg``, the image the statement of that id describes.

The official rule is the MMVP repository's ``scripts/evaluate_vlm.py`` (tsb0601/MMVP, commit 4d6eaeb, unchanged
through 7635005), read for this module: per pair, both images come from the folder of the first row's Type; each
statement is prefixed ``"a photo of "``; for each statement the model's logits over the two images go through a
softmax, and the statement picks the first image when its probability is > 0.5, else the second, so a tie (0.5
exactly) goes to the second image. A statement's right image is the first when its id is odd, else the second. A
pair counts only when **both statements pick their own image** (a choice among images, text -> image). We compare
the two cosines directly: the softmax of two logits is > 0.5 exactly when the first logit is larger, so statement 1
is right when s(t1, i1) > s(t1, i2) strictly and statement 2 when s(t2, i2) >= s(t2, i1), each cosine its own fp32
dot product, so one picture named twice ties exactly (the script's batched model call may round the two logits
apart, depending on the BLAS kernel). The images are passed as opened, the model's transform converting them to RGB,
as the official script passes them.

Reported: the pair accuracy per pattern (named by its Type); ``macro``, the mean of the patterns' accuracies (the
paper's average over the 9, the headline), and ``micro``, the share of all pairs right. The official script assigns
patterns by position (the n-th block of 15 pairs is the n-th pattern) and divides each pattern's count by pairs / 9;
on the release each block of 15 is exactly the pairs of one Type, so we group by Type, and the two averages are
equal there; on a file with patterns of unequal size they differ, and both are given. Pairs that share an image are
one unit of resampling (`two_by_two.units`). Each row pair must be ids (2k - 1, 2k) of one Type: the official script
would otherwise read an image from another pattern's folder or take an even id's statement for the second image.
"""

from __future__ import annotations

from pathlib import Path

from ...outcomes import reported, series
from ...records import file_digest
from .. import two_by_two
from ..chance import reading
from ..checks import BenchmarkDataError, check_images, csv_lines, image_path
from ..encoding import Encoder
from ..two_by_two import Pair
from ..validity import MICRO, averages, blind_block

LAYOUT = ("<root>/mmvp_vlm/Questions.csv (Question ID, Type, Statement: the two statements of a pair on consecutive "
          "rows, ids 2k-1 and 2k) and <root>/mmvp_vlm/MLLM_VLM Images/<Type>/<Question ID>.jpg (the MMVP_VLM "
          "release)")
IMAGES = "MLLM_VLM Images"
PREFIX = "a photo of "
PAIRS = "pairs"  # the series of every pair, which the micro average reads


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """Pairs per pattern (`two_by_two.Pair`: the images of statements 1 and 2, the statements with the official
    prefix, the Type); every row and image checked before any model loads."""
    folder = Path(root) / "mmvp_vlm"
    path = folder / "Questions.csv"
    if not path.is_file():
        raise BenchmarkDataError(f"{path} not found; expected layout: {LAYOUT}")
    rows = _rows(path)
    data: dict[str, list[Pair]] = {}
    for (line1, qid1, type1, text1), (line2, qid2, type2, text2) in zip(rows[0::2], rows[1::2]):
        if qid1 % 2 != 1 or qid2 != qid1 + 1 or type1 != type2:
            raise BenchmarkDataError(f"{path}, lines {line1} and {line2}: a pair is two consecutive rows of ids 2k-1 "
                                     f"and 2k and one Type, found ids {qid1} ({type1!r}) and {qid2} ({type2!r}); "
                                     "the official script reads both images from the first row's Type folder and "
                                     "takes an odd id's statement for the first image")
        images = tuple(image_path(folder / IMAGES, f"{type1}/{qid}.jpg") for qid in (qid1, qid2))
        data.setdefault(type1, []).append(Pair(f"{qid1}-{qid2}", images, (PREFIX + text1, PREFIX + text2), type1))
    problems, sha256 = check_images([p for items in data.values() for it in items for p in it.images], LAYOUT,
                                    skip_missing)
    usable = {t: [it for it in items if not any(p in problems for p in it.images)] for t, items in data.items()}
    # a pair whose two files hold one picture: its statements score the two images alike (`item_chances`)
    twins = [it.key for items in usable.values() for it in items if sha256[it.images[0]] == sha256[it.images[1]]]
    return {"items": usable, "skipped": {t: len(data[t]) - len(usable[t]) for t in data}, "twins": twins,
            "files": {path: file_digest(path)} | sha256}


def _rows(path: Path) -> list[tuple[int, int, str, str]]:
    """(line, question id, Type, Statement) of every row after the header; an even number of them."""
    rows = []
    for n, row in csv_lines(path, LAYOUT)[1:]:  # the first line is the header, as the official script skips it
        if not row:
            continue
        if len(row) != 3 or not row[0].strip().isdigit() or not row[1] or not row[2]:
            raise BenchmarkDataError(f"{path}, line {n}: {row!r} is not Question ID (a whole number), Type, "
                                     f"Statement; expected layout: {LAYOUT}")
        rows.append((n, int(row[0]), row[1], row[2]))
    if not rows:
        raise BenchmarkDataError(f"{path} holds no statements; expected layout: {LAYOUT}")
    if len(rows) % 2:
        raise BenchmarkDataError(f"{path}: {len(rows)} statements, an odd number; the last (line {rows[-1][0]}) "
                                 "has no pair (the official script drops it): each pair is two rows")
    return rows


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Pair accuracy per pattern, their mean (``macro``) and the share of all pairs (``micro``), labelled
    (``averages``); ``outcomes`` per pair (`stats`); no blind baseline: a statement chooses between pictures
    (`validity.TEXT_TO_IMAGE`)."""
    items = [it for rows in data["items"].values() for it in rows]
    s = two_by_two.similarities(encoder, items)  # s[n, statement, image]
    # statement 1 picks image 1 only when strictly above; statement 2 picks image 2 on a tie too
    right = (s[:, 0, 0] > s[:, 0, 1]) & ~(s[:, 1, 0] > s[:, 1, 1])
    unit = two_by_two.units(items)
    answers = {PAIRS: series([it.key for it in items], [unit[it.key] for it in items], right.tolist())}
    at = 0
    for pattern, rows in data["items"].items():
        answers[pattern] = series([it.key for it in rows], [unit[it.key] for it in rows],
                                  right[at: at + len(rows)].tolist())
        at += len(rows)
    recipes = {pattern: {"mean": pattern} for pattern in data["items"]}
    recipes |= {"macro": {"macro": [p for p, rows in data["items"].items() if rows]}, "micro": {"mean": PAIRS}}
    outcomes = {"series": answers, "metrics": recipes}
    metrics = reported(outcomes)
    pictures = len({p for it in items for p in it.images})
    return {"metrics": metrics, "n": {t: len(v) for t, v in data["items"].items()}, "skipped": data["skipped"],
            "outcomes": outcomes, "averages": averages(recipes) | {"micro": MICRO},
            "blind": blind_block(None, pictures, not_applicable=list(metrics))}  # statements choose images


def item_chances(data: dict) -> dict:
    """Each pair's chance (`chance.levels`): each statement picks between two images at random, 1/2 each, so
    1/4; 0 when the two statements read alike (one text cannot pick each image in turn) or the two files hold one
    picture (``twins``: statement 1 ties, and the tie goes to image 2)."""
    twins = set(data.get("twins", ()))

    def chance(it: Pair) -> float:
        return 0.0 if reading(it.captions[0]) == reading(it.captions[1]) or it.key in twins else 0.25

    out = {pattern: [(it.key, chance(it)) for it in rows] for pattern, rows in data["items"].items()}
    return out | {PAIRS: [(it.key, chance(it)) for rows in data["items"].values() for it in rows]}
