"""Loader start-up and memory per process against the number of shards: manifest format 2 (JSON of totals
plus one shard table per split) beside format 1 (every shard and every partition's lineage inline).

For N = 10, 1,000, 10,000 and 30,000 shards (real-shaped keys and lineage, tiny shard files), each
repetition measures both formats in fresh processes, interleaved: the time to construct a TokenDataset,
the process's memory growth for it, what a spawned DataLoader worker receives (pickle) and holds, and
the unique memory of a forked worker after its first batch.
"""

from __future__ import annotations

import hashlib
import io
import json
import statistics
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from shard_loader import open_manifest
from shard_loader.format import LATEST_KEY, FileRef, Manifest, ShardEntry, SplitInfo, TokenizerInfo, versioned_key

COUNTS = (10, 1_000, 10_000, 30_000)
REPETITIONS = 5
TARGET_S, TARGET_MIB = 0.2, 50

PROBE = r"""
import json, os, pickle, sys, time
def status(field):
    return int(next(l for l in open('/proc/self/status') if l.startswith(field)).split()[1]) * 1024
import numpy, shard_loader
from shard_loader import TokenDataset
mode, url = sys.argv[1], sys.argv[2]
before = status('VmRSS')
if mode == 'spawn':
    blob = open(sys.argv[3], 'rb').read()
    started = time.perf_counter()
    ds = pickle.loads(blob)
    del blob
else:
    started = time.perf_counter()
    ds = TokenDataset(url, seq_len=32, batch_size=1)
seconds = time.perf_counter() - started
next(iter(ds))
out = {'seconds': seconds, 'growth': status('VmHWM') - before}
if mode == 'open':
    blob = pickle.dumps(ds)
    out['pickled'] = len(blob)
    open(sys.argv[3], 'wb').write(blob)
    r, w = os.pipe()
    if os.fork() == 0:
        next(iter(ds))
        private = sum(int(l.split()[1]) for l in open('/proc/self/smaps_rollup')
                      if l.startswith(('Private_Clean', 'Private_Dirty')))
        os.write(w, str(private * 1024).encode()); os._exit(0)
    os.close(w)
    out['fork_uss'] = int(os.read(r, 64)); os.wait()
print(json.dumps(out))
"""


def _write(root: Path, key: str, data: bytes) -> FileRef:
    path = root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return FileRef(key, len(data), hashlib.sha256(data).hexdigest())


def _dataset(root: Path, n: int) -> dict[str, str]:
    """N tiny shards with keys and lineage shaped like a real build's; the URL of each format's manifest."""
    fp, rng = "0123456789abcdef", np.random.default_rng(n)
    entries, lineage = [], []
    for i in range(n):
        part = f"fineweb.part-{i:06d}"
        tokens = rng.integers(1, 50_000, size=96, dtype=np.uint16)
        buf = io.BytesIO()
        np.save(buf, tokens, allow_pickle=False)
        digest = hashlib.sha256(buf.getvalue()).hexdigest()[:16]
        base = f"tokenized/{fp}/train/{part}-{digest}"
        entries.append(
            ShardEntry(
                part,
                96,
                1,
                _write(root, f"{base}.npy", buf.getvalue()),
                _write(root, f"{base}.bin", np.array([0, 96], "<i8").tobytes()),
            )
        )
        lineage.append(
            {
                "partition": part,
                "source_uri": f"hf://datasets/HuggingFaceFW/fineweb/data/CC-MAIN-2024-10/{i:06d}_00000.parquet",
                "source_fingerprint": f"sha256:{hashlib.sha256(part.encode()).hexdigest()}",
                "raw_key": f"raw/fineweb/part-{i:06d}-{digest}.parquet",
                "raw_sha256": hashlib.sha256(base.encode()).hexdigest(),
                "raw_data_version": digest,
                "raw_run_id": "6f1c2d3e-aaaa-bbbb-cccc-0123456789ab",
                "tokenized_data_version": digest,
                "tokenized_run_id": "7a1c2d3e-aaaa-bbbb-cccc-0123456789ab",
                "encoder": {
                    "engine": "fastokens",
                    "version": "0.3.5",
                    "sampled_documents": 64,
                    "differing_documents": 0,
                },
            }
        )
    tokenizer = TokenizerInfo("bench", fp, 50_257, 0, _write(root, f"tokenizers/{fp}/tokenizer.json", b"{}"))
    detail = {"sources": [{"name": "fineweb", "files": lineage}], "left_out": []}
    m = Manifest(
        "bench",
        f"bench-{n}",
        "2026-01-01T00:00:00Z",
        tokenizer,
        "uint16",
        {"train": SplitInfo.of(entries)},
        {"code_version": "bench"},
        lineage_detail=detail,
    )
    for key, data in m.sidecar_bytes().items():
        _write(root, key, data)
    _write(root, versioned_key(m.version), m.dumps())
    _write(root, LATEST_KEY, m.dumps())
    v1 = {**m.to_json(), "format_version": 1, "lineage": {**m.lineage, **detail}}
    v1.pop("lineage_file")
    v1["splits"] = {
        "train": {"tokens": m.splits["train"].tokens, "documents": n, "shards": [asdict(e) for e in entries]}
    }
    _write(root, "manifests/format-1.json", (json.dumps(v1, indent=2, sort_keys=True) + "\n").encode())
    return {"format 2": str(root / LATEST_KEY), "format 1": str(root / "manifests/format-1.json")}


def _probe(mode: str, url: str, blob: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode, url, str(blob)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def run(size, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    urls = {n: _dataset(work / f"n{n}", n) for n in COUNTS}
    sizes = {}
    for n, u in urls.items():
        m = open_manifest(u["format 2"], splits=[]).manifest
        sizes[n] = {
            "json": Path(u["format 2"]).stat().st_size,
            "table": m.splits["train"].table.size,
            "lineage": m.lineage_file.size,
            "json_format_1": Path(u["format 1"]).stat().st_size,
        }
    samples: dict = {}
    for rep in range(REPETITIONS):
        for n in COUNTS:
            for fmt in sorted(urls[n], reverse=rep % 2 == 1):  # interleaved, order rotated
                blob = work / f"ds-{n}.pickle"
                opened = _probe("open", urls[n][fmt], blob)
                spawned = _probe("spawn", urls[n][fmt], blob)
                samples.setdefault((n, fmt), []).append({**opened, "spawn_growth": spawned["growth"]})
    figures = {
        f"{n} {fmt}": {k: statistics.median(s[k] for s in runs) for k in runs[0]} for (n, fmt), runs in samples.items()
    }
    ratios = {
        n: statistics.median(
            a["seconds"] / b["seconds"] for a, b in zip(samples[(n, "format 1")], samples[(n, "format 2")])
        )
        for n in COUNTS
    }
    mib = 2**20
    summary = []
    for n in COUNTS:
        new, old = figures[f"{n} format 2"], figures[f"{n} format 1"]
        summary.append(
            {
                "figure": (
                    f"loader start-up at {n:,} shards: format 2 (format 1), s / MiB grown / spawn worker MiB / fork "
                    "worker unique MiB"
                ),
                "value": (
                    f"{new['seconds']:.3f} ({old['seconds']:.3f}) / {new['growth'] / mib:.1f} "
                    f"({old['growth'] / mib:.1f}) / "
                    f"{new['spawn_growth'] / mib:.1f} ({old['spawn_growth'] / mib:.1f}) / {new['fork_uss'] / mib:.1f} "
                    f"({old['fork_uss'] / mib:.1f}); "
                    f"format 1 / format 2 time {ratios[n]:.1f}x"
                ),
                "target": f"< {TARGET_S} s and < {TARGET_MIB} MB at 30,000" if n == 30_000 else "",
            }
        )
    big = sizes[COUNTS[-1]]
    summary.append(
        {
            "figure": (
                f"manifest bytes at {COUNTS[-1]:,} shards: format 2 JSON + train table (+ lineage file) vs format 1 "
                "JSON"
            ),
            "value": f"{big['json']:,} + {big['table']:,} (+ {big['lineage']:,}) vs {big['json_format_1']:,}",
            "target": "",
        }
    )
    return {
        "summary": summary,
        "figures": figures,
        "sizes": sizes,
        "time_ratio_format_1_over_2": ratios,
        "repetitions": REPETITIONS,
    }
