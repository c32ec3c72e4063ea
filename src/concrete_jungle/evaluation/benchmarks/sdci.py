"""sDCI, the summarized Densely Captioned Images (Urbanek et al. 2024, "A Picture is Worth More Than 77 Text Tokens:
Evaluating CLIP-Style Models on Dense Captions", CVPR): each test photo of DCI and its large sub-crops, each with an
LLM summary of its dense caption (under 77 tokens) and LLM-written negatives.

Data: the release as DCI's download leaves it (github.com/facebookresearch/DCI, commit 8326c97,
``dataset/densely_captioned_images/dataset/scripts/download.py`` extracts ``dci.tar.gz`` into DCI's data folder, here
``<root>/sdci``): ``densely_captioned_images/splits.json`` (``{"train"|"valid"|"test": [<file name>, ...]}``) and
``densely_captioned_images/complete/<file name>`` (one JSON per photo: ``image``, ``mask_data``, ``summaries``,
``negatives``, ``clip_scores``), with the photos of SA-1B's ``sa_000138.tar`` extracted into
``densely_captioned_images/photos/`` as its README asks.

The rule: the repository's CLIP evaluation (``scripts/run_clip_dense_cap_eval.py`` ``run_dense_cap_on_model`` and
``run_dense_cap_test_on_model``; ``impl.py`` ``get_summarized_dataset_with_settings``, ``get_negative_by_strategy``,
``DenseCaptionedDataset``; ``dense_image.py`` ``filter_masks_by_size``, ``get_subimage``; ``loss.py``
``get_pooled_groups``). The test split's photos in ``splits.json``'s order, each giving its items in order: the whole
photo (key ``base``) and, with sub-crops, every mask of ``mask_data`` (in its order) whose bounds are at least 224 x 224
(key ``m-<idx>-sc``), cut with 15% padding each side (``int(side * 0.15)``) within the photo. An item's caption is its
summary (the first, where a list); its negative per test. A photo is left out whole, as the official loader's ``try``
leaves it (counted and named in a note), without ``summaries`` or ``negatives`` (or, with sub-crops, with negatives
for its base alone), or where one of its items lacks its summary, its negatives, its ``clip_scores`` (read for every
test) or the negative its test takes. The four tests:

- ``all_swaps``: photo and sub-crops, the first ``swaps`` negative;
- ``all_swaps_pick5``: the same items with five summaries each, those with fewer left out; the README's "first 5
  captions" (the script draws 5 of them at random without a seed, so its number varies from run to run);
- ``base_swaps``: the photos alone, the first ``swaps`` negative;
- ``all_hardest``: photo and sub-crops, the negative of every kind with the highest CLIP score in ``clip_scores``
  (kinds in their order, the last of equal scores: a stable sort, its last).

Each test reports two scores, fp32 similarities with strict comparisons as the official ones:

- ``SCM`` (its "CLIP Correct"): items in batches of 8 in order (the last smaller), each picture against each item of
  its batch: another item's highest caption score, its own lowest; right when its own is the batch's highest, the
  first of equals (``torch.max``: an earlier item wins a tie);
- ``Neg`` (its "neg_correct"): right when the picture scores its own lowest caption strictly above its negative.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from ...outcomes import reported, series
from ...records import file_digest
from ..chance import below_chance, pick_chance
from ..checks import BenchmarkDataError, check_images, image_path, load_json_file, shown, text_of
from ..encoding import Crop, Encoder
from ..validity import blind, blind_block, mean_picture

LAYOUT = ("<root>/sdci/densely_captioned_images/{splits.json,complete/<file>.json} (DCI's dci.tar.gz extracted in "
          "<root>/sdci) + <root>/sdci/densely_captioned_images/photos/<image> (SA-1B's sa_000138.tar extracted there)")


class Test(NamedTuple):
    subcrops: bool  # the sub-crops beside the whole photo
    hardest: bool  # the negative of highest CLIP score of every kind, else the first swaps negative
    captions: int  # summaries per item (the first ones)


TESTS = {"all_swaps": Test(True, False, 1), "all_swaps_pick5": Test(True, False, 5),
         "base_swaps": Test(False, False, 1), "all_hardest": Test(True, True, 1)}
BATCH = 8  # the official DataLoader's batch: SCM compares the items of one batch
SIDE = 224  # a sub-crop's least width and height
PAD = 0.15


class Entry(NamedTuple):
    key: str  # <file name>/<item key>, one item of one photo
    unit: str  # the photo's file name: its items are resampled together
    image: Crop
    captions: tuple[str, ...]
    negative: str


class Dropped(Exception):
    """Why the official loader leaves a photo out."""


def masks_of(record: dict, path: Path) -> list[tuple[str, tuple[int, int, int, int]]]:
    """``(item key, bounds as left, top, right, bottom)`` of every mask of at least `SIDE` x `SIDE`, in order."""
    masks = record.get("mask_data")
    if not isinstance(masks, dict):
        raise BenchmarkDataError(f"{path} has mask_data {shown(masks)}, not an object of masks; expected layout: "
                                 f"{LAYOUT}")
    out = []
    for name, mask in masks.items():
        try:
            bounds = mask["bounds"]
            corners = (bounds["topLeft"]["x"], bounds["topLeft"]["y"], bounds["bottomRight"]["x"],
                       bounds["bottomRight"]["y"])
            idx = mask["idx"]
        except (KeyError, TypeError):
            raise BenchmarkDataError(f"{path}: mask {name!r} needs idx and bounds {{topLeft: {{x, y}}, bottomRight: "
                                     f"{{x, y}}}}; expected layout: {LAYOUT}") from None
        if any(isinstance(c, bool) or not isinstance(c, int) for c in corners):
            raise BenchmarkDataError(f"{path}: mask {name!r} has bounds {shown(bounds)}, not whole pixels")
        if corners[2] - corners[0] >= SIDE and corners[3] - corners[1] >= SIDE:
            out.append((f"m-{idx}-sc", corners))
    return out


def padded(corners: tuple[int, int, int, int], size: tuple[int, int]) -> tuple[int, int, int, int]:
    """``get_subimage``'s crop as (x, y, width, height): each side padded by `PAD` of the mask's side, within the
    photo of ``size``."""
    left, top, right, bottom = corners
    dx, dy = int((right - left) * PAD), int((bottom - top) * PAD)
    x0, y0 = max(left - dx, 0), max(top - dy, 0)
    x1, y1 = min(right + dx, size[0]), min(bottom + dy, size[1])
    return x0, y0, x1 - x0, y1 - y0


def negative_of(record: dict, key: str, hardest: bool) -> str:
    """``get_negative_by_strategy``: the first swaps negative, or of every kind's negatives (kinds in order) the one
    of highest CLIP score, the last of equals."""
    negatives = record["negatives"].get(key)
    scores = (record.get("clip_scores") or {}).get(key)
    if not isinstance(negatives, dict) or not negatives:
        raise Dropped(f"no negatives for {key}")
    if not isinstance(scores, dict):
        raise Dropped(f"no clip_scores for {key}")
    if not hardest:
        if not negatives.get("swaps"):
            raise Dropped(f"no swaps negative for {key}")
        return negatives["swaps"][0]
    candidates = [(f"{kind}_{i}", text) for kind, texts in negatives.items() for i, text in enumerate(texts)]
    if not candidates or any(name not in scores for name, _ in candidates):
        raise Dropped(f"a negative of {key} without its clip score")
    best = max(scores[name] for name, _ in candidates)
    return [text for name, text in candidates if scores[name] == best][-1]


def photo_entries(record: dict, path: Path, photo: Path, size: tuple[int, int], test: Test) -> list[Entry]:
    """The items in ``test`` of the photo ``path`` describes, or `Dropped` naming why the official loader leaves the
    photo out; items with fewer summaries than the test takes are left out, as ``DenseCaptionedDataset`` leaves
    them."""
    summaries, negatives = record.get("summaries"), record.get("negatives")
    if summaries is None or negatives is None:
        raise Dropped("no summaries" if summaries is None else "no negatives")
    if len(negatives) == 1 and test.subcrops:
        raise Dropped("negatives for its base alone")
    items = [("base", None)] + ([(key, padded(c, size)) for key, c in masks_of(record, path)] if test.subcrops else [])
    out = []
    for key, box in items:
        summary = summaries.get(key)
        if summary is None or summary == []:
            raise Dropped(f"no summary for {key}")
        negative = negative_of(record, key, test.hardest)
        captions = (summary,) if isinstance(summary, str) else tuple(summary)
        for text in (*captions, negative):
            text_of(text, path, f"item {key}", "a summary or negative")
        if test.captions > 1 and (isinstance(summary, str) or len(captions) < test.captions):
            continue  # too few captions for the bag: the dataset leaves the item out
        out.append(Entry(f"{path.name}/{key}", path.name, Crop(photo, box), captions[:test.captions], negative))
    return out


def load(folder: str | Path, skip_missing: bool = False) -> dict:
    """Items per test (every photo checked before any model loads), with the photos the official loader leaves out
    counted (``filtered``) and named in notes; ``skipped``: items whose photo is missing or unreadable."""
    from PIL import Image

    folder = Path(folder)
    splits_path = folder / "splits.json"
    splits = load_json_file(splits_path, LAYOUT)
    sources = splits.get("test") if isinstance(splits, dict) else None
    if not isinstance(sources, list) or not sources or not all(isinstance(s, str) for s in sources):
        raise BenchmarkDataError(f"{splits_path} needs a non-empty list of file names under \"test\"; expected layout: "
                                 f"{LAYOUT}")
    repeated = next((s for n, s in enumerate(sources) if s in sources[:n]), None)
    if repeated is not None:
        raise BenchmarkDataError(f"{splits_path}: {repeated!r} is in the test split twice; each photo once (results "
                                 "match items by key)")
    records, files = {}, {splits_path: file_digest(splits_path)}
    for source in sources:
        path = image_path(folder / "complete", source)
        record = load_json_file(path, LAYOUT)
        if not isinstance(record, dict):
            raise BenchmarkDataError(f"{path} is not an object; expected layout: {LAYOUT}")
        text_of(record.get("image"), path, "the photo", "image")
        records[path] = image_path(folder / "photos", record["image"]), record
        files[path] = file_digest(path)
    problems, sha256 = check_images([photo for photo, _ in records.values()], LAYOUT, skip_missing)
    sizes = {}
    for photo, _ in records.values():
        if photo not in problems:
            with Image.open(photo) as im:
                sizes[photo] = im.size
    items, skipped, filtered, notes = {}, {}, {}, []
    for name, test in TESTS.items():
        items[name], skipped[name], dropped = [], 0, []
        for path, (photo, record) in records.items():
            try:
                entries = photo_entries(record, path, photo, sizes.get(photo, (0, 0)), test)
            except Dropped as why:
                dropped.append(f"{path.name}: {why}")
                continue
            if photo in problems:
                skipped[name] += len(entries)
            else:
                items[name].extend(entries)
        filtered[name] = len(dropped)
        if dropped:
            notes.append(f"{name}: {len(dropped)} test photo(s) left out, as the official loader leaves them out "
                         f"({'; '.join(dropped[:3])}{'; ...' if len(dropped) > 3 else ''})")
    return {"items": items, "skipped": skipped, "filtered": filtered, "notes": notes, "files": files | sha256}


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """`load` of ``<root>/sdci/densely_captioned_images``."""
    return load(Path(root) / "sdci" / "densely_captioned_images", skip_missing=skip_missing)


def scm(pictures: torch.Tensor, bags: torch.Tensor) -> np.ndarray:
    """Subcrop-caption matching within batches of `BATCH` items: right when a picture's lowest own caption score is
    above every other item's highest, the first of equals winning."""
    right = np.zeros(len(pictures), dtype=bool)
    for start in range(0, len(pictures), BATCH):
        p, b = pictures[start: start + BATCH], bags[start: start + BATCH]
        scores = (p[:, None, None, :] * b[None]).sum(-1).numpy()  # picture x item x caption, each its own product
        table, rows = scores.max(-1), np.arange(len(p))  # another item: its highest caption
        table[rows, rows] = scores[rows, rows].min(-1)  # its own: the lowest
        right[start: start + BATCH] = table.argmax(axis=1) == rows
    return right


def neg(pictures: torch.Tensor, bags: torch.Tensor, negatives: torch.Tensor) -> np.ndarray:
    """The lowest own caption strictly above the negative (all scored in one product, so equal texts tie)."""
    scores = (pictures[:, None, :] * torch.cat([bags, negatives[:, None, :]], 1)).sum(-1).numpy()
    return scores[:, :-1].min(-1) > scores[:, -1]


def outcomes_of(data: dict, answers: dict[str, dict[str, np.ndarray]]) -> dict:
    """Series ``<test>/SCM`` and ``<test>/Neg`` of each test's answers (``answers[test][score]``)."""
    out = {}
    for test, entries in data["items"].items():
        for score, right in answers[test].items():
            out[f"{test}/{score}"] = series([e.key for e in entries], [e.unit for e in entries], right.tolist())
    return {"series": out, "metrics": {name: {"mean": name} for name in out}}


def evaluate(encoder: Encoder, data: dict) -> dict:
    """SCM and Neg of every test, ``outcomes`` per item (`stats`) and the blind baseline (``blind``: every picture
    replaced by the mean picture of all the tests' pictures, decided by the same comparisons)."""
    features, names = {}, []
    for test, entries in data["items"].items():
        if not entries:
            continue
        k = len(entries[0].captions)
        bags = encoder.texts([c for e in entries for c in e.captions]).reshape(len(entries), k, -1)
        negatives = encoder.texts([e.negative for e in entries])
        features[test] = (encoder.images([e.image for e in entries]), bags, negatives)
        names += [e.image for e in entries]
    none = {"SCM": np.zeros(0, dtype=bool), "Neg": np.zeros(0, dtype=bool)}
    answers = {t: dict(none) for t in data["items"]}
    blind_answers = {t: dict(none) for t in data["items"]}
    if features:
        mean = mean_picture(torch.cat([f[0] for f in features.values()]), names)
        for test, (pictures, bags, negatives) in features.items():
            answers[test] = {"SCM": scm(pictures, bags), "Neg": neg(pictures, bags, negatives)}
            blind_answers[test] = {"SCM": blind(scm, mean, len(bags), bags),
                                   "Neg": blind(neg, mean, len(bags), bags, negatives)}
    outcomes = outcomes_of(data, answers)
    return {"metrics": reported(outcomes), "n": {t: len(v) for t, v in data["items"].items()},
            "skipped": data["skipped"], "filtered": data["filtered"], "outcomes": outcomes,
            "blind": blind_block(outcomes_of(data, blind_answers), len(set(names)))}


def item_chances(data: dict) -> dict:
    """Each item's chance (`chance`): Neg, its negative strictly below all its captions (`below_chance`); SCM of one
    caption an item, its caption picked among its batch's, the first of equals (`pick_chance`). SCM of five captions
    has no level here."""
    out = {}
    for test, entries in data["items"].items():
        out[f"{test}/Neg"] = [(e.key, below_chance(list(e.captions), e.negative)) for e in entries]
        if TESTS[test].captions == 1:
            batches = [[e.captions[0] for e in entries[at: at + BATCH]] for at in range(0, len(entries), BATCH)]
            out[f"{test}/SCM"] = [(e.key, pick_chance(batches[n // BATCH], n % BATCH)) for n, e in enumerate(entries)]
    return out
