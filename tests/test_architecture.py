"""The package's shape: no import cycle between its modules, and docs/architecture.md names only modules that exist."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "concrete_jungle"


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_statements(tree: ast.Module):
    """The nodes that run when the module is imported: everything outside a function's body."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef)))


def import_graph(package: Path = PACKAGE, lazy: bool = True) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at the top or inside a function (a lazy import is an edge too:
    it runs whenever that function does; ``lazy=False`` leaves those out)."""
    modules = {module_name(p, package): p for p in package.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        edges = set()
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree) if lazy else top_level_statements(tree):
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
    {"errors"},
    {"records", "configs", "outcomes", "images", "nlp"},
    {"files"},
    {"models"},
    {"loss"},
    {"sources", "concretebatch"},
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


@pytest.mark.processes
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



@pytest.mark.parametrize("old, new", sorted(__import__("concrete_jungle").MOVED.items()))
def test_a_moved_module_imports_by_its_old_name_with_a_warning(old, new):
    import importlib
    import sys

    sys.modules.pop(f"concrete_jungle.{old}", None)  # imported before: import it again, as a first import would
    with pytest.warns(DeprecationWarning, match=rf"^concrete_jungle\.{old} moved to concrete_jungle\.{new}; the old "
                                                r"name goes in 0\.3$"):
        module = importlib.import_module(f"concrete_jungle.{old}")
    target = importlib.import_module(f"concrete_jungle.{new}")
    names = {k for k in vars(target) if not k.startswith("__")}
    assert names and all(getattr(module, k) is getattr(target, k) for k in names)


# modules a torch-free command or config check imports: none of them may import torch (or open_clip)
TORCH_FREE = ["concrete_jungle", "concrete_jungle.configs", "concrete_jungle.errors", "concrete_jungle.records",
              "concrete_jungle.outcomes", "concrete_jungle.files.locks", "concrete_jungle.files.outputs",
              "concrete_jungle.files.identity", "concrete_jungle.files.tar_archive", "concrete_jungle.models",
              "concrete_jungle.models.pretrained", "concrete_jungle.models.checkpoints",
              "concrete_jungle.models.wise_ft", "concrete_jungle.loss.options", "concrete_jungle.concretebatch",
              "concrete_jungle.concretebatch.export", "concrete_jungle.plant.plugins", "concrete_jungle.train.config",
              "concrete_jungle.evaluation.names", "concrete_jungle.loss_options", "concrete_jungle.registry",
              "concrete_jungle.stats"]


def test_the_torch_free_modules_and_their_packages_import_without_torch():
    import subprocess
    import sys

    code = ("import importlib, sys, warnings\nwarnings.simplefilter('ignore', DeprecationWarning)\n"
            f"for name in {TORCH_FREE!r}:\n    importlib.import_module(name)\n"
            "    if {'torch', 'open_clip'} & set(sys.modules):\n        print(name, 'imports torch')\n        break\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout == ""


def test_the_architecture_doc_quotes_the_counts_of_the_package():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    quoted = doc.split("<!-- python tests/test_architecture.py -->\n```text\n", 1)[1].split("```", 1)[0]
    assert quoted == counts() + "\n", "docs/architecture.md: paste what python tests/test_architecture.py prints"


def test_the_counts_see_lazy_imports_and_import_module_dispatch_up_and_in_circles(tmp_path):
    pkg = tmp_path / "concrete_jungle"
    (pkg / "train").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "records.py").write_text("from importlib import import_module\n\n\ndef write():\n"
                                    "    return import_module('.train.loop', __package__)\n")  # a helper calling up
    (pkg / "train" / "__init__.py").write_text("")
    (pkg / "train" / "loop.py").write_text("from ..records import write\n")
    (pkg / "evaluation.py").write_text("def run():\n    from .records import write\n")
    assert counts(pkg, dispatch={}).splitlines() == [
        "units: 3 (2 modules at the package root, 1 packages), 11 layers",
        "edges between units at import time: 1",
        "edges between units with lazy imports: 2",
        "edges between units with lazy imports and import_module dispatch: 3",
        "upward or sideways, lazy imports included: 0 between units (0 between modules)",
        "upward or sideways, import_module dispatch included: 1 between units (1 between modules)",
        "    records -> train.loop",
        "circles (modules that import each other), lazy imports included: 0",
        "circles (modules that import each other), import_module dispatch included: 1",
        "    2 modules of records, train"]
    (pkg / "evaluation.py").write_text("import importlib\n\n\ndef run(name):\n"
                                       "    return importlib.import_module(f'.{name}', __package__)\n")
    with pytest.raises(AssertionError, match=r"concrete_jungle/evaluation.py, line 5: import_module of a computed"):
        counts(pkg, dispatch={})


# ------------------------------------------------------------------------------------------------------ the counts
# `import_module` of a name computed at run time: where each such call of the package can lead. A new one must be
# listed here (`dispatch_graph` refuses one that is not), so that no dispatch by name hides an edge from the counts.
def benchmark_modules() -> set[str]:
    from concrete_jungle.evaluation.names import BENCHMARKS, module_of

    return {f"concrete_jungle.evaluation.{module_of(name)}" for name in BENCHMARKS}


def builtin_plugin_modules() -> set[str]:
    from concrete_jungle.plant.plugins import BUILTIN

    return {path.partition(":")[0] for paths in BUILTIN.values() for path in paths.values()}


def moved_modules() -> set[str]:
    from concrete_jungle import MOVED

    return {f"concrete_jungle.{new}" for new in MOVED.values()}


DISPATCH = {
    "concrete_jungle": moved_modules,  # the names moved in 0.2
    "concrete_jungle.evaluation": benchmark_modules,  # read_benchmark, evaluate_one
    "concrete_jungle.evaluation.chance": benchmark_modules,  # item_chances
    "concrete_jungle.plant.plugins": builtin_plugin_modules,  # the built-in captioners, editors and scorers
    "concrete_jungle.sources.peers.ceclip": set,  # NumPy's classes that a pickled array names, nothing of ours
}


def dispatch_graph(package: Path = PACKAGE, dispatch: dict = DISPATCH) -> dict[str, set[str]]:
    """Module -> the package's modules it reaches through `import_module`: a literal name resolved as Python does, a
    computed one by the module's entry in ``dispatch``."""
    modules = {module_name(p, package): p for p in package.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and node.args and
                    getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                target = first.value.lstrip(".")
                level = len(first.value) - len(target)
                if level:  # relative to the calling module's package, as `from .x import` is
                    base = name.split(".")[: len(name.split(".")) - level + (path.name == "__init__.py")]
                    target = ".".join(base + [target])
                edges.add(target)
            elif name in dispatch:
                edges |= dispatch[name]()
            else:
                raise AssertionError(f"{path.relative_to(package.parent)}, line {node.lineno}: import_module of a "
                                     f"computed name; list where it can lead in DISPATCH (tests/test_architecture.py)")
        graph[name] = {t for t in edges if t in modules and t != name}
    return graph


def unit_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(unit_of(m), unit_of(t)) for m, targets in graph.items() for t in targets
            if unit_of(m) and unit_of(t) and unit_of(m) != unit_of(t)}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of two or more modules each of which reaches every other one by imports: the circles."""
    reach = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        reach[start] = seen
    groups = {frozenset(m for m in reach[n] if n in reach[m]) | {n} for n in graph}
    return sorted(sorted(g) for g in groups if len(g) > 1)


def counts(package: Path = PACKAGE, dispatch: dict = DISPATCH) -> str:
    """The package's shape in numbers, as docs/architecture.md quotes it (`python tests/test_architecture.py`)."""
    at_import, lazy = import_graph(package, lazy=False), import_graph(package)
    by_name = {m: lazy[m] | d for m, d in dispatch_graph(package, dispatch).items()}
    root = {unit_of(m) for m in lazy if len(m.split(".")) == 2 and not (package / unit_of(m)).is_dir()}
    units = {unit_of(m) for m in lazy} - {""}

    def against_the_layers(graph):
        found = layering_violations(graph)
        pairs = {tuple(unit_of(m) for m in v.split(" -> ")) for v in found}
        return f"{len(pairs)} between units ({len(found)} between modules)" + "".join(
            "\n    " + v.replace("concrete_jungle.", "") for v in found)

    def circles(graph):
        found = strongly_connected(graph)
        return f"{len(found)}" + "".join(
            f"\n    {len(c)} modules of {', '.join(sorted({unit_of(m) or '(the package root)' for m in c}))}"
            for c in found)

    return "\n".join([
        f"units: {len(units)} ({len(root)} modules at the package root, {len(units - root)} packages), "
        f"{len(LAYERS)} layers",
        f"edges between units at import time: {len(unit_edges(at_import))}",
        f"edges between units with lazy imports: {len(unit_edges(lazy))}",
        f"edges between units with lazy imports and import_module dispatch: {len(unit_edges(by_name))}",
        f"upward or sideways, lazy imports included: {against_the_layers(lazy)}",
        f"upward or sideways, import_module dispatch included: {against_the_layers(by_name)}",
        f"circles (modules that import each other), lazy imports included: {circles(lazy)}",
        f"circles (modules that import each other), import_module dispatch included: {circles(by_name)}",
    ])


if __name__ == "__main__":
    print(counts())
