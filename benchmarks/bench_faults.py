"""Faults between loader and store, for a fixed seeded schedule: a loopback HTTP server fails,
resets, stalls and truncates a share of requests, and drops every connection for 2 s; the loader's
requests tried, retried and failed are counted, and the bytes served must equal the manifest's."""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

from shard_loader.checksum import verify_file
from shard_loader.download import DownloadConfig, download_file
from shard_loader.retry import RequestStats, RetryPolicy
from shard_loader.store_http import HttpStore

from .datasets import make_dataset

SCHEDULE = {"error_rate": 0.10, "reset_rate": 0.05, "stall_rate": 0.02, "truncate_rate": 0.05, "stall_seconds": 1.5, "seed": 20261122}


def run(size, work: Path) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.http_server import Faults, FolderServer

    root = work / "dataset"
    manifest = make_dataset(root, min(size.loader_tokens, 20_000_000), shards=8, seed=3)
    refs = [r for e in manifest.split("train").shards for r in (e.npy, e.bin)]
    stats = RequestStats()
    config = DownloadConfig(part_size=256 << 10, concurrency=8, retry=RetryPolicy(attempts=10, base_delay=0.05, max_delay=1.0))
    faults = Faults(**SCHEDULE)
    with FolderServer(root, faults=faults) as server, tempfile.TemporaryDirectory() as cache:
        store = HttpStore(server.url, timeout=1.0)
        started = time.perf_counter()

        def outage():  # for 2 s every connection is dropped, as when the server goes away and comes back
            time.sleep(0.05)
            saved, faults.reset_rate = faults.reset_rate, 1.0
            time.sleep(2.0)
            faults.reset_rate = saved

        threading.Thread(target=outage, daemon=True).start()
        paths = [download_file(store, ref, Path(cache) / ref.key, config, stats) for ref in refs]
        seconds = time.perf_counter() - started
        for path, ref in zip(paths, refs):
            verify_file(path, ref)
        served = sum(p.stat().st_size for p in paths)
    expected = sum(r.size for r in refs)
    injected = dict(faults.injected)
    return {
        "schedule": SCHEDULE,
        "files": len(refs),
        "faults_injected": injected,
        "requests": stats.as_dict(),
        "bytes_expected": expected,
        "bytes_served_verified": served,
        "bytes_lost": expected - served,
        "seconds": round(seconds, 2),
        "summary": [
            {"figure": "faults injected (seeded)", "value": ", ".join(f"{k} {v}" for k, v in sorted(injected.items()))},
            {"figure": "requests tried / retried / failed", "value": f"{stats.requests} / {stats.retries} / {stats.failures}"},
            {"figure": "bytes served and verified = manifest", "value": f"{served:,} of {expected:,} (lost {expected - served})", "target": "lost 0"},
        ],
    }
