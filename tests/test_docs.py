"""The README and docs/ as a newcomer follows them: their command blocks, and the folders those write into."""

import fnmatch
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def bash_blocks(path: Path) -> list[str]:
    """The ```bash blocks of a Markdown file, each its text with continued lines joined."""
    blocks = re.findall(r"^```bash\n(.*?)^```", path.read_text(encoding="utf-8"), re.M | re.S)
    return [block.replace("\\\n", " ") for block in blocks]


def ignored(top: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(top, p.strip("/")) for p in patterns if p.endswith("/"))


def test_every_folder_the_docs_write_into_is_ignored_by_git():
    patterns = [line.strip() for line in (REPO / ".gitignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    outs = {(path.name, m) for path in DOCS for block in bash_blocks(path)
            for m in re.findall(r"--out (\S+/\S*)", block)}  # a folder (a bare file name is the user's choice)
    tops = {(name, out.split("/")[0]) for name, out in outs
            if not out.startswith(("/", "$", "~", ".")) and not out.split("/")[0].isupper()}
    assert len(tops) > 5
    assert not [f"{name}: --out {top}/" for name, top in tops if not ignored(top, patterns)]


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation but '-' and '_' dropped, spaces made '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_long_page_has_contents_linking_each_section():
    long_pages = [path for path in DOCS if len(path.read_text(encoding="utf-8").splitlines()) > 400]
    assert {p.name for p in long_pages} >= {"method.md", "benchmarks.md"}
    for path in long_pages:
        text = path.read_text(encoding="utf-8")
        links = set(re.findall(r"^ *- \[.*?\]\(#([^)]+)\)", text, re.M))
        missing = [h for h in re.findall(r"^## (.+)$", text, re.M) if github_anchor(h) not in links]
        assert not missing, (path.name, missing)


def headings(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (code blocks aside)."""
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {github_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_every_link_between_the_docs_reaches_a_file_and_its_heading():
    broken = []
    for page in DOCS:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists() or anchor and dest.suffix == ".md" and anchor not in headings(dest):
                broken.append(f"{page.relative_to(REPO).as_posix()}: {target}")
    assert not broken, "\n".join(broken)


def test_the_commands_index_links_every_page_of_docs_commands():
    index = (REPO / "docs" / "commands.md").read_text(encoding="utf-8")
    pages = sorted(p.name for p in (REPO / "docs" / "commands").glob("*.md"))
    assert len(pages) >= 6 and all(f"(commands/{name}" in index for name in pages)


def test_the_demo_s_and_the_test_suite_s_times_are_quoted_from_their_one_source():
    source = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    default, quick = (re.search(rf"time concrete-jungle demo {flag}--out \S+ --no-progress +# (.+)$", source,
                                re.M).group(1) for flag in ("", "--quick "))
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert f"({default} on 2 idle cores; `--quick`, {quick};" in readme
    assert "docs/benchmarks.md#the-demos-wall-time-concrete-jungle-demo" in readme
    commands = (REPO / "docs" / "commands" / "demo.md").read_text(encoding="utf-8")
    assert re.search(rf"^concrete-jungle demo +# {default} on 2 idle cores", commands, re.M)
    assert re.search(rf"^concrete-jungle demo --quick +# {quick} on 2 idle cores", commands, re.M)
    suite = re.search(r"^\| the README's test command .*\| ([\d,]+) passed \| (\d+ min \d+ s) \|$", source, re.M)
    assert f"(in two worker processes, {suite.group(2)} on 2 idle cores:" in readme


def documented_commands() -> list[tuple[str, str]]:
    """Every `concrete-jungle` command line of the README's and the docs' bash blocks, by page, comments cut."""
    out = []
    for path in DOCS:
        for block in bash_blocks(path):
            for line in block.splitlines():
                line = re.sub(r"\s+#.*$", "", line.strip())
                for part in re.split(r"\s*(?:&&|\|)\s*", line):
                    if part.startswith("concrete-jungle "):
                        out.append((path.relative_to(REPO).as_posix(), part))
    return out


def test_every_documented_command_line_parses(capsys):
    import shlex

    from concrete_jungle.cli import build_parser

    commands = documented_commands()
    assert len(commands) > 50
    refused = []
    for page, line in commands:
        try:
            # a shell substitution, $(...), is one word of the command
            build_parser().parse_args(shlex.split(re.sub(r"\$\([^)]*\)", "SUBSTITUTED", line))[1:])
        except SystemExit:
            refused.append(f"{page}: {line}: {capsys.readouterr().err.strip().splitlines()[-1]}")
    assert not refused, "\n".join(refused)


# ------------------------------------------------------------------------------- every command block, run as written

# why a block cannot run here, each with the check that it is so: a block is skipped for the first reason whose check
# holds of its text, and every other block is run
NEEDS = (
    ("needs a GPU (or a GPU server: vLLM, SDXL-Turbo, Ray with GPUs, torchrun)",
     lambda block: re.search(r"torchrun|vllm serve|--editor diffusers|--ray-edit-gpus|on a GPU|--engine ray", block)),
    ("needs the network (pip, a pretrained model's weights, the Hugging Face Hub)",
     lambda block: re.search(r"pip install|--pretrained (openai|meta)|:openai |hf upload|peer:|--dino-model|"
                             r"--bertscore-model", block) or any(config_needs(block, "network"))),
    ("needs real COCO or a peer's released files (not made by the toy world)",
     lambda block: re.search(r"dataset_coco\.json|captions_train2014|train_neg_clip|valid_neg_clip|TripletCLIP|"
                             r"vismin|Enhance-FineGrained|data/coco|--data-root data/", block)
     or any(config_needs(block, "COCO"))),
    ("runs for many minutes to hours on a CPU (the default demo, a study, the full toy grid)",
     lambda block: re.search(r"^concrete-jungle demo( --study)? +#|study run|grid --toy runs/grid( |$)", block, re.M)),
    ("filters on relation edits, which the toy world's D_hc does not hold (it has attribute and object edits)",
     lambda block: "--filter category=relation" in block),
    ("reads the results of blocks above that need the network",
     lambda block: re.search(r"=results/|--results results/", block) and "--out results/$" not in block
     and not set(re.findall(r"results/[\w.-]+", block)) <= written_by_runnable_blocks()),
)


def config_needs(block: str, what: str):
    """For each config the block runs with: whether it needs the network (downloaded weights, a served model) or
    real COCO (``what``)."""
    import yaml

    for name in re.findall(r"--config (\S+\.yaml)", block):
        config = yaml.safe_load((REPO / name).read_text())
        model = config.get("model") or {}
        yield model.get("pretrained") not in (None, "none") or config.get("captioner") in ("openai", "vllm", "hf") \
            if what == "network" else "data/coco" in json.dumps(config)


def written_by_runnable_blocks() -> set[str]:
    """The results/ folders that blocks which need nothing of the above write."""
    return {m for _, block in command_blocks() if not any(needs(block) for _, needs in NEEDS[:-1])
            for m in re.findall(r"--out (results/[\w.-]+)", block)}


def command_blocks() -> list[tuple[str, str]]:
    """(page#index, block) for every bash block of the README and docs/*.md."""
    return [(f"{path.relative_to(REPO).as_posix()}#{i}", block) for path in DOCS if path.parent.name != "studies"
            for i, block in enumerate(bash_blocks(path))]


def skip_reason(block: str) -> str | None:
    return next((why for why, needs in NEEDS if needs(block)), None)


@pytest.fixture(scope="module")
def toy_workspace(tmp_path_factory):
    """What a newcomer has after the README's first steps, made by the project: `demo --quick` in runs/demo, the
    world's training captions and pictures as captions.jsonl and imgs/ (the docs' own files' names), and the demo's
    D_hc, D_lc and D_wo as runs/D_hc, runs/D_lc, runs/D_wo."""
    home = tmp_path_factory.mktemp("docs-workspace")
    run_block("concrete-jungle demo --quick --out runs/demo --no-progress", home)
    return home


def workspace_for(block: str, home: Path, tmp: Path) -> Path:
    """A fresh folder holding links to the workspace's files, but for the datasets the block writes itself."""
    world = next((home / "runs" / "demo").glob("world-*"))
    for part in ("docs", "examples", "configs"):  # the clone's own files, which blocks name from its root
        (tmp / part).symlink_to(REPO / part, target_is_directory=True)
    (tmp / "runs").mkdir()
    (tmp / "runs" / "demo").symlink_to(home / "runs" / "demo", target_is_directory=True)
    (tmp / "captions.jsonl").symlink_to(world / "captions.jsonl")
    (tmp / "imgs").symlink_to(world / "images", target_is_directory=True)
    for mode in ("hc", "lc", "wo"):
        if not re.search(rf"--out runs/D_{mode}(\s|$)", block):
            (tmp / "runs" / f"D_{mode}").symlink_to((home / "runs" / "demo" / f"D_{mode}").resolve(),
                                                    target_is_directory=True)
    return tmp


def run_block(block: str, cwd: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), OMP_NUM_THREADS="1")
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=cwd, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, f"{block}\nexit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def test_every_skipped_block_has_a_reason_and_some_blocks_run():
    blocks = command_blocks()
    runnable = [name for name, block in blocks if skip_reason(block) is None]
    assert len(blocks) > 30 and len(runnable) >= 5, runnable
    # the reasons are not a blanket: each one skips some block, and no block is skipped for a reason that is not so
    used = {skip_reason(block) for _, block in blocks} - {None}
    assert used == {why for why, _ in NEEDS}


@pytest.mark.slow
@pytest.mark.processes
@pytest.mark.parametrize("name", [name for name, _ in command_blocks()])
def test_a_docs_command_block_runs_as_written_on_the_toy_world(name, toy_workspace, tmp_path):
    block = dict(command_blocks())[name]
    why = skip_reason(block)
    if why:
        pytest.skip(why)
    run_block(block, workspace_for(block, toy_workspace, tmp_path))
