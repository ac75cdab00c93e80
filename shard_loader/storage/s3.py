"""A dataset root in an S3-compatible bucket (Cloudflare R2, AWS S3, a loopback test server), via boto3.

The client comes from `s3_client.make_s3_client` (endpoint from S3_ENDPOINT_URL or
R2_DATASET_ACCOUNT_ID, the R2_DATASET_READ_* keys, R2's checksum settings); every botocore
error becomes a StoreError with credentials masked and the key named.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

from ..errors import StoreError, TransientStoreError
from ..format import check_key
from .s3_client import describe_s3_error, make_s3_client, s3_errors
from .transfer import MAX_OBJECT_BYTES, check_range_answer, check_size, collect, iter_body


def classify(exc: BaseException, where: str) -> StoreError:
    """A boto3/botocore/network error as our retryable or permanent StoreError, masked, saying what to do."""
    failure = describe_s3_error(exc, where)
    return (TransientStoreError if failure.transient else StoreError)(failure.message)


class S3Store:
    def __init__(self, root_url: str, client=None, **client_options):
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
        except s3_errors() as exc:  # never a raw botocore traceback: masked, with the key named
            raise classify(exc, f"{self.url}/{key}") from None

    def _get(self, key: str, **extra) -> dict:
        return self._call(key, lambda: self.client.get_object(Bucket=self.bucket, Key=self._key(key), **extra))

    def read_bytes(self, key: str, limit: int = MAX_OBJECT_BYTES) -> bytes:
        response = self._get(key)
        where = f"{self.url}/{key}"
        with response["Body"] as raw:  # botocore's body yields its urllib3 response, whose read1 is one socket read
            check_size(where, response["ContentLength"], limit)
            return collect(iter_body(raw.read1, response["ContentLength"], where, s3_errors()), where)

    def size(self, key: str) -> int:
        return self._call(key, lambda: self.client.head_object(Bucket=self.bucket, Key=self._key(key))["ContentLength"])

    def stream(self, key: str, start: int, end: int) -> Iterator[bytes]:
        response = self._get(key, Range=f"bytes={start}-{end - 1}")
        where = f"{self.url}/{key}"
        with response["Body"] as raw:
            check_range_answer(where, response["ResponseMetadata"]["HTTPStatusCode"], response["ContentLength"], start, end)
            yield from iter_body(raw.read1, end - start, where, s3_errors())

    def local_path(self, key: str) -> Path | None:
        return None
