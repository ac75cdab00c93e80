"""Keys of everything the builder writes under the dataset root (see ../shared/DESIGN.md)."""

from __future__ import annotations

from shard_loader.format import check_key, shard_base_key, tokenizer_key

__all__ = ["raw_key", "tokenizer_key", "tokenizer_info_key", "shard_base_key", "part_record_key", "splits_record_key", "raw_record_key"]


def raw_key(source: str, part: str) -> str:
    return check_key(f"raw/{source}/{part}.parquet", "raw key")


def tokenizer_info_key(fingerprint: str) -> str:
    return check_key(f"tokenizers/{fingerprint}/info.json", "tokenizer info key")


def part_record_key(fingerprint: str, partition: str) -> str:
    """The per-partition record of a tokenization: shard entries, counts, the raw file it came from."""
    return check_key(f"tokenized/{fingerprint}/parts/{partition}.json", "part record key")


def splits_record_key(fingerprint: str) -> str:
    return check_key(f"tokenized/{fingerprint}/splits.json", "splits record key")


def raw_record_key(source: str, part: str) -> str:
    """The record of one raw partition: the source file it came from and the filtering counts."""
    return check_key(f"raw/{source}/{part}.json", "raw record key")
