"""Which partitions the next version holds, and the proof that train and val are disjoint.

A partition is in the next version when it is registered from one of the spec's sources and tokenized, with the current
tokenizer, from the files it is registered with now. Every other one is left out with the reason (file and problem): its
ingest or tokenization failed, its registration was refused, its file changed (or turned unreadable) since it was
tokenized and is not rebuilt, its file vanished, or its source left the spec; each gets a quarantine record (stage
"select"). Under `on_partition_failure = "block"` a failed or stale partition refuses the publish instead.

Disjointness costs what the records cost: a document's split is a pure function of its hash, so each partition's writer
records (SplitProof) how many documents went to each split and the extremes of their hashes' top 53 bits; the check
reads those records, never the documents. `verify_job` re-derives them from the raw bytes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from shard_loader.builder_api import LATEST_KEY, SPLITS

from .curation.dedup_apply import kept_batches
from .discovery import registered
from .errors import BuildError, PublishError, StateMismatchError
from .layout import INGEST_FAILURES_PREFIX, ingest_failure_key, part_record_key, parts_prefix, quarantine_key
from .layout import quarantine_prefix
from .ownership import claim
from .record_checks import check_part_record
from .records import READ_THREADS, IngestFailure, PartRecord, PartitionRecord, Quarantine, SourceFileRef, SplitProof
from .records import SplitTotals, SplitsRecord, find_record, get_records, put_record
from .spec import DatasetSpec
from .published import read_published
from .store import ObjectMissingError, ObjectStore
from .text import is_val

RULE = SplitProof.rule  # the split rule the proofs speak of: blake2b-64 of the normalised text, its top 53 bits
CUT_SCALE = 2.0**-53  # bits * CUT_SCALE is the hash read as a fraction of 1, which is_val compares with val_fraction


@dataclass(frozen=True)
class Selection:
    parts: dict[str, PartRecord]
    left_out: dict[str, str]
    stale: dict[str, str] = field(default_factory=dict)
    failed: tuple[str, ...] = ()  # of left_out, those still in the dataset (not vanished, nor of a removed source)


R = TypeVar("R")


def _listed(store: ObjectStore, folder: str) -> set[str]:
    """The partitions with a `<partition>.json` record directly in `folder`, from one listing (not a request each)."""
    return {
        key[len(folder) : -len(".json")]
        for key, _ in store.list(folder)
        if key.endswith(".json") and "/" not in key[len(folder) :]
    }


def _read(store: ObjectStore, keys: dict[str, str], cls: type[R], needed_by: str) -> dict[str, R]:
    """{partition: record} for {partition: key}, READ_THREADS at a time."""
    return dict(zip(keys, get_records(store, list(keys.values()), cls, needed_by)))


def _describe(ref: SourceFileRef) -> str:
    return f"{ref.uri} (fingerprint {ref.fingerprint})"


def _why_not_current(
    p: str, reg: PartitionRecord, part: PartRecord | None, failure: IngestFailure | None, fingerprint: str
) -> str:
    """Why a registered partition has no part record built from its current files: its ingest failed on them, its
    files changed since it was tokenized and it is not rebuilt yet, or it was never tokenized with this tokenizer."""
    now = reg.lineage()
    if failure is not None and (failure.source_file is None or reg.built_from(failure.source_file)):
        return f"ingest failed in run {failure.run_id}: {failure.error}"
    if part is not None:
        return (
            f"its source changed since it was tokenized (tokenized from {_describe(part.raw.source_file)}, registered "
            f"now as {_describe(now)}) and it is not rebuilt"
        )
    return f"not tokenized with tokenizer {fingerprint} (source {now.uri})"


def _vanished(store: ObjectStore, current: dict[str, PartitionRecord], sources: set[str]) -> dict[str, str]:
    """{partition: reason} of the live version's partitions of the spec's sources that are no longer registered: their
    file vanished. Named by the version they leave, not by every later one."""
    try:
        live = read_published(store, LATEST_KEY)
    except ObjectMissingError:
        return {}
    published = {p for s in live.splits.values() for p in s.shards.column("partition")}
    gone = sorted(p for p in published if p not in current and p.split(".", 1)[0] in sources)
    fingerprint = live.tokenizer.fingerprint
    with ThreadPoolExecutor(READ_THREADS) as pool:
        parts = list(
            pool.map(lambda p: find_record(store, part_record_key(fingerprint, p), PartRecord, "splits"), gone)
        )
    named = {p: f" {_describe(part.raw.source_file)}" if part else "" for p, part in zip(gone, parts)}
    return {p: f"its source file{named[p]} vanished: discovery no longer lists it" for p in gone}


def select_partitions(store: ObjectStore, spec: DatasetSpec, fingerprint: str, partitions: list[str]) -> Selection:
    """The partitions of the next version, tokenized from their current files; the others with why they are left out.

    `partitions` are the store's registered partitions (state/partitions/), which still name those of sources removed
    from the spec; a partition whose file vanished is named while the live version holds it (found by its part
    record). Each part record used is checked against its partition and tokenizer (record_checks.check_part_record)."""
    claim(store, spec.name, spec.origin)
    sources = {s.name for s in spec.sources}
    current = registered(store, spec)  # partition -> what it reads now, from each source's discovery index
    with_part = _listed(store, parts_prefix(fingerprint))
    quarantines = {p: quarantine_key(fingerprint, p) for p in _listed(store, quarantine_prefix(fingerprint))}
    quarantined = {p: q for p, q in _read(store, quarantines, Quarantine, "splits").items() if q.stage == "tokenize"}
    failure_keys = {p: ingest_failure_key(p) for p in _listed(store, INGEST_FAILURES_PREFIX) if p in current}
    failures = _read(store, failure_keys, IngestFailure, "splits")
    part_keys = {p: part_record_key(fingerprint, p) for p in sorted(with_part) if p in current}
    parts = _read(store, part_keys, PartRecord, "splits")
    vanished = _vanished(store, current, sources)
    # failed: left out because they failed or are stale (what "block" refuses)
    chosen, left_out, stale, failed = {}, {}, {}, []
    for p in sorted(set(partitions) | set(current) | set(vanished)):
        part = parts.get(p)
        if part is not None:
            check_part_record(part, p, fingerprint)
        if p.split(".", 1)[0] not in sources:
            left_out[p] = "its source was removed from the spec"
        elif p not in current:
            if p in vanished:
                left_out[p] = vanished[p]
        elif p in failures and failures[p].error.startswith(f"{StateMismatchError.__name__}: "):
            f = failures[p]  # its registration was refused: its last build is not trusted as if it were valid
            left_out[p] = f"its registration was refused in run {f.run_id}: {f.error}; its last build is left out"
            failed.append(p)
        elif p in quarantined:
            q = quarantined[p]
            left_out[p] = f"quarantined: tokenization failed in run {q.run_id}: {q.error}"
            failed.append(p)
        elif part is not None and current[p].built_from(part.raw.source_file):
            chosen[p] = part
        else:
            why = _why_not_current(p, current[p], part, failures.get(p), fingerprint)
            if part is not None and spec.stale_partitions == "keep_last_good":
                chosen[p], stale[p] = part, f'{why}; its last good build is kept (stale_partitions = "keep_last_good")'
            else:
                left_out[p] = why + ("; its last good build is left out" if part is not None else "")
                failed.append(p)
    if failed and spec.on_partition_failure == "block":
        raise PublishError(
            f"{len(failed)} partitions cannot be published ({failed[:5]}{' ...' if len(failed) > 5 else ''}: "
            f"{left_out[failed[0]]}); "
            f'on_partition_failure = "block" in {spec.origin}: fix or remove them, or set it to "skip"'
        )
    if not chosen:
        raise PublishError(
            f"no partition is tokenized with tokenizer {fingerprint} from its current files; materialise "
            "tokenized_shards first"
            + (f" ({next(iter(left_out))}: {next(iter(left_out.values()))})" if left_out else "")
        )
    return Selection(parts=chosen, left_out=left_out, stale=stale, failed=tuple(failed))


def record_left_out(store: ObjectStore, fingerprint: str, selection: Selection, run_id: str) -> None:
    """A quarantine record (stage "select") for every partition the selection left out, with its reason; a partition's
    tokenization quarantine is kept as it is (it is the cause), and a report no longer true is removed."""
    reports = {
        p: Quarantine(p, fingerprint, why, run_id, "select")
        for p, why in selection.left_out.items()
        if not why.startswith("quarantined: ")
    }
    outdated = _listed(store, quarantine_prefix(fingerprint)) - set(selection.left_out)
    olds = _read(store, {p: quarantine_key(fingerprint, p) for p in sorted(outdated)}, Quarantine, "splits")
    with ThreadPoolExecutor(READ_THREADS) as pool:
        list(pool.map(lambda item: put_record(store, quarantine_key(fingerprint, item[0]), item[1]), reports.items()))
        outdated_reports = [p for p, q in olds.items() if q.stage == "select"]
        list(pool.map(lambda p: store.delete(quarantine_key(fingerprint, p)), outdated_reports))


# -- disjointness from records --


def prove_split(
    raw_path: Path, val_fraction: float, documents: dict[str, int] | None = None, drops: Any = None
) -> SplitProof:
    """The split proof of one raw parquet less the documents whose hash is in `drops` (dedup's): how many of them the
    rule sends to each split and the extremes of their hashes' top 53 bits, read from its doc_hash column in record
    batches (memory per batch, not per file). With `documents` (what the writer put in each split), a writer that
    split otherwise is refused here."""
    import pyarrow.parquet as pq

    counts, low, high = {"train": 0, "val": 0}, None, None
    for batch in kept_batches(pq.ParquetFile(raw_path), ["doc_hash"], 1 << 16, drops):
        hashes = batch.column(0).to_numpy()
        val = is_val(hashes, val_fraction)
        bits = hashes >> np.uint64(11)
        counts["val"] += int(val.sum())
        counts["train"] += int(len(val) - val.sum())
        if val.any():
            high = max(high or 0, int(bits[val].max()))
        if not val.all():
            least = int(bits[~val].min())
            low = least if low is None else min(low, least)
    if documents is not None and documents != counts:
        raise BuildError(
            f"{raw_path}: the writer put {documents} documents in each split, but their hashes send {counts}; refusing "
            "the partition"
        )
    return SplitProof(val_fraction, counts["train"], counts["val"], low, high)


def proof_problem(part: PartRecord, proof: SplitProof) -> str | None:
    """Why `proof` does not show that every document of `part` is in the split its hash names, or None."""
    vf = part.val_fraction
    if proof.rule != RULE or proof.val_fraction != vf:
        return f"proof of rule {proof.rule} at val_fraction {proof.val_fraction}, the partition's is {RULE} at {vf}"
    shards = (part.shards["train"].documents, part.shards["val"].documents)
    if (proof.train_documents, proof.val_documents) != shards:
        return (
            f"proof counts {proof.train_documents} train and {proof.val_documents} val documents, its shards hold "
            f"{shards[0]} and {shards[1]}"
        )
    if proof.val_max_bits is not None and not proof.val_max_bits * CUT_SCALE < vf:
        return f"a val document's hash reads {proof.val_max_bits * CUT_SCALE}, not below val_fraction {vf}"
    if proof.train_min_bits is not None and proof.train_min_bits * CUT_SCALE < vf:
        return f"a train document's hash reads {proof.train_min_bits * CUT_SCALE}, below val_fraction {vf}"
    return None


def _proof_from_raw(store: ObjectStore, part: PartRecord) -> SplitProof:
    """A proof for a part record written before proofs existed, from its raw parquet's hashes (one file's memory)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return prove_split(store.local_copy(part.raw.key, Path(tmp) / "raw.parquet"), part.val_fraction)


def unproven_documents(store: ObjectStore, parts: dict[str, PartRecord]) -> dict[str, str]:
    """{partition: problem} of the partitions whose split proof does not hold (none: train and val are disjoint,
    since every partition split by one rule at one val_fraction sends a hash to one split only). Records without a
    proof are proven from their raw parquet, READ_THREADS at a time."""
    older = [p for p, part in parts.items() if part.split_proof is None]
    with ThreadPoolExecutor(READ_THREADS) as pool:
        derived = dict(zip(older, pool.map(lambda p: _proof_from_raw(store, parts[p]), older)))
    problems = {p: proof_problem(part, part.split_proof or derived[p]) for p, part in parts.items()}
    return {p: problem for p, problem in problems.items() if problem is not None}


def overlap_count(store: ObjectStore, parts: dict[str, PartRecord]) -> int:
    """How many documents the per-partition records do not prove to be in one split only (0: train and val are
    disjoint): every document of a partition whose proof fails. Costs a record read per partition, not the data."""
    unproven = unproven_documents(store, parts)
    return sum(sum(parts[p].shards[s].documents for s in SPLITS) for p in unproven)


def summarise(fingerprint: str, selection: Selection, overlap: int) -> SplitsRecord:
    """The splits record: totals per split over the selected partitions."""
    parts = selection.parts
    fractions = {p.val_fraction for p in parts.values()}
    if len(fractions) > 1:
        raise PublishError(
            f"partitions were tokenized with different val_fraction values {sorted(fractions)}; re-tokenize them"
        )
    shards = {s: [p.shards[s] for p in parts.values()] for s in SPLITS}
    totals = {
        s: SplitTotals(sum(e.tokens for e in es), sum(e.documents for e in es), sum(1 for e in es if e.documents))
        for s, es in shards.items()
    }
    return SplitsRecord(
        tokenizer_fingerprint=fingerprint,
        val_fraction=fractions.pop(),
        partitions=tuple(sorted(parts)),
        totals=totals,
        overlap=overlap,
        left_out=selection.left_out,
        stale=selection.stale,
        failed=selection.failed,
    )
