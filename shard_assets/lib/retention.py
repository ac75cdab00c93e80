"""Retention: which manifest versions to keep, and which files no kept version (and no current record)
still needs, so a store that is re-tokenized monthly does not grow without bound.

A version is kept while it is among the newest `keep` versions, younger than `max_age`, superseded less than
`grace` ago, or held by a live reader lease (`readers/<version>/`, see shard_loader.format.leases: written and
renewed by a trainer that can write, or a pin). Nothing written less than `grace` ago is deleted, so collecting
beside a running publish is safe. A tokenizer neither current nor used by a kept version is abandoned: its file,
records and shards go once the newest of them is older than `grace`. A dedup drop list, a curated parquet, a sample
of dropped documents or an eval index goes once no kept version's lineage and no current record names it.

Collecting marks the dropped versions (`readers/<version>.collecting`), reads the leases again, and only then
deletes: a reader that leased a version meanwhile keeps it, and one that leases it later finds the mark when it
checks, before it reads anything (shard_loader.format.leases).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from shard_loader.builder_api import COLLECTING_SUFFIX, READERS_DIR, ArgumentError, Lease, Manifest, ShardLoaderError
from shard_loader.builder_api import collecting_key, duration, parse_manifest

from .errors import BuildError
from .layout import COLLECTED_PREFIXES, CURATED_RECORDS_PREFIX, CURATION_SAMPLES_PREFIX, CURRENT_TOKENIZER_KEY
from .layout import DEDUP_DECISIONS_PREFIX, INGEST_FAILURES_PREFIX, LATEST_KEY, LINEAGE_DIR, RAW_PREFIX
from .layout import TOKENIZED_PREFIX, TOKENIZERS_PREFIX, VERSIONS_DIR, eval_index_key, parts_prefix, versioned_key
from .published import with_sidecars
from .curation.curation_records import CuratedRecord
from .curation.dedup_records import DedupDecision
from .records import PartRecord, RawRecord, TokenizerRecord, find_record
from .store import ObjectStore

DAY = 86400.0
log = logging.getLogger(__name__)


def parse_duration(text: str, name: str) -> float:
    """Seconds from '90s', '15m', '12h', '30d' or a bare number of seconds; errors name the option (a BuildError)."""
    try:
        return duration(name, text)
    except ArgumentError as exc:
        raise BuildError(str(exc)) from None


@dataclass(frozen=True)
class Policy:
    keep: int = 3
    max_age_s: float = 30 * DAY
    grace_s: float = 7 * DAY

    def __post_init__(self) -> None:
        if self.keep < 1:
            raise BuildError(f"retention keep must be at least 1 (the live version is always kept), got {self.keep}")
        if self.max_age_s < 0 or self.grace_s < 0:
            raise BuildError(
                f"retention max_age and grace must not be negative, got {self.max_age_s} s and {self.grace_s} s"
            )


@dataclass(frozen=True)
class Hold:
    """A live reader lease or pin on a version: what keeps a version the policy alone would drop."""

    version: str
    key: str
    kind: str
    note: str
    until: float  # seconds since the epoch, by the store's clock


@dataclass(frozen=True)
class Collection:
    """What a collection keeps and deletes; a dry run computes it and deletes nothing."""

    kept_versions: tuple[str, ...]
    dropped_versions: tuple[str, ...]
    deletions: tuple[tuple[str, int], ...]
    held: tuple[Hold, ...] = ()  # leases keeping versions the policy alone would drop: kept because of a reader
    abandoned_tokenizers: tuple[str, ...] = ()  # fingerprints whose files are deleted (none younger than grace)
    policy: Policy = field(default_factory=Policy)
    now: float = 0.0

    @property
    def bytes_freed(self) -> int:
        return sum(size for _, size in self.deletions)


@dataclass(frozen=True)
class Version:
    manifest: Manifest
    written_at: float  # when manifests/<version>.json was written: its age, and when it superseded the one before


def _versions(store: ObjectStore, live: str | None) -> list[Version]:
    """Every versioned manifest in the store, newest first. A bucket's modification times are whole seconds, so two
    versions written within one second tie: the live one is the newer (the later publish made it live)."""
    found = []
    for key, _ in store.list(f"{VERSIONS_DIR}/"):
        if key.endswith(".json") and key.count("/") == 1:  # manifests/<version>.json, not a sidecar below it
            manifest = parse_manifest(store.get_bytes(key), origin=f"{store.describe()}/{key}")
            found.append(Version(manifest, store.modified(key)))
    return sorted(found, key=lambda v: (v.written_at, v.manifest.version == live), reverse=True)


def kept_versions(versions: list[Version], live: str | None, policy: Policy, now: float) -> set[str]:
    """The versions the policy keeps (`versions` newest first); the live one always."""
    kept = {live} if live else set()
    for i, v in enumerate(versions):
        superseded_lately = i > 0 and now - versions[i - 1].written_at < policy.grace_s
        if i < policy.keep or now - v.written_at < policy.max_age_s or superseded_lately:
            kept.add(v.manifest.version)
    return kept


def leases(store: ObjectStore, now: float) -> tuple[list[Hold], list[tuple[str, int]]]:
    """The live leases under readers/ (live for their `seconds` after the store last wrote them), and the lapsed
    ones' keys and sizes. An object there that is not a lease (gc's marks among them) holds nothing and is left alone;
    one that tries to be (a forged or hand-written record) is named, so its owner can see why it holds nothing."""
    live, lapsed = [], []
    for key, size in store.list(f"{READERS_DIR}/"):
        if key.endswith(COLLECTING_SUFFIX):
            continue
        try:
            lease = Lease.parse(store.get_bytes(key), key)
        except ShardLoaderError as exc:
            if key.endswith(".json"):  # a record that tries to be a lease (a writer's temporary file is not one yet)
                log.warning("gc: %s (left in place)", exc)
            continue
        until = store.modified(key) + lease.seconds
        if until > now:
            live.append(Hold(lease.version, key, lease.kind, lease.note, until))
        else:
            lapsed.append((key, size))
    for key, what in store.unlisted(f"{READERS_DIR}/"):
        if key.endswith(".json"):  # where a lease would be, something no reader could have written
            log.warning("gc: %s: %s, not a reader lease: it holds nothing (left in place)", key, what)
    return live, lapsed


def _live_records(store: ObjectStore, fingerprint: str | None) -> set[str]:
    """Keys the builder's current records point at (latest raw parquets, drop lists and curation files, and those of the
    current tokenizer's part records, shards included): the next publish may still reference them."""
    needed = set()
    for key, _ in store.list(RAW_PREFIX):
        if key.endswith(".json") and key.count("/") == 2 and not key.startswith(INGEST_FAILURES_PREFIX):
            if (raw := find_record(store, key, RawRecord, "gc")) is not None:
                needed.add(raw.key)
    for key, _ in store.list(DEDUP_DECISIONS_PREFIX):
        if (decision := find_record(store, key, DedupDecision, "gc")) is not None and decision.drops is not None:
            needed.add(decision.drops.key)
    for key, _ in store.list(CURATED_RECORDS_PREFIX):
        needed |= curated.keys() if (curated := find_record(store, key, CuratedRecord, "gc")) else set()
    if fingerprint is not None:
        for key, _ in store.list(parts_prefix(fingerprint)):
            if (part := find_record(store, key, PartRecord, "gc")) is not None:
                needed |= {part.raw.key, *(r.key for e in part.shards.values() for r in (e.npy, e.bin))}
                if part.dedup is not None and part.dedup.drops is not None:
                    needed.add(part.dedup.drops.key)
                needed |= part.curation.keys() if part.curation else set()
    return needed


def _curation_keys(entry: dict[str, Any]) -> set[str]:
    """The curation files a version's lineage entry of a partition names: curated parquet, samples, eval index."""
    decontaminated = entry.get("decontamination") or {}
    named = (entry.get("curated_key"), (entry.get("filters") or {}).get("samples"), decontaminated.get("samples"))
    return {k for k in named if k} | {eval_index_key(v) for v in [decontaminated.get("eval_version")] if v}


def _fingerprint_of(key: str) -> str | None:
    """The tokenizer a key under tokenizers/ or tokenized/ belongs to."""
    for prefix in (TOKENIZERS_PREFIX, TOKENIZED_PREFIX):
        if key.startswith(prefix) and key.count("/") >= 2:
            return key[len(prefix) :].split("/", 1)[0]
    return None


def _abandoned(listing: Iterable[tuple[str, float]], in_use: set[str], policy: Policy, now: float) -> set[str]:
    """Tokenizers with files in the store that are neither current nor used by a kept version, none of whose files
    (tokenizer, records, shards) was written less than `grace` ago."""
    newest: dict[str, float] = {}
    for key, modified in listing:
        if (fp := _fingerprint_of(key)) is not None and fp not in in_use:
            newest[fp] = max(newest.get(fp, 0.0), modified)
    return {fp for fp, when in newest.items() if now - when >= policy.grace_s}


def plan_collection(store: ObjectStore, policy: Policy, now: float | None = None) -> Collection:
    """Decide what to delete: data files and versions no kept version, no live lease and no current record needs,
    and the whole of every abandoned tokenizer."""
    now = time.time() if now is None else now
    live = parse_manifest(store.get_bytes(LATEST_KEY), origin=LATEST_KEY).version if store.exists(LATEST_KEY) else None
    versions = _versions(store, live)
    by_policy = kept_versions(versions, live, policy, now)
    holds, lapsed = leases(store, now)
    known = {v.manifest.version for v in versions}
    kept = by_policy | {h.version for h in holds if h.version in known}
    record = find_record(store, CURRENT_TOKENIZER_KEY, TokenizerRecord, "gc")
    current = record.fingerprint if record else None
    needed = _live_records(store, current)
    in_use = {current} if current else set()
    for m in (v.manifest for v in versions if v.manifest.version in kept):
        m = with_sidecars(store, m, lineage=True)
        needed |= {ref.key for ref in m.files()}
        files = [f for s in m.full_lineage.get("sources", []) for f in s.get("files", [])]
        needed |= {f["raw_key"] for f in files if "raw_key" in f}
        needed |= {f["dedup"]["drops"] for f in files if (f.get("dedup") or {}).get("drops")}
        needed |= {k for f in files for k in _curation_keys(f)}
        in_use.add(m.tokenizer.fingerprint)
    dropped = {versioned_key(v.manifest.version) for v in versions if v.manifest.version not in kept}
    prefixes = (*COLLECTED_PREFIXES, TOKENIZERS_PREFIX)
    listing = [(key, size) for prefix in prefixes for key, size in store.list(prefix)]
    modified = cache(store.modified)  # a HEAD per object only where its age decides (a deletion candidate), once
    unused = [key for key, _ in listing if _fingerprint_of(key) not in (None, *in_use)]
    abandoned = _abandoned(((key, modified(key)) for key in unused), in_use, policy, now)
    deletions = list(lapsed)
    deletable = (CURATION_SAMPLES_PREFIX, f"{LINEAGE_DIR}/")  # the records gc deletes where nothing needs them
    for key, size in listing:
        gone_tokenizer = _fingerprint_of(key) in abandoned
        if key.startswith(TOKENIZERS_PREFIX) and not gone_tokenizer:
            continue  # a tokenizer's file and record stay while it is in use (or young)
        if key.endswith(".json") and key not in dropped and not key.startswith(deletable) and not gone_tokenizer:
            continue  # records and kept versions: small, and the store's own description
        if key in needed or now - modified(key) < policy.grace_s:
            continue
        deletions.append((key, size))
    return Collection(
        kept_versions=tuple(v.manifest.version for v in versions if v.manifest.version in kept),
        dropped_versions=tuple(v.manifest.version for v in versions if v.manifest.version not in kept),
        deletions=tuple(sorted(deletions)),
        held=tuple(sorted((h for h in holds if h.version in kept - by_policy), key=lambda h: (h.version, h.key))),
        abandoned_tokenizers=tuple(sorted(abandoned)),
        policy=policy,
        now=now,
    )


def collect(store: ObjectStore, collection: Collection) -> int:
    """Delete what `plan_collection` chose: each dropped version is marked first, the leases are read again (a version
    leased meanwhile is kept: the plan is made again), then data files, then the versions' manifests, then the marks.
    A mark left by an interrupted collection of a version now kept is removed. Returns bytes freed."""
    kept_marks = {collecting_key(version) for version in collection.kept_versions}
    for key, _ in store.list(f"{READERS_DIR}/"):
        if key in kept_marks:
            store.delete(key)
    for version in collection.dropped_versions:
        store.put_bytes(collecting_key(version), b"gc is deleting this version: readers refuse to open it\n")
    holds, _ = leases(store, collection.now)
    leased = {h.version for h in holds} & set(collection.dropped_versions)
    for version in leased:
        store.delete(collecting_key(version))  # a reader leased it before it could see the mark: it stays
    if leased:
        collection = plan_collection(store, collection.policy, collection.now)
        for version in collection.dropped_versions:
            store.put_bytes(collecting_key(version), b"gc is deleting this version: readers refuse to open it\n")
    for key, _ in sorted(collection.deletions, key=lambda d: d[0].startswith(f"{VERSIONS_DIR}/")):
        store.delete(key)
    for version in collection.dropped_versions:
        store.delete(collecting_key(version))
    return collection.bytes_freed
