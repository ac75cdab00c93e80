"""The S3-compatible store (Cloudflare R2 in production): the loader's S3Store (one client factory, one error
parser) extended with writes.

Uploads above the multipart threshold go up in parts; an S3 object appears only when complete, so a reader
never sees part of one. Write-once puts are conditional (If-None-Match: *); a server that ignores the header or
refuses it (501, 400) cannot promise write-once, so the builder refuses to run there (see ObjectStore.preflight)
instead of falling back to a put that a racing writer could overwrite."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

from shard_loader.builder_api import FileRef, RequestStats, RetryPolicy, S3Store, TransientStoreError, classify
from shard_loader.builder_api import describe_s3_error, s3_errors

from ..errors import ConditionalWriteError
from .base import STORE_RETRY, ObjectInfo, ObjectStore, file_sha256

MULTIPART_THRESHOLD = 64 << 20
MULTIPART_CHUNK = 64 << 20
PRECONDITION_FAILED = ("PreconditionFailed", "412")
CONFLICT = ("ConditionalRequestConflict", "409")  # another conditional write to the key is in flight: retry
UNSUPPORTED = ("NotImplemented", "501", "400")


def multipart_etag(path: Path, threshold: int, chunk: int) -> str:
    """The ETag S3 gives the file when uploaded by `put_file`: the MD5 of its bytes, or over `threshold` bytes
    the MD5 of its `chunk`-sized parts' MD5s followed by `-<parts>`."""
    with open(path, "rb") as f:
        if path.stat().st_size < threshold:
            return hashlib.file_digest(f, lambda: hashlib.md5(usedforsecurity=False)).hexdigest()
        parts = []
        while piece := f.read(chunk):
            parts.append(hashlib.md5(piece, usedforsecurity=False).digest())
    return f"{hashlib.md5(b''.join(parts), usedforsecurity=False).hexdigest()}-{len(parts)}"


class S3ObjectStore(S3Store, ObjectStore):
    role = "write"

    def __init__(
        self, client: Any, bucket: str, prefix: str = "", endpoint: str = "", retry: RetryPolicy = STORE_RETRY
    ):
        super().__init__(f"s3://{bucket}/{prefix.strip('/')}", client=client)
        self.endpoint, self.retry, self.stats = endpoint, retry, RequestStats()

    def describe(self) -> str:
        return f"{self.url} at {self.endpoint}" if self.endpoint else self.url

    def loader_url(self) -> str:
        return self.url

    def _where(self, action: str, key: str) -> str:
        return f"{self.describe()}: {action} {key} failed"

    def _download(self, key: str, path: Path) -> None:
        self._call(key, lambda: self.client.download_file(self.bucket, self._key(key), str(path)), "download")

    def _open(self, key: str) -> BinaryIO:
        """A local temporary copy, seekable, deleted when closed."""
        f = tempfile.TemporaryFile()
        try:
            self._call(key, lambda: self.client.download_fileobj(self.bucket, self._key(key), f), "download")
        except BaseException:
            f.close()
            raise
        f.seek(0)
        return f

    def _write_file(self, key: str, path: Path) -> None:
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(
            multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=MULTIPART_CHUNK, max_concurrency=8
        )
        self._call(
            key, lambda: self.client.upload_file(str(path), self.bucket, self._key(key), Config=config), "upload"
        )

    def _create(self, key: str, data: bytes) -> bool:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*")
            return True
        except s3_errors() as exc:
            failure = describe_s3_error(exc, self._where("put", key), self.role)
            if {failure.code, failure.status} & set(PRECONDITION_FAILED):
                return False
            if {failure.code, failure.status} & set(CONFLICT):
                raise TransientStoreError(failure.message) from None
            if {failure.code, failure.status} & set(UNSUPPORTED):
                raise ConditionalWriteError(
                    f"{self.describe()}: the server answered {failure.code or failure.status} to a conditional put "
                    f"(If-None-Match: *), so it cannot promise that a version is written once; use a server that "
                    f"honours conditional writes (R2, S3, MinIO, SeaweedFS)"
                ) from None
            raise classify(exc, self._where("put", key), self.role) from None

    def _info(self, key: str) -> ObjectInfo:
        head = self._call(key, lambda: self.client.head_object(Bucket=self.bucket, Key=self._key(key)), "head")
        etag = str(head.get("ETag", "")).strip('"') or None
        return ObjectInfo(head["ContentLength"], head["LastModified"].timestamp(), etag)

    def _listing(self, prefix: str) -> list[tuple[str, int]]:
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        paginator = self.client.get_paginator("list_objects_v2")
        pages = self._call(prefix, lambda: list(paginator.paginate(Bucket=self.bucket, Prefix=full)), "list")
        strip = len(self.prefix) + 1 if self.prefix else 0
        return sorted((o["Key"][strip:], o["Size"]) for page in pages for o in page.get("Contents", []))

    def _holds(self, key: str, info: ObjectInfo, path: Path, ref: FileRef) -> bool:
        """The stored object's ETag (the server's MD5 of what it stored) against the local file's; an ETag of
        another form (another part size, encryption) costs a download and a re-hash instead."""
        if info.etag is not None and info.etag == multipart_etag(path, MULTIPART_THRESHOLD, MULTIPART_CHUNK):
            return True
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "object"
            self._download(key, copy)
            return file_sha256(copy) == ref.sha256
