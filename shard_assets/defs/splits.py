"""Asset splits: which partitions the next version holds, token and document totals per split, and its two
blocking checks (no document in both train and val; no published copies), computed in its own step so that every
path that materialises it evaluates them."""

import dagster as dg

from ..lib.layout import splits_record_key
from ..lib.records import put_record
from ..lib.splits import overlap_count, record_left_out, select_partitions, summarise
from ..lib.state import current_tokenizer, registered_partitions
from .code_versions import CODE_VERSIONS
from .conventions import DATASET_ASSET
from .figures import markdown_list, split_figures
from .automation import REBUILD
from .dedup import NO_COPIES_SPEC, no_duplicate_documents
from .resources import DatasetResource, StoreResource
from .tokenized_shards import tokenized_shards

DISJOINT = "splits_are_disjoint"
TINY_SPLIT = 100  # documents; a smaller split gets a warning in the metadata (an empty one fails the manifest's checks)


@dg.asset(
    deps=[tokenized_shards],
    code_version=CODE_VERSIONS.splits,
    automation_condition=REBUILD,
    **DATASET_ASSET,
    kinds={"json"},
    tags={"stage": "publish"},
    check_specs=[
        dg.AssetCheckSpec(
            DISJOINT,
            asset="splits",
            blocking=True,
            description="No document (by hash of its normalised text) is in both train and val.",
        ),
        NO_COPIES_SPEC,
    ],
    description="Token and document totals per split over the tokenized partitions; failed or removed partitions left "
    "out with a reason.",
)
def splits(context: dg.AssetExecutionContext, dataset: DatasetResource, store: StoreResource) -> dg.MaterializeResult:  # type: ignore[type-arg]  # Dagster reads the annotation: it must be the bare class
    spec, objects = dataset.spec(), store.store()
    record = current_tokenizer(objects)
    selection = select_partitions(objects, spec, record.fingerprint, registered_partitions(objects))
    record_left_out(objects, record.fingerprint, selection, context.run.run_id)
    overlap = overlap_count(objects, selection.parts)
    summary = summarise(record.fingerprint, selection, overlap)
    put_record(objects, splits_record_key(record.fingerprint), summary)
    totals = summary.totals
    small = [
        f"**{s}** holds {t.documents:,} documents: evaluation on it will be noisy"
        for s, t in totals.items()
        if t.documents < TINY_SPLIT
    ]
    context.log.info(
        f"{len(summary.partitions)} partitions selected, {len(summary.left_out)} left out; "
        + ", ".join(f"{s} {t.tokens:,} tokens in {t.documents:,} documents" for s, t in totals.items())
    )
    disjoint = (
        "no document is in both splits"
        if overlap == 0
        else f"{overlap:,} documents (by hash of their text) are in both train and val"
    )
    return dg.MaterializeResult(
        metadata={
            "partitions": len(summary.partitions),
            "partitions_left_out": len(summary.left_out),
            "left_out": markdown_list(f"`{p}`: {why}" for p, why in summary.left_out.items()),
            "warnings": markdown_list(small),
            "val_fraction": summary.val_fraction,
            **split_figures({s: t.tokens for s, t in totals.items()}, {s: t.documents for s, t in totals.items()}),
            "documents_in_both_splits": overlap,
        },
        check_results=[
            dg.AssetCheckResult(
                check_name=DISJOINT,
                passed=overlap == 0,
                description=disjoint,
                metadata={"documents_in_both_splits": overlap},
            ),
            no_duplicate_documents(objects, spec, selection.parts),
        ],
    )
