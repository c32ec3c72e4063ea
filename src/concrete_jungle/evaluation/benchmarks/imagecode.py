"""ImageCoDe (Krojer et al. 2022, "Image Retrieval from Contextual Descriptions"): one description, ten nearly
identical pictures (frames of one video, or ten similar static pictures), pick the one it describes.

Data: the release (McGill-NLP/imagecode), unchanged: ``data/valid_data.json``, a dict ``{image set: {image index:
description}}``, and the image sets of ``image-sets.zip``, a folder per set holding ``img<N>.jpg`` (for video frames
N is the frame number). Only the valid split is scored: the test split's targets are hidden
(``test_data_unlabeled.json`` holds descriptions only; test results are sent to the authors' leaderboard), and the
train split is for training.

The official rule is the repository's zero-shot CLIP baseline, ``baselines/clip/zero_shot.py`` (McGill-NLP/imagecode,
commit 609f076), read for this module: the set's ``*.jpg`` files sorted by the number after ``img``; the target is
the file at the description's image index in that order; the description is stripped and tokenized (cut to the
context); each picture is passed as opened (the transform converts to RGB); the pick is the first of
``argsort(-similarity)``, so among equal scores the first picture in that order wins (numpy's sort of ten numbers
keeps equal ones in order). A description is right when its pick is the target. Reported: accuracy over all
descriptions (``ImageCoDe``, the headline), over the video sets and over the static sets (a set is static when its
name holds ``open-images``, as the official script splits them), each the share of its descriptions (micro). The
field's widest comparison (vl_compo, Oh et al. 2024) reports the video and static accuracies and, as ImageCoDe's
number, the accuracy over all descriptions. The ten pictures of a set are one unit of resampling (`stats`).

A set whose folder is missing or holds other than ten pictures is not the benchmark's ten-way choice: an error,
or with ``skip_missing`` skipped and counted, as are sets with a missing or unreadable picture.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ...outcomes import reported, series
from ...records import file_digest
from ..checks import BenchmarkDataError, check_images, load_json_file, release_folder, text_of
from ..encoding import Encoder
from ..validity import MICRO, blind_block

LAYOUT = ("<root>/imagecode/data/valid_data.json ({image set: {image index: description}}: the repository's data/, "
          "its valid split) and <root>/imagecode/data/image-sets/<image set>/img<N>.jpg (ten per set: image-sets.zip "
          "unzipped in data/, as its README says); or the same files directly in <root>/imagecode/")
SETS = "image-sets"
PICTURES = 10
ALL = "ImageCoDe"  # the series of every description, which the overall accuracy reads
NUMBERED = re.compile(r"img(\d+)\.jpg")


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """Descriptions per kind (``video``, ``static``): (key, the set's pictures in the official order, the target's
    position, the description, the set); every picture checked before any model loads; ``digests``: each picture's
    content digest, which tells equal frames."""
    folder = release_folder(Path(root) / "imagecode", "data", "valid_data.json")
    path = folder / "valid_data.json"
    raw = load_json_file(path, LAYOUT)
    if not isinstance(raw, dict) or not raw:
        raise BenchmarkDataError(f"{path}: ImageCoDe's valid_data.json is a non-empty dict {{image set: {{image "
                                 f"index: description}}}}; expected layout: {LAYOUT}")
    data: dict[str, list[tuple]] = {"video": [], "static": []}
    unusable: dict[str, str] = {}
    for name, descriptions in raw.items():
        if not isinstance(descriptions, dict) or not descriptions:
            raise BenchmarkDataError(f"{path}: image set {name!r} has no {{image index: description}} dict; "
                                     f"expected layout: {LAYOUT}")
        pictures, problem = _pictures(folder / SETS / name, skip_missing)
        if problem:
            unusable[name] = problem
        for index, text in descriptions.items():
            text = text_of(text, path, f"image set {name!r}", f"the description of image {index!r}")
            if not (isinstance(index, str) and index.isascii() and index.isdigit() and int(index) < PICTURES):
                raise BenchmarkDataError(f"{path}: image set {name!r} has the image index {index!r}; an index is a "
                                         f"whole number from 0 to {PICTURES - 1} (the picture's place in the set)")
            kind = "static" if "open-images" in name else "video"
            data[kind].append((f"{name}/{index}", pictures, int(index), text.strip(), name))
    problems, sha256 = check_images([p for items in data.values() for it in items for p in it[1]], LAYOUT,
                                    skip_missing)
    unusable |= {p.parent.name: "unreadable" for p in problems}

    def usable(item) -> bool:
        return item[4] not in unusable

    return {"items": {k: [it for it in items if usable(it)] for k, items in data.items() if items},
            "skipped": {k: sum(not usable(it) for it in items) for k, items in data.items() if items},
            "files": {path: file_digest(path)} | sha256, "digests": sha256}


def _pictures(folder: Path, skip_missing: bool) -> tuple[list[Path], str]:
    """The set's pictures sorted by their number, as the official script orders them; with ``skip_missing`` a set
    that is not ten pictures comes back with the reason instead of an error."""
    files = sorted(folder.glob("*.jpg")) if folder.is_dir() else []
    odd = [p.name for p in files if not NUMBERED.fullmatch(p.name)]
    if odd:
        raise BenchmarkDataError(f"{folder}: {odd[0]} is not named img<N>.jpg, which the official order reads; "
                                 "use the release's image sets")
    files.sort(key=lambda p: int(NUMBERED.fullmatch(p.name).group(1)))
    if len(files) == PICTURES:
        return files, ""
    reason = f"{folder} holds {len(files)} pictures, not the set's {PICTURES}" if files else f"{folder} is missing"
    if not skip_missing:
        raise BenchmarkDataError(f"{reason}; expected layout: {LAYOUT}. Fix the data root, or pass --skip-missing "
                                 "to count and skip its descriptions.")
    return files, reason


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Accuracy over all descriptions (micro, labelled in ``averages``), the video and the static ones;
    ``outcomes`` per description (`stats`); no blind baseline: a description chooses among pictures
    (`validity.TEXT_TO_IMAGE`)."""
    answers, everything = {}, ([], [], [])
    for kind, items in data["items"].items():
        right = []
        if items:
            # two equal frames get one feature (`Encoder.images`: one per content), so they tie exactly and the
            # first of them is the pick whatever the batch size
            pictures = encoder.images([p for it in items for p in it[1]]).reshape(len(items), PICTURES, -1)
            texts = encoder.texts([it[3] for it in items])
            scores = (pictures * texts[:, None, :]).sum(-1).numpy()
            right = (scores.argmax(axis=1) == np.array([it[2] for it in items])).tolist()  # the first of equals
        keys, units = [it[0] for it in items], [it[4] for it in items]
        answers[kind] = series(keys, units, right)
        for whole, part in zip(everything, (keys, units, right)):
            whole.extend(part)
    answers[ALL] = series(*everything)
    outcomes = {"series": answers, "metrics": {name: {"mean": name} for name in answers}}
    metrics = reported(outcomes)
    pictures = len({p for items in data["items"].values() for it in items for p in it[1]})
    return {"metrics": metrics, "n": {k: len(v) for k, v in data["items"].items()}, "skipped": data["skipped"],
            "outcomes": outcomes, "averages": {ALL: MICRO},
            "blind": blind_block(None, pictures, not_applicable=list(metrics))}  # descriptions choose pictures


def item_chances(data: dict) -> dict:
    """Each description's chance (`chance.levels`): its picture first among the set's distinct pictures (by
    content) at random, 1/10 for ten distinct ones; 0 when a picture listed before it is the same (two equal frames
    tie, and the first of equals is the pick)."""
    digests = data["digests"]

    def chance(item) -> float:
        pictures = [digests[p] for p in item[1]]
        return 0.0 if pictures[item[2]] in pictures[: item[2]] else 1 / len(set(pictures))

    out = {kind: [(it[0], chance(it)) for it in items] for kind, items in data["items"].items()}
    return out | {ALL: [row for rows in out.values() for row in rows]}
