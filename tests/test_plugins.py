"""Captioners and editors as plugins: by class path, and by a name another package registers."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import ImageOps

from concrete_jungle.cli import main
from concrete_jungle.concretebatch import iter_records
from test_plant import make_dataset, plant_args

TESTS = Path(__file__).parent


def test_importing_captioners_and_editors_imports_no_toy_world():
    code = ("import sys, concrete_jungle.captioners, concrete_jungle.editors; "
            "print(sorted(m for m in sys.modules if m.startswith('concrete_jungle.toyworld')))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def test_a_captioner_and_an_editor_of_a_user_s_module_work_with_plant(tmp_path):
    captions, images = make_dataset(tmp_path, 12)
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out, "--captioner", "plugin_example:PurpleCaptioner",
                           "--captioner-option", "object_word=kettle", "--editor", "plugin_example:MirrorEditor")) == 0
    records = list(iter_records(out))
    assert len(records) == 12
    for r in records:
        assert r["meta"]["captioner"] == "purple:kettle" and r["meta"]["editor"] == "mirror"
        assert "kettle" in r["neg_caption"] or "purple" in r["neg_caption"]
        neg = np.asarray(r["neg_image"], np.float32)  # a JPEG of the mirrored anchor: close to it, far from it
        assert np.abs(neg - np.asarray(ImageOps.mirror(r["image"]), np.float32)).mean() < 12
        assert np.abs(neg - np.asarray(r["image"], np.float32)).mean() > 40


def test_a_name_registered_by_another_package_s_entry_points_works(tmp_path):
    """Registered the way an installed package registers it (a dist-info with entry_points.txt on the path),
    installing nothing."""
    site = tmp_path / "site"
    info = site / "cj_purple_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cj-purple-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[concrete_jungle.captioners]\npurple = plugin_example:PurpleCaptioner\n\n"
                                           "[concrete_jungle.editors]\nmirror = plugin_example:MirrorEditor\n")
    captions, images = make_dataset(tmp_path, 6)
    out = tmp_path / "cb"
    run = subprocess.run([sys.executable, "-m", "concrete_jungle.cli",
                          *map(str, plant_args(captions, images, out, "--captioner", "purple", "--editor", "mirror"))],
                         capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": f"{site}:{TESTS}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["captioner"], summary["editor"]) == ("purple:teapot", "mirror") and summary["ok"] == 6
