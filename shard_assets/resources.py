"""Dagster resources: the dataset specification and the object store every asset uses."""

from __future__ import annotations

import os

import dagster as dg

from .spec import DatasetSpec, load_spec
from .store import LocalFolderStore, ObjectStore

DEFAULT_LOCAL_ROOT = "data/store"


class DatasetResource(dg.ConfigurableResource):
    """Which dataset to build: a spec file path (TOML), or empty for the built-in demo."""

    spec_path: str = ""

    def spec(self) -> DatasetSpec:
        return load_spec(self.spec_path or None)


class StoreResource(dg.ConfigurableResource):
    """Where the dataset is written: a local folder (the default)."""

    root: str = DEFAULT_LOCAL_ROOT

    def store(self) -> ObjectStore:
        return LocalFolderStore(self.root)


def default_resources() -> dict[str, dg.ConfigurableResource]:
    """Resources from the environment: SHARD_DATASET_SPEC and DATASET_STORE_ROOT."""
    return {
        "dataset": DatasetResource(spec_path=os.environ.get("SHARD_DATASET_SPEC", "")),
        "store": StoreResource(root=os.environ.get("DATASET_STORE_ROOT", DEFAULT_LOCAL_ROOT)),
    }
