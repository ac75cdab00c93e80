"""The Dagster code location: every asset, resource, job, schedule and sensor of the project."""

from __future__ import annotations

import dagster as dg

from .assets.manifest import manifest
from .assets.raw import raw_documents
from .assets.splits import splits
from .assets.tokenized import tokenized_shards
from .assets.tokenizer import tokenizer
from .resources import default_resources

ASSETS = [raw_documents, tokenizer, tokenized_shards, splits, manifest]


def build_definitions(resources: dict | None = None) -> dg.Definitions:
    """Definitions with the given resources (tests pass a temporary store), else those from the environment."""
    return dg.Definitions(assets=ASSETS, resources=resources or default_resources())


defs = build_definitions()
