"""shard_loader: read tokenized shard datasets published by shard_assets.

Numpy and the standard library at its core; boto3 (`s3` extra) and torch (`torch` extra)
are imported only when a remote S3/R2 store or the torch dataset is used.
"""

from .dataset import TokenDataset, iter_sequences
from .errors import (
    DiskBudgetError,
    IntegrityError,
    ManifestError,
    ShardFormatError,
    ShardLoaderError,
    StoreError,
)
from .format import FileRef, Manifest, ShardEntry, SplitInfo, TokenizerInfo, parse_manifest
from .opening import OpenedManifest, open_manifest

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
    "TokenDataset",
    "TokenizerInfo",
    "iter_sequences",
    "open_manifest",
    "parse_manifest",
]
