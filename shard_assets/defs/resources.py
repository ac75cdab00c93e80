"""Dagster resources: the dataset specification and the object store every asset uses."""

from __future__ import annotations

import os

import dagster as dg

from shard_loader.storage.s3_client import r2_endpoint

from ..lib.spec import DatasetSpec, load_spec, spec_from_text
from ..lib.store import LocalFolderStore, ObjectStore

DEFAULT_LOCAL_ROOT = "data/store"
DEFAULT_SPEC = "data/demo/demo.toml"  # written by `shard-assets demo`


def _resolved(value: str) -> str:
    """An EnvVar field's value: Dagster resolves it inside runs; scripts using the resource directly need this."""
    return value.get_value() if isinstance(value, dg.EnvVar) else value


class DatasetResource(dg.ConfigurableResource):
    """Which dataset to build: a spec file (TOML), or its text where the file is not on the machine that runs
    (a cluster node: `shard-assets build` sends it in each run's config); `spec_path` still names it and anchors
    relative source uris."""

    spec_path: str = DEFAULT_SPEC
    spec_toml: str = ""

    def spec(self) -> DatasetSpec:
        return spec_from_text(self.spec_toml, self.spec_path) if self.spec_toml else load_spec(self.spec_path)


class StoreResource(dg.ConfigurableResource):
    """Where the dataset is written: a local folder, or `s3://bucket/prefix` on an S3-compatible endpoint (R2).

    Keys are best given as dg.EnvVar so their values never enter run config, logs or the UI.
    """

    root: str = DEFAULT_LOCAL_ROOT
    endpoint_url: str = ""
    region_name: str = "auto"
    access_key_id: str = ""
    secret_access_key: str = ""

    def store(self) -> ObjectStore:
        if not self.root.startswith(("s3://", "r2://")):
            return LocalFolderStore(self.root)
        from shard_loader.storage.s3_client import make_s3_client

        from ..lib.store.s3 import S3ObjectStore

        client = make_s3_client(
            self.endpoint_url or None, _resolved(self.access_key_id) or None, _resolved(self.secret_access_key) or None,
            role="write", region=self.region_name, retries=5,
        )
        bucket, _, prefix = self.root.split("://", 1)[1].partition("/")
        return S3ObjectStore(client, bucket, prefix, self.endpoint_url)


def store_resource_from_env() -> StoreResource:
    """DATASET_STORE=r2 (with the R2_DATASET_* variables and DATASET_BINS_PATH) or s3 (S3_ENDPOINT_URL,
    DATASET_STORE_ROOT=s3://...); otherwise the local folder DATASET_STORE_ROOT (default data/store)."""
    kind = os.environ.get("DATASET_STORE", "local")
    if kind == "r2":
        account, bucket = os.environ.get("R2_DATASET_ACCOUNT_ID", ""), os.environ.get("R2_DATASET_BUCKET_NAME", "")
        return StoreResource(
            root=f"s3://{bucket}/{os.environ.get('DATASET_BINS_PATH', '').strip('/')}".rstrip("/"),
            endpoint_url=os.environ.get("S3_ENDPOINT_URL") or r2_endpoint(account),
            access_key_id=dg.EnvVar("R2_DATASET_WRITE_ACCESS_KEY_ID"),
            secret_access_key=dg.EnvVar("R2_DATASET_WRITE_SECRET_ACCESS_KEY"),
        )
    if kind == "s3":
        return StoreResource(
            root=os.environ["DATASET_STORE_ROOT"],
            endpoint_url=os.environ.get("S3_ENDPOINT_URL", ""),
            access_key_id=dg.EnvVar("AWS_ACCESS_KEY_ID"),
            secret_access_key=dg.EnvVar("AWS_SECRET_ACCESS_KEY"),
        )
    return StoreResource(root=os.environ.get("DATASET_STORE_ROOT", DEFAULT_LOCAL_ROOT))


def default_resources() -> dict[str, dg.ConfigurableResource]:
    """Resources from the environment: SHARD_DATASET_SPEC and the store variables above."""
    return {"dataset": DatasetResource(spec_path=os.environ.get("SHARD_DATASET_SPEC") or DEFAULT_SPEC), "store": store_resource_from_env()}
