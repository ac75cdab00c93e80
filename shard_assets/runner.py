"""`shard-assets build`: run the code location's own jobs in order on an instance, with progress. No second wiring of
the graph: the runs are the defined jobs (up to PARTITIONS_PER_RUN adjacent partitions per run, at least one run per
worker), named in the UI like any other, and their tokenize steps claim the pool's slots.

Where the runs execute is one seam, `RunExecutor` (execution/): `LocalRuns` runs them in this process, or in a pool of
`workers` spawned processes (capped by the instance's dagster.yaml limits) that get the settings as arguments; on an
instance whose runs execute elsewhere (Slurm, Kubernetes, ECS), `RunQueue` submits them to the instance's queue and
follows them through Dagster's retries. The summary is read from typed values: the published manifest and splits record
in the store, and the check evaluations of the publish run in the instance."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO, cast

import dagster as dg

from shard_loader.builder_api import LATEST_KEY, parse_manifest

from .defs.partitions import PARTITIONS_PER_RUN, RAW_FILES, RUN_BYTES, sync_partitions
from .defs.resources import Settings, StoreResource
from .execution.batches import RunBatch, RunExecutor, RunOutcome
from .execution.local import LocalRuns, release_killed_runs, worker_limit
from .execution.run_events import check_results
from .execution.run_queue import RunQueue
from .lib.discovery import registered
from .lib.errors import RunFailed
from .lib.layout import splits_record_key
from .lib.partitioning import contiguous_runs
from .lib.records import SplitsRecord, get_record
from .lib.spec import DatasetSpec
from .lib.tokenizer import current_record, tokenizer_change, tokenizer_forecast

CLEAR_LINE = "\r\x1b[K"  # a terminal's progress line is cleared before a warning takes its place
PROGRESS_INTERVAL = 30.0  # seconds between progress lines in a pipe (a terminal redraws one line at every run)


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
    failed_runs: tuple[str, ...] = ()  # on a cluster instance: the runs that failed for good (after Dagster's retries)


class Progress:
    """One job's progress on `stream`, in partitions (or in runs, for an unpartitioned job): in a terminal one line
    redrawn at every run; in a pipe (CI logs) a line at most every `interval` seconds and one when the job is done.
    Failures print as they happen, counted as failed."""

    def __init__(
        self,
        label: str,
        total: int,
        stream: TextIO | None = None,
        interval: float = PROGRESS_INTERVAL,
        unit: str = "partitions",
    ):
        self.label, self.total, self.interval, self.unit = label, total, interval, unit
        self.stream = stream or sys.stderr  # looked up now: tests and callers may have replaced sys.stderr
        self.done = self.failed = 0
        self.started = self.shown = time.perf_counter()
        self.tty = self.stream.isatty()

    def line(self) -> str:
        elapsed = time.perf_counter() - self.started
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        failed = f" ({self.failed} failed)" if self.failed else ""
        return f"{self.label}: {self.done}/{self.total} {self.unit}{failed}, {elapsed:.0f} s elapsed, ETA {eta:.0f} s"

    def update(self, outcome: RunOutcome) -> None:
        self.done += len(outcome.batch.partitions) or 1  # an unpartitioned job's batch is one run
        self.failed += len(outcome.failures)
        for message in outcome.failures.values():
            print(f"{CLEAR_LINE if self.tty else ''}warning: {message}", file=self.stream, flush=True)
        finished = self.done >= self.total
        if self.tty:
            print(f"\r{self.line()}", end="\n" if finished else "", file=self.stream, flush=True)
        elif finished or time.perf_counter() - self.shown >= self.interval:
            self.shown = time.perf_counter()
            print(self.line(), file=self.stream, flush=True)


def run_partitions(
    executor: RunExecutor,
    job: str,
    partitions: list[str],
    order: Sequence[str],
    sizes: dict[str, int],
    workers: int,
    assets: tuple[str, ...] = (),
    in_key_order: bool = False,
) -> tuple[list[str], dict[str, str]]:
    """Runs of `job` over `partitions` (several adjacent ones per run; `sizes` in source bytes) with progress;
    returns (run ids, {failed partition: message}). Every partition failing is a RunFailed naming the first cause.
    `in_key_order`: one run per range of adjacent partitions, each started once the one before has ended (dedup's
    index keeps the copy of the partition that joined first: which worker finishes first must not decide it)."""
    progress = Progress(job + (f" ({','.join(assets)})" if assets else ""), len(partitions))
    runs: list[str] = []
    failures: dict[str, str] = {}
    outcomes: Iterator[RunOutcome]
    if in_key_order:
        ranges = contiguous_runs(partitions, order, max(len(partitions), 1))
        outcomes = (o for r in ranges for o in executor.execute([RunBatch(job, tuple(r), assets)]))
    else:  # runs of up to PARTITIONS_PER_RUN and RUN_BYTES of source (as the sensor does), at least one per worker
        per_run = max(1, min(PARTITIONS_PER_RUN, math.ceil(len(partitions) / max(workers, 1))))
        runs_of = contiguous_runs(partitions, order, per_run, sizes, RUN_BYTES)
        outcomes = executor.execute([RunBatch(job, tuple(run), assets) for run in runs_of])
    for outcome in outcomes:
        runs += outcome.run_ids
        failures |= outcome.failures
        progress.update(outcome)
    if partitions and len(failures) == len(partitions):
        first = failures[next(p for p in partitions if p in failures)]
        raise RunFailed(f"every partition failed in {job} ({len(partitions)} of {len(partitions)}); the first: {first}")
    return runs, failures


def run_one(executor: RunExecutor, job: str) -> str:
    """One run of an unpartitioned job, with its progress line; its run id, or a RunFailed naming the cause."""
    progress = Progress(job, 1, unit="run")
    (outcome,) = executor.execute([RunBatch(job)])
    if outcome.failures:
        raise RunFailed(outcome.failures[job])
    progress.update(outcome)
    return outcome.run_ids[0]


def _say(line: str) -> None:
    """A line for the person running the build, on stderr at once (beside the progress lines)."""
    print(line, file=sys.stderr, flush=True)


def build_dataset(
    instance: dg.DagsterInstance,
    spec: DatasetSpec,
    resources: dict[str, dg.ConfigurableResource[Any]],
    workers: int = 1,
    executor: RunExecutor | None = None,
) -> BuildResult:
    """Register partitions, then read every partition's raw documents (in parallel), add them to the dedup index (one
    range of adjacent partitions at a time, in key order), make the tokenizer, tokenize every partition, and publish.

    A failing partition does not stop the others: under `on_partition_failure = "skip"` it is left out of the version;
    under "block" the publish refuses. Runs execute with `executor`: by default the instance's queue when its runs
    execute elsewhere (`RunQueue`, split into at least `workers` runs per job), else `LocalRuns`: with `workers` > 1
    (and a persistent instance) that many processes at once."""
    with RunQueue.open(instance, resources) as queue:
        from .definitions import build_definitions

        executor = executor or queue
        started = time.perf_counter()
        if released := release_killed_runs(instance):
            _say(f"marked {len(released)} runs of a killed build failed and freed their pool slots")
        if executor is None:
            limit = worker_limit(instance)
            if limit is not None and workers > limit:
                _say(
                    f"running {limit} partition runs at once, not {workers}: the instance's dagster.yaml allows {limit}"
                )
                workers = limit
            executor = LocalRuns(build_definitions(resources), Settings.of(resources), instance, workers)
        parallel = workers if instance.is_persistent else 1
        evals = [run_one(executor, "eval_index_job")] if spec.decontaminate else []  # a bad eval set: before any write
        store = cast(StoreResource, resources["store"]).store()
        _, _, keys = sync_partitions(instance, store, spec)
        records = registered(store, spec)
        if forecast := tokenizer_forecast(store, spec.tokenizer, records):  # said before any run, and again once made
            _say(f"warning: {forecast}")
        sizes = {k: r.size for k, r in records.items()}
        order = instance.get_dynamic_partitions(RAW_FILES)
        runs, failures = run_partitions(executor, "ingest_job", keys, order, sizes, parallel, assets=("raw_documents",))
        runs = evals + runs
        built = [k for k in keys if k not in failures]
        dedup_runs, dedup_failures = run_partitions(
            executor, "ingest_job", built, order, sizes, parallel, assets=("dedup",), in_key_order=True
        )
        runs, failures = runs + dedup_runs, failures | dedup_failures
        before = current_record(store)
        runs.append(run_one(executor, "tokenizer_job"))
        if change := tokenizer_change(store, before, current_record(store)):  # said before any partition uses it
            _say(f"warning: {change}")
        ingested = [k for k in keys if k not in failures]
        runs += run_partitions(
            executor, "tokenize_job", ingested, order, sizes, parallel, assets=("tokenized_shards",)
        )[0]
        publish_run = run_one(executor, "publish_job")
        runs.append(publish_run)
        # what publish_job made live
        live = parse_manifest(store.get_bytes(LATEST_KEY), origin=f"{store.describe()}/{LATEST_KEY}")
        summary = get_record(store, splits_record_key(live.tokenizer.fingerprint), SplitsRecord, "build summary")
        return BuildResult(
            manifest_url=f"{store.loader_url().rstrip('/')}/{LATEST_KEY}",
            version=live.version,
            tokens={s: v.tokens for s, v in live.splits.items()},
            documents={s: v.documents for s, v in live.splits.items()},
            partitions=len(keys),
            left_out=len(summary.left_out),
            seconds=time.perf_counter() - started,
            run_ids=tuple(executor.run_ids()) if isinstance(executor, RunQueue) else tuple(runs),
            checks=check_results(instance, publish_run),
            failed_runs=tuple(executor.failed) if isinstance(executor, RunQueue) else (),
        )
