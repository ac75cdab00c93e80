"""Bounded reads of object bodies, shared by every store: chunked reads with a deadline between chunks,
answers to Range requests checked, and sizes capped before a byte is read."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..errors import IntegrityError, RangeNotSupportedError, TooLargeError, TransientStoreError
from .retry import Deadline

CHUNK = 1 << 20  # the most one socket read returns; the deadline is checked between reads
MAX_OBJECT_BYTES = 512 << 20  # read_bytes is for manifests and small records: anything larger is refused unread
READ_BYTES_SECONDS = 300.0  # the deadline of one read_bytes


def iter_body(
    read1: Callable[[int], bytes],
    length: int | None,
    where: str,
    errors: tuple[type[BaseException], ...],
    limit: int | None = None,
) -> Iterator[bytes]:
    """Exactly `length` bytes from `read1` (one socket read per call) as chunks, or with `length` None all bytes up to
    end of stream, refused past `limit`; a body that ends short is a TransientStoreError."""
    received = 0
    while length is None or received < length:
        try:
            chunk = read1(CHUNK if length is None else min(CHUNK, length - received))
        except errors as exc:
            raise TransientStoreError(
                f"{where}: {type(exc).__name__} after {received:,} of {length or 'unsized'} bytes: {exc}"
            ) from None
        if not chunk and length is None:
            return
        if not chunk:
            raise TransientStoreError(f"{where}: connection closed after {received:,} of {length:,} bytes")
        received += len(chunk)
        if limit is not None:
            check_size(where, received, limit)
        yield chunk


def collect(chunks: Iterator[bytes], where: str) -> bytes:
    """A small object's chunks joined, failing with DeadlineError when they take over READ_BYTES_SECONDS (a trickle)."""
    deadline = Deadline.after(READ_BYTES_SECONDS, where, "check the server or network")
    parts = []
    for chunk in chunks:
        parts.append(chunk)
        deadline.check()
    return b"".join(parts)


def check_range_answer(where: str, status: int, length: int | None, start: int, end: int) -> None:
    """Refuse an answer to `Range: bytes=start-(end-1)` that is not those bytes: a 200 with more means no Range support,
    a 206 with fewer means the object is shorter than the manifest says (permanent, not retried)."""
    if status == 200 and (start > 0 or (length is not None and length != end - start)):
        raise RangeNotSupportedError(
            f"{where}: the server ignored Range (HTTP 200 with the whole {length or 'unsized'}-byte body for bytes "
            f"{start}-{end - 1}); it must be read in one streamed GET"
        )
    if status == 206 and length is not None and length < end - start:
        raise IntegrityError(
            f"{where}: the object ends at byte {start + length:,}, before {end:,}: it is shorter than the manifest says"
        )
    if length is not None and length != end - start:
        raise TransientStoreError(
            f"{where}: asked for {end - start:,} bytes at {start:,}, the server announced {length:,}"
        )


def check_size(where: str, size: int | None, limit: int) -> None:
    """Refuse an object announced as larger than `limit` before a byte of it is read."""
    if size is not None and size > limit:
        raise TooLargeError(f"{where}: {size:,} bytes is over the {limit:,}-byte cap for this read; refusing it unread")
