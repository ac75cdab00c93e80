"""`shard-assets build` on an instance whose runs execute elsewhere (Slurm, Kubernetes, ECS: any run launcher but
the default one): the build's runs go to the instance's run queue, named and tagged as the in-process path names
them, and the build follows each to its end, through Dagster's run retries.

A node never sees the submitting process's environment or disk: each run carries the spec (its text) and the
store as run config of its resources, secrets as `{env: NAME}` that the node resolves from the variables its
launcher passes. The runs are created from the code location loaded here, as the UI creates them, so the
daemon retries them and the UI shows them under the location `shard_assets`.
"""

from __future__ import annotations

import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import dagster as dg
import sqlalchemy.exc

from .dagster_private import (
    AUTO_RETRY_RUN_ID_TAG,
    MAX_RETRIES_TAG,
    PARTITION_NAME_TAG,
    RETRY_CURSOR_KEY,
    WILL_RETRY_TAG,
    DefaultRunLauncher,
    InProcessCodeLocationOrigin,
    InProcessWorkspaceLoadTarget,
    JobSubsetSelector,
    LoadableTargetOrigin,
    SyncInMemoryRunLauncher,
    WorkerStatus,
    WorkspaceProcessContext,
)

from .batches import RunBatch, RunOutcome
from .build_daemon import LOCATION_NAME, BuildDaemon, daemon_alive
from ..defs.partitions import run_target
from ..defs.resources import DatasetResource
from ..lib.errors import BuildError
from .run_events import failure_message

BUILD_TAG = "shard/build_id"  # every run of one build carries it: filter the UI's runs by it
POLL_SECONDS = 2.0
RETRY_TAG_SECONDS = 300  # a failed run's will_retry tag is written with its failure; past this, no retry is coming
SAY_WAIT_SECONDS = 10  # a retry awaited longer than this is said to be awaited
SECRET_FIELDS = ("access_key_id", "secret_access_key")
OUTAGE_SECONDS = 600  # how long a build waits for its Dagster database to answer again before it gives up
ABANDON_SECONDS = 60  # how long a stopping build waits for retries the daemon announced, to cancel them too
T = TypeVar("T")


class StartFailure(BuildError):
    """The same job's runs keep failing the same way before they start: a broken node environment, not bad luck."""


def _database_down(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is the instance's database refusing connections: Postgres down or restarting
    (dagster-postgres gives up after a few quick retries, with DagsterPostgresException)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, sqlalchemy.exc.DBAPIError) or type(seen).__name__ == "DagsterPostgresException":
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def launches_elsewhere(instance: dg.DagsterInstance) -> bool:
    """Whether the instance's runs leave this machine: any launcher but the default (a local process) or the
    in-memory one of an ephemeral instance."""
    return not isinstance(instance.run_launcher, DefaultRunLauncher | SyncInMemoryRunLauncher)


def portable_config(resources: dict[str, dg.ConfigurableResource[Any]]) -> dict[str, Any]:
    """Run config that rebuilds `resources` on a machine that sees neither this process's environment nor its
    disk: the spec travels as its text, a local store root as an absolute path (a folder every node sees),
    secrets only as `{env: NAME}`."""
    config = {}
    for name, resource in resources.items():
        if isinstance(resource, DatasetResource):
            path = Path(resource.spec_path).resolve()
            resource = DatasetResource(spec_path=str(path), spec_toml=resource.spec_toml or path.read_text())
        values = {}
        for key in type(resource).model_fields:
            value = getattr(resource, key)
            if isinstance(value, dg.EnvVar):
                value = {"env": value.env_var_name}
            elif key in SECRET_FIELDS and value:
                raise BuildError(
                    f"resource {name!r}: {key} must be a dg.EnvVar for runs on a cluster; a plain value would be "
                    "stored in each run's config"
                )
            elif key == "root" and isinstance(value, str) and value and "://" not in value:
                value = str(Path(value).resolve())
            values[key] = value
        config[name] = {"config": values}
    return {"resources": config}


@dataclass
class QueuedRun:
    """One run standing for (part of) a batch: a retry replaces the failed attempt; a failed range is run again one
    partition per run, each a QueuedRun of the same batch."""

    batch: int  # its batch's index in the call to execute
    job: str
    partitions: tuple[str, ...]
    assets: tuple[str, ...]
    run_id: str
    failed_at: float | None = None  # when the current attempt was seen failed, while its retry is awaited
    said_waiting: bool = False  # whether the build said it waits for that retry

    def where(self) -> str:
        return str(RunBatch(self.job, self.partitions, self.assets))


class RunQueue:
    """A RunExecutor: submits the build's runs to the instance's queue and follows them; `failed` lists the runs
    that failed for good (after Dagster's retries), one line each."""

    def __init__(
        self,
        instance: dg.DagsterInstance,
        workspace: WorkspaceProcessContext,
        run_config: dict[str, Any],
        daemon: BuildDaemon | None,
    ):
        self.instance, self.workspace, self.run_config, self.daemon = instance, workspace, run_config, daemon
        self.build_id = uuid.uuid4().hex[:12]
        self.failed: list[str] = []
        self.started_badly: dict[str, str] = {}  # Dagster job -> how its last run failed before it started
        self.down_since: float | None = None  # when the database stopped answering
        self.back_at = 0.0  # when it last answered again (time.time()): runs made before may have died of the outage

    @classmethod
    @contextmanager
    def open(
        cls, instance: dg.DagsterInstance, resources: dict[str, dg.ConfigurableResource[Any]]
    ) -> Iterator[RunQueue | None]:
        """A queue for the build when the instance launches runs elsewhere, else None (runs execute in this process).
        Starts a dagster-daemon for the build when none serves the instance, and stops it after."""
        if not launches_elsewhere(instance):
            yield None
            return
        run_config = portable_config(resources)
        target = LoadableTargetOrigin(
            executable_path=sys.executable, module_name="shard_assets.definitions", attribute="defs"
        )
        # the image Kubernetes and ECS launchers run it in, as for a code server
        image = os.environ.get("DAGSTER_CURRENT_IMAGE")
        origin = InProcessCodeLocationOrigin(target, location_name=LOCATION_NAME, container_image=image)
        daemon = None
        if not daemon_alive(instance):
            daemon = BuildDaemon()
            print(
                f"no dagster-daemon serves this instance: running one for this build (log: {daemon.log_path}); "
                "run `dagster-daemon run -w workspace.yaml` on a service node to keep one between builds",
                file=sys.stderr,
                flush=True,
            )
        try:
            with WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget(origin)) as workspace:
                yield cls(instance, workspace, run_config, daemon)
        finally:
            if daemon is not None:
                daemon.stop()

    def submit(self, batch: int, job: str, partitions: tuple[str, ...], assets: tuple[str, ...]) -> QueuedRun:
        """Create `job`'s run over `partitions` (a key or a range, as the in-process path tags it) from the code
        location, and put it in the instance's queue."""
        context = self.workspace.create_request_context()
        location = context.get_code_location(LOCATION_NAME)
        repo = next(iter(location.get_repositories().values()))
        keys = [dg.AssetKey(a) for a in assets] if assets else None
        remote_job = location.get_job(
            JobSubsetSelector(
                location_name=LOCATION_NAME,
                repository_name=repo.name,
                job_name=job,
                op_selection=None,
                asset_selection=keys,
            )
        )
        target = run_target(list(partitions)) if partitions else {"partition_key": None, "tags": {}}
        tags = {**remote_job.tags, **target["tags"], BUILD_TAG: self.build_id}
        if target["partition_key"]:
            tags[PARTITION_NAME_TAG] = target["partition_key"]
        plan = location.get_execution_plan(
            remote_job, self.run_config, step_keys_to_execute=None, known_state=None, instance=self.instance
        )
        run = self.instance.create_run(
            job_name=job,
            run_id=None,
            run_config=self.run_config,
            resolved_op_selection=remote_job.resolved_op_selection,
            step_keys_to_execute=plan.execution_plan_snapshot.step_keys_to_execute,
            op_selection=None,
            status=None,
            root_run_id=None,
            parent_run_id=None,
            tags=tags,
            job_snapshot=remote_job.job_snapshot,
            execution_plan_snapshot=plan.execution_plan_snapshot,
            parent_job_snapshot=remote_job.parent_job_snapshot,
            remote_job_origin=remote_job.get_remote_origin(),
            job_code_origin=remote_job.get_python_origin(),
            asset_selection=frozenset(keys) if keys else None,
            asset_check_selection=None,
            asset_graph=repo.asset_graph,
        )
        self.instance.submit_run(run.run_id, context)
        return QueuedRun(batch, job, partitions, assets, run.run_id)

    def follow(self, pending: list[QueuedRun]) -> Iterator[tuple[QueuedRun, bool, str]]:
        """Until every run in `pending` has ended, following retries: (run, succeeded, message) once per run as it
        ends for good (the caller may add runs to `pending` meanwhile)."""
        while pending:
            if self.daemon is not None:
                self.daemon.check()
                if self.through_outage(lambda: self.daemon is not None and self.daemon.seen.two(self.instance)):
                    self.daemon.stop()  # two would launch, monitor and retry each run
                    self.daemon = None
                    print("another dagster-daemon serves this instance now: the build's own stopped", file=sys.stderr)
            ids = [q.run_id for q in pending]
            runs = {
                r.run_id: r for r in self.through_outage(lambda: self.instance.get_runs(dg.RunsFilter(run_ids=ids)))
            }
            for q in list(pending):
                run = runs.get(q.run_id)
                if run is not None and run.status == dg.DagsterRunStatus.STARTING:
                    self.through_outage(lambda: self._fail_if_lost_before_start(q, run))
                if run is None or not run.is_finished:
                    continue
                if run.status == dg.DagsterRunStatus.SUCCESS:
                    self.started_badly.pop(q.job, None)
                    pending.remove(q)
                    yield q, True, ""
                    continue
                if run.tags.get(WILL_RETRY_TAG) == "true" and (retry := run.tags.get(AUTO_RETRY_RUN_ID_TAG)):
                    said = self.through_outage(lambda: self.message(q.run_id))
                    print(  # the retry first: the cause may be long
                        f"{q.where()} failed (run {q.run_id}); Dagster retries it as run {retry}: {said}",
                        file=sys.stderr,
                        flush=True,
                    )
                    q.run_id, q.failed_at, q.said_waiting = retry, None, False
                    continue
                if self._retry_coming(q, run):
                    continue
                pending.remove(q)
                said = self.through_outage(lambda: self.message(q.run_id)) or f"the run was {run.status.value.lower()}"
                yield q, False, f"{q.where()} failed (run {q.run_id}): {said}"
            if pending:
                time.sleep(POLL_SECONDS)  # polling the instance's run records; runs take seconds to hours

    def _fail_if_lost_before_start(self, q: QueuedRun, run: dg.DagsterRun) -> None:
        """A launched run whose worker ended before it reported its start (a wrong `python` on the nodes, a job
        setup that fails, a node lost at once) fails now, with the launcher's words: the monitoring daemon checks
        only started runs, and would wait start_timeout_seconds (an hour) for this one. The same job's runs failing
        the same way twice in a row stop the build (StartFailure): every retry would fail alike."""
        launcher = self.instance.run_launcher
        if not launcher.supports_check_run_worker_health:
            return
        try:
            health = launcher.check_run_worker_health(run)
        except BuildError:  # the engine did not answer (a busy controller): ask again next poll
            return
        if (
            health.status != WorkerStatus.FAILED
            # None only for a run deleted meanwhile: then an AttributeError, as before the annotations
            or cast(dg.DagsterRun, self.instance.get_run_by_id(run.run_id)).status != dg.DagsterRunStatus.STARTING
        ):
            return
        message = f"its worker ended before the run started: {health.msg}"
        how = re.sub(r"\d+", "#", health.msg or "")  # the same way: job ids, nodes and output files aside
        record = self.instance.get_run_record_by_id(run.run_id)
        outage = record is not None and record.create_timestamp.timestamp() < self.back_at  # not the nodes' fault
        again = not outage and self.started_badly.get(q.job) == how
        self.started_badly[q.job] = how
        if again:  # no retry of this one: the build stops
            self.instance.add_run_tags(run.run_id, {MAX_RETRIES_TAG: "0"})
        self.instance.report_run_failed(run, message)
        if again:
            raise StartFailure(
                f"{q.where()} failed (run {run.run_id}): {message}; its runs fail this way at every start, so the "
                "build stops: fix the nodes' environment (the launcher's `python`, `job_setup`) and build again"
            )

    def through_outage(self, call: Callable[[], T]) -> T:
        """`call`, again every POLL_SECONDS while the instance's database is down (a Postgres restart or failover),
        saying so once when it goes and once when it is back; a BuildError once it has been down OUTAGE_SECONDS."""
        while True:
            try:
                result = call()
            except Exception as exc:
                if not _database_down(exc):
                    raise
                now = time.monotonic()
                if self.down_since is None:
                    self.down_since = now
                    print(
                        f"warning: the Dagster database does not answer ({type(exc).__name__}); waiting up to "
                        f"{OUTAGE_SECONDS} s for it",
                        file=sys.stderr,
                        flush=True,
                    )
                elif now - self.down_since > OUTAGE_SECONDS:
                    raise BuildError(
                        f"the Dagster database has not answered for {OUTAGE_SECONDS} s "
                        f"({' '.join(str(exc).split())[:200]}): check Postgres (DAGSTER_PG_HOST), then build again: "
                        "finished partitions are kept"
                    ) from None
                time.sleep(POLL_SECONDS)  # waiting for the database to come back, bounded by OUTAGE_SECONDS
                continue
            if self.down_since is not None:
                self.back_at = time.time()
                down = time.monotonic() - self.down_since
                print(f"the Dagster database answers again after {down:.0f} s", file=sys.stderr, flush=True)
                self.down_since = None
            return result

    def abandon(self) -> None:
        """The runs a stopping build leaves unfinished are cancelled (their Slurm jobs too), never left STARTING or
        QUEUED for a daemon to launch or an hour's start timeout to fail: every unfinished run of this build, and the
        retries the daemon still creates for failures it announced as retried (within seconds; waited for up to
        ABANDON_SECONDS), until a pass finds none left. Best effort: the database may be gone."""
        deadline = time.monotonic() + ABANDON_SECONDS
        while True:
            try:
                runs = self.instance.get_runs(dg.RunsFilter(tags={BUILD_TAG: self.build_id}))
            except Exception as exc:  # the database is gone: nothing more can be cancelled
                print(f"warning: could not list this build's runs ({type(exc).__name__})", file=sys.stderr, flush=True)
                return
            unfinished = [run for run in runs if not run.is_finished]
            for run in unfinished:
                self._cancel(run)
            failures = [r for r in runs if r.status == dg.DagsterRunStatus.FAILURE]
            coming = [
                r for r in failures if r.tags.get(WILL_RETRY_TAG) == "true" and AUTO_RETRY_RUN_ID_TAG not in r.tags
            ]
            # one more pass after any cancel: the retry daemon submits the retry it made from the run it holds, so a
            # retry cancelled between its making and its submission is queued again
            if (not coming and not unfinished) or time.monotonic() > deadline:
                return
            time.sleep(POLL_SECONDS)  # the daemon creates an announced retry within seconds; bounded by the deadline

    def _cancel(self, run: dg.DagsterRun) -> None:
        """Terminate the run through its launcher; one still CANCELING a pass later (its worker never started, or died
        with its job, so nothing else will say so) or that the launcher cannot terminate is marked canceled here."""
        try:
            if run.status == dg.DagsterRunStatus.CANCELING or not self.instance.run_launcher.terminate(run.run_id):
                self.instance.report_run_canceled(run, "the build that submitted it stopped")
        except Exception as exc:  # the database or the engine is gone: say which run is left, and go on
            print(f"warning: could not cancel run {run.run_id} ({type(exc).__name__})", file=sys.stderr, flush=True)

    def _retry_coming(self, q: QueuedRun, run: dg.DagsterRun) -> bool:
        """Whether a retry of this failed run is still to come: it failed with retries on, and the daemon has neither
        created the retry nor read past the failure (it passes over one whose retry it failed to make, as in a
        database outage, and says nothing); past RETRY_TAG_SECONDS none is coming either. A run whose announced retry
        will never come is tagged will_retry=false, with an event in its log saying why."""
        may_retry = run.status == dg.DagsterRunStatus.FAILURE and self.instance.run_retries_enabled
        if not may_retry or run.tags.get(WILL_RETRY_TAG) == "false":
            return False
        q.failed_at = q.failed_at or time.monotonic()
        waited = time.monotonic() - q.failed_at
        if waited < RETRY_TAG_SECONDS and not self._retry_passed_over(run):
            if waited > SAY_WAIT_SECONDS and not q.said_waiting:  # a retry is made within seconds of a healthy daemon
                print(f"{q.where()} failed (run {q.run_id}): waiting for the retry Dagster announced", file=sys.stderr)
                q.said_waiting = True
            return True
        passed = "the retry daemon read past its failure" if waited < RETRY_TAG_SECONDS else f"none in {waited:.0f} s"
        self.instance.add_run_tags(run.run_id, {WILL_RETRY_TAG: "false"})
        self.instance.report_engine_event(f"no retry was made ({passed}): will_retry set to false", run)
        return False

    def _retry_passed_over(self, run: dg.DagsterRun) -> bool:
        """Whether the retry daemon has read past this run's failure without making its retry."""
        failures = self.instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records
        cursor = self.instance.daemon_cursor_storage.get_cursor_values({RETRY_CURSOR_KEY}).get(RETRY_CURSOR_KEY)
        if not failures or cursor is None or int(cursor) < failures[-1].storage_id:
            return False
        now = self.instance.get_run_by_id(run.run_id)  # read after the cursor: a retry made before it moved is tagged
        return now is not None and AUTO_RETRY_RUN_ID_TAG not in now.tags

    def run_ids(self) -> list[str]:
        """Every run of this build, retries included (a retry carries its parent's tags, this build's id with them)."""
        runs = self.instance.get_runs(dg.RunsFilter(tags={BUILD_TAG: self.build_id}))
        return [r.run_id for r in reversed(runs)]

    def message(self, run_id: str) -> str:
        kinds = {dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.ENGINE_EVENT, dg.DagsterEventType.RUN_FAILURE}
        entries = self.instance.all_logs(run_id, of_type=kinds)
        return failure_message(e.get_dagster_event() for e in entries)  # of_type: every entry holds a DagsterEvent

    def execute(self, batches: Sequence[RunBatch]) -> Iterator[RunOutcome]:
        """Every batch queued at once (the instance's limits hold how many run); each batch's outcome once its runs
        have ended for good. A range that fails for good is run again one partition per run, so a bad partition
        fails alone."""
        pending: list[QueuedRun] = []
        try:
            for i, b in enumerate(batches):
                pending.append(self.through_outage(lambda: self.submit(i, b.job, b.partitions, b.assets)))
            yield from self._outcomes(batches, pending)
        except Exception:
            self.abandon()
            raise

    def _outcomes(self, batches: Sequence[RunBatch], pending: list[QueuedRun]) -> Iterator[RunOutcome]:
        runs: list[list[str]] = [[] for _ in batches]
        failures: list[dict[str, str]] = [{} for _ in batches]
        open_runs = [1] * len(batches)
        for q, ok, message in self.follow(pending):
            if ok:
                runs[q.batch].append(q.run_id)
            elif len(q.partitions) > 1:
                print(f"{message}; running its partitions one per run", file=sys.stderr, flush=True)
                pending.extend(
                    self.through_outage(lambda: self.submit(q.batch, q.job, (p,), q.assets)) for p in q.partitions
                )
                open_runs[q.batch] += len(q.partitions)
            else:
                self.failed.append(message)
                failures[q.batch][q.partitions[0] if q.partitions else q.job] = message
            open_runs[q.batch] -= 1
            if not open_runs[q.batch]:
                yield RunOutcome(batches[q.batch], tuple(runs[q.batch]), failures[q.batch])
