"""shard_loader: read tokenized shard datasets published by shard_assets.

Numpy and the standard library at its core; boto3 (`s3` extra) and torch (`torch` extra)
are imported only when a remote S3/R2 store or the torch dataset is used.
"""

from .arguments import ArgumentError
from .dataset import EmptyEpochError, TokenDataset, iter_sequences
from .errors import (
    CredentialsError,
    DeadlineError,
    DiskBudgetError,
    IntegrityError,
    ManifestError,
    ShardFormatError,
    ShardLoaderError,
    StoreError,
)
from .format import FileRef, Manifest, ShardEntry, SplitInfo, TokenizerInfo, parse_manifest
from .opening import OpenedManifest, open_manifest
from .state import StateError
from .world import WorldError

__all__ = [
    "ArgumentError",
    "CredentialsError",
    "DeadlineError",
    "DiskBudgetError",
    "EmptyEpochError",
    "FileRef",
    "IntegrityError",
    "Manifest",
    "ManifestError",
    "OpenedManifest",
    "ShardEntry",
    "ShardFormatError",
    "ShardLoaderError",
    "SplitInfo",
    "StateError",
    "StoreError",
    "TokenDataset",
    "TokenizerInfo",
    "WorldError",
    "iter_sequences",
    "open_manifest",
    "parse_manifest",
]
