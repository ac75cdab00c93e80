"""Which spec and which store, from arguments over the environment: the one place these settings are read and
checked, without Dagster, so the CLI refuses a bad setting in one line before it imports Dagster.

Relative local paths (a spec, a store folder) are resolved against the project root: SHARD_PROJECT_ROOT, which
`shard-assets dev` sets to its --project folder before Dagster changes directory, else the current directory."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import SettingsError

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


def local_folder(value: str, name: str, environ: Mapping[str, str] = os.environ) -> str:
    """`value` resolved against the project root, refused in one line naming `name` when it exists but is no
    folder (a file named by mistake would fail later deep inside a run)."""
    path = resolve_path(value, environ)
    if os.path.exists(path) and not os.path.isdir(path):
        raise SettingsError(f"{name}={value!r}: {path} is a file, not a folder; name a folder (made if missing)")
    return path


@dataclass(frozen=True)
class StoreChoice:
    """The settings as checked values: the spec, the store root and, for a bucket, its endpoint and the names of the
    environment variables holding its keys (never their values)."""

    spec_path: str
    store_root: str
    endpoint_url: str = ""
    key_variables: tuple[str, str] | None = None


def _required(environ: Mapping[str, str], name: str, why: str) -> str:
    value = environ.get(name, "")
    if not value:
        raise SettingsError(f"{name} is not set; {why}")
    return value


def _endpoint(environ: Mapping[str, str]) -> str:
    """S3_ENDPOINT_URL (with its scheme) if set, else R2's endpoint for R2_DATASET_ACCOUNT_ID (32 hex digits)."""
    from shard_loader.builder_api import ACCOUNT_VARIABLE, ENDPOINT_VARIABLE, r2_endpoint  # numpy: not at once

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


def store_choice(
    spec: str | None = None, store: str | None = None, environ: Mapping[str, str] = os.environ
) -> StoreChoice:
    """The settings from arguments (the CLI's --spec and --store) over the environment, paths resolved.

    DATASET_STORE picks the store: `local` (default; the folder DATASET_STORE_ROOT, default data/store),
    `s3` (DATASET_STORE_ROOT=s3://bucket/prefix, S3_ENDPOINT_URL, AWS_* keys) or `r2` (R2_DATASET_ACCOUNT_ID or
    S3_ENDPOINT_URL, R2_DATASET_BUCKET_NAME, DATASET_BINS_PATH, the R2_DATASET_WRITE_* keys). A --store URL
    (s3:// or r2://) means `s3` unless DATASET_STORE says `r2`. Any other value is refused, naming the variable."""
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
        name = "--store" if store else STORE_ROOT_VARIABLE
        return StoreChoice(spec_path, local_folder(root or DEFAULT_LOCAL_ROOT, name, environ))
    if kind == "s3":
        if not root.startswith(REMOTE_SCHEMES):
            raise SettingsError(
                f"{STORE_VARIABLE}=s3 needs {STORE_ROOT_VARIABLE} (or --store) as s3://bucket/prefix, got {root!r}"
            )
        endpoint = _endpoint(environ) if environ.get("S3_ENDPOINT_URL") else ""
        return StoreChoice(spec_path, root, endpoint, ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
    if not store:
        bucket = _required(
            environ, "R2_DATASET_BUCKET_NAME", f"{STORE_VARIABLE}=r2 needs the bucket the dataset is written to"
        )
        root = f"s3://{bucket}/{environ.get('DATASET_BINS_PATH', '').strip('/')}".rstrip("/")
    from shard_loader.builder_api import key_variables

    return StoreChoice(spec_path, root, _endpoint(environ), key_variables("write"))


MIXTURE_SPECS_VARIABLE = "SHARD_MIXTURE_SPECS"


def mixture_specs_folder(environ: Mapping[str, str] = os.environ) -> str:
    """SHARD_MIXTURE_SPECS as an absolute folder (against the project root, as every relative path), '' when unset;
    a file or a missing folder is refused in one line rather than read as a folder of no mixtures."""
    value = environ.get(MIXTURE_SPECS_VARIABLE, "")
    if not value:
        return ""
    path = local_folder(value, MIXTURE_SPECS_VARIABLE, environ)
    if not os.path.isdir(path):
        raise SettingsError(
            f"{MIXTURE_SPECS_VARIABLE}={value!r}: the folder {path} does not exist; name the folder of mixture specs "
            "(relative to the project folder) or unset it"
        )
    return path
