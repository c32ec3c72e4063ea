"""The README and docs/ as a newcomer follows them: their command blocks, and the folders those write into."""

import fnmatch
import re
from pathlib import Path

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
    assert {p.name for p in long_pages} >= {"method.md", "benchmarks.md", "commands.md"}
    for path in long_pages:
        text = path.read_text(encoding="utf-8")
        links = set(re.findall(r"^ *- \[.*?\]\(#([^)]+)\)", text, re.M))
        missing = [h for h in re.findall(r"^## (.+)$", text, re.M) if github_anchor(h) not in links]
        assert not missing, (path.name, missing)


def test_the_demo_s_times_are_quoted_from_their_one_source():
    source = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    default, quick = (re.search(rf"time concrete-jungle demo {flag}--out \S+ --no-progress +# (.+)$", source,
                                re.M).group(1) for flag in ("", "--quick "))
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert f"({default} on 2 idle cores; `--quick`, {quick};" in readme
    assert "docs/benchmarks.md#the-demos-wall-time-concrete-jungle-demo" in readme
    commands = (REPO / "docs" / "commands.md").read_text(encoding="utf-8")
    assert re.search(rf"^concrete-jungle demo +# {default} on 2 idle cores", commands, re.M)
    assert re.search(rf"^concrete-jungle demo --quick +# {quick} on 2 idle cores", commands, re.M)


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
