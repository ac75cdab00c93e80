"""A dataset root in an S3-compatible bucket (Cloudflare R2, AWS S3, a loopback test server), via boto3.

The client comes from `s3_client.make_s3_client` (endpoint from S3_ENDPOINT_URL or
R2_DATASET_ACCOUNT_ID, the R2_DATASET_READ_* keys, R2's checksum settings); every botocore
error becomes a StoreError with credentials masked and the key named.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

from ..errors import NotFoundError, StoreError, TransientStoreError
from ..format import check_key
from .s3_client import Role, describe_s3_error, make_s3_client, s3_errors
from .retry import RequestStats, RetryPolicy, retried
from .transfer import MAX_OBJECT_BYTES, check_range_answer, check_size, collect, iter_body

T = TypeVar("T")


def classify(exc: BaseException, where: str, role: Role = "read") -> StoreError:
    """A boto3/botocore/network error as our missing (NotFoundError), retryable (TransientStoreError) or permanent
    StoreError, masked, saying what to do with the role's keys."""
    failure = describe_s3_error(exc, where, role)
    kind = NotFoundError if failure.missing else TransientStoreError if failure.transient else StoreError
    return kind(failure.message)


class S3Store:
    """Read access to the keys under `s3://bucket/prefix` (or `r2://`, which never falls back to AWS's endpoint)."""

    role: Role = "read"  # whose keys an error's hint names

    def __init__(self, root_url: str, client: Any = None, **client_options: Any):
        parsed = urlparse(root_url)
        self.bucket, self.prefix = parsed.netloc, parsed.path.strip("/")
        self.url = f"{parsed.scheme}://{self.bucket}/{self.prefix}".rstrip("/")
        self.client = client or make_s3_client(**{"r2": parsed.scheme == "r2", **client_options})
        self.retry, self.stats = RetryPolicy(), RequestStats()

    def _key(self, key: str) -> str:
        key = check_key(key, f"key under {self.url}")
        return f"{self.prefix}/{key}" if self.prefix else key

    def _where(self, action: str, key: str) -> str:
        return f"{self.url}/{key}"

    def _call(self, key: str, fn: Callable[[], T], action: str = "get") -> T:
        try:
            return fn()
        except s3_errors() as exc:  # never a raw botocore traceback: masked, with the key named
            raise classify(exc, self._where(action, key), self.role) from None

    def _get(self, key: str, **extra: str) -> dict[str, Any]:
        response: dict[str, Any] = self._call(
            key, lambda: self.client.get_object(Bucket=self.bucket, Key=self._key(key), **extra)
        )
        return response

    @retried("get")
    def read_bytes(self, key: str, limit: int = MAX_OBJECT_BYTES) -> bytes:
        response = self._get(key)
        where = self._where("get", key)
        with response["Body"] as raw:  # botocore's body yields its urllib3 response, whose read1 is one socket read
            check_size(where, response["ContentLength"], limit)
            return collect(iter_body(raw.read1, response["ContentLength"], where, s3_errors()), where)

    @retried("head")
    def size(self, key: str) -> int:
        head = self._call(key, lambda: self.client.head_object(Bucket=self.bucket, Key=self._key(key)), "head")
        return int(head["ContentLength"])

    def stream(self, key: str, start: int, end: int) -> Iterator[bytes]:
        response = self._get(key, Range=f"bytes={start}-{end - 1}")
        where = self._where("get", key)
        with response["Body"] as raw:
            check_range_answer(
                where, response["ResponseMetadata"]["HTTPStatusCode"], response["ContentLength"], start, end
            )
            yield from iter_body(raw.read1, end - start, where, s3_errors())

    def local_path(self, key: str) -> Path | None:
        return None

    @retried("put")
    def write_bytes(self, key: str, data: bytes) -> None:
        """Replace the object at `key` with `data` (an S3 object appears whole or not at all)."""
        self._call(key, lambda: self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data), "put")

    @retried("delete")
    def remove(self, key: str) -> None:
        """Remove the object at `key`; a missing one is not an error (S3's DELETE says so)."""
        self._call(key, lambda: self.client.delete_object(Bucket=self.bucket, Key=self._key(key)), "delete")
