"""Asset manifest: write `manifests/<version>.json`, audit exactly that version with blocking checks, and
only then replace `manifest.json` (write-audit-publish). A failed check leaves the live version untouched."""

import hashlib

import dagster as dg

from shard_loader.format import LATEST_KEY, FileRef

from ..lib.layout import part_record_key, splits_record_key, tokenizer_key
from ..lib.plan import human_bytes
from ..lib.publish import Audit, build_manifest, publish
from ..lib.records import PartRecord, SplitsRecord, get_record, get_records
from ..lib.spec import DatasetSpec
from ..lib.state import current_tokenizer
from ..lib.version import code_version
from .conventions import DATASET_ASSET
from . import raw_documents, tokenized_shards, tokenizer
from . import splits as splits_module
from .automation import PUBLISH
from .resources import DatasetResource, StoreResource
from .splits import splits

CODE_VERSION = "manifest-3"  # 3: manifest format 2 (shard tables, lineage file)
AUDITS = {
    "files_present": "Every file the version names is in the store with its recorded size.",
    "counts_agree": "Documents agree between raw and tokenized partitions; tokens and documents between shards and the manifest.",
    "token_ids_below_vocab": "Every token id is below the vocab size (maxima recorded while writing).",
    "splits_not_empty": "Train, and val when val_fraction > 0, hold at least one document.",
    "reads_with_shard_loader": "The tokenizer and a sample of shards verify (sha256) and open with shard_loader's reader.",
}


def lineage_of(spec: DatasetSpec, parts: dict[str, PartRecord], summary: SplitsRecord, tokenizer_run_id: str | None) -> tuple[dict, dict]:
    """Which source files, runs, data and code versions the manifest was made from, and what was left out:
    a summary published inline, and the per-partition detail published as the manifest's lineage file."""
    sources: dict[str, list] = {}
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
                "tokenized_data_version": part.data_version,
                "tokenized_run_id": part.run_id,
                "encoder": part.encoder.to_dict() if part.encoder else None,
            }
        )
    detail = {
        "sources": [{"name": n, "files": files} for n, files in sources.items()],
        "left_out": [{"partition": p, "reason": why} for p, why in summary.left_out.items()],
        "stale": [{"partition": p, "reason": why} for p, why in summary.stale.items()],
    }
    return {
        "code_version": code_version(),
        "asset_code_versions": {
            "raw_documents": raw_documents.CODE_VERSION,
            "tokenizer": tokenizer.CODE_VERSION,
            "tokenized_shards": tokenized_shards.CODE_VERSION,
            "splits": splits_module.CODE_VERSION,
            "manifest": CODE_VERSION,
        },
        "tokenizer_run_id": tokenizer_run_id,
        "val_fraction": spec.val_fraction,
        "sources": [{"name": n, "partitions": len(files)} for n, files in sources.items()],
        "partitions_left_out": len(summary.left_out),
    }, detail


def _check_result(a: Audit) -> dg.AssetCheckResult:
    problems = "\n".join(f"- {p}" for p in a.problems[:50]) or "none"
    return dg.AssetCheckResult(check_name=a.name, passed=a.passed, metadata={"summary": a.summary, "problems": dg.MetadataValue.md(problems)})


@dg.asset(
    deps=[splits, tokenizer.tokenizer],
    code_version=CODE_VERSION,
    automation_condition=PUBLISH,
    **DATASET_ASSET,
    kinds={"json"},
    tags={"stage": "publish"},
    check_specs=[dg.AssetCheckSpec(name, asset="manifest", blocking=True, description=text) for name, text in AUDITS.items()],
    description=(
        "Write-audit-publish: `manifests/VERSION.json` (immutable) is written, audited by the blocking checks, "
        "and only then copied to `manifest.json`, the contract trainers read."
    ),
)
def manifest(context: dg.AssetExecutionContext, dataset: DatasetResource, store: StoreResource) -> dg.MaterializeResult:
    spec, objects = dataset.spec(), store.store()
    record = current_tokenizer(objects)
    summary = get_record(objects, splits_record_key(record.fingerprint), SplitsRecord, "manifest")
    keys = [part_record_key(record.fingerprint, p) for p in summary.partitions]
    parts = dict(zip(summary.partitions, get_records(objects, keys, PartRecord, "manifest")))
    tok_key = tokenizer_key(record.fingerprint)
    tok_bytes = objects.get_bytes(tok_key)
    tok_file = FileRef(key=tok_key, size=len(tok_bytes), sha256=hashlib.sha256(tok_bytes).hexdigest())
    event = context.instance.get_latest_materialization_event(tokenizer.tokenizer.key)
    lineage, detail = lineage_of(spec, parts, summary, event.run_id if event else None)
    lineage["manifest_run_id"] = context.run.run_id
    published = publish(objects, build_manifest(spec.name, record, tok_file, parts, lineage, detail), parts, spec.val_fraction)
    m = published.manifest
    root = objects.loader_url().rstrip("/")
    url = f"{root}/{LATEST_KEY}"
    if not published.live:
        context.log.error(f"blocking checks failed ({', '.join(published.failed)}): {published.key} written, {LATEST_KEY} left unchanged at the previous version")
    return dg.MaterializeResult(
        data_version=dg.DataVersion(published.version),
        metadata={
            "version": published.version,
            "live": published.live,
            "newly_written": published.created,
            "manifest_url": dg.MetadataValue.url(url) if "://" in root else dg.MetadataValue.path(url),
            "versioned_key": published.key,
            "train_tokens": m.splits["train"].tokens,
            "val_tokens": m.splits["val"].tokens,
            "train_shards": m.splits["train"].shard_count,
            "val_shards": m.splits["val"].shard_count,
            "train_documents": m.splits["train"].documents,
            "val_documents": m.splits["val"].documents,
            "partitions_left_out": len(summary.left_out),
            "bytes": dg.MetadataValue.int(m.nbytes),
            "size": human_bytes(m.nbytes),
            "token_dtype": m.token_dtype,
            "tokenizer_fingerprint": m.tokenizer.fingerprint,
        },
        check_results=[_check_result(a) for a in published.audits],
    )
