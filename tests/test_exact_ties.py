"""Equal pictures tie exactly: the shared image encoder gives every file of one content (and every equal crop of it)
one feature, whatever its place in a batch, so a benchmark's tie rule applies to duplicated pictures at any
``--batch-size`` (docs/method.md §7)."""

import json
import shutil

import pytest

from benchmark_fixtures import write_winoground
from concrete_jungle.evaluation.benchmarks import bivlc, winoground
from concrete_jungle.evaluation.encoding import Crop, Encoder
from test_image_choice_benchmarks import write_bivlc


@pytest.fixture
def twin_pictures(tmp_path):
    """Winoground examples whose two images are two files of one picture, the copies at other batch positions."""
    folder = tmp_path / "wino"
    write_winoground(folder, "a dog {} on a cat", "a cat {} on a dog", n=10)
    for i in range(10):  # image 1 of every example is a copy of image 0 of example 9 - i (another position)
        shutil.copyfile(folder / "images" / f"ex{9 - i}_img0.png", folder / "images" / f"ex{i}_img1.png")
    return winoground.load(folder)


@pytest.mark.parametrize("batch_size", [1, 3, 7])
def test_copies_of_one_picture_score_exactly_alike_at_any_batch_size(twin_pictures, clip, batch_size):
    encoder = Encoder(clip, batch_size=batch_size, progress=False)
    items = twin_pictures["items"]
    first = encoder.images([it["path_0"] for it in items])
    copies = encoder.images([it["path_1"] for it in items])
    assert all(first[9 - i].equal(copies[i]) for i in range(10))  # bitwise, not only close
    assert encoder.encoded["images"] == 10  # ten distinct contents in twenty files: each encoded once


def test_a_caption_between_two_files_of_one_picture_ties_at_any_batch_size(tmp_path, clip):
    rows = write_bivlc(tmp_path / "bivlc")
    for row in rows[6:]:  # the negative image a copy of the positive, in a file of its own at another position
        row["negative_image"] = f"copy{row['id']}.png"
        images = tmp_path / "bivlc" / "images"
        shutil.copyfile(images / row["image"], images / row["negative_image"])
    (tmp_path / "bivlc" / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = bivlc.load_root(tmp_path)
    results = [bivlc.evaluate(Encoder(clip, batch_size=b, progress=False), data) for b in (1, 3, 7)]
    for result in results:  # a caption cannot prefer one of two equal pictures: a tie, which the rule counts wrong
        for name in ("Tpos_2I", "Tneg_2I"):
            answer = result["outcomes"]["series"][name]
            answers = dict(zip(answer["keys"], answer["values"]))
            assert [answers[str(n)] for n in range(6, 12)] == [0.0] * 6, name
    assert results[0]["outcomes"] == results[1]["outcomes"] == results[2]["outcomes"]


def test_equal_crops_of_equal_files_share_one_feature_and_other_crops_do_not(tmp_path, clip):
    folder = tmp_path / "wino"
    write_winoground(folder, "a {}", "b {}", n=3)
    a, b, c = (folder / "images" / f"ex{i}_img0.png" for i in range(3))
    shutil.copyfile(a, b)
    encoder = Encoder(clip, batch_size=2, progress=False)
    rows = encoder.images([Crop(c), Crop(a, (1, 2, 20, 20)), Crop(b, (1, 2, 20, 20)), Crop(b), a, b])
    assert rows[1].equal(rows[2])  # one crop of one content, in two files
    assert not rows[1].equal(rows[3])  # another crop of the picture: another feature
    assert rows[4].equal(rows[5])  # the files as opened: one content
    assert encoder.encoded["images"] == 4  # c whole, the crop, b whole (read as RGB), a as opened
