"""Scheduled re-tokenization: re-run the tokenizer on a cron; a changed tokenizer fingerprint makes
tokenized shards, splits and manifest stale and their automation conditions rebuild them."""

import os

import dagster as dg

from .jobs import tokenizer_job

DEFAULT_CRON = "0 3 * * 0"  # Sundays at 03:00

retokenize_schedule = dg.ScheduleDefinition(
    name="retokenize_schedule",
    job=tokenizer_job,
    cron_schedule=os.environ.get("SHARD_RETOKENIZE_CRON", DEFAULT_CRON),
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Re-materialise the tokenizer (SHARD_RETOKENIZE_CRON); downstream follows by automation.",
)

SCHEDULES = [retokenize_schedule]
