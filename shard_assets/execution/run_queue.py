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
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
from .dagster_private import (
    AUTO_RETRY_RUN_ID_TAG,
    PARTITION_NAME_TAG,
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
SECRET_FIELDS = ("access_key_id", "secret_access_key")


def launches_elsewhere(instance: dg.DagsterInstance) -> bool:
    """Whether the instance's runs leave this machine: any launcher but the default (a local process) or the
    in-memory one of an ephemeral instance."""
    return not isinstance(instance.run_launcher, DefaultRunLauncher | SyncInMemoryRunLauncher)


def portable_config(resources: dict[str, dg.ConfigurableResource]) -> dict:
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

    def where(self) -> str:
        return str(RunBatch(self.job, self.partitions, self.assets))


class RunQueue:
    """A RunExecutor: submits the build's runs to the instance's queue and follows them; `failed` lists the runs
    that failed for good (after Dagster's retries), one line each."""

    def __init__(
        self,
        instance: dg.DagsterInstance,
        workspace: WorkspaceProcessContext,
        run_config: dict,
        daemon: BuildDaemon | None,
    ):
        self.instance, self.workspace, self.run_config, self.daemon = instance, workspace, run_config, daemon
        self.build_id = uuid.uuid4().hex[:12]
        self.failed: list[str] = []

    @classmethod
    @contextmanager
    def open(cls, instance: dg.DagsterInstance, resources: dict) -> Iterator[RunQueue | None]:
        """A queue for the build when the instance launches runs elsewhere, else None (runs execute in this process).
        Starts a dagster-daemon for the build when none serves the instance, and stops it after."""
        if not launches_elsewhere(instance):
            yield None
            return
        run_config = portable_config(resources)
        # DAGSTER_CURRENT_IMAGE: the image Kubernetes and ECS launchers run it in, as for a code server
        origin = InProcessCodeLocationOrigin(
            LoadableTargetOrigin(
                executable_path=sys.executable, module_name="shard_assets.definitions", attribute="defs"
            ),
            location_name=LOCATION_NAME,
            container_image=os.environ.get("DAGSTER_CURRENT_IMAGE"),
        )
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
            runs = {r.run_id: r for r in self.instance.get_runs(dg.RunsFilter(run_ids=[q.run_id for q in pending]))}
            for q in list(pending):
                run = runs.get(q.run_id)
                if run is not None and run.status == dg.DagsterRunStatus.STARTING:
                    self._fail_if_lost_before_start(run)
                if run is None or not run.is_finished:
                    continue
                if run.status == dg.DagsterRunStatus.SUCCESS:
                    pending.remove(q)
                    yield q, True, ""
                    continue
                if run.tags.get(WILL_RETRY_TAG) == "true" and (retry := run.tags.get(AUTO_RETRY_RUN_ID_TAG)):
                    print(
                        f"{q.where()} failed (run {q.run_id}): {self.message(q.run_id)}; Dagster retries it as run "
                        f"{retry}",
                        file=sys.stderr,
                        flush=True,
                    )
                    q.run_id, q.failed_at = retry, None
                    continue
                if self._retry_coming(q, run):
                    continue
                pending.remove(q)
                yield (
                    q,
                    False,
                    f"{q.where()} failed (run {q.run_id}): "
                    f"{self.message(q.run_id) or f'the run was {run.status.value.lower()}'}",
                )
            if pending:
                time.sleep(POLL_SECONDS)  # polling the instance's run records; runs take seconds to hours

    def _fail_if_lost_before_start(self, run: dg.DagsterRun) -> None:
        """A launched run whose worker ended before it reported its start (a wrong `python` on the nodes, a job
        setup that fails, a node lost at once) fails now, with the launcher's words: the monitoring daemon checks
        only started runs, and would wait start_timeout_seconds (an hour) for this one."""
        launcher = self.instance.run_launcher
        if not launcher.supports_check_run_worker_health:
            return
        try:
            health = launcher.check_run_worker_health(run)
        except BuildError:  # the engine did not answer (a busy controller): ask again next poll
            return
        if (
            health.status == WorkerStatus.FAILED
            and self.instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTING
        ):
            self.instance.report_run_failed(run, f"its worker ended before the run started: {health.msg}")

    def _retry_coming(self, q: QueuedRun, run: dg.DagsterRun) -> bool:
        """Whether a retry of this failed run is still to come: it failed with retries on, and the daemon has not
        created the retry yet (it does within seconds; past RETRY_TAG_SECONDS none is coming)."""
        if run.status != dg.DagsterRunStatus.FAILURE or not self.instance.run_retries_enabled:
            return False
        if run.tags.get(WILL_RETRY_TAG) == "false":
            return False
        q.failed_at = q.failed_at or time.monotonic()
        return time.monotonic() - q.failed_at < RETRY_TAG_SECONDS

    def message(self, run_id: str) -> str:
        entries = self.instance.all_logs(
            run_id,
            of_type={
                dg.DagsterEventType.STEP_FAILURE,
                dg.DagsterEventType.ENGINE_EVENT,
                dg.DagsterEventType.RUN_FAILURE,
            },
        )
        return failure_message(e.dagster_event for e in entries)

    def execute(self, batches: Sequence[RunBatch]) -> Iterator[RunOutcome]:
        """Every batch queued at once (the instance's limits hold how many run); each batch's outcome once its runs
        have ended for good. A range that fails for good is run again one partition per run, so a bad partition
        fails alone."""
        runs: list[list[str]] = [[] for _ in batches]
        failures: list[dict[str, str]] = [{} for _ in batches]
        open_runs = [1] * len(batches)
        pending = [self.submit(i, b.job, b.partitions, b.assets) for i, b in enumerate(batches)]
        for q, ok, message in self.follow(pending):
            if ok:
                runs[q.batch].append(q.run_id)
            elif len(q.partitions) > 1:
                print(f"{message}; running its partitions one per run", file=sys.stderr, flush=True)
                pending.extend(self.submit(q.batch, q.job, (p,), q.assets) for p in q.partitions)
                open_runs[q.batch] += len(q.partitions)
            else:
                self.failed.append(message)
                failures[q.batch][q.partitions[0] if q.partitions else q.job] = message
            open_runs[q.batch] -= 1
            if not open_runs[q.batch]:
                yield RunOutcome(batches[q.batch], tuple(runs[q.batch]), failures[q.batch])
