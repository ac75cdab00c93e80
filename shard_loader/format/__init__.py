"""The published format, shared by the builder (which writes it) and the loader (which reads it):
keys and constants, the manifest, and the shard files' reader and writer."""

from .keys import LATEST_KEY, SPLITS, VERSIONS_DIR, check_key, shard_base_key, tokenizer_key, versioned_key
from .entries import FileRef, ShardEntry
from .manifest import FORMAT_NAME, FORMAT_VERSION, TOKEN_DTYPES, Manifest, SplitInfo, TokenizerInfo, parse_json, parse_manifest, token_dtype_for
from .table import ShardTable
from .shard import Shard, ShardWriter, open_shard

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "LATEST_KEY",
    "SPLITS",
    "TOKEN_DTYPES",
    "VERSIONS_DIR",
    "FileRef",
    "Manifest",
    "Shard",
    "ShardEntry",
    "ShardTable",
    "ShardWriter",
    "SplitInfo",
    "TokenizerInfo",
    "check_key",
    "open_shard",
    "parse_json",
    "parse_manifest",
    "shard_base_key",
    "token_dtype_for",
    "tokenizer_key",
    "versioned_key",
]
