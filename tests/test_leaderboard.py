"""One table for many models (`eval --models A B C --suite KIND`): three tiny random-weight checkpoints over the
fixture benchmarks: the cells are each model's own results, the intervals those of `eval --compare`, a rerun
evaluates nothing, a model added later is evaluated alone, and the table printed through a pipe is whole."""

import contextlib
import io
import json
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
