"""The dedup index at scale (#32): time and peak RSS of exact-dedup index updates over synthetic stores of 1,000
partitions holding 10M and 100M documents (each partition a raw parquet of random 64-bit document hashes, 10% of
them copies of the previous partition's, and its raw record and registration).

- `all but one`: the index built from nothing with 999 partitions in one update (what a first build's run does for
  its partitions, or a change of [dedup] settings for all), and
- `one new file`: then one more partition checked against that index (a sensor-registered file): its hashes are
  read, the index is not re-derived from the published data, but every range it touches is rewritten.

Each measurement runs in a fresh process (peak RSS is its VmHWM, imports included); the two variants alternate within
each repetition and the index is removed before the next one. `ranges` is the number of hash ranges: memory follows
the largest range, so the ranges grow with the corpus to keep it flat.

Near dedup's cost (issue 48): `shard-assets build --workers 1` of 1 and of N web-like files (bench_build's corpus and
50k BPE), exact dedup (the default) and with `near = true`, the four builds interleaved in each repetition in a
rotating order; near's extra marginal CPU = (near N - near 1) - (exact N - exact 1), against the exact build's
marginal CPU (N - 1). Beside it, the near keys of a sample of documents against the way they were made before
(Python-string shingles into datasketch's `MinHash.bulk`), per document. `python -m benchmarks.bench_dedup near
[small|medium|large]` runs it alone into benchmarks/results/dedup_near.json."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .machine import PEAK_RSS_SNIPPET

PARTITIONS = 1_000
COPIES = 0.1  # of each partition's documents, copies of the previous partition's
CASES = ((10_000_000, 256, 5), (100_000_000, 256, 3), (100_000_000, 2048, 3))  # documents, ranges, repetitions
NEAR_FILES = {"small": ((3, 8),), "medium": ((3, 8), (5, 40)), "large": ((9, 40),)}  # files to have, MB each
NEAR_REPETITIONS = 5
NEAR_SAMPLE = 300  # documents whose near keys are timed directly, old way and new

MEASURE = (
    """
import json, sys, time
PEAK = lambda: """
    + PEAK_RSS_SNIPPET
    + """
from shard_assets.lib.curation.dedup import update_index
from shard_assets.lib.spec import parse_spec
from shard_assets.lib.store import LocalFolderStore
root, src, ranges, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
spec = parse_spec({"name": "b", "sources": [{"name": "web", "uri": src + "/*.parquet"}], "dedup": {"ranges": ranges}},
                  "bench.toml")
names = [f"web.p{i:05d}" for i in range(first, last)]
started = time.perf_counter()
decisions = update_index(LocalFolderStore(root), spec, names, "bench")
dropped = sum(d.dropped_total for d in decisions.values())
print(json.dumps({"seconds": time.perf_counter() - started, "peak_rss_mib": PEAK() / 2**20, "dropped": dropped}))
"""
)


def _store(folder: Path, documents: int) -> int:
    """A store of PARTITIONS registered partitions holding `documents` in all; returns how many are planted copies."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shard_assets.lib.layout import discovery_index_key, raw_key, raw_record_key
    from shard_assets.lib.records import DiscoveryIndex, FilePiece, RawRecord, SourceFileRef, put_record
    from shard_assets.lib.store import LocalFolderStore

    store = LocalFolderStore(folder)
    rng = np.random.default_rng(32)
    per, copies = documents // PARTITIONS, int(documents // PARTITIONS * COPIES)
    previous = np.zeros(0, dtype=np.uint64)
    pieces, planted = {}, 0
    for i in range(PARTITIONS):
        partition = f"web.p{i:05d}"
        fresh = rng.integers(0, 2**64, size=per - (copies if len(previous) else 0), dtype=np.uint64)
        hashes = np.unique(
            np.concatenate([fresh, rng.choice(previous, copies, replace=False)] if len(previous) else [fresh])
        )
        planted += min(copies, len(previous))
        previous = hashes
        key = raw_key(partition, f"{i:016x}")
        path = folder / key
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"doc_hash": hashes}), path, row_group_size=1 << 16)
        piece = FilePiece(f"/data/web/p{i:05d}.parquet", f"mtime:{i}:1", 1)
        pieces[partition] = (piece,)
        source = SourceFileRef(piece.uri, piece.fingerprint, 1)
        raw = RawRecord(partition, "web", source, key, f"{i:064x}", len(hashes), "v", "run", (source,))
        put_record(store, raw_record_key(partition), raw)
    put_record(store, discovery_index_key("web"), DiscoveryIndex("web", None, pieces), compact=True)
    return planted


def _measure(folder: Path, ranges: int, first: int, last: int) -> dict:
    root = Path(__file__).resolve().parents[1]
    args = [str(folder), "/data/web", str(ranges), str(first), str(last)]
    out = subprocess.run([sys.executable, "-c", MEASURE, *args], cwd=root, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_case(work: Path, documents: int, ranges: int, repetitions: int) -> dict:
    """Both variants, alternating, `repetitions` times over a store of `documents` made in `work`: medians."""
    folder = work / f"dedup{documents}"
    shutil.rmtree(folder, ignore_errors=True)
    planted = _store(folder, documents)
    runs: dict[str, list[dict]] = {"all but one": [], "one new file": []}
    for _ in range(repetitions):
        shutil.rmtree(folder / "state" / "dedup", ignore_errors=True)
        runs["all but one"].append(_measure(folder, ranges, 0, PARTITIONS - 1))
        runs["one new file"].append(_measure(folder, ranges, PARTITIONS - 1, PARTITIONS))
        print(f"{documents:,} documents, {ranges} ranges: {runs['all but one'][-1]} {runs['one new file'][-1]}")
    shutil.rmtree(folder, ignore_errors=True)
    return {"planted_copies": planted, **{variant: medians(rs) for variant, rs in runs.items()}}


def medians(rs: list[dict]) -> dict:
    return {
        "seconds": statistics.median(r["seconds"] for r in rs),
        "seconds_min_max": [min(r["seconds"] for r in rs), max(r["seconds"] for r in rs)],
        "peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in rs),
        "dropped": rs[0]["dropped"],
        "repetitions": len(rs),
    }


def summary_row(name: str, case: dict) -> dict:
    a, b = case["all but one"], case["one new file"]
    return {
        "figure": f"exact-dedup index, {name}, 1,000 partitions: 999 partitions from nothing / one more file against "
        "them: s, peak RSS",
        "value": f"{a['seconds']:.1f} s, {a['peak_rss_mib']:.0f} MiB / {b['seconds']:.1f} s, {b['peak_rss_mib']:.0f} "
        f"MiB ({a['repetitions']} reps); {a['dropped'] + b['dropped']:,} of {case['planted_copies']:,} copies found",
        "target": "memory flat in the corpus (one range at a time)",
    }


def _old_near_keys(texts: list[str]) -> None:
    """Near signatures as they were made before issue 48: a Python bytes object per distinct word 5-gram, hashed and
    permuted by datasketch's `MinHash.bulk`."""
    from datasketch import MinHash

    def shingles(text: str) -> list[bytes]:
        words = text.split()
        return list({" ".join(words[i : i + 5]).encode() for i in range(max(len(words) - 4, 1))})

    MinHash.bulk([shingles(t) for t in texts], num_perm=128, seed=1)


def _keys_per_document(texts: list[str], repetitions: int) -> dict:
    """ms of CPU per document of the near keys now and as before, interleaved."""
    import pyarrow as pa

    from shard_assets.lib.curation.dedup_near import band_keys

    column = pa.array(texts, pa.large_string())
    times: dict[str, list[float]] = {"now": [], "before": []}
    for _ in range(repetitions):
        for name, make in (("now", lambda: band_keys(column, 5, 0.8, 128)), ("before", lambda: _old_near_keys(texts))):
            started = time.process_time()
            make()
            times[name].append((time.process_time() - started) * 1e3 / len(texts))
    ratios = [b / n for b, n in zip(times["before"], times["now"])]
    return {name: statistics.median(t) for name, t in times.items()} | {"speedup": statistics.median(ratios)}


def _index_cpu(root: Path, spec_path: Path, near: bool, partitions: list[str]) -> float:
    """CPU-s of the dedup step alone over `partitions` of a built store, from an empty index, exact or with near."""
    from dataclasses import replace

    from shard_assets.lib.curation.dedup import update_index
    from shard_assets.lib.spec import load_spec
    from shard_assets.lib.store import LocalFolderStore

    shutil.rmtree(root / "state" / "dedup", ignore_errors=True)
    spec = load_spec(spec_path)
    spec = replace(spec, dedup=replace(spec.dedup, near=near))
    started = time.process_time()
    update_index(LocalFolderStore(root), spec, partitions, "bench")
    return time.process_time() - started


def near_cost(size_name: str, work: Path, repetitions: int = NEAR_REPETITIONS) -> dict:
    """Near dedup's extra marginal CPU against the exact build's marginal CPU: whole builds interleaved, and the dedup
    step alone on the marginal partitions, exact then near (their difference is near's cost without the builds'
    noise)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from shard_assets.lib.curation.dedup_near import band_layout
    from shard_assets.lib.discovery import registered
    from shard_assets.lib.spec import load_spec
    from shard_assets.lib.store import LocalFolderStore

    from .bench_build import _build, _spec, _tokenizer, write_sources

    for files, file_mb in NEAR_FILES[size_name]:  # medium: 3 files of 8 MB, then 2 of 40 MB
        sources = write_sources(work / f"sources-{size_name}", files, file_mb)
    tokenizer = _tokenizer(work, sources[0])
    variants = [(near, n) for near in (False, True) for n in (1, files)]
    table = {False: "", True: "\n[dedup]\nnear = true\n"}
    specs = {(near, n): _spec(work, f"{near}-{n}", sources[:n], tokenizer, table[near]) for near, n in variants}
    documents = sum(pq.ParquetFile(f).metadata.num_rows for f in sources[1:])
    text_bytes = sum(
        pc.sum(pc.binary_length(pq.read_table(f, columns=["text"]).column(0))).as_py() for f in sources[1:]
    )
    reps = []
    for rep in range(repetitions):
        order = variants[rep % 4 :] + variants[: rep % 4]
        builds = {v: _build(specs[v], work / f"out-{v[0]}-{v[1]}") for v in order}
        exact = builds[(False, files)]["total"] - builds[(False, 1)]["total"]
        near = builds[(True, files)]["total"] - builds[(True, 1)]["total"]
        tokens = builds[(False, files)]["tokens"] - builds[(False, 1)]["tokens"]
        built = work / f"out-True-{files}" / "store"
        marginal = sorted(registered(LocalFolderStore(built), load_spec(specs[(True, files)])))[1:]
        band_layout(0.8, 128)  # its one-off scipy import is a fixed cost, outside the step's marginal
        step = {near: 0.0 for near in table}
        for kind in (False, True) if rep % 2 == 0 else (True, False):
            step[kind] = _index_cpu(built, specs[(True, files)], kind, marginal)
        jobs = {
            near: sum(builds[(near, files)]["cpu"].values()) - sum(builds[(near, 1)]["cpu"].values()) for near in table
        }
        reps.append(
            {
                "exact_marginal_cpu": exact,
                "near_marginal_cpu": near,
                "ratio": (near - exact) / exact,
                "jobs_ratio": (jobs[True] - jobs[False]) / jobs[False],
                "step_extra_cpu": step[True] - step[False],
                "step_ratio": (step[True] - step[False]) / exact,
                "tokens": tokens,
                "builds": {f"{'near' if k[0] else 'exact'}-{k[1]}": b for k, b in builds.items()},
            }
        )
        print(f"   near rep {rep}: {json.dumps(reps[-1])}", flush=True)
    texts = pq.read_table(sources[0], columns=["text"]).column(0).to_pylist()[:NEAR_SAMPLE]
    keys = _keys_per_document(texts, repetitions)
    extra = statistics.median(r["step_extra_cpu"] for r in reps)
    per_token = extra / statistics.median(r["tokens"] for r in reps)

    def spread(name: str) -> str:
        values = [r[name] for r in reps]
        return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"

    exact = statistics.median(r["exact_marginal_cpu"] for r in reps)
    return {
        "repetitions": reps,
        "keys_per_document_ms": keys,
        "text_bytes": text_bytes,
        "documents": documents,
        "summary": [
            {
                "figure": f"near dedup's extra CPU / the exact build's marginal CPU ({files} files of "
                f"{'/'.join(str(mb) for _, mb in NEAR_FILES[size_name])} MB vs 1, {repetitions} repetitions, medians "
                "of per-repetition ratios, min-max): the dedup step alone (exact, then with near, on the marginal "
                "partitions); whole builds; the jobs' CPU of whole builds",
                "value": f"{spread('step_ratio')}; {spread('ratio')}; {spread('jobs_ratio')}",
                "target": "<= 0.5",
            },
            {
                "figure": "near dedup's extra CPU: per MB of text / per 1M documents (of "
                f"{text_bytes / documents / 1e3:.1f} KB) / per 2T tokens (of this text); the exact build's marginal "
                "CPU per MB",
                "value": f"{extra / text_bytes * 1e9:.1f} ms / {extra / documents * 1e6 / 3600:.2f} core-hours / "
                f"{per_token * 2e12 / 3600:,.0f} core-hours; {exact / text_bytes * 1e9:.1f} ms",
            },
            {
                "figure": f"near keys of {len(texts)} documents, CPU ms per document: now / before (datasketch's "
                "MinHash.bulk over Python-string shingles)",
                "value": f"{keys['now']:.3f} / {keys['before']:.3f} ({keys['speedup']:.0f}x)",
            },
        ],
    }


def run(size, work: Path, cases: tuple[tuple[int, int, int], ...] = CASES) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    results = {
        f"{documents / 1e6:.0f}M documents, {ranges} ranges": measure_case(work, documents, ranges, repetitions)
        for documents, ranges, repetitions in cases
    }
    near = near_cost(size.name, work / "near")
    summary = [summary_row(name, case) for name, case in results.items()] + near["summary"]
    return {"results": results, "near": near, "summary": summary}


if __name__ == "__main__" and sys.argv[1] == "near":  # near dedup's cost alone: near [small|medium|large]
    found = near_cost(
        sys.argv[2] if len(sys.argv) > 2 else "small", Path(__file__).parent / "results" / "work" / "near"
    )
    (Path(__file__).parent / "results" / "dedup_near.json").write_text(json.dumps(found, indent=2) + "\n")
elif __name__ == "__main__":  # some cases alone, merged into benchmarks/results/dedup.json: documents:ranges:reps
    out = Path(__file__).parent / "results" / "dedup.json"
    chosen = tuple(tuple(int(x) for x in c.split(":")) for c in sys.argv[1].split(","))
    found = run(None, Path(__file__).parent / "results" / "work" / "dedup", chosen)  # type: ignore[arg-type]
    kept = json.loads(out.read_text()) if out.exists() else {"results": {}}
    kept["results"] |= found["results"]
    kept["summary"] = [summary_row(name, case) for name, case in kept["results"].items()]
    out.write_text(json.dumps(kept, indent=2) + "\n")
