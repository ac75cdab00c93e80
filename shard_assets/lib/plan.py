"""Plan a build before starting it: from a sample of each source file, estimate documents, tokens,
output bytes, local disk and time, so nobody starts a build that cannot finish."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shard_loader.builder_api import TOKEN_DTYPES

from .encoding import encode_documents
from .errors import SourceError
from .sources.listing import SourceFile, list_source_files
from .sources.readers import iter_document_batches
from .spec import DatasetSpec, SourceSpec

if TYPE_CHECKING:
    from tokenizers import Tokenizer

SAMPLE_DOCUMENTS = 200


@dataclass(frozen=True)
class FileEstimate:
    file: SourceFile
    documents: int
    tokens: int
    text_bytes: int
    exact: bool  # the sample read the whole file: nothing was extrapolated


@dataclass(frozen=True)
class SkippedFile:
    """A file the sample could not read: the build leaves its partition out (quarantined) just the same."""

    file: SourceFile
    error: str


@dataclass(frozen=True)
class Plan:
    files: list[FileEstimate]
    token_dtype: str
    tokens_per_second_per_core: float
    cores: int
    skipped: tuple[SkippedFile, ...] = ()

    @property
    def tokens(self) -> int:
        return sum(f.tokens for f in self.files)

    @property
    def documents(self) -> int:
        return sum(f.documents for f in self.files)

    def output_bytes_as(self, dtype: str) -> int:
        """Shard bytes: tokens (plus one end-of-document id each) at `dtype`'s width, and 8-byte offsets."""
        return (self.tokens + self.documents) * TOKEN_DTYPES[dtype] + 8 * (self.documents + 2 * len(self.files))

    @property
    def output_bytes(self) -> int:
        return self.output_bytes_as(self.token_dtype)

    @property
    def local_disk_bytes(self) -> int:
        """Scratch per concurrently built partition: its raw text and its shards, times the cores in use."""
        largest = max((f.text_bytes + f.tokens * TOKEN_DTYPES[self.token_dtype] for f in self.files), default=0)
        return 2 * largest * self.cores

    @property
    def seconds(self) -> float:
        return self.tokens / max(self.tokens_per_second_per_core * self.cores, 1.0)


def _documents_in(file: SourceFile, source: SourceSpec, sampled: int, sampled_bytes: int) -> int:
    """Rows from parquet metadata; otherwise the file's listed size over the sample's bytes per document."""
    if source.format == "parquet":
        import fsspec
        import pyarrow.parquet as pq

        with fsspec.open(file.uri, "rb", **source.fs_options) as f:
            total = int(pq.ParquetFile(f).metadata.num_rows)
    else:
        size = file.size
        total = sampled if size < 0 or not sampled_bytes else max(sampled, round(size * sampled / sampled_bytes))
    return min(total, source.max_documents) if source.max_documents is not None else total


def _sample(source: SourceSpec, file: SourceFile, sample_documents: int) -> tuple[list[str], bool]:
    """The first `sample_documents` documents of a file, and whether that was the whole file."""
    docs: list[str] = []
    for batch in iter_document_batches(source, file, sample_documents):
        docs += batch
        if len(docs) >= sample_documents:  # stopped early (a file of exactly this many is estimated, to be safe)
            return docs[:sample_documents], False
    return docs, True


def plan_build(
    spec: DatasetSpec, tokenizer: Tokenizer, token_dtype: str, sample_documents: int = SAMPLE_DOCUMENTS
) -> Plan:
    """Estimate the whole build from the first `sample_documents` documents of every file. A file that cannot be
    read is skipped with its error, as the build skips its partition; if none can be, the first error is raised."""
    estimates: list[FileEstimate] = []
    skipped: list[SkippedFile] = []
    sampled_tokens, sampled_seconds = 0, 0.0
    for source in spec.sources:
        for file in list_source_files(source):
            try:
                docs, exact = _sample(source, file, sample_documents)
                text_bytes = sum(len(d.encode("utf-8", "surrogatepass")) for d in docs)
                total = len(docs) if exact else _documents_in(file, source, len(docs), text_bytes)
            except SourceError as exc:
                skipped.append(SkippedFile(file, str(exc)))
                continue
            started = time.perf_counter()
            tokens = len(encode_documents(tokenizer, docs, 0, token_dtype)[0]) if docs else 0
            sampled_seconds += time.perf_counter() - started
            sampled_tokens += tokens
            scale = total / len(docs) if docs else 0
            estimates.append(FileEstimate(file, total, round(tokens * scale), round(text_bytes * scale), exact))
    if skipped and not estimates:
        raise SourceError(f"no file of the spec could be read ({len(skipped)} tried); the first: {skipped[0].error}")
    rate = sampled_tokens / sampled_seconds if sampled_seconds else 0.0
    return Plan(estimates, token_dtype, rate, os.cpu_count() or 1, tuple(skipped))


def human_bytes(n: float) -> str:
    """A byte count with a decimal unit (kB, MB, ...), for people reading plans and metadata."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000:
            return f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} PB"


def format_plan(plan: Plan) -> str:
    lines = [f"{'partition':<40} {'documents':>13} {'tokens':>17} {'text MB':>11}"]
    for f in plan.files:
        mark = " " if f.exact else "~"
        lines.append(
            f"{f.file.partition_key:<40} {mark}{f.documents:>12,} {mark}{f.tokens:>16,} "
            f"{mark}{f.text_bytes / 1e6:>10.1f}"
        )
    hours = plan.seconds / 3600
    lines += [
        "",
        f"total          {plan.documents:,} documents, {plan.tokens:,} tokens in {len(plan.files)} partitions",
        f"output         {human_bytes(plan.output_bytes)} of shards ({plan.token_dtype}; uint16 "
        f"{human_bytes(plan.output_bytes_as('uint16'))}, uint32 {human_bytes(plan.output_bytes_as('uint32'))})",
        f"local disk     {human_bytes(plan.local_disk_bytes)} scratch for {plan.cores} partitions at once",
        f"time           {plan.seconds:,.0f} s ({hours:,.2f} h) on {plan.cores} cores at "
        f"{plan.tokens_per_second_per_core / 1e6:.2f}M tokens/s per core (measured on the sample)",
        f"core-hours     {hours * plan.cores:,.3f}",
        "",
        "~ marks estimates extrapolated from a sample; unmarked rows were read whole and are exact",
    ]
    if plan.skipped:
        lines += ["", f"skipped        {len(plan.skipped)} files the build will leave out unless fixed:"]
        lines += [f"  {s.file.partition_key:<38} {s.error}" for s in plan.skipped]
    return "\n".join(lines)
