"""Asset: one source file's documents, normalised, filtered and deduplicated, as zstd parquet."""

import hashlib
import tempfile
from pathlib import Path

import dagster as dg

from ..errors import SourceError, TokenizerError
from ..layout import raw_key, raw_record_key, tokenizer_key
from ..partitions import raw_files
from ..plan import estimate_partition
from ..raw import write_raw_partition
from ..records import put_record
from ..resources import DatasetResource, StoreResource
from ..sources.listing import SourceFile, list_source_files, split_partition_key
from ..tokenizer import load_tokenizer

CODE_VERSION = "raw-1"


def find_source_file(spec, partition: str) -> SourceFile:
    source_name, part = split_partition_key(partition)
    for f in list_source_files(spec.source(source_name)):
        if f.part == part:
            return f
    raise SourceError(f"partition {partition!r}: source {source_name!r} has no file named {part!r} any more")


def _estimate(context, objects, parquet, stats) -> dict:
    """Planning figures with the current tokenizer on the first documents; none before a tokenizer exists."""
    import pyarrow.parquet as pq

    from .tokenizer import current_tokenizer  # tokenizer.py depends on this module

    try:
        record = current_tokenizer(context.instance, objects)
    except TokenizerError:
        return {}
    tok = load_tokenizer(objects.get_bytes(tokenizer_key(record.fingerprint)).decode())
    batches = pq.ParquetFile(parquet).iter_batches(batch_size=200, columns=["text"])
    sample = next(batches).column(0).to_pylist() if stats.documents_out else []
    return estimate_partition(sample, stats.documents_out, stats.bytes_out, tok, record.token_dtype)


@dg.asset(
    partitions_def=raw_files,
    code_version=CODE_VERSION,
    group_name="dataset",
    kinds={"parquet"},
    description="Documents of one source file: NFC, control characters stripped, short and duplicate documents dropped.",
)
def raw_documents(context: dg.AssetExecutionContext, dataset: DatasetResource, store: StoreResource) -> dg.MaterializeResult:
    spec, objects = dataset.spec(), store.store()
    file = find_source_file(spec, context.partition_key)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "raw.parquet"
        stats = write_raw_partition(spec, file, out)
        with open(out, "rb") as f:
            sha = hashlib.file_digest(f, "sha256").hexdigest()
        key = raw_key(file.source, file.part)
        objects.put_file(key, out)
        estimate = _estimate(context, objects, out, stats)
    data_version = stats.content_hash[:16]
    put_record(
        objects,
        raw_record_key(file.source, file.part),
        {
            "partition": context.partition_key,
            "source": file.source,
            "source_uri": file.uri,
            "source_fingerprint": file.fingerprint,
            "key": key,
            "sha256": sha,
            "documents": stats.documents_out,
            "data_version": data_version,
            "run_id": context.run.run_id,
        },
    )
    histogram = "| characters | documents |\n|---|---|\n" + "\n".join(f"| {b} | {n} |" for b, n in stats.histogram_rows())
    return dg.MaterializeResult(
        data_version=dg.DataVersion(data_version),
        metadata={
            "source_uri": file.uri,
            "source_fingerprint": file.fingerprint,
            "key": key,
            "documents_in": stats.documents_in,
            "documents_out": stats.documents_out,
            "dropped_empty": stats.dropped["empty"],
            "dropped_too_short": stats.dropped["too_short"],
            "dropped_duplicate": stats.dropped["duplicate"],
            "bytes_in": stats.bytes_in,
            "bytes_out": stats.bytes_out,
            "length_histogram": dg.MetadataValue.md(histogram),
            **estimate,
        },
    )
