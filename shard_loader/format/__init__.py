"""The published format, shared by the builder (which writes it) and the loader (which reads it):
keys and constants, the manifest, the mixture file, and the shard files' reader and writer."""

from .keys import (
    LATEST_KEY,
    MIXTURES_DIR,
    SPLITS,
    VERSIONS_DIR,
    check_key,
    live_mixture_key,
    mixture_version_key,
    shard_base_key,
    tokenizer_key,
    versioned_key,
)
from .entries import FileRef, ShardEntry
from .codec import parse_json
from .manifest import (
    FORMAT_NAME,
    FORMAT_VERSION,
    TOKEN_DTYPES,
    Manifest,
    SplitInfo,
    TokenizerInfo,
    parse_manifest,
    token_dtype_for,
)
from .table import ShardTable
from .shard import Shard, ShardWriter, open_shard
from .mixture import (
    MIXTURE_FORMAT,
    Component,
    ComponentSummary,
    MixtureFile,
    MixtureTokenizer,
    PinnedManifest,
    parse_mixture,
)

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "LATEST_KEY",
    "MIXTURES_DIR",
    "MIXTURE_FORMAT",
    "SPLITS",
    "TOKEN_DTYPES",
    "VERSIONS_DIR",
    "Component",
    "ComponentSummary",
    "FileRef",
    "Manifest",
    "MixtureFile",
    "MixtureTokenizer",
    "PinnedManifest",
    "Shard",
    "ShardEntry",
    "ShardTable",
    "ShardWriter",
    "SplitInfo",
    "TokenizerInfo",
    "check_key",
    "live_mixture_key",
    "mixture_version_key",
    "open_shard",
    "parse_json",
    "parse_manifest",
    "parse_mixture",
    "shard_base_key",
    "token_dtype_for",
    "tokenizer_key",
    "versioned_key",
]
