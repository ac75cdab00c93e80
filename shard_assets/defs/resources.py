"""Dagster resources: the dataset specification and the object store every asset uses, built from the settings
`lib.settings` reads from the environment and checks.

Relative local paths (a spec, a store folder), from the environment, the CLI or the UI's launchpad, are resolved
against the project root (`lib.settings.project_root`), so the CLI, the UI, sensors and schedules read one spec and
write one store."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import dagster as dg
from pydantic import Field

from ..lib.settings import DEFAULT_LOCAL_ROOT, DEFAULT_SPEC, RELATIVE, REMOTE_SCHEMES, resolve_path, store_choice
from ..lib.spec import DatasetSpec, load_spec, spec_from_text
from ..lib.store import LocalFolderStore, ObjectStore


def _resolved(value: str) -> str:
    """An EnvVar field's value: Dagster resolves it inside runs; scripts using the resource directly need this."""
    return (value.get_value() or "") if isinstance(value, dg.EnvVar) else value


class DatasetResource(dg.ConfigurableResource["DatasetResource"]):
    """Which dataset to build: a spec file (TOML). The code location's default is absolute, resolved where it was
    loaded. On a cluster node the file may not exist: `shard-assets build` then sends its text in each run's config
    (`spec_toml`), and `spec_path` still names it and anchors relative source uris."""

    spec_path: str = Field(default=DEFAULT_SPEC, description=f"The dataset spec (TOML); {RELATIVE}.")
    spec_toml: str = Field(
        default="",
        description="The spec's text, for runs on machines that do not see the file (set by `shard-assets build`).",
    )

    def spec(self) -> DatasetSpec:
        path = resolve_path(self.spec_path)
        return spec_from_text(self.spec_toml, path) if self.spec_toml else load_spec(path)


class StoreResource(dg.ConfigurableResource["StoreResource"]):
    """Where the dataset is written: a local folder, or `s3://bucket/prefix` on an S3-compatible endpoint (R2); keys
    are best given as dg.EnvVar so their values never enter run config, logs or the UI."""

    root: str = Field(default=DEFAULT_LOCAL_ROOT, description=f"A local folder or s3://bucket/prefix; {RELATIVE}.")
    endpoint_url: str = ""
    region_name: str = "auto"
    access_key_id: str = ""
    secret_access_key: str = ""

    def store(self) -> ObjectStore:
        if not self.root.startswith(REMOTE_SCHEMES):
            return LocalFolderStore(resolve_path(self.root))
        from shard_loader.builder_api import make_s3_client

        from ..lib.store.s3 import S3ObjectStore

        client = make_s3_client(
            self.endpoint_url or None,
            _resolved(self.access_key_id) or None,
            _resolved(self.secret_access_key) or None,
            role="write",
            region=self.region_name,
            retries=5,
        )
        bucket, _, prefix = self.root.split("://", 1)[1].partition("/")
        return S3ObjectStore(client, bucket, prefix, self.endpoint_url)


@dataclass(frozen=True)
class Settings:
    """The resources' settings as one plain value, resolved once: what the CLI hands to pool processes as an
    argument (a resource itself does not pickle). Keys stay dg.EnvVar names, never values."""

    spec_path: str
    store_root: str
    endpoint_url: str = ""
    region_name: str = "auto"
    access_key_id: str = ""
    secret_access_key: str = ""

    def resources(self) -> dict[str, dg.ConfigurableResource[Any]]:
        store = StoreResource(
            root=self.store_root,
            endpoint_url=self.endpoint_url,
            region_name=self.region_name,
            access_key_id=self.access_key_id,
            secret_access_key=self.secret_access_key,
        )
        return {"dataset": DatasetResource(spec_path=self.spec_path), "store": store}

    @classmethod
    def of(cls, resources: Mapping[str, dg.ConfigurableResource[Any]]) -> Settings:
        """The settings of resources built elsewhere (tests, scripts), paths resolved."""
        dataset, store = resources["dataset"], resources["store"]
        assert isinstance(dataset, DatasetResource) and isinstance(store, StoreResource)
        return cls(
            spec_path=resolve_path(dataset.spec_path),
            store_root=resolve_path(store.root),
            endpoint_url=store.endpoint_url,
            region_name=store.region_name,
            access_key_id=store.access_key_id,
            secret_access_key=store.secret_access_key,
        )


def settings_from_env(
    spec: str | None = None, store: str | None = None, environ: Mapping[str, str] = os.environ
) -> Settings:
    """The settings `lib.settings.store_choice` checks, with a bucket's keys as dg.EnvVar names (never values)."""
    choice = store_choice(spec, store, environ)
    settings = Settings(choice.spec_path, choice.store_root, choice.endpoint_url)
    if choice.key_variables is None:
        return settings
    key_id, secret = choice.key_variables
    return replace(settings, access_key_id=dg.EnvVar(key_id), secret_access_key=dg.EnvVar(secret))


def default_resources() -> dict[str, dg.ConfigurableResource[Any]]:
    """Resources from the environment: SHARD_DATASET_SPEC and the store variables above, paths resolved."""
    return settings_from_env().resources()
