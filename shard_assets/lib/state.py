"""The builder's state in the store, not in any Dagster instance: which tokenizer is current, and which
files each partition was registered with. Any Dagster home can build into any store."""

from __future__ import annotations

from .errors import TokenizerError
from .layout import CURRENT_TOKENIZER_KEY, PARTITIONS_PREFIX, partition_of_registration, partition_record_key
from .records import PartitionRecord, TokenizerRecord, find_record, get_record, put_record, to_json
from .store import ObjectStore


def current_tokenizer(store: ObjectStore) -> TokenizerRecord:
    """The tokenizer this store's shards are currently built with (the pointer record the tokenizer asset writes)."""
    record = find_record(store, CURRENT_TOKENIZER_KEY, TokenizerRecord, "current tokenizer")
    if record is None:
        raise TokenizerError(f"{store.describe()} has no current tokenizer ({CURRENT_TOKENIZER_KEY}); materialise the tokenizer asset first")
    return record


def has_tokenizer(store: ObjectStore) -> bool:
    return store.exists(CURRENT_TOKENIZER_KEY)


def set_current_tokenizer(store: ObjectStore, record: TokenizerRecord) -> None:
    """Point the store at `record`'s tokenizer; a pointer that names it already is not written again."""
    store.put_if_changed(CURRENT_TOKENIZER_KEY, to_json(record))


def registered_partitions(store: ObjectStore) -> list[str]:
    """Every partition registered in this store, sorted."""
    return sorted(p for key, _ in store.list(PARTITIONS_PREFIX) if (p := partition_of_registration(key)) is not None)


def write_registration(store: ObjectStore, partition: str, record: PartitionRecord | None) -> None:
    """Record what a partition reads, or forget a partition (None) whose files are gone."""
    if record is None:
        store.delete(partition_record_key(partition))
    else:
        put_record(store, partition_record_key(partition), record)


def registered_partition(store: ObjectStore, partition: str) -> PartitionRecord:
    """The files (or row-group range) a partition was registered with: runs read them here instead of listing the source."""
    return get_record(store, partition_record_key(partition), PartitionRecord, f"partition {partition}")
