"""NaturalBench-Retrieval (Li et al. 2024, "NaturalBench: Evaluating Vision-Language Models on Natural Adversarial
Samples"): the retrieval form of NaturalBench for contrastive models, pairs of Flickr30k image-caption samples that
CLIP and BLIP-2 mismatch, human-verified, each scored as Winoground scores its items.

Data: ``NaturalBench-Retrieval.zip`` of the Hugging Face dataset ``BaiqiL/NaturalBench``, unzipped unchanged into
``<root>/naturalbench/``: ``NaturalBench-Retrieval/metadata.json`` (a list of items ``index``, ``image_0``,
``image_1``, ``caption_0``, ``caption_1``; item n has ``index`` n) and ``NaturalBench-Retrieval/images/``.

The official rule (the repository's README points to github.com/linzhiqiu/t2v_metrics for it: ``dataset.py``,
``NaturalBench_Retrieval`` with ``get_winoground_scores`` and ``get_winoground_acc``, commit 6ecb74f; the paper's
Table 7): each image opened and converted to RGB before the transform (``image_loader``), the score of an image and a
caption the dot product of their normalised features, caption k true of image k, and a strict ``>`` (a tie is
wrong): text = c0_i0 > c1_i0 and c1_i1 > c0_i1, image = c0_i0 > c0_i1 and c1_i1 > c1_i0, group = both
(`two_by_two`); each the mean over all items (the official code reports no category). Items that share an image are
one unit of resampling (`two_by_two.units`). The VQA form of NaturalBench (questions answered yes/no by generative
models) has no rule for a contrastive model and is not read.
"""

from __future__ import annotations

from pathlib import Path

from ...records import file_digest
from .. import two_by_two
from ..checks import BenchmarkDataError, image_path, items_of, load_json_file, text_of
from ..encoding import Crop, Encoder
from ..two_by_two import Pair

LAYOUT = ("<root>/naturalbench/NaturalBench-Retrieval/metadata.json (a list of index, image_0, image_1, caption_0, "
          "caption_1) and <root>/naturalbench/NaturalBench-Retrieval/images/ (NaturalBench-Retrieval.zip unzipped)")
NAMES = {"text": "text", "image": "image", "group": "group"}
SUBSET = "all"  # the official code's one category


def load(root: str | Path, skip_missing: bool = False) -> dict:
    """The items, every image checked before any model loads."""
    folder = Path(root) / "NaturalBench-Retrieval"
    path = folder / "metadata.json"
    raw = load_json_file(path, LAYOUT)
    if not isinstance(raw, list):
        raise BenchmarkDataError(f"{path}: NaturalBench-Retrieval's metadata is a list of items; expected layout: "
                                 f"{LAYOUT}")
    items = []
    for n, item in items_of(raw, path, dict, LAYOUT):
        # the official reader asserts it: an item is found by its position, and results match items by the index
        key = two_by_two.key_of(item.get("index"), path, f"item {n}", "index", LAYOUT)
        if key != str(n):
            raise BenchmarkDataError(f"{path}: item {n} has index {key}; the official reader requires item n to have "
                                     "index n (use the file as released)")
        texts = [text_of(item.get(f"caption_{k}"), path, f"item {n}", f"caption_{k}") for k in (0, 1)]
        images = [Crop(image_path(folder / "images", text_of(item.get(f"image_{k}"), path, f"item {n}",
                                                             f"image_{k}"))) for k in (0, 1)]
        items.append(Pair(key, tuple(images), tuple(texts), SUBSET))
    return two_by_two.checked({SUBSET: items}, {path: file_digest(path)}, LAYOUT, skip_missing)


def load_root(root: Path, skip_missing: bool = False) -> dict:
    """`load` of ``<root>/naturalbench``."""
    return load(Path(root) / "naturalbench", skip_missing=skip_missing)


def evaluate(encoder: Encoder, data: dict) -> dict:
    """Text, image and group scores over all items and the blind baseline (`two_by_two.evaluate`)."""
    return two_by_two.evaluate(encoder, data, NAMES, per_category=False)


def item_chances(data: dict) -> dict:
    """Each item's chance of every score (`two_by_two.chances`)."""
    return two_by_two.item_chances(data["items"][SUBSET], NAMES)
