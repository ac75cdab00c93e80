"""Partitions: one per raw source file, registered at run time by the discovery sensor or the build command."""

import dagster as dg

raw_files = dg.DynamicPartitionsDefinition(name="raw_files")
