"""Build a dataset end to end: register partitions, then materialise every asset with real Dagster runs."""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import dagster as dg

from .checks import CHECKS
from .definitions import ASSETS
from .partitions import raw_files
from .sources.listing import list_all_files
from .spec import DatasetSpec


class BuildFailed(Exception):
    """A materialisation of the build failed; the message names the asset and partition."""


@dataclass(frozen=True)
class BuildResult:
    manifest_url: str
    version: str
    tokens: dict[str, int]
    documents: dict[str, int]
    partitions: int
    seconds: float
    run_ids: tuple[str, ...]
    checks: dict[str, bool]


def register_partitions(instance: dg.DagsterInstance, spec: DatasetSpec) -> list[str]:
    """Add a partition for every source file not registered yet; returns all of the spec's partition keys."""
    keys = [f.partition_key for f in list_all_files(spec)]
    known = set(instance.get_dynamic_partitions(raw_files.name))
    new = [k for k in keys if k not in known]
    if new:
        instance.add_dynamic_partitions(raw_files.name, new)
    return keys


def failure_message(result: dg.ExecuteInJobResult) -> str:
    """The innermost error of a run's first failed step (Dagster wraps the asset's own exception)."""
    failure = next((e for e in result.all_events if e.is_step_failure), None)
    if failure is None:
        return ""
    error = failure.step_failure_data.error
    while error.cause is not None:
        error = error.cause
    return f"{error.cls_name}: {error.message.strip()}"


QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def _materialize(selection, instance, resources, partition_key=None) -> dg.ExecuteInJobResult:
    result = dg.materialize(
        [*ASSETS, *CHECKS],
        selection=selection,
        instance=instance,
        resources=resources,
        partition_key=partition_key,
        run_config=QUIET,
        raise_on_error=False,
    )
    if not result.success:
        detail = failure_message(result) or "see the run's logs"
        where = f"{selection} [{partition_key}]" if partition_key else str(selection)
        raise BuildFailed(f"materialising {where} failed (run {result.run_id}): {detail}")
    return result


def _portable(resources: dict) -> dict:
    """Resources as (class, field values): Dagster resource objects do not pickle into worker processes."""
    return {name: (type(r), {f: getattr(r, f) for f in type(r).model_fields}) for name, r in resources.items()}


def _materialize_in_subprocess(instance_ref, portable: dict, selection, partition_key) -> str:
    instance = dg.DagsterInstance.from_ref(instance_ref)
    resources = {name: cls(**fields) for name, (cls, fields) in portable.items()}
    return _materialize(selection, instance, resources, partition_key).run_id


def _per_partition(selection, keys, instance, resources, workers) -> list[str]:
    if workers <= 1 or not instance.is_persistent or len(keys) <= 1:
        return [_materialize(selection, instance, resources, k).run_id for k in keys]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_materialize_in_subprocess, instance.get_ref(), _portable(resources), selection, k) for k in keys]
        return [f.result() for f in futures]


def build_dataset(instance: dg.DagsterInstance, spec: DatasetSpec, resources: dict, workers: int = 1) -> BuildResult:
    """Materialise raw documents, tokenizer, tokenized shards, splits and manifest; one run per partition step.

    With `workers` > 1 and a persistent instance, partitions run in that many processes.
    """
    started = time.perf_counter()
    keys = register_partitions(instance, spec)
    runs = _per_partition(["raw_documents"], keys, instance, resources, workers)
    runs.append(_materialize(["tokenizer"], instance, resources).run_id)
    runs += _per_partition(["tokenized_shards"], keys, instance, resources, workers)
    final = _materialize(["splits", "manifest"], instance, resources)
    runs.append(final.run_id)
    meta = final.asset_materializations_for_node("manifest")[0].metadata
    return BuildResult(
        manifest_url=str(meta["manifest_url"].value),
        version=str(meta["version"].value),
        tokens={s: int(meta[f"{s}_tokens"].value) for s in ("train", "val")},
        documents={s: int(meta[f"{s}_documents"].value) for s in ("train", "val")},
        partitions=len(keys),
        seconds=time.perf_counter() - started,
        run_ids=tuple(runs),
        checks={e.check_name: e.passed for e in final.get_asset_check_evaluations()},
    )
