"""The curation stage of one partition: its raw documents pass the quality filters (issue 44), then decontamination;
what survives, written as a curated parquet (text and the raw doc_hash, so every document keeps its split), is what
dedup indexes and tokenize reads. With neither in the spec it does nothing: they read the raw parquet, as before.

A partition is curated once per raw build and settings (the eval index's version among them): a changed eval file
curates it again, never ingests it again."""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .curation_records import CuratedRecord, Decontamination, DroppedSample, DroppedSamples, Filtered
from .decontamination import EvalIndex, build_eval_index, store_eval_index
from .filters import filter_documents
from ..layout import curated_key, curated_record_key, curation_samples_key
from ..raw_writer import COMPRESSION, ROW_GROUP, TEXT_ENCODING
from ..records import FileRef, PartRecord, RawRecord, find_record, put_record, to_json
from ..spec import DatasetSpec
from ..store import ObjectStore
from ..store.base import file_sha256
from ..text import column_hashes

BATCH = 256  # documents curated at a time: the check holds about 17x its bytes at once
SAMPLES = 5  # dropped documents kept per partition and rule, with what matched
SAMPLE_MATCHES = 3
SAMPLE_CHARS = 400
DEDUP_HASH = "dedup_hash"  # with the filters: the hash of each text a rule rewrote (null: as ingested)


def curated_input(store: ObjectStore, spec: DatasetSpec, raw: RawRecord) -> tuple[RawRecord, CuratedRecord | None]:
    """What dedup indexes and tokenize read of a raw partition: the raw record when curation is off, else one naming
    the curated parquet, curated now unless stored from this raw build with these settings."""
    if spec.decontaminate is None and not spec.filters.rules:
        return raw, None
    stages: dict[str, Any] = {"filters": spec.filters.fingerprint, "keys": DEDUP_HASH} if spec.filters.rules else {}
    index = None
    if spec.decontaminate is not None:
        index = build_eval_index(spec)
        stages["decontaminate"] = [spec.decontaminate.mode, index.ngram, index.version]
    settings, key = json.dumps(stages), curated_record_key(raw.partition)
    record = find_record(store, key, CuratedRecord, "curation")
    if record is None or record.raw_sha256 != raw.sha256 or record.settings != settings:
        record = _curate(store, spec, raw, index, settings)
        put_record(store, key, record)
    if record.data is None:
        return raw, record
    return replace(raw, key=record.data.key, sha256=record.data.sha256, documents=record.documents), record


def _curate(
    store: ObjectStore, spec: DatasetSpec, raw: RawRecord, index: EvalIndex | None, settings: str
) -> CuratedRecord:
    """Each batch of the raw parquet through the filters (which drop and rewrite), then decontamination of what they
    keep; the survivors written as the curated parquet when anything was dropped or rewritten."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if index is not None:
        store_eval_index(store, index)
    dropped: Counter[str] = Counter()  # per eval set
    filtered: Counter[str] = Counter()  # per filter rule
    guard: Counter[str] = Counter()  # Filtered's counts: texts the filters "rewritten", the guard's "sampled", "agreed"
    samples: list[DroppedSample] = []
    kept = 0
    with tempfile.TemporaryDirectory(prefix="curate-") as tmp:
        pf = pq.ParquetFile(store.local_copy(raw.key, Path(tmp) / "raw.parquet"))
        out = Path(tmp) / "curated.parquet"
        schema = pf.schema_arrow.append(pa.field(DEDUP_HASH, pa.uint64())) if spec.filters.rules else pf.schema_arrow
        with pq.ParquetWriter(out, schema, compression=COMPRESSION, **TEXT_ENCODING) as writer:
            for batch in pf.iter_batches(batch_size=BATCH):
                texts, doc_hashes = batch.column("text"), batch.column("doc_hash")
                keep = np.ones(len(texts), dtype=bool)
                if spec.filters.rules:  # 1. the quality filters drop documents and may rewrite the ones they keep
                    texts, keep = _filter(spec, batch, filtered, guard, samples)
                if index is not None:  # 2. decontamination, of the documents the filters keep
                    found = np.where(keep, index.contaminated(texts), -1)
                    keep[found >= 0] = False
                    for i in np.flatnonzero(found >= 0).tolist():
                        name = index.names[found[i]]
                        dropped[name] += 1
                        _sample(samples, doc_hashes[i].as_py(), name, texts[i].as_py(), index)
                kept += int(keep.sum())
                columns = [texts, doc_hashes]
                if spec.filters.rules:  # exact dedup compares the text as published
                    hashes = column_hashes(texts)
                    columns.append(pa.array(hashes, pa.uint64(), mask=hashes == doc_hashes.to_numpy()))
                survivors = pa.table(columns, schema=schema).filter(pa.array(keep))
                writer.write_table(survivors, ROW_GROUP)
        data = None
        if kept < raw.documents or guard["rewritten"]:
            sha = file_sha256(out)
            data = FileRef(key=curated_key(raw.partition, sha[:16]), size=out.stat().st_size, sha256=sha)
            store.put_immutable(data.key, out, data)
    samples_key = None
    if samples:
        body = to_json(DroppedSamples(raw.partition, tuple(samples)))
        samples_key = curation_samples_key(raw.partition, hashlib.sha256(body).hexdigest()[:16])
        store.put_bytes(samples_key, body)
    checked = Decontamination(index.version, index.key, index.ngram, dict(sorted(dropped.items()))) if index else None
    passed = Filtered(spec.filters.fingerprint, dict(filtered), **guard) if spec.filters.rules else None
    return CuratedRecord(raw.partition, raw.sha256, settings, kept, data, checked, passed, samples_key)


def _filter(
    spec: DatasetSpec, batch: Any, counts: Counter[str], guard: Counter[str], samples: list[DroppedSample]
) -> tuple[Any, np.ndarray]:
    """One batch through the quality filters: the texts as the rules left them and which documents they keep; drops
    counted per rule in `counts` and a few sampled, rewritten texts and the guard's sample counted in `guard`."""
    import pyarrow as pa

    originals = batch.column("text").to_pylist()
    outcome = filter_documents(originals, spec.filters)
    for i, (text, rule) in enumerate(zip(outcome.texts, outcome.dropped_by)):
        if rule is not None:
            counts[rule] += 1
            _sample(samples, batch.column("doc_hash")[i].as_py(), rule, originals[i])
        elif text != originals[i]:
            guard["rewritten"] += 1
    guard.update(sampled=outcome.guard_sampled, agreed=outcome.guard_agreed)
    keep = np.array([rule is None for rule in outcome.dropped_by], dtype=bool)
    return pa.array([t or "" for t in outcome.texts], pa.large_string()), keep


def _sample(samples: list[DroppedSample], doc: int, rule: str, text: str, index: EvalIndex | None = None) -> None:
    """Keep a document `rule` dropped among the samples (SAMPLES per rule at most), with the first word runs it
    shares with the eval sets when an eval set dropped it."""
    if sum(s.rule == rule for s in samples) < SAMPLES:
        matched = index.matched(text, SAMPLE_MATCHES) if index else ()
        samples.append(DroppedSample(doc, rule, matched, text[:SAMPLE_CHARS]))


def lineage_entry(record: CuratedRecord | None) -> dict[str, Any]:
    """A partition's curation in the manifest's lineage (nothing when off): the parquet dedup and tokenize read (None:
    the raw one) and, per stage, what it dropped by rule, with the key of a few dropped documents."""
    if record is None:
        return {}
    entry: dict[str, Any] = {"curated_key": record.data.key if record.data else None}
    if f := record.filters:
        guard = {"sampled": f.sampled, "agreed": f.agreed}
        entry["filters"] = {"dropped": f.dropped, "rewritten": f.rewritten, "guard": guard, "samples": record.samples}
    if d := record.decontamination:
        entry["decontamination"] = {"dropped": d.dropped, "eval_version": d.eval_version, "samples": record.samples}
    return entry


def lineage_summary(spec: DatasetSpec, parts: dict[str, PartRecord]) -> dict[str, Any]:
    """The manifest's inline curation figures (nothing when off): the filters' settings (rules, parameters, the
    language model) and drops per rule; the eval sets' version, n-gram and drops per eval set over the version."""
    records = [part.curation for part in parts.values() if part.curation]
    filtered = [r.filters for r in records if r.filters]
    checked = [r.decontamination for r in records if r.decontamination]
    summary: dict[str, Any] = {}
    if spec.filters.rules:
        dropped = sum((Counter(f.dropped) for f in filtered), Counter[str]())
        rewritten = sum(f.rewritten for f in filtered)
        summary["filters"] = {**spec.filters.lineage(), "dropped": dict(dropped), "rewritten": rewritten}
    if spec.decontaminate is not None:
        summary["decontamination"] = {
            "eval_version": ", ".join(sorted({d.eval_version for d in checked})),
            "ngram": spec.decontaminate.ngram,
            "dropped": dict(sum((Counter(d.dropped) for d in checked), Counter[str]())),
        }
    return summary
