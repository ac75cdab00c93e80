"""Partitions: one per registered raw source file. Registration lists the spec's sources once, records each
file in the store, and mirrors the set into Dagster's dynamic partitions; the sensor and the build command
share this one code path."""

from __future__ import annotations

import dagster as dg

from ..lib.sources.listing import SourceFile, list_all_files
from ..lib.spec import DatasetSpec
from ..lib.state import register_source_files
from ..lib.store import ObjectStore

raw_files = dg.DynamicPartitionsDefinition(name="raw_files")


def sync_partitions(instance: dg.DagsterInstance, store: ObjectStore, spec: DatasetSpec) -> tuple[list[SourceFile], list[str], list[str]]:
    """Register new or changed files and forget vanished ones; returns (changed files, removed partitions, all partitions)."""
    files = list_all_files(spec)
    changed, removed = register_source_files(store, files, [s.name for s in spec.sources])
    keys = [f.partition_key for f in files]
    known = set(instance.get_dynamic_partitions(raw_files.name))
    if new := [k for k in keys if k not in known]:
        instance.add_dynamic_partitions(raw_files.name, new)
    for key in removed:
        if key in known:
            instance.delete_dynamic_partition(raw_files.name, key)
    return changed, removed, keys
