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

from .curation_records import CuratedRecord, Decontamination, DroppedSample, DroppedSamples
from .decontamination import EvalIndex, build_eval_index, ngram_hashes, store_eval_index, words_of
from ..layout import curated_key, curated_record_key, curation_samples_key
from ..raw_writer import COMPRESSION, ROW_GROUP, TEXT_ENCODING
from ..records import FileRef, PartRecord, RawRecord, find_record, put_record, to_json
from ..spec import DatasetSpec
from ..store import ObjectStore

BATCH = 256  # documents curated at a time: the check holds about 17x its bytes at once
SAMPLES = 5  # dropped documents kept per partition with what matched
SAMPLE_MATCHES = 3
SAMPLE_CHARS = 400


def curated_input(store: ObjectStore, spec: DatasetSpec, raw: RawRecord) -> tuple[RawRecord, CuratedRecord | None]:
    """What dedup indexes and tokenize read of a raw partition: the raw record itself when curation is off, else the
    same record naming the curated parquet (its documents, key and sha256), curated now unless its stored curation
    was made from this raw build with these settings."""
    if spec.decontaminate is None:
        return raw, None
    index = build_eval_index(spec)
    settings = json.dumps({"decontaminate": [spec.decontaminate.mode, index.ngram, index.version]})
    record = find_record(store, curated_record_key(raw.partition), CuratedRecord, "curation")
    if record is None or record.raw_sha256 != raw.sha256 or record.settings != settings:
        record = _curate(store, raw, index, settings)
        put_record(store, curated_record_key(raw.partition), record)
    if record.data is None:
        return raw, record
    return replace(raw, key=record.data.key, sha256=record.data.sha256, documents=record.documents), record


def _sample(text: str, doc: int, rule: str, index: EvalIndex) -> DroppedSample:
    """A dropped document with the first word runs it shares with the eval set, as a person reads them."""
    import pyarrow as pa

    hashes, _ = ngram_hashes(pa.array([text], pa.large_string()), index.ngram)
    words = words_of(text)
    at = np.flatnonzero(index.grams.find(hashes) >= 0)[:SAMPLE_MATCHES].tolist()
    matched = tuple(" ".join(words[j : j + index.ngram]) for j in at)
    return DroppedSample(doc, rule, matched, text[:SAMPLE_CHARS])


def _curate(store: ObjectStore, raw: RawRecord, index: EvalIndex, settings: str) -> CuratedRecord:
    import pyarrow as pa
    import pyarrow.parquet as pq

    store_eval_index(store, index)
    dropped: Counter[str] = Counter()
    samples: list[DroppedSample] = []
    kept = 0
    with tempfile.TemporaryDirectory(prefix="curate-") as tmp:
        path = store.local_path(raw.key) or Path(tmp) / "raw.parquet"
        if not path.exists():
            store.get_file(raw.key, path)
        pf = pq.ParquetFile(path)
        out = Path(tmp) / "curated.parquet"
        with pq.ParquetWriter(out, pf.schema_arrow, compression=COMPRESSION, **TEXT_ENCODING) as writer:
            for batch in pf.iter_batches(batch_size=BATCH):
                texts, doc_hashes = batch.column("text"), batch.column("doc_hash")
                keep = np.ones(len(texts), dtype=bool)
                # 1. the quality filters (issue 44) go here: they clear `keep` and may rewrite `texts` (not doc_hashes)
                # 2. decontamination, of the documents the filters keep
                found = np.where(keep, index.contaminated(texts), -1)
                keep[found >= 0] = False
                for i, s in zip(np.flatnonzero(found >= 0).tolist(), found[found >= 0].tolist()):
                    dropped[index.names[s]] += 1
                    if len(samples) < SAMPLES:
                        samples.append(_sample(texts[i].as_py(), doc_hashes[i].as_py(), index.names[s], index))
                kept += int(keep.sum())
                mask = pa.array(keep)
                writer.write_table(
                    pa.table([texts.filter(mask), doc_hashes.filter(mask)], schema=pf.schema_arrow), ROW_GROUP
                )
        data = None
        if dropped:
            with open(out, "rb") as f:
                sha = hashlib.file_digest(f, "sha256").hexdigest()
            data = FileRef(key=curated_key(raw.partition, sha[:16]), size=out.stat().st_size, sha256=sha)
            store.put_immutable(data.key, out, data)
    samples_key = None
    if samples:
        body = to_json(DroppedSamples(raw.partition, tuple(samples)))
        samples_key = curation_samples_key(raw.partition, hashlib.sha256(body).hexdigest()[:16])
        store.put_bytes(samples_key, body)
    decontamination = Decontamination(index.version, index.key, index.ngram, dict(sorted(dropped.items())), samples_key)
    return CuratedRecord(raw.partition, raw.sha256, settings, kept, data, decontamination)


def lineage_entry(record: CuratedRecord | None) -> dict[str, Any]:
    """A partition's curation in the manifest's lineage (nothing when off): the parquet dedup and tokenize read (None:
    the raw one) and, per stage, what it dropped by rule."""
    d = record.decontamination if record else None
    if record is None or d is None:
        return {}
    return {
        "curated_key": record.data.key if record.data else None,
        "decontamination": {"dropped": d.dropped, "eval_version": d.eval_version, "samples": d.samples},
    }


def lineage_summary(spec: DatasetSpec, parts: dict[str, PartRecord]) -> dict[str, Any]:
    """The manifest's inline curation figures (nothing when off): the eval sets' version and n-gram, and the
    documents each eval set dropped over the version."""
    if spec.decontaminate is None:
        return {}
    dropped: Counter[str] = Counter()
    versions = set()
    for part in parts.values():
        if part.curation and (d := part.curation.decontamination):
            dropped.update(d.dropped)
            versions.add(d.eval_version)
    summary = {"eval_version": ", ".join(sorted(versions)), "ngram": spec.decontaminate.ngram, "dropped": dict(dropped)}
    return {"decontamination": summary}
