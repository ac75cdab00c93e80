"""Where each live consumer of a shared cache stands, so a leading consumer can keep what a lagging one will read.

A consumer is a zero-byte file `.consumers/<layout>.<place>.<pid>.<n>` in the cache directory: `layout` names the
window layout and seed (places compare only within one layout), `place` is `epoch * windows + position` of the
earliest window it still needs. Its process holds an exclusive `flock` on the file while it reads, and moves by
renaming it (the lock stays with the inode). A record whose lock can be taken belongs to a dead process and is
removed: dead consumers hold nothing back.
"""

from __future__ import annotations

import fcntl
import itertools
import os
from dataclasses import dataclass
from pathlib import Path

from .files import CachePath

_FOLDER = ".consumers"
_COUNTER = itertools.count()


@dataclass(frozen=True)
class Place:
    """A live consumer's layout and the global place (epoch * windows + position) of the earliest window it still
    needs."""

    layout: str
    place: int


def _parse(name: str) -> Place | None:
    parts = name.split(".")
    if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
        return None
    return Place(parts[0], int(parts[1]))


class Registration:
    """This consumer's record in a shared cache, held for as long as it reads."""

    def __init__(self, cache_dir: Path, layout: str, place: int):
        self.folder = CachePath(Path(cache_dir), _FOLDER)
        self.layout, self.place, self._tag = layout, place, f"{os.getpid()}.{next(_COUNTER)}"
        # unparsable, so nobody takes it for a dead record before it is locked
        staging = self.folder.child(f"new-{self._tag}")
        self.fd = staging.open(os.O_RDWR | os.O_CREAT)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.path = self.folder.child(self._name(place))
        staging.replace(self.path)

    def _name(self, place: int) -> str:
        return f"{self.layout}.{place}.{self._tag}"

    def move(self, place: int) -> None:
        """Say that every window before `place` is done with."""
        if place != self.place:
            path = self.folder.child(self._name(place))
            self.path.replace(path)
            self.path, self.place = path, place

    def close(self) -> None:
        try:
            self.path.unlink()
        finally:
            os.close(self.fd)


def _alive(path: CachePath) -> bool | None:
    """Whether the record's process still holds it; None if it was renamed meanwhile. A dead record is removed."""
    try:
        fd = path.open(os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        path.unlink()
        return False
    finally:
        os.close(fd)


def live_places(cache_dir: Path, layout: str) -> list[int]:
    """The places of every live consumer of `layout` in the cache (a listing taken again if a record moved under it)."""
    folder = CachePath(Path(cache_dir), _FOLDER)
    while True:
        places, moved = [], False
        for name in folder.names():
            record = _parse(name)
            if record is None or record.layout != layout:
                continue
            alive = _alive(folder.child(name))
            moved |= alive is None
            if alive:
                places.append(record.place)
        if not moved:
            return places
