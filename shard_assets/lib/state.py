"""The builder's state in the store, not in any Dagster instance: which tokenizer is current, and which
files each partition was registered with. Any Dagster home can build into any store."""

from __future__ import annotations

from .errors import StateMismatchError, TokenizerError
from .layout import CURRENT_TOKENIZER_KEY, PARTITIONS_PREFIX, partition_of_registration, partition_record_key
from .layout import tokenizer_key
from .records import PartitionRecord, TokenizerRecord, find_record, get_record, put_record
from .store import ObjectMissingError, ObjectStore
from .tokenizer import check_tokenizer_record

_CHECKED: set[tuple[str, TokenizerRecord]] = set()  # pointer records this process has checked against their file


def current_tokenizer(store: ObjectStore) -> TokenizerRecord:
    """The tokenizer this store's shards are currently built with (the pointer record the tokenizer asset writes),
    checked once per process against the tokenizer file it names (fingerprint, vocab size, end-of-document id):
    a pointer that disagrees stops the build (StateMismatchError) instead of tokenizing with a wrong EOD id."""
    record = find_record(store, CURRENT_TOKENIZER_KEY, TokenizerRecord, "current tokenizer")
    if record is None:
        raise TokenizerError(
            f"{store.describe()} has no current tokenizer ({CURRENT_TOKENIZER_KEY}); materialise the tokenizer asset "
            "first"
        )
    if (store.describe(), record) not in _CHECKED:
        try:
            text = store.get_bytes(tokenizer_key(record.fingerprint)).decode("utf-8", "replace")
        except ObjectMissingError:
            raise StateMismatchError(
                f"{store.describe()}: {CURRENT_TOKENIZER_KEY} names tokenizer {record.fingerprint}, whose file "
                f"{tokenizer_key(record.fingerprint)} is missing; materialise the tokenizer asset again"
            ) from None
        check_tokenizer_record(text, record, f"{store.describe()}: {CURRENT_TOKENIZER_KEY}")
        _CHECKED.add((store.describe(), record))
    return record


def has_tokenizer(store: ObjectStore) -> bool:
    return store.exists(CURRENT_TOKENIZER_KEY)


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
    """The files (or row-group range) a partition was registered with: runs read them here instead of listing the
    source."""
    return get_record(store, partition_record_key(partition), PartitionRecord, f"partition {partition}")
