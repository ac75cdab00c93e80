"""shard_loader: read tokenized shard datasets published by shard_assets.

Numpy and the standard library at its core; boto3 (`s3` extra) and torch (`torch` extra)
are imported only when a remote store or the torch dataset is used.
"""

from .dataset import OpenedManifest, iter_sequences, load_shard, open_manifest
from .errors import (
    DiskBudgetError,
    IntegrityError,
    ManifestError,
    ShardFormatError,
    ShardLoaderError,
    StoreError,
)
from .manifest import FileRef, Manifest, ShardEntry, SplitInfo, TokenizerInfo, parse_manifest

__all__ = [
    "DiskBudgetError",
    "FileRef",
    "IntegrityError",
    "Manifest",
    "ManifestError",
    "OpenedManifest",
    "ShardEntry",
    "ShardFormatError",
    "ShardLoaderError",
    "SplitInfo",
    "StoreError",
    "TokenizerInfo",
    "iter_sequences",
    "load_shard",
    "open_manifest",
    "parse_manifest",
]
