"""The discovery sensor: new or changed source files become partitions and tokenize runs; vanished files
leave the partition set (and so the next version)."""

import dagster as dg

from ..lib.state import has_tokenizer
from .jobs import tokenize_job
from .partitions import sync_partitions
from .raw_documents import raw_documents
from .resources import DatasetResource, StoreResource


@dg.sensor(job=tokenize_job, minimum_interval_seconds=300, default_status=dg.DefaultSensorStatus.STOPPED)
def raw_files_sensor(context: dg.SensorEvaluationContext, dataset: DatasetResource, store: StoreResource) -> dg.SensorResult:
    """Lists the spec's sources every 5 minutes; each new or changed file (by ETag, LFS sha256 or size+mtime) is
    registered as a partition and gets a tokenize run (raw documents only until a tokenizer exists)."""
    objects = store.store()
    changed, removed, _ = sync_partitions(context.instance, objects, dataset.spec())
    selection = None if has_tokenizer(objects) else [raw_documents.key]
    requests = [
        dg.RunRequest(run_key=f"{f.partition_key}:{f.fingerprint}", partition_key=f.partition_key, asset_selection=selection)
        for f in changed
    ]
    if removed:
        context.log.info(f"{len(removed)} partitions left with their files: {removed[:10]}")
    return dg.SensorResult(run_requests=requests)
