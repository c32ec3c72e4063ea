"""Captioners and editors as plugins: by class path, by a name another package registers, and plugins that break
their contract or do not load."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import ImageOps

from concrete_jungle.cli import main
from concrete_jungle.concretebatch import iter_records
from plant_fixtures import make_dataset, plant_args

TESTS = Path(__file__).parent


@pytest.mark.processes
def test_importing_captioners_and_editors_imports_no_toy_world():
    code = ("import sys, concrete_jungle.plant.captioners, concrete_jungle.plant.editors; "
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


def test_an_editor_s_own_metadata_fields_are_written_into_each_record_beside_the_plant_s(tmp_path):
    captions, images = make_dataset(tmp_path, 6)
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out, "--editor", "plugin_example:NamingMirrorEditor")) == 0
    records = list(iter_records(out))
    assert len(records) == 6
    for r in records:
        assert r["meta"]["mirrored_keyword"] == r["meta"]["keyword"] and r["meta"]["prompt_is_caption"] is False
        assert r["meta"]["editor"] == "mirror-naming"


@pytest.mark.processes
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


@pytest.fixture
def small(tmp_path):
    return make_dataset(tmp_path, 12, image_size=16)


@pytest.mark.parametrize("flags, message", [
    (["--editor", "plugin_example:ShortEditor"], "editor 'short' returned 5 images for 6 anchors"),
    (["--editor", "plugin_example:OverwritingEditor"], "editor 'overwriting''s meta_fields() names keyword, which "
                                                        "the plant writes itself"),
    (["--captioner", "plugin_example:StrCaptioner"], "captioner 'purple:teapot' returned a str where a Reply belongs"),
    (["--captioner", "plugin_example:RaisingCaptioner"],
     "captioner 'raising' failed in rewrite(): ConnectionError: the server went away"),
])
def test_a_plugin_that_breaks_its_contract_stops_the_run_naming_it_and_claims_nothing(small, tmp_path, capsys, flags,
                                                                                       message):
    captions, images = small
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out, "--samples-per-shard", 6, "--batch-size", 12, *flags)) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert message in err
    assert not (out / "manifest.jsonl").exists() and not (out / "summary.json").exists()
    assert not list(out.glob("shard-*.tar"))  # no shard holds fewer records than its manifest would say


def test_a_captioner_without_close_as_the_readme_describes_finishes(small, tmp_path):
    captions, images = small
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out, "--captioner", "plugin_example:NoCloseCaptioner")) == 0
    assert json.loads((out / "summary.json").read_text())["ok"] == 12


def test_an_editor_that_draws_on_its_input_cannot_change_the_stored_anchors(tmp_path):
    import numpy as np
    from PIL import Image

    from concrete_jungle.concretebatch import iter_records

    images = tmp_path / "png"
    images.mkdir()
    rows = []
    for i in range(6):  # PNG sources: the anchor is encoded to JPEG by plant, not copied as bytes
        Image.fromarray(np.full((16, 16, 3), 40 * i, np.uint8)).save(images / f"{i}.png")
        rows.append({"id": f"s{i}", "captions": [f"a small dog next to a red ball number {i}"], "image": f"{i}.png"})
    captions = tmp_path / "c.jsonl"
    captions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for editor in ("MirrorEditor", "DrawingEditor"):
        assert main(plant_args(captions, images, tmp_path / editor, "--editor", f"plugin_example:{editor}")) == 0
    anchors = {name: {r["meta"]["id"]: np.asarray(r["image"]) for r in iter_records(tmp_path / name)}
               for name in ("MirrorEditor", "DrawingEditor")}
    assert anchors["MirrorEditor"].keys() == anchors["DrawingEditor"].keys()
    for key, pixels in anchors["MirrorEditor"].items():
        assert np.array_equal(pixels, anchors["DrawingEditor"][key])  # not red
    negative = next(iter_records(tmp_path / "DrawingEditor"))["neg_image"]
    assert np.asarray(negative)[..., 0].mean() > 200  # the editor's own output is kept as its negative


def test_a_plugin_that_does_not_import_or_is_no_class_is_one_line_before_any_file(small, tmp_path, monkeypatch,
                                                                                 capsys):
    captions, images = small
    plugins = tmp_path / "mine"
    plugins.mkdir()
    (plugins / "broken_plugin.py").write_text("class Editor(:\n    pass\n")
    monkeypatch.syspath_prepend(str(plugins))
    for flags, message in [
        (["--editor", "broken_plugin:Editor"],
         "editor 'broken_plugin:Editor': cannot import broken_plugin: SyntaxError"),
        (["--captioner", "plugin_example:a_function_not_a_class"],
         "plugin_example:a_function_not_a_class is a function, not a class"),
        (["--editor", "plugin_example:PurpleCaptioner"], "has no edit() method"),
    ]:
        out = tmp_path / "cb"
        assert main(plant_args(captions, images, out, *flags)) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert message in err and "Traceback" not in err
        assert not out.exists()  # checked before anything is written


@pytest.mark.processes
def test_two_packages_registering_one_name_is_an_error_naming_both(tmp_path, small):
    site = tmp_path / "site"
    for package, target in (("one", "PurpleCaptioner"), ("two", "NoCloseCaptioner")):
        info = site / f"cj_{package}-0.1.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: cj-{package}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[concrete_jungle.captioners]\nmine = plugin_example:{target}\n")
    captions, images = small
    done = subprocess.run([sys.executable, "-m", "concrete_jungle.cli",
                           *map(str, plant_args(captions, images, tmp_path / "cb", "--captioner", "mine"))],
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": f"{site}:{Path(__file__).parent}", "PATH": "/usr/bin:/bin",
                               "HOME": str(tmp_path)})
    assert done.returncode == 2
    err = " ".join(done.stderr.split())
    assert "captioner 'mine' is registered by more than one installed package" in err
    assert "(package cj-one)" in err and "(package cj-two)" in err


@pytest.mark.parametrize("flags, message", [
    (["--editor", "toyworld"], "editor 'toyworld' needs the option(s) world: pass --editor-option world=PATH"),
    (["--editor", "toyworld", "--editor-option", "world=nowhere"],
     "nowhere/scenes.jsonl not found; --editor-option world=DIR must name a toy world's folder (concrete-jungle demo "
     "--out OUT writes one as OUT/world-<hash>)"),
    (["--captioner", "toyworld", "--captioner-option", "world=nowhere"],
     "nowhere/scenes.jsonl not found; --captioner-option world=DIR must name a toy world's folder"),
    (["--captioner", "plugin_example:PurpleCaptioner", "--captioner-option", "colour=red"],
     "captioner 'plugin_example:PurpleCaptioner' does not take the option(s) colour; it takes object_word "
     "(--captioner-option KEY=VALUE)"),
])
def test_a_plugin_s_missing_or_wrong_option_is_the_flag_to_pass_before_any_file(small, tmp_path, capsys, flags,
                                                                                 message):
    captions, images = small
    out = tmp_path / "cb"
    assert main(plant_args(captions, images, out, *flags)) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert message in err and "Traceback" not in err, err
    assert not out.exists()  # checked before the keyword stage writes anything
