"""Every name this project takes from Dagster's private modules (`dagster._*`) and its one write into a step's private
state, in one place: an upgrade that moves either breaks here and in tests/builder/test_execution.py, not a run."""

from dagster import AssetExecutionContext, _check as check
from dagster._core.definitions.selector import JobSubsetSelector
from dagster._core.events import DagsterEventType, EngineEventData
from dagster._core.instance.ref import InstanceRef
from dagster._core.launcher import DefaultRunLauncher, LaunchRunContext, RunLauncher
from dagster._core.launcher.base import CheckRunHealthResult, WorkerStatus
from dagster._core.launcher.sync_in_memory_run_launcher import SyncInMemoryRunLauncher
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    AUTO_RETRY_RUN_ID_TAG,
    MAX_RETRIES_TAG,
    PARENT_RUN_ID_TAG,
    PARTITION_NAME_TAG,
    WILL_RETRY_TAG,
)
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.auto_run_reexecution.event_log_consumer import _create_cursor_key
from dagster._grpc.types import ExecuteRunArgs
from dagster._serdes import ConfigurableClass, ConfigurableClassData

DAEMON_MODULE = "dagster._daemon"  # `python -m` this runs a dagster-daemon for a build (build_daemon.py)
# Where the retry daemon keeps how far it has read run failures: past a failure, it made that run's retry or never will
RETRY_CURSOR_KEY = _create_cursor_key(DagsterEventType.RUN_FAILURE)


def add_partition_metadata(context: AssetExecutionContext, partition: str, metadata: dict[str, object]) -> None:
    """`context.add_asset_metadata(metadata, partition_key=partition)` for a partition of the run's own, without its
    check that the run targets it: the check lists every dynamic partition from the instance on each call (6-9 ms,
    27-32 ms among 10,000; a build makes three a partition)."""
    step = context.op_execution_context._step_execution_context
    step._metadata_accumulator = step._metadata_accumulator.with_additional_asset_metadata(
        asset_key=context.asset_key, metadata=metadata, partition_key=partition
    )


__all__ = [
    "add_partition_metadata",
    "ASSET_PARTITION_RANGE_END_TAG",
    "ASSET_PARTITION_RANGE_START_TAG",
    "AUTO_RETRY_RUN_ID_TAG",
    "CheckRunHealthResult",
    "ConfigurableClass",
    "ConfigurableClassData",
    "DAEMON_MODULE",
    "DagsterRun",
    "DagsterRunStatus",
    "DefaultRunLauncher",
    "MAX_RETRIES_TAG",
    "PARENT_RUN_ID_TAG",
    "EngineEventData",
    "ExecuteRunArgs",
    "InProcessCodeLocationOrigin",
    "InProcessWorkspaceLoadTarget",
    "InstanceRef",
    "JobSubsetSelector",
    "LaunchRunContext",
    "LoadableTargetOrigin",
    "PARTITION_NAME_TAG",
    "RETRY_CURSOR_KEY",
    "RunLauncher",
    "SyncInMemoryRunLauncher",
    "WILL_RETRY_TAG",
    "WorkerStatus",
    "WorkspaceProcessContext",
    "check",
]
