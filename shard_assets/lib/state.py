"""The builder's state in the store, not in any Dagster instance: which tokenizer is current, and which
files each partition was registered with. Any Dagster home can build into any store."""

from __future__ import annotations

import hashlib

from shard_loader.format import check_key

from .errors import TokenizerError
from .layout import CURRENT_TOKENIZER_KEY
from .partitioning import PartitionRecord
from .records import TokenizerRecord, find_record, get_record, put_record
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
    put_record(store, CURRENT_TOKENIZER_KEY, record)


PARTITIONS_PREFIX = "state/partitions/"


def partition_record_key(partition: str) -> str:
    """A partition's registration, spread over 256 folders so no folder grows with the corpus."""
    bucket = hashlib.sha1(partition.encode()).hexdigest()[:2]
    return check_key(f"{PARTITIONS_PREFIX}{bucket}/{partition}.json", "partition registration key")


def registered_partitions(store: ObjectStore) -> list[str]:
    """Every partition registered in this store, sorted (records directly under the prefix predate the
    folders and are not registrations)."""
    keys = (key[len(PARTITIONS_PREFIX) :] for key, _ in store.list(PARTITIONS_PREFIX))
    return sorted(k.split("/", 1)[1][: -len(".json")] for k in keys if k.count("/") == 1 and k.endswith(".json"))


def write_registration(store: ObjectStore, partition: str, record: PartitionRecord | None) -> None:
    """Record what a partition reads, or forget a partition (None) whose files are gone."""
    if record is None:
        store.delete(partition_record_key(partition))
    else:
        put_record(store, partition_record_key(partition), record)


def registered_partition(store: ObjectStore, partition: str) -> PartitionRecord:
    """The files (or row-group range) a partition was registered with: runs read them here instead of listing the source."""
    return get_record(store, partition_record_key(partition), PartitionRecord, f"partition {partition}")
