"""`shard-assets build`: run the code location's own jobs in order on an instance, a pool of processes for
the per-partition jobs (one concurrency setting: `workers`), with progress. No second wiring of the graph:
the runs are the defined jobs, named in the UI like any other."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

import dagster as dg

from .defs.partitions import sync_partitions
from .lib.errors import RunFailed
from .lib.spec import DatasetSpec

QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}  # failures are reported once, as one line each, by the runner


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


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    """The innermost error of a run's first failed step (Dagster wraps the asset's own exception)."""
    failure = next((e for e in result.all_events if e.is_step_failure), None)
    if failure is None:
        return ""
    error = failure.step_failure_data.error
    while error.cause is not None:
        error = error.cause
    message = " ".join(error.message.split())
    message = message.split(f"{error.cls_name}: ", 1)[-1]  # Dagster prefixes the class's dotted path
    if error.cls_name == "DagsterAssetCheckFailedError":
        message += "; the version was written but not made live: manifest.json is unchanged"
    return f"{error.cls_name}: {message}"


def run_job(defs: dg.Definitions, job: str, instance: dg.DagsterInstance, partition: str | None = None, assets: list[str] | None = None) -> dg.ExecuteInProcessResult:
    """Execute one defined job in this process; a failure is a RunFailed naming the job, partition and cause."""
    selection = [dg.AssetKey(a) for a in assets] if assets else None
    result = defs.resolve_job_def(job).execute_in_process(
        instance=instance, partition_key=partition, asset_selection=selection, run_config=QUIET, raise_on_error=False
    )
    if not result.success:
        where = f"{job} [{partition}]" if partition else job
        raise RunFailed(f"{where} failed (run {result.run_id}): {failure_message(result) or 'see the run in the Dagster UI'}")
    return result


def _run_in_worker(job: str, partition: str, assets: list[str] | None) -> str:
    """A pool process: load the definitions from the environment (as Dagster's own run workers do) and run one job."""
    from .definitions import build_definitions

    return run_job(build_definitions(), job, dg.DagsterInstance.get(), partition, assets).run_id


def _progress(done: int, total: int, label: str, started: float) -> None:
    elapsed = time.perf_counter() - started
    eta = elapsed / done * (total - done) if done else 0.0
    line = f"{label}: {done}/{total} partitions, {elapsed:.0f} s elapsed, ETA {eta:.0f} s"
    if sys.stderr.isatty():
        print(f"\r{line}", end="\n" if done == total else "", file=sys.stderr, flush=True)
    else:
        print(line, file=sys.stderr, flush=True)


def run_partitions(defs: dg.Definitions, job: str, partitions: list[str], instance: dg.DagsterInstance, workers: int, assets: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """One run of `job` per partition, `workers` at a time; returns (run ids, {failed partition: message})."""
    started, runs, failures = time.perf_counter(), [], {}
    label = f"{job}" + (f" ({','.join(assets)})" if assets else "")
    if workers <= 1 or not instance.is_persistent or len(partitions) <= 1:
        for i, p in enumerate(partitions, 1):
            try:
                runs.append(run_job(defs, job, instance, p, assets).run_id)
            except RunFailed as exc:
                failures[p] = str(exc)
            _progress(i, len(partitions), label, started)
        return runs, failures
    context = multiprocessing.get_context("spawn")  # fresh interpreters: no forked Dagster or tokenizer thread state
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {pool.submit(_run_in_worker, job, p, assets): p for p in partitions}
        for i, future in enumerate(as_completed(futures), 1):
            try:
                runs.append(future.result())
            except RunFailed as exc:
                failures[futures[future]] = str(exc)
            _progress(i, len(partitions), label, started)
    return runs, failures


def build_dataset(instance: dg.DagsterInstance, spec: DatasetSpec, resources: dict, workers: int = 1) -> BuildResult:
    """Register partitions, then ingest every partition, make the tokenizer, tokenize every partition, and publish.

    A failing partition does not stop the others: under `on_partition_failure = "skip"` it is left out of
    the version; under "block" the publish refuses. With `workers` > 1 (and a persistent instance) partitions
    run in that many processes, which load the definitions from the environment.
    """
    from .definitions import build_definitions

    started = time.perf_counter()
    defs = build_definitions(resources)
    store = resources["store"].store()
    _, _, keys = sync_partitions(instance, store, spec)
    runs, failures = run_partitions(defs, "ingest_job", keys, instance, workers)
    runs.append(run_job(defs, "tokenizer_job", instance).run_id)
    ingested = [k for k in keys if k not in failures]
    tokenized, more = run_partitions(defs, "tokenize_job", ingested, instance, workers, assets=["tokenized_shards"])
    runs += tokenized
    for message in {**failures, **more}.values():
        print(f"warning: {message}", file=sys.stderr, flush=True)
    final = run_job(defs, "publish_job", instance)
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
    )


def default_workers() -> int:
    return int(os.environ.get("SHARD_BUILD_WORKERS", os.cpu_count() or 1))
