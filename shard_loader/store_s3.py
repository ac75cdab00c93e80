"""A dataset root in an S3-compatible bucket (Cloudflare R2, AWS S3, a loopback test server), via boto3.

Endpoint and keys come from options or the environment: S3_ENDPOINT_URL, else
R2_DATASET_ACCOUNT_ID (https://<id>.r2.cloudflarestorage.com); R2_DATASET_READ_ACCESS_KEY_ID
and R2_DATASET_READ_SECRET_ACCESS_KEY, else boto3's own credential chain.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

from .errors import StoreError, TransientStoreError
from .format import check_key
from .redaction import redact, redact_client_logs

TRANSIENT_CODES = {"500", "502", "503", "504", "429", "SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "Throttling"}


def r2_endpoint(account_id: str) -> str:
    return f"https://{account_id}.r2.cloudflarestorage.com"


def make_client(endpoint_url: str | None = None, access_key_id: str | None = None, secret_access_key: str | None = None,
                region: str = "auto", max_connections: int = 16, timeout: float = 30.0):
    """A boto3 S3 client that R2 accepts: checksums only when required, our own retries, bounded timeouts."""
    import boto3
    from botocore.config import Config

    redact_client_logs()
    endpoint = endpoint_url or os.environ.get("S3_ENDPOINT_URL")
    if not endpoint and os.environ.get("R2_DATASET_ACCOUNT_ID"):
        endpoint = r2_endpoint(os.environ["R2_DATASET_ACCOUNT_ID"])
    config = Config(
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        retries={"max_attempts": 1, "mode": "standard"},
        max_pool_connections=max_connections,
        connect_timeout=timeout,
        read_timeout=timeout,
        s3={"addressing_style": "path"},
    )
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=access_key_id or os.environ.get("R2_DATASET_READ_ACCESS_KEY_ID") or None,
        aws_secret_access_key=secret_access_key or os.environ.get("R2_DATASET_READ_SECRET_ACCESS_KEY") or None,
        config=config,
    )


def classify(exc: Exception, where: str) -> StoreError:
    """A botocore error as our retryable or permanent error, with credentials masked."""
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        message = redact(f"{where}: {code or status} {exc.response.get('Error', {}).get('Message', '')}".strip())
        return TransientStoreError(message) if code in TRANSIENT_CODES or status in TRANSIENT_CODES else StoreError(message)
    if isinstance(exc, BotoCoreError):
        return TransientStoreError(redact(f"{where}: {type(exc).__name__}: {exc}"))
    return TransientStoreError(redact(f"{where}: {type(exc).__name__}: {exc}"))


class S3Store:
    def __init__(self, root_url: str, client=None, **client_options):
        parsed = urlparse(root_url)
        self.bucket, self.prefix = parsed.netloc, parsed.path.strip("/")
        self.url = f"{parsed.scheme}://{self.bucket}/{self.prefix}".rstrip("/")
        self.client = client or make_client(**client_options)

    def _key(self, key: str) -> str:
        key = check_key(key, f"key under {self.url}")
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, key: str, fn):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn()
        except (ClientError, BotoCoreError, OSError) as exc:
            raise classify(exc, f"{self.url}/{key}") from None

    def read_bytes(self, key: str) -> bytes:
        def get():
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            body = response["Body"].read()
            if len(body) != response["ContentLength"]:
                raise TransientStoreError(f"{self.url}/{key}: short read, {len(body)} of {response['ContentLength']} bytes")
            return body

        return self._call(key, get)

    def size(self, key: str) -> int:
        return self._call(key, lambda: self.client.head_object(Bucket=self.bucket, Key=self._key(key))["ContentLength"])

    def read_range(self, key: str, start: int, end: int) -> bytes:
        def get():
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key), Range=f"bytes={start}-{end - 1}")
            body = response["Body"].read()
            if len(body) != end - start:
                raise TransientStoreError(f"{self.url}/{key}: short read, {len(body)} of {end - start} bytes at {start}")
            return body

        return self._call(key, get)

    def local_path(self, key: str) -> Path | None:
        return None
