"""What a researcher meets on day one, command by command: names that agree, typos named, Ctrl-C that loses
nothing, the network asked once, figures whose colours and labels tell the truth, and readable output."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from concrete_jungle.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from conftest import TINY_TRAIN  # noqa: E402
from test_plant import make_dataset, plant_args  # noqa: E402



def cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "concrete_jungle.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env)



@pytest.fixture(scope="module")
def run(planted, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "run"
    assert main(["train", "--data", str(planted), "--out", str(out), "--steps", "3", *TINY_TRAIN]) == 0
    return out


# ------------------------------------------------------------------------------------------------ 1. the curves


def test_training_curves_colour_each_row_alike_in_both_panels_with_a_legend_each(tmp_path):
    from concrete_jungle.experiments.report import training_curves_figure
    from concrete_jungle.experiments.stages import CONTROL

    runs = {}
    for k, (label, share) in enumerate([(CONTROL.label, None), ("D_hc + InfoNCE", 0.3), ("D_hc + Cement", 0.6),
                                        ("D_lc + Cement", 0.15)]):
        ckpt = tmp_path / f"r{k}" / "checkpoints" / "step-0000003"
        ckpt.mkdir(parents=True)
        (tmp_path / f"r{k}" / "metrics.jsonl").write_text("".join(
            json.dumps({"step": s, "loss": 3.0 - s / 10 - k, "hn_grad_share": share}) + "\n" for s in (1, 2, 3)))
        runs[(label, 0)] = ckpt
    fig = training_curves_figure(runs)
    loss, share = fig.axes
    colour_of = {line.get_label(): line.get_color() for line in loss.get_lines()}
    assert len(colour_of) == 4 and len(set(colour_of.values())) == 4
    plotted = {line.get_label(): (line.get_color(), line.get_ydata()[0]) for line in share.get_lines()}
    assert set(plotted) == {"D_hc + InfoNCE", "D_hc + Cement", "D_lc + Cement"}  # no share for the control
    for label, (colour, first) in plotted.items():
        assert colour == colour_of[label]  # the same colour as in the loss panel
    assert plotted["D_hc + Cement"][1] == 0.6 and plotted["D_lc + Cement"][1] == 0.15
    for ax in (loss, share):  # each panel's legend names its own lines, in their colours
        legend = ax.get_legend()
        assert legend is not None
        entries = {t.get_text(): h.get_color() for t, h in zip(legend.get_texts(), legend.legend_handles)}
        assert entries == {line.get_label(): line.get_color() for line in ax.get_lines()}


# ------------------------------------------------------------------------------------------------ 2, 14. latest


def test_every_command_that_takes_a_checkpoint_accepts_latest_and_the_run_folder(run, planted, data_root, tmp_path,
                                                                                   capsys):
    latest = json.loads((run / "checkpoints" / "latest.json").read_text())["name"]
    for i, name in enumerate([run / "checkpoints" / "latest", run, run / "checkpoints"]):
        out = tmp_path / f"eval{i}"
        assert main(["eval", "--data-root", str(data_root), "--checkpoint", str(name), "--out", str(out),
                     "--no-progress"]) == 0
        result = json.loads((out / "sugarcrepe.json").read_text())
        assert result["model"]["path"] == str(run / "checkpoints" / latest)  # the file that was evaluated
        assert str(run / "checkpoints" / latest) in (out / "results.md").read_text()
    assert main(["analyze", "gradient-share", "--data", str(planted), "--checkpoint", str(run / "checkpoints"
                 / "latest"), "--batch-sizes", "4", "--batches", "1", "--out", str(tmp_path / "gs")]) == 0
    capsys.readouterr()
    assert main(["eval", "--data-root", str(data_root), "--checkpoint", str(tmp_path / "nope"),
                 "--out", str(tmp_path / "x")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "nope does not exist" in err and "checkpoints/latest" in err
    assert main(["train", "--data", str(planted), "--out", str(tmp_path / "ft"), "--checkpoint",
                 str(run / "checkpoints" / "latest"), "--steps", "1", "--set", "data.workers=0", "--batch-size", "8",
                 "--no-progress"]) == 0  # fine-tuning from a run's latest checkpoint


# ------------------------------------------------------------------------------------------------ 3. typos


@pytest.mark.parametrize("args, meant", [(["plant", "--captoins", "x.jsonl"], "--captions"),
                                         (["train", "--stpes", "3"], "--steps"),
                                         (["analyze", "gradient-share", "--data", "x", "--batchs", "3"], "--batches")])
def test_a_misspelled_flag_is_named_with_the_flag_meant(args, meant):
    done = cli(*args)
    assert done.returncode == 2
    assert f"unrecognized arguments: {args[-2]} (did you mean {meant}?)" in done.stderr
    assert "invalid choice" not in done.stderr


def test_a_set_key_that_does_not_exist_is_blamed_on_set(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("model:\n  name: cj-tiny\n")
    assert main(["train", "--config", str(config), "--set", "optim.lrr=1e-3", "--data", str(tmp_path),
                 "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "--set optim.lrr=1e-3: 'lrr' is not a key of optim (did you mean lr?)" in " ".join(err.split())
    assert "c.yaml" not in err


# ------------------------------------------------------------------------------------------------ 4, 14. Ctrl-C


def wait_for(condition, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_ctrl_c_in_training_saves_a_checkpoint_of_the_last_step_and_resume_continues(planted, tmp_path):
    out = tmp_path / "run"
    args = ["train", "--data", planted, "--out", out, "--steps", "2000", "--set", "log_every=1", *TINY_TRAIN]
    proc = subprocess.Popen([sys.executable, "-m", "concrete_jungle.cli", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    metrics = out / "metrics.jsonl"
    assert wait_for(lambda: metrics.is_file() and len(metrics.read_text().splitlines()) >= 5)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr and "--resume latest" in " ".join(stderr.split())
    latest = json.loads((out / "checkpoints" / "latest.json").read_text())
    logged = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert latest["reason"] == "interrupted" and latest["step"] == logged[-1] >= 5  # no step lost
    assert (out / "checkpoints" / latest["name"] / "trainer_state.json").is_file()
    resumed = cli(*args[:5], "--steps", latest["step"] + 2, *args[7:], "--resume", "latest")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((out / "checkpoints" / "latest.json").read_text())["step"] == latest["step"] + 2


def test_ctrl_c_in_plant_prints_how_to_resume_and_no_traceback(tmp_path):
    captions, images = make_dataset(tmp_path, 3000, image_size=16)
    out = tmp_path / "cb"
    proc = subprocess.Popen([sys.executable, "-m", "concrete_jungle.cli",
                             *plant_args(captions, images, out, "--samples-per-shard", 50, "--batch-size", 8)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: any(out.glob("shard-*.tar")))
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in stderr
    assert "interrupted: nothing is lost" in " ".join(stderr.split())


# ------------------------------------------------------------------------------------------------ 5. offline


def test_pretrained_weights_that_cannot_be_had_offline_are_one_clear_line_at_once(data_root, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")} | {
        "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "HOME": str(tmp_path)}  # an empty cache
    done = cli("eval", "--data-root", data_root, "--model", "ViT-B-32", "--out", tmp_path / "r", env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    err = " ".join(done.stderr.split())
    assert "the 'openai' weights of ViT-B-32 are not in the local cache and HF_HUB_OFFLINE is set" in err
    assert "--pretrained /path/to/open_clip_model.safetensors" in err


# ------------------------------------------------------------------------------------------------ 6, 10. analyze


def test_analyze_says_when_negatives_are_text_only_and_names_the_reference_model(planted, tmp_path, capsys):
    out = tmp_path / "analysis"
    assert main(["analyze", "datasets", str(planted), "--model", "cj-tiny", "--pretrained", "none",
                 "--out", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "every pair have text-only negatives" in printed
    stats = json.loads((out / "stats.json").read_text())
    summary = stats["datasets"]["cb"]["summary"]
    assert summary["t2i"] is None and summary["clip_v"] is None and summary["text_only_pairs"] == summary["pairs"]
    report = (out / "report.md").read_text()
    assert "| T2I acc. | n/a (text-only) |" in report and "image-image cosine (CLIP-V) | n/a (text-only)" in report
    assert "under cj-tiny (random init, seed 0)" in report and "| CLIP-L |" not in report


def test_text_shift_plot_keeps_every_dataset_visible_on_integer_ticks(tmp_path):
    import random

    from concrete_jungle.analysis_figures import text_shift_figure

    rng = random.Random(0)
    per = {name: [{"concreteness": rng.uniform(1, 5), "edit_distance": rng.randint(1, 3)} for _ in range(300)]
           for name in ("D_hc", "D_lc", "D_wo")}
    fig = text_shift_figure(per)
    ax = fig.axes[0]
    assert [c.get_label() for c in ax.containers] == ["D_hc", "D_lc", "D_wo"]  # one errorbar series each
    assert all(float(t).is_integer() for t in ax.get_yticks())
    xs = [c.lines[0].get_xdata() for c in ax.containers]
    assert not set(xs[0]) & set(xs[1])  # offset: no dataset's means drawn on top of another's


def test_the_gradient_share_plot_names_data_and_model_and_has_error_bars(planted, tmp_path, capsys):
    out = tmp_path / "gs"
    assert main(["analyze", "gradient-share", "--data", str(planted), "--model", "cj-tiny", "--pretrained", "none",
                 "--batch-sizes", "4,8", "--batches", "3", "--out", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "on cb under cj-tiny (random init, seed 0)" in printed and "±" in printed
    saved = json.loads((out / "gradient_share.json").read_text())
    assert saved["batches"] == 3 and set(saved["sd"]) == set(saved["curves"])


# ------------------------------------------------------------------------------------------------ 7, 8. eval


def test_compare_names_columns_by_file_and_lists_model_and_items(run, data_root, tmp_path, capsys):
    for side in ("a", "b"):
        assert main(["eval", "--data-root", str(data_root), "--checkpoint", str(run), "--out",
                     str(tmp_path / side), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert f"written: {tmp_path / 'a' / 'results.md'}" in " ".join(printed.split())
    result = json.loads((tmp_path / "a" / "sugarcrepe.json").read_text())
    assert result["items"] == sum(result["n"].values()) > 0
    from concrete_jungle.evaluation.report import compare, compare_markdown

    table = compare_markdown(compare([tmp_path / "a" / "sugarcrepe.json", tmp_path / "b" / "sugarcrepe.json"],
                                     resamples=50))
    header = table.splitlines()[0]
    assert "a/sugarcrepe.json" in header and "b/sugarcrepe.json" in header and result["model_hash"] not in header
    assert f"items {result['items']}" in table and str(run / "checkpoints") in table


def test_sugarcrepe_evaluates_the_subset_files_that_are_there(data_root, tmp_path, capsys):
    from concrete_jungle.evaluation import sugarcrepe

    root = tmp_path / "root"
    shutil.copytree(data_root / "coco", root / "coco")
    (root / "sugarcrepe").mkdir()
    for name in ("swap_obj.json", "add_att.json", "replace_rel.json"):
        shutil.copy(data_root / "sugarcrepe" / name, root / "sugarcrepe" / name)
    mine = json.loads((data_root / "sugarcrepe" / "add_obj.json").read_text())
    (root / "sugarcrepe" / "my_subset.json").write_text(json.dumps(mine))
    assert main(["eval", "--data-root", str(root), "--check", "--skip-missing"]) == 0
    data = sugarcrepe.load(root / "sugarcrepe", root / "coco" / "val2017")
    assert list(data["items"]) == ["add_att", "replace_rel", "swap_obj", "my_subset"]  # official order, then others
    from concrete_jungle.stats import metric_values, series

    accuracy = {"add_att": 5, "replace_rel": 7, "swap_obj": 9, "my_subset": 1}  # of 10
    answers = {s: series(range(10), range(10), [1] * k + [0] * (10 - k)) for s, k in accuracy.items()}
    scores = metric_values({"series": answers, "metrics": sugarcrepe.recipes(list(answers))})
    assert scores["M.Avg"] == pytest.approx(0.55) and "ADD" not in scores  # ADD needs both of its subsets
    with pytest.raises(ValueError, match="holds no subset files"):
        sugarcrepe.load(tmp_path / "empty", root / "coco" / "val2017")


# ------------------------------------------------------------------------------------------------ 9. gallery


def test_gallery_filters_sorts_labels_and_cleans_like_a_user_expects(planted, tmp_path, capsys):
    from concrete_jungle.gallery import build_gallery

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
    build_gallery([planted], tmp_path / "g", sample=5, stats=stats)
    assert len(list((tmp_path / "g" / "thumbs").glob("*.jpg"))) == 10  # the larger page's thumbnails are gone


def test_gallery_rows_sort_by_the_mean_concreteness_of_their_cards(tmp_path):
    from concrete_jungle.gallery import build_gallery

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


# ------------------------------------------------------------------------------------------------ 13, 14. plant


def test_plant_summary_is_readable_says_what_it_reused_and_limit_tries_a_few(tmp_path, capsys):
    captions, images = make_dataset(tmp_path, 40, image_size=16)
    args = plant_args(captions, images, tmp_path / "cb", "--samples-per-shard", 5, "--limit", 12)
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "{" not in printed and "'" not in printed and f"written: {tmp_path / 'cb'}" in printed
    rows = (tmp_path / "cb" / "manifest.jsonl").read_text().splitlines()
    assert len(rows) == 12
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "reusing 3 finished shard(s) of an earlier run (12 samples); 0 to make" in " ".join(captured.err.split())
    assert json.loads((tmp_path / "cb" / "summary.json").read_text())["shards_reused"] == 3
    assert main(args[:-1] + ["20"]) == 2  # another limit is another dataset
    assert "limit differs" in capsys.readouterr().err


def test_keywords_limit_and_a_one_word_difference_reads_well(tmp_path, capsys):
    captions, _ = make_dataset(tmp_path, 30, image_size=8)
    out = tmp_path / "kw.jsonl"
    assert main(["keywords", "--captions", str(captions), "--mode", "hc", "--out", str(out), "--limit", "7",
                 "--no-progress"]) == 0
    assert len(out.read_text().splitlines()) == 7
    assert main(["keywords", "--captions", str(captions), "--mode", "hc", "--out", str(out), "--limit", "9",
                 "--no-progress"]) == 2
    assert "(limit differs, see" in " ".join(capsys.readouterr().err.split())


def test_plant_refuses_a_training_run_folder_and_missing_images_before_writing(run, tmp_path, capsys):
    captions, images = make_dataset(tmp_path, 10, image_size=8)
    before = sorted(p.name for p in run.iterdir())
    assert main(plant_args(captions, images, run)) == 2
    assert "holds a training run" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == before
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(plant_args(captions, empty, tmp_path / "cb")) == 2
    assert "none of the first 10 images exist" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "cb").exists()


# ------------------------------------------------------------------------------------------------ 15. rewrites


def test_offline_rewrites_stay_in_the_keyword_s_group_and_a_time_is_no_place(nlp, ratings):
    from concrete_jungle.captioners import RewriteRequest
    from concrete_jungle.captioners.rules import OBJECT_GROUPS, RulesCaptioner
    from concrete_jungle.keywords import extract_candidates

    captioner = RulesCaptioner(wordnet=False)

    def rewrite(caption, keyword, category):
        start = caption.index(keyword)
        return captioner.rewrite([RewriteRequest("x", caption, keyword, (start, start + len(keyword)), category,
                                                 "hc", 0, 0)])[0]

    assert rewrite("A sunny day at the beach.", "day", "object").error.startswith("no substitute known for 'day'")
    food = next(g for g in OBJECT_GROUPS if "egg" in g)
    for attempt in range(5):
        reply = captioner.rewrite([RewriteRequest("x", "A fried egg on toast.", "egg", (8, 11), "object", "hc",
                                                  attempt, 0)])[0]
        assert reply.text.removeprefix("A fried ").removesuffix(" on toast.") in food
    found = {c.text: c.category for c in extract_candidates(nlp("A dog running on a sunny day."), ratings)}
    assert "on" not in found  # `on a sunny day` places nothing
    found = {c.text: c.category for c in
             extract_candidates(nlp("A man sitting on the table and watching TV."), ratings)}
    assert found.get("watching") == "relation" and found.get("on") == "relation"
