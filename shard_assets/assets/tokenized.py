"""Asset: one raw partition tokenized into a train shard and a val shard (`.npy` tokens + `.bin` offsets)."""

import hashlib
import tempfile
from pathlib import Path

import dagster as dg

from ..automation import REBUILD
from ..encoders import Encoder, encoders_for
from ..layout import part_record_key, raw_key, raw_record_key, shard_base_key, tokenizer_key
from ..partitions import raw_files
from ..records import get_record, put_record
from ..resources import DatasetResource, StoreResource
from ..sources.listing import split_partition_key
from ..store import ObjectStore
from ..tokenize import TokenizeStats, tokenize_partition
from .raw import raw_documents
from .tokenizer import current_tokenizer, tokenizer

CODE_VERSION = "tokenized-2"  # whole documents, special-token strings as text, behind the exactness guard


def _publish_file(store: ObjectStore, path: Path, key: str, sha256: str) -> dict:
    ref = {"key": key, "size": path.stat().st_size, "sha256": sha256}
    store.put_file(key, path)
    return ref


def tokenize_and_publish(
    store: ObjectStore, raw: str, encoder: Encoder, reference: Encoder, record, partition: str, val_fraction: float, batch_documents: int, workdir: Path
) -> tuple[dict, TokenizeStats, dict]:
    """The asset's work without Dagster: raw parquet from the store -> shard files -> the store.

    Returns the shard entries per split (as published), the tokenization stats and the
    closed writers (their files stay in `workdir`).
    """
    local_raw = store.local_path(raw)
    if local_raw is None:
        local_raw = workdir / "raw.parquet"
        store.get_file(raw, local_raw)
    writers, stats = tokenize_partition(local_raw, encoder, reference, record.eod_id, record.token_dtype, val_fraction, workdir / "out", partition, batch_documents)
    shards = {}
    for split, w in writers.items():
        base = shard_base_key(record.fingerprint, split, partition, w.content_hash)
        shards[split] = {
            "partition": partition,
            "tokens": w.tokens,
            "documents": w.documents,
            "npy": _publish_file(store, w.npy_path, f"{base}.npy", w.npy_sha256),
            "bin": _publish_file(store, w.bin_path, f"{base}.bin", w.bin_sha256),
        }
    return shards, stats, writers


def decoded_samples(tok, writer, count: int = 3, chars: int = 160) -> str:
    """The first documents of a shard decoded back to text, as a markdown list, for a glance in the UI."""
    import numpy as np

    tokens = np.load(writer.npy_path, mmap_mode="r")
    offsets = np.fromfile(writer.bin_path, dtype="<i8", count=count + 1)
    lines = []
    for a, b in zip(offsets, offsets[1:]):
        text = tok.decode(tokens[a : b - 1].tolist()).replace("\n", " ")
        lines.append(f"- {text[:chars]}{'…' if len(text) > chars else ''}")
    return "\n".join(lines) or "(no documents)"


@dg.asset(
    partitions_def=raw_files,
    deps=[raw_documents, tokenizer],
    code_version=CODE_VERSION,
    automation_condition=REBUILD,
    group_name="dataset",
    kinds={"numpy"},
    description="Token ids of one raw partition, each document followed by the end-of-document id, split train/val by document hash.",
)
def tokenized_shards(context: dg.AssetExecutionContext, dataset: DatasetResource, store: StoreResource) -> dg.MaterializeResult:
    spec, objects = dataset.spec(), store.store()
    partition = context.partition_key
    source, part = split_partition_key(partition)
    record = current_tokenizer(context.instance, objects)
    tokenizer_json = objects.get_bytes(tokenizer_key(record.fingerprint)).decode()
    encoder, reference = encoders_for(tokenizer_json)
    raw = get_record(objects, raw_record_key(source, part), f"tokenized_shards[{partition}]")
    with tempfile.TemporaryDirectory() as tmp:
        shards, stats, writers = tokenize_and_publish(
            objects, raw_key(source, part), encoder, reference, record, partition, spec.val_fraction, spec.batch_documents, Path(tmp)
        )
        samples = decoded_samples(reference.tokenizer, writers["train"])
    data_version = hashlib.sha256(
        "".join(shards[s][f]["sha256"] for s in sorted(shards) for f in ("npy", "bin")).encode()
    ).hexdigest()[:16]
    put_record(
        objects,
        part_record_key(record.fingerprint, partition),
        {
            "partition": partition,
            "tokenizer_fingerprint": record.fingerprint,
            "val_fraction": spec.val_fraction,
            "raw": {k: raw[k] for k in ("key", "sha256", "documents", "data_version", "run_id", "source_uri", "source_fingerprint")},
            "shards": shards,
            "data_version": data_version,
            "run_id": context.run.run_id,
            "code_version": CODE_VERSION,
            "encoder": stats.guard.to_dict(),
        },
    )
    return dg.MaterializeResult(
        data_version=dg.DataVersion(data_version),
        metadata={
            "tokenizer_fingerprint": record.fingerprint,
            "tokens_train": stats.tokens["train"],
            "tokens_val": stats.tokens["val"],
            "documents_train": stats.documents["train"],
            "documents_val": stats.documents["val"],
            "bytes": sum(s[f]["size"] for s in shards.values() for f in ("npy", "bin")),
            "tokens_per_second": round(stats.tokens_per_second),
            "seconds": round(stats.seconds, 3),
            "sample_documents": dg.MetadataValue.md(samples),
            **{f"encoder_{k}": v for k, v in stats.guard.to_dict().items() if v is not None},
        },
    )
