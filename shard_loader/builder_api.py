"""What the builder (shard_assets) may use of the loader, declared in one place: the published format (keys, manifest,
mixture file, shard writer and reader, the codec), the stores it reads and writes through, and their errors. The
builder imports the loader through this module alone (tests/test_layout.py); the loader knows nothing of the builder."""

from . import iter_sequences
from .arguments import ArgumentError, duration
from .cache.verified import ensure_local
from .errors import NotFoundError, ShardLoaderError, StoreError, TransientStoreError
from .format import (
    LATEST_KEY,
    SPLITS,
    TOKEN_DTYPES,
    VERSIONS_DIR,
    Component,
    ComponentSummary,
    FileRef,
    Manifest,
    MixtureFile,
    MixtureTokenizer,
    PinnedManifest,
    ShardEntry,
    ShardWriter,
    SplitInfo,
    TokenizerInfo,
    check_key,
    codec,
    live_mixture_key,
    mixture_version_key,
    open_shard,
    parse_manifest,
    parse_mixture,
    shard_base_key,
    token_dtype_for,
    tokenizer_key,
    versioned_key,
)
from .format.codec import loads, to_json, to_plain
from .format.keys import LINEAGE_DIR, shard_content_hash
from .format.leases import COLLECTING_SUFFIX, READERS_DIR, Lease, collecting_key, lease_key
from .format.manifest import CREATED_AT_FORMAT
from .format.shard import load_npy, map_npy
from .opening import default_cache_dir
from .storage import LocalStore, Store, is_remote, open_store, split_manifest_url
from .storage.reader_leases import WritableStore, writer_for
from .storage.retry import RequestStats, RetryPolicy, with_retries
from .storage.s3 import S3Store, classify
from .storage.s3_client import (
    ACCOUNT_VARIABLE,
    ENDPOINT_VARIABLE,
    describe_s3_error,
    fsspec_options,
    key_variables,
    make_s3_client,
    r2_endpoint,
    resolve_settings,
    s3_errors,
)
from .storage.transfer import MAX_OBJECT_BYTES

__all__ = [
    "ACCOUNT_VARIABLE", "ArgumentError", "check_key", "classify", "codec", "collecting_key", "COLLECTING_SUFFIX",
    "Component", "ComponentSummary", "CREATED_AT_FORMAT", "default_cache_dir", "describe_s3_error", "duration",
    "ENDPOINT_VARIABLE", "ensure_local", "FileRef", "fsspec_options", "is_remote", "iter_sequences", "key_variables",
    "LATEST_KEY", "Lease", "lease_key", "LINEAGE_DIR", "live_mixture_key", "load_npy", "loads", "LocalStore",
    "make_s3_client", "Manifest", "map_npy", "MAX_OBJECT_BYTES", "mixture_version_key", "MixtureFile",
    "MixtureTokenizer", "NotFoundError", "open_shard", "open_store", "parse_manifest", "parse_mixture",
    "PinnedManifest", "r2_endpoint", "READERS_DIR", "RequestStats", "resolve_settings", "RetryPolicy", "s3_errors",
    "S3Store", "shard_base_key", "shard_content_hash", "ShardEntry", "ShardLoaderError", "ShardWriter",
    "split_manifest_url", "SplitInfo", "SPLITS", "Store", "StoreError", "to_json", "to_plain", "token_dtype_for",
    "TOKEN_DTYPES", "tokenizer_key", "TokenizerInfo", "TransientStoreError", "versioned_key", "VERSIONS_DIR",
    "with_retries", "WritableStore", "writer_for",
]
