"""Asset tokenized_shards: each partition tokenized into a train and a val shard (`.npy` tokens + `.bin`
offsets) under content-hashed keys; a failure is quarantined in the store with its error."""

import functools
import shutil
import tempfile
from pathlib import Path

import dagster as dg
import numpy as np

from ..lib.errors import BuildError
from ..lib.layout import quarantine_key, raw_record_key, tokenizer_key
from ..lib.records import Quarantine, RawRecord, get_record, put_record
from ..lib.shard_build import BuiltPartition, PartitionUploads, build_partition_shards
from ..lib.ownership import claim
from ..lib.state import current_tokenizer
from ..lib.encoders import encoders_for
from .automation import REBUILD
from .conventions import DATASET_ASSET
from .partitions import BACKFILL_POLICY, PartitionsFailed, combined_version, each_partition, raw_files
from .raw_documents import raw_documents
from .resources import DatasetResource, StoreResource
from .tokenizer import tokenizer

CODE_VERSION = "tokenized-3"  # whole documents, special-token strings as text, behind the exactness guard


def decoded_samples(tok, npy_path: Path, bin_path: Path, count: int = 3, chars: int = 160) -> str:
    """The first documents of a shard decoded back to text, as a markdown list, for a glance in the UI."""
    tokens = np.load(npy_path, mmap_mode="r")
    offsets = np.fromfile(bin_path, dtype="<i8", count=count + 1)
    lines = []
    for a, b in zip(offsets, offsets[1:]):
        text = tok.decode(tokens[a : b - 1].tolist()).replace("\n", " ")
        lines.append(f"- {text[:chars]}{'…' if len(text) > chars else ''}")
    return "\n".join(lines) or "(no documents)"


@dg.asset(
    partitions_def=raw_files,
    backfill_policy=BACKFILL_POLICY,
    deps=[raw_documents, tokenizer],
    code_version=CODE_VERSION,
    automation_condition=REBUILD,
    **DATASET_ASSET,
    kinds={"numpy"},
    tags={"stage": "tokenize"},
    pool="tokenize",
    description="Token ids of one raw partition, each document followed by the end-of-document id, split train/val by document hash.",
)
def tokenized_shards(context: dg.AssetExecutionContext, dataset: DatasetResource, store: StoreResource) -> dg.MaterializeResult:
    spec, objects = dataset.spec(), store.store()
    claim(objects, spec.name, spec.origin)
    record = current_tokenizer(objects)
    loaded = functools.cache(lambda: encoders_for(objects.get_bytes(tokenizer_key(record.fingerprint)).decode()))

    uploads = PartitionUploads(objects)  # a partition's files go up while the next one encodes

    def quarantine(partition: str, exc: BuildError) -> None:
        put_record(objects, quarantine_key(record.fingerprint, partition), Quarantine(partition, record.fingerprint, str(exc), context.run.run_id))

    def build(partition: str) -> tuple[BuiltPartition, str]:
        workdir = Path(tempfile.mkdtemp(prefix=f"tokenize-{partition}-"))
        try:
            encoder, reference = loaded()
            raw = get_record(objects, raw_record_key(partition), RawRecord, f"tokenized_shards[{partition}]")
            built = build_partition_shards(
                objects, raw, encoder, reference, record, spec.val_fraction, spec.batch_documents, workdir, context.run.run_id, CODE_VERSION,
                spec.on_mismatch,
            )
            train = built.writers["train"]
            samples = decoded_samples(reference.tokenizer, train.npy_path, train.bin_path)
        except BaseException as exc:
            shutil.rmtree(workdir, ignore_errors=True)
            if isinstance(exc, BuildError):
                quarantine(partition, exc)
            raise
        uploads.submit(built, workdir)
        return built, samples

    try:
        results = each_partition(context, build)
    finally:  # the partitions built before a failure still get their files and records
        failed = uploads.wait()
        for partition in uploads.stored:
            objects.delete(quarantine_key(record.fingerprint, partition))
        for partition, exc in failed.items():
            quarantine(partition, exc)
    if failed:
        if len(context.partition_keys) == 1:
            raise next(iter(failed.values()))
        raise PartitionsFailed(f"{len(failed)} of {len(context.partition_keys)} partitions failed to upload (the others are stored; rerun the range):\n" + "\n".join(f"{k}: {type(e).__name__}: {e}" for k, e in failed.items()))
    parts = [b.record for b, _ in results]
    tokens = {split: sum(b.stats.tokens[split] for b, _ in results) for split in ("train", "val")}
    documents = {split: sum(b.stats.documents[split] for b, _ in results) for split in ("train", "val")}
    seconds = sum(b.stats.seconds for b, _ in results)
    metadata = {
        "tokenizer_fingerprint": record.fingerprint,
        "tokens_train": tokens["train"],
        "tokens_val": tokens["val"],
        "documents_train": documents["train"],
        "documents_val": documents["val"],
        "max_token_id": max(p.max_token_id for p in parts),
        "bytes": sum(e.nbytes for p in parts for e in p.shards.values()),
        "tokens_per_second": round(sum(tokens.values()) / seconds) if seconds else 0,
        "seconds": round(seconds, 3),
        "sample_documents": dg.MetadataValue.md(results[0][1]),
        "encoder_engine": ", ".join(sorted({b.stats.guard.engine for b, _ in results})),
        "encoder_documents": sum(b.stats.guard.documents for b, _ in results),
        "encoder_sampled": sum(b.stats.guard.sampled for b, _ in results),  # re-encoded with the reference and compared
        "encoder_differing": sum(b.stats.guard.differing for b, _ in results),
    }
    if len(parts) > 1:
        metadata["partitions"] = len(parts)
    version = parts[0].data_version if len(parts) == 1 else combined_version(p.data_version for p in parts)
    return dg.MaterializeResult(data_version=dg.DataVersion(version), metadata=metadata)
