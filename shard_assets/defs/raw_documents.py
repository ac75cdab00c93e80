"""Asset raw_documents: each partition's documents, normalised, filtered and deduplicated, as zstd parquet."""

import tempfile
from collections import Counter
from pathlib import Path

import dagster as dg

from ..lib.charts import bar_chart_svg, markdown_image
from ..lib.errors import TokenizerError
from ..lib.plan import estimate_partition, human_bytes
from ..lib.partitioning import PartitionRecord
from ..lib.raw_writer import RawStats, build_raw
from ..lib.records import RawRecord
from ..lib.state import current_tokenizer, registered_partition
from ..lib.store import ObjectStore
from ..lib.tokenizer import load_tokenizer
from ..lib.layout import tokenizer_key
from .conventions import DATASET_ASSET
from .partitions import BACKFILL_POLICY, combined_version, each_partition, raw_files
from .resources import DatasetResource, StoreResource

CODE_VERSION = "raw-3"  # normalisation keeps lone-CR line breaks and replaces lone surrogates


def _estimate(objects: ObjectStore, parquet: Path, stats: RawStats) -> dict:
    """Planning figures with the store's current tokenizer on the first documents; none before a tokenizer exists."""
    import pyarrow.parquet as pq

    try:
        record = current_tokenizer(objects)
    except TokenizerError:
        return {}
    tok = load_tokenizer(objects.get_bytes(tokenizer_key(record.fingerprint)).decode())
    batches = pq.ParquetFile(parquet).iter_batches(batch_size=200, columns=["text"])
    sample = next(batches).column(0).to_pylist() if stats.documents_out else []
    return estimate_partition(sample, stats.documents_out, stats.bytes_out, tok, record.token_dtype)


def _metadata(registered: PartitionRecord, record: RawRecord, stats: RawStats, estimate: dict) -> dict:
    """What the UI shows for one partition: its source, counts, drops by reason and a length histogram."""
    return {
        **_table(stats.documents_out, [stats]),
        "source_uri": dg.MetadataValue.path(record.source_file.uri),
        "source_fingerprint": registered.fingerprint,
        "source_files": len(registered.pieces),
        "key": record.key,
        "documents_in": stats.documents_in,
        "documents_out": stats.documents_out,
        "dropped_empty": stats.dropped["empty"],
        "dropped_too_short": stats.dropped["too_short"],
        "dropped_duplicate": stats.dropped["duplicate"],
        "bytes_in": dg.MetadataValue.int(stats.bytes_in),
        "bytes_out": dg.MetadataValue.int(stats.bytes_out),
        "size": f"{human_bytes(stats.bytes_in)} of text in, {human_bytes(stats.bytes_out)} kept",
        **estimate,
    }


def _table(rows: int, stats: list[RawStats]) -> dict:
    """The standard row count and column schema, and a picture of the documents' lengths over `stats`."""
    counts = sum((s.length_histogram for s in stats), Counter())
    rows_by_length = RawStats(length_histogram=counts).histogram_rows()
    chart = bar_chart_svg([b for b, _ in rows_by_length], [n for _, n in rows_by_length], "documents by length", "characters per document")
    return {
        "dagster/row_count": rows,
        "dagster/column_schema": dg.TableSchema(
            columns=[
                dg.TableColumn("text", "large_string", description="normalised document text"),
                dg.TableColumn("doc_hash", "uint64", description="blake2b-64 of the text: dedup key and split"),
            ]
        ),
        "length_histogram": dg.MetadataValue.md(markdown_image(chart, "documents by length in characters")),
    }


def _summary(built: list[tuple[RawRecord, RawStats]]) -> dict:
    """What the UI shows for a multi-partition run: totals, and one table row per partition."""
    rows = "\n".join(f"| {r.partition} | {s.documents_in} | {s.documents_out} | {r.key} |" for r, s in built)
    return {
        **_table(sum(s.documents_out for _, s in built), [s for _, s in built]),
        "partitions": len(built),
        "documents_in": sum(s.documents_in for _, s in built),
        "documents_out": sum(s.documents_out for _, s in built),
        "bytes_in": dg.MetadataValue.int(sum(s.bytes_in for _, s in built)),
        "bytes_out": dg.MetadataValue.int(sum(s.bytes_out for _, s in built)),
        "per_partition": dg.MetadataValue.md("| partition | documents in | documents out | key |\n|---|---|---|---|\n" + rows),
    }


@dg.asset(
    partitions_def=raw_files,
    backfill_policy=BACKFILL_POLICY,
    code_version=CODE_VERSION,
    **DATASET_ASSET,
    kinds={"parquet"},
    tags={"stage": "ingest"},
    description="Documents of one partition's source files (or row-group range): NFC, control characters stripped, short and duplicate documents dropped.",
)
def raw_documents(context: dg.AssetExecutionContext, dataset: DatasetResource, store: StoreResource) -> dg.MaterializeResult:
    spec, objects = dataset.spec(), store.store()
    single = len(context.partition_keys) == 1

    def build(partition: str) -> tuple[PartitionRecord, RawRecord, RawStats, dict]:
        registered = registered_partition(objects, partition)
        with tempfile.TemporaryDirectory() as tmp:
            record, stats = build_raw(objects, spec, partition, registered, Path(tmp), context.run.run_id)
            estimate = _estimate(objects, Path(tmp) / "raw.parquet", stats) if single else {}
        return registered, record, stats, estimate

    built = each_partition(context, build)
    if single:
        registered, record, stats, estimate = built[0]
        return dg.MaterializeResult(data_version=dg.DataVersion(record.data_version), metadata=_metadata(registered, record, stats, estimate))
    return dg.MaterializeResult(
        data_version=dg.DataVersion(combined_version(r.data_version for _, r, _, _ in built)),
        metadata=_summary([(r, s) for _, r, s, _ in built]),
    )
