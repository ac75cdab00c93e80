"""What dedup decides, applied: the documents tokenize reads of a raw partition (its copies left out), the publish
check that no two published documents are identical, and the dedup figures of lineage and the UI."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .dedup import PAIR, Spill, load_range, read_drops, rows_of, settings_of, update_index
from .dedup_records import RULES, DedupDecision, DedupMembers
from ..layout import DEDUP_MEMBERS_KEY, dedup_decision_key
from ..records import PartRecord, RawRecord, find_record
from ..spec import DatasetSpec
from ..store import ObjectStore
from ..text import is_val


def dropped_documents(
    store: ObjectStore, spec: DatasetSpec | None, raw: RawRecord, run_id: str
) -> tuple[Any, DedupDecision | None]:
    """What tokenize leaves out of a raw partition: the hashes its decision drops, as an Arrow array (None when none
    are), and the decision (None when dedup is off): the stored one when it was made for this raw build and these
    settings, else the index updated with the partition first."""
    import pyarrow as pa

    if spec is None or not spec.dedup.enabled:
        return None, None
    decision = find_record(store, dedup_decision_key(raw.partition), DedupDecision, "tokenize")
    if decision is None or decision.raw_sha256 != raw.sha256 or decision.settings != settings_of(spec.dedup):
        decision = update_index(store, spec, [raw.partition], run_id)[raw.partition]
    if decision.drops is None:
        return None, decision
    return pa.array(read_drops(store, decision.drops.key).docs), decision


def kept_batches(pf: Any, columns: list[str], batch_size: int, drops: Any) -> Iterator[Any]:
    """A raw ParquetFile's record batches of `columns` (doc_hash among them) without the documents whose hash is in
    `drops` (None: all), filtered in Arrow as they are read: the raw file is never rewritten."""
    import pyarrow.compute as pc

    for batch in pf.iter_batches(batch_size=batch_size, columns=columns):
        yield batch if drops is None else batch.filter(pc.invert(pc.is_in(batch.column("doc_hash"), value_set=drops)))


@dataclass(frozen=True)
class CopyCheck:
    """What the publish check found: documents published more than once (by hash of their text as published), those
    `missing` though a published partition holds them (every copy left out by the `stale` partitions, tokenized under
    decisions changed since), and the published partitions the index does not hold as built (not checkable)."""

    copies: int
    unindexed: tuple[str, ...]
    documents: int
    missing: int = 0
    stale: tuple[str, ...] = ()


def published_copies(store: ObjectStore, spec: DatasetSpec, parts: dict[str, PartRecord]) -> CopyCheck | None:
    """Count the published documents that repeat another's text, range by range: the exact index's rows of the published
    partitions less each one's part record's drops. None when exact dedup is off (copies are published on purpose)."""
    if not spec.dedup.exact:
        return None
    index = find_record(store, DEDUP_MEMBERS_KEY, DedupMembers, "dedup check")
    if index is None or "exact" not in index.generations:
        return CopyCheck(0, tuple(sorted(parts)), 0)
    members = {p: index.members.get(p) for p in parts}
    ids = {p: m.id for p, m in members.items() if m and m.raw_sha256 == parts[p].indexed_sha256}
    unindexed = [p for p in parts if p not in ids]
    with tempfile.TemporaryDirectory(prefix="dedup-check-") as tmp:
        ranges = len(index.generations["exact"])
        spill = Spill(Path(tmp) / "all", ranges)
        exact = Spill(Path(tmp) / "exact", ranges) if spec.dedup.near else spill  # near drops are meant
        for p, m in ids.items():
            decision = parts[p].dedup
            drops = read_drops(store, decision.drops.key if decision and decision.drops else None)
            spill.add(rows_of(drops.keys, drops.docs, m))  # spilled by the range of their exact key, as the index is
            if exact is not spill:
                by_exact = drops.rule == RULES.index("exact")
                exact.add(rows_of(drops.keys[by_exact], drops.docs[by_exact], m))
        published = np.fromiter(ids.values(), dtype=np.uint32)
        copies = documents = missing = 0
        stale: set[int] = set()
        for r, g in enumerate(index.generations["exact"]):
            held = load_range(store, "exact", r, g)
            held = held[np.isin(held["member"], published)]
            rows, left = _without(held, spill.rows(r)), _without(held, exact.rows(r))
            documents += len(rows)
            copies += len(rows) - len(np.unique(rows["key"]))
            lost = np.setdiff1d(held["key"], left["key"])
            missing += len(lost)
            stale |= set(np.unique(held["member"][np.isin(held["key"], lost)]).tolist())
    names = {m: p for p, m in ids.items()}
    return CopyCheck(copies, tuple(sorted(unindexed)), documents, missing, tuple(sorted(names[m] for m in stale)))


def _without(rows: np.ndarray, gone: np.ndarray) -> np.ndarray:
    """`rows` less those of `gone` (by member and document)."""
    return rows[~np.isin(_pairs(rows), _pairs(gone))] if len(gone) else rows


def _pairs(rows: np.ndarray) -> np.ndarray:
    """Each row's (member, doc) as one opaque value, for set membership."""
    pairs = np.empty(len(rows), dtype=PAIR)
    pairs["member"], pairs["doc"] = rows["member"], rows["doc"]
    return pairs.view(np.dtype((np.void, PAIR.itemsize)))


def lineage_entry(decision: DedupDecision | None) -> dict[str, Any] | None:
    """A partition's dedup in the manifest's lineage: per rule, documents dropped against each partition's kept copy,
    and those it keeps because the partition that held the kept copy left."""
    if decision is None:
        return None
    d, drops = decision, decision.drops.key if decision.drops else None
    return {"dropped": d.dropped, "reclaimed": d.reclaimed, "documents": d.documents, "drops": drops}


def dropped_by_split(store: ObjectStore, drops_key: str | None, val_fraction: float) -> dict[str, int]:
    """How many of a partition's dropped documents (its lineage's `drops` list) each split would have held."""
    docs = read_drops(store, drops_key).docs
    val = int(is_val(docs, val_fraction).sum())
    return {"train": len(docs) - val, "val": val}


def lineage_summary(spec: DatasetSpec, parts: dict[str, PartRecord]) -> dict[str, Any]:
    """The manifest's inline dedup figures: the settings and the documents each rule dropped over the version."""
    dropped = sum((Counter(part.dedup.by_rule()) for part in parts.values() if part.dedup), Counter[str]())
    return {"exact": spec.dedup.exact, "near": spec.dedup.near, "dropped": dict(dropped)}
