"""The Dagster private names the execution room depends on, imported one by one: a Dagster upgrade that moves or
renames one fails here, by name, before any run does."""

import ast
import importlib
import os
from pathlib import Path

import pytest

PRIVATE = Path(__file__).resolve().parents[2] / "shard_assets/execution/dagster_private.py"


def _taken_from_dagster() -> list[tuple[str, str]]:
    """(module, name) of each name dagster_private.py imports from Dagster, read from its source: importing it would
    fail at the first moved name, before any test could say which."""
    return [
        (node.module, alias.name)
        for node in ast.parse(PRIVATE.read_text()).body
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "dagster"
        for alias in node.names
    ]


@pytest.mark.parametrize(("module", "name"), _taken_from_dagster(), ids=lambda v: v)
def test_each_private_dagster_name_is_where_execution_takes_it_from(module, name):
    assert hasattr(importlib.import_module(module), name), f"{module} has no {name} any more"


def test_the_daemon_module_a_build_starts_exists():
    from shard_assets.execution import dagster_private

    assert importlib.util.find_spec(dagster_private.DAEMON_MODULE) is not None


def test_the_private_names_are_what_the_room_uses():
    """Every exported name is used by a module of the package, and every one it imports is exported."""
    from shard_assets.execution import dagster_private

    package = Path(dagster_private.__file__).parents[1]
    used = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and str(node.module).endswith("dagster_private"):
                used |= {a.name for a in node.names}
    assert used == set(dagster_private.__all__)


def test_a_stopping_build_cancels_a_retry_the_daemon_submits_after_it_was_cancelled(tmp_path):
    """The race CI met (test_slurm_failures: a run left in progress after the build stopped): the retry daemon makes
    the retry, tags its parent, then submits the run object it holds. A stop that cancelled the retry in between saw
    nothing more to wait for, and the daemon's submission started it again. The stop now passes once more after any
    cancel, until a pass finds nothing unfinished."""
    import uuid

    import dagster as dg
    from dagster._core.events import DagsterEvent, DagsterEventType

    from shard_assets.execution.dagster_private import AUTO_RETRY_RUN_ID_TAG, WILL_RETRY_TAG
    from shard_assets.execution.run_queue import BUILD_TAG, RunQueue

    job, retry_id = dg.GraphDefinition("g").to_job(), str(uuid.uuid4())
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        queue = RunQueue(instance, None, {}, None)  # type: ignore[arg-type]  # abandon needs the instance only
        tags = {BUILD_TAG: queue.build_id}
        parent = instance.create_run_for_job(job, tags={**tags, WILL_RETRY_TAG: "true"})
        instance.report_run_failed(parent)
        retry = instance.create_run_for_job(job, run_id=retry_id, tags=tags)  # made by the daemon: NOT_STARTED
        instance.add_run_tags(parent.run_id, {AUTO_RETRY_RUN_ID_TAG: retry_id})
        cancel, submitted = queue._cancel, []

        def cancel_then_the_daemon_submits(run):  # the daemon's submission lands right after the first cancel
            cancel(run)
            if run.run_id == retry_id and not submitted:
                starting = DagsterEvent(DagsterEventType.RUN_STARTING.value, job_name=retry.job_name)  # its stale copy
                instance.report_dagster_event(starting, run_id=retry_id)
                submitted.append(run.run_id)

        queue._cancel = cancel_then_the_daemon_submits  # type: ignore[method-assign]
        queue.abandon()
        assert submitted == [retry_id]
        assert instance.get_run_by_id(retry_id).status == dg.DagsterRunStatus.CANCELED


def test_a_stopping_build_ends_a_run_left_canceling_when_nothing_else_will(tmp_path, monkeypatch):
    """CI met it too (test_slurm_failures: nodes without Dagster): the launcher cancels the run's Slurm job and marks
    the run CANCELING, but its worker never started, so nothing ever marked it CANCELED and the build left it in
    progress. A run still CANCELING a pass later is marked CANCELED by the stopping build."""
    import dagster as dg

    from shard_assets.execution import run_queue
    from shard_assets.execution.run_queue import BUILD_TAG, RunQueue

    monkeypatch.setattr(run_queue, "ABANDON_SECONDS", 10)  # before the change: left CANCELING after this long
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        queue = RunQueue(instance, None, {}, None)  # type: ignore[arg-type]  # abandon needs the instance only
        run = instance.create_run_for_job(dg.GraphDefinition("g").to_job(), tags={BUILD_TAG: queue.build_id})
        terminated = []

        def cancel_the_job_only(run_id: str) -> bool:  # as the Slurm launcher does: scancel, then CANCELING
            instance.report_run_canceling(instance.get_run_by_id(run_id))
            terminated.append(run_id)
            return True

        monkeypatch.setattr(instance.run_launcher, "terminate", cancel_the_job_only)
        queue.abandon()
        assert terminated == [run.run_id]
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.CANCELED


def test_a_retry_the_daemon_announced_and_passed_over_is_no_longer_awaited_and_the_run_says_so(tmp_path):
    """Issue 47, item 2: a Postgres outage made the retry daemon fail on a run it had tagged will_retry=true; it read
    on past the failure, so no retry ever came, while the build waited RETRY_TAG_SECONDS (300 s) saying nothing."""
    import dagster as dg

    from shard_assets.execution.dagster_private import MAX_RETRIES_TAG, RETRY_CURSOR_KEY, WILL_RETRY_TAG
    from shard_assets.execution.run_queue import QueuedRun, RunQueue

    job = dg.GraphDefinition("g").to_job()
    with dg.instance_for_test(temp_dir=str(tmp_path), overrides={"run_retries": {"enabled": True}}) as instance:
        queue = RunQueue(instance, None, {}, None)  # type: ignore[arg-type]  # following needs the instance only
        run = instance.create_run_for_job(job, tags={MAX_RETRIES_TAG: "1"})
        instance.report_run_failed(run)  # with a retry left: tagged will_retry=true by Dagster
        failure = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records[-1]
        q = QueuedRun(0, "tokenize_job", ("web.part0",), (), run.run_id)
        failed = instance.get_run_by_id(run.run_id)
        assert failed.tags[WILL_RETRY_TAG] == "true"
        assert queue._retry_coming(q, failed)  # the daemon has not read the failure yet: its retry may come
        instance.daemon_cursor_storage.set_cursor_values({RETRY_CURSOR_KEY: str(failure.storage_id)})  # read past it
        assert not queue._retry_coming(q, failed)
        marked = instance.get_run_by_id(run.run_id)
        assert marked.tags[WILL_RETRY_TAG] == "false"
        said = [e.message for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)]
        assert any("no retry was made (the retry daemon read past its failure)" in m for m in said), said


def test_the_databases_quick_retries_print_no_stray_line_into_a_builds_output(tmp_path):
    """Issue 47, item 3: with a fresh Postgres database, dagster-postgres's `logging.warning("Retrying failed database
    creation")` (on the root logger, which then prints through logging's default handler) was the first line of the
    docs' verbatim Slurm build. Said here, in a process that opened its instance as `shard-assets build` does."""
    import subprocess
    import sys

    code = (
        "import logging; from shard_assets.instance import local_instance; local_instance('quiet'); "
        "logging.warning('Retrying failed database creation'); "
        "logging.warning('Retrying failed database connection: %s', 'refused'); logging.warning('kept')"
    )
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"} | {"SHARD_PROJECT_ROOT": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines() == ["WARNING:root:kept"], out.stderr


def test_partition_metadata_lands_on_its_partition_without_listing_the_dynamic_partitions(tmp_path, monkeypatch):
    """Dagster's add_asset_metadata lists every dynamic partition from the instance on each call (8 ms a call, 32 ms
    at 10,000 files; a build makes three a partition): add_partition_metadata records the same metadata without it."""
    import dagster as dg

    from shard_assets.execution.dagster_private import (
        ASSET_PARTITION_RANGE_END_TAG,
        ASSET_PARTITION_RANGE_START_TAG,
        add_partition_metadata,
    )

    listed = []
    listing = dg.DagsterInstance.get_dynamic_partitions
    monkeypatch.setattr(
        dg.DagsterInstance, "get_dynamic_partitions", lambda *a, **k: listed.append(1) or listing(*a, **k)
    )
    counted = []

    @dg.asset(
        partitions_def=dg.DynamicPartitionsDefinition(name="files"), backfill_policy=dg.BackfillPolicy.single_run()
    )
    def files(context: dg.AssetExecutionContext) -> None:
        keys, before = context.partition_keys, len(listed)
        for key in keys:
            add_partition_metadata(context, key, {"rows": int(key[1:])})
        counted.append(len(listed) - before)

    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        instance.add_dynamic_partitions("files", ["f1", "f2", "f3"])
        tags = {ASSET_PARTITION_RANGE_START_TAG: "f1", ASSET_PARTITION_RANGE_END_TAG: "f3"}
        assert dg.materialize([files], instance=instance, tags=tags).success
        events = instance.fetch_materializations(dg.AssetKey("files"), limit=10).records
        rows = {e.partition_key: e.asset_materialization.metadata["rows"].value for e in events}
    assert counted == [0] and rows == {"f1": 1, "f2": 2, "f3": 3}
