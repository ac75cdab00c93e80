"""List each source's files as partitions, with a fingerprint per file taken from metadata only (never content)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import SourceError
from ..spec import SourceSpec

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_EXTENSIONS = re.compile(r"(\.(parquet|jsonl|json|txt|text|zst|zstd|gz))+$")


@dataclass(frozen=True)
class SourceFile:
    """One raw file of a source: the unit of partitioning."""

    source: str
    part: str
    uri: str
    fingerprint: str
    size: int = -1

    @property
    def partition_key(self) -> str:
        return partition_key(self.source, self.part)


def partition_key(source: str, part: str) -> str:
    return f"{source}.{part}"


def split_partition_key(key: str) -> tuple[str, str]:
    """(source name, part) of a partition key; source names never contain a dot."""
    source, sep, part = key.partition(".")
    if not sep or not part:
        raise SourceError(f"partition key {key!r} is not of the form <source>.<part>")
    return source, part


def _part_name(path: str, base: str) -> str:
    rel = path[len(base) :].lstrip("/") if path.startswith(base) else path.rsplit("/", 1)[-1]
    return _UNSAFE.sub("_", _EXTENSIONS.sub("", rel).replace("/", "__")).strip("._") or "file"


def _glob_base(path: str, is_dir: bool) -> str:
    """The folder part names are taken relative to: the glob's fixed head, the folder, or the file's folder."""
    if is_dir:
        return path.rstrip("/")
    head = re.split(r"[*?\[]", path, maxsplit=1)[0]
    return head.rsplit("/", 1)[0]


def fingerprint_from_info(info: dict[str, Any]) -> str:
    """A fingerprint of a file's content from its listing metadata alone: S3/R2 ETag, the Hub's LFS sha256
    or blob id, else size and modification time (local files). Listing never reads a file's bytes."""
    size = info.get("size")
    lfs = info.get("lfs") or {}
    for name, value in (
        ("etag", info.get("ETag") or info.get("etag")),
        ("sha256", lfs.get("sha256") or info.get("sha256")),
        ("blob", info.get("blob_id") or info.get("oid")),
    ):
        if value:
            return f"{name}:{str(value).strip(chr(34))}:{size}"
    mtime = info.get("mtime") or info.get("LastModified") or info.get("last_modified")
    if mtime is not None:
        return f"mtime:{mtime}:{size}"
    raise SourceError(
        f"{info.get('name')}: the file system reports neither an ETag, a sha256 nor a modification time; cannot "
        "fingerprint it without reading it"
    )


def _listing(fs: AbstractFileSystem, path: str) -> tuple[dict[str, dict[str, Any]], bool]:
    """Every file under a glob, a folder or a single path with its metadata, from one listing (no per-file request)."""
    if any(c in path for c in "*?["):
        return fs.glob(path, detail=True), False
    if fs.isdir(path):
        return fs.find(path, detail=True), True
    return ({path: fs.info(path)} if fs.exists(path) else {}), False


def list_source_files(source: SourceSpec) -> list[SourceFile]:
    """The files of one source, sorted, with fingerprints from the listing's metadata; at most `max_files` of them."""
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(source.uri, **source.fs_options)
        fs.invalidate_cache()  # fsspec reuses a file system per process, and s3fs would answer from its last listing
        infos, is_dir = _listing(fs, path)
    except (OSError, ValueError, ImportError) as exc:
        raise SourceError(f"source {source.name!r}: cannot list {source.uri} ({type(exc).__name__}: {exc})") from None
    paths = sorted(p for p, info in infos.items() if info.get("type") != "directory")
    if source.max_files is not None:
        paths = paths[: source.max_files]
    if not paths:
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
        if source.uri.startswith("hf://") and offline:
            raise SourceError(
                f"source {source.name!r}: HF_HUB_OFFLINE is set, so {source.uri} cannot be listed from the Hub; unset "
                "HF_HUB_OFFLINE, or copy the files and point uri at them"
            )
        raise SourceError(f"source {source.name!r}: no files match {source.uri}")
    base = _glob_base(path, is_dir)
    files = [
        SourceFile(
            source.name,
            _part_name(p, base),
            fs.unstrip_protocol(p),
            fingerprint_from_info({"name": p, **infos[p]}),
            int(infos[p].get("size") or -1),
        )
        for p in paths
    ]
    parts = [f.part for f in files]
    if len(set(parts)) != len(parts):
        raise SourceError(f"source {source.name!r}: two files map to the same partition name under {source.uri}")
    return files


def part_of(source: SourceSpec, uri: str) -> str | None:
    """The part name a listing of `source` gives the file at `uri`, or None when `uri` is not one of its files (outside
    its folder, not matching its glob): what a registration may name, checked without listing the source."""
    import fnmatch

    import fsspec

    fs, path = fsspec.core.url_to_fs(source.uri, **source.fs_options)
    target = fsspec.core.url_to_fs(uri, **source.fs_options)[1]
    if any(c in path for c in "*?["):
        inside, is_dir = fnmatch.fnmatchcase(target, path), False
    else:
        is_dir = target != path
        inside = not is_dir or target.startswith(path.rstrip("/") + "/")
    return _part_name(target, _glob_base(path, is_dir)) if inside else None
