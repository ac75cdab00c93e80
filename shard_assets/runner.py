"""`shard-assets build`: run the code location's own jobs in order on an instance, a pool of processes for
the partitioned jobs (`workers`, capped by the instance's dagster.yaml limits; up to PARTITIONS_PER_RUN
adjacent partitions per run, and at least one run per worker), with progress. No second wiring of the graph:
the runs are the defined jobs, named in the UI like any other, and their tokenize steps claim the pool's slots."""

from __future__ import annotations

import math
import multiprocessing
import os
import socket
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

import dagster as dg

from .defs.jobs import TOKENIZE_TAGS
from .defs.partitions import PARTITIONS_PER_RUN, RUN_BYTES, raw_files, run_target, sync_partitions
from .lib.discovery import registered
from .lib.partitioning import contiguous_runs
from .lib.errors import RunFailed
from .lib.spec import DatasetSpec
from .run_events import failure_message as _events_failure
from .run_queue import RunQueue

QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}  # failures are reported once, as one line each, by the runner
BUILD_TAGS = ("shard/build_host", "shard/build_pid")  # which process executes a build's run: a re-run finds those a kill left behind
TOKENIZE_POOL = "tokenize"  # tokenized_shards' pool


@dataclass(frozen=True)
class BuildResult:
    manifest_url: str
    version: str
    tokens: dict[str, int]
    documents: dict[str, int]
    partitions: int
    left_out: int
    seconds: float
    run_ids: tuple[str, ...]
    checks: dict[str, bool]
    failed_runs: tuple[str, ...] = ()  # on a cluster instance: the runs that failed for good (after Dagster's retries), one line each


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    """The innermost error of a run's first failed step (Dagster wraps the asset's own exception)."""
    return _events_failure(result.all_events)


def run_job(defs: dg.Definitions, job: str, instance: dg.DagsterInstance, partitions: list[str] | None = None, assets: list[str] | None = None, queue: RunQueue | None = None) -> dg.ExecuteInProcessResult:
    """Execute one defined job in this process (or through `queue`, the instance's), over adjacent `partitions`
    (one run for the range); a failure is a RunFailed naming the job, partitions and cause."""
    if queue is not None:
        return queue.run_job(job, partitions, assets)
    selection = [dg.AssetKey(a) for a in assets] if assets else None
    target = run_target(partitions) if partitions else {"partition_key": None, "tags": {}}
    target["tags"] = {**target["tags"], **dict(zip(BUILD_TAGS, (socket.gethostname(), str(os.getpid()))))}
    result = defs.resolve_job_def(job).execute_in_process(
        instance=instance, asset_selection=selection, run_config=QUIET, raise_on_error=False, **target
    )
    if not result.success:
        where = f"{job} [{partitions[0]}{f'..{partitions[-1]}' if len(partitions) > 1 else ''}]" if partitions else job
        raise RunFailed(f"{where} failed (run {result.run_id}): {failure_message(result) or 'see the run in the Dagster UI'}")
    return result


def worker_limit(instance: dg.DagsterInstance) -> int | None:
    """The most runs a build may execute at once under the instance's dagster.yaml: its run limit, its limit on
    tokenize-tagged runs and the tokenize pool's limit, whichever is lowest; None when it sets none."""
    config = instance.get_concurrency_config()
    pools = instance.event_log_storage.get_pool_limits() if instance.event_log_storage.supports_global_concurrency_limits else []
    limits = [next((p.limit for p in pools if p.name == TOKENIZE_POOL), config.pool_config.default_pool_limit)]
    if queue := config.run_queue_config:
        limits.append(queue.max_concurrent_runs if queue.max_concurrent_runs >= 0 else None)
        limits += [t["limit"] for t in queue.tag_concurrency_limits if t["key"] in TOKENIZE_TAGS and t.get("value") in (None, TOKENIZE_TAGS[t["key"]])]
    limits = [n for n in limits if n is not None]
    return max(1, min(limits)) if limits else None


def release_killed_runs(instance: dg.DagsterInstance) -> list[str]:
    """Runs a killed build left in progress (its process is gone from this host) are marked failed and their
    pool slots freed: otherwise a re-run's tokenize steps wait forever for slots no process will give back."""
    released = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED])):
        host, pid = (run.tags.get(t) for t in BUILD_TAGS)
        if host != socket.gethostname() or not pid or _alive(int(pid)):
            continue
        instance.report_run_failed(run, f"its process ({pid}) is gone: the build was killed; `shard-assets build` released the run's pool slots")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        released.append(run.run_id)
    return released


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process of that number
        return True
    return True


def _run_in_worker(job: str, partitions: list[str], assets: list[str] | None) -> tuple[list[str], dict[str, str]]:
    """A pool process: load the definitions from the environment (as Dagster's own run workers do) and run one job."""
    from .definitions import build_definitions

    return _run_isolating(build_definitions(), job, dg.DagsterInstance.get(), partitions, assets)


def _run_isolating(defs: dg.Definitions, job: str, instance: dg.DagsterInstance, partitions: list[str], assets: list[str] | None) -> tuple[list[str], dict[str, str]]:
    """One run over `partitions`; if it fails, one run per partition, so a bad partition fails alone.
    Returns (run ids, {failed partition: message})."""
    try:
        return [run_job(defs, job, instance, partitions, assets).run_id], {}
    except RunFailed as exc:
        if len(partitions) == 1:
            return [], {partitions[0]: str(exc)}
    runs, failures = [], {}
    for p in partitions:
        more, failed = _run_isolating(defs, job, instance, [p], assets)
        runs, failures = runs + more, {**failures, **failed}
    return runs, failures


def _progress(done: int, total: int, label: str, started: float) -> None:
    elapsed = time.perf_counter() - started
    eta = elapsed / done * (total - done) if done else 0.0
    line = f"{label}: {done}/{total} partitions, {elapsed:.0f} s elapsed, ETA {eta:.0f} s"
    if sys.stderr.isatty():
        print(f"\r{line}", end="\n" if done == total else "", file=sys.stderr, flush=True)
    else:
        print(line, file=sys.stderr, flush=True)


def plan_runs(partitions: list[str], order: list[str], workers: int, sizes: dict[str, int]) -> list[list[str]]:
    """Adjacent partitions grouped into runs of up to PARTITIONS_PER_RUN and RUN_BYTES of source (as the sensor
    does), but at least one run per worker."""
    per_run = max(1, min(PARTITIONS_PER_RUN, math.ceil(len(partitions) / max(workers, 1))))
    return contiguous_runs(partitions, order, per_run, sizes, RUN_BYTES)


def run_partitions(defs: dg.Definitions, job: str, partitions: list[str], sizes: dict[str, int], instance: dg.DagsterInstance, workers: int, assets: list[str] | None = None, queue: RunQueue | None = None) -> tuple[list[str], dict[str, str]]:
    """Runs of `job` over `partitions` (several adjacent partitions per run; `sizes` in source bytes), `workers`
    runs at a time (through `queue`: all queued at once, the instance's limits holding); returns (run ids, {failed partition: message})."""
    started, runs, failures, done = time.perf_counter(), [], {}, 0
    label = f"{job}" + (f" ({','.join(assets)})" if assets else "")
    parallel = workers > 1 and instance.is_persistent
    planned = plan_runs(partitions, instance.get_dynamic_partitions(raw_files.name), workers if parallel else 1, sizes)
    if queue is not None:
        return queue.run_ranges(job, planned, assets, lambda n: _progress(n, len(partitions), label, started))
    if not parallel or len(planned) <= 1:
        for run in planned:
            more, failed = _run_isolating(defs, job, instance, run, assets)
            runs, failures, done = runs + more, {**failures, **failed}, done + len(run)
            _progress(done, len(partitions), label, started)
        return runs, failures
    context = multiprocessing.get_context("spawn")  # fresh interpreters: no forked Dagster or tokenizer thread state
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {pool.submit(_run_in_worker, job, run, assets): run for run in planned}
        for future in as_completed(futures):
            more, failed = future.result()
            runs, failures, done = runs + more, {**failures, **failed}, done + len(futures[future])
            _progress(done, len(partitions), label, started)
    return runs, failures


def build_dataset(instance: dg.DagsterInstance, spec: DatasetSpec, resources: dict, workers: int = 1) -> BuildResult:
    """Register partitions, then ingest every partition, make the tokenizer, tokenize every partition, and publish.

    A failing partition does not stop the others: under `on_partition_failure = "skip"` it is left out of
    the version; under "block" the publish refuses. With `workers` > 1 (and a persistent instance) partitions
    run in that many processes, which load the definitions from the environment. On an instance that launches
    runs elsewhere (Slurm, Kubernetes, ECS) the same runs go to its queue instead (run_queue.py), split into at
    least `workers` runs per job.
    """
    with RunQueue.open(instance, resources) as queue:
        return _build(instance, spec, resources, workers, queue)


def _build(instance: dg.DagsterInstance, spec: DatasetSpec, resources: dict, workers: int, queue: RunQueue | None) -> BuildResult:
    from .definitions import build_definitions

    started = time.perf_counter()
    if released := release_killed_runs(instance):
        print(f"marked {len(released)} runs of a killed build failed and freed their pool slots", file=sys.stderr, flush=True)
    limit = worker_limit(instance)
    if queue is None and limit is not None and workers > limit:
        print(f"running {limit} partition runs at once, not {workers}: the instance's dagster.yaml allows {limit}", file=sys.stderr, flush=True)
        workers = limit
    defs = build_definitions(resources)
    store = resources["store"].store()
    _, _, keys = sync_partitions(instance, store, spec)
    sizes = {k: r.size for k, r in registered(store, spec).items()}
    runs, failures = run_partitions(defs, "ingest_job", keys, sizes, instance, workers, queue=queue)
    runs.append(run_job(defs, "tokenizer_job", instance, queue=queue).run_id)
    ingested = [k for k in keys if k not in failures]
    tokenized, more = run_partitions(defs, "tokenize_job", ingested, sizes, instance, workers, assets=["tokenized_shards"], queue=queue)
    runs += tokenized
    for message in {**failures, **more}.values():
        print(f"warning: {message}", file=sys.stderr, flush=True)
    final = run_job(defs, "publish_job", instance, queue=queue)
    runs.append(final.run_id)
    meta = final.asset_materializations_for_node("manifest")[0].metadata
    return BuildResult(
        manifest_url=str(meta["manifest_url"].value),
        version=str(meta["version"].value),
        tokens={s: int(meta[f"{s}_tokens"].value) for s in ("train", "val")},
        documents={s: int(meta[f"{s}_documents"].value) for s in ("train", "val")},
        partitions=len(keys),
        left_out=int(meta["partitions_left_out"].value),
        seconds=time.perf_counter() - started,
        run_ids=tuple(runs),
        checks={e.check_name: e.passed for e in final.get_asset_check_evaluations()},
        failed_runs=tuple(queue.failed) if queue else (),
    )
