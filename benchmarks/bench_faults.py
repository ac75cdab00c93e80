"""Faults, seeded: (1) between loader and store, a loopback HTTP server fails, resets, stalls and truncates
a share of requests and drops every connection for 2 s; requests tried, retried and failed are counted, and
the bytes served must equal the manifest's. (2) The build is SIGKILLed at random points (tokenization,
upload, publish) and re-run; every manifest ever observed must verify. (3) A corpus of bad input files must
each be refused with an error naming the file and the problem; a full build beside them publishes the good
files and leaves the bad ones out, and every manifest stays whole."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from shard_loader.cache.checksum import verify_file
from shard_loader.cache.download import DownloadConfig, download_file
from shard_loader.storage.retry import RequestStats, RetryPolicy
from shard_loader.storage.https import HttpStore

from .datasets import make_dataset

ROOT = Path(__file__).resolve().parents[1]
KILLS = {"small": 8, "medium": 20, "large": 50}
SCHEDULE = {
    "error_rate": 0.10,
    "reset_rate": 0.05,
    "stall_rate": 0.02,
    "truncate_rate": 0.05,
    "stall_seconds": 1.5,
    "seed": 20261122,
}


def run(size, work: Path) -> dict:
    sys.path.insert(0, str(ROOT))
    download = _download_faults(size, work)
    crashes = _crash_loop(KILLS.get(size.name, 8), work / "crash")
    bad = _bad_inputs(work / "bad", work / "crash" / "store")
    return {
        **download,
        "crashes": crashes,
        "bad_inputs": bad,
        "summary": download["summary"] + crashes.pop("summary") + bad.pop("summary"),
    }


def _download_faults(size, work: Path) -> dict:
    from tests.support.http_server import Faults, FolderServer

    root = work / "dataset"
    manifest = make_dataset(root, min(size.loader_tokens, 20_000_000), shards=8, seed=3)
    refs = [r for e in manifest.split("train").shards for r in (e.npy, e.bin)]
    stats = RequestStats()
    config = DownloadConfig(part_size=256 << 10, concurrency=8, retry=RetryPolicy())  # the default retries users get
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
            {
                "figure": "requests tried / retried / failed",
                "value": f"{stats.requests} / {stats.retries} / {stats.failures}",
            },
            {
                "figure": "bytes served and verified = manifest",
                "value": f"{served:,} of {expected:,} (lost {expected - served})",
                "target": "lost 0",
            },
        ],
    }


def _lost_bytes(store: Path) -> tuple[int, int, list[str]]:
    """(manifests checked, bytes referenced by them that are missing or mismatched, the failures)."""
    from shard_loader import ShardLoaderError, open_manifest
    from tests.support.build_helpers import manifest_paths

    paths, lost, failures = manifest_paths(store), 0, []
    for path in paths:
        try:
            m = open_manifest(str(path)).manifest
        except ShardLoaderError as exc:
            failures.append(str(exc))
            continue
        for ref in m.files():
            try:
                verify_file(store / ref.key, ref)
            except (ShardLoaderError, OSError) as exc:
                lost += ref.size
                failures.append(str(exc))
    return len(paths), lost, failures


def _build_process(work: Path, spec: Path) -> subprocess.Popen:
    env = {**os.environ, "DAGSTER_HOME": str(work / "home"), "HF_HUB_OFFLINE": "1"}
    from tests.support.build_helpers import build_command

    command = build_command(spec, work / "store")
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )


def _crash_loop(kills: int, work: Path, seed: int = 20261122) -> dict:
    """Publish once, then SIGKILL `kills` builds of new versions at seeded random moments; verify after each."""
    from tests.support.dagster_helpers import tiny_dataset, write_spec

    shutil.rmtree(work, ignore_errors=True)
    (work / "home").mkdir(parents=True)
    spec, store, _ = tiny_dataset(work, files=4, docs=300)
    started = time.perf_counter()
    first = _build_process(work, spec)
    if first.wait() != 0:
        raise RuntimeError(f"clean build failed: {first.stderr.read().decode()[-2000:]}")
    clean_seconds = time.perf_counter() - started
    rng = random.Random(seed)
    killed, completed, checks, lost, failures, points = 0, 0, 0, 0, [], []
    for attempt in range(3 * kills):
        if killed == kills:
            break
        write_spec(spec, f"{work}/src/*.jsonl", vocab_size=320 + 10 * attempt)  # a new tokenizer: a new version
        proc = _build_process(work, spec)
        delay = rng.uniform(0.5, clean_seconds * 1.1)
        time.sleep(delay)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            killed += 1
            points.append(round(delay / clean_seconds, 2))
        else:
            completed += 1
        proc.wait()
        n, bytes_lost, why = _lost_bytes(store)
        checks, lost, failures = checks + n, lost + bytes_lost, failures + why
    rerun = _build_process(work, spec)
    rerun_ok = rerun.wait() == 0
    n, bytes_lost, why = _lost_bytes(store)
    checks, lost, failures = checks + n, lost + bytes_lost, failures + why
    temp_files = sum(1 for p in store.rglob("*") if p.name.endswith(".tmp"))
    return {
        "seed": seed,
        "clean_build_seconds": round(clean_seconds, 1),
        "kills": killed,
        "builds_completed_before_the_kill": completed,
        "kill_points_fraction_of_clean_build": sorted(points),
        "rerun_after_kills_succeeded": rerun_ok,
        "manifest_checks": checks,
        "manifests_published": n,
        "bytes_lost": lost,
        "failures": failures[:10],
        "unreferenced_temp_files_left": temp_files,
        "summary": [
            {
                "figure": "build SIGKILLs survived (seeded, random points)",
                "value": f"{killed if rerun_ok else 0} of {killed}, re-run completed: {rerun_ok}",
            },
            {
                "figure": "manifests verified after kills / bytes lost",
                "value": f"{checks} checks of {n} manifests / {lost} bytes",
                "target": "lost 0",
            },
            {"figure": "unreferenced temp files left by kills", "value": str(temp_files)},
        ],
    }


def _bad_inputs(work: Path, published_store: Path) -> dict:
    """Each bad file's partition must fail naming the file and problem; a full build over them must leave
    the store's published manifest as it was, whole."""
    import dagster as dg

    from shard_assets.defs.partitions import sync_partitions
    from shard_assets.runner import RunFailed, build_dataset
    from shard_assets.defs.resources import DatasetResource, StoreResource
    from shard_loader import open_manifest
    from tests.support.build_helpers import BAD_INPUTS, GOOD_INPUTS, bad_corpus_spec, write_bad_corpus
    from tests.support.dagster_helpers import materialize_raw

    write_bad_corpus(work / "src")
    dataset = DatasetResource(spec_path=str(bad_corpus_spec(work / "spec.toml", work / "src")))
    resources = {"dataset": dataset, "store": StoreResource(root=str(published_store))}
    inst = dg.DagsterInstance.ephemeral()
    sync_partitions(inst, resources["store"].store(), dataset.spec())
    refused, wrong = 0, {}
    for partition, pattern in BAD_INPUTS.items():
        ok, message = materialize_raw(inst, resources, partition)
        if not ok and re.search(pattern, message):
            refused += 1
        else:
            wrong[partition] = message
    good = sum(materialize_raw(inst, resources, p)[0] for p in GOOD_INPUTS)
    before = open_manifest(str(published_store)).manifest.version
    try:  # a failing partition is quarantined and left out of the next version (on_partition_failure = "skip")
        published = build_dataset(inst, dataset.spec(), resources).version != before
    except RunFailed:
        published = False
    opened = open_manifest(str(published_store))
    left_out = set(BAD_INPUTS) & {x["partition"] for x in opened.lineage()["left_out"]}
    kept = set(GOOD_INPUTS) & {e.partition for split in opened.manifest.splits.values() for e in split.shards}
    _, lost, _ = _lost_bytes(published_store)
    n_bad, n_good = len(BAD_INPUTS), len(GOOD_INPUTS)
    return {
        "bad_files": n_bad,
        "refused_with_the_right_message": refused,
        "wrong_or_missing_messages": wrong,
        "good_files_next_to_them_built": f"{good} of {n_good}",
        "full_build_published": published,
        "bad_files_left_out_of_it": sorted(left_out),
        "good_files_in_it": sorted(kept),
        "bytes_lost_in_any_manifest": lost,
        "summary": [
            {
                "figure": "bad input files refused naming file and problem",
                "value": f"{refused} of {n_bad}",
                "target": f"{n_bad} of {n_bad}",
            },
            {
                "figure": (
                    "good files beside them built / full build: a new version, bad files left out of it, good files "
                    "in it, bytes lost"
                ),
                "value": (
                    f"{good} of {n_good} / {published}, {len(left_out)} of {n_bad}, {len(kept)} of {n_good}, {lost}"
                ),
                "target": f"{n_good} of {n_good} / True, {n_bad} of {n_bad}, {n_good} of {n_good}, 0",
            },
        ],
    }
