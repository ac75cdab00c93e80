"""Jobs and the re-tokenization schedule. The build command, the sensor, backfills and the UI all launch
these same jobs, so every run is named and obeys dagster.yaml's limits."""

import os

import dagster as dg

from .dedup import dedup
from .eval_index import eval_index
from .manifest import manifest
from .raw_documents import raw_documents
from .splits import splits
from .tokenized_shards import tokenized_shards
from .tokenizer import tokenizer

# dagster.yaml limits how many runs carrying the key dataset/step (ingest and tokenize, the heavy ones) start at once
TOKENIZE_TAGS = {"dataset/step": "tokenize"}
INGEST_TAGS = {"dataset/step": "ingest"}
DEFAULT_CRON = "0 3 * * 0"  # Sundays at 03:00

ingest_job = dg.define_asset_job(
    "ingest_job",
    selection=[raw_documents, dedup],
    tags=INGEST_TAGS,
    executor_def=dg.in_process_executor,
    description="Raw documents of one partition: read, normalise, filter, deduplicate (within the file, then against "
    "the dataset's index).",
)
eval_index_job = dg.define_asset_job(
    "eval_index_job",
    selection=[eval_index],
    executor_def=dg.in_process_executor,
    description="Read the eval sets ([decontaminate].against) into the n-gram index decontamination checks against.",
)
tokenizer_job = dg.define_asset_job(
    "tokenizer_job",
    selection=[tokenizer],
    executor_def=dg.in_process_executor,
    description="Train or load the tokenizer and make it current; automation re-tokenizes downstream.",
)
tokenize_job = dg.define_asset_job(
    "tokenize_job",
    selection=[raw_documents, dedup, tokenized_shards],
    tags=TOKENIZE_TAGS,
    executor_def=dg.in_process_executor,
    description="Raw documents, dedup and tokenized shards of one partition; the sensor and backfills launch it.",
)
publish_job = dg.define_asset_job(
    "publish_job",
    selection=[splits, manifest],
    executor_def=dg.in_process_executor,
    description="Choose the partitions, write a manifest version, audit it, and make it live if every blocking check "
    "passes.",
)

JOBS = [ingest_job, eval_index_job, tokenizer_job, tokenize_job, publish_job]


def retokenize_schedule() -> dg.ScheduleDefinition:
    """Re-materialise the tokenizer on SHARD_RETOKENIZE_CRON (read when the definitions load)."""
    return dg.ScheduleDefinition(
        name="retokenize_schedule",
        job=tokenizer_job,
        cron_schedule=os.environ.get("SHARD_RETOKENIZE_CRON", DEFAULT_CRON),
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description="Re-materialise the tokenizer (SHARD_RETOKENIZE_CRON, default Sundays 03:00 UTC); a changed "
        "tokenizer re-tokenizes downstream by automation.",
    )
