"""The records the curation stage keeps in the store: what it dropped of each partition (by rule, with a sample of
what matched) and the parquet dedup and tokenize read in place of the raw one."""

from __future__ import annotations

from dataclasses import dataclass, field

from shard_loader.builder_api import FileRef


@dataclass(frozen=True)
class Decontamination:
    """A partition checked against the eval sets of index `eval_version` (`index`: its key): documents dropped per
    eval set, and `samples` (a JSON file: a few dropped documents with the n-grams they share)."""

    eval_version: str
    index: str
    ngram: int
    dropped: dict[str, int] = field(default_factory=dict)
    samples: str | None = None

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())


@dataclass(frozen=True)
class CuratedRecord:
    """One partition's curation (`state/curation/partitions/<partition>.json`) for one raw build and settings:
    `documents` kept, in `data` (the curated parquet; None: the raw parquet as is, nothing dropped)."""

    partition: str
    raw_sha256: str
    settings: str
    documents: int
    data: FileRef | None = None
    decontamination: Decontamination | None = None

    @property
    def dropped_total(self) -> int:
        return self.decontamination.dropped_total if self.decontamination else 0


@dataclass(frozen=True)
class DroppedSample:
    """One document the curation dropped: its hash, the rule (an eval set), what matched, and its first characters."""

    doc_hash: int
    rule: str
    matched: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class DroppedSamples:
    """A few of a partition's dropped documents, for a person deciding whether to trust a rule."""

    partition: str
    samples: tuple[DroppedSample, ...]
