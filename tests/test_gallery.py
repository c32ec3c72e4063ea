"""The ConcreteBatch gallery: its page (cards, filters, sorting, labels, thumbnails, escaping), also opened in
headless Chromium."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from concrete_jungle.analysis.gallery import word_diff
from concrete_jungle.cli import main
from concrete_jungle.concretebatch import SHARD_PATTERN, ShardWriter, encode_jpeg
from conftest import ARTIFACTS
from plant_fixtures import make_dataset

RECORDS = [  # (id, caption, negative, keyword, category, concreteness)
    ("a1", "A red car parked on the street", "A blue car parked on the street", "red", "attribute", 4.24),
    ("a2", "A cat sitting under a table", "A cat sitting on a table", "under", "relation", 3.45),
    ("a3", "A dog running in the park", "A horse running in the park", "dog", "object", 4.85),
    ("a4", "A man holding a cup <script>window.pwned = 1</script>",
     "A man holding a mug <script>window.pwned = 1</script>",
     "cup", "object", 4.9),
    ("a5", "A lamp to the left of the sofa", "A lamp to the right of the sofa", "left", "relation", 3.7),
]


def make_concretebatch(root: Path, name: str, categories: dict[str, str] | None = None) -> Path:
    """A ConcreteBatch written here with the real shard writer, one caption carrying a <script> tag;
    ``categories`` gives some ids another category (datasets of the same anchors differ in it)."""
    out = root / name
    out.mkdir(parents=True)
    writer = ShardWriter(out / SHARD_PATTERN.format(0))
    rng = np.random.default_rng(0)
    for i, (sid, cap, neg, kw, cat, c) in enumerate(RECORDS):
        img = Image.fromarray(rng.integers(0, 255, (40, 60, 3), dtype=np.uint8))
        start = cap.index(kw)
        cat = (categories or {}).get(sid, cat)
        meta = {"id": sid, "keyword": kw, "span": [start, start + len(kw)], "category": cat, "concreteness": c,
                "mode": "hc", "neg_image_is_anchor": False}
        writer.write(sid, encode_jpeg(img), cap, encode_jpeg(img.rotate(90 * (i + 1))), neg, meta)
    writer.commit()
    return out


K_RECORDS = [  # (id, caption, [(negative caption, has a picture, keyword, concreteness), ...]), as imported sets hold
    ("k1", "A dog on a red sofa", [("A dog on a blue sofa", False, "red", 4.1)]),
    ("k2", "A cup left of a plate", [("A cup right of a plate", True, "left", 3.2),
                                     ("A plate left of a cup", False, "cup", 4.9)]),
    ("k3", "A man riding a horse", [("A horse riding a man", False, "horse", 4.8),
                                    ("A man riding a bike", True, "horse", 4.8),
                                    ("A woman riding a horse", False, "man", 4.6)]),
    ("k4", "A tree beside a house", [("A tree beside a car", True, "house", 4.9)]),
]


def make_k_negative_batch(root: Path, name: str) -> Path:
    """A ConcreteBatch written here with the real shard writer whose records hold one to three negatives, some of
    them captions without a picture (as `concrete-jungle import` writes NegCLIP's or CE-CLIP's); every picture a
    colour of its own, so that no negative's picture can pass for its anchor's."""
    out = root / name
    out.mkdir(parents=True)
    writer = ShardWriter(out / SHARD_PATTERN.format(0))
    for i, (sid, cap, negatives) in enumerate(K_RECORDS):
        pictures = [encode_jpeg(Image.new("RGB", (48, 32), (60 * i, 40 * k, 200 - 50 * k))) for k in range(4)]
        entries = [{"keyword": kw, "category": "object", "concreteness": c} for _, _, kw, c in negatives]
        meta = {"id": sid, "keyword": entries[0]["keyword"], "category": "object",
                "concreteness": entries[0]["concreteness"], "neg_image_is_anchor": False, "negatives": entries}
        given = [(pictures[k + 1] if has else None, text) for k, (text, has, _, _) in enumerate(negatives)]
        writer.write(sid, pictures[0], cap, *given[0], meta, given[1:])
    writer.commit()
    return out


def test_word_diff_escapes_and_marks_only_the_change():
    left, right = word_diff("A red <b>car</b>", "A blue <b>car</b>")
    assert left == 'A <mark class="del">red</mark> &lt;b&gt;car&lt;/b&gt;'
    assert right == 'A <mark class="ins">blue</mark> &lt;b&gt;car&lt;/b&gt;'


def test_word_diff_marks_the_changed_word_and_not_the_punctuation_beside_it():
    left, right = word_diff("A man holding a cup; a dog's bowl.", "A man holding a mug; a cat's bowl.")
    assert left == 'A man holding a <mark class="del">cup</mark>; a <mark class="del">dog&#x27;s</mark> bowl.'
    assert right == 'A man holding a <mark class="ins">mug</mark>; a <mark class="ins">cat&#x27;s</mark> bowl.'
    # punctuation that changes is marked, alone; a phrase that changes is one mark, the space before it outside
    assert word_diff("A cat (sleeping).", "A cat (sleeping)!") == ('A cat (sleeping)<mark class="del">.</mark>',
                                                                   'A cat (sleeping)<mark class="ins">!</mark>')
    assert word_diff("A red car,  parked", "A small blue car, parked")[1] == \
        'A <mark class="ins">small blue</mark> car, parked'


def sort_box(page: str) -> list[tuple[str, str, str]]:
    """The options of the page's sort box: (value, selected or "", label)."""
    box = re.search(r'<select id="sort">(.*?)</select>', page, re.S).group(1)
    return re.findall(r'<option value="([^"]*)"( selected)?>([^<]*)</option>', box)


@pytest.mark.parametrize("sort, written", [("concreteness", "concreteness ↓"),
                                           ("category", "category, then concreteness ↓"),
                                           ("random", "random (seed 3)")])
def test_the_sort_box_shows_the_order_the_page_was_written_in(tmp_path, sort, written):
    data = make_concretebatch(tmp_path, "D_hc")
    assert main(["gallery", str(data), "--out", str(tmp_path / "g"), "--sort", sort, "--seed", "3"]) == 0
    options = sort_box((tmp_path / "g" / "index.html").read_text())
    # selected: the order of the rows as written (value "" restores it); then the orders the script can sort into
    assert options[0] == ("", " selected", written)
    assert [label for _, _, label in options[1:]] == [label for label in ("concreteness ↓", "concreteness ↑")
                                                      if label != written]
    assert all(not selected for _, selected, _ in options[1:]) and "as written" not in str(options)


def test_gallery_files_and_escaping(tmp_path):
    data = make_concretebatch(tmp_path, "D_hc")
    assert main(["gallery", str(data), "--out", str(tmp_path / "g")]) == 0
    page = (tmp_path / "g" / "index.html").read_text()
    assert "<script>window.pwned" not in page and "&lt;script&gt;window.pwned" in page
    assert page.count('class="row"') == 5 and len(list((tmp_path / "g" / "thumbs").glob("*.jpg"))) == 10
    assert "cdn" not in page.lower() and "http" not in page
    assert main(["gallery", str(data), "--out", str(tmp_path / "f"), "--filter", "category=relation"]) == 0
    assert (tmp_path / "f" / "index.html").read_text().count('class="row"') == 2
    other = make_concretebatch(tmp_path, "D_lc", {"a1": "relation"})  # an anchor whose D_lc card is a relation
    assert main(["gallery", str(data), str(other), "--out", str(tmp_path / "h"), "--filter", "category=relation"]) == 0
    assert (tmp_path / "h" / "index.html").read_text().count('class="row"') == 3


@pytest.mark.system_packages
def test_gallery_in_headless_chromium(tmp_path, chromium):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    # in D_lc the anchor a1's keyword is a relation (in D_hc an attribute): filtering by category must find it
    hc, lc = make_concretebatch(tmp_path, "D_hc"), make_concretebatch(tmp_path, "D_lc", {"a1": "relation"})
    assert main(["gallery", str(hc), str(lc), "--out", str(tmp_path / "g")]) == 0
    chromium.get((tmp_path / "g" / "index.html").as_uri())
    visible = lambda: [r for r in chromium.find_elements(By.CSS_SELECTOR, ".row") if r.is_displayed()]  # noqa: E731
    assert len(visible()) == 5
    assert Select(chromium.find_element(By.ID, "sort")).first_selected_option.text == "concreteness ↓"
    assert len(chromium.find_elements(By.CSS_SELECTOR, ".card")) == 10  # two datasets side by side
    assert chromium.find_elements(By.CSS_SELECTOR, "mark.ins") and chromium.find_elements(By.CSS_SELECTOR, "mark.del")
    assert all(img.get_property("naturalWidth") > 0 for img in chromium.find_elements(By.TAG_NAME, "img"))
    # the <script> caption is text on the page and never ran
    assert "<script>window.pwned = 1</script>" in chromium.find_element(By.TAG_NAME, "main").text
    assert chromium.execute_script("return window.pwned === undefined")
    Select(chromium.find_element(By.ID, "category")).select_by_value("relation")
    assert len(visible()) == 3 and chromium.find_element(By.ID, "shown").text == "3"
    row = next(r for r in visible() if r.find_element(By.TAG_NAME, "h2").text == "a1")
    hc_card, lc_card = row.find_elements(By.CSS_SELECTOR, ".card")
    assert "dim" in hc_card.get_attribute("class") and "dim" not in lc_card.get_attribute("class")
    Select(chromium.find_element(By.ID, "category")).select_by_value("")
    chromium.find_element(By.ID, "search").send_keys("horse")
    assert len(visible()) == 1
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    chromium.find_element(By.ID, "search").clear()
    chromium.find_element(By.ID, "search").send_keys(" ")
    assert chromium.save_screenshot(str(ARTIFACTS / "gallery.png"))


def test_thumbnails_shrink_large_images_and_enlarge_tiny_ones_crisply(tmp_path):
    import io

    import numpy as np
    from PIL import Image

    from concrete_jungle.analysis.gallery import THUMB, thumbnail

    def png(size, colour):
        buf = io.BytesIO()
        Image.new("RGB", size, colour).save(buf, "PNG")
        return buf.getvalue()

    thumbnail(png((1024, 512), (200, 10, 10)), "big", tmp_path / "big.jpg")
    assert Image.open(tmp_path / "big.jpg").size == (THUMB, THUMB // 2)
    tiny = Image.new("RGB", (64, 64), (255, 255, 255))
    tiny.paste((0, 0, 0), (0, 0, 32, 64))  # left half black: a sharp edge
    buf = io.BytesIO()
    tiny.save(buf, "PNG")
    thumbnail(buf.getvalue(), "tiny", tmp_path / "tiny.jpg")
    out = np.asarray(Image.open(tmp_path / "tiny.jpg").convert("L"), np.float32)
    assert out.shape == (THUMB, THUMB)
    assert out[:, : THUMB // 2 - 4].mean() < 20 and out[:, THUMB // 2 + 4:].mean() > 235  # no blur across the edge


def test_gallery_filters_sorts_labels_and_cleans_like_a_user_expects(planted, tmp_path, capsys):
    from concrete_jungle.analysis.gallery import build_gallery

    with pytest.raises(ValueError, match="no record has category 'relations'; the datasets hold .*object"):
        build_gallery([planted], tmp_path / "g", filters={"category": "relations"})
    assert not (tmp_path / "g").exists()
    stats = tmp_path / "stats.json"
    ids = [json.loads(line)["id"] for line in (planted / "manifest.jsonl").read_text().splitlines()]
    stats.write_text(json.dumps({"pairs": {"cb": {i: {"concreteness": 4.5, "clip_l": 0.91, "i2t": True}
                                                  for i in ids}}}))
    page = build_gallery([planted], tmp_path / "g", sample=40, stats=stats).read_text()
    assert "text-text cosine (t, t&#x27;)" in page and "<dd>yes</dd>" in page and "clip_l" not in page
    assert page.count("<dt>concreteness</dt>") == page.count('class="card"')  # once a card
    assert page.count('<div class="side">anchor</div>') == page.count('<div class="side">hard negative</div>') > 0
    row_cs = [float(x.split('"')[0]) for x in page.split('<section class="row" tabindex="0" data-c="')[1:]]
    assert row_cs == sorted(row_cs, reverse=True)
    assert len(list((tmp_path / "g" / "thumbs").glob("*.jpg"))) == 2 * len(row_cs)
    build_gallery([planted], tmp_path / "g", sample=5, stats=stats, overwrite=True)
    assert len(list((tmp_path / "g" / "thumbs").glob("*.jpg"))) == 10  # the larger page's thumbnails are gone


def test_gallery_rows_sort_by_the_mean_concreteness_of_their_cards(tmp_path):
    from concrete_jungle.analysis.gallery import build_gallery

    captions, images = make_dataset(tmp_path, 30, image_size=16)
    for mode in ("hc", "lc"):
        assert main(["plant", "--captions", str(captions), "--images", str(images), "--out", str(tmp_path / mode),
                     "--mode", mode, "--no-progress"]) == 0
    page = build_gallery([tmp_path / "hc", tmp_path / "lc"], tmp_path / "g").read_text()
    rows = re.findall(r'<section class="row" tabindex="0" data-c="([\d.]+)"(.*?)</section>', page, re.S)
    row_c = [float(c) for c, _ in rows]
    cards = [[float(c) for c in re.findall(r'<article class="card" data-category="\w+" data-c="([\d.]+)"', body)]
             for _, body in rows]
    assert row_c == sorted(row_c, reverse=True) and all(len(cs) == 2 for cs in cards)
    assert all(abs(c - sum(cs) / 2) < 2e-3 for c, cs in zip(row_c, cards))
    assert any(cs[0] != cs[1] for cs in cards)  # the datasets of one anchor differ: the first alone would not do


def test_gallery_refuses_a_folder_of_other_files_and_replaces_its_own_page_only_when_told(tmp_path, capsys):
    data = make_concretebatch(tmp_path, "D_hc")
    site = tmp_path / "site"  # a web site's folder, say
    site.mkdir()
    (site / "index.html").write_text("<h1>my home page</h1>\n")
    for extra in ([], ["--overwrite"]):  # --overwrite replaces a gallery page, never a file of someone else's
        assert main(["gallery", str(data), "--out", str(site), *extra]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"--out {site} holds {site / 'index.html'}, which `concrete-jungle gallery` did not write" in err
        assert sorted(p.name for p in site.iterdir()) == ["index.html"]
        assert (site / "index.html").read_text() == "<h1>my home page</h1>\n"

    out = tmp_path / "g"
    assert main(["gallery", str(data), "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert main(["gallery", str(data), "--out", str(out), "--sample", "2"]) == 2
    assert f"--out {out} holds a gallery page already" in " ".join(capsys.readouterr().err.split())
    assert (out / "index.html").read_text() == page
    (out / "thumbs" / "notes.txt").write_text("mine\n")
    assert main(["gallery", str(data), "--out", str(out), "--sample", "2", "--overwrite"]) == 2
    assert f"holds {out / 'thumbs' / 'notes.txt'}" in " ".join(capsys.readouterr().err.split())
    (out / "thumbs" / "notes.txt").unlink()
    assert main(["gallery", str(data), "--out", str(out), "--sample", "2", "--overwrite"]) == 0
    assert (out / "index.html").read_text().count('class="row"') == 2


def test_every_negative_of_a_record_is_shown_and_one_without_a_picture_is_its_caption_alone(tmp_path):
    data = make_k_negative_batch(tmp_path, "K")
    out = tmp_path / "g"
    assert main(["gallery", str(data), "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    rows = dict(re.findall(r'<h2>(\w+)</h2><div class="cards">(.*?)</section>', page, re.S))
    assert sorted(rows) == [sid for sid, _, _ in K_RECORDS]
    for i, (sid, caption, negatives) in enumerate(K_RECORDS):
        row, k = rows[sid], len(negatives)
        sides = re.findall(r'<div class="side">([^<]*)</div>', row)
        assert sides == ["anchor"] + (["hard negative"] if k == 1 else [f"hard negative {j} of {k}"
                                                                         for j in range(1, k + 1)])
        figures = row.split("<figure>")[2:]  # one per negative, in order
        assert [re.search(r'<figcaption class="negative">(.*?)</figcaption>', f).group(1) for f in figures] == \
            [word_diff(caption, text)[1] for text, _, _, _ in negatives]
        for j, (figure, (text, has_picture, _, _)) in enumerate(zip(figures, negatives)):
            src = re.findall(r'<img src="thumbs/([^"]+)"', figure)
            assert ('class="nopic"' in figure) == (not has_picture) and len(src) == has_picture
            if has_picture:  # its own picture, not the anchor's: each picture is a colour of its own
                thumb = np.asarray(Image.open(out / "thumbs" / src[0]).convert("RGB"), np.float32)
                assert np.abs(thumb.mean((0, 1)) - (60 * i, 40 * (j + 1), 200 - 50 * (j + 1))).max() < 8
    row_tags = re.findall(r'<section class="row"[^>]*data-text="([^"]*)"><h2>(\w+)</h2>', page)
    assert all(all(text.lower() in search for text, _, _, _ in dict((s, n) for s, _, n in K_RECORDS)[sid])
               for search, sid in row_tags)  # the page's search finds a record by any of its negatives
    # the anchor's caption marks the words any negative changes; the card says how many negatives have pictures
    assert '<figcaption class="anchor">A <mark class="del">man</mark> riding a <mark class="del">horse</mark>' \
        '</figcaption>' in rows["k3"]
    assert "<dt>negatives</dt><dd>3 (1 with a picture)</dd>" in rows["k3"]
    assert "<dt>negatives</dt><dd>1 (0 with a picture)</dd>" in rows["k1"] and "<dt>negatives</dt>" not in rows["k4"]
    assert sorted(p.name for p in (out / "thumbs").iterdir()) == sorted(
        re.findall(r'<img src="thumbs/([^"]+)"', page))  # 4 anchors and 3 negative pictures, nothing else
    assert len(list((out / "thumbs").iterdir())) == 7
