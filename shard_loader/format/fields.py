"""Checked getters for the published JSON documents (the manifest, the mixture file): each refusal names the document,
the field and what was found, so a bad file is one clear line. `loads` is the one JSON parser for every document the
loader and the builder read (manifests, mixture files, leases, state records)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Collection
from typing import Any

from ..errors import ManifestError

SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
MAX_DEPTH = 64  # levels of JSON nesting a published document may use


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        twice = next(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
        raise ValueError(f"key {twice!r} appears twice in one object; a reader would see only one of its values")
    return obj


def loads(raw: bytes | str) -> Any:
    """`json.loads` that refuses a key written twice in one object (read last-wins, a forged second `components` or
    split would be served unseen): a ValueError naming the key, as for any other invalid JSON."""
    return json.loads(raw, object_pairs_hook=_unique)


def parse_json(raw: bytes | str, origin: str) -> Any:
    """Parse a JSON document no deeper than MAX_DEPTH (deeper nesting exhausts Python's recursion when it is
    printed), each key once per object."""
    try:
        doc = loads(raw)
    except RecursionError:
        raise ManifestError(
            f"{origin}: nests deeper than Python can parse; a manifest nests at most {MAX_DEPTH} levels"
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{origin}: not valid JSON ({exc})") from None
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ManifestError(
                f"{origin}: nests deeper than {MAX_DEPTH} levels; a manifest or lineage file nests far less"
            )
        children = value.values() if isinstance(value, dict) else value
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return doc


def format_version(doc: Any, origin: str, name: str, readable: Collection[int]) -> int:
    """The document's `format_version`, once its `format` is `name` and this reader knows the version."""
    if field(doc, "format", str, origin) != name:
        raise ManifestError(f"{origin}: format is {doc['format']!r}, expected {name!r}")
    version: int = field(doc, "format_version", int, origin)
    if version not in readable:
        raise ManifestError(
            f"{origin}: format_version {version} is not supported (this reader knows {list(readable)}); "
            "upgrade shard_loader"
        )
    return version


def field(obj: Any, name: str, kind: type | tuple[type, ...], where: str) -> Any:
    """`obj[name]`, which must be present and of `kind` (an integer is never a bool)."""
    if not isinstance(obj, dict):
        raise ManifestError(f"{where}: expected an object, got {type(obj).__name__}")
    if name not in obj:
        raise ManifestError(f"{where}: missing field {name!r}")
    value = obj[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ManifestError(f"{where}.{name}: expected an integer, got {value!r}")
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ManifestError(
            f"{where}.{name}: expected {getattr(kind, '__name__', 'a number')}, got {type(value).__name__}"
        )
    return value


def count(obj: Any, name: str, where: str) -> int:
    """A field holding a non-negative integer."""
    value: int = field(obj, name, int, where)
    if value < 0:
        raise ManifestError(f"{where}.{name}: must not be negative, got {value}")
    return value


def text(obj: Any, name: str, where: str) -> str:
    """A field holding a non-empty string."""
    value: str = field(obj, name, str, where)
    if not value:
        raise ManifestError(f"{where}.{name}: must not be empty")
    return value


def counts(obj: Any, name: str, where: str) -> dict[str, int]:
    """A field holding an object of non-negative integers (tokens by split)."""
    table: dict[str, Any] = field(obj, name, dict, where)
    return {key: count(table, key, f"{where}.{name}") for key in table}
