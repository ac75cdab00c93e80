"""The demo corpus as ordinary data: docstrings of the standard library and the pydoc topics, written
as JSONL files beside an ordinary spec that reads them.

Every Python install has this text, so the demo needs no network and no special source format."""

from __future__ import annotations

import ast
import functools
import json
import sysconfig
from collections.abc import Iterator
from pathlib import Path

_SKIP_DIRS = {"site-packages", "test", "tests", "idle_test", "__pycache__"}
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


@functools.cache
def _stdlib_files() -> tuple[Path, ...]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return tuple(sorted(p for p in root.rglob("*.py") if not _SKIP_DIRS & set(p.relative_to(root).parts)))


def _docstrings(path: Path) -> Iterator[str]:
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):
        return
    pending: list[ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef] = [tree]
    while pending:
        node = pending.pop(0)
        if doc := ast.get_docstring(node):
            yield doc
        pending.extend(n for n in node.body if isinstance(n, _DOCUMENTED))


def _topics() -> list[str]:
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


def demo_documents(part: int, parts: int) -> Iterator[str]:
    """The documents of one demo file, in a stable order: every `parts`-th stdlib module and pydoc topic."""
    for path in _stdlib_files()[part::parts]:
        yield from _docstrings(path)
    yield from _topics()[part::parts]


DEMO_SPEC = Path(__file__).with_name("demo.toml")


def write_demo(folder: str | Path, parts: int = 4) -> Path:
    """Write the corpus as `<folder>/corpus/part-NNN.jsonl` and the demo spec as `<folder>/demo.toml`; returns the spec.

    Files whose content is unchanged are not rewritten, so their fingerprints (size and mtime) stay put."""
    folder = Path(folder)
    (folder / "corpus").mkdir(parents=True, exist_ok=True)
    for i in range(parts):
        lines = "".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in demo_documents(i, parts))
        body = lines.encode("utf-8", "surrogatepass")
        path = folder / "corpus" / f"part-{i:03d}.jsonl"
        if not path.exists() or path.read_bytes() != body:
            path.write_bytes(body)
    spec = folder / "demo.toml"
    if not spec.exists() or spec.read_text() != DEMO_SPEC.read_text():
        spec.write_text(DEMO_SPEC.read_text())
    return spec
