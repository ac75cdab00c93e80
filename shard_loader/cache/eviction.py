"""Room under a shared cache's disk budget: drop part files of killed downloads, then evict verified files that no
live consumer holds and no slower consumer will read soon (the caller names those), least recently released first."""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

from .verified import markers
from .download import discard_abandoned
from .lease import evict, lease_path

_MARK = ".ok-"


def cache_usage(cache_dir: Path) -> int:
    """Bytes of every file under the cache directory, measured on disk."""
    total = 0
    for root, _, files in os.walk(cache_dir):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total


def _released_at(path: Path) -> float:
    """When a file's last holder let go of it (its lease's mtime), else when it was written."""
    for p in (lease_path(path), path):
        try:
            return os.stat(p).st_mtime
        except FileNotFoundError:
            pass
    return 0.0


def verified_files(cache_dir: Path) -> list[Path]:
    """The cached files that carry a verified marker, least recently released first."""
    paths = {m.with_name(m.name.split(_MARK, 1)[0]) for m in cache_dir.rglob(f"*{_MARK}*")}
    return sorted(paths, key=_released_at)


def make_room(cache_dir: Path, budget: int, need: int, spare: Collection[Path] = frozenset()) -> bool:
    """Evict unheld files outside `spare` until `need` more bytes fit in `budget`; False if the rest leave too little room."""
    usage = cache_usage(cache_dir)
    if usage + need > budget:
        usage -= discard_abandoned(cache_dir)
    for path in verified_files(cache_dir):
        if usage + need <= budget:
            return True
        if path in spare:
            continue
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            continue
        if evict(path, markers(path)):
            usage -= size
    return usage + need <= budget
