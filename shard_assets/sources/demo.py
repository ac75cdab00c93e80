"""The built-in demo corpus: docstrings of the standard library and the pydoc topics.

Every Python install has this text, so the demo needs no network. Source files are
spread over `parts` partitions by index, so each partition parses only its own files.
"""

from __future__ import annotations

import ast
import functools
import hashlib
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
    pending = [tree]
    while pending:
        node = pending.pop(0)
        if doc := ast.get_docstring(node):
            yield doc
        pending.extend(n for n in node.body if isinstance(n, _DOCUMENTED))


def _topics() -> list[str]:
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


def part_names(parts: int) -> list[str]:
    return [f"part-{i:03d}" for i in range(parts)]


def demo_documents(part: int, parts: int) -> Iterator[str]:
    """The documents of one demo partition, in a stable order."""
    for path in _stdlib_files()[part::parts]:
        yield from _docstrings(path)
    yield from _topics()[part::parts]


def demo_fingerprint(part: int, parts: int) -> str:
    """A content fingerprint of one demo partition: the bytes of the files it is made from."""
    h = hashlib.sha256()
    for path in _stdlib_files()[part::parts]:
        h.update(path.read_bytes())
    for topic in _topics()[part::parts]:
        h.update(topic.encode("utf-8", "surrogatepass"))
    return f"sha256:{h.hexdigest()}"
