"""Hostile captions and ids (property-based): `keywords`, `plant` and `gallery` never crash, every sample is
either kept or skipped with a reason, and the gallery shows every kept caption as text."""

import html
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from concrete_jungle.cli import main
from concrete_jungle.concretebatch import iter_records, read_manifest

WORDS = ["a", "red", "car", "parked", "next", "to", "the", "dog", "under", "table", "two", "cats", "on", "bench"]
HOSTILE = [
    "\x00", "\x07", "\x1b[31m", "\r\n", "\t",  # control characters
    "\u202e", "\u200f", "\u061c",  # right-to-left marks and overrides
    "\x85", "\u2028", "\u2029", "\x0b",  # what str.splitlines() takes for line ends, raw inside JSON strings
    "e\u0301\u0301\u0301", "\u0338",  # combining marks
    "🐕", "👩‍👩‍👧", "\U0001F600",  # emoji, a ZWJ sequence
    "\ud800", "\udfff",  # lone surrogates: written to JSON as \\ud800 escapes
    "<script>window.pwned=1</script>", "&amp;", '"><img src=x onerror=alert(1)>',  # HTML
    "x" * 10_000, " ".join(["dog"] * 80),  # 10,000 characters; too many words
    "\ufeff", "",
]
caption = st.lists(st.one_of(st.sampled_from(WORDS), st.sampled_from(HOSTILE)), min_size=0, max_size=10).map(" ".join)
sample_id = st.one_of(st.sampled_from(["a.b", "a_b", "../x", "/etc/passwd", "\ud83d", "é", "e\u0301"]),
                      st.text(min_size=1, max_size=12))
samples = st.lists(st.tuples(sample_id, caption), min_size=1, max_size=6)


def check_hostile_samples(root, batch):
    (root / "images").mkdir()
    rng = np.random.default_rng(0)
    with open(root / "captions.jsonl", "w", encoding="ascii") as f:
        for i, (sid, text) in enumerate(batch):
            Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(root / "images" / f"{i}.jpg")
            # ensure_ascii writes a lone surrogate as the \\ud800 escape a hostile JSON file would hold
            f.write(json.dumps({"id": sid, "caption": f"{text} red car next to a dog", "image": f"{i}.jpg"}) + "\n")
    out = root / "cb"
    assert main(["plant", "--captions", str(root / "captions.jsonl"), "--images", str(root / "images"), "--out",
                 str(out), "--mode", "hc", "--no-progress", "--batch-size", "4", "--samples-per-shard", "3"]) == 0
    rows = read_manifest(out)
    assert len(rows) == len(batch)  # one row per input sample, none lost, none twice
    assert all(r["status"] == "ok" or (r["status"] == "rejected" and r["reason"]) for r in rows)
    kept = [r for r in rows if r["status"] == "ok"]
    if kept:
        assert main(["gallery", str(out), "--out", str(root / "g")]) == 0
        page = (root / "g" / "index.html").read_text(encoding="utf-8")
        records = list(iter_records(out))
        assert len(records) == len(kept)
        for record in records:  # every kept caption is on the page, escaped: text, never markup
            assert html.escape(record["caption"].split()[0]) in page
        assert "<script>window.pwned" not in page and "<img src=x" not in page


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=samples)
def test_hostile_captions_and_ids_are_kept_or_skipped_never_crash(tmp_path_factory, batch):
    check_hostile_samples(tmp_path_factory.mktemp("hostile"), batch)


@pytest.mark.slow
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=samples)
def test_many_more_hostile_captions(tmp_path_factory, batch):
    check_hostile_samples(tmp_path_factory.mktemp("hostile"), batch)
