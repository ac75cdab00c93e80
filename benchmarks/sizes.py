"""One size option for every benchmark: `small` runs in minutes here, `large` is for a real box."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Size:
    name: str
    corpus_mb: int  # text tokenized by the tokenization benchmark
    loader_tokens: int  # tokens in the loader benchmark's dataset
    download_mb: int  # the file the download benchmark fetches
    many_shards: int  # shard count for the start-up measurement


SIZES = {
    "small": Size("small", corpus_mb=8, loader_tokens=10_000_000, download_mb=256, many_shards=2_000),
    "medium": Size("medium", corpus_mb=64, loader_tokens=40_000_000, download_mb=1024, many_shards=10_000),
    "large": Size("large", corpus_mb=512, loader_tokens=400_000_000, download_mb=4096, many_shards=10_000),
}


def get_size(name: str) -> Size:
    if name not in SIZES:
        raise SystemExit(f"unknown size {name!r}; choose one of {sorted(SIZES)}")
    return SIZES[name]
