"""`concrete-jungle import`: each peer's training set, in its released format made here, comes out as a ConcreteBatch
with the same records (captions, negatives, pictures, where each came from), rejects with reasons, and reads,
resumes, trains and evaluates as a planted one."""

import hashlib
import io
import json
import pickle
import re
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from concrete_jungle.cli import main
from concrete_jungle.concretebatch import (
    IndexedConcreteBatch,
    encode_jpeg,
    index_shards,
    iter_records,
    read_member,
    shard_urls,
    unfinished,
)
from concrete_jungle.errors import DatasetError
from concrete_jungle.records import read_jsonl
from concrete_jungle.sources import SourceError
from concrete_jungle.sources.peers.object_npy import load_object_array

sys.path.insert(0, str(Path(__file__).parent))
import benchmark_fixtures  # noqa: E402

CAPTIONS = [  # (caption, swapped negatives) in NegCLIP's style
    ("A child holding a red umbrella and petting a yak.", ["A umbrella holding a red child and petting a yak .",
                                                          "A child petting a red umbrella and holding a yak ."]),
    ("A red helmet is on a yellow toilet in the dirt.", ["A yellow helmet is on a red toilet in the dirt ."]),
    ("A car with some surfboards in a field.", ["A field with some surfboards in a car ."]),
    ("A woman rides a bicycle on a road next to the river.", ["A bicycle rides a woman on a road next to the river ."]),
    ("A cat on the lid of a toilet looking at a dog.", ["A lid on the cat of a toilet looking at a dog ."]),
    ("A person sitting at a desk with a keyboard and monitor.",
     ["A desk sitting at a person with a keyboard and monitor ."]),
    ("A bath tub sitting next to a sink in a bathroom.", ["A sink tub sitting next to a bath in a bathroom ."]),
    ("Two dogs playing with a ball on the green grass.", ["Two balls playing with a dog on the green grass ."]),
    ("A man riding a horse along a sandy beach.", ["A horse riding a man along a sandy beach ."]),
    ("A plate of food next to a cup of coffee.", ["A cup of food next to a plate of coffee ."]),
]


def picture(path: Path, seed: int, kind: str = "JPEG", size=(32, 24)) -> bytes:
    """A noise picture saved at ``path``; its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(buf, format=kind)
    path.write_bytes(buf.getvalue())
    return buf.getvalue()


def stored(data: bytes) -> bytes:
    """What a ConcreteBatch holds for a picture given as ``data``: a JPEG's own bytes, anything else as a JPEG."""
    return data if data[:3] == b"\xff\xd8\xff" else encode_jpeg(Image.open(io.BytesIO(data)).convert("RGB"))


def members(out: Path) -> dict[str, dict]:
    """Every record's members as stored (raw bytes; the json parsed), by sample id."""
    out_records = {}
    for record in index_shards(shard_urls(out)):
        raw = {ext: read_member(loc) for ext, loc in record.items()}
        meta = json.loads(raw.pop("json"))
        out_records[meta["id"]] = raw | {"meta": meta}
    return out_records


def check_readable(out: Path, ok: int) -> None:
    """The set reads as a finished ConcreteBatch, streamed and by index, each record decoded."""
    assert unfinished(out) is None
    indexed = IndexedConcreteBatch([out])
    assert len(indexed) == ok == len(list(iter_records(out)))
    for i in range(len(indexed)):
        record = indexed[i]
        assert record["negatives"] and all(isinstance(n["concreteness"], float) for n in record["negatives"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"] == ok and (out / "config.yaml").read_text().startswith("import:")


def rejects(out: Path) -> dict[str, str]:
    return {r["id"]: r["reason"] for r in read_jsonl(out / "rejects.jsonl")}


# -- NegCLIP: its TSV as pandas writes it


def write_negclip(root: Path) -> tuple[Path, dict]:
    """NegCLIP's train_neg_clip.tsv (unnamed index, title, filepath, neg_caption, neg_image) over COCO-named
    images, with rows that cannot be read; the expected records by row."""
    lines, expected = ["\ttitle\tfilepath\tneg_caption\tneg_image"], {}
    for i, (caption, negatives) in enumerate(CAPTIONS):
        path = f"coco/val2014/COCO_val2014_{i:012d}.jpg"
        data = picture(root / path, i)
        hard = [(i + 1) % len(CAPTIONS), (i + 2) % len(CAPTIONS)]
        lines.append(f"{i}\t{caption}\t{path}\t{negatives!r}\t{hard!r}")
        expected[i] = {"caption": caption, "negatives": negatives, "image": data, "hard": hard, "line": i + 2}
    n = len(CAPTIONS)
    lines += [f"{n}\tA dog on a couch.\tcoco/val2014/nope.jpg\t['A couch on a dog .']\t[0]",  # no such picture
              f"{n + 1}\tA dog on a couch.\tcoco/val2014/COCO_val2014_000000000000.jpg\tnot a list\t[0]",
              f"{n + 2}\t\tcoco/val2014/COCO_val2014_000000000000.jpg\t['x']\t[0]",  # no caption
              f"{n + 3}\tA dog on a couch.\tcoco/val2014/COCO_val2014_000000000000.jpg\t['a dog on a couch']\t[0]"]
    path = root / "train_neg_clip.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path, expected


@pytest.fixture(scope="module")
def negclip(tmp_path_factory):
    root = tmp_path_factory.mktemp("negclip")
    tsv, expected = write_negclip(root)
    assert main(["import", "negclip", str(tsv), "--images", str(root), "--out", str(root / "cb"),
                 "--samples-per-shard", "4", "--no-progress"]) == 0
    return root, tsv, expected


def test_negclip_rows_come_out_as_records_with_caption_only_negatives_and_their_rows(negclip):
    root, tsv, expected = negclip
    out = members(root / "cb")
    assert sorted(out) == sorted(f"train_neg_clip.tsv#{i}" for i in expected)
    for i, want in expected.items():
        got = out[f"train_neg_clip.tsv#{i}"]
        meta = got["meta"]
        assert got["txt"].decode() == want["caption"] and got["jpg"] == want["image"]
        k = len(want["negatives"])
        captions = [got["neg.txt"]] + [got[f"neg{j}.txt"] for j in range(2, k + 1)]
        assert [c.decode() for c in captions] == want["negatives"] and f"neg{k + 1}.txt" not in got
        assert not any(ext.endswith(".jpg") and ext != "jpg" for ext in got)  # NegCLIP's negatives have no picture
        assert meta["source"] == {"file": str(tsv), "line": want["line"], "row": i}
        assert meta["fields"]["neg_image"] == want["hard"] and meta["fields"]["filepath"] == meta["image"]
        assert [n["kind"] for n in meta["negatives"]] == ["swap"] * k
        assert all(1 <= n["concreteness"] <= 5 and n["rating_from"] == "changed words" for n in meta["negatives"])
        assert meta["concreteness"] == meta["negatives"][0]["concreteness"]
    n = len(CAPTIONS)
    reasons = rejects(root / "cb")
    assert reasons[f"train_neg_clip.tsv#{n}"].startswith("missing image")
    assert reasons[f"train_neg_clip.tsv#{n + 1}"].startswith("neg_caption is not a Python list literal")
    assert reasons[f"train_neg_clip.tsv#{n + 2}"] == "no caption (title is empty)"
    assert reasons[f"train_neg_clip.tsv#{n + 3}"].startswith("the negative has the same words as the caption")
    check_readable(root / "cb", n)
    summary = json.loads((root / "cb" / "summary.json").read_text())
    assert summary["rejected"] == 4 and summary["negatives"] == sum(len(w["negatives"]) for w in expected.values())
    assert summary["negatives_with_picture"] == 0


def test_a_swap_is_rated_by_its_most_concrete_changed_keyword(negclip, ratings):
    root, _, _ = negclip
    meta = members(root / "cb")["train_neg_clip.tsv#0"]["meta"]
    first = meta["negatives"][0]  # "A umbrella holding a red child ...": child and umbrella swapped
    assert sorted(first["changed_words"]["removed"]) == ["child", "umbrella"]
    assert first["concreteness"] == max(ratings.get("child"), ratings.get("umbrella"))
    assert first["keyword"] in ("child", "umbrella") and first["category"] == "object"
    second = meta["negatives"][1]  # holding and petting swapped: two verbs
    assert second["concreteness"] == max(ratings.get("hold"), ratings.get("pet"))


def test_negclip_hard_images_become_negatives_with_the_rows_picture_and_caption(negclip, tmp_path):
    root, tsv, expected = negclip
    assert main(["import", "negclip", str(tsv), "--images", str(root), "--out", str(tmp_path / "cb"),
                 "--hard-images", "--no-progress"]) == 0
    got = members(tmp_path / "cb")["train_neg_clip.tsv#3"]
    k = len(expected[3]["negatives"])
    for offset, row in enumerate(expected[3]["hard"]):
        stem = f"neg{k + offset + 1}"
        assert got[f"{stem}.txt"].decode() == expected[row]["caption"]
        assert got[f"{stem}.jpg"] == expected[row]["image"]
    assert [n["kind"] for n in got["meta"]["negatives"]] == ["swap"] * k + ["hard-image"] * 2
    assert IndexedConcreteBatch([tmp_path / "cb"]).has_negative_pictures()


def test_a_blank_line_in_negclips_table_shifts_no_hard_image_reference(negclip, tmp_path):
    """pandas skips blank lines, so neg_image numbers the rows without them; counting them gave 6 of 10 records
    another row's picture and caption."""
    from concrete_jungle.sources.peers import PeerOptions, read_records

    _, tsv, expected = negclip
    lines = tsv.read_text().split("\n")
    spaced = tmp_path / "train_neg_clip.tsv"
    spaced.write_text("\n".join(lines[:3] + ["", "   "] + lines[3:]))
    records = {r.id: r for r in read_records("negclip", [spaced], PeerOptions(hard_images=True))}
    for i, want in expected.items():
        hard = [n for n in records[f"train_neg_clip.tsv#{i}"].negatives if n.kind == "hard-image"]
        assert [(n.caption, n.fields["row"]) for n in hard] == [(expected[j]["caption"], j) for j in want["hard"]]
    assert records["train_neg_clip.tsv#5"].source["line"] == expected[5]["line"] + 2


@pytest.mark.parametrize("header, row, message", [
    ("\ttitle\tfilepath\tneg_caption\ttitle", "0\tA cat.\ta.jpg\t['A dog.']\tx",
     "its header names the column 'title' twice"),
    ("\ttitle\tfilepath\tneg_caption\tneg_image", "0\tA cat.\ta.jpg\t['" + "x" * 140_000 + "']\t[0]",
     "line 2: not read as a table (field larger than field limit"),
], ids=["a column named twice", "a field over 128 KiB"])
def test_a_negclip_table_that_cannot_be_read_cell_by_cell_is_one_error_naming_it(tmp_path, header, row, message):
    from concrete_jungle.sources.peers import read_records

    (tmp_path / "t.tsv").write_text(f"{header}\n{row}\n")
    with pytest.raises(SourceError, match=f"^{tmp_path / 't.tsv'}.*{re.escape(message)}"):
        list(read_records("negclip", [tmp_path / "t.tsv"]))


def test_empty_captions_and_negatives_and_negatives_clip_cannot_tell_apart_are_rejects(tmp_path):
    """A blank caption, a NegCLIP ``['']`` and a negative changed only past CLIP's 77 tokens became ok records."""
    picture(tmp_path / "a.jpg", 0)
    long = "A dog on a couch " + " ".join(["and a small red ball"] * 16) + " near a cat."
    rows = [("0", "   ", ["A couch on a dog ."]), ("1", "A dog on a couch.", [""]),
            ("2", long, [long.replace("near a cat.", "near a bird.")]),
            ("3", "A dog on a couch.", ["A couch on a dog .", " "])]
    lines = [f"{i}\t{caption}\ta.jpg\t{negatives!r}\t[0]" for i, caption, negatives in rows]
    (tmp_path / "t.tsv").write_text("\n".join(["\ttitle\tfilepath\tneg_caption\tneg_image", *lines]) + "\n")
    assert main(["import", "negclip", str(tmp_path / "t.tsv"), "--images", str(tmp_path), "--out",
                 str(tmp_path / "cb"), "--no-progress"]) == 0
    reasons = rejects(tmp_path / "cb")
    assert reasons["t.tsv#0"] == "no caption (title is empty)"
    assert reasons["t.tsv#1"] == "empty negative caption ('')"
    assert reasons["t.tsv#2"].startswith("the negative reads as the caption in CLIP's first 77 tokens")
    kept = members(tmp_path / "cb")["t.tsv#3"]
    assert kept["neg.txt"] == b"A couch on a dog ." and "neg2.txt" not in kept
    assert kept["meta"]["dropped_negatives"][0]["reason"] == "empty negative caption (' ')"


def test_a_repeated_id_is_a_reject_naming_the_record_that_holds_it(tmp_path):
    picture(tmp_path / "a.jpg", 0)
    rows = [f"7\t{caption}\ta.jpg\t{negatives!r}\t[0]" for caption, negatives in CAPTIONS[:2]]
    (tmp_path / "t.tsv").write_text("\n".join(["\ttitle\tfilepath\tneg_caption\tneg_image", *rows]) + "\n")
    assert main(["import", "negclip", str(tmp_path / "t.tsv"), "--images", str(tmp_path), "--out",
                 str(tmp_path / "cb"), "--no-progress"]) == 0
    assert list(members(tmp_path / "cb")) == ["t.tsv#7"]
    assert rejects(tmp_path / "cb") == {"t.tsv#7": "duplicate id: 't.tsv#7' has its key"}


# -- TripletCLIP: TripletData shards


def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_tripletdata(root: Path) -> tuple[list[Path], dict]:
    """Two TripletData shards (KEY.image, KEY.neg_image, KEY.caption, KEY.neg_caption; one key with a JSON member of
    its own, a PNG negative, a key without its negative caption, a caption that is not UTF-8)."""
    expected, shards = {}, []
    for s in range(2):
        path = root / "shards" / f"shard-{s}.tar"
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w") as tar:
            for k in range(3):
                i = 3 * s + k
                caption, negatives = CAPTIONS[i]
                image = picture(root / "scratch" / f"{i}.jpg", 100 + i)
                neg = picture(root / "scratch" / f"{i}n.png", 200 + i, "PNG" if i == 1 else "JPEG")
                key = f"{i:08d}"
                add_member(tar, f"{key}.image", image)
                add_member(tar, f"{key}.neg_image", neg)
                add_member(tar, f"{key}.caption", caption.encode())
                add_member(tar, f"{key}.neg_caption", negatives[0].encode())
                if i == 2:
                    add_member(tar, f"{key}.json", json.dumps({"source": "cc3m", "score": 0.9}).encode())
                expected[f"shard-{s}.tar/{key}"] = {"caption": caption, "negative": negatives[0], "image": image,
                                                    "neg": neg, "key": key, "file": str(path)}
            if s == 1:
                add_member(tar, "broken01.image", image)
                add_member(tar, "broken01.neg_image", neg)
                add_member(tar, "broken01.caption", b"A cat.")
                add_member(tar, "latin1xx.image", image)
                add_member(tar, "latin1xx.neg_image", neg)
                add_member(tar, "latin1xx.caption", "Un caf\xe9.".encode("latin-1"))
                add_member(tar, "latin1xx.neg_caption", b"A tea.")
        shards.append(path)
    return shards, expected


def triplet_shard(path: Path, texts: dict[str, tuple[bytes, bytes]], more=()) -> Path:
    """A TripletData shard of one record per key (caption, negative caption; one picture for both), then the
    members ``more`` ((name, bytes) pairs)."""
    image = picture(path.with_suffix(".jpg"), 1)
    with tarfile.open(path, "w") as tar:
        for key, (caption, negative) in texts.items():
            for ext, data in (("image", image), ("neg_image", image), ("caption", caption),
                              ("neg_caption", negative)):
                add_member(tar, f"{key}.{ext}", data)
        for name, data in more:
            add_member(tar, name, data)
    return path


def test_tripletdata_blank_captions_and_negatives_are_not_records(tmp_path):
    from concrete_jungle.sources.peers import read_records

    shard = triplet_shard(tmp_path / "shard-0.tar", {"00000000": (b" \n", b"A cat."), "00000001": (b"A dog.", b"")})
    records = {r.id: r for r in read_records("tripletclip", [shard])}
    assert records["shard-0.tar/00000000"].error == "no caption (it is ' \\n')"
    assert records["shard-0.tar/00000001"].negatives[0].error == "empty negative caption ('')"


def test_tripletdata_members_whose_names_differ_only_in_case_are_a_reject_naming_both(tmp_path):
    from concrete_jungle.sources.peers import read_records

    shard = triplet_shard(tmp_path / "shard-0.tar", {"00000000": (b"A dog.", b"A cat."),
                                                     "00000001": (b"A dog.", b"A cat.")},
                          [("00000001.CAPTION", b"Another dog.")])
    records = {r.id: r for r in read_records("tripletclip", [shard])}
    assert records["shard-0.tar/00000000"].error is None
    assert records["shard-0.tar/00000001"].error == (
        "shard-0.tar holds '00000001.caption' and '00000001.CAPTION', whose names differ only in case: which is "
        "this sample's is not known; rename one")


def test_tripletdata_shards_come_out_with_both_pictures_and_their_keys(tmp_path):
    shards, expected = write_tripletdata(tmp_path)
    out = tmp_path / "cb"
    assert main(["import", "tripletclip", str(tmp_path / "shards" / "shard-{0..1}.tar"), "--out", str(out),
                 "--no-progress"]) == 0
    got = members(out)
    assert sorted(got) == sorted(expected)
    for sid, want in expected.items():
        record = got[sid]
        assert record["txt"].decode() == want["caption"] and record["neg.txt"].decode() == want["negative"]
        assert record["jpg"] == want["image"] and record["neg.jpg"] == stored(want["neg"])
        assert record["meta"]["source"] == {"file": want["file"], "key": want["key"]}
        assert record["meta"]["negatives"][0]["kind"] == "tripletdata"
    assert expected["shard-0.tar/00000001"]["neg"][:4] == b"\x89PNG"  # the PNG negative was stored as a JPEG
    assert got["shard-0.tar/00000002"]["meta"]["fields"]["json"] == {"source": "cc3m", "score": 0.9}
    reasons = rejects(out)
    assert reasons["shard-1.tar/broken01"] == "shard-1.tar holds no broken01.neg_caption"
    assert reasons["shard-1.tar/latin1xx"].startswith("latin1xx.caption in shard-1.tar is not UTF-8 text")
    check_readable(out, len(expected))
    assert main(["import", "tripletclip", str(shards[0]), "--images", str(tmp_path), "--out", str(tmp_path / "x"),
                 "--no-progress"]) == 2  # TripletData holds its pictures
    assert not (tmp_path / "x").exists()


# -- VisMin: its training JSON


def write_vismin(root: Path) -> tuple[Path, dict]:
    """VisMin's train.json: image paths from its data folder's root, PNG edits of several categories, a sample
    without a caption and an edit whose picture is missing."""
    samples, expected = [], {}
    categories = ["object", "attribute", "counting", "relation"]
    for i in range(6):
        caption, negatives = CAPTIONS[i]
        image_path = f"/coco/images/train2017/{i:012d}.jpg"
        data = picture(root / image_path.lstrip("/"), 300 + i)
        edits = []
        for j in range(1 + i % 2):
            edit_path = f"/edited/coco/{i}/{j}.png"
            edits.append({"edited_image_path": edit_path, "edited_caption": negatives[0] if j == 0 else
                          caption.replace("A ", "Three ", 1), "category": categories[(i + j) % 4],
                          "sub_category": "others", "input_phrase": "x", "edited_phrase": "y", "edit_id": f"{i}-{j}"})
            if not (i == 5 and j == 1):
                picture(root / edit_path.lstrip("/"), 400 + 10 * i + j, "PNG")
        samples.append({"image_id": str(i), "image_path": image_path, "caption": caption, "source": "coco",
                        "negatives": edits, **({"region_negatives": [{"caption": "a yak"}]} if i == 0 else {})})
        expected[f"train.json#{i}"] = {"caption": caption, "image": data, "edits": edits, "index": i}
    samples.append({"image_id": "9", "image_path": "/coco/images/train2017/x.jpg", "negatives": []})
    path = root / "train.json"
    path.write_text(json.dumps(samples))
    return path, expected


def test_vismin_samples_come_out_with_every_edit_its_category_and_fields(tmp_path):
    path, expected = write_vismin(tmp_path)
    out = tmp_path / "cb"
    assert main(["import", "vismin", str(path), "--images", str(tmp_path), "--out", str(out), "--no-progress"]) == 0
    got = members(out)
    assert sorted(got) == sorted(expected)
    for sid, want in expected.items():
        record, meta = got[sid], got[sid]["meta"]
        assert record["txt"].decode() == want["caption"] and record["jpg"] == want["image"]
        usable = [e for j, e in enumerate(want["edits"]) if not (want["index"] == 5 and j == 1)]
        for k, edit in enumerate(usable):
            stem = "neg" if k == 0 else f"neg{k + 1}"
            assert record[f"{stem}.txt"].decode() == edit["edited_caption"]
            png = (tmp_path / edit["edited_image_path"].lstrip("/")).read_bytes()
            assert record[f"{stem}.jpg"] == stored(png)
            assert meta["negatives"][k]["kind"] == edit["category"] and meta["negatives"][k]["fields"] == edit
        assert meta["source"] == {"file": str(path), "index": want["index"]}
        assert meta["fields"]["image_path"] == f"/coco/images/train2017/{want['index']:012d}.jpg"
    assert got["train.json#0"]["meta"]["fields"]["region_negatives"] == [{"caption": "a yak"}]
    dropped = got["train.json#5"]["meta"]["dropped_negatives"]
    assert len(dropped) == 1 and dropped[0]["reason"].startswith("missing image")
    assert rejects(out) == {"train.json#6": "no caption"}
    check_readable(out, 6)
    assert json.loads((out / "summary.json").read_text())["negatives_dropped_by_reason"] == {"missing image": 1}


# -- CE-CLIP: the .npy files its prepare_dataset.sh writes


def write_ceclip(root: Path) -> tuple[Path, dict]:
    """generated_data/coco_train/processed_dataset0.npy as CE-CLIP's dataset.py saves it (np.save of a list of
    dicts), over COCO train2014 names; one annotation with no valid rewrite."""
    items, expected = [], {}
    for i in range(5):
        caption, negatives = CAPTIONS[i]
        image_id = 1000 + i
        data = picture(root / "train2014" / f"COCO_train2014_{image_id:012d}.jpg", 500 + i)
        flags = [1, 1, 1, 1, 1] if i % 2 == 0 else [1, 0, 1, 1, 1]
        item = {"image_id": image_id, "id": 70000 + i, "caption": caption,
                "relation_aug_caption": negatives[0] if flags[1] else "###",
                "adj_aug_caption": caption.replace("A ", "A tiny ", 1), "noun_aug_caption": caption + " bird",
                "verb_aug_caption": caption.replace(" a ", " the ", 1), "valid_caption": flags}
        items.append(item)
        expected[f"processed_dataset0.npy#{i}"] = {"item": item, "image": data}
    items.append({"image_id": 1, "id": 1, "caption": "A cat.", "relation_aug_caption": "###", "adj_aug_caption": "x",
                  "noun_aug_caption": "y", "verb_aug_caption": "z", "valid_caption": [1, 0, 0, 0, 0]})
    path = root / "generated_data" / "coco_train" / "processed_dataset0.npy"
    path.parent.mkdir(parents=True)
    with open(path, "wb") as f:
        np.save(f, items)
    return path, expected


def test_ceclip_annotations_come_out_with_their_valid_rewrites_as_negatives(tmp_path):
    path, expected = write_ceclip(tmp_path)
    out = tmp_path / "cb"
    assert main(["import", "ce-clip", str(path.parent), "--images", str(tmp_path), "--out", str(out),
                 "--no-progress"]) == 0
    got = members(out)
    kinds = ("relation", "adj", "noun", "verb")
    for sid, want in expected.items():
        item, record = want["item"], got[sid]
        valid = [k for j, k in enumerate(kinds) if item["valid_caption"][j + 1]]
        assert record["txt"].decode() == item["caption"] and record["jpg"] == want["image"]
        captions = [record["neg.txt"]] + [record[f"neg{j}.txt"] for j in range(2, len(valid) + 1)]
        assert [c.decode() for c in captions] == [item[f"{k}_aug_caption"] for k in valid]
        assert [n["kind"] for n in record["meta"]["negatives"]] == valid
        assert record["meta"]["fields"] == item and record["meta"]["source"]["index"] == int(sid.split("#")[1])
        assert not any(ext.endswith(".jpg") and ext != "jpg" for ext in record)
    assert rejects(out) == {"processed_dataset0.npy#5": "no valid rewrite (valid_caption marks none of the four)"}
    check_readable(out, 5)


class Reduces:
    """Pickles as ``fn(*args)`` with ``state`` given to the result: how a crafted file names NumPy's parts."""

    def __init__(self, fn, args, state=None):
        self.fn, self.args, self.state = fn, args, state

    def __reduce__(self):
        return (self.fn, self.args) if self.state is None else (self.fn, self.args, self.state)


def dtype_of(name: str, state: tuple) -> Reduces:
    return Reduces(np.dtype, (name, False, True), state)


def object_array(items: list, dtype=None, shape=None) -> Reduces:
    """An array as numpy.save pickles one, with the dtype and shape the pickle gives (the object dtype's own
    state by default)."""
    from numpy._core.multiarray import _reconstruct

    dtype = dtype or dtype_of("O8", (3, "|", None, None, None, -1, -1, 63))
    return Reduces(_reconstruct, (np.ndarray, (0,), b"b"), (1, shape or (len(items),), dtype, False, items))


def npy_file(path: Path, payload, shape=(1,)) -> Path:
    """A version 1.0 .npy file of Python objects: the header np.save writes for ``shape``, then ``payload``
    pickled."""
    header = repr({"descr": "|O", "fortran_order": False, "shape": shape}).encode("latin-1")
    header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + pickle.dumps(payload, 3))
    return path


def crafted_npy(kind: str, path: Path) -> Path:
    """A .npy file made to run code or to make NumPy read memory the file chooses, of the ``kind`` named."""
    if kind == "object field with flags cleared":  # 8 file bytes would be copied into an object pointer
        field = (np.dtype(object), 0)
        return npy_file(path, object_array(
            b"\x41" * 8, dtype_of("V8", (3, "|", None, ("f",), {"f": field}, 8, 1, 0)), shape=(1,)))
    if kind == "runs code":
        import os

        return npy_file(path, object_array([Reduces(os.system, ("touch PWNED",))]))
    if kind == "negative itemsize":
        return npy_file(path, object_array([1], dtype_of("O8", (3, "|", None, None, None, -8, -1, 63))))
    if kind == "huge shape":
        return npy_file(path, object_array([{"caption": "x"}], shape=(2 ** 62,)), shape=(2 ** 62,))
    if kind == "nested object array":
        return npy_file(path, object_array([{"caption": "x", "valid_caption": object_array([1, 1, 1, 1, 1])}]))
    if kind == "numeric dtype state":  # the header says objects, the pickle an int64 array over raw bytes
        return npy_file(path, object_array(b"\x00" * 8, dtype_of("i8", (3, "<", None, None, None, -1, -1, 0))))
    if kind == "numeric array":
        np.save(path, np.arange(4))
        return path
    raise AssertionError(kind)


CRAFTED = ("object field with flags cleared", "runs code", "negative itemsize", "huge shape", "nested object array",
           "numeric dtype state", "numeric array")


@pytest.mark.parametrize("kind", CRAFTED)
def test_a_crafted_npy_file_is_refused_naming_it_and_nothing_of_it_runs(kind, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = crafted_npy(kind, tmp_path / "processed_dataset0.npy")
    with pytest.raises(SourceError, match=f"^{path}") as refused:
        load_object_array(path)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.slow
def test_a_crafted_npy_file_is_one_line_from_the_import_command_not_a_crash(tmp_path):
    from conftest import cli

    for kind in CRAFTED:
        folder = tmp_path / kind.replace(" ", "_")
        folder.mkdir()
        path = crafted_npy(kind, folder / "processed_dataset0.npy")
        done = cli("import", "ce-clip", path, "--images", tmp_path, "--out", folder / "cb", "--no-progress")
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and str(path) in lines[0], (kind, done.returncode, lines)
        assert "Traceback" not in done.stderr and not (folder / "cb").exists()


def test_an_npy_file_that_holds_no_array_is_refused(tmp_path):
    path = npy_file(tmp_path / "list.npy", [1])
    with pytest.raises(SourceError, match="does not hold a NumPy array"):
        load_object_array(path)


def test_an_npy_file_is_read_as_numpy_reads_it_numpy_scalars_made_python_numbers(tmp_path):
    items = [{"image_id": np.int64(7), "score": np.float32(0.5), "flag": np.bool_(True), "small": np.uint8(3),
              "caption": "A cat.", "valid_caption": [1, 0, 1, 1, 1], "pair": (1, "a")}, "text", None]
    np.save(tmp_path / "a.npy", np.array(items, dtype=object), allow_pickle=True)
    got = load_object_array(tmp_path / "a.npy")
    assert got == [{"image_id": 7, "score": 0.5, "flag": True, "small": 3, "caption": "A cat.",
                    "valid_caption": [1, 0, 1, 1, 1], "pair": [1, "a"]}, "text", None]
    assert [type(got[0][k]) for k in ("image_id", "score", "flag", "small")] == [int, float, bool, int]
    matrix = np.empty((2, 3), dtype=object)
    matrix[:] = [["a", "b", "c"], ["d", "e", "f"]]
    np.save(tmp_path / "m.npy", matrix, allow_pickle=True)
    assert load_object_array(tmp_path / "m.npy") == list("abcdef")


def test_two_inputs_of_one_name_in_two_folders_give_records_of_their_own(tmp_path):
    """Ids came from file names alone: every record of the second was a "duplicate id" of the first's."""
    picture(tmp_path / "a.jpg", 0)
    for folder, (caption, negatives) in (("one", CAPTIONS[0]), ("two", CAPTIONS[1])):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "train.tsv").write_text(
            f"\ttitle\tfilepath\tneg_caption\tneg_image\n0\t{caption}\ta.jpg\t{negatives!r}\t[0]\n")
    assert main(["import", "negclip", str(tmp_path / "one" / "train.tsv"), str(tmp_path / "two" / "train.tsv"),
                 "--images", str(tmp_path), "--out", str(tmp_path / "cb"), "--no-progress"]) == 0
    assert sorted(members(tmp_path / "cb")) == ["one/train.tsv#0", "two/train.tsv#0"]


def test_split_on_captions_that_have_no_splits_is_an_error_not_ignored(tmp_path, capsys):
    picture(tmp_path / "a.jpg", 0)
    (tmp_path / "c.jsonl").write_text(json.dumps({"id": "a", "caption": "A dog on a red couch.", "image": "a.jpg"}))
    assert main(["import", "coco-swaps", str(tmp_path / "c.jsonl"), "--images", str(tmp_path), "--split", "train",
                 "--out", str(tmp_path / "cb"), "--no-progress"]) == 2
    assert f"--split train chooses images of a Karpathy split file; {tmp_path / 'c.jsonl'} is jsonl" in \
        capsys.readouterr().err
    assert not (tmp_path / "cb").exists()


def test_a_large_array_of_non_records_stops_early_with_one_error(tmp_path, capsys):
    """2,000,000 numbers in a JSON list gave 2,000,000 rejects in 309 s."""
    (tmp_path / "train.json").write_text(json.dumps(list(range(200_000))))
    assert main(["import", "ce-clip", str(tmp_path / "train.json"), "--images", str(tmp_path), "--out",
                 str(tmp_path / "cb"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"the first 1000 records of {tmp_path / 'train.json'} are all unreadable (1000 × a record is a dict; " \
           "this one is a int): is it ce-clip's file" in err
    assert not (tmp_path / "cb" / "rejects.jsonl").exists()


def test_ceclip_takes_val2014_only_where_a_word_of_the_path_begins_with_val():
    from concrete_jungle.sources.peers.ceclip import image_name

    assert image_name(Path("data/interval/processed_dataset0.npy"), 7) == "train2014/COCO_train2014_000000000007.jpg"
    assert image_name(Path("generated_data/coco_val/processed_dataset0.npy"), 7).startswith("val2014/")
    assert image_name(Path("val2014/records.json"), 7).startswith("val2014/")


def test_json_nested_deeper_than_python_reads_is_one_error_or_a_reject_naming_it(tmp_path):
    from concrete_jungle.sources.peers import read_records

    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "train.json").write_text(deep)
    with pytest.raises(SourceError, match=f"^{tmp_path / 'train.json'}: not a JSON file"):
        list(read_records("vismin", [tmp_path / "train.json"]))
    (tmp_path / "train.jsonl").write_text(deep + "\n")
    [record] = read_records("ce-clip", [tmp_path / "train.jsonl"])
    assert record.id == "train.jsonl#1" and record.error.startswith("not a JSON line (maximum recursion depth")


# -- COCO captions with rule swaps made on the fly


@pytest.mark.system_packages
def test_coco_captions_get_rule_swaps_rated_by_their_keyword(tmp_path, ratings):
    captions = benchmark_fixtures.write_coco_captions(tmp_path / "captions_train2017.json")
    images = benchmark_fixtures.write_images(tmp_path / "train2017")
    out = tmp_path / "cb"
    assert main(["import", "coco-swaps", str(captions), "--images", str(images), "--out", str(out), "--swaps", "2",
                 "--no-progress"]) == 0
    data = json.loads(captions.read_text())
    by_image = {}
    for a in data["annotations"]:
        by_image.setdefault(str(a["image_id"]), []).append(a["caption"])
    got = members(out)
    assert set(got) | set(rejects(out)) == {f"{i}#{j}" for i, caps in by_image.items() for j in range(len(caps))}
    assert len(got) >= len(by_image)
    for sid, record in got.items():
        sample, j = sid.split("#")
        meta = record["meta"]
        assert record["txt"].decode() == by_image[sample][int(j)] and meta["source"] == {"sample": sample,
                                                                                          "caption": int(j)}
        assert record["jpg"] == (images / benchmark_fixtures.image_name(int(sample))).read_bytes()
        for k, negative in enumerate(meta["negatives"]):
            caption = record["neg.txt" if k == 0 else f"neg{k + 1}.txt"].decode()
            start, end = negative["span"]
            assert record["txt"].decode()[start:end] == negative["keyword"] != caption[start:end]
            assert negative["concreteness"] == ratings.get(negative["rated"])
        assert 1 <= len(meta["negatives"]) <= 2
    assert json.loads((out / "summary.json").read_text())["negatives_per_record"].get("2", 0) > 0
    check_readable(out, len(got))


# -- the folder: atomic, resumable, refused when it is someone else's


def test_an_import_stopped_before_its_summary_reads_unfinished_and_resumes_to_the_same_bytes(negclip, tmp_path):
    root, tsv, _ = negclip
    finished = root / "cb"
    out = tmp_path / "cb"
    args = ["import", "negclip", str(tsv), "--images", str(root), "--out", str(out), "--samples-per-shard", "4",
            "--no-progress"]
    assert main(args) == 0
    (out / "summary.json").unlink()  # killed after its shards, before its summary
    (out / "manifests" / "shard-000001.jsonl").unlink()  # ... and before shard 1's rows
    (out / "shard-000002.tar").write_bytes(b"cut")  # ... and with shard 2 damaged
    assert "import" in unfinished(out)
    with pytest.raises(DatasetError, match="is unfinished"):
        shard_urls(out)
    assert main(args) == 0

    def digests(folder):
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("shard-*.tar"))}

    assert digests(out) == digests(finished) and len(digests(out)) == 3
    assert read_jsonl(out / "manifest.jsonl") == read_jsonl(finished / "manifest.jsonl")
    assert json.loads((out / "summary.json").read_text())["shards_reused"] == 1


def test_import_refuses_other_settings_a_planted_folder_and_a_missing_image_folder(negclip, planted, tmp_path, capsys):
    root, tsv, _ = negclip
    base = ["import", "negclip", str(tsv), "--no-progress"]
    assert main([*base, "--images", str(root), "--out", str(root / "cb"), "--samples-per-shard", "5"]) == 2
    assert "imported with other settings (samples_per_shard" in capsys.readouterr().err
    assert main([*base, "--images", str(root), "--out", str(planted)]) == 2
    assert "which is not a file of a dataset `import` made" in capsys.readouterr().err
    assert main([*base, "--images", str(tmp_path), "--out", str(tmp_path / "new")]) == 2
    assert "none of the first" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "new")]) == 2
    assert "pass the folder they are relative to with --images" in capsys.readouterr().err
    assert main([*base, "--images", str(root), "--swaps", "2", "--out", str(tmp_path / "new")]) == 2
    assert "swaps: only for format coco-swaps" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_an_import_rerun_or_resumed_after_its_input_was_edited_is_refused_keeping_its_records(negclip, tmp_path,
                                                                                              capsys):
    """A finished shard was matched to the input by ids only: killed, edited and resumed, an import mixed old
    and new captions."""
    root, tsv, _ = negclip
    edited = tmp_path / "train_neg_clip.tsv"
    edited.write_bytes(tsv.read_bytes())
    out = tmp_path / "cb"
    args = ["import", "negclip", str(edited), "--images", str(root), "--out", str(out), "--samples-per-shard", "4",
            "--no-progress"]
    assert main(args) == 0
    before = {p.name: p.read_bytes() for p in out.glob("shard-*.tar")}
    edited.write_text(edited.read_text().replace("petting a yak", "feeding a yak"))
    assert main(args) == 2
    assert f"{out} was imported from other bytes of {edited}: the input changed since" in capsys.readouterr().err
    (out / "summary.json").unlink()  # killed before its end, then edited and resumed
    (out / "manifests" / "shard-000002.jsonl").unlink()
    assert main(args) == 2
    assert "was imported from other bytes of" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.glob("shard-*.tar")} == before and len(before) == 3


def test_an_import_whose_every_row_is_rejected_fails_counting_the_reasons_and_runs_again_once_fixed(tmp_path,
                                                                                                     capsys):
    picture(tmp_path / "a.jpg", 0)
    tsv = tmp_path / "t.tsv"
    header = "\ttitle\tfilepath\tneg_caption\tneg_image"
    out = tmp_path / "cb"
    args = ["import", "negclip", str(tsv), "--images", str(tmp_path), "--out", str(out), "--no-progress"]
    tsv.write_text(header + "\n")
    assert main(args) == 2
    assert "hold no negclip record (a header and no rows?)" in capsys.readouterr().err
    rows = [f"{i}\t{caption}\ta.jpg\t{[caption.lower()]!r}\t[0]" for i, (caption, _) in enumerate(CAPTIONS[:3])]
    tsv.write_text("\n".join([header, *rows, "3\t\ta.jpg\t['x']\t[0]"]) + "\n")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"every one of the 4 records of {tsv} was rejected (3 × the negative has the same words as the caption; " \
           f"1 × no caption; each with its reason in {out / 'rejects.jsonl'}); {out} is no dataset" in err
    assert len(rejects(out)) == 4 and "import" in unfinished(out)
    tsv.write_text("\n".join([header, *(f"{i}\t{c}\ta.jpg\t{n!r}\t[0]" for i, (c, n) in enumerate(CAPTIONS[:3]))])
                   + "\n")
    assert main(args) == 0
    check_readable(out, 3)


@pytest.mark.parametrize("args, message", [
    (["import", "negclip", "nope.tsv", "--images", ".", "--out", "cb"], "negclip input file not found: nope.tsv"),
    (["import", "vismin", "train.json", "--images", "nope", "--out", "cb"], "image directory not found: nope"),
    (["import", "ce-clip", "train.json", "--out", "cb"], "pass the folder they are relative to with --images"),
    (["import", "vismin", "train.json", "--images", ".", "--out", "cb", "--hard-images"],
     "hard-images: only for format negclip, not vismin"),
    (["import", "nope", "x", "--out", "cb"], "argument FORMAT: invalid choice: 'nope'"),
])
def test_bad_import_arguments_fail_at_once_before_heavy_imports_and_leave_nothing(tmp_path, args, message):
    from test_cli import run_probe, tree

    (tmp_path / "train.json").write_text("[]")
    before = tree(tmp_path)
    result = run_probe(args, tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in " ".join(result.stderr.split()), result.stderr
    assert "HEAVY []" in result.stdout, result.stdout  # torch, spaCy and open_clip were never imported
    assert tree(tmp_path) == before


# -- what the set is for: training and evaluation


def test_an_imported_set_trains_one_step_and_evaluates(negclip, data_root, tmp_path):
    from concrete_jungle.train.config import load_config
    from concrete_jungle.train.loop import train

    root, tsv, _ = negclip
    mixed = tmp_path / "mixed"  # caption-only swaps and hard images with pictures, K from 1 to 4
    assert main(["import", "negclip", str(tsv), "--images", str(root), "--out", str(mixed), "--hard-images",
                 "--no-progress"]) == 0
    config = load_config(None, [f"out={tmp_path / 'run'}", "model.name=cj-tiny", "model.pretrained=none",
                                "model.precision=fp32", f"data.concretebatch=['{mixed}']",
                                "data.workers=0", "batch_size=8", "steps=1", "save_every=1", "eval.every=1",
                                "eval.benchmarks=[sugarcrepe]", f"eval.data_root={data_root}", "eval.subset=3"])
    train(config, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 1 and np.isfinite(rows[0]["loss"])
    assert any(0 <= r.get("eval/sugarcrepe/M.Avg", -1) <= 1 for r in rows)


def test_ceclip_rewrites_sit_in_their_type_s_slot_and_its_thresholds_stay_per_type(tmp_path):
    """CE-CLIP keeps one threshold per rewrite type. Record 1 lacks its relation swap (type 0): its adjective
    rewrite must sit in slot 1 with record 0's, slot 0 empty, not packed into slot 0 where tau_0 would mix the
    relation swaps with it. Two steps of the loss on the batch the import and the data path make, against the
    thresholds and loss computed per type from the records themselves."""
    import torch
    import torch.nn.functional as F

    from concrete_jungle.loss import CEClipLoss
    from concrete_jungle.models import load_model
    from concrete_jungle.train.config import DataConfig
    from concrete_jungle.train.data import source_set
    from test_peer_losses import ce_clip_reference

    kinds = ("relation", "adj", "noun", "verb")
    items = []
    for i, has_relation in enumerate([True, False]):
        caption, negatives = CAPTIONS[i]
        picture(tmp_path / "train2014" / f"COCO_train2014_{2000 + i:012d}.jpg", 700 + i)
        items.append({"image_id": 2000 + i, "id": 80000 + i, "caption": caption,
                      "relation_aug_caption": negatives[0] if has_relation else "###",
                      "adj_aug_caption": caption.replace("A ", "A tiny ", 1), "noun_aug_caption": "###",
                      "verb_aug_caption": "###", "valid_caption": [1, int(has_relation), 1, 0, 0]})
    (tmp_path / "train.json").write_text(json.dumps(items))
    out = tmp_path / "cb"
    assert main(["import", "ce-clip", str(tmp_path / "train.json"), "--images", str(tmp_path), "--out", str(out),
                 "--no-progress"]) == 0
    clip = load_model("cj-tiny", "none")
    dataset = source_set(DataConfig(concretebatch=[str(out)], workers=0), clip)
    order = sorted(range(len(dataset)), key=lambda i: dataset.parts[0][i]["meta"]["fields"]["id"])
    image, _, tokens, negative_tokens, c, has_negative, *_ = torch.utils.data.default_collate(
        [dataset[i] for i in order])
    assert has_negative.tolist() == [[True, True, False, False], [False, True, False, False]]
    adjective = clip.tokenizer([items[1]["adj_aug_caption"]])[0]
    assert torch.equal(negative_tokens[1, 1], adjective) and not negative_tokens[1, 0].any()

    # features: the anchors' pictures at random, each caption the sum of its tokens' fixed random vectors
    g = torch.Generator().manual_seed(5)
    table = torch.randn(int(tokens.max().max()) + int(negative_tokens.max()) + 1, 16, generator=g,
                        dtype=torch.float64)
    def encode(rows):  # noqa: E306
        return F.normalize(torch.stack([table[r[r > 0]].sum(0) if r.any() else torch.zeros(16, dtype=torch.float64)
                                        for r in rows]), dim=1)
    n, k = has_negative.shape
    pictures = F.normalize(torch.randn(n, 16, generator=g, dtype=torch.float64) + encode(tokens), dim=1)
    images = torch.cat([pictures, torch.zeros(n * k, 16, dtype=torch.float64)])
    texts = torch.cat([encode(tokens), encode(negative_tokens.flatten(0, 1))])
    # the same rows from the records alone: type t of record a at row n + a K + t
    by_type = torch.zeros(n, k, dtype=torch.bool)
    reference_texts = texts.clone()
    for a, item in enumerate(items):
        for t, kind in enumerate(kinds):
            if item["valid_caption"][t + 1]:
                by_type[a, t] = True
                reference_texts[n + a * k + t] = encode(clip.tokenizer([item[f"{kind}_aug_caption"]]))[0]
    s = torch.tensor(10.0, dtype=torch.float64)
    loss = CEClipLoss()
    no_pictures = torch.zeros_like(has_negative)
    first = loss(images, texts, s, c, has_negative, no_pictures)
    with torch.no_grad():  # CE-CLIP's mean threshold of each type, over the records that have one
        positive = s * (pictures * reference_texts[:n]).sum(1)
        hard = s * (pictures[:, None] * reference_texts[n:].reshape(n, k, -1)).sum(-1)
        tau = [float((positive.mean() - hard[by_type[:, t], t].mean()).clamp(0, 10)) if by_type[:, t].any() else 0.0
               for t in range(k)]
    assert tau[0] > 0 and tau[1] > 0 and tau[2:] == [0.0, 0.0]
    torch.testing.assert_close(loss.thresholds, torch.tensor(tau, dtype=torch.float64), atol=1e-12, rtol=0)
    second = loss(images, texts, s, c, has_negative, no_pictures)
    options = loss.options
    torch.testing.assert_close(first, ce_clip_reference(pictures, reference_texts, s, by_type, [0.0] * k, options))
    torch.testing.assert_close(second, ce_clip_reference(images, reference_texts, s, by_type, tau, options))


@pytest.mark.slow
@pytest.mark.system_packages
def test_several_positives_per_picture_go_through_import_cache_training_and_evaluation(tmp_path, data_root):
    """COCO's captions of a picture as its positives (P = 3; some pictures have one, so the others are masked):
    the record holds them in order, the image cache serves the tokens the decoded path makes, and CLIC, which
    reads them, trains on the cache and evaluates."""
    import torch

    from concrete_jungle.models import load_model
    from concrete_jungle.train.config import DataConfig, LossConfig, load_config
    from concrete_jungle.train.data import TrainingSet, data_path, source_set
    from concrete_jungle.train.image_cache import build_cache
    from concrete_jungle.train.loop import train
    from concrete_jungle.train.objective import unused_data

    captions = benchmark_fixtures.write_coco_captions(tmp_path / "captions_train2017.json")
    data = json.loads(captions.read_text())
    for image in data["images"][::2]:  # every other picture gets two more captions
        first = next(a["caption"] for a in data["annotations"] if a["image_id"] == image["id"])
        data["annotations"] += [{"id": 10**6 + 2 * image["id"] + j, "image_id": image["id"], "caption": text}
                                for j, text in enumerate([f"{first} in a photo", f"a picture: {first}"])]
    captions.write_text(json.dumps(data))
    by_image = {}
    for a in data["annotations"]:
        by_image.setdefault(str(a["image_id"]), []).append(a["caption"])
    images = benchmark_fixtures.write_images(tmp_path / "train2017")
    out = tmp_path / "cb"
    assert main(["import", "coco-swaps", str(captions), "--images", str(images), "--out", str(out), "--positives",
                 "3", "--no-progress"]) == 0
    got = members(out)
    assert len(got) > 16 and set(got) <= set(by_image)
    for sid, record in got.items():
        stored = [record[m].decode() for m in ("txt", "pos2.txt", "pos3.txt") if m in record]
        assert stored == by_image[sid][:3]

    clip = load_model("cj-tiny", "none")
    decoded = TrainingSet([IndexedConcreteBatch([out])], clip.preprocess, clip.tokenizer)
    build_cache(out, clip, progress=False)
    cached = source_set(DataConfig(concretebatch=[str(out)], workers=0), clip)
    assert data_path(cached, 0)[0] == "cache" and decoded.p == cached.p == 3
    batch = cached.batch(list(range(len(cached))))
    items = torch.utils.data.default_collate([decoded[i] for i in range(len(decoded))])
    for field in (2, 3, 8, 9):  # tokens, negative tokens, the other positives' tokens and which exist
        assert torch.equal(batch[field], items[field])
    assert batch[9].sum(dim=1).tolist() == [len(by_image[decoded.parts[0][i]["meta"]["id"]]) - 1
                                            for i in range(len(decoded))]
    assert 0 < int(batch[9].sum()) < batch[9].numel()
    # a loss that reads one caption per picture is told it leaves the others; CLIC reads them
    assert "other positives (up to 2 a picture) are not encoded" in unused_data(LossConfig(name="negclip"), cached)[0]
    assert unused_data(LossConfig(name="clic"), cached) == []

    config = load_config(None, [f"out={tmp_path / 'run'}", "model.name=cj-tiny", "model.pretrained=none",
                                "model.precision=fp32", f"data.concretebatch=['{out}']", "loss.name=clic",
                                "data.workers=0", "batch_size=8", "steps=2", "save_every=2", "eval.every=2",
                                "eval.benchmarks=[sugarcrepe]", f"eval.data_root={data_root}", "eval.subset=3"])
    train(config, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2] and all(np.isfinite(r["loss"]) for r in rows
                                                                      if "loss" in r)
    assert any(0 <= r.get("eval/sugarcrepe/M.Avg", -1) <= 1 for r in rows)


@pytest.mark.system_packages
def test_clic_pairs_join_two_pictures_and_their_captions_with_a_swap_negative(tmp_path):
    """CLIC's batch as an import: each record two of the source's pictures side by side (224 x 224), p1 the two
    first captions joined, p2 the other order, then the pictures' next captions joined; one negative, a word
    swapped between the two captions; the same seed pairs the same way."""
    from concrete_jungle.sources.peers.clic import joined

    captions = benchmark_fixtures.write_coco_captions(tmp_path / "captions_train2017.json")
    data = json.loads(captions.read_text())
    data["annotations"] += [{"id": 10**6 + image["id"], "image_id": image["id"], "caption": f"a photo {image['id']}"}
                            for image in data["images"]]
    captions.write_text(json.dumps(data))
    by_image = {}
    for a in data["annotations"]:
        by_image.setdefault(str(a["image_id"]), []).append(a["caption"])
    images = benchmark_fixtures.write_images(tmp_path / "train2017")
    outs = [tmp_path / name for name in ("cb", "again")]
    for out in outs:
        assert main(["import", "clic", str(captions), "--images", str(images), "--out", str(out), "--positives", "3",
                     "--no-progress"]) == 0
    got = members(outs[0])
    assert got.keys() == members(outs[1]).keys() and len(got) >= 10
    assert any("odd number" in reason for reason in rejects(outs[0]).values())
    for sid, record in got.items():
        first, second = sid.split("+")
        c1, c2 = by_image[first][0], by_image[second][0]
        assert record["txt"].decode() == joined([c1, c2]) and record["pos2.txt"].decode() == joined([c2, c1])
        assert record["pos3.txt"].decode() in (joined([by_image[first][1], by_image[second][1]]),
                                               joined([by_image[second][1], by_image[first][1]]))
        assert Image.open(io.BytesIO(record["jpg"])).size == (224, 224)
        negative = record["neg.txt"].decode()
        assert negative not in (record["txt"].decode(), record["pos2.txt"].decode())
        assert set(negative.replace(".", " ").split()) <= set(record["txt"].decode().replace(".", " ").split())
