"""Retention: which manifest versions to keep, and which files no kept version (and no current record)
still needs, so a store that is re-tokenized monthly does not grow without bound.

A version is kept while it is among the newest `keep` versions, younger than `max_age`, or superseded less
than `grace` ago (a trainer that opened it just before it aged out keeps working until its next restart).
Nothing written less than `grace` ago is deleted, so collecting beside a running publish is safe.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from shard_loader.format import Manifest, parse_manifest

from .errors import BuildError
from .layout import COLLECTED_PREFIXES, LATEST_KEY, LINEAGE_DIR, RAW_PREFIX, VERSIONS_DIR, parts_prefix, versioned_key
from .published import with_sidecars
from .records import PartRecord, RawRecord, find_record
from .state import current_tokenizer, has_tokenizer
from .store import ObjectStore

DAY = 86400.0


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY}


def parse_duration(text: str, name: str) -> float:
    """Seconds from '90s', '15m', '12h', '30d' or a bare number of seconds; errors name the option."""
    value, unit = (text[:-1], text[-1]) if text and text[-1] in _UNITS else (text, "s")
    try:
        seconds = float(value) * _UNITS[unit]
    except ValueError:
        raise BuildError(f"{name}: {text!r} is not a duration; write e.g. 30d, 12h, 15m or 90s") from None
    if seconds < 0:
        raise BuildError(f"{name}: {text!r} is negative; durations are 0 or more")
    return seconds


@dataclass(frozen=True)
class Policy:
    keep: int = 3
    max_age_s: float = 30 * DAY
    grace_s: float = 7 * DAY

    def __post_init__(self) -> None:
        if self.keep < 1:
            raise BuildError(f"retention keep must be at least 1 (the live version is always kept), got {self.keep}")
        if self.max_age_s < 0 or self.grace_s < 0:
            raise BuildError(f"retention max_age and grace must not be negative, got {self.max_age_s} s and {self.grace_s} s")


@dataclass(frozen=True)
class Collection:
    """What a collection keeps and deletes; a dry run computes it and deletes nothing."""

    kept_versions: tuple[str, ...]
    dropped_versions: tuple[str, ...]
    deletions: tuple[tuple[str, int], ...]

    @property
    def bytes_freed(self) -> int:
        return sum(size for _, size in self.deletions)


@dataclass(frozen=True)
class Version:
    manifest: Manifest
    written_at: float  # when manifests/<version>.json was written: its age, and when it superseded the one before


def _versions(store: ObjectStore) -> list[Version]:
    """Every versioned manifest in the store, newest first."""
    found = []
    for key, _ in store.list(f"{VERSIONS_DIR}/"):
        if key.endswith(".json") and key.count("/") == 1:  # manifests/<version>.json, not a sidecar below it
            manifest = parse_manifest(store.get_bytes(key), origin=f"{store.describe()}/{key}")
            found.append(Version(manifest, store.modified(key)))
    return sorted(found, key=lambda v: v.written_at, reverse=True)


def kept_versions(versions: list[Version], live: str | None, policy: Policy, now: float) -> set[str]:
    """The versions the policy keeps (`versions` newest first); the live one always."""
    kept = {live} if live else set()
    for i, v in enumerate(versions):
        superseded = versions[i - 1].written_at if i else None
        if i < policy.keep or now - v.written_at < policy.max_age_s or (superseded is not None and now - superseded < policy.grace_s):
            kept.add(v.manifest.version)
    return kept


def _live_records(store: ObjectStore) -> set[str]:
    """Keys the builder's current records point at (latest raw per partition, the current tokenizer's
    shards): the next publish may still reference them."""
    needed = set()
    for key, _ in store.list(RAW_PREFIX):
        if key.endswith(".json") and (raw := find_record(store, key, RawRecord, "gc")) is not None:
            needed.add(raw.key)
    if has_tokenizer(store):
        for key, _ in store.list(parts_prefix(current_tokenizer(store).fingerprint)):
            if (part := find_record(store, key, PartRecord, "gc")) is not None:
                needed |= {part.raw.key, *(r.key for e in part.shards.values() for r in (e.npy, e.bin))}
    return needed


def plan_collection(store: ObjectStore, policy: Policy, now: float | None = None) -> Collection:
    """Decide what to delete: data files and versions no kept version and no current record references."""
    now = time.time() if now is None else now
    versions = _versions(store)
    live = parse_manifest(store.get_bytes(LATEST_KEY), origin=LATEST_KEY).version if store.exists(LATEST_KEY) else None
    kept = kept_versions(versions, live, policy, now)
    needed = _live_records(store)
    for m in (v.manifest for v in versions):
        if m.version in kept:
            m = with_sidecars(store, m, lineage=True)
            needed |= {ref.key for ref in m.files()}
            needed |= {f["raw_key"] for s in m.full_lineage.get("sources", []) for f in s.get("files", []) if "raw_key" in f}
    dropped = {versioned_key(v.manifest.version) for v in versions if v.manifest.version not in kept}
    deletions = []
    for prefix in COLLECTED_PREFIXES:
        for key, size in store.list(prefix):
            if key.endswith(".json") and key not in dropped and not key.startswith(f"{LINEAGE_DIR}/"):
                continue  # records and kept versions: small, and the store's own description
            if key in needed or now - store.modified(key) < policy.grace_s:
                continue
            deletions.append((key, size))
    return Collection(
        kept_versions=tuple(v.manifest.version for v in versions if v.manifest.version in kept),
        dropped_versions=tuple(v.manifest.version for v in versions if v.manifest.version not in kept),
        deletions=tuple(sorted(deletions)),
    )


def collect(store: ObjectStore, collection: Collection) -> int:
    """Delete what `plan_collection` chose, data files before their versions; returns bytes freed."""
    for key, _ in sorted(collection.deletions, key=lambda d: d[0].startswith(f"{VERSIONS_DIR}/")):
        store.delete(key)
    return collection.bytes_freed
