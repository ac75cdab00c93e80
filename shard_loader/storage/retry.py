"""Retries with exponential backoff and full jitter, counting every attempt for the stats."""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from ..errors import DeadlineError, StoreError, TransientStoreError

T = TypeVar("T")
P = ParamSpec("P")


@dataclass
class RequestStats:
    """Requests tried, retried and failed for good; bytes received. Safe to share between threads."""

    requests: int = 0
    retries: int = 0
    failures: int = 0
    bytes: int = 0
    range_fallbacks: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.compare}


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 8
    base_delay: float = 0.2
    max_delay: float = 10.0

    def delay(self, attempt: int) -> float:
        return random.uniform(0, min(self.max_delay, self.base_delay * 2**attempt))


@dataclass(frozen=True)
class Deadline:
    """When a transfer must be complete: a stalled or trickling server fails in bounded time, not never."""

    what: str
    seconds: float
    expires_at: float
    remedy: str

    @classmethod
    def after(cls, seconds: float, what: str, remedy: str = "check the server or network") -> Deadline:
        return cls(what, seconds, time.monotonic() + seconds, remedy)

    def left(self) -> float:
        return self.expires_at - time.monotonic()

    def check(self) -> None:
        """Raise DeadlineError once the time is up."""
        if self.left() <= 0:
            raise DeadlineError(
                f"{self.what}: not complete after {self.seconds:,.0f} s, its deadline; the server stalls or sends too "
                f"slowly: {self.remedy}"
            )


def with_retries(
    call: Callable[[], T], what: str, policy: RetryPolicy, stats: RequestStats, deadline: Deadline | None = None
) -> T:
    """Run `call`, retrying TransientStoreError up to `policy.attempts` times (and never past `deadline`); other errors
    pass through."""
    for attempt in range(policy.attempts):
        stats.add(requests=1)
        try:
            return call()
        except TransientStoreError as exc:
            last = exc
            if attempt + 1 < policy.attempts:
                delay = policy.delay(attempt)
                if deadline is not None:
                    deadline.check()
                    delay = min(delay, max(deadline.left(), 0))
                stats.add(retries=1)
                time.sleep(delay)
    stats.add(failures=1)
    raise StoreError(f"{what}: failed after {policy.attempts} attempts: {last}") from last


class RetryingStore(Protocol):
    """A store whose reads `retried` wraps: its root, its retry policy and where its requests are counted."""

    url: str
    retry: RetryPolicy
    stats: RequestStats


S = TypeVar("S", bound=RetryingStore)


def retried(action: str) -> Callable[[Callable[Concatenate[S, str, P], T]], Callable[Concatenate[S, str, P], T]]:
    """A store's read of one key (a whole small object, a size) retried on TransientStoreError by the store's policy:
    a manifest, a shard table or a lease read before any download must survive one refused request as a download
    does."""

    def wrap(method: Callable[Concatenate[S, str, P], T]) -> Callable[Concatenate[S, str, P], T]:
        @functools.wraps(method)
        def call(store: S, key: str, /, *args: P.args, **kwargs: P.kwargs) -> T:
            return with_retries(
                lambda: method(store, key, *args, **kwargs), f"{action} {key}", store.retry, store.stats
            )

        return call

    return wrap
