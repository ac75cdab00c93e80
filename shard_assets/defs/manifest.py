"""Asset manifest: write `manifests/<version>.json`, audit exactly that version with blocking checks, and
only then replace `manifest.json` (write-audit-publish). A failed check leaves the live version untouched."""

import hashlib
from collections import Counter
from typing import Any

import dagster as dg

from shard_loader.builder_api import LATEST_KEY, FileRef, to_plain

from ..lib.curation.curate import lineage_entry as curation_lineage, lineage_summary as curation_summary
from ..lib.curation.dedup_apply import lineage_entry as dedup_lineage, lineage_summary as dedup_summary
from ..lib.layout import part_record_key, splits_record_key, tokenizer_key
from ..lib.publish import build_manifest, publish
from ..lib.records import PartRecord, SplitsRecord, get_record, get_records
from ..lib.spec import DatasetSpec
from ..lib.state import current_tokenizer
from ..lib.version import code_version
from .automation import PUBLISH
from .code_versions import CODE_VERSIONS
from .conventions import DATASET_ASSET
from .audit_checks import audit_check_specs, check_result
from .figures import size, split_figures
from .resources import DatasetResource, StoreResource
from .splits import splits
from .tokenizer import tokenizer

AUDITS = {
    "files_present": "Every file the version names is in the store with its recorded size.",
    "counts_agree": "Documents agree between raw and tokenized partitions; tokens and documents between shards and the "
    "manifest.",
    "token_ids_below_vocab": "Every token id is below the vocab size (maxima recorded while writing).",
    "splits_not_empty": "Train, and val when val_fraction > 0, hold at least one document.",
    "reads_with_shard_loader": "The tokenizer and a sample of shards verify (sha256) and open with shard_loader's "
    "reader.",
}


def lineage_of(
    spec: DatasetSpec, parts: dict[str, PartRecord], summary: SplitsRecord, tokenizer_run_id: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Which source files, runs, data and code versions the manifest was made from, and what was left out:
    a summary published inline, and the per-partition detail published as the manifest's lineage file."""
    sources: dict[str, list[dict[str, Any]]] = {}
    for partition, part in sorted(parts.items()):
        raw = part.raw
        sources.setdefault(raw.source, []).append(
            {
                "partition": partition,
                "source_uri": raw.source_file.uri,
                "source_fingerprint": raw.source_file.fingerprint,
                "raw_key": raw.key,
                "raw_sha256": raw.sha256,
                "raw_data_version": raw.data_version,
                "raw_run_id": raw.run_id,
                "raw_dropped": raw.dropped,
                "tokenized_data_version": part.data_version,
                "tokenized_run_id": part.run_id,
                "encoder": to_plain(part.encoder) if part.encoder else None,
                "dedup": dedup_lineage(part.dedup),
                **curation_lineage(part.curation),
            }
        )
    detail = {
        "sources": [{"name": n, "files": files} for n, files in sources.items()],
        "left_out": [{"partition": p, "reason": why} for p, why in summary.left_out.items()],
        "stale": [{"partition": p, "reason": why} for p, why in summary.stale.items()],
    }
    return {
        "code_version": code_version(),
        "asset_code_versions": CODE_VERSIONS.by_asset(),
        "tokenizer_run_id": tokenizer_run_id,
        "val_fraction": spec.val_fraction,
        "sources": [{"name": n, "partitions": len(files)} for n, files in sources.items()],
        "partitions_left_out": len(summary.left_out),
        "raw_dropped": dict(sum((Counter(p.raw.dropped) for p in parts.values()), Counter())),
        "dedup": dedup_summary(spec, parts),
        **curation_summary(spec, parts),
    }, detail


@dg.asset(
    deps=[splits, tokenizer],
    code_version=CODE_VERSIONS.manifest,
    automation_condition=PUBLISH,
    **DATASET_ASSET,
    kinds={"json"},
    tags={"stage": "publish"},
    check_specs=audit_check_specs("manifest", AUDITS),
    description=(
        "Write-audit-publish: `manifests/VERSION.json` (immutable) is written, audited by the blocking checks, "
        "and only then copied to `manifest.json`, the contract trainers read."
    ),
)
def manifest(context: dg.AssetExecutionContext, dataset: DatasetResource, store: StoreResource) -> dg.MaterializeResult:  # type: ignore[type-arg]  # Dagster reads the annotation: it must be the bare class
    spec, objects = dataset.spec(), store.store()
    record = current_tokenizer(objects)
    summary = get_record(objects, splits_record_key(record.fingerprint), SplitsRecord, "manifest")
    keys = [part_record_key(record.fingerprint, p) for p in summary.partitions]
    parts = dict(zip(summary.partitions, get_records(objects, keys, PartRecord, "manifest")))
    tok_key = tokenizer_key(record.fingerprint)
    tok_bytes = objects.get_bytes(tok_key)
    tok_file = FileRef(key=tok_key, size=len(tok_bytes), sha256=hashlib.sha256(tok_bytes).hexdigest())
    event = context.instance.get_latest_materialization_event(tokenizer.key)
    lineage, detail = lineage_of(spec, parts, summary, event.run_id if event else None)
    lineage["manifest_run_id"] = context.run.run_id
    built = build_manifest(spec.name, record, tok_file, parts, lineage, detail, summary.failed)
    published = publish(objects, built, parts, spec.val_fraction)
    m = published.manifest
    root = objects.loader_url().rstrip("/")
    url = f"{root}/{LATEST_KEY}"
    if published.live:
        context.log.info(
            f"{published.version} is live: {url} ({len(summary.partitions)} partitions, {len(summary.left_out)} left "
            "out)"
        )
    else:
        context.log.error(
            f"blocking checks failed ({', '.join(published.failed)}): {published.key} written, {LATEST_KEY} left "
            "unchanged at the previous version"
        )
    return dg.MaterializeResult(
        data_version=dg.DataVersion(published.version),
        metadata={
            "dataset": spec.name,
            "spec": dg.MetadataValue.path(spec.origin),
            "store": objects.describe(),
            "version": published.version,
            "live": published.live,
            "newly_written": published.created,
            "manifest_url": dg.MetadataValue.url(url) if "://" in root else dg.MetadataValue.path(url),
            "versioned_key": published.key,
            **split_figures(
                {n: sp.tokens for n, sp in m.splits.items()}, {n: sp.documents for n, sp in m.splits.items()}
            ),
            "train_shards": m.splits["train"].shard_count,
            "val_shards": m.splits["val"].shard_count,
            "partitions_left_out": len(summary.left_out),
            "size": size(m.nbytes),
            "token_dtype": m.token_dtype,
            "tokenizer_fingerprint": m.tokenizer.fingerprint,
        },
        check_results=[check_result(a) for a in published.audits],
    )
