"""Benchmark files in the official formats, written by the tests from captions of our own.

SugarCrepe (7 subsets: a dict keyed by item index, ``filename``, ``caption``, ``negative_caption``),
SugarCrepe++ (5 subsets: a list of ``id``, ``filename``, ``caption``, ``caption2``, ``negative_caption``), COCO
``captions_*.json`` and a Karpathy split file, with a noise JPEG under every file name. Some positives appear in
two subsets, as in the real benchmark, so de-duplication is exercised; one subset's keys are not contiguous.
`every_benchmark_writer` gives a fixture writer for every benchmark of the registry (the evaluation tests and
benchmarks/eval_suite_speed.py use it).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import open_clip
import torch
import torch.nn.functional as F
from PIL import Image

from concrete_jungle.models import ClipModel

# subset -> (image number, caption, negative caption)
SUGARCREPE = {
    "add_att": [
        (1, "A dog sleeping on a sofa next to a window", "A brown dog sleeping on a sofa next to a window"),
        (2, "A woman holding an umbrella on a street", "A woman holding a broken umbrella on a street"),
        (3, "Two horses standing in a field", "Two horses standing in a muddy field"),
        (4, "A man riding a bicycle down the road", "A man riding a red bicycle down the road"),
        (5, "A cake on a plate beside a cup of coffee", "A chocolate cake on a plate beside a cup of coffee"),
        (6, "A train passing under a bridge", "A train passing under a stone bridge"),
    ],
    "add_obj": [
        (7, "A cat sitting on a wooden chair", "A cat and a dog sitting on a wooden chair"),
        (8, "A boy flying a kite on the beach", "A boy flying a kite and a balloon on the beach"),
        (9, "A bowl of soup on a table", "A bowl of soup and a spoon on a table"),
        (10, "A bus parked in front of a building", "A bus and a truck parked in front of a building"),
        (1, "A dog sleeping on a sofa next to a window", "A dog and a pillow sleeping on a sofa next to a window"),
        (11, "A girl reading a book in the park", "A girl reading a book and a newspaper in the park"),
    ],
    "replace_att": [
        (12, "A red car parked on the side of the street", "A blue car parked on the side of the street"),
        (13, "A small white boat floating on the lake", "A small black boat floating on the lake"),
        (14, "An old man wearing a green jacket", "An old man wearing a yellow jacket"),
        (15, "A tall glass of orange juice on a counter", "A short glass of orange juice on a counter"),
        (3, "Two horses standing in a field", "Two horses standing in a snowy field"),
        (16, "A wet dog shaking water off its fur", "A dry dog shaking water off its fur"),
    ],
    "replace_obj": [
        (17, "A pizza sitting on top of a stove", "A pie sitting on top of a stove"),
        (18, "A giraffe eating leaves from a tree", "A zebra eating leaves from a tree"),
        (19, "A laptop on a desk beside a lamp", "A keyboard on a desk beside a lamp"),
        (4, "A man riding a bicycle down the road", "A man riding a motorcycle down the road"),
        (20, "A teddy bear sitting on a bed", "A teddy bear sitting on a couch"),
        (21, "A plate of broccoli and carrots", "A plate of broccoli and potatoes"),
    ],
    "replace_rel": [
        (22, "A cat sleeping under a table", "A cat sleeping on a table"),
        (23, "A lamp standing to the left of the sofa", "A lamp standing to the right of the sofa"),
        (24, "A child standing in front of a tree", "A child standing behind a tree"),
        (25, "A clock hanging above the door", "A clock hanging below the door"),
        (26, "A man throwing a frisbee to a dog", "A man catching a frisbee from a dog"),
        (27, "A bird perched on top of a fence", "A bird perched beneath a fence"),
    ],
    "swap_att": [
        (28, "A black cat and a white dog on the grass", "A white cat and a black dog on the grass"),
        (29, "A large elephant next to a small car", "A small elephant next to a large car"),
        (30, "A red apple beside a green pear", "A green apple beside a red pear"),
        (31, "A wooden table with a metal chair", "A metal table with a wooden chair"),
        (32, "A young woman with an old man", "An old woman with a young man"),
    ],
    "swap_obj": [
        (33, "A dog chasing a cat across the yard", "A cat chasing a dog across the yard"),
        (34, "A cup on a saucer next to a spoon", "A saucer on a cup next to a spoon"),
        (35, "A horse pulling a cart down the lane", "A cart pulling a horse down the lane"),
        (22, "A cat sleeping under a table", "A table sleeping under a cat"),
    ],
}
# keys of one subset are not contiguous, as in some official files
KEYS = {"swap_obj": ["0", "3", "17", "40"]}

# subset -> (image number, caption, paraphrase, negative caption)
SUGARCREPE_PP = {
    "replace_att": [(12, "A red car parked on the side of the street", "On the side of the street a red car is parked",
                     "A blue car parked on the side of the street"),
                    (13, "A small white boat floating on the lake", "A little white boat floats on the lake",
                     "A small black boat floating on the lake")],
    "replace_obj": [(17, "A pizza sitting on top of a stove", "On top of a stove sits a pizza",
                     "A pie sitting on top of a stove"),
                    (18, "A giraffe eating leaves from a tree", "Leaves from a tree are eaten by a giraffe",
                     "A zebra eating leaves from a tree")],
    "replace_rel": [(22, "A cat sleeping under a table", "Under a table a cat is sleeping",
                     "A cat sleeping on a table"),
                    (25, "A clock hanging above the door", "Above the door hangs a clock",
                     "A clock hanging below the door")],
    "swap_att": [(28, "A black cat and a white dog on the grass", "On the grass are a white dog and a black cat",
                  "A white cat and a black dog on the grass")],
    "swap_obj": [(33, "A dog chasing a cat across the yard", "Across the yard a dog chases a cat",
                  "A cat chasing a dog across the yard"),
                 (35, "A horse pulling a cart down the lane", "A cart is pulled down the lane by a horse",
                  "A cart pulling a horse down the lane")],
}


def image_name(number: int) -> str:
    return f"{number:012d}.jpg"  # COCO val2017 file names


def unique_positives() -> set[str]:
    return {caption for items in SUGARCREPE.values() for _, caption, _ in items}


def noise_image(path: Path, seed: int, size=(48, 40)) -> None:
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(path)


def write_winoground(folder: Path, caption_0: str, caption_1: str, n: int = 6) -> list[dict]:
    """A Winoground folder (``examples.jsonl`` + ``images/``) of ``n`` examples; the captions are formats of the
    example's number. Returns the rows."""
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        noise_image(folder / "images" / f"ex{i}_img0.png", 2 * i)
        noise_image(folder / "images" / f"ex{i}_img1.png", 2 * i + 1)
        rows.append({"id": i, "caption_0": caption_0.format(i), "caption_1": caption_1.format(i),
                     "image_0": f"ex{i}_img0", "image_1": f"ex{i}_img1",
                     "collapsed_tag": ["Object", "Relation"][i % 2]})
    (folder / "examples.jsonl").write_text("\n".join(map(json.dumps, rows)))
    return rows


def write_sugarcrepe(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for subset, items in SUGARCREPE.items():
        keys = KEYS.get(subset, [str(i) for i in range(len(items))])
        data = {k: {"filename": image_name(n), "caption": c, "negative_caption": neg} for k, (n, c, neg) in
                zip(keys, items)}
        (folder / f"{subset}.json").write_text(json.dumps(data, indent=1))
    return folder


def write_sugarcrepe_pp(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for subset, items in SUGARCREPE_PP.items():
        data = [{"id": i, "filename": image_name(n), "caption": c, "caption2": c2, "negative_caption": neg}
                for i, (n, c, c2, neg) in enumerate(items)]
        (folder / f"{subset}.json").write_text(json.dumps(data, indent=1))
    return folder


def write_images(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    numbers = {n for items in SUGARCREPE.values() for n, *_ in items}
    for n in sorted(numbers):
        noise_image(folder / image_name(n), n)
    return folder


def write_data_root(root: Path) -> Path:
    """``<root>/sugarcrepe``, ``<root>/sugarcrepe_pp`` and ``<root>/coco/val2017`` as `eval` expects them."""
    write_sugarcrepe(root / "sugarcrepe")
    write_sugarcrepe_pp(root / "sugarcrepe_pp")
    write_images(root / "coco" / "val2017")
    return root


def write_coco_captions(path: Path) -> Path:
    """COCO ``captions_*.json``: each image of the SugarCrepe fixtures with its positive captions."""
    by_image: dict[int, list[str]] = {}
    for items in SUGARCREPE.values():
        for n, caption, _ in items:
            by_image.setdefault(n, []).append(caption)
    images = [{"id": n, "file_name": image_name(n)} for n in sorted(by_image)]
    annotations = [{"id": 1000 * n + i, "image_id": n, "caption": c}
                   for n, caps in sorted(by_image.items()) for i, c in enumerate(dict.fromkeys(caps))]
    path.write_text(json.dumps({"images": images, "annotations": annotations}))
    return path


# ------------------------------------------------------------------------------------------------ models


class RandomFeatures(torch.nn.Module):
    """A model that scores every option at random: each distinct picture (its pixels) and each distinct text (its
    tokens) gets a random vector of its own, drawn from the seed, as a model's features are a function of them."""

    def __init__(self, seed: int, dim: int = 8):
        super().__init__()
        self.visual = torch.nn.Linear(1, 1)  # the Encoder takes its pictures in the dtype of this tower
        self.seed, self.dim = seed, dim

    def vector(self, kind: str, x: torch.Tensor) -> torch.Tensor:
        digest = hashlib.sha1(f"{self.seed}|{kind}|".encode() + x.numpy().tobytes()).digest()
        return torch.randn(self.dim, generator=torch.Generator().manual_seed(int.from_bytes(digest[:7], "little")))

    def encode_image(self, pixels):
        return torch.stack([self.vector("image", p) for p in pixels])

    def encode_text(self, tokens, normalize=False):
        return torch.stack([self.vector("text", t) for t in tokens])


class KeptTokens:
    """open_clip's CLIP tokenizer, each text tokenized once (many seeds read the same captions)."""

    def __init__(self):
        self.tokenizer, self.rows = open_clip.get_tokenizer("ViT-B-32"), {}

    def __call__(self, texts: list[str]) -> torch.Tensor:
        new = list(dict.fromkeys(t for t in texts if t not in self.rows))
        self.rows |= dict(zip(new, self.tokenizer(new))) if new else {}
        return torch.stack([self.rows[t] for t in texts])


CLIP_TOKENS = KeptTokens()


def random_features(seed: int, rgb_after_resize: bool = False) -> ClipModel:
    """`RandomFeatures` with a 6 x 6 preprocessing; ``rgb_after_resize``: converted to RGB after resizing, as
    open_clip's transform converts, so a picture converted before differs (palette, RGBA, LA, CMYK, 16-bit)."""
    def preprocess(im):
        im = im.resize((6, 6)).convert("RGB") if rgb_after_resize else im.convert("RGB").resize((6, 6))
        return torch.from_numpy(np.asarray(im, dtype=np.float32))

    return ClipModel(RandomFeatures(seed), preprocess, CLIP_TOKENS, {},
                     {"name": "random features", "pretrained": "none", "seed": seed,
                      "rgb_after_resize": rgb_after_resize})


def odd_mode_pictures(folder: Path, seed: int) -> list[Path]:
    """Pictures whose RGB pixels depend on when they are converted: palette, RGBA and LA with varying alpha, CMYK
    (JPEG) and 16-bit grey (PNG), one of each, from noise of ``seed``."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    rgb = Image.fromarray(rng.integers(0, 255, (37, 53, 3), dtype=np.uint8))
    alpha = Image.fromarray(rng.integers(0, 255, (37, 53), dtype=np.uint8))
    paths = {name: folder / f"{seed}-{name}" for name in ("palette.png", "rgba.png", "la.png", "cmyk.jpg",
                                                          "grey16.png")}
    rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=16).save(paths["palette.png"])
    rgba = rgb.convert("RGBA")
    rgba.putalpha(alpha)
    rgba.save(paths["rgba.png"])
    la = rgb.convert("LA")
    la.putalpha(alpha)
    la.save(paths["la.png"])
    rgb.convert("CMYK").save(paths["cmyk.jpg"])
    Image.fromarray(rng.integers(0, 65535, (37, 53), dtype=np.uint16)).save(paths["grey16.png"])
    return list(paths.values())


# captions of many lengths and kinds: with random weights a caption's score is mostly its own, the same against any
# picture, and only pairs of captions whose scores are close let the two pictures of an item prefer each its own
VARIED_CAPTIONS = ["x", "zzzz qqqq", "a red wall", "a dark night sky", "two", "seven horses running in the snow",
                   "blue", "a yellow and green striped shirt", "the car faces left", "one bird", "!!!",
                   "the the the the the the", "a photo", "12345 678", "purple",
                   "an old man with a hat on a bench in the park at night"]


def varied_picture(path, seed: int) -> None:
    """One of four kinds of picture (flat, noise, gradient, blocks), so that the pictures of an item differ
    widely; a ``.npy`` path is stored BGR, as EqBen stores its YouCook2 frames."""
    rng = np.random.default_rng(seed)
    kind = seed % 4
    if kind == 0:
        pixels = np.full((40, 48, 3), rng.integers(0, 255, 3), dtype=np.uint8)
    elif kind == 1:
        pixels = rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)
    elif kind == 2:
        pixels = (np.linspace(0, 255, 48)[None, :, None] * rng.random(3) + np.zeros((40, 1, 1))).astype(np.uint8)
    else:
        pixels = rng.integers(0, 255, (5, 6, 3), dtype=np.uint8).repeat(8, 0).repeat(8, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".npy":
        np.save(path, pixels[:, :, ::-1])  # stored BGR, as EqBen stores its YouCook2 frames
    else:
        Image.fromarray(pixels).save(path)


# ----------------------------------------------------------------------------------------- official transcriptions


@torch.no_grad()
def image_feature(clip: ClipModel, picture: Image.Image) -> torch.Tensor:
    """One picture's normalised feature, encoded alone, for a test's own transcription of an official rule."""
    return F.normalize(clip.model.encode_image(clip.preprocess(picture)[None]), dim=-1)[0]


@torch.no_grad()
def text_feature(clip: ClipModel, text: str) -> torch.Tensor:
    # each caption alone: in a batch the rows of two equal captions can round apart on some CPUs
    return F.normalize(clip.model.encode_text(clip.tokenizer([text])), dim=-1)[0]


def as_opened(path) -> Image.Image:
    """The file as opened (the official scripts that hand it to the transform, which converts it to RGB)."""
    with Image.open(path) as im:
        im.load()
        return im


def write_karpathy(path, images):
    path.write_text(json.dumps({"images": images}))


def write_retrieval(root):
    (root / "flickr30k" / "images").mkdir(parents=True)
    images = []
    for i in range(3):
        noise_image(root / "flickr30k" / "images" / f"{i}.jpg", 800 + i)
        images.append({"filename": f"{i}.jpg", "split": "test", "sentences": [{"raw": f"a photo {i}"}]})
    write_karpathy(root / "flickr30k" / "dataset_flickr30k.json", images)


def write_image_folders(root, splits=("train", "val"), classes=("red", "blue")):
    for split in splits:
        for c, name in enumerate(classes):
            (root / split / name).mkdir(parents=True)
            noise_image(root / split / name / "0.png", 900 + c)


def write_coco_probe(root):
    for split in ("train", "val"):
        (root / "coco" / f"{split}2017").mkdir(parents=True)
        noise_image(root / "coco" / f"{split}2017" / "0.jpg", 950)
        (root / "coco" / "annotations").mkdir(exist_ok=True)
        (root / "coco" / "annotations" / f"instances_{split}2017.json").write_text(json.dumps({
            "images": [{"id": 1, "file_name": "0.jpg"}], "categories": [{"id": 3}],
            "annotations": [{"id": 0, "image_id": 1, "category_id": 3}]}))


# the benchmarks whose fixtures the evaluation tests write themselves
WRITERS = {"winoground": lambda root: write_winoground(root / "winoground", "a dog {} on a cat", "a cat {} on a dog",
                                                       n=3),
           "retrieval": write_retrieval,
           "linear_probe": lambda root: write_image_folders(root / "imagenet"),
           "coco_probe": write_coco_probe,
           "vtab": lambda root: write_image_folders(root / "vtab" / "dtd", splits=("train",))}


def write_nested_zeroshot(root):
    """Two classes, each with a picture in a sub-folder of the same name (``more/nested.jpg``)."""
    from test_compositional_benchmarks import write_zeroshot

    folder = root / "zeroshot" / "mine"
    write_zeroshot(folder, names=("dog", "cat"))
    for c in range(2):
        (folder / "test" / f"class_{c}" / "more").mkdir()
        noise_image(folder / "test" / f"class_{c}" / "more" / "nested.jpg", 610 + c)


def every_benchmark_writer() -> dict:
    """A fixture writer of each benchmark in its release layout (name -> a function of its data root), from the
    test module of each benchmark (imported here: they import this module)."""
    from test_compositional_benchmarks import write_aro, write_coco_karpathy, write_valse, write_whatsup
    from test_counting_and_dense_caption_benchmarks import write_countbench, write_sdci
    from test_hard_positives import write_release
    from test_image_choice_benchmarks import write_bivlc, write_naturalbench, write_vismin
    from test_list_benchmarks import write_crepe, write_imagecode, write_spec, write_svo, write_vl_checklist
    from test_negation_and_binding_benchmarks import write_cola, write_negbench
    from test_pair_benchmarks import write_colorswap, write_eqben, write_eqben_full, write_mmvp

    return WRITERS | {
        "sugarcrepe": write_data_root, "sugarcrepe_pp": write_data_root, "aro": lambda root: write_aro(root / "aro"),
        "aro_order": write_coco_karpathy, "valse": lambda root: write_valse(root / "valse"),
        "whatsup": lambda root: write_whatsup(root / "whatsup", root / "coco" / "val2017"),
        "bivlc": lambda root: write_bivlc(root / "bivlc"), "vismin": lambda root: write_vismin(root / "vismin"),
        "naturalbench": lambda root: write_naturalbench(root / "naturalbench"), "mmvp_vlm": write_mmvp,
        "eqben": write_eqben, "eqben_full": write_eqben_full, "colorswap": write_colorswap,
        "imagecode": write_imagecode, "crepe": write_crepe,
        "vl_checklist": write_vl_checklist, "spec": write_spec, "svo_probes": write_svo,
        "countbench": lambda root: write_countbench(root / "countbench"), "sdci": write_sdci,
        "hard_positives": write_release, "negbench": write_negbench, "negbench_retrieval": write_negbench,
        "cola": write_cola, "coco_retrieval": write_coco_karpathy, "zeroshot": write_nested_zeroshot,
        "vtab": lambda root: write_image_folders(root / "vtab" / "dtd", splits=("train", "test"))}
