"""Asset dedup: each partition's documents checked against the dataset-wide index (exact copies, near copies on
request) and its decision stored: which documents tokenize leaves out, against which partition's kept copy. And the
blocking check on splits (run inside splits' step) that no two published documents are identical."""

from typing import Any

import dagster as dg

from ..execution.dagster_private import add_partition_metadata
from ..lib.curation.curation_records import CuratedRecord
from ..lib.curation.dedup import update_index
from ..lib.curation.dedup_apply import published_copies
from ..lib.curation.dedup_records import RULES, DedupDecision
from ..lib.layout import curated_record_key
from ..lib.records import PartRecord, find_record
from ..lib.spec import DatasetSpec
from ..lib.store import ObjectStore
from .code_versions import CODE_VERSIONS
from .conventions import DATASET_ASSET
from .figures import markdown_list
from .partitions import BACKFILL_POLICY, raw_files, run_data_version
from .eval_index import curation_metadata, eval_index
from .raw_documents import raw_documents
from .resources import DatasetResource, StoreResource

NO_COPIES = "no_duplicate_documents"


def decision_metadata(d: DedupDecision | None) -> dict[str, Any]:
    """What the UI shows for one partition: documents kept, dropped by each rule against which partition, reclaimed."""
    if d is None:
        return {"dedup": "off ([dedup] exact = false, near = false)"}
    against = [f"`{p}`: {n:,} ({rule})" for rule, per in d.dropped.items() for p, n in sorted(per.items())]
    return {
        "dagster/row_count": d.documents - d.dropped_total,
        **{f"dropped_{rule}": d.by_rule().get(rule, 0) for rule in RULES},
        "dropped_against": markdown_list(against),
        "reclaimed": markdown_list(f"`{p}` left: {n:,} kept here now" for p, n in sorted(d.reclaimed.items())),
    }


@dg.asset(
    partitions_def=raw_files,
    backfill_policy=BACKFILL_POLICY,
    deps=[raw_documents, eval_index],
    code_version=CODE_VERSIONS.dedup,
    **DATASET_ASSET,
    kinds={"numpy"},
    tags={"stage": "ingest"},
    description="Copies of documents published elsewhere in the dataset (exact by default, near with [dedup] near = "
    "true), found in an index split by hash range; the first partition to hold a document keeps it.",
)
def dedup(
    context: dg.AssetExecutionContext, dataset: DatasetResource, store: StoreResource
) -> dg.MaterializeResult[None]:
    spec, objects = dataset.spec(), store.store()
    if not spec.dedup.enabled:
        for p in context.partition_keys:
            add_partition_metadata(context, p, decision_metadata(None))
        return dg.MaterializeResult(data_version=dg.DataVersion("off"))
    ours = set(context.partition_keys)
    decisions = update_index(objects, spec, context.partition_keys, context.run.run_id)
    for p, d in decisions.items():
        kept = f"{d.documents - d.dropped_total:,} of {d.documents:,} documents kept ({d.by_rule()})"
        if p in ours:
            curated = find_record(objects, curated_record_key(p), CuratedRecord, "dedup")
            add_partition_metadata(context, p, decision_metadata(d) | curation_metadata(objects, curated))
        else:  # a copy it held is the kept one now: recorded as its update, so automation tokenizes it again
            context.log_event(
                dg.AssetMaterialization(
                    asset_key=context.asset_key,
                    partition=p,
                    description=f"decision changed by this run's update: {kept}",
                    metadata=decision_metadata(d),
                )
            )
    versions = (d.drops.sha256[:16] if d.drops else "none" for p, d in decisions.items() if p in ours)
    return dg.MaterializeResult(data_version=dg.DataVersion(run_data_version(versions)))


NO_COPIES_SPEC = dg.AssetCheckSpec(
    NO_COPIES,
    asset="splits",
    blocking=True,
    description="No two published documents have the same normalised text, and none held by a published partition is "
    "left out of all of them (read from the dedup index and each partition's drops, never the documents).",
)


def no_duplicate_documents(store: ObjectStore, spec: DatasetSpec, parts: dict[str, PartRecord]) -> dg.AssetCheckResult:
    """The check's result over the partitions splits selected: computed inside splits' own step, so every path that
    materialises splits (jobs, backfills, the sensors, automation) evaluates it before the manifest can go live."""
    found = published_copies(store, spec, parts)
    if found is None:
        return dg.AssetCheckResult(
            check_name=NO_COPIES, passed=True, description="not checked: [dedup] exact = false publishes copies"
        )
    passed = found.copies == 0 and found.missing == 0 and not found.unindexed
    description = (
        f"{found.documents:,} published documents, {found.copies:,} repeating another's text"
        + (f"; {len(found.unindexed)} partitions not in the dedup index as built" if found.unindexed else "")
        + (
            f"; {found.missing:,} documents left out everywhere: materialize tokenized_shards again for "
            + ", ".join(found.stale)
            if found.missing
            else ""
        )
    )
    return dg.AssetCheckResult(
        check_name=NO_COPIES,
        passed=passed,
        description=description,
        metadata={"copies": found.copies, "missing": found.missing, "documents": found.documents}
        | {"unindexed": markdown_list(found.unindexed), "stale": markdown_list(found.stale)},
    )
