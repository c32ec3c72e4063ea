"""ColorSwap (Burapacheep et al. 2024): 1,000 examples of two generated images and two captions of the same words whose
colour words are swapped between objects ("a yellow umbrella and a white dress" / "a white umbrella and a yellow
dress"), in Winoground's schema; 700 for training, 300 for testing.

Data: the ColorSwap release (Top34051/colorswap, README; the Google Drive archive it links), unchanged: the test
split ``test.json``, a list of ``{id, caption_1, caption_2, image_1, image_2, image_source, caption_source}``
(caption k written for image k), and the images it names relative to its folder (``images/img_<id>_<k>.png``, from
``images.zip``). Only the test split is evaluated (``train.json``, when present, is training data).

The rule: Winoground's text, image and group scores with strict comparisons, so a tie is wrong (`two_by_two`), as
the paper reports for image-text matching models ("We follow the Winoground schema"; text, image and group score),
the mean over the test examples (one set, micro). The headline is the group score, Winoground's headline: the
abstract puts CLIP at 12 % on its "main ITM metric" without naming it here, and that metric could not be checked.
The paper's ITM evaluation is a Colab notebook linked from the README, not in the repository; it could not be read,
so the tie rule (strict, Winoground's) follows Winoground and was not checked against ColorSwap's own code. Each
image is converted to RGB before the transform (``Image.open(path).convert("RGB")``), as every other module reads
pictures: an RGBA or palette PNG passed as opened would be resized before it is converted (open_clip's transform
converts last), which gives other pixels where the alpha varies. The repository's ``vlm_eval.py`` (commit 4f2c9e4)
scores generative models' answers and confirms the three scores' definitions (text: both images answered with their
own caption; image: both captions with their own image; group: both). Examples that share an image are one unit
of resampling (`two_by_two.units`).
"""

from __future__ import annotations

from pathlib import Path

from ...records import file_digest
from .. import two_by_two
from ..checks import BenchmarkDataError, image_path, items_of, load_json_file, release_folder, text_of
from ..encoding import Crop, Encoder
from ..two_by_two import Pair

LAYOUT = ("<root>/colorswap/data/test.json (a list of {id, caption_1, caption_2, image_1, image_2, ...}: the "
          "ColorSwap archive extracted into data/, as its README says) and the images it names under "
          "<root>/colorswap/data/ (images/img_<id>_<k>.png, data/images.zip unzipped there); or the same files "
          "directly in <root>/colorswap/")
SPLIT = "test"
NAMES = {"text": "text", "image": "image", "group": "group"}


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """The test examples (`two_by_two.Pair`, each image a `Crop`: converted to RGB first); every item and image
    checked before any model loads."""
    folder = release_folder(Path(root) / "colorswap", "data", "test.json")
    path = folder / "test.json"
    raw = load_json_file(path, LAYOUT)
    if not isinstance(raw, list):
        raise BenchmarkDataError(f"{path}: ColorSwap's test.json is a list of examples; expected layout: {LAYOUT}")
    items, seen = [], {}
    for n, item in items_of(raw, path, dict, LAYOUT):
        key = two_by_two.key_of(item.get("id"), path, f"item {n}", "id", LAYOUT)
        if key in seen:
            raise BenchmarkDataError(f"{path}: id {key} is given to items {seen[key]} and {n}; each example needs an "
                                     "id of its own (results match items by it)")
        seen[key] = n
        image1, image2, caption1, caption2 = [text_of(item.get(f), path, f"item {n}", f)
                                              for f in ("image_1", "image_2", "caption_1", "caption_2")]
        items.append(Pair(key, (Crop(image_path(folder, image1)), Crop(image_path(folder, image2))),
                          (caption1, caption2), SPLIT))
    return two_by_two.checked({SPLIT: items}, {path: file_digest(path)}, LAYOUT, skip_missing)


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Text, image and group scores over the test examples and the blind baseline (`two_by_two.evaluate`)."""
    return two_by_two.evaluate(encoder, data, NAMES, per_category=False)


def item_chances(data: dict) -> dict:
    """Each example's chance of every score (`two_by_two.chances`)."""
    return two_by_two.item_chances(data["items"][SPLIT], NAMES)
