"""One table for many models (`eval --models A B C --suite KIND`): three tiny random-weight checkpoints over the
fixture benchmarks: the cells are each model's own results, the intervals those of `eval --compare`, a rerun
evaluates nothing, a model added later is evaluated alone, and the table printed through a pipe is whole."""

import contextlib
import io
import json
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from benchmark_fixtures import write_data_root, write_winoground
from concrete_jungle.cli import main
from concrete_jungle.evaluation import load_data
from concrete_jungle.evaluation.encoding import Encoder
from concrete_jungle.evaluation.leaderboard import entries, evaluate_models, headline_difference
from concrete_jungle.evaluation.report import compare, summary
from concrete_jungle.models import load_model, save_checkpoint

RESAMPLES = 100
SUITE = ["sugarcrepe", "sugarcrepe_pp", "winoground"]  # the compositional benchmarks the fixture root holds


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = write_data_root(tmp_path_factory.mktemp("leaderboard-data"))
    write_winoground(root / "winoground", "a dog {} on a cat", "a cat {} on a dog", n=4)
    return root


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Four tiny random-init models (seeds 0-3) saved as checkpoints: three for the board, one added later."""
    folder = tmp_path_factory.mktemp("leaderboard-models")
    out = []
    for seed in range(4):
        clip = load_model("cj-tiny", "none", seed=seed)
        out.append(save_checkpoint(folder / f"tiny-seed-{seed}", clip.model, clip.config))
    return out


@pytest.fixture(scope="module")
def board(root, checkpoints, tmp_path_factory):
    """``eval --models ref=A B C --suite compositional`` once (in this process: a command's start is slow); the
    folder it wrote, what it printed and the command."""
    out = tmp_path_factory.mktemp("board") / "board"
    command = ["eval", "--models", f"ref={checkpoints[0]}", *map(str, checkpoints[1:3]), "--suite", "compositional",
               "--data-root", str(root), "--out", str(out), "--resamples", str(RESAMPLES), "--no-progress"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(command) == 0
    return out, printed.getvalue(), command


def test_the_cells_are_each_model_s_own_results_and_the_intervals_those_of_eval_compare(board):
    out, printed, _ = board
    table = json.loads((out / "leaderboard.json").read_text())
    assert [b["name"] for b in table["benchmarks"]] == SUITE  # the suite: the compositional benchmarks present
    assert [m["label"] for m in table["models"]] == ["ref", "tiny-seed-1", "tiny-seed-2"]
    assert "--suite compositional: found under" in printed and "not found: aro (no aro/" in " ".join(printed.split())
    built = " ".join(printed.split()).split("--suite compositional: built from ", 1)[1]
    assert all(f"{name} from " in built for name in SUITE)  # each benchmark with the files it is built from
    reference = table["models"][0]["folder"]
    for model in table["models"]:
        own = {n: json.loads((out / model["folder"] / f"{n}.json").read_text()) for n in SUITE}
        assert len({r["model_hash"] for r in own.values()} | {model["model_hash"]}) == 1
        mine = summary(own)["compositional"]
        for name in SUITE:
            cell = table["cells"][model["label"]][name]
            headline = {"sugarcrepe": "M.Avg", "sugarcrepe_pp": "M.Avg/ITT", "winoground": "group"}[name]
            assert cell["value"] == own[name]["metrics"][headline] == mine["parts"][name]
            assert cell["chance"] == own[name]["chance"][headline]
            if model["label"] == "ref":
                assert "difference" not in cell
                continue
            compared = compare([out / reference / f"{name}.json", out / model["folder"] / f"{name}.json"],
                               resamples=RESAMPLES)
            row = next(r for r in compared["rows"] if r["metric"] == headline)["differences"][0]
            assert {k: cell["difference"][k] for k in ("estimate", "ci95", "p", "verdict")} == \
                {k: row[k] for k in ("estimate", "ci95", "p", "verdict")}
        assert table["means"][model["label"]]["compositional"]["mean"] == mine["mean"]
        assert table["means"][model["label"]]["compositional"]["normalised_mean"] == mine["normalised_mean"]
    assert (out / "leaderboard.png").stat().st_size > 10_000


@pytest.mark.processes
def test_the_leaderboard_printed_through_a_pipe_is_whole_and_a_rerun_evaluates_nothing(board):
    out, _, command = board
    before = {p: p.stat().st_mtime_ns for p in out.glob("*/*.json")}
    piped = subprocess.run(f"{shlex.join([sys.executable, '-m', 'concrete_jungle.cli', *command])} | cat",
                           shell=True, capture_output=True, text=True, check=True, timeout=600)
    lines = piped.stdout.splitlines()
    for label in ("ref", "tiny-seed-1", "tiny-seed-2"):
        assert f"{label}: results complete for the suite in {out / label}" in piped.stdout
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/*.json")} == before  # no result written again
    header = next(line for line in lines if line.startswith("| model |"))
    rows = [line for line in lines if line.startswith("| ")]
    assert len(rows) == 2 + 3  # header, rule, one line a model: none cut or wrapped
    assert all(row.endswith(" |") and row.count(" | ") == header.count(" | ") for row in rows)
    assert rows[3].startswith("| tiny-seed-1 | ") and " [" in rows[3]  # a difference with its interval
    written = (out / "leaderboard.md").read_text()
    assert "\n".join(rows) in written and written.strip() in piped.stdout


def counting():
    """An ``encoder_of`` that loads each model's checkpoint and keeps its Encoder, to count what it encoded."""
    made = {}

    def encoder_of(entry):
        made[entry.label] = Encoder(load_model(checkpoint=entry.checkpoint), progress=False)
        return made[entry.label]

    return made, encoder_of


def encoded(encoder) -> int:
    return encoder.encoded["images"] + encoder.encoded["texts"]


def test_a_rerun_evaluates_no_model_again_and_a_model_added_later_is_evaluated_alone(board, root, checkpoints,
                                                                                      tmp_path):
    shutil.copytree(board[0], tmp_path / "board")  # the three models evaluated once
    out = tmp_path / "board"
    loaded = {n: load_data(n, root, False) for n in SUITE}
    models = entries([f"ref={checkpoints[0]}", *map(str, checkpoints[1:])])
    made, encoder_of = counting()
    log = []
    results = evaluate_models(models[:3], loaded, out, encoder_of, log=log.append)
    assert [encoded(e) for e in made.values()] == [0, 0, 0]
    assert log == [f"{m.label}: results complete for the suite in {out / m.folder} (model "
                   f"{made[m.label].clip.hash}, the same benchmark files and rules): not evaluated again"
                   for m in models[:3]]
    assert results["ref"]["sugarcrepe"] == json.loads((out / "ref" / "sugarcrepe.json").read_text())
    made.clear()
    evaluate_models(models, loaded, out, encoder_of, log=log.append)
    assert {label: encoded(e) > 0 for label, e in made.items()} == {
        "ref": False, "tiny-seed-1": False, "tiny-seed-2": False, "tiny-seed-3": True}
    # other benchmark files (one SugarCrepe++ subset fewer): that benchmark alone is evaluated again, for every model
    (root / "sugarcrepe_pp" / "swap_obj.json").rename(tmp_path / "swap_obj.json")
    try:
        loaded["sugarcrepe_pp"] = load_data("sugarcrepe_pp", root, False)
    finally:
        (tmp_path / "swap_obj.json").rename(root / "sugarcrepe_pp" / "swap_obj.json")
    log.clear()
    evaluate_models(models[:2], loaded, out, encoder_of, log=log.append)
    assert log == [f"{m.label}: evaluating sugarcrepe_pp (kept: sugarcrepe, winoground, complete) into "
                   f"{out / m.folder}" for m in models[:2]]


def test_a_headline_of_several_metrics_is_bootstrapped_as_their_mean(board):
    out, _, _ = board
    files = [out / folder / "sugarcrepe.json" for folder in ("ref", "tiny-seed-1")]
    first, second = (json.loads(f.read_text()) for f in files)
    keys = ["ADD", "SWAP"]  # as ARO's or What'sUp's headline, a mean of several metrics
    diff = headline_difference(first, second, keys, ("tiny-seed-1", "ref"), RESAMPLES, 0)
    rows = {r["metric"]: r["differences"][0] for r in compare(files, resamples=RESAMPLES)["rows"]}
    assert diff["estimate"] == pytest.approx(sum(rows[k]["estimate"] for k in keys) / 2)
    assert diff["ci95"][0] < diff["estimate"] < diff["ci95"][1] and diff["ci95"] != rows["ADD"]["ci95"]
    # without per-item outcomes (a result written before they were kept): the difference alone
    del second["outcomes"]
    bare = headline_difference(first, second, keys, ("tiny-seed-1", "ref"), RESAMPLES, 0)
    assert bare["estimate"] == pytest.approx(diff["estimate"]) and bare["ci95"] is None


def test_the_models_are_checked_before_anything_loads(root, checkpoints, tmp_path, capsys, monkeypatch):
    from concrete_jungle.models import CONFIG_FILE

    args = ["eval", "--suite", "compositional", "--data-root", str(root), "--out", str(tmp_path / "b")]
    monkeypatch.setenv("CJ_PEERS_DIR", str(tmp_path / "peers"))  # no published weights downloaded
    damaged = shutil.copytree(checkpoints[1], tmp_path / "damaged")
    (damaged / CONFIG_FILE).write_text("{not json")
    for models, message in (
            ([str(checkpoints[0])], "--models needs two or more models, the first the reference"),
            ([str(checkpoints[0]), "ViT-Nope-1,openai"], "--models ViT-Nope-1,openai: 'ViT-Nope-1' is no checkpoint "
                                                         "folder and no open_clip model; give a checkpoint folder"),
            ([f"a={checkpoints[0]}", f"a={checkpoints[1]}"], "have the same label 'a': label them apart"),
            ([str(tmp_path / "gone" / "latest"), str(checkpoints[0])], "is not a checkpoint"),
            # the first model could be evaluated: a later one that cannot load is named before it is
            ([str(checkpoints[0]), "neg=peer:negclip"], "--model peer:negclip (NegCLIP) needs its weights on disk"),
            ([str(checkpoints[0]), str(damaged)], f"{damaged / CONFIG_FILE} is damaged (not JSON")):
        assert main([*args, "--models", *models]) == 2
        assert message in " ".join(capsys.readouterr().err.split())
    assert main([*args, "--models", str(checkpoints[0]), str(checkpoints[1]), "--checkpoint",
                 str(checkpoints[0])]) == 2
    assert "--models names every model; drop --checkpoint" in " ".join(capsys.readouterr().err.split())
    assert main([*args, "--benchmarks", "sugarcrepe", "--model", "cj-tiny", "--pretrained", "none"]) == 2
    assert "both choose the benchmarks: give one" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "b").exists()
    spec = entries(["ViT-B-32,openai", "cj-tiny", "peer:negclip", "mine=cj-tiny,none"], pretrained="none")
    assert [(e.label, e.name, e.pretrained, e.checkpoint, e.folder) for e in spec] == [
        ("ViT-B-32,openai", "ViT-B-32", "openai", None, "ViT-B-32_openai"), ("cj-tiny", "cj-tiny", "none", None,
                                                                             "cj-tiny"),
        ("peer:negclip", "peer:negclip", None, None, "peer_negclip"), ("mine", "cj-tiny", "none", None, "mine")]


def test_a_leaderboard_file_in_out_that_eval_models_did_not_write_is_kept_unless_overwrite(root, checkpoints,
                                                                                          tmp_path, capsys):
    """`eval --models` replaced a leaderboard.md it did not write."""
    out = tmp_path / "notes"
    out.mkdir()
    (out / "leaderboard.md").write_text("my ranking\n")
    args = ["eval", "--models", *map(str, checkpoints[:2]), "--suite", "compositional", "--data-root", str(root),
            "--out", str(out), "--resamples", str(RESAMPLES), "--no-progress"]
    assert main(args) == 2
    assert f"{out / 'leaderboard.md'} was not written by `concrete-jungle eval --models`, which would replace it: " \
           "pass --overwrite" in " ".join(capsys.readouterr().err.split())
    assert (out / "leaderboard.md").read_text() == "my ranking\n" and [p.name for p in out.iterdir()] == \
        ["leaderboard.md"]
    own = tmp_path / "own"
    assert main([*args[:-4], str(own), *args[-3:]]) == 0
    assert main([*args[:-4], str(own), *args[-3:]]) == 0  # the files it wrote itself: replaced without a word
    assert main([*args[:-4], str(own / "leaderboard.md"), *args[-3:]]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_the_footnote_names_the_headlines_the_data_held_and_where_it_was_read(board, root):
    out, _, _ = board
    table = json.loads((out / "leaderboard.json").read_text())
    text = (out / "leaderboard.md").read_text()
    for b in table["benchmarks"]:
        reference = json.loads((out / table["models"][0]["folder"] / f"{b['name']}.json").read_text())
        assert b["headlines"] == [k for k in b["headlines"] if reference["metrics"].get(k) is not None]
        assert b["data_root"] == str(root.resolve())
        assert f"- {b['name']} ({b['kind']}, rule {b['rule']}): {' and '.join(b['headlines'])}" in text
        assert f"{b['items']} items read from `{root.resolve()}`" in text


def test_the_means_say_which_benchmarks_they_hold_and_aro_order_names_only_the_order_task_run(checkpoints, nlp,
                                                                                             tmp_path, capsys):
    """On the toy world's files (a SugarCrepe-format test and a Karpathy split linked as Flickr30k, no COCO split)
    --suite compositional adds aro_order from the Flickr30k file alone: the footnote and the mean say so. (``nlp``:
    the spaCy pipeline the order tasks read, loaded once for the session.)"""
    from concrete_jungle.toyworld.build import WorldConfig, build_world

    world = tmp_path / "world"
    build_world(world, WorldConfig(train=10, test=12, seed=0), progress=False)
    root = tmp_path / "toy"
    (root / "coco").mkdir(parents=True)
    (root / "flickr30k").mkdir()
    for link, target in (("sugarcrepe", "test/sugarcrepe"), ("coco/val2017", "images/test"),
                         ("flickr30k/images", "images/test"), ("flickr30k/dataset_flickr30k.json",
                                                               "test/retrieval.json")):
        (root / link).symlink_to(world / target)
    out = tmp_path / "board"
    assert main(["eval", "--models", *map(str, checkpoints[:2]), "--suite", "compositional", "--data-root",
                 str(root), "--out", str(out), "--resamples", str(RESAMPLES), "--no-progress"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "aro_order from flickr30k/dataset_flickr30k.json" in printed
    table = json.loads((out / "leaderboard.json").read_text())
    assert {b["name"]: b["headlines"] for b in table["benchmarks"]} == {"sugarcrepe": ["M.Avg"],
                                                                        "aro_order": ["flickr30k_order"]}
    text = (out / "leaderboard.md").read_text()
    assert "- aro_order (compositional, rule " in text and "): flickr30k_order; " in text
    assert "coco_order" not in text and "their mean" not in text
    assert "- compositional mean: over sugarcrepe (M.Avg), aro_order (flickr30k_order)\n" in text
    parts = summary({n: json.loads((out / "tiny-seed-0" / f"{n}.json").read_text()) for n in ("sugarcrepe",
                                                                                             "aro_order")})
    assert table["means"]["tiny-seed-0"]["compositional"]["mean"] == pytest.approx(
        (parts["compositional"]["parts"]["sugarcrepe"] + parts["compositional"]["parts"]["aro_order"]) / 2)


HOSTILE = ["<img src=x onerror=alert(1)>", "</script><script>window.pwned = 1</script>", "a & b <!--"]


def hostile_board(out) -> dict:
    """The board of the three models' results in ``out`` (the fixture's), relabelled with ``HOSTILE`` labels, its
    last benchmark renamed to a ``</script>`` tag and a subset of the first with a <script> name, as a label or a
    benchmark's own file names could be: `leaderboard.table` on the real results."""
    from concrete_jungle.evaluation.leaderboard import Entry, table

    given = json.loads((out / "leaderboard.json").read_text())
    models = [Entry(label, m["given"], None, None, m["given"], m["folder"]) for label, m in zip(HOSTILE,
                                                                                               given["models"])]
    results = {e.label: {n: json.loads((out / e.folder / f"{n}.json").read_text()) for n in SUITE} for e in models}
    board = table(models, results, resamples=RESAMPLES)
    for cells in board["cells"].values():
        cells["</script><b>wino</b>"] = cells.pop("winoground")
        cells["sugarcrepe"]["subsets"]["<script>window.pwned = 2</script>"] = 0.5
    board["benchmarks"][-1]["name"] = "</script><b>wino</b>"
    return board


def embedded(page: str) -> str:
    return page.split('<script type="application/json" id="board-data">', 1)[1].split("</script>", 1)[0]


def test_the_leaderboard_page_is_one_file_claimed_as_eval_models_output_its_data_escaped_json(board):
    from concrete_jungle.evaluation.leaderboard_page import page, page_data
    from concrete_jungle.records import file_digest

    out, printed, _ = board
    assert "leaderboard.html (the page" in " ".join(printed.split())
    manifest = json.loads((out / ".outputs.json").read_text())
    assert manifest["leaderboard.html"] == {"command": "eval --models", "sha256": file_digest(out / "leaderboard.html")}
    text = (out / "leaderboard.html").read_text()
    assert json.loads(embedded(text)) == page_data(json.loads((out / "leaderboard.json").read_text()))
    # nothing to fetch: no address, no file linked, no element that loads one
    assert not re.search(r"https?:|//cdn|<link|<img|<iframe| src=| href=\"[^#]", text)
    hostile = page(hostile_board(out))
    data = embedded(hostile)
    assert not set("<>&") & set(data) and hostile.count("</script>") == 2  # the data's and the script's own
    assert [m["label"] for m in json.loads(data)["models"]] == HOSTILE
    assert "<img" not in hostile and "<b>wino" not in hostile


@pytest.mark.system_packages
def test_the_leaderboard_page_in_headless_chromium_sorts_toggles_drills_down_and_fetches_nothing(chromium, board,
                                                                                                  tmp_path):
    from selenium.webdriver.common.by import By

    from concrete_jungle.evaluation.leaderboard_page import write_page
    from conftest import ARTIFACTS

    out, _, _ = board
    hostile = hostile_board(out)
    write_page(hostile, tmp_path / "leaderboard.html")
    chromium.get((tmp_path / "leaderboard.html").as_uri())
    labels = lambda: [e.text for e in chromium.find_elements(By.CSS_SELECTOR, "#board tbody th .name")]  # noqa: E731
    column = lambda j: [e.text for e in chromium.find_elements(  # noqa: E731
        By.CSS_SELECTOR, f"#board tbody tr td:nth-of-type({j + 1}) .value")]
    # the hostile labels and names are text on the page: no element made of them, no script of theirs ran
    assert labels() == HOSTILE
    assert "</script><b>wino</b>" in chromium.find_element(By.CSS_SELECTOR, "#board thead").text
    assert not chromium.find_elements(By.CSS_SELECTOR, "img, thead b, tbody b")
    assert chromium.execute_script("return window.pwned === undefined")
    values = {label: hostile["cells"][label]["sugarcrepe"] for label in HOSTILE}
    assert column(0) == [f"{100 * values[label]['value']:.2f}" for label in HOSTILE]
    # sorting: a click on sugarcrepe's name orders the rows by it, highest first; a second click lowest first
    headers = chromium.find_elements(By.CSS_SELECTOR, "#board thead button.sort")
    assert [h.text for h in headers][:2] == ["model", "sugarcrepe"]
    by_value = sorted(HOSTILE, key=lambda label: -values[label]["value"])
    assert by_value != HOSTILE
    headers[1].click()
    assert labels() == by_value
    chromium.find_elements(By.CSS_SELECTOR, "#board thead button.sort")[1].click()
    assert labels() == by_value[::-1]
    # the toggle: chance-normalised numbers, (score - chance) / (1 - chance), and back
    chromium.find_element(By.ID, "mode-normalised").click()
    assert column(0) == [f"{100 * values[label]['normalised']:.2f}" for label in by_value[::-1]] != \
        [f"{100 * values[label]['value']:.2f}" for label in by_value[::-1]]
    mean = len(SUITE)  # the compositional mean's column, after the benchmarks'
    assert column(mean) == [f"{100 * hostile['means'][label]['compositional']['normalised_mean']:.2f}"
                            for label in by_value[::-1]]
    chromium.find_element(By.ID, "mode-raw").click()
    assert column(0) == [f"{100 * values[label]['value']:.2f}" for label in by_value[::-1]]
    # the drill-down: sugarcrepe's subsets, every model's value on each, the hostile subset name as text
    details = chromium.find_element(By.ID, "subsets-0")
    assert details.get_attribute("open") is None
    chromium.find_element(By.CSS_SELECTOR, "a[href='#subsets-0']").click()
    assert details.get_attribute("open") == "true"
    rows = {r.find_element(By.TAG_NAME, "th").text: [td.text for td in r.find_elements(By.TAG_NAME, "td")]
            for r in details.find_elements(By.CSS_SELECTOR, "tr")[1:]}
    first = hostile["cells"][HOSTILE[0]]["sugarcrepe"]
    assert rows["add_att"][0] == \
        f"{100 * first['subsets']['add_att']:.2f} ({100 * first['blind_subsets']['add_att']:.2f})"
    assert rows["swap_att"][-1] == "5 of 5" and "<script>window.pwned = 2</script>" in rows
    assert chromium.execute_script("return window.pwned === undefined")
    # nothing was requested but the page itself
    requested = [json.loads(entry["message"])["message"]["params"]["request"]["url"]
                 for entry in chromium.get_log("performance")
                 if json.loads(entry["message"])["message"]["method"] == "Network.requestWillBeSent"]
    assert requested and set(requested) == {(tmp_path / "leaderboard.html").as_uri()}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert chromium.save_screenshot(str(ARTIFACTS / "leaderboard.png"))
