"""The records the curation stage keeps in the store: what it dropped of each partition (by rule, with a sample of
what matched) and the parquet dedup and tokenize read in place of the raw one."""

from __future__ import annotations

from dataclasses import dataclass, field

from shard_loader.builder_api import FileRef


@dataclass(frozen=True)
class Decontamination:
    """A partition checked against the eval sets of index `eval_version` (key `index`): documents dropped per set."""

    eval_version: str
    index: str
    ngram: int
    dropped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Filtered:
    """A partition passed through the quality filters of settings `fingerprint`: documents dropped per rule, kept
    documents whose text a rule rewrote (C4's line removal), and the guard's sample (`agreed` of `sampled` documents
    decided the same with spaCy's words)."""

    fingerprint: str
    dropped: dict[str, int] = field(default_factory=dict)
    rewritten: int = 0
    sampled: int = 0
    agreed: int = 0


@dataclass(frozen=True)
class CuratedRecord:
    """One partition's curation (`state/curation/partitions/<partition>.json`) for one raw build and settings:
    `documents` kept, in `data` (the curated parquet; None: the raw parquet as is, nothing dropped or rewritten), and
    `samples` (a JSON file: a few dropped documents per rule, with what matched)."""

    partition: str
    raw_sha256: str
    settings: str
    documents: int
    data: FileRef | None = None
    decontamination: Decontamination | None = None
    filters: Filtered | None = None
    samples: str | None = None

    @property
    def dropped_total(self) -> int:
        return sum(sum(stage.dropped.values()) for stage in (self.filters, self.decontamination) if stage)

    def keys(self) -> set[str]:
        """The store objects it names, which gc keeps: its curated parquet, samples and eval index."""
        index = self.decontamination.index if self.decontamination else None
        return {k for k in (self.data.key if self.data else None, self.samples, index) if k}


@dataclass(frozen=True)
class DroppedSample:
    """One document the curation dropped: its hash, the rule (a filter, or an eval set), what matched (the word runs it
    shares with the eval set; nothing for a filter), and its first characters."""

    doc_hash: int
    rule: str
    matched: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class DroppedSamples:
    """A few of a partition's dropped documents, for a person deciding whether to trust a rule."""

    partition: str
    samples: tuple[DroppedSample, ...]
