"""Ingest of one file against its document count (issue 48): CPU-s per million documents to normalise, check for
within-file copies, hash and write one parquet of short rows (about 40 bytes each, 1% copies), at 10^5, 10^6 and
4x10^6 documents (2x10^6 at size small), interleaved over REPS repetitions; medians of per-repetition ratios to the
smallest file. A flat ratio is linear ingest; the check it replaces rescanned every kept hash per batch (quadratic)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from .run import bench_main
from .sizes import Size, get_size

REPS = 5
DOCUMENTS = {"small": (100_000, 1_000_000, 2_000_000)}
DEFAULT = (100_000, 1_000_000, 4_000_000)


def make_file(work: Path, documents: int) -> Path:
    """A parquet of `documents` short rows, one in a hundred a copy of an earlier one."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = work / f"rows{documents}" / "rows.parquet"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        ids = np.arange(documents)
        ids[::100] = ids[::100] // 2  # copies of earlier rows
        texts = pa.array([f"row {i} of a file of short documents, {i % 97} words" for i in ids.tolist()])
        pq.write_table(pa.table({"text": texts}), path, row_group_size=65_536)
    return path


def cpu_per_million(path: Path, workdir: Path) -> float:
    """CPU-s (this process, all threads) per million documents to ingest the file at `path` as one partition."""
    from shard_assets.lib.raw_writer import write_raw_partition
    from shard_assets.lib.sources.listing import list_source_files
    from shard_assets.lib.spec import parse_spec

    spec = parse_spec({"name": "b", "sources": [{"name": "s", "uri": str(path)}]}, "bench.toml")
    started = time.process_time()
    stats = write_raw_partition(spec, list_source_files(spec.sources[0])[0], workdir / "raw.parquet")
    return (time.process_time() - started) / stats.documents_in * 1e6


def run(size: Size | str, work: Path, reps: int = REPS) -> dict:
    size = get_size(size) if isinstance(size, str) else size
    counts = DOCUMENTS.get(size.name, DEFAULT)
    work.mkdir(parents=True, exist_ok=True)
    files = {n: make_file(work, n) for n in counts}
    per_rep: list[dict[int, float]] = []
    for _ in range(reps):
        per_rep.append({n: cpu_per_million(files[n], work) for n in counts})
        print({f"{n:,}": round(v, 2) for n, v in per_rep[-1].items()})
    smallest = counts[0]
    ratios = {n: statistics.median(r[n] / r[smallest] for r in per_rep) for n in counts}
    cost = {n: statistics.median(r[n] for r in per_rep) for n in counts}
    return {
        "cpu_s_per_million_documents": {str(n): cost[n] for n in counts},
        "ratio_to_smallest": {str(n): ratios[n] for n in counts},
        "reps": reps,
        "summary": [
            {
                "figure": f"ingest CPU per document, a file of {n:,} / of {smallest:,} short documents "
                f"(median of {reps} interleaved reps)",
                "value": f"{ratios[n]:.2f} ({cost[n]:.2f} vs {cost[smallest]:.2f} CPU-s per million)",
                "target": "<= 1.5 (linear)",
            }
            for n in counts[1:]
        ],
    }


if __name__ == "__main__":
    raise SystemExit(bench_main("ingest", run, __doc__, REPS, (80, 50)))
