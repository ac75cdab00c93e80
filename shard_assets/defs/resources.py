"""Dagster resources: the dataset specification and the object store every asset uses, and the one place their
settings are read from the environment and resolved.

Relative local paths (a spec, a store folder), from the environment, the CLI or the UI's launchpad, are resolved
against the project root: SHARD_PROJECT_ROOT, which `shard-assets dev` sets to its --project folder before Dagster
changes directory, else the current directory. So the CLI, the UI, sensors and schedules read one spec and write
one store.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field

from shard_loader.storage.s3_client import ACCOUNT_VARIABLE, ENDPOINT_VARIABLE, key_variables, r2_endpoint

from ..lib.errors import SettingsError
from ..lib.spec import DatasetSpec, load_spec, spec_from_text
from ..lib.store import LocalFolderStore, ObjectStore

DEFAULT_LOCAL_ROOT = "data/store"
DEFAULT_SPEC = "data/demo/demo.toml"  # written by `shard-assets demo`
PROJECT_ROOT_VARIABLE = "SHARD_PROJECT_ROOT"
SPEC_VARIABLE = "SHARD_DATASET_SPEC"
STORE_VARIABLE = "DATASET_STORE"
STORE_ROOT_VARIABLE = "DATASET_STORE_ROOT"
STORE_KINDS = ("local", "s3", "r2")
REMOTE_SCHEMES = ("s3://", "r2://")
RELATIVE = (
    "a relative path is resolved against the project root (SHARD_PROJECT_ROOT, set by `shard-assets dev`; else "
    "the current directory)"
)
_ACCOUNT = re.compile(r"^[0-9a-fA-F]{32}$")


def project_root(environ: Mapping[str, str] = os.environ) -> Path:
    """The folder relative paths are resolved against: SHARD_PROJECT_ROOT, else the current directory."""
    return Path(environ.get(PROJECT_ROOT_VARIABLE) or os.getcwd()).resolve()


def resolve_path(value: str, environ: Mapping[str, str] = os.environ) -> str:
    """`value` as an absolute local path (against the project root), or unchanged when it is an s3:// or r2:// URL."""
    if value.startswith(REMOTE_SCHEMES):
        return value
    return str(project_root(environ) / Path(value).expanduser())


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
    """Where the dataset is written: a local folder, or `s3://bucket/prefix` on an S3-compatible endpoint (R2).

    Keys are best given as dg.EnvVar so their values never enter run config, logs or the UI.
    """

    root: str = Field(default=DEFAULT_LOCAL_ROOT, description=f"A local folder or s3://bucket/prefix; {RELATIVE}.")
    endpoint_url: str = ""
    region_name: str = "auto"
    access_key_id: str = ""
    secret_access_key: str = ""

    def store(self) -> ObjectStore:
        if not self.root.startswith(REMOTE_SCHEMES):
            return LocalFolderStore(resolve_path(self.root))
        from shard_loader.storage.s3_client import make_s3_client

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


def _required(environ: Mapping[str, str], name: str, why: str) -> str:
    value = environ.get(name, "")
    if not value:
        raise SettingsError(f"{name} is not set; {why}")
    return value


def _endpoint(environ: Mapping[str, str]) -> str:
    """S3_ENDPOINT_URL (with its scheme) if set, else R2's endpoint for R2_DATASET_ACCOUNT_ID (32 hex digits)."""
    if url := environ.get(ENDPOINT_VARIABLE, ""):
        if not url.startswith(("http://", "https://")):
            raise SettingsError(
                f"{ENDPOINT_VARIABLE}={url!r} has no scheme; write it as https://host[:port] (or http:// for a local "
                "server)"
            )
        return url
    account = _required(
        environ,
        ACCOUNT_VARIABLE,
        f"DATASET_STORE=r2 needs the Cloudflare account id (32 hex digits), or {ENDPOINT_VARIABLE} for another "
        "S3-compatible server",
    )
    if not _ACCOUNT.match(account):
        raise SettingsError(
            f"{ACCOUNT_VARIABLE} is not a Cloudflare account id (32 hex digits, from the R2 dashboard's URL); got "
            f"{len(account)} characters"
        )
    return r2_endpoint(account)


def settings_from_env(
    spec: str | None = None, store: str | None = None, environ: Mapping[str, str] = os.environ
) -> Settings:
    """The settings from arguments (the CLI's --spec and --store) over the environment, paths resolved.

    DATASET_STORE picks the store: `local` (default; the folder DATASET_STORE_ROOT, default data/store),
    `s3` (DATASET_STORE_ROOT=s3://bucket/prefix, S3_ENDPOINT_URL, AWS_* keys) or `r2` (R2_DATASET_ACCOUNT_ID or
    S3_ENDPOINT_URL, R2_DATASET_BUCKET_NAME, DATASET_BINS_PATH, the R2_DATASET_WRITE_* keys). A --store URL
    (s3:// or r2://) means `s3` unless DATASET_STORE says `r2`. Any other value is refused, naming the variable.
    """
    kind = environ.get(STORE_VARIABLE) or "local"
    if kind not in STORE_KINDS:
        raise SettingsError(
            f"{STORE_VARIABLE}={kind!r} is not one of {', '.join(STORE_KINDS)}; unset it for the local folder "
            f"{DEFAULT_LOCAL_ROOT}"
        )
    spec_path = resolve_path(spec or environ.get(SPEC_VARIABLE) or DEFAULT_SPEC, environ)
    root = store or environ.get(STORE_ROOT_VARIABLE) or ""
    if store and not store.startswith(REMOTE_SCHEMES):
        kind = "local"  # --store names a folder
    elif root.startswith(REMOTE_SCHEMES) and kind == "local":
        kind = "s3"
    if kind == "local":
        return Settings(spec_path, resolve_path(root or DEFAULT_LOCAL_ROOT, environ))
    if kind == "s3":
        if not root.startswith(REMOTE_SCHEMES):
            raise SettingsError(
                f"{STORE_VARIABLE}=s3 needs {STORE_ROOT_VARIABLE} (or --store) as s3://bucket/prefix, got {root!r}"
            )
        endpoint = _endpoint(environ) if environ.get(ENDPOINT_VARIABLE) else ""
        return Settings(
            spec_path,
            root,
            endpoint,
            access_key_id=dg.EnvVar("AWS_ACCESS_KEY_ID"),
            secret_access_key=dg.EnvVar("AWS_SECRET_ACCESS_KEY"),
        )
    if not store:
        bucket = _required(
            environ, "R2_DATASET_BUCKET_NAME", f"{STORE_VARIABLE}=r2 needs the bucket the dataset is written to"
        )
        root = f"s3://{bucket}/{environ.get('DATASET_BINS_PATH', '').strip('/')}".rstrip("/")
    key_id, secret = key_variables("write")
    return Settings(
        spec_path, root, _endpoint(environ), access_key_id=dg.EnvVar(key_id), secret_access_key=dg.EnvVar(secret)
    )


def store_resource_from_env() -> StoreResource:
    """The store the environment names (see `settings_from_env`)."""
    store = settings_from_env().resources()["store"]
    assert isinstance(store, StoreResource)
    return store


def default_resources() -> dict[str, dg.ConfigurableResource[Any]]:
    """Resources from the environment: SHARD_DATASET_SPEC and the store variables above, paths resolved."""
    return settings_from_env().resources()
