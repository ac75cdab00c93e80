"""Discover raw files: register a partition per new source file and request a tokenize run for it.

The cursor maps each partition key to its file's fingerprint, so a file whose content
changed (new ETag or sha256) is requested again, and unchanged files never are.
"""

import json

import dagster as dg

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
    requests = [dg.RunRequest(run_key=f"{f.partition_key}:{f.fingerprint}", partition_key=f.partition_key) for f in changed]
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[raw_files.build_add_request(new)] if new else [],
        cursor=json.dumps({**seen, **{f.partition_key: f.fingerprint for f in files}}, sort_keys=True),
    )


SENSORS = [raw_files_sensor]
