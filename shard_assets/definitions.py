"""The Dagster code location: every asset, check, job, schedule, sensor and resource of the project."""

import os

import dagster as dg

from .assets.manifest import manifest
from .assets.raw import raw_documents
from .assets.splits import splits
from .assets.tokenized import tokenized_shards
from .assets.tokenizer import tokenizer
from .checks import CHECKS
from .jobs import JOBS
from .resources import default_resources
from .schedules import SCHEDULES
from .sensors import SENSORS

ASSETS = [raw_documents, tokenizer, tokenized_shards, splits, manifest]

# One step per core at most: a tokenizer step keeps one core busy and holds one partition in memory.
EXECUTOR = dg.multiprocess_executor.configured({"max_concurrent": int(os.environ.get("SHARD_MAX_CONCURRENT", os.cpu_count() or 1))})


def build_definitions(resources: dict | None = None) -> dg.Definitions:
    """Definitions with the given resources (tests pass a temporary store), else those from the environment."""
    return dg.Definitions(
        assets=ASSETS,
        asset_checks=CHECKS,
        jobs=JOBS,
        schedules=SCHEDULES,
        sensors=SENSORS,
        executor=EXECUTOR,
        resources=resources or default_resources(),
    )


defs = build_definitions()
