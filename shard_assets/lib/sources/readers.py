"""Read one source file's documents in batches, memory bounded, with errors that name the file."""

from __future__ import annotations

import codecs
import itertools
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

from ..errors import SourceError
from ..records import FilePiece
from ..spec import SourceSpec
from ..text import to_arrow
from .listing import SourceFile

if TYPE_CHECKING:
    import pyarrow as pa
    from pyarrow.parquet import ParquetFile

PARQUET_BUFFER = 8 << 20
TEXT_CHUNK = 4 << 20


def _batched(docs: Iterator[str], size: int) -> Iterator[list[str]]:
    while batch := list(itertools.islice(docs, size)):
        yield batch


def _open(source: SourceSpec, uri: str) -> BinaryIO:
    import fsspec

    try:
        f: BinaryIO = fsspec.open(uri, "rb", compression="infer", **source.fs_options).open()
        return f
    except (OSError, ValueError) as exc:
        raise SourceError(f"{uri}: cannot open ({type(exc).__name__}: {exc})") from None


def _parquet_file(f: BinaryIO, uri: str) -> ParquetFile:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(f, pre_buffer=False, buffer_size=PARQUET_BUFFER)
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(f"{uri}: not a readable parquet file ({exc})") from None


def parquet_row_group_bytes(source: SourceSpec, file: SourceFile) -> list[int]:
    """The compressed bytes of each row group of a parquet file, from its footer alone (no column data is read)."""
    with _open(source, file.uri) as f:
        meta = _parquet_file(f, file.uri).metadata
        return [
            sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
            for rg in (meta.row_group(i) for i in range(meta.num_row_groups))
        ]


def _parquet_batches(source: SourceSpec, uri: str, size: int, row_groups: tuple[int, int] | None) -> Iterator[pa.Array]:
    import pyarrow as pa

    col = source.text_column
    with _open(source, uri) as f:
        pf = _parquet_file(f, uri)
        names = pf.schema_arrow.names
        if col not in names:
            raise SourceError(f"{uri}: no column {col!r} (text_column of source {source.name!r}); columns are {names}")
        kind = pf.schema_arrow.field(col).type
        if kind not in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary()):
            raise SourceError(f"{uri}: column {col!r} has type {kind}, expected a string column")
        groups = range(*row_groups) if row_groups else range(pf.num_row_groups)
        if groups.stop > pf.num_row_groups:
            raise SourceError(
                f"{uri}: has {pf.num_row_groups} row groups, the partition reads {groups.start}-{groups.stop}; the "
                "file changed since it was registered, discover again"
            )
        row = sum(pf.metadata.row_group(i).num_rows for i in range(groups.start))
        try:
            for batch in pf.iter_batches(batch_size=size, columns=[col], row_groups=list(groups)):
                arr = batch.column(0)
                if arr.null_count:
                    first = row + arr.is_null().to_pylist().index(True)
                    raise SourceError(f"{uri}: column {col!r} has a null at row {first}; every document needs text")
                arr = arr.cast(pa.large_string())
                arr.validate(full=True)
                row += len(arr)
                yield arr
        except (pa.ArrowException, OSError) as exc:
            raise SourceError(f"{uri}: failed reading column {col!r} near row {row}: {exc}") from None


def _jsonl_documents(source: SourceSpec, uri: str) -> Iterator[str]:
    col = source.text_column
    with _open(source, uri) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, UnicodeDecodeError) as exc:
                raise SourceError(f"{uri}:{lineno}: not a JSON object ({exc})") from None
            text = record.get(col) if isinstance(record, dict) else None
            if not isinstance(text, str):
                raise SourceError(f"{uri}:{lineno}: field {col!r} is missing or not a string")
            yield text


def _text_documents(source: SourceSpec, uri: str) -> Iterator[str]:
    sep = source.document_separator
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    pending, offset = "", 0
    with _open(source, uri) as f:
        while True:
            chunk = f.read(TEXT_CHUNK)
            try:
                pending += decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:
                raise SourceError(f"{uri}: invalid UTF-8 at byte {offset + exc.start}") from None
            offset += len(chunk)
            if sep:
                *docs, pending = pending.split(sep)
                yield from docs
            if not chunk:
                break
    if pending:
        yield pending


def _limited_batches(
    source: SourceSpec, file: SourceFile | FilePiece, batch_documents: int
) -> Iterator[list[str] | pa.Array]:
    """Batches of raw document texts from one file (or its registered row groups), stopping after `max_documents`: a
    parquet file's as Arrow columns, the others' as Python texts."""
    batches: Iterator[list[str] | pa.Array]
    if source.format == "parquet":
        batches = _parquet_batches(
            source, file.uri, batch_documents, file.row_groups if isinstance(file, FilePiece) else None
        )
    elif source.format == "jsonl":
        batches = _batched(_jsonl_documents(source, file.uri), batch_documents)
    else:
        batches = _batched(_text_documents(source, file.uri), batch_documents)
    remaining = source.max_documents
    for batch in batches:
        if remaining is not None:
            batch = batch[:remaining]
            remaining -= len(batch)
        if len(batch):
            yield batch
        if remaining == 0:
            return


def iter_document_batches(
    source: SourceSpec, file: SourceFile | FilePiece, batch_documents: int
) -> Iterator[list[str]]:
    """Batches of raw document texts from one file (or its registered row groups), stopping after `max_documents`."""
    for batch in _limited_batches(source, file, batch_documents):
        yield batch if isinstance(batch, list) else batch.to_pylist()


def iter_document_columns(source: SourceSpec, file: SourceFile | FilePiece, batch_documents: int) -> Iterator[pa.Array]:
    """The same batches as large_string columns (lone surrogates of a JSONL text as U+FFFD): what ingest reads."""
    for batch in _limited_batches(source, file, batch_documents):
        yield to_arrow(batch) if isinstance(batch, list) else batch
