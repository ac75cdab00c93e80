"""Runs executed on this machine: one defined job in this process, or a pool of spawned processes running a build's
batches; the instance's run limits that cap the pool; runs a killed build left in progress."""

from __future__ import annotations

import multiprocessing
import os
import socket
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

import dagster as dg

from ..defs.jobs import TOKENIZE_TAGS
from ..defs.partitions import run_target
from ..defs.resources import Settings
from ..lib.errors import RunFailed
from .batches import RunBatch, RunOutcome
from .dagster_private import InstanceRef
from .run_events import failure_message as _failure_of_events

# failures are reported once, as one line each, by the runner
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
# which process executes a build's run: a re-run finds those a kill left behind
BUILD_TAGS = ("shard/build_host", "shard/build_pid")
TOKENIZE_POOL = "tokenize"  # tokenized_shards' pool


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    """The innermost error of a run's first failed step (Dagster wraps the asset's own exception)."""
    return _failure_of_events(result.all_events)


def run_job(
    defs: dg.Definitions,
    job: str,
    instance: dg.DagsterInstance,
    partitions: Sequence[str] = (),
    assets: Sequence[str] = (),
    failed_ok: bool = False,
) -> dg.ExecuteInProcessResult:
    """Execute one defined job in this process over adjacent `partitions` (one run for the range), quietly and tagged
    with this process (so a re-run finds what a kill left behind). A failure is a RunFailed naming the job,
    partitions and cause, unless `failed_ok` (the caller reads the failed run's result)."""
    selection = [dg.AssetKey.from_user_string(a) for a in assets] if assets else None
    target = run_target(list(partitions)) if partitions else {"partition_key": None, "tags": {}}
    target["tags"] = {**target["tags"], **dict(zip(BUILD_TAGS, (socket.gethostname(), str(os.getpid()))))}
    result = defs.resolve_job_def(job).execute_in_process(
        instance=instance, asset_selection=selection, run_config=QUIET, raise_on_error=False, **target
    )
    if not (result.success or failed_ok):
        where = RunBatch(job, tuple(partitions))
        raise RunFailed(
            f"{where} failed (run {result.run_id}): {failure_message(result) or 'see the run in the Dagster UI'}"
        )
    return result


def worker_limit(instance: dg.DagsterInstance) -> int | None:
    """The most runs a build may execute at once under the instance's dagster.yaml: its run limit, its limit on
    tokenize-tagged runs and the tokenize pool's limit, whichever is lowest; None when it sets none."""
    config = instance.get_concurrency_config()
    storage = instance.event_log_storage
    pools = storage.get_pool_limits() if storage.supports_global_concurrency_limits else []
    default = config.pool_config.default_pool_limit
    limits: list[int | None] = [next((p.limit for p in pools if p.name == TOKENIZE_POOL), default)]
    if queue := config.run_queue_config:
        limits.append(queue.max_concurrent_runs if queue.max_concurrent_runs >= 0 else None)
        limits += [
            t["limit"]
            for t in queue.tag_concurrency_limits
            if t["key"] in TOKENIZE_TAGS and t.get("value") in (None, TOKENIZE_TAGS[t["key"]])
        ]
    known = [n for n in limits if n is not None]
    return max(1, min(known)) if known else None


def release_killed_runs(instance: dg.DagsterInstance) -> list[str]:
    """Runs a killed build left in progress (its process is gone from this host) are marked failed and their
    pool slots freed: otherwise a re-run's tokenize steps wait forever for slots no process will give back."""
    released = []
    in_progress = dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED])
    for run in instance.get_runs(filters=in_progress):
        host, pid = (run.tags.get(t) for t in BUILD_TAGS)
        if host != socket.gethostname() or not pid or process_alive(int(pid)):
            continue
        instance.report_run_failed(
            run,
            f"its process ({pid}) is gone: the build was killed; `shard-assets build` released the run's pool slots",
        )
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        released.append(run.run_id)
    return released


def process_alive(pid: int) -> bool:
    """Whether a process of this number runs on this host (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process of that number
        return True
    return True


def _run_isolating(defs: dg.Definitions, instance: dg.DagsterInstance, batch: RunBatch) -> RunOutcome:
    """One run of the batch; if it fails, one run per partition, so a bad partition fails alone."""
    try:
        return RunOutcome(batch, (run_job(defs, batch.job, instance, batch.partitions, batch.assets).run_id,), {})
    except RunFailed as exc:
        if len(batch.partitions) <= 1:
            return RunOutcome(batch, (), {batch.partitions[0] if batch.partitions else batch.job: str(exc)})
    outcomes = [_run_isolating(defs, instance, RunBatch(batch.job, (p,), batch.assets)) for p in batch.partitions]
    return RunOutcome(
        batch, tuple(r for o in outcomes for r in o.run_ids), {k: v for o in outcomes for k, v in o.failures.items()}
    )


def _run_in_worker(settings: Settings, instance_ref: InstanceRef, batch: RunBatch) -> RunOutcome:
    """A pool process: the definitions and the instance from the values it was given (no environment), one batch."""
    from ..definitions import build_definitions

    with dg.DagsterInstance.from_ref(instance_ref) as instance:
        return _run_isolating(build_definitions(settings.resources()), instance, batch)


class LocalRuns:
    """Runs executed on this machine: in this process, or `workers` batches at a time in spawned processes
    (fresh interpreters: no forked Dagster or tokenizer thread state) when the instance is persistent."""

    def __init__(self, defs: dg.Definitions, settings: Settings, instance: dg.DagsterInstance, workers: int = 1):
        self.defs, self.settings, self.instance = defs, settings, instance
        self.workers = workers if instance.is_persistent else 1

    def execute(self, batches: Sequence[RunBatch]) -> Iterator[RunOutcome]:
        if self.workers <= 1 or len(batches) <= 1:
            for batch in batches:
                yield _run_isolating(self.defs, self.instance, batch)
            return
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_run_in_worker, self.settings, self.instance.get_ref(), batch) for batch in batches]
            for future in as_completed(futures):
                yield future.result()
