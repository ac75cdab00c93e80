"""Every benchmark imports, has the `run(size, work)` that benchmarks/run.py calls, and names only things
that exist: each `from shard_assets/shard_loader/tests/benchmarks ... import name` in it, at module level
or inside a function (where the heavy ones live), resolves. A restructure that moves a function breaks
this test, not the next `scripts/bench` run."""

import ast
import importlib
import importlib.util
import inspect
from pathlib import Path

import pytest

import benchmarks.run

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("shard_assets", "shard_loader", "tests", "benchmarks")
MODULES = sorted(f"benchmarks.bench_{name}" for name in benchmarks.run.discover())


def _project_imports(module: str) -> list[tuple[str, str | None]]:
    """(module, name or None) for every import of this project's code anywhere in `module`'s source."""
    path = ROOT / (module.replace(".", "/") + ".py")
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            target = (
                importlib.util.resolve_name("." * node.level + (node.module or ""), "benchmarks")
                if node.level
                else node.module
            )
            if target.split(".")[0] in PROJECT:
                found += [(target, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names if alias.name.split(".")[0] in PROJECT]
    return found


def test_every_benchmark_is_found():
    assert {"faults", "loader", "download", "manifest", "scale", "tokenize"} <= set(benchmarks.run.discover())


@pytest.mark.parametrize("module", MODULES)
def test_each_benchmark_imports_and_every_name_it_imports_exists(module):
    bench = importlib.import_module(module)
    assert list(inspect.signature(bench.run).parameters)[:2] == ["size", "work"]
    missing = []
    for target, name in _project_imports(module):
        imported = importlib.import_module(target)
        if name is not None and not hasattr(imported, name):
            try:
                importlib.import_module(f"{target}.{name}")  # `from package import submodule`
            except ModuleNotFoundError:
                missing.append(f"from {target} import {name}")
    assert not missing, f"{module} imports names that no longer exist: {missing}"
