"""The command line as a new user meets it: errors before any heavy import or any file, misspelled flags named,
help, file modes."""

import argparse
import contextlib
import ctypes
import json
import os
import re
import shutil
import stat
import subprocess
import sys

import pytest

from concrete_jungle import __version__
from concrete_jungle.cli import build_parser, main
from conftest import TINY_TRAIN, cli
from test_tradeoff import evaluated  # noqa: F401  (eval --out folders, for `tradeoff`)

# runs the CLI in a fresh interpreter and reports which heavy packages the failed command imported
PROBE = """import sys
from concrete_jungle.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code
print("HEAVY", sorted({"torch", "spacy", "open_clip"} & set(sys.modules)))
sys.exit(rc)
"""


def run_probe(args, cwd):
    return subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def tree(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.processes
@pytest.mark.parametrize("args, message", [
    (["keywords", "--captions", "does/not/exist.jsonl", "--mode", "hc", "--out", "kw.jsonl"],
     "captions file not found: does/not/exist.jsonl"),
    (["gallery", "/nonexistent", "--out", "gal"], "ConcreteBatch directory not found: /nonexistent"),
    (["demo", "--pretrain-steps", "-5", "--out", "demo"], "argument --pretrain-steps: -5 must be >= 1"),
    (["eval", "--benchmarks", "foo", "--data-root", "."], "unknown benchmark(s) ['foo']"),
    (["eval", "--data-root", "/nonexistent", "--model", "cj-tiny"], "--data-root /nonexistent does not exist"),
    (["eval", "--data-root", ".", "--model", "ViT-Z-99"], "--model 'ViT-Z-99' is not an open_clip model"),
    (["plant", "--mode", "hc"], "plant needs --captions, --images, --out"),
    (["plant", "--captions", "caps.jsonl", "--images", "nope", "--out", "cb", "--mode", "hc"],
     "image directory not found: nope"),
    (["plant", "--captions", "caps.jsonl", "--images", ".", "--out", "cb", "--mode", "hc", "--captioner", "gpt9"],
     "captioner 'gpt9' is neither known"),
    (["plant", "--captions", "caps.jsonl", "--images", ".", "--out", "cb", "--mode", "hc", "--strength", "1.5"],
     "argument --strength: 1.5 must be in (0, 1]"),
    (["train"], "train needs --config FILE (e.g. configs/slipform_vitb32.yaml), or --out DIR and --data DIR"),
    (["train", "--config", "bad.yaml"], "4 problems"),
    (["analyze", "gradient-share", "--data", "/nope", "--model", "cj-tiny"], "ConcreteBatch directory not found"),
    (["analyze", "/nope"], "ConcreteBatch directory not found: /nope"),
    (["import", "negclip", "nope.tsv", "--images", ".", "--out", "cb"], "negclip input file not found: nope.tsv"),
    (["import", "negclip", "caps.jsonl", "--images", ".", "--out", "cb", "--swaps", "2"],
     "swaps: only for format coco-swaps, not negclip"),
    (["grid"], "concrete-jungle grid needs a grid file or --toy OUT (not both)"),
    (["grid", "nope.yaml"], "config file not found: nope.yaml"),
    (["wise-ft", "/nope", "/nope2", "--alpha", "0.5", "--out", "w"], "START '/nope' names no model"),
    (["wise-ft", "a", "b", "--alpha", "1.5", "--out", "w"], "argument --alpha: 1.5 must be in [0, 1]"),
    (["tradeoff", "/nope", "--out", "t"], "error: /nope does not exist; give `concrete-jungle eval --out` folders"),
    (["model-card", "/nope"], "/nope does not exist: name a checkpoint folder"),
    (["model-card", ".", "--resamples", "0"], "argument --resamples: 0 must be >= 1"),
])
def test_bad_arguments_fail_at_once_before_heavy_imports_and_leave_nothing(tmp_path, args, message):
    (tmp_path / "caps.jsonl").write_text(json.dumps({"id": "a", "caption": "A red ball", "image": "a.jpg"}) + "\n")
    (tmp_path / "bad.yaml").write_text("out: run\nbatch_size: 0\noptim: {lr: -1, lerning_rate: 2}\ncolour: red\n")
    before = tree(tmp_path)
    result = run_probe(args, tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in " ".join(result.stderr.split()), result.stderr
    assert "HEAVY []" in result.stdout, result.stdout  # torch, spaCy and open_clip were never imported
    assert tree(tmp_path) == before  # no file or folder left behind


def test_a_config_with_several_errors_reports_every_one(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("out: run\nbatch_size: 0\noptim: {lr: -1, lerning_rate: 2}\ncolour: red\n")
    assert main(["train", "--config", str(tmp_path / "bad.yaml")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    for problem in ("4 problems", "bad.yaml: unknown key(s) 'colour'", "bad.yaml.optim: unknown key(s) "
                    "'lerning_rate'", "optim.lr must be > 0, got -1.0 (flag --lr)",
                    "batch_size must be >= 1, got 0 (flag --batch-size)"):
        assert problem in err, err
    # keys and values right, what they point at wrong: every such problem at once too
    (tmp_path / "refs.yaml").write_text("out: run\nmodel: {name: ViT-Z-99}\neval: {every: 5, benchmarks: [sugar]}\n")
    assert main(["train", "--config", str(tmp_path / "refs.yaml")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    for problem in ("model.name 'ViT-Z-99' is not an open_clip model", "no training data: pass --data DIR",
                    "eval.every needs eval.benchmarks and eval.data_root", "eval.benchmarks ['sugar'] unknown"):
        assert problem in err, err


def test_every_option_has_help_and_there_is_a_version(capsys):
    def parsers(parser):
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from parsers(sub)

    missing = [f"{p.prog} {a.option_strings or a.dest}" for p in parsers(build_parser()) for a in p._actions
               if not a.help and not isinstance(a, argparse._SubParsersAction)]
    assert not missing, missing
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"concrete-jungle {__version__}"
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    assert "sugarcrepe/data/*.json (git clone https://github.com/RAIVNLab/sugar-crepe" in " ".join(
        capsys.readouterr().out.split())  # the data layout, with its download, is in the help itself
    with pytest.raises(SystemExit):
        main(["analyze", "gradient-share", "--help"])
    assert "--batch-sizes" in capsys.readouterr().out
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert {"import", "grid", "wise-ft", "tradeoff", "model-card"} <= set(commands)
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = capsys.readouterr().out
    for name in commands:  # every command is listed in the help, and has its own
        assert re.search(rf"^ +{re.escape(name)}( |$)", listed, re.M), name
        with pytest.raises(SystemExit) as done:
            main([name, "--help"])
        printed = capsys.readouterr().out
        assert done.value.code == 0 and printed.startswith(f"usage: concrete-jungle {name} ")
        assert "%%" not in printed, name  # a description is printed as written, unlike an option's help


def test_eval_check_reports_the_layout_without_a_model(data_root, capsys):
    assert main(["eval", "--check", "--benchmarks", "sugarcrepe,sugarcrepe_pp", "--data-root", str(data_root)]) == 0
    out = capsys.readouterr().out
    assert "sugarcrepe" in out and "39" in out and "no model was loaded" in out


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_written_files_honour_the_umask(tmp_path, umask, mode):
    import torch

    from concrete_jungle.models import save_checkpoint
    from concrete_jungle.records import atomic_write_json
    from test_gallery import make_concretebatch

    data = make_concretebatch(tmp_path, "D_hc")
    old = os.umask(umask)
    try:
        atomic_write_json(tmp_path / "out" / "results.json", {"a": 1})
        assert main(["gallery", str(data), "--out", str(tmp_path / "out" / "gallery")]) == 0
        model = torch.nn.Linear(2, 2)
        save_checkpoint(tmp_path / "out" / "ckpt", model, {"model_cfg": {}, "preprocess_cfg": {}})
    finally:
        os.umask(old)
    files = [p for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert len(files) > 5
    assert {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == \
        {str(p.relative_to(tmp_path)): oct(mode) for p in files}


@pytest.mark.processes
@pytest.mark.parametrize("args, meant", [(["plant", "--captoins", "x.jsonl"], "--captions"),
                                         (["train", "--stpes", "3"], "--steps"),
                                         (["analyze", "gradient-share", "--data", "x", "--batchs", "3"], "--batches"),
                                         (["import", "negclip", "x", "--out", "cb", "--sample-per-shard", "4"],
                                          "--samples-per-shard"),
                                         (["grid", "--toyy", "runs/grid"], "--toy"),
                                         (["wise-ft", "a", "b", "--alpha", "0.5", "--out", "w", "--ovewrite",
                                           "x"], "--overwrite"),
                                         (["tradeoff", "x", "--out", "t", "--resampels", "3"], "--resamples"),
                                         (["model-card", "x", "--resampels", "3"], "--resamples")])
def test_a_misspelled_flag_is_named_with_the_flag_meant(args, meant):
    done = cli(*args)
    assert done.returncode == 2
    assert f"unrecognized arguments: {args[-2]} (did you mean {meant}?)" in done.stderr
    assert "invalid choice" not in done.stderr


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def capabilities(effective=None):
    """This thread's capability sets (Linux, version 3 of the interface); with ``effective``, that set put first."""
    libc = ctypes.CDLL(None, use_errno=True)
    header, data = CapHeader(0x20080522, 0), (CapData * 2)()
    assert libc.capget(ctypes.byref(header), data) == 0, os.strerror(ctypes.get_errno())
    if effective is not None:
        data[0].effective = effective
        assert libc.capset(ctypes.byref(header), data) == 0, os.strerror(ctypes.get_errno())
    return data[0].effective


@contextlib.contextmanager
def read_only(folder):
    """``folder`` read-only (mode 555) for the commands run in this thread. Root writes into any folder: when the
    tests run as root, this thread also gives up CAP_DAC_OVERRIDE (capability 1) until the block ends."""
    mode = folder.stat().st_mode
    folder.chmod(0o555)
    saved = capabilities() if os.geteuid() == 0 else None
    if saved is not None:
        capabilities(saved & ~(1 << 1))
    try:
        yield
    finally:
        if saved is not None:
            capabilities(saved)
        folder.chmod(mode)


COMMANDS_THAT_WRITE = ["keywords", "plant", "import", "train", "cache", "eval", "gallery", "analyze", "export",
                       "grid", "wise-ft", "tradeoff", "model-card"]


def command_args(command, folder, planted, data_root, tmp_path, request) -> list:
    """The arguments with which ``command`` writes into ``folder``, made here: empty, or a copy of the input the
    command writes into (a dataset for `cache`, a checkpoint for `model-card`)."""
    from plant_fixtures import make_dataset, plant_args
    from test_wise_ft import checkpoint

    captions, images = make_dataset(tmp_path, 4, image_size=8)
    model = ["--model", "cj-tiny", "--pretrained", "none"]
    if command == "cache":  # the cache is written into the dataset's folder
        shutil.copytree(planted, folder)
    elif command == "model-card":  # the card is written into the checkpoint's folder
        shutil.copytree(checkpoint(tmp_path, "start"), folder)
    else:
        folder.mkdir()
    if command == "import":
        from test_import import write_negclip

        tsv = write_negclip(tmp_path / "negclip")[0]
        return ["import", "negclip", tsv, "--images", tmp_path / "negclip", "--out", folder / "cb", "--no-progress"]
    if command == "grid":
        from test_grid import grid_file

        return ["grid", grid_file(tmp_path, {"cb": planted}, data_root, out=str(folder / "grid")), "--no-progress"]
    if command == "wise-ft":
        ends = checkpoint(tmp_path, "start"), checkpoint(tmp_path, "tuned", nudge=0.05)
        return ["wise-ft", *ends, "--alpha", "0.5", "--out", folder / "wise"]
    if command == "tradeoff":
        evaluated = request.getfixturevalue("evaluated")
        return ["tradeoff", evaluated["start"], evaluated["tuned"], "--out", folder / "tradeoff"]
    return {"keywords": ["keywords", "--captions", captions, "--mode", "hc", "--out", folder / "kw.jsonl",
                         "--no-progress"],
            "plant": plant_args(captions, images, folder / "cb"),
            "train": ["train", "--data", planted, "--out", folder / "run", "--steps", "1", *TINY_TRAIN],
            "cache": ["cache", folder, *model, "--workers", "0", "--no-progress"],
            "eval": ["eval", "--data-root", data_root, *model, "--out", folder / "results", "--no-progress"],
            "gallery": ["gallery", planted, "--out", folder / "gallery"],
            "analyze": ["analyze", planted, *model, "--out", folder / "report"],
            "export": ["export", planted, folder / "export", "--no-progress"],
            "model-card": ["model-card", folder]}[command]


@pytest.mark.system_packages  # plant's captioner gives a note of its own where WordNet is missing
@pytest.mark.parametrize("command", COMMANDS_THAT_WRITE)
def test_a_read_only_output_folder_is_one_line_naming_it(command, planted, data_root, tmp_path, capsys, request):
    if sys.platform != "linux" and os.geteuid() == 0:
        pytest.skip("root writes into read-only folders; dropping that right needs Linux")
    folder = tmp_path / "read-only"
    args = command_args(command, folder, planted, data_root, tmp_path, request)
    before = tree(folder)
    capsys.readouterr()
    with read_only(folder):
        assert main(list(map(str, args))) == 2
    err = capsys.readouterr().err
    # a command's own notes come first, each a line of its own ("plant: WordNet 3.0 is not installed ..." where
    # WordNet is missing); the error is the one line left
    error = [line for line in err.splitlines() if not line.startswith(f"{command}: ")]
    assert len(error) == 1 and "Traceback" not in err, err
    assert f"error: cannot write into {folder}: Permission denied; choose an output folder you can write to" in err
    assert tree(folder) == before


def test_plant_without_a_mode_names_the_mode_alone(tmp_path, capsys):
    (tmp_path / "caps.jsonl").write_text(json.dumps({"id": "a", "caption": "A red ball", "image": "a.jpg"}) + "\n")
    assert main(["plant", "--captions", str(tmp_path / "caps.jsonl"), "--images", str(tmp_path),
                 "--out", str(tmp_path / "cb")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err == "error: concrete-jungle plant needs --mode (hc, lc or wo) (or --config FILE)"  # nothing on --images


def test_plant_merge_help_is_merge_s_own_and_keywords_help_says_what_workers_do(capsys):
    with pytest.raises(SystemExit):
        main(["plant", "merge", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: concrete-jungle plant merge [-h] DIR")
    assert "join the parts' manifests" in out and "--captions" not in out and "--editor" not in out
    with pytest.raises(SystemExit):
        main(["plant", "--help"])
    assert "--captions" in capsys.readouterr().out  # plant's own help is whole
    with pytest.raises(SystemExit):
        main(["keywords", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "processes that parse captions and extract their candidates (default 1: this process); sampling stays " \
           "in this process" in out


def test_train_loss_takes_every_loss_a_config_names(capsys):
    from concrete_jungle.loss.options import LOSS_NAMES

    assert len(LOSS_NAMES) == 10  # Cement's loss with its 4 schedules, and the peers' 6 losses
    for name in LOSS_NAMES:
        assert main(["train", "--out", "run", "--data", "cb", "--loss", name, "--print-config"]) == 0
        assert f"name: {name}\n" in capsys.readouterr().out
    # what the flag refuses, a recipe's loss.name refuses: the schedules' names in 0.2.0 among them
    for name in ("adaptive", "none", "triplet"):
        with pytest.raises(SystemExit):
            main(["train", "--out", "run", "--data", "cb", "--loss", name, "--print-config"])
        assert f"invalid choice: '{name}'" in capsys.readouterr().err
        assert main(["train", "--out", "run", "--data", "cb", "--set", f"loss.name={name}", "--print-config"]) != 0
        assert f"loss.name '{name}' is not one of {', '.join(LOSS_NAMES)}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "cement (adaptive margin), infonce (no margin), static (loss.static_margin), inverse" in help_text
    assert "negclip, tripletclip, ce_clip, fsc_clip, degla, clic" in help_text


def test_print_config_prints_the_resolved_config_of_train_and_plant_and_writes_nothing(tmp_path):
    """There was no way to see the config a `train` or `plant` would run with (file, flags and --set merged)."""
    import yaml

    from concrete_jungle.train.config import load_config

    (tmp_path / "c.yaml").write_text("out: run\noptim: {lr: 1e-4}\nsteps: 5\n")
    before = tree(tmp_path)
    result = run_probe(["train", "--config", "c.yaml", "--steps", "7", "--set", "optim.warmup=3", "--print-config"],
                       tmp_path)
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stdout and tree(tmp_path) == before
    printed = yaml.safe_load(result.stdout.split("HEAVY")[0])
    assert printed["steps"] == 7 and printed["optim"]["lr"] == 1e-4 and printed["optim"]["warmup"] == 3
    (tmp_path / "printed.yaml").write_text(result.stdout.split("HEAVY")[0])
    assert load_config(str(tmp_path / "printed.yaml"), []) == load_config(
        str(tmp_path / "c.yaml"), ["steps=7", "optim.warmup=3"])  # what it prints is a config file of the same run
    (tmp_path / "caps.jsonl").write_text(json.dumps({"id": "a", "caption": "A red ball", "image": "a.jpg"}) + "\n")
    before = tree(tmp_path)
    result = run_probe(["plant", "--captions", "caps.jsonl", "--images", ".", "--out", "cb", "--mode", "hc",
                        "--samples-per-shard", "16", "--print-config"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stdout and tree(tmp_path) == before
    printed = yaml.safe_load(result.stdout.split("HEAVY")[0])
    assert printed["out"] == "cb" and printed["samples_per_shard"] == 16
