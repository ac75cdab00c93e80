"""Asset raw_documents: one partition's documents, normalised, filtered and deduplicated, as zstd parquet."""

import tempfile
from pathlib import Path

import dagster as dg

from ..lib.charts import bar_chart_svg, markdown_image
from ..lib.errors import TokenizerError
from ..lib.plan import estimate_partition
from ..lib.raw_writer import RawStats, build_raw
from ..lib.state import current_tokenizer, registered_source_file
from ..lib.store import ObjectStore
from ..lib.tokenizer import load_tokenizer
from ..lib.layout import tokenizer_key
from .conventions import DATASET_ASSET
from .partitions import raw_files
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


@dg.asset(
    partitions_def=raw_files,
    code_version=CODE_VERSION,
    **DATASET_ASSET,
    kinds={"parquet"},
    tags={"stage": "ingest"},
    description="Documents of one source file: NFC, control characters stripped, short and duplicate documents dropped.",
)
def raw_documents(context: dg.AssetExecutionContext, dataset: DatasetResource, store: StoreResource) -> dg.MaterializeResult:
    spec, objects = dataset.spec(), store.store()
    source_file = registered_source_file(objects, context.partition_key)
    with tempfile.TemporaryDirectory() as tmp:
        record, stats = build_raw(objects, spec, context.partition_key, source_file, Path(tmp), context.run.run_id)
        estimate = _estimate(objects, Path(tmp) / "raw.parquet", stats)
    rows = stats.histogram_rows()
    chart = bar_chart_svg([b for b, _ in rows], [n for _, n in rows], "documents by length", "characters per document")
    return dg.MaterializeResult(
        data_version=dg.DataVersion(record.data_version),
        metadata={
            "dagster/row_count": stats.documents_out,
            "dagster/column_schema": dg.TableSchema(
                columns=[
                    dg.TableColumn("text", "large_string", description="normalised document text"),
                    dg.TableColumn("doc_hash", "uint64", description="blake2b-64 of the text: dedup key and split"),
                ]
            ),
            "source_uri": dg.MetadataValue.path(source_file.uri),
            "source_fingerprint": source_file.fingerprint,
            "key": record.key,
            "documents_in": stats.documents_in,
            "documents_out": stats.documents_out,
            "dropped_empty": stats.dropped["empty"],
            "dropped_too_short": stats.dropped["too_short"],
            "dropped_duplicate": stats.dropped["duplicate"],
            "bytes_in": dg.MetadataValue.int(stats.bytes_in),
            "bytes_out": dg.MetadataValue.int(stats.bytes_out),
            "length_histogram": dg.MetadataValue.md(markdown_image(chart, "documents by length in characters")),
            **estimate,
        },
    )
