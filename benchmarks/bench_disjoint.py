"""splits_are_disjoint at scale (#26 item 11): time and peak RSS of the publish check that no document is in both
train and val, over synthetic stores of 1,000 partitions holding 10M and 100M documents (each partition a raw parquet
of random 64-bit document hashes and its part record).

- `hashes` (before): every document hash of every partition read from its raw parquet and held at once, sorted and
  intersected (the check as it was until #26).
- `records` (after): the 1,000 part records read from the store and their split proofs checked (per partition: the
  documents per split and the extremes of their hashes' top 53 bits, recorded at write time).
- `records, no proofs`: the same check on records written before proofs existed: each partition's proof derived
  from its raw parquet in record batches, one partition's batch at a time in memory.

Each measurement runs in a fresh process (peak RSS is its VmHWM, less nothing: imports included). Variants
interleaved per repetition; the hashes variant at 100M runs fewer repetitions (minutes and GiB each)."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

from .machine import PEAK_RSS_SNIPPET

PARTITIONS = 1_000
FINGERPRINT = "0123456789abcdef"
VAL_FRACTION = 0.01
DOCUMENTS = (10_000_000, 100_000_000)
REPETITIONS = {"records": 5, "records, no proofs": 3, "hashes": {10_000_000: 5, 100_000_000: 1}}

MEASURE = (
    """
import json, sys, time
PEAK = lambda: """
    + PEAK_RSS_SNIPPET
    + """
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
import numpy as np
from shard_assets.lib.layout import part_record_key
from shard_assets.lib.records import READ_THREADS, PartRecord, get_records
from shard_assets.lib.splits import overlap_count
from shard_assets.lib.store import LocalFolderStore
from shard_assets.lib.text import is_val
store, variant, count, fp = LocalFolderStore(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]


def hashes_overlap(parts):  # the check before #26: every hash of every partition in memory at once
    import pyarrow.parquet as pq

    def split_hashes(part):
        with store.open_read(part.raw.key) as f:
            hashes = pq.ParquetFile(f).read(columns=["doc_hash"], use_threads=False).column(0).to_numpy()
        val = is_val(hashes, part.val_fraction)
        return hashes[~val], hashes[val]

    train, val = [], []
    with ThreadPoolExecutor(READ_THREADS) as pool:
        for t, v in pool.map(split_hashes, parts.values()):
            train.append(t)
            val.append(v)
    train, val = np.unique(np.concatenate(train)), np.unique(np.concatenate(val))
    return int(np.intersect1d(train, val, assume_unique=True).shape[0])


started = time.perf_counter()
names = [f"web.p{i:05d}" for i in range(count)]
parts = dict(zip(names, get_records(store, [part_record_key(fp, p) for p in names], PartRecord, "bench")))
if variant == "hashes":
    overlap = hashes_overlap(parts)
else:
    if variant == "records, no proofs":
        parts = {p: replace(r, split_proof=None) for p, r in parts.items()}
    overlap = overlap_count(store, parts)
print(json.dumps({"seconds": time.perf_counter() - started, "peak_rss_mib": PEAK() / 2**20, "overlap": overlap}))
"""
)


def _store(folder: Path, documents: int) -> None:
    """A store of PARTITIONS partitions holding `documents` in all: each a raw parquet of random document hashes
    (deduplicated within it, as the raw writer does) and a part record with the split proof the writer records."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shard_assets.lib.layout import part_record_key, raw_key, raw_record_key
    from shard_assets.lib.records import PartRecord, RawRecord, ShardEntry, SourceFileRef, put_record
    from shard_assets.lib.splits import prove_split
    from shard_assets.lib.store import LocalFolderStore
    from shard_loader.format import FileRef

    store = LocalFolderStore(folder)
    rng = np.random.default_rng(26)
    per = documents // PARTITIONS
    for i in range(PARTITIONS):
        partition = f"web.p{i:05d}"
        hashes = np.unique(rng.integers(0, 2**64, size=per, dtype=np.uint64, endpoint=False))
        key = raw_key(partition, f"{i:016x}")
        path = folder / key
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"doc_hash": hashes}), path, row_group_size=1 << 16)
        proof = prove_split(path, VAL_FRACTION)
        source = SourceFileRef(f"/data/web/p{i:05d}.parquet", f"mtime:{i}:1", 1)
        raw = RawRecord(partition, "web", source, key, "ab" * 32, len(hashes), "v", "run", (source,))
        put_record(store, raw_record_key(partition), raw)
        shards = {
            split: ShardEntry(
                partition,
                n,
                n,
                FileRef(f"t/{split}/{partition}.npy", 128 + 2 * n, "cd" * 32),
                FileRef(f"t/{split}/{partition}.bin", 8 * (n + 1), "ef" * 32),
            )
            for split, n in (("train", proof.train_documents), ("val", proof.val_documents))
        }
        record = PartRecord(
            partition, FINGERPRINT, VAL_FRACTION, raw, shards, 100, "v", "run", "tokenized-3", None, proof
        )
        put_record(store, part_record_key(FINGERPRINT, partition), record)


def _measure(folder: Path, variant: str) -> dict:
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(folder), variant, str(PARTITIONS), FINGERPRINT],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(size, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    for documents in DOCUMENTS:
        folder = work / f"disjoint{documents}"
        shutil.rmtree(folder, ignore_errors=True)
        _store(folder, documents)
        runs: dict[str, list[dict]] = {v: [] for v in REPETITIONS}
        for rep in range(max(REPETITIONS["records"], REPETITIONS["hashes"][documents])):
            for variant, reps in REPETITIONS.items():  # interleaved
                if rep < (reps[documents] if isinstance(reps, dict) else reps):
                    runs[variant].append(_measure(folder, variant))
                    print(f"{documents:,} documents, {variant}: {runs[variant][-1]}", flush=True)
        shutil.rmtree(folder, ignore_errors=True)
        results[str(documents)] = {
            v: {
                "seconds": statistics.median(r["seconds"] for r in rs),
                "seconds_min_max": [min(r["seconds"] for r in rs), max(r["seconds"] for r in rs)],
                "peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in rs),
                "overlap": rs[0]["overlap"],
                "repetitions": len(rs),
            }
            for v, rs in runs.items()
        }
        ratios = [
            h["seconds"] / r["seconds"] for h, r in zip(runs["hashes"], runs["records"])
        ]  # same repetition, interleaved
        results[str(documents)]["hashes_over_records"] = statistics.median(ratios)
    order = ("hashes", "records", "records, no proofs")
    summary = []
    for documents in DOCUMENTS:
        r = results[str(documents)]
        summary.append(
            {
                "figure": (
                    f"splits_are_disjoint at {documents / 1e6:.0f}M documents, 1,000 partitions: hashes (before) / "
                    "records (after) / records without proofs, s"
                ),
                "value": " / ".join(f"{r[v]['seconds']:.1f}" for v in order) + f" ({r['hashes_over_records']:.0f}x)",
                "target": "the records' cost, not the data's",
            }
        )
        summary.append(
            {
                "figure": (
                    f"its peak RSS at {documents / 1e6:.0f}M documents: hashes / records / records without proofs, MiB"
                ),
                "value": " / ".join(f"{r[v]['peak_rss_mib']:.0f}" for v in order),
                "target": "",
            }
        )
    return {"results": results, "summary": summary}
