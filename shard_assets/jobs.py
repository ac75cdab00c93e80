"""Jobs: train or load the tokenizer; tokenize partitions (backfills); publish splits and manifest."""

import dagster as dg

from .assets.manifest import manifest
from .assets.raw import raw_documents
from .assets.splits import splits
from .assets.tokenized import tokenized_shards
from .assets.tokenizer import tokenizer

tokenizer_job = dg.define_asset_job("tokenizer_job", selection=[tokenizer], description="Train or load the tokenizer; automation re-tokenizes downstream.")
TOKENIZE_TAGS = {"dataset/step": "tokenize"}  # dagster.yaml limits how many such runs start at once

tokenize_job = dg.define_asset_job(
    "tokenize_job", selection=[raw_documents, tokenized_shards], tags=TOKENIZE_TAGS,
    description="Raw documents and tokenized shards of one partition; the sensor and backfills launch it.",
)
publish_job = dg.define_asset_job("publish_job", selection=[splits, manifest], description="Aggregate splits and publish a manifest version.")

JOBS = [tokenizer_job, tokenize_job, publish_job]
