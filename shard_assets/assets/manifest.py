"""Asset: the published manifest, versioned and immutable, with manifest.json replaced last."""

import hashlib

import dagster as dg

from shard_loader.format import LATEST_KEY, FileRef

from ..automation import PUBLISH
from ..layout import splits_record_key, tokenizer_key
from ..publish import build_manifest, publish_manifest
from ..records import get_record
from ..resources import DatasetResource, StoreResource
from ..version import code_version
from . import raw, tokenized, tokenizer
from . import splits as splits_module
from .splits import read_part_records, splits
from .tokenizer import TOKENIZER_KEY, current_tokenizer

CODE_VERSION = "manifest-1"


def lineage_of(spec, parts: dict[str, dict], tokenizer_run_id: str | None) -> dict:
    """Which source files, runs, data and code versions the manifest was made from."""
    sources = {}
    for partition, record in sorted(parts.items()):
        name = partition.split(".", 1)[0]
        sources.setdefault(name, []).append(
            {
                "partition": partition,
                "source_uri": record["raw"]["source_uri"],
                "source_fingerprint": record["raw"]["source_fingerprint"],
                "raw_sha256": record["raw"]["sha256"],
                "raw_data_version": record["raw"]["data_version"],
                "raw_run_id": record["raw"]["run_id"],
                "tokenized_data_version": record["data_version"],
                "tokenized_run_id": record["run_id"],
            }
        )
    return {
        "code_version": code_version(),
        "asset_code_versions": {
            "raw_documents": raw.CODE_VERSION,
            "tokenizer": tokenizer.CODE_VERSION,
            "tokenized_shards": tokenized.CODE_VERSION,
            "splits": splits_module.CODE_VERSION,
            "manifest": CODE_VERSION,
        },
        "tokenizer_run_id": tokenizer_run_id,
        "val_fraction": spec.val_fraction,
        "sources": [{"name": n, "files": files} for n, files in sources.items()],
    }


@dg.asset(
    deps=[splits, tokenizer.tokenizer],
    code_version=CODE_VERSION,
    automation_condition=PUBLISH,
    group_name="dataset",
    kinds={"json"},
    description="manifests/<version>.json (immutable) and manifest.json (the latest), the contract trainers read.",
)
def manifest(context: dg.AssetExecutionContext, dataset: DatasetResource, store: StoreResource) -> dg.MaterializeResult:
    spec, objects = dataset.spec(), store.store()
    record = current_tokenizer(context.instance, objects)
    summary = get_record(objects, splits_record_key(record.fingerprint), "manifest")
    parts = read_part_records(objects, record.fingerprint, summary["partitions"])
    tok_key = tokenizer_key(record.fingerprint)
    tok_bytes = objects.get_bytes(tok_key)
    tok_file = FileRef(key=tok_key, size=len(tok_bytes), sha256=hashlib.sha256(tok_bytes).hexdigest())
    event = context.instance.get_latest_materialization_event(TOKENIZER_KEY)
    lineage = lineage_of(spec, parts, event.run_id if event else None)
    lineage["manifest_run_id"] = context.run.run_id
    published = publish_manifest(objects, build_manifest(spec.name, record, tok_file, parts, lineage))
    m = published.manifest
    root = objects.loader_url().rstrip("/")
    return dg.MaterializeResult(
        data_version=dg.DataVersion(published.version),
        metadata={
            "version": published.version,
            "newly_published": published.created,
            "manifest_url": dg.MetadataValue.url(f"{root}/{LATEST_KEY}") if "://" in root else dg.MetadataValue.path(f"{root}/{LATEST_KEY}"),
            "versioned_key": published.key,
            "train_tokens": m.splits["train"].tokens,
            "val_tokens": m.splits["val"].tokens,
            "train_shards": len(m.splits["train"].shards),
            "val_shards": len(m.splits["val"].shards),
            "train_documents": m.splits["train"].documents,
            "val_documents": m.splits["val"].documents,
            "bytes": sum(r.size for s in m.splits.values() for e in s.shards for r in (e.npy, e.bin)),
            "token_dtype": m.token_dtype,
            "tokenizer_fingerprint": m.tokenizer.fingerprint,
        },
    )
