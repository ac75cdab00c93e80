"""Asset tokenized_shards: one partition tokenized into a train and a val shard (`.npy` tokens + `.bin`
offsets) under content-hashed keys; a failure is quarantined in the store with its error."""

import tempfile
from pathlib import Path

import dagster as dg
import numpy as np

from ..lib.errors import BuildError
from ..lib.layout import quarantine_key, raw_record_key, tokenizer_key
from ..lib.records import Quarantine, RawRecord, get_record, put_record
from ..lib.shard_build import build_partition_shards
from ..lib.state import current_tokenizer
from ..lib.encoders import encoders_for
from .conventions import DATASET_ASSET
from .automation import REBUILD
from .partitions import raw_files
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
    partition = context.partition_key
    record = current_tokenizer(objects)
    try:
        encoder, reference = encoders_for(objects.get_bytes(tokenizer_key(record.fingerprint)).decode())
        raw = get_record(objects, raw_record_key(partition), RawRecord, f"tokenized_shards[{partition}]")
        with tempfile.TemporaryDirectory() as tmp:
            built = build_partition_shards(
                objects, raw, encoder, reference, record, spec.val_fraction, spec.batch_documents, Path(tmp), context.run.run_id, CODE_VERSION
            )
            train = built.writers["train"]
            samples = decoded_samples(reference.tokenizer, train.npy_path, train.bin_path)
    except BuildError as exc:
        put_record(objects, quarantine_key(record.fingerprint, partition), Quarantine(partition, record.fingerprint, str(exc), context.run.run_id))
        raise
    objects.delete(quarantine_key(record.fingerprint, partition))
    part, stats = built.record, built.stats
    return dg.MaterializeResult(
        data_version=dg.DataVersion(part.data_version),
        metadata={
            "tokenizer_fingerprint": record.fingerprint,
            "tokens_train": stats.tokens["train"],
            "tokens_val": stats.tokens["val"],
            "documents_train": stats.documents["train"],
            "documents_val": stats.documents["val"],
            "max_token_id": part.max_token_id,
            "bytes": sum(e.nbytes for e in part.shards.values()),
            "tokens_per_second": round(stats.tokens_per_second),
            "seconds": round(stats.seconds, 3),
            "sample_documents": dg.MetadataValue.md(samples),
            **{f"encoder_{k}": v for k, v in stats.guard.to_dict().items() if v is not None},
        },
    )
