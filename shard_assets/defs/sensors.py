"""The discovery sensor: new or changed source files become partitions and tokenize runs; vanished files
leave the partition set (and so the next version). Each tick does a bounded step of discovery and stores
where to resume in a cursor of a few bytes, so a corpus of any size is registered across ticks."""

import hashlib

import dagster as dg

from ..lib.discovery import DiscoveryBudget, DiscoveryCursor
from ..lib.partitioning import PartitionRecord, contiguous_runs
from ..lib.state import has_tokenizer
from .jobs import tokenize_job
from .partitions import PARTITIONS_PER_RUN, RAW_FILES, RUN_BYTES, discovery_step, run_target
from .dedup import dedup
from .raw_documents import raw_documents
from .resources import DatasetResource, StoreResource

TICK_BUDGET = DiscoveryBudget(max_files=20_000, seconds=20.0)  # well inside Dagster's 60 s tick deadline


def run_request(
    partitions: list[str], records: dict[str, PartitionRecord], selection: list[dg.AssetKey] | None
) -> dg.RunRequest:
    """One tokenize run for adjacent partitions; its run key names them and their content, so it is made once."""
    content = hashlib.sha256("\n".join(f"{k}:{records[k].fingerprint}" for k in partitions).encode()).hexdigest()[:16]
    span = partitions[0] if len(partitions) == 1 else f"{partitions[0]}..{partitions[-1]}"
    return dg.RunRequest(run_key=f"{span}:{content}", asset_selection=selection, **run_target(partitions))


@dg.sensor(job=tokenize_job, minimum_interval_seconds=120, default_status=dg.DefaultSensorStatus.STOPPED)
def raw_files_sensor(
    context: dg.SensorEvaluationContext, dataset: DatasetResource, store: StoreResource
) -> dg.SensorResult:
    """Every 2 minutes, registers up to 20,000 files or 20 s of work (ETag, LFS sha256 or size+mtime; never
    content) and requests tokenize runs of up to 32 adjacent new or changed partitions and 1 GiB of source
    (raw documents only until a tokenizer exists); the next tick resumes where this one stopped."""
    objects = store.store()
    step, records = discovery_step(
        context.instance, objects, dataset.spec(), DiscoveryCursor.from_json(context.cursor), TICK_BUDGET
    )
    selection = None if has_tokenizer(objects) else [raw_documents.key, dedup.key]
    order = context.instance.get_dynamic_partitions(RAW_FILES)
    sizes = {k: records[k].size for k in step.changed}
    requests = [
        run_request(run, records, selection)
        for run in contiguous_runs(step.changed, order, PARTITIONS_PER_RUN, sizes, RUN_BYTES)
    ]
    context.log.info(
        f"{step.files} files handled, {len(step.changed)} partitions new or changed, {len(step.removed)} removed; "
        f"resume at {step.cursor}"
    )
    return dg.SensorResult(run_requests=requests, cursor=step.cursor.to_json())
