"""Asset raw_documents: each partition's documents, normalised, filtered and deduplicated, as zstd parquet.

Every partition of a run gets its own materialization metadata (its counts, drops, source files, time); a failed
partition is recorded in the store with its error (file and line), which the next version's lineage names."""

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from ..execution.dagster_private import add_partition_metadata
from ..lib.charts import bar_chart_svg, markdown_image
from ..lib.raw_writer import RawStats, build_raw
from ..lib.records import RawRecord
from ..lib.state import registered_partition
from .code_versions import CODE_VERSIONS
from .conventions import DATASET_ASSET
from .figures import markdown_list, size
from .partitions import BACKFILL_POLICY, each_partition, raise_failures, raw_files, run_data_version
from .resources import DatasetResource, StoreResource

SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("text", "large_string", description="normalised document text"),
        dg.TableColumn("doc_hash", "uint64", description="blake2b-64 of the text: dedup key and split"),
    ]
)


@dataclass(frozen=True)
class Ingested:
    """One partition's raw documents, as stored, and how long they took."""

    record: RawRecord
    stats: RawStats
    seconds: float


def _histogram(stats: RawStats) -> dg.MetadataValue:
    """A picture of the partition's documents by length."""
    rows = stats.histogram_rows()
    chart = bar_chart_svg([b for b, _ in rows], [n for _, n in rows], "documents by length", "characters per document")
    return dg.MetadataValue.md(markdown_image(chart, "documents by length in characters"))


def partition_metadata(done: Ingested) -> dict[str, Any]:
    """What the UI shows for one partition: its row count, source files, drops by reason, sizes and time."""
    record, stats = done.record, done.stats
    return {
        "dagster/row_count": stats.documents_out,
        "documents_in": stats.documents_in,
        **{f"dropped_{reason}": n for reason, n in record.dropped.items()},
        "source_files": markdown_list(f.uri for f in record.source_files or (record.source_file,)),
        "text_in": size(stats.bytes_in),
        "text_kept": size(stats.bytes_out),
        "key": record.key,
        "ingest_seconds": round(done.seconds, 3),
        "length_histogram": _histogram(stats),
    }


@dg.asset(
    partitions_def=raw_files,
    backfill_policy=BACKFILL_POLICY,
    code_version=CODE_VERSIONS.raw_documents,
    **DATASET_ASSET,
    kinds={"parquet"},
    tags={"stage": "ingest"},
    description="Documents of one partition's source files (or row-group range): NFC, control characters stripped, "
    "short and duplicate documents dropped.",
)
def raw_documents(
    context: dg.AssetExecutionContext, dataset: DatasetResource, store: StoreResource
) -> dg.MaterializeResult[None]:
    spec, objects = dataset.spec(), store.store()
    run_id = context.run.run_id

    def build(partition: str) -> Ingested:
        started = time.perf_counter()
        registered = registered_partition(objects, partition)
        with tempfile.TemporaryDirectory() as tmp:  # a failure is recorded in the store by build_raw (IngestFailure)
            record, stats = build_raw(objects, spec, partition, registered, Path(tmp), run_id)
        done = Ingested(record, stats, time.perf_counter() - started)
        add_partition_metadata(context, partition, partition_metadata(done))
        return done

    built, failures = each_partition(context, build)
    raise_failures(context, failures)
    documents = sum(d.stats.documents_out for d in built.values())  # one line a run: each partition's is its metadata
    seconds = sum(d.seconds for d in built.values())
    context.log.info(f"{len(built)} partitions: {documents:,} documents kept in {seconds:.1f} s")
    return dg.MaterializeResult(
        data_version=dg.DataVersion(run_data_version(d.record.data_version for d in built.values())),
        metadata={"dagster/column_schema": SCHEMA},
    )
