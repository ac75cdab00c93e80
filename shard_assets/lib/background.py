"""Work handed to one background thread, in order and bounded: the hot path's reader, exactness guard and
uploads run beside the engine (each releases the GIL in C/Rust code) without holding unbounded memory."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from enum import Enum
from typing import TypeVar

T = TypeVar("T")


class _End(Enum):
    """What `next` gives for an exhausted source (a type of its own, so the items keep theirs)."""

    DONE = 0


_DONE = _End.DONE


class Background:
    """Runs submitted calls one at a time, in order, on its own thread; at most `depth` are pending.

    A full queue makes `submit` wait for the oldest call; a failed call's exception is raised by the
    `submit` or `drain` that collects it, so an error stops the caller at its next step."""

    def __init__(self, name: str, depth: int):
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._pending: deque[Future[object]] = deque()
        self.depth = depth

    def submit(self, fn: Callable[..., object], *args: object) -> None:
        """Queue `fn(*args)`; first collect finished calls (raising their error) and wait while `depth` are pending."""
        while self._pending and (self._pending[0].done() or len(self._pending) >= self.depth):
            self._pending.popleft().result()
        self._pending.append(self._pool.submit(fn, *args))

    def drain(self) -> None:
        """Wait for every queued call; the first failure is raised."""
        while self._pending:
            self._pending.popleft().result()

    def close(self) -> None:
        """Drop the calls not started, wait for the running one, stop the thread (after an error elsewhere)."""
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=True)


def prefetched(items: Iterable[T], depth: int, name: str = "prefetch") -> Iterator[T]:
    """`items` produced on a background thread up to `depth` ahead of the consumer, in order; errors re-raised here."""
    source = iter(items)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
    ahead: deque[Future[T | _End]] = deque(pool.submit(next, source, _DONE) for _ in range(depth))
    try:
        while True:
            item = ahead.popleft().result()
            if item is _DONE:
                return
            ahead.append(pool.submit(next, source, _DONE))
            yield item
    finally:
        for future in ahead:
            future.cancel()
        pool.shutdown(wait=True)
