"""A dataset root in an S3-compatible bucket (Cloudflare R2, AWS S3, a loopback test server), via boto3.

The client comes from `s3_client.make_s3_client` (endpoint from S3_ENDPOINT_URL or
R2_DATASET_ACCOUNT_ID, the R2_DATASET_READ_* keys, R2's checksum settings); every botocore
error becomes a StoreError with credentials masked and the key named.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

from .errors import StoreError, TransientStoreError
from .format import check_key
from .redaction import redact
from .store import MAX_OBJECT_BYTES, check_range_answer, check_size, collect, iter_body

TRANSIENT_CODES = {"500", "502", "503", "504", "429", "SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "Throttling"}
HINTS = {
    "AccessDenied": "the keys lack permission for this bucket or prefix; check R2_DATASET_READ_ACCESS_KEY_ID/_SECRET_ACCESS_KEY",
    "InvalidAccessKeyId": "the access key id is unknown to this endpoint; check R2_DATASET_READ_ACCESS_KEY_ID and S3_ENDPOINT_URL/R2_DATASET_ACCOUNT_ID",
    "SignatureDoesNotMatch": "the secret does not match the access key id; check R2_DATASET_READ_SECRET_ACCESS_KEY",
    "NoSuchBucket": "no such bucket at this endpoint; check the URL and S3_ENDPOINT_URL/R2_DATASET_ACCOUNT_ID",
    "NoSuchKey": "no object at this key; check the URL and that the dataset is published there",
    "404": "no object at this key; check the URL and that the dataset is published there",
}


def _stream_errors() -> tuple[type[BaseException], ...]:
    """What a request or reading its body can raise: botocore's, urllib3's and the socket's errors."""
    from botocore.exceptions import BotoCoreError, ClientError
    from urllib3.exceptions import HTTPError

    return (ClientError, BotoCoreError, HTTPError, OSError)


def classify(exc: Exception, where: str) -> StoreError:
    """A botocore error as our retryable or permanent error, credentials masked, with what to do where known."""
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        hint = HINTS.get(code) or HINTS.get(status)
        message = f"{where}: {code or status} {exc.response.get('Error', {}).get('Message', '')}".strip()
        message = redact(f"{message}; {hint}" if hint else message)
        return TransientStoreError(message) if code in TRANSIENT_CODES or status in TRANSIENT_CODES else StoreError(message)
    return TransientStoreError(redact(f"{where}: {type(exc).__name__}: {exc}"))


class S3Store:
    def __init__(self, root_url: str, client=None, **client_options):
        from .s3_client import make_s3_client

        parsed = urlparse(root_url)
        self.bucket, self.prefix = parsed.netloc, parsed.path.strip("/")
        self.url = f"{parsed.scheme}://{self.bucket}/{self.prefix}".rstrip("/")
        self.client = client or make_s3_client(**client_options)

    def _key(self, key: str) -> str:
        key = check_key(key, f"key under {self.url}")
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, key: str, fn):
        try:
            return fn()
        except _stream_errors() as exc:  # never a raw botocore traceback: masked, with the key named
            raise classify(exc, f"{self.url}/{key}") from None

    def _get(self, key: str, **extra) -> dict:
        return self._call(key, lambda: self.client.get_object(Bucket=self.bucket, Key=self._key(key), **extra))

    def read_bytes(self, key: str, limit: int = MAX_OBJECT_BYTES) -> bytes:
        response = self._get(key)
        where = f"{self.url}/{key}"
        with response["Body"] as raw:  # botocore's body yields its urllib3 response, whose read1 is one socket read
            check_size(where, response["ContentLength"], limit)
            return collect(iter_body(raw.read1, response["ContentLength"], where, _stream_errors()), where)

    def size(self, key: str) -> int:
        return self._call(key, lambda: self.client.head_object(Bucket=self.bucket, Key=self._key(key))["ContentLength"])

    def stream(self, key: str, start: int, end: int) -> Iterator[bytes]:
        response = self._get(key, Range=f"bytes={start}-{end - 1}")
        where = f"{self.url}/{key}"
        with response["Body"] as raw:
            check_range_answer(where, response["ResponseMetadata"]["HTTPStatusCode"], response["ContentLength"], start, end)
            yield from iter_body(raw.read1, end - start, where, _stream_errors())

    def local_path(self, key: str) -> Path | None:
        return None
