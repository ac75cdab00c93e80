"""The Dagster code location `shard_assets`: every asset, check, job, schedule, sensor and resource.

`defs` is a function: nothing reads the environment at import; Dagster calls it when it loads the
code location, and tests call `build_definitions(resources)` with their own store."""

from typing import Any

import dagster as dg

from .defs.dedup import dedup
from .defs.eval_index import eval_index
from .defs.jobs import JOBS, retokenize_schedule
from .defs.manifest import manifest
from .defs.mixture import MixtureSpecsResource, mixture_definitions, mixture_specs_from_env
from .defs.raw_documents import raw_documents
from .defs.resources import StoreResource, default_resources
from .defs.retention import gc_job, gc_schedule
from .defs.verification import verify_job
from .defs.sensors import raw_files_sensor
from .defs.splits import splits
from .defs.tokenized_shards import tokenized_shards
from .defs.tokenizer import tokenizer
from .lib.settings import resolve_path

ASSETS = [raw_documents, eval_index, dedup, tokenizer, tokenized_shards, splits, manifest]


def build_definitions(resources: dict[str, Any] | None = None) -> dg.Definitions:
    """Definitions with the given resources (tests pass a temporary store), else those from the environment."""
    resources = resources or default_resources()
    specs = resources.get("mixtures") or mixture_specs_from_env()  # its folder's spec files are the mixture assets
    assert isinstance(specs, MixtureSpecsResource)
    store = resources.get("store")  # a mixture of the dataset it publishes is drawn downstream of its manifest
    mixtures = mixture_definitions(specs, resolve_path(store.root) if isinstance(store, StoreResource) else "")
    return dg.Definitions(
        assets=[*ASSETS, *mixtures.assets],
        jobs=[*JOBS, gc_job, verify_job, *mixtures.jobs],
        schedules=[retokenize_schedule(), gc_schedule],
        sensors=[raw_files_sensor, *mixtures.sensors],
        # steps are light or one-per-partition; concurrency comes from runs (dagster.yaml)
        executor=dg.in_process_executor,
        resources={**resources, "mixtures": specs},
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
