"""Keys of everything the builder writes under the dataset root (see ../shared/DESIGN.md)."""

from __future__ import annotations

from shard_loader.manifest import check_key


def raw_key(source: str, part: str) -> str:
    return check_key(f"raw/{source}/{part}.parquet", "raw key")


def tokenizer_key(fingerprint: str) -> str:
    return check_key(f"tokenizers/{fingerprint}/tokenizer.json", "tokenizer key")


def tokenizer_info_key(fingerprint: str) -> str:
    return check_key(f"tokenizers/{fingerprint}/info.json", "tokenizer info key")


def shard_base_key(fingerprint: str, split: str, partition: str) -> str:
    """`.npy` and `.bin` of a shard share this stem."""
    return check_key(f"tokenized/{fingerprint}/{split}/{partition}", "shard key")


def part_record_key(fingerprint: str, partition: str) -> str:
    """The per-partition record of a tokenization: shard entries, counts, the raw file it came from."""
    return check_key(f"tokenized/{fingerprint}/parts/{partition}.json", "part record key")


def splits_record_key(fingerprint: str) -> str:
    return check_key(f"tokenized/{fingerprint}/splits.json", "splits record key")


def raw_record_key(source: str, part: str) -> str:
    """The record of one raw partition: the source file it came from and the filtering counts."""
    return check_key(f"raw/{source}/{part}.json", "raw record key")
