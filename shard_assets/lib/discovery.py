"""Discovery in bounded steps: list a source (metadata only), register its new, changed and vanished files in
chunks, and stop when the step's budget is spent; a small cursor says where the next step resumes. The build
command runs one unbounded step, the sensor one bounded step per tick: the same code path."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from shard_loader.builder_api import loads

from .errors import RecordError
from .layout import discovery_index_key
from .ownership import claim
from .partitioning import PartitionPolicy, RowGroupSizes, SourceLayout
from .records import DiscoveryIndex, PartitionRecord, decode, put_record
from .sources.listing import SourceFile, list_source_files
from .sources.readers import parquet_row_group_bytes
from .spec import DatasetSpec, SourceSpec
from .state import write_registration
from .store import ObjectMissingError, ObjectStore

CHUNK_FILES = 1000  # files registered between two saves of the source's index: the unit of resumable work
# registrations written at once: each waits on the store (a PUT on S3/R2), not on this process
REGISTRATION_THREADS = 16


@dataclass(frozen=True)
class DiscoveryCursor:
    """Where the next step resumes: the source (by name; empty for the first) and the last file handled in this pass."""

    source: str = ""
    after: str = ""

    def to_json(self) -> str:
        return json.dumps({"source": self.source, "after": self.after})

    @classmethod
    def from_json(cls, text: str | None) -> DiscoveryCursor:
        """The cursor a sensor stored; none (or one from an older layout) starts a new pass."""
        try:
            data = loads(text or "{}")
            return cls(str(data.get("source", "")), str(data.get("after", "")))
        except (ValueError, TypeError, AttributeError):
            return cls()


@dataclass(frozen=True)
class DiscoveryBudget:
    """How much one step may do: files registered (new or changed; an unchanged file costs a lookup) and seconds
    spent, checked between chunks; None is unbounded."""

    max_files: int | None = None
    seconds: float | None = None


@dataclass
class DiscoveryStep:
    """What a step did: files looked at and registered, partitions new or changed and removed, and where to resume."""

    cursor: DiscoveryCursor
    files: int = 0
    registered: int = 0
    pass_complete: bool = False
    touched: dict[str, bool] = field(default_factory=dict)  # partition -> registered after the step (False: removed)

    @property
    def changed(self) -> list[str]:
        return [k for k, present in self.touched.items() if present]

    @property
    def removed(self) -> list[str]:
        return [k for k, present in self.touched.items() if not present]


def load_layout(store: ObjectStore, source: str) -> SourceLayout:
    """A source's registered layout (empty before its first discovery), every field checked."""
    key = discovery_index_key(source)
    try:
        body = store.get_bytes(key)
    except ObjectMissingError:
        return SourceLayout.empty(source)
    try:
        return SourceLayout(decode(DiscoveryIndex, body, key))
    except RecordError as exc:
        raise RecordError(f"{exc}; not a discovery index: delete {key} to register source {source!r} afresh") from None


def registered(store: ObjectStore, spec: DatasetSpec) -> dict[str, PartitionRecord]:
    """Every partition of the spec's sources with what it reads, in the order discovery registered them."""
    return {k: r for s in spec.sources for k, r in load_layout(store, s.name).records().items()}


def _row_groups(source: SourceSpec) -> RowGroupSizes:
    return (lambda f: parquet_row_group_bytes(source, f)) if source.format == "parquet" else (lambda f: None)


def _commit(store: ObjectStore, layout: SourceLayout, touched: set[str], step: DiscoveryStep) -> None:
    """Write the touched partitions' registrations first (REGISTRATION_THREADS at a time: each is a store round trip),
    then the index once all are written: a step cut short is redone, not lost."""
    if not touched:
        return
    records = {key: layout.record(key) for key in sorted(touched)}
    with ThreadPoolExecutor(REGISTRATION_THREADS) as pool:
        # the first failure is raised here, and the index is not saved
        list(pool.map(lambda item: write_registration(store, *item), records.items()))
    for key, record in records.items():
        step.touched[key] = record is not None
    put_record(store, discovery_index_key(layout.source), layout.index(), compact=True)


def _register(
    layout: SourceLayout, files: list[SourceFile], policy: PartitionPolicy, row_groups: RowGroupSizes
) -> tuple[set[str], int]:
    """Place the new and changed files among `files`; returns the partitions touched and how many files were."""
    touched: set[str] = set()
    count = 0
    for f in files:
        known = layout.fingerprint_of(f.uri)
        if known != f.fingerprint:
            touched |= layout.add(f, policy, row_groups) if known is None else layout.update(f, policy, row_groups)
            count += 1
    return touched, count


def discover(
    store: ObjectStore,
    spec: DatasetSpec,
    policy: PartitionPolicy,
    cursor: DiscoveryCursor = DiscoveryCursor(),
    budget: DiscoveryBudget = DiscoveryBudget(),
) -> DiscoveryStep:
    """One step of discovery from `cursor`: register files chunk by chunk until the budget is spent or the pass
    over every source is complete (vanished files are forgotten at the end of each source's pass)."""
    started = time.monotonic()
    claim(store, spec.name, spec.origin)  # another dataset's prefix is refused before anything is written
    store.preflight()  # keys that cannot write, or a server without conditional puts, are refused before any work
    names = [s.name for s in spec.sources]
    position = names.index(cursor.source) if cursor.source in names else 0  # a source gone from the spec: a new pass
    step = DiscoveryStep(cursor if cursor.source in names else DiscoveryCursor(names[0]))

    def spent() -> bool:
        over_files = budget.max_files is not None and step.registered >= budget.max_files
        return over_files or (budget.seconds is not None and time.monotonic() - started >= budget.seconds)

    while True:
        source = spec.sources[position]
        files = list_source_files(source)
        layout, row_groups = load_layout(store, source.name), _row_groups(source)
        pending = [f for f in files if f.uri > step.cursor.after]
        chunk = min(CHUNK_FILES, budget.max_files or CHUNK_FILES)
        for i in range(0, len(pending), chunk):
            if step.files and spent():  # every step handles at least one chunk
                return step
            batch = pending[i : i + chunk]
            touched, count = _register(layout, batch, policy, row_groups)
            _commit(store, layout, touched, step)
            step.files, step.registered = step.files + len(batch), step.registered + count
            step.cursor = DiscoveryCursor(source.name, batch[-1].uri)
        listed = {f.uri for f in files}
        _commit(store, layout, set().union(*(layout.remove(u) for u in sorted(layout.files() - listed))), step)
        position += 1
        if position == len(names):
            step.cursor, step.pass_complete = DiscoveryCursor(), True
            return step
        step.cursor = DiscoveryCursor(names[position])
        if spent():
            return step
