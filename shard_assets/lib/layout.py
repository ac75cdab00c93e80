"""Keys of the builder's own files and records under the dataset root; the published files' keys
(tokenizer, shards, manifests) come from shard_loader.format so builder and loader share them."""

from __future__ import annotations

from shard_loader.format import check_key, shard_base_key, tokenizer_key

__all__ = [
    "CURRENT_TOKENIZER_KEY",
    "ingest_failure_key",
    "part_record_key",
    "quarantine_key",
    "raw_key",
    "raw_record_key",
    "shard_base_key",
    "splits_record_key",
    "tokenizer_info_key",
    "tokenizer_key",
]

CURRENT_TOKENIZER_KEY = "state/tokenizer.json"  # the pointer record: which tokenizer is current in this store


def raw_key(partition: str, content_hash: str) -> str:
    """A raw partition's normalised parquet; a changed source file gives a new key, never a rewrite."""
    source, _, part = partition.partition(".")
    return check_key(f"raw/{source}/{part}-{content_hash}.parquet", "raw key")


def raw_record_key(partition: str) -> str:
    """The record of the latest raw build of a partition: its parquet key, source file and counts."""
    source, _, part = partition.partition(".")
    return check_key(f"raw/{source}/{part}.json", "raw record key")


def ingest_failure_key(partition: str) -> str:
    """The record of a partition whose ingest failed, all in one folder (no source name starts with `_`)."""
    return check_key(f"raw/_failed/{partition}.json", "ingest failure key")


def tokenizer_info_key(fingerprint: str) -> str:
    return check_key(f"tokenizers/{fingerprint}/info.json", "tokenizer info key")


def part_record_key(fingerprint: str, partition: str) -> str:
    """The per-partition record of a tokenization: shard entries, counts, the raw file it came from."""
    return check_key(f"tokenized/{fingerprint}/parts/{partition}.json", "part record key")


def quarantine_key(fingerprint: str, partition: str) -> str:
    """The record of a partition whose tokenization with this tokenizer failed."""
    return check_key(f"tokenized/{fingerprint}/quarantine/{partition}.json", "quarantine key")


def splits_record_key(fingerprint: str) -> str:
    return check_key(f"tokenized/{fingerprint}/splits.json", "splits record key")
