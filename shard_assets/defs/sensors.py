"""The discovery sensor: new or changed source files become partitions and tokenize runs; vanished files
leave the partition set (and so the next version) and the dedup index; a tokenized partition that a concurrent
publish missed is published. Each tick does a bounded step of discovery and stores where to resume in a cursor
of a few bytes, so a corpus of any size is registered across ticks."""

import hashlib
import time

import dagster as dg

from ..lib.discovery import DiscoveryBudget, DiscoveryCursor
from ..lib.layout import part_record_key, splits_record_key
from ..lib.partitioning import PartitionRecord, contiguous_runs
from ..lib.records import SplitsRecord, find_record
from ..lib.state import current_tokenizer, has_tokenizer
from ..lib.store import ObjectStore
from .jobs import tokenize_job
from .manifest import manifest
from .partitions import PARTITIONS_PER_RUN, RAW_FILES, RUN_BYTES, discovery_step, run_target
from .dedup import dedup
from .raw_documents import raw_documents
from .resources import DatasetResource, StoreResource
from .splits import splits
from .tokenized_shards import tokenized_shards
from .tokenizer import keeps_token_ids, tokenizer

TICK_BUDGET = DiscoveryBudget(max_files=20_000, seconds=20.0)  # well inside Dagster's 60 s tick deadline
# Automation evaluates every 30 s: a publish of new parts it has not started three ticks after they were tokenized, it
# counted as handled (dagster-io/dagster#24650) and will not start.
AUTOMATION_GRACE_SECONDS = 90.0


def run_request(
    partitions: list[str], records: dict[str, PartitionRecord], selection: list[dg.AssetKey] | None
) -> dg.RunRequest:
    """One tokenize run for adjacent partitions; its run key names them and their content, so it is made once."""
    content = hashlib.sha256("\n".join(f"{k}:{records[k].fingerprint}" for k in partitions).encode()).hexdigest()[:16]
    span = partitions[0] if len(partitions) == 1 else f"{partitions[0]}..{partitions[-1]}"
    return dg.RunRequest(run_key=f"{span}:{content}", asset_selection=selection, **run_target(partitions))


def removal_request(removed: list[str], anchor: str) -> dg.RunRequest:
    """A dedup run that takes partitions which left out of the index (a run names a partition: `anchor`, any one
    still registered); partitions that keep a copy now are recorded as updated, and automation tokenizes them."""
    gone = hashlib.sha256("\n".join(sorted(removed)).encode()).hexdigest()[:16]
    return dg.RunRequest(run_key=f"removed:{gone}", asset_selection=[dedup.key], partition_key=anchor)


def missed_publish(
    instance: dg.DagsterInstance, store: ObjectStore, registered: dict[str, PartitionRecord]
) -> dg.RunRequest | None:
    """A publish run for partitions of the current tokenizer the last publish missed (never saw, or began before they
    were tokenized and left out), once automation has had AUTOMATION_GRACE_SECONDS since the last tokenize: Dagster
    counts an input updated on the tick its consumer updated as handled (dagster-io/dagster#24650). Once a publish."""
    if not has_tokenizer(store):
        return None
    fingerprint = current_tokenizer(store).fingerprint
    summary = find_record(store, splits_record_key(fingerprint), SplitsRecord, "discovery sensor")
    published = instance.fetch_materializations(splits.key, limit=1).records
    if summary is None or not published:
        return None
    tokenized, after = instance.get_materialized_partitions(tokenized_shards.key), published[0].storage_id
    run = instance.get_run_record_by_id(published[0].run_id)  # none for a runless report
    began = run.start_time if run and run.start_time else published[0].timestamp  # it read the parts after that
    first = instance.fetch_materializations(
        dg.AssetRecordsFilter(tokenized_shards.key, after_timestamp=began), limit=1, ascending=True
    ).records  # tokenized after that publish began: those it left out (not tokenized yet) are missed too
    since = first and instance.get_materialized_partitions(tokenized_shards.key, after_cursor=first[0].storage_id - 1)
    known = {*summary.partitions, *summary.stale, *(p for p in summary.left_out if p not in since)}
    candidates = [p for p in registered if p in tokenized and p not in known]
    newest = instance.fetch_materializations(
        dg.AssetRecordsFilter(tokenized_shards.key, after_storage_id=after), limit=1
    ).records
    if newest and time.time() - newest[0].timestamp < AUTOMATION_GRACE_SECONDS:
        return None  # tokenized since the last publish (the usual case): automation's next publish reads them
    missed = [p for p in candidates if store.exists(part_record_key(fingerprint, p))]  # this tokenizer's
    if not missed:
        return None
    key = hashlib.sha256("\n".join(sorted(missed)).encode()).hexdigest()[:16]
    return dg.RunRequest(run_key=f"publish:{after}:{key}", asset_selection=[splits.key, manifest.key])


@dg.sensor(job=tokenize_job, minimum_interval_seconds=120, default_status=dg.DefaultSensorStatus.STOPPED)
def raw_files_sensor(
    context: dg.SensorEvaluationContext, dataset: DatasetResource, store: StoreResource
) -> dg.SensorResult:
    """Every 2 minutes, registers up to 20,000 files or 20 s of work (ETag, LFS sha256 or size+mtime; never
    content) and requests tokenize runs of up to 32 adjacent new or changed partitions and 1 GiB of source
    (raw documents only until a tokenizer exists); the next tick resumes where this one stopped. A removal
    alone requests a dedup run; tokenized partitions a publish missed, a publish."""
    objects, spec = store.store(), dataset.spec()
    cursor = DiscoveryCursor.from_json(context.cursor)
    step, records = discovery_step(context.instance, objects, spec, cursor, TICK_BUDGET)
    selection = None if has_tokenizer(objects) else [raw_documents.key, dedup.key]
    order = context.instance.get_dynamic_partitions(RAW_FILES)
    sizes = {k: records[k].size for k in step.changed}
    runs = contiguous_runs(step.changed, order, PARTITIONS_PER_RUN, sizes, RUN_BYTES)
    requests = [run_request(run, records, selection) for run in runs]
    if step.removed and not step.changed and records and spec.dedup.enabled:
        requests.append(removal_request(step.removed, next(k for k in order if k in records)))
    if not step.changed and (publish := missed_publish(context.instance, objects, records)):
        requests.append(publish)
    context.log.info(
        f"{step.files} files handled, {len(step.changed)} partitions new or changed, {len(step.removed)} removed; "
        f"resume at {step.cursor}"
    )
    events = []  # say on the tokenizer whether materialising it now would replace it (the sensor's runs keep it)
    if (step.changed or step.removed) and has_tokenizer(objects):
        events.append(dg.AssetCheckEvaluation(asset_key=tokenizer.key, **keeps_token_ids(objects, spec, records)))
    return dg.SensorResult(run_requests=requests, cursor=step.cursor.to_json(), asset_events=events)
