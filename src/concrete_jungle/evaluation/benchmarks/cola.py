"""COLA (Ray et al. 2023, "COLA: A Benchmark for Compositional Text-to-Image Retrieval"): its multi-object setting,
210 pairs of Visual Genome images with a caption each, the two captions naming objects and attributes bound the other
way round ("white rectangular pillow on top of large bed" / "pink large pillow on metal white iron bed"); caption k is
true of image k and not of the other.

Data: the repository's ``data/COLA_multiobjects_matching_benchmark.json`` (github.com/arijitray1993/COLA, commit
1fa52fb; the file as of 8aa4527), a list of ``[link to image 1, caption 1, link to image 2, caption 2]``,
each link ``https://cs-people.bu.edu/array/data/vg_gqa_images/<Visual Genome id>.jpg``; the pictures are those links
downloaded into ``images/`` beside ``data/`` (each file named as its link ends). Each picture is converted to RGB
before the transform, as every other module reads pictures (the repository gives no loader).

The rule is the repository's ``scripts/eval.py`` ``ColaMultiObjAcc`` (commit 1fa52fb): of the 2 x 2 scores,
``image_correct = im0_c0 > im1_c0 and im1_c1 > im0_c1`` (im_i_c_k: image i against caption k), that is each caption
scores its own image strictly above the other (a tie is wrong): Winoground's image score (`two_by_two`, text ->
image), the pair's one answer; the accuracy is the mean over the pairs (``multi_object``, the headline). Similarities
in fp32, each its own dot product. Pairs that share a picture are one unit of resampling (`two_by_two.units`); a
pair's key is its position in the file.

The single-object setting (``COLA_singleobjects_benchmark_{GQA,CLEVR,PACO}.json``: each image scored against 320
multi-attribute class names, the mean over classes of the average precision on each class's hard images,
``ColaSingleObjAP``) is not read: its files are too large to be stored in the repository read here, so their format
(the README's ``labels``/``data`` object against eval.py's list of two) and their image paths could not be checked.
"""

from __future__ import annotations

from pathlib import Path

from ...records import file_digest
from .. import two_by_two
from ..checks import BenchmarkDataError, image_path, items_of, load_json_file, release_folder, shown, text_of
from ..encoding import Crop, Encoder
from ..two_by_two import Pair

FILE = "COLA_multiobjects_matching_benchmark.json"
LAYOUT = (f"<root>/cola/data/{FILE} (a list of [link to image 1, caption 1, link to image 2, caption 2]: git clone "
          "https://github.com/arijitray1993/COLA cola) and <root>/cola/images/<id>.jpg (the links downloaded: each "
          f"file named as its link ends); or {FILE} directly in <root>/cola/")
SET = "multi_object"
NAMES = {"image": SET}  # ColaMultiObjAcc: each caption picks its own image


def picture_name(link: str, path: Path, n: int) -> str:
    """The file a link downloads to: the link's last part (``2390970.jpg``)."""
    name = link.rstrip("/").rsplit("/", 1)[-1]
    if not name or name in (".", ".."):
        raise BenchmarkDataError(f"{path}: item {n} links to {shown(link)}, which names no picture; use the released "
                                 "file unchanged")
    return name


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """The pairs (`two_by_two.Pair`: image k and caption k of each item, each image a `Crop`: converted to RGB
    first); every item and picture checked before any model loads."""
    cola = Path(root) / "cola"
    folder = release_folder(cola, "data", FILE)
    path = folder / FILE
    raw = load_json_file(path, LAYOUT)
    if not isinstance(raw, list):
        raise BenchmarkDataError(f"{path}: COLA's multi-object file is a list of items; expected layout: {LAYOUT}")
    items = []
    for n, item in items_of(raw, path, list, LAYOUT):
        if len(item) != 4:
            raise BenchmarkDataError(f"{path}: item {n} has {len(item)} entries, not 4 ([link to image 1, caption 1, "
                                     f"link to image 2, caption 2]); expected layout: {LAYOUT}")
        link1, caption1, link2, caption2 = [text_of(v, path, f"item {n}", field) for v, field in
                                            zip(item, ("image 1", "caption 1", "image 2", "caption 2"))]
        images = tuple(Crop(image_path(cola / "images", picture_name(link, path, n))) for link in (link1, link2))
        items.append(Pair(str(n), images, (caption1, caption2), SET))
    return two_by_two.checked({SET: items}, {path: file_digest(path)}, LAYOUT, skip_missing)


def evaluate(encoder: Encoder, data: dict) -> dict:
    """The multi-object accuracy (`two_by_two.evaluate`: a caption choosing between the images has no blind
    baseline)."""
    return two_by_two.evaluate(encoder, data, NAMES, per_category=False)


def item_chances(data: dict) -> dict:
    """Each pair's chance (`two_by_two.chances`): 1/4, or 0 when its two pictures are one file or its
    captions read alike."""
    return two_by_two.item_chances(data["items"][SET], NAMES)
