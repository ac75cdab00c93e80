"""The one factory for S3/R2 clients, shared by the loader's store and the builder's store.

It derives the R2 endpoint from the account id, passes R2's checksum settings as a botocore
`Config` (never through `os.environ`), takes keys from arguments or the R2_DATASET_* variables,
registers them for redaction, and names the missing variable instead of botocore's bare
NoCredentialsError. boto3 is imported only when a client is made.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlparse

from ..errors import CredentialsError, MissingExtraError, SettingsError
from .redaction import redact, redact_client_logs, register_secret

Role = Literal["read", "write"]
ENDPOINT_VARIABLE = "S3_ENDPOINT_URL"
ACCOUNT_VARIABLE = "R2_DATASET_ACCOUNT_ID"
TRANSIENT_CODES = {
    "500",
    "502",
    "503",
    "504",
    "429",
    "SlowDown",
    "InternalError",
    "ServiceUnavailable",
    "RequestTimeout",
    "Throttling",
}
WHERE = f"{ENDPOINT_VARIABLE}/{ACCOUNT_VARIABLE}"
HINTS = {  # S3 error code -> what to do; {id} and {secret} are the role's key variables
    "AccessDenied": "the keys lack permission for this bucket, prefix or action; check {id}/{secret} (read-only keys "
    "cannot write)",
    "InvalidAccessKeyId": "the access key id is unknown to this endpoint; check {id} and " + WHERE,
    "SignatureDoesNotMatch": "the secret does not match the access key id; check {secret}",
    "NoSuchBucket": "no such bucket at this endpoint; check the URL and " + WHERE,
    "NoSuchKey": "no object at this key; check the URL and that the dataset is published there",
    "404": "no object at this key; check the URL and that the dataset is published there",
    "NotImplemented": "the endpoint does not support this request (R2 refuses checksum headers); make the client with "
    "shard_loader.s3_client.make_s3_client",
    "403": "the endpoint refuses these keys or this action; check {id}/{secret} (a wrong secret, or keys without "
    "access to this bucket; read-only keys cannot write) and " + WHERE,
}
MISSING_CODES = {"NoSuchKey", "NotFound", "404"}  # no object at the key (NoSuchBucket, also a 404, is a setting to fix)
ACCOUNT_ID = re.compile(r"[0-9a-fA-F]{32}")  # a Cloudflare account id: 32 hexadecimal characters


def r2_endpoint(account_id: str | None) -> str:
    """Cloudflare R2's S3 endpoint for an account; a missing or malformed id is a SettingsError naming the variable."""
    if not account_id:
        raise SettingsError(
            f"{ACCOUNT_VARIABLE} is not set: R2 needs your Cloudflare account id (32 hexadecimal characters, shown on "
            f"the dashboard's R2 page) to find its endpoint, or set {ENDPOINT_VARIABLE} to the endpoint URL"
        )
    if not ACCOUNT_ID.fullmatch(account_id):
        raise SettingsError(
            f"{ACCOUNT_VARIABLE}={account_id!r} is not a Cloudflare account id: expected 32 hexadecimal characters "
            f"(the dashboard's Account ID), not a URL or a name"
        )
    return f"https://{account_id.lower()}.r2.cloudflarestorage.com"


def check_endpoint(url: str) -> str:
    """`url` if it is an http(s) endpoint with a host; else a SettingsError naming S3_ENDPOINT_URL and the allowed
    forms."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise SettingsError(
            f"{ENDPOINT_VARIABLE}={url!r} is not an endpoint URL: write it with its scheme, http://host:port or https://host"
        )
    return url


def key_variables(role: Role) -> tuple[str, str]:
    """The environment variables holding the access key id and secret for a role."""
    upper = role.upper()
    return f"R2_DATASET_{upper}_ACCESS_KEY_ID", f"R2_DATASET_{upper}_SECRET_ACCESS_KEY"


@dataclass(frozen=True)
class S3Settings:
    """Where an S3-compatible store is and which keys open it; `None` keys mean boto3's own chain."""

    endpoint_url: str | None
    access_key_id: str | None
    secret_access_key: str | None
    region: str = "auto"


def resolve_settings(
    endpoint_url: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    account_id: str | None = None,
    role: Role = "read",
    region: str = "auto",
    r2: bool = False,
) -> S3Settings:
    """Settings from arguments first, then S3_ENDPOINT_URL / R2_DATASET_ACCOUNT_ID and the role's R2_DATASET_* keys.

    Each value is checked where it is used: an endpoint needs its scheme, an account id its 32 hexadecimal
    characters. `r2` (an `r2://` URL) requires an endpoint: never AWS's default one.
    """
    account = account_id or os.environ.get(ACCOUNT_VARIABLE)
    endpoint = endpoint_url or os.environ.get(ENDPOINT_VARIABLE)
    if endpoint:
        check_endpoint(endpoint)
    elif account or r2:
        endpoint = r2_endpoint(account)
    id_var, secret_var = key_variables(role)
    key_id = access_key_id or os.environ.get(id_var) or None
    secret = secret_access_key or os.environ.get(secret_var) or None
    if bool(key_id) != bool(secret):
        missing = secret_var if key_id else id_var
        raise CredentialsError(
            f"{role} keys are incomplete: set {missing} (or pass the matching store option) for {endpoint or 'S3'}"
        )
    return S3Settings(endpoint_url=endpoint, access_key_id=key_id, secret_access_key=secret, region=region)


def _check_default_chain(settings: S3Settings, role: Role) -> None:
    """Without explicit keys, boto3's chain (AWS_* variables, ~/.aws, instance roles) must find some; else say what to
    set."""
    import boto3

    if boto3.Session().get_credentials() is None:
        id_var, secret_var = key_variables(role)
        raise CredentialsError(
            f"no {role} keys for {settings.endpoint_url or 'S3'}: set {id_var} and {secret_var} "
            f"(or pass access_key_id/secret_access_key in store_options, or configure AWS credentials)"
        )


def make_s3_client(
    endpoint_url: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    *,
    account_id: str | None = None,
    role: Role = "read",
    region: str = "auto",
    r2: bool = False,
    max_connections: int = 16,
    timeout: float = 30.0,
    retries: int = 1,
    **config_options: Any,
) -> Any:
    """A boto3 S3 client that R2 accepts: checksums only when required, path addressing, bounded timeouts.

    `r2` (an `r2://` URL) requires an endpoint; `timeout` is the connect and per-read stall timeout; `retries` is
    botocore's attempt count (the loader retries itself, so 1 there); `config_options` go to botocore's Config
    unchanged.
    """
    try:
        import boto3
        from botocore.config import Config
    except ModuleNotFoundError as exc:
        raise MissingExtraError(exc.name or "boto3", "s3", "an s3:// or r2:// store") from None

    redact_client_logs()
    settings = resolve_settings(endpoint_url, access_key_id, secret_access_key, account_id, role, region, r2)
    register_secret(settings.access_key_id, settings.secret_access_key)
    if settings.access_key_id is None:
        _check_default_chain(settings, role)
    config = Config(
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        retries={"max_attempts": retries, "mode": "standard"},
        max_pool_connections=max_connections,
        connect_timeout=timeout,
        read_timeout=timeout,
        s3={"addressing_style": "path"},
        **config_options,
    )
    return boto3.client(
        "s3",
        endpoint_url=settings.endpoint_url,
        region_name=settings.region,
        aws_access_key_id=settings.access_key_id,
        aws_secret_access_key=settings.secret_access_key,
        config=config,
    )


def fsspec_options(settings: S3Settings) -> dict[str, Any]:
    """`storage_options` for s3fs/fsspec with the same endpoint, keys and R2 checksum settings as `make_s3_client`,
    so `s3://` raw sources are listed and read exactly as the store is."""
    register_secret(settings.access_key_id, settings.secret_access_key)
    return {
        "key": settings.access_key_id,
        "secret": settings.secret_access_key,
        "endpoint_url": settings.endpoint_url,
        "client_kwargs": {"region_name": settings.region},
        "config_kwargs": {
            "request_checksum_calculation": "when_required",
            "response_checksum_validation": "when_required",
            "s3": {"addressing_style": "path"},
        },
    }


def s3_errors() -> tuple[type[BaseException], ...]:
    """What a boto3 call, a transfer or reading a body can raise: botocore's, boto3's, urllib3's and the socket's
    errors."""
    from boto3.exceptions import Boto3Error
    from botocore.exceptions import BotoCoreError, ClientError
    from urllib3.exceptions import HTTPError

    return (ClientError, BotoCoreError, Boto3Error, HTTPError, OSError)


@dataclass(frozen=True)
class S3Failure:
    """An S3 error as one masked line naming where it happened and what to do; whether a retry may help, whether
    it says the object is missing, and the S3 error code and HTTP status it carried (either may be empty)."""

    message: str
    transient: bool
    missing: bool = False
    code: str = ""
    status: str = ""


def describe_s3_error(exc: BaseException, where: str, role: Role = "read") -> S3Failure:
    """One masked line for any error in `s3_errors()`, with the S3 code and a hint naming the role's variables."""
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        text, transient = (
            f"{code or status} {exc.response.get('Error', {}).get('Message', '')}".strip(),
            code in TRANSIENT_CODES or status in TRANSIENT_CODES,
        )
    else:
        # a transfer error (S3UploadFailedError) carries its code only in its text:
        # "An error occurred (AccessDenied) ..."
        found = re.search(r"An error occurred \((\w+)\)", str(exc))
        code, status, text = found.group(1) if found else "", "", f"{type(exc).__name__}: {exc}"
        transient = code in TRANSIENT_CODES or not found
    id_var, secret_var = key_variables(role)
    hint = (HINTS.get(code) or HINTS.get(status) or "").format(id=id_var, secret=secret_var)
    message = redact(f"{where}: {text}; {hint}" if hint else f"{where}: {text}")
    return S3Failure(message, transient, missing=code in MISSING_CODES, code=code, status=status)
