"""Partitions: registered in the store by discovery (lib/discovery.py) and mirrored into Dagster's dynamic
partitions. One per raw file by default; with SHARD_PARTITION_BYTES, small files are grouped and large
parquet files cut into row-group ranges of about that many bytes. The sensor and the build command share
this one code path; runs take up to PARTITIONS_PER_RUN adjacent partitions each."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from typing import TypedDict, TypeVar

import dagster as dg

from ..lib.discovery import DiscoveryBudget, DiscoveryCursor, DiscoveryStep, discover, registered
from ..lib.errors import BuildError
from ..lib.partitioning import PartitionPolicy, PartitionRecord
from ..lib.records import DatasetOwner, decode, to_json
from ..lib.spec import DatasetSpec
from ..lib.store import ObjectStore

T = TypeVar("T")

RAW_FILES = "raw_files"  # the dynamic partitions set: one key per registered source file (or piece)
raw_files = dg.DynamicPartitionsDefinition(name=RAW_FILES)
PARTITION_BYTES_ENV = "SHARD_PARTITION_BYTES"
# per backfill, sensor or build run: a run's fixed cost (~2 s here, a pod on a cluster) spread over many partitions
PARTITIONS_PER_RUN = 32
# source bytes per sensor or build run past its first partition: work-sized partitions get a run (a pod) each
RUN_BYTES = 1 << 30
BACKFILL_POLICY = dg.BackfillPolicy.multi_run(max_partitions_per_run=PARTITIONS_PER_RUN)
RANGE_TAGS = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")
# in the instance's key-value store: which dataset its raw_files partitions are
HOME_DATASET_KEY = "shard_assets/dataset"


class PartitionsFailed(BuildError):
    """Some partitions of a multi-partition run failed; the others were built. The message names each one."""


class HomeHoldsAnotherDataset(BuildError):
    """A Dagster home's partitions belong to another dataset: two datasets' partitions would show side by side."""


def claim_home(instance: dg.DagsterInstance, spec: DatasetSpec) -> None:
    """One Dagster home, one dataset: record which dataset (name and spec) its raw_files partitions belong to, and
    refuse to register another's beside them (the UI would show both sets as one, with nothing to tell them apart).
    Another store of the same dataset is allowed: its partition keys are the same."""
    home = instance.root_directory if instance.is_persistent else "this Dagster instance"
    held = instance.run_storage.get_cursor_values({HOME_DATASET_KEY}).get(HOME_DATASET_KEY)
    owner = decode(DatasetOwner, held.encode(), f"{home}: cursor {HOME_DATASET_KEY}") if held else None
    if owner and (owner.dataset, owner.spec) == (spec.name, spec.origin):
        return
    if owner and owner.dataset != spec.name and instance.get_dynamic_partitions(RAW_FILES):
        raise HomeHoldsAnotherDataset(
            f"{home} holds the partitions of dataset {owner.dataset!r} (spec {owner.spec}), not {spec.name!r} "
            f"(spec {spec.origin}): give each dataset its own Dagster home (unset DAGSTER_HOME: `shard-assets` then "
            "uses .dagster_home/<dataset>; or set it to another folder)"
        )
    owner_json = to_json(DatasetOwner.now(spec.name, spec.origin)).decode()
    instance.run_storage.set_cursor_values({HOME_DATASET_KEY: owner_json})


def partition_policy(spec: DatasetSpec) -> PartitionPolicy:
    """How discovery sizes partitions: the spec's partition_bytes, or SHARD_PARTITION_BYTES (e.g. 256MB) where set,
    which overrides it (0: one partition per file)."""
    if PARTITION_BYTES_ENV in os.environ:
        return PartitionPolicy.parse(os.environ[PARTITION_BYTES_ENV], PARTITION_BYTES_ENV)
    return PartitionPolicy(spec.partition_bytes)


class RunTarget(TypedDict):
    """A run's partition selection, as dg.RunRequest and submit_job take it."""

    partition_key: str | None
    tags: dict[str, str]


def run_target(partitions: list[str]) -> RunTarget:
    """What selects `partitions` (adjacent in Dagster's order) for one run: a partition key, or range tags."""
    if len(partitions) == 1:
        return {"partition_key": partitions[0], "tags": {}}
    return {"partition_key": None, "tags": dict(zip(RANGE_TAGS, (partitions[0], partitions[-1])))}


def mirror(
    instance: dg.DagsterInstance, store: ObjectStore, spec: DatasetSpec, removed: list[str]
) -> dict[str, PartitionRecord]:
    """Make Dagster's partition set the registered one: add what it lacks, delete the removed; returns them all."""
    keys = registered(store, spec)
    known = set(instance.get_dynamic_partitions(RAW_FILES))
    if new := [k for k in keys if k not in known]:
        instance.add_dynamic_partitions(RAW_FILES, new)
    for key in removed:
        if key in known:
            instance.delete_dynamic_partition(RAW_FILES, key)
    return keys


def discovery_step(
    instance: dg.DagsterInstance,
    store: ObjectStore,
    spec: DatasetSpec,
    cursor: DiscoveryCursor,
    budget: DiscoveryBudget,
) -> tuple[DiscoveryStep, dict[str, PartitionRecord]]:
    """One bounded step of discovery, mirrored into Dagster; returns the step and every registered partition."""
    claim_home(instance, spec)
    step = discover(store, spec, partition_policy(spec), cursor, budget)
    return step, mirror(instance, store, spec, step.removed)


def repair_partitions_table(instance: dg.DagsterInstance) -> bool:
    """Migrate an instance that lacks the dynamic partitions table, as `dagster instance migrate` does; returns
    whether it did. A SQLite instance whose first creation was killed is left so: Dagster stamps the index
    database's schema before it adds that table, so every later run would fail until migrated by hand."""
    storage = instance.event_log_storage
    if not hasattr(storage, "has_table") or storage.has_table("dynamic_partitions"):
        return False
    instance.upgrade()
    return True


def sync_partitions(
    instance: dg.DagsterInstance, store: ObjectStore, spec: DatasetSpec
) -> tuple[list[str], list[str], list[str]]:
    """A whole pass of discovery; returns (new or changed partitions, removed partitions, all partitions)."""
    repair_partitions_table(instance)
    step, keys = discovery_step(instance, store, spec, DiscoveryCursor(), DiscoveryBudget())
    return step.changed, step.removed, list(keys)


def run_data_version(versions: Iterable[str]) -> str:
    """The data version of a run's partitions (Dagster records one per run and asset): a single partition's own,
    else a hash of every partition's."""
    versions = list(versions)
    return versions[0] if len(versions) == 1 else hashlib.sha256("\n".join(versions).encode()).hexdigest()[:16]


def each_partition(
    context: dg.AssetExecutionContext, build: Callable[[str], T]
) -> tuple[dict[str, T], dict[str, BuildError]]:
    """`build` every partition of the run: ({partition: result}, {partition: its BuildError}); one failure does not
    stop the others, each is logged as it happens. Any other exception ends the run."""
    results, failures = {}, {}
    for key in context.partition_keys:
        try:
            results[key] = build(key)
        except BuildError as exc:
            failures[key] = exc
            context.log.error(f"{key}: {type(exc).__name__}: {exc}")
    return results, failures


def raise_failures(context: dg.AssetExecutionContext, failures: dict[str, BuildError]) -> None:
    """Fail the step if any partition failed: a single-partition run with the partition's own error, a
    multi-partition run with one PartitionsFailed naming each failure (the others' files and records are stored)."""
    if not failures:
        return
    keys = context.partition_keys
    if len(keys) == 1:
        raise next(iter(failures.values()))
    lines = "\n".join(f"{k}: {type(e).__name__}: {e}" for k, e in failures.items())
    raise PartitionsFailed(
        f"{len(failures)} of {len(keys)} partitions failed (the others are stored; fix or remove these, then rerun the "
        f"range):\n{lines}"
    )
