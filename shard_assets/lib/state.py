"""The builder's state in the store, not in any Dagster instance: which tokenizer is current, and which
source file each partition was registered with. Any Dagster home can build into any store."""

from __future__ import annotations

from shard_loader.format import check_key

from .errors import TokenizerError
from .layout import CURRENT_TOKENIZER_KEY
from .records import SourceFileRef, TokenizerRecord, find_record, get_record, put_record
from .sources.listing import SourceFile
from .store import ObjectStore


def source_file_key(partition: str) -> str:
    return check_key(f"state/partitions/{partition}.json", "partition registration key")


def current_tokenizer(store: ObjectStore) -> TokenizerRecord:
    """The tokenizer this store's shards are currently built with (the pointer record the tokenizer asset writes)."""
    record = find_record(store, CURRENT_TOKENIZER_KEY, TokenizerRecord, "current tokenizer")
    if record is None:
        raise TokenizerError(f"{store.describe()} has no current tokenizer ({CURRENT_TOKENIZER_KEY}); materialise the tokenizer asset first")
    return record


def has_tokenizer(store: ObjectStore) -> bool:
    return store.exists(CURRENT_TOKENIZER_KEY)


def set_current_tokenizer(store: ObjectStore, record: TokenizerRecord) -> None:
    put_record(store, CURRENT_TOKENIZER_KEY, record)


PARTITIONS_PREFIX = "state/partitions/"


def registered_partitions(store: ObjectStore) -> list[str]:
    """Every partition registered in this store, sorted."""
    return [key[len(PARTITIONS_PREFIX) : -len(".json")] for key, _ in store.list(PARTITIONS_PREFIX) if key.endswith(".json")]


def register_source_files(store: ObjectStore, files: list[SourceFile], sources: list[str]) -> tuple[list[SourceFile], list[str]]:
    """Remember each listed file's URI, fingerprint and size under its partition, and forget the partitions of
    `sources` whose file is gone. Returns the files that are new or changed, and the partitions removed."""
    changed = []
    for f in files:
        ref = SourceFileRef(uri=f.uri, fingerprint=f.fingerprint, size=f.size)
        if find_record(store, source_file_key(f.partition_key), SourceFileRef, "registration") != ref:
            put_record(store, source_file_key(f.partition_key), ref)
            changed.append(f)
    listed = {f.partition_key for f in files}
    removed = [p for p in registered_partitions(store) if p.split(".", 1)[0] in sources and p not in listed]
    for p in removed:
        store.delete(source_file_key(p))
    return changed, removed


def registered_source_file(store: ObjectStore, partition: str) -> SourceFileRef:
    """The source file a partition was registered with: runs read it here instead of listing the source."""
    return get_record(store, source_file_key(partition), SourceFileRef, f"partition {partition}")
