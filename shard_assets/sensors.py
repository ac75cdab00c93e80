"""Discover raw files: register a partition per new source file and request a tokenize run for it
(raw documents only while no tokenizer exists yet).

The cursor maps each partition key to its file's fingerprint, so a file whose content
changed (new ETag or sha256) is requested again, and unchanged files never are.
"""

import json

import dagster as dg

from .assets.raw import raw_documents
from .assets.tokenizer import TOKENIZER_KEY
from .jobs import tokenize_job
from .partitions import raw_files
from .resources import DatasetResource
from .sources.listing import list_all_files


@dg.sensor(job=tokenize_job, minimum_interval_seconds=300, default_status=dg.DefaultSensorStatus.STOPPED)
def raw_files_sensor(context: dg.SensorEvaluationContext, dataset: DatasetResource) -> dg.SensorResult:
    """Lists every source of the dataset spec; new or changed files become partitions and runs."""
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    files = list_all_files(dataset.spec())
    registered = set(context.instance.get_dynamic_partitions(raw_files.name))
    new = [f.partition_key for f in files if f.partition_key not in registered]
    changed = [f for f in files if f.partition_key in new or seen.get(f.partition_key, f.fingerprint) != f.fingerprint]
    # Before any tokenizer exists only raw documents can be built; automation trains the tokenizer on them, then tokenizes.
    selection = None if context.instance.get_latest_materialization_event(TOKENIZER_KEY) else [raw_documents.key]
    requests = [
        dg.RunRequest(run_key=f"{f.partition_key}:{f.fingerprint}", partition_key=f.partition_key, asset_selection=selection)
        for f in changed
    ]
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[raw_files.build_add_request(new)] if new else [],
        cursor=json.dumps({**seen, **{f.partition_key: f.fingerprint for f in files}}, sort_keys=True),
    )


SENSORS = [raw_files_sensor]
