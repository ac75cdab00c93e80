"""The S3-compatible store (Cloudflare R2 in production), through shard_loader's one client factory.

Uploads above the multipart threshold go up in parts; an S3 object appears only when complete, so a
reader never sees part of one. Conditional puts (If-None-Match) make versioned manifests write-once;
where a server refuses them, a checked plain put stands in and never replaces a different object.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import BinaryIO

from shard_loader.format import check_key
from shard_loader.storage.s3_client import describe_s3_error, s3_errors

from ..errors import ObjectStoreError

MULTIPART_THRESHOLD = 64 << 20
MULTIPART_CHUNK = 64 << 20
PRECONDITION_FAILED = ("PreconditionFailed", "412", "ConditionalRequestConflict")
NOT_SUPPORTED = ("NotImplemented", "501")


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code") or response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


class S3ObjectStore:
    def __init__(self, client, bucket: str, prefix: str = "", endpoint: str = ""):
        self.client, self.bucket, self.prefix, self.endpoint = client, bucket, prefix.strip("/"), endpoint

    def describe(self) -> str:
        where = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        return f"{where} at {self.endpoint}" if self.endpoint else where

    def loader_url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def _key(self, key: str) -> str:
        key = check_key(key, f"store key under {self.describe()}")
        return f"{self.prefix}/{key}" if self.prefix else key

    def _fail(self, action: str, key: str, exc: BaseException) -> ObjectStoreError:
        return ObjectStoreError(describe_s3_error(exc, f"{self.describe()}: {action} {key} failed", role="write").message)

    def _call(self, action: str, key: str, fn):
        try:
            return fn()
        except s3_errors() as exc:  # botocore, boto3 transfers (S3UploadFailedError), urllib3, sockets: masked, key named
            raise self._fail(action, key, exc) from None

    def put_file(self, key: str, path: Path) -> None:
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=MULTIPART_CHUNK, max_concurrency=8)
        self._call("upload", key, lambda: self.client.upload_file(str(path), self.bucket, self._key(key), Config=config))

    def _put(self, key: str, data: bytes, **extra) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, **extra)

    def put_bytes(self, key: str, data: bytes, if_absent: bool = False) -> bool:
        if not if_absent:
            self._call("put", key, lambda: self._put(key, data))
            return True
        if self.exists(key):  # also covers servers that ignore If-None-Match, for every writer but a racing one
            return False
        try:
            self._put(key, data, IfNoneMatch="*")
            return True
        except s3_errors() as exc:
            if _code(exc) in PRECONDITION_FAILED:
                return False
            if _code(exc) not in NOT_SUPPORTED:
                raise self._fail("put", key, exc) from None
        # The server refuses conditional puts: write, read back, and refuse if another writer's object won.
        self._call("put", key, lambda: self._put(key, data))
        if self.get_bytes(key) != data:
            raise ObjectStoreError(f"{self.describe()}: {key} holds another writer's object after a put (the server refuses If-None-Match); not replacing it")
        return True

    def get_bytes(self, key: str) -> bytes:
        return self._call("get", key, lambda: self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read())

    def get_file(self, key: str, path: Path) -> None:
        self._call("download", key, lambda: self.client.download_file(self.bucket, self._key(key), str(path)))

    def open_read(self, key: str) -> BinaryIO:
        """A local temporary copy, seekable, deleted when closed."""
        f = tempfile.TemporaryFile()
        self._call("download", key, lambda: self.client.download_fileobj(self.bucket, self._key(key), f))
        f.seek(0)
        return f

    def local_path(self, key: str) -> None:
        return None

    def delete(self, key: str) -> None:
        self._call("delete", key, lambda: self.client.delete_object(Bucket=self.bucket, Key=self._key(key)))

    def modified(self, key: str) -> float:
        return self._call("head", key, lambda: self.client.head_object(Bucket=self.bucket, Key=self._key(key))["LastModified"].timestamp())

    def list(self, prefix: str) -> list[tuple[str, int]]:
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        pages = self._call("list", prefix, lambda: list(self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full)))
        strip = len(self.prefix) + 1 if self.prefix else 0
        return sorted((o["Key"][strip:], o["Size"]) for page in pages for o in page.get("Contents", []))

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except s3_errors() as exc:
            if _code(exc) in ("404", "NoSuchKey", "NotFound"):
                return False
            raise self._fail("head", key, exc) from None

    def size(self, key: str) -> int:
        return self._call("head", key, lambda: self.client.head_object(Bucket=self.bucket, Key=self._key(key))["ContentLength"])
