"""The S3-compatible store (Cloudflare R2 in production) through a boto3 client from dagster-aws.

Uploads above the multipart threshold go up in parts; an S3 object appears only when
complete, so a reader never sees part of one. Conditional puts (If-None-Match) make
versioned manifests write-once.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import BinaryIO

from shard_loader.format import check_key
from shard_loader.redaction import redact

from ..errors import ObjectStoreError

MULTIPART_THRESHOLD = 64 << 20
MULTIPART_CHUNK = 64 << 20


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

    def _fail(self, action: str, key: str, exc: Exception) -> ObjectStoreError:
        return ObjectStoreError(redact(f"{self.describe()}: {action} {key} failed: {exc}"))

    def _call(self, action: str, key: str, fn):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn()
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(action, key, exc) from None

    def put_file(self, key: str, path: Path) -> None:
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=MULTIPART_CHUNK, max_concurrency=8)
        self._call("upload", key, lambda: self.client.upload_file(str(path), self.bucket, self._key(key), Config=config))

    def put_bytes(self, key: str, data: bytes, if_absent: bool = False) -> bool:
        from botocore.exceptions import ClientError

        extra = {"IfNoneMatch": "*"} if if_absent else {}
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, **extra)
            return True
        except ClientError as exc:
            if if_absent and exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                return False
            raise self._fail("put", key, exc) from None

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
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise self._fail("head", key, exc) from None

    def size(self, key: str) -> int:
        return self._call("head", key, lambda: self.client.head_object(Bucket=self.bucket, Key=self._key(key))["ContentLength"])
