"""The records dedup keeps in the store: which partitions the index holds (in the order they joined, which decides
the copy kept), and each partition's decision (what each rule dropped, against which partition's copy)."""

from __future__ import annotations

from dataclasses import dataclass, field

from shard_loader.builder_api import FileRef

RULES = ("exact", "near")


@dataclass(frozen=True)
class DedupMember:
    """A partition in the index: its place in the joining order, the raw build whose documents it holds and how many
    (the index's size decides its number of ranges)."""

    id: int
    raw_sha256: str
    documents: int = 0


@dataclass(frozen=True)
class DedupMembers:
    """The index's partitions (`state/dedup/members.json`), written last by an update: its commit point. `settings`
    names the dedup settings the index was built with (others rebuild it in the same joining order); `generations`
    the update that wrote each hash range of each kind (0: empty), as many as the kind has ranges, so a crashed update
    leaves the last one whole."""

    settings: str
    next_id: int
    members: dict[str, DedupMember] = field(default_factory=dict)
    generations: dict[str, tuple[int, ...]] = field(default_factory=dict)
    update: int = 0


@dataclass(frozen=True)
class DedupDecision:
    """One partition's documents left out as copies (`dedup/partitions/<partition>.json`): per rule, how many against
    which partition's kept copy; `reclaimed` the documents it keeps now because the partition whose copy was kept
    left; `drops` the dropped documents' hashes (absent when none). Tokenize leaves out exactly `drops`."""

    partition: str
    raw_sha256: str
    settings: str
    documents: int
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)
    reclaimed: dict[str, int] = field(default_factory=dict)
    drops: FileRef | None = None

    @property
    def dropped_total(self) -> int:
        return sum(sum(against.values()) for against in self.dropped.values())

    def by_rule(self) -> dict[str, int]:
        """{rule: documents dropped} for every rule that dropped any."""
        return {rule: sum(against.values()) for rule, against in self.dropped.items() if against}
