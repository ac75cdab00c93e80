"""Room under a shared cache's disk budget: drop part files of killed downloads, then evict verified files that no
live consumer holds and no slower consumer will read soon (the caller names those), least recently released first."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from .download import discard_abandoned
from .files import CachePath, walk
from .lease import evict
from .verified import markers

_MARK, _LEASE = ".ok-", ".lease"


def cache_usage(cache_dir: Path) -> int:
    """Bytes of every file under the cache directory, measured on disk."""
    return sum(st.st_size for _, st in walk(Path(cache_dir)))


def verified_files(cache_dir: Path) -> list[CachePath]:
    """The cached files that carry a verified marker (a marker left without its file included, to be tidied), least
    recently released first: by their lease's mtime, stamped when the last holder let go, else by the file's own."""
    stamps = {p.rel: st.st_mtime for p, st in walk(Path(cache_dir))}
    paths = {CachePath(Path(cache_dir), rel.rsplit(_MARK, 1)[0]) for rel in stamps if _MARK in rel.rpartition("/")[2]}
    return sorted(paths, key=lambda p: (stamps.get(p.rel + _LEASE, stamps.get(p.rel, 0.0)), p.rel))


def make_room(cache_dir: Path, budget: int, need: int, spare: Collection[CachePath] = frozenset()) -> bool:
    """Evict unheld files outside `spare` until `need` more bytes fit in `budget`; False if the rest leave too little
    room."""
    usage = cache_usage(cache_dir)
    if usage + need > budget:
        usage -= discard_abandoned(cache_dir)
    for path in verified_files(cache_dir):
        if usage + need <= budget:
            return True
        if path in spare:
            continue
        st = path.stat()
        if evict(path, markers(path)) and st is not None:
            usage -= st.st_size
    return usage + need <= budget
