"""The package's shape: no import cycle between its modules, and docs/architecture.md names only modules that exist."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "concrete_jungle"


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at the top or inside a function (a lazy import is an edge too:
    it runs whenever that function does)."""
    modules = {module_name(p, package): p for p in package.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".")
                    base = base[: len(base) - node.level + (1 if is_package else 0)]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                # `from .x import y` imports x, and x.y when y is a module of its own
                targets = [stem] + [f"{stem}.{a.name}" for a in node.names]
            else:
                continue
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert "concrete_jungle.plant.ray" in graph["concrete_jungle.plant"]  # lazy imports are edges too
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_a_lazy_cycle(tmp_path):
    pkg = tmp_path / "concrete_jungle"
    (pkg / "plant").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "plant" / "__init__.py").write_text("")
    (pkg / "plant" / "stages.py").write_text("def run():\n    from .ray import process\n")
    (pkg / "plant" / "ray.py").write_text("from .stages import run\n")
    cycle = find_cycle(import_graph(pkg))
    assert cycle is not None and set(cycle) == {"concrete_jungle.plant.stages", "concrete_jungle.plant.ray"}


def test_engines_depend_on_the_stages_never_the_reverse():
    graph = import_graph()
    for engine in ("local", "ray"):
        assert f"concrete_jungle.plant.{engine}" not in graph["concrete_jungle.plant.stages"]
    assert "concrete_jungle.plant.stages" in graph["concrete_jungle.plant.ray"]


def test_no_module_is_over_500_lines():
    sizes = {p.relative_to(PACKAGE).as_posix(): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert len(sizes) > 50
    assert {m: n for m, n in sizes.items() if n > 500} == {}


def test_architecture_doc_names_only_modules_that_exist():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`([\w/]+(?:\.py|/))`", doc))
    assert len(named) > 20  # the page is a map of the package, not a paragraph
    missing = sorted(n for n in named if not (PACKAGE / n).exists() and not (ROOT / n).exists())
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


# The layers, lowest first: a module may import its own unit (top-level module or package) and units of lower
# layers, never one of its own layer or above. Stages do not import each other, except that training runs the
# evaluation hook (`train` sits one layer above `evaluation`).
LAYERS = [
    {"errors", "loss_options"},
    {"records", "configs", "stats", "images", "plugins", "checkpoints", "text_encoding", "loss", "tiny", "nlp",
     "locks", "tar_archive"},
    {"registry", "outputs", "identity"},
    {"models", "token_features"},
    {"sources", "concretebatch"},
    {"export", "wise_ft"},
    {"plant", "evaluation"},
    {"train", "analysis"},
    {"toyworld"},
    {"experiments"},
    {"cli"},
]


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layering_violations(graph: dict[str, set[str]], layers: list[set[str]] = LAYERS) -> list[str]:
    rank = {unit: i for i, layer in enumerate(layers) for unit in layer}
    found = []
    for module, targets in graph.items():
        here = unit_of(module)
        for target in targets:
            there = unit_of(target)
            if here and there and here != there and rank[there] >= rank[here]:
                found.append(f"{module} -> {target}")
    return sorted(found)


def test_every_unit_of_the_package_has_a_layer():
    units = {unit_of(m) for m in import_graph()} - {""}
    assert units == set().union(*LAYERS)


def test_no_module_imports_its_own_layer_or_one_above():
    assert layering_violations(import_graph()) == []


def test_the_layering_rule_finds_a_planted_upward_import(tmp_path):
    pkg = tmp_path / "concrete_jungle"
    (pkg / "train").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "records.py").write_text("def write():\n    from .train.loop import train\n")  # a helper calling up
    (pkg / "train" / "__init__.py").write_text("")
    (pkg / "train" / "loop.py").write_text("from ..records import write\n")
    (pkg / "plant.py").write_text("from .evaluation import run\n")  # a stage calling a stage of its layer
    (pkg / "evaluation.py").write_text("run = None\n")
    assert layering_violations(import_graph(pkg)) == ["concrete_jungle.plant -> concrete_jungle.evaluation",
                                                      "concrete_jungle.records -> concrete_jungle.train.loop"]


def test_modules_moved_in_0_2_still_import_by_their_old_names_with_a_warning():
    code = """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    from concrete_jungle.train_config import TrainConfig
    from concrete_jungle.captioners import Captioner
    from concrete_jungle.captioners.rules import RulesCaptioner
    import concrete_jungle.editors as editors
from concrete_jungle.train.config import TrainConfig as now
from concrete_jungle.plant.captioners import Captioner as captioner_now
from concrete_jungle.plant.captioners.rules import RulesCaptioner as rules_now
from concrete_jungle.plant.editors import Editor
assert TrainConfig is now and Captioner is captioner_now and RulesCaptioner is rules_now and editors.Editor is Editor
print(sorted(str(w.message) for w in caught if w.category is DeprecationWarning))
"""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == str(sorted(
        f"concrete_jungle.{old} moved to concrete_jungle.{new}; the old name goes in 0.3"
        for old, new in [("captioners", "plant.captioners"), ("captioners.rules", "plant.captioners.rules"),
                         ("editors", "plant.editors"), ("train_config", "train.config")]))
