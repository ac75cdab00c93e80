"""Dagster wiring only: one module per asset key (with its checks), partitions, automation conditions,
jobs and the schedule, the sensor, and resources. Asset functions are thin: they call shard_assets.lib
and report metadata."""

import warnings

import dagster as dg

# We rely on backfill_policy knowingly (multi-partition runs); its beta notice would print in every process.
warnings.filterwarnings(
    "ignore", message="Parameter `backfill_policy` of function `asset` is currently in beta", category=dg.BetaWarning
)
