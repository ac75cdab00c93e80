"""Asset checks that can fail: counts agree across raw, tokenized and manifest; token ids below the
vocab; splits disjoint; every published file matches its size and sha256; the manifest reads
with shard_loader's own reader."""

import tempfile
from pathlib import Path

import dagster as dg
import numpy as np

import shard_loader
from shard_loader.checksum import verify_file
from shard_loader.errors import ShardLoaderError
from shard_loader.format import open_shard

from .assets.manifest import manifest
from .assets.splits import overlap_count, read_part_records, splits
from .assets.tokenizer import current_tokenizer
from .layout import raw_record_key, splits_record_key
from .records import get_record
from .resources import StoreResource
from .sources.listing import split_partition_key


def _published(store):
    """The latest manifest as shard_loader reads it."""
    return shard_loader.open_manifest(store.loader_url()).manifest


def _local_file(store, key: str, tmp: Path) -> Path:
    """The key's file: in place for a local store, else downloaded into `tmp`."""
    local = store.local_path(key)
    if local is not None:
        return local
    dest = tmp / key.replace("/", "__")
    store.get_file(key, dest)
    return dest


@dg.asset_check(asset=splits, blocking=True, description="No document (by hash of its normalised text) is in both train and val.")
def splits_are_disjoint(context: dg.AssetCheckExecutionContext, store: StoreResource) -> dg.AssetCheckResult:
    objects = store.store()
    record = current_tokenizer(context.instance, objects)
    summary = get_record(objects, splits_record_key(record.fingerprint), "splits_are_disjoint")
    overlap = overlap_count(objects, read_part_records(objects, record.fingerprint, summary["partitions"]))
    return dg.AssetCheckResult(passed=overlap == 0, metadata={"documents_in_both_splits": overlap})


@dg.asset_check(asset=manifest, description="Documents agree between raw partitions, tokenized shards and the manifest; tokens between shards and manifest.")
def counts_agree(context: dg.AssetCheckExecutionContext, store: StoreResource) -> dg.AssetCheckResult:
    objects = store.store()
    m = _published(objects)
    parts = read_part_records(objects, m.tokenizer.fingerprint, get_record(objects, splits_record_key(m.tokenizer.fingerprint), "counts_agree")["partitions"])
    problems = []
    for partition, part in parts.items():
        raw = get_record(objects, raw_record_key(*split_partition_key(partition)), "counts_agree")
        tokenized = sum(part["shards"][s]["documents"] for s in ("train", "val"))
        if raw["documents"] != tokenized:
            problems.append(f"{partition}: {raw['documents']} raw documents, {tokenized} tokenized")
    for name, split in m.splits.items():
        tokens = sum(p["shards"][name]["tokens"] for p in parts.values())
        documents = sum(p["shards"][name]["documents"] for p in parts.values())
        if (tokens, documents) != (split.tokens, split.documents):
            problems.append(f"{name}: shards hold {tokens} tokens / {documents} documents, manifest says {split.tokens} / {split.documents}")
    return dg.AssetCheckResult(passed=not problems, metadata={"problems": dg.MetadataValue.md("\n".join(f"- {p}" for p in problems) or "none")})


@dg.asset_check(asset=manifest, description="Every token id of every shard is below the tokenizer's vocab size.")
def token_ids_below_vocab(context: dg.AssetCheckExecutionContext, store: StoreResource) -> dg.AssetCheckResult:
    objects = store.store()
    m = _published(objects)
    worst, where = -1, ""
    with tempfile.TemporaryDirectory() as tmp:
        for split in m.splits.values():
            for e in split.shards:
                tokens = np.load(_local_file(objects, e.npy.key, Path(tmp)), mmap_mode="r", allow_pickle=False)
                top = int(tokens.max()) if tokens.size else -1
                if top > worst:
                    worst, where = top, e.npy.key
    return dg.AssetCheckResult(passed=worst < m.tokenizer.vocab_size, metadata={"max_token_id": worst, "vocab_size": m.tokenizer.vocab_size, "in": where})


@dg.asset_check(asset=manifest, description="Every file the manifest names has its recorded size and sha256 in the store.")
def files_match_manifest(context: dg.AssetCheckExecutionContext, store: StoreResource) -> dg.AssetCheckResult:
    objects = store.store()
    m = _published(objects)
    refs = m.files()
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        for ref in refs:
            try:
                verify_file(_local_file(objects, ref.key, Path(tmp)), ref)
            except (ShardLoaderError, OSError) as exc:
                bad.append(str(exc))
    return dg.AssetCheckResult(passed=not bad, metadata={"files": len(refs), "mismatches": dg.MetadataValue.md("\n".join(f"- {b}" for b in bad) or "none")})


@dg.asset_check(asset=manifest, description="manifest.json parses with shard_loader and every shard opens (offsets, dtype, counts).")
def manifest_reads_with_shard_loader(context: dg.AssetCheckExecutionContext, store: StoreResource) -> dg.AssetCheckResult:
    objects = store.store()
    try:
        m = _published(objects)
        with tempfile.TemporaryDirectory() as tmp:
            for split in m.splits.values():
                for e in split.shards:
                    open_shard(e, _local_file(objects, e.npy.key, Path(tmp)), _local_file(objects, e.bin.key, Path(tmp)), m.token_dtype)
    except (ShardLoaderError, OSError) as exc:
        return dg.AssetCheckResult(passed=False, metadata={"error": str(exc)})
    return dg.AssetCheckResult(passed=True, metadata={"version": m.version})


CHECKS = [splits_are_disjoint, counts_agree, token_ids_below_vocab, files_match_manifest, manifest_reads_with_shard_loader]
