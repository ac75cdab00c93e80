"""Dagster wiring only: one module per asset key (with its checks), partitions, automation conditions,
jobs and the schedule, the sensor, and resources. Asset functions are thin: they call shard_assets.lib
and report metadata."""
