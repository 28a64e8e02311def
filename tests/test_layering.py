"""The import layering: no module imports itself back through others, dependencies between the
packages point one way, and LangGraph stays in graph/ and nodes/.

    {graph, nodes} -> {run_vocabulary, evals, dsl_compiler, sol_models};  evals -> {run_vocabulary, dsl_compiler, sol_models};
    sol_models -> dsl_compiler;  run_vocabulary -> dsl_compiler (its diagnostics, its backend names);  dsl_compiler -> nothing of ours.

run_vocabulary/ is the bottom of the run vocabulary: its leaves ``run_vocabulary.problem`` and ``run_vocabulary.defaults`` import nothing of
ours, and they are all of it that the compiler and the SOL models may import (they type against the problem).
Nodes import nothing of evals (the judge and the libraries are reached through ``graph.context.Services``).

graph/ and nodes/ form one layer: only the graph's builder and runner import nodes, and no node
imports the builder or the runner. Every import counts, also one inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("run_vocabulary", "dsl_compiler", "sol_models", "evals", "graph", "nodes", "mucutlass")
ALLOWED = {
    "run_vocabulary": {"dsl_compiler"},
    "dsl_compiler": {"run_vocabulary"},  # its leaves only (RUNS_LEAVES)
    "sol_models": {"dsl_compiler", "run_vocabulary"},  # run_vocabulary's leaves only
    "evals": {"run_vocabulary", "dsl_compiler", "sol_models"},
    "graph": {"nodes", "run_vocabulary", "evals", "dsl_compiler", "sol_models"},
    "nodes": {"graph", "run_vocabulary", "dsl_compiler", "sol_models"},
    "mucutlass": set(PACKAGES) - {"mucutlass"},
}
# the modules of run_vocabulary that import nothing of ours: the compiler and the SOL models may import these, and only these
RUNS_LEAVES = {"run_vocabulary", "run_vocabulary.problem", "run_vocabulary.defaults"}
GRAPH_MODULES_IMPORTING_NODES = {"graph.builder", "graph.runner"}
NODES_MAY_NOT_IMPORT = {"graph.builder", "graph.runner", "graph.cli"}
LANGGRAPH = ("langgraph", "langchain", "langchain_core", "langchain_openai")


def modules(root: Path = ROOT, packages=PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imported_names(path: Path) -> list[str]:
    """Every module name an import statement of the file names (``from a import b`` gives a.b and a)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
    return names


def import_graph(found: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project's modules it imports (``from pkg import sub`` is an import of pkg.sub)."""
    edges: dict[str, set[str]] = {}
    for name, path in found.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                wanted = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                wanted = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in found else node.module
                          for a in node.names]
            else:
                continue
            for target in wanted:
                while target and target not in found:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        edges[name] = targets
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def package_violations(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for source, targets in edges.items():
        for target in targets:
            src, dst = source.split(".")[0], target.split(".")[0]
            if src != dst and dst not in ALLOWED[src]:
                bad.append(f"{source} -> {target}")
            if src == "graph" and dst == "nodes" and source not in GRAPH_MODULES_IMPORTING_NODES:
                bad.append(f"{source} -> {target} (only the builder and the runner import nodes)")
            if src in ("dsl_compiler", "sol_models") and dst == "run_vocabulary" and target not in RUNS_LEAVES:
                bad.append(f"{source} -> {target} (the libraries read only {', '.join(sorted(RUNS_LEAVES))} of run_vocabulary)")
            if source in RUNS_LEAVES and dst != "run_vocabulary":
                bad.append(f"{source} -> {target} (a leaf of run_vocabulary imports nothing of ours)")
            if source in RUNS_LEAVES and dst == "run_vocabulary" and target not in RUNS_LEAVES:
                bad.append(f"{source} -> {target} (a leaf of run_vocabulary imports only the other leaves)")
            if src == "nodes" and target in NODES_MAY_NOT_IMPORT:
                bad.append(f"{source} -> {target} (nodes read the state and context, never the builder or runner)")
    return sorted(bad)


EDGES = import_graph(modules())


def test_no_module_imports_itself_back():
    assert cycles(EDGES) == []


def test_packages_depend_one_way():
    assert package_violations(EDGES) == []


@pytest.mark.parametrize("package", ["run_vocabulary", "dsl_compiler", "sol_models", "evals", "mucutlass"])
def test_langgraph_is_imported_only_in_graph_and_nodes(package):
    offenders = [f"{name}: {imported}" for name, path in modules(packages=(package,)).items()
                 for imported in imported_names(path) if imported.split(".")[0] in LANGGRAPH]
    assert offenders == []


def test_the_checks_catch_a_cycle_and_a_wrong_direction(tmp_path):
    for package in ("dsl_compiler", "evals"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "dsl_compiler" / "a.py").write_text("from evals import judge\n")
    (tmp_path / "evals" / "judge.py").write_text("def f():\n    import dsl_compiler.a\n")
    edges = import_graph(modules(tmp_path, ("dsl_compiler", "evals")))
    assert cycles(edges) == [["dsl_compiler.a", "evals.judge"]]
    assert package_violations(edges) == ["dsl_compiler.a -> evals.judge"]


def test_the_libraries_reach_only_the_leaves_of_the_run_vocabulary():
    edges = {"dsl_compiler.frontend.reference": {"run_vocabulary.problem"}, "sol_models.counting": {"run_vocabulary.records"},
             "run_vocabulary.problem": {"dsl_compiler.diagnostics"}, "run_vocabulary.records": {"dsl_compiler.diagnostics"},
             "nodes.planner": {"evals.problems"}}
    assert package_violations(edges) == [
        "nodes.planner -> evals.problems",
        "run_vocabulary.problem -> dsl_compiler.diagnostics (a leaf of run_vocabulary imports nothing of ours)",
        "sol_models.counting -> run_vocabulary.records (the libraries read only run_vocabulary, run_vocabulary.defaults, run_vocabulary.problem of run_vocabulary)"]


# The judge's package has one door: the rest of the product imports ``evals.judge`` itself, never a module inside
# it (tests and benchmarks reach inside on purpose); and the judge reads the problem, the folder locks and the
# cuda candidates' build folders from the rest of evals, nothing else (never the runner, the store or a report).
JUDGE = "evals.judge"
JUDGE_READS = {"evals.problems", "evals.locks", "evals.cuda_candidates"}


def judge_door_violations(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for source, targets in edges.items():
        inside = source == JUDGE or source.startswith(JUDGE + ".")
        for target in targets:
            target_inside = target == JUDGE or target.startswith(JUDGE + ".")
            if not inside and target_inside and target != JUDGE:
                bad.append(f"{source} -> {target} (import the door: from evals.judge import ...)")
            if inside and not target_inside and target.startswith("evals.") and target not in JUDGE_READS:
                bad.append(f"{source} -> {target} (the judge reads only {', '.join(sorted(JUDGE_READS))} of evals)")
    return sorted(bad)


def test_the_judge_is_reached_through_its_door():
    assert judge_door_violations(EDGES) == []


def test_the_door_rule_catches_a_reach_inside(tmp_path):
    edges = {"graph.context": {"evals.judge.process"}, "evals.judge.client": {"evals.runner"},
             "nodes.validator": {"evals.judge"}}
    assert judge_door_violations(edges) == [
        "evals.judge.client -> evals.runner (the judge reads only evals.cuda_candidates, evals.locks, "
        "evals.problems of evals)",
        "graph.context -> evals.judge.process (import the door: from evals.judge import ...)"]


def test_every_package_of_the_layering_is_in_the_installed_distribution():
    """A package the layering knows but the install leaves out imports in a checkout and fails once installed."""
    import tomllib

    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {p.rstrip("*") for p in found} >= set(PACKAGES), (found, PACKAGES)
    for package in PACKAGES:  # and each is a regular package, not a folder that imports as a namespace
        assert (ROOT / package / "__init__.py").is_file(), package
