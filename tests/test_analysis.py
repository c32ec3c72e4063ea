"""Gradient share against batch size (paper Fig. 6) on random features and on a model's features."""

import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from concrete_jungle.analysis import gradient_share_by_batch_size
from concrete_jungle.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from test_plant import make_dataset  # noqa: E402


def random_pairs(m, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    image = F.normalize(torch.randn(2 * m, d, generator=g), dim=1)
    text = F.normalize(image + 0.7 * torch.randn(2 * m, d, generator=g), dim=1)
    return image, text, 1 + 4 * torch.rand(m, generator=g)


def test_one_batch_reproduces_the_closed_form():
    image, text, c = random_pairs(16)
    curves = gradient_share_by_batch_size(image, text, c, 20.0, [16], schedules=("none",), batches=1)
    s = 20.0 * image @ text.T
    idx = torch.arange(32)
    hard = (idx + 16) % 32
    shares = []
    for mat in (s, s.T):
        p = torch.softmax(mat, dim=1)
        shares.append(p[idx, hard] / (1 - p[idx, idx]))
    assert curves["none"][16] == pytest.approx(torch.cat(shares).mean().item(), rel=1e-5)


def test_share_falls_with_batch_size_for_infonce_and_rises_with_a_positive_margin():
    image, text, c = random_pairs(512, seed=1)
    curves = gradient_share_by_batch_size(image, text, c, 30.0, [16, 64, 256, 512], batches=4)
    infonce = [curves["none"][n] for n in (16, 64, 256, 512)]
    assert all(a > b for a, b in zip(infonce, infonce[1:])), infonce
    for n in (16, 64, 256, 512):
        assert curves["static"][n] > curves["none"][n]


def test_batch_larger_than_the_data_is_a_clear_error():
    image, text, c = random_pairs(8)
    with pytest.raises(ValueError, match=r"batch sizes \[16\] exceed the 8 pairs available"):
        gradient_share_by_batch_size(image, text, c, 20.0, [4, 16])


@pytest.fixture(scope="module")
def small_concretebatch(tmp_path_factory):
    root = tmp_path_factory.mktemp("cb")
    captions, images = make_dataset(root, 24, image_size=64)
    assert main(["plant", "--captions", str(captions), "--images", str(images), "--out", str(root / "cb"),
                 "--mode", "hc", "--no-progress"]) == 0
    return root / "cb"


def test_analyze_gradient_share_writes_json_and_plot(tmp_path, small_concretebatch):
    out = tmp_path / "report"
    assert main(["analyze", "gradient-share", "--data", str(small_concretebatch), "--model", "cj-tiny",
                 "--pretrained", "none", "--batch-sizes", "4,8,16", "--out", str(out)]) == 0
    result = json.loads((out / "gradient_share.json").read_text())
    assert set(result["curves"]) == {"none", "static", "adaptive", "inverse"} and result["pairs"] == 24
    assert set(result["curves"]["none"]) == {"4", "8", "16"}
    png = (out / "gradient_share.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
