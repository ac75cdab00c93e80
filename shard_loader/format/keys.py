"""Keys of the published dataset: where each file lives under the dataset root, and which keys are safe.

Keys are relative to the dataset root: the folder that holds `manifest.json`, which is
also the parent of the `manifests/` folder holding the immutable versioned copies. A
shard's key carries a hash of its content, so a key names exactly one content forever.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import typing
from typing import Annotated, Any

from ..errors import ManifestError
from .codec import Check

LATEST_KEY = "manifest.json"
VERSIONS_DIR = "manifests"
TABLES_DIR = f"{VERSIONS_DIR}/tables"  # shard tables, content-addressed: <sha256[:16]>.npy
LINEAGE_DIR = f"{VERSIONS_DIR}/lineage"  # per-partition lineage, content-addressed: <sha256[:16]>.json
SPLITS = ("train", "val")
MIXTURES_DIR = "mixtures"  # under a store root: mixtures/<name>.json (live) and mixtures/<name>/<version>.json

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# NUL, line breaks, escapes: no file system path or log line should carry them
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def key_problem(key: Any) -> str | None:
    """What makes a key unsafe (it could escape the dataset root: absolute, `..`, a URL, odd parts; or no path can hold
    it: a NUL), or None for a safe key."""
    if not isinstance(key, str) or not key:
        return f"key must be a non-empty string, got {key!r}"
    if _CONTROL.search(key):
        return f"key {key!r} holds a control character (a NUL, a line break); keys are plain paths"
    if key.startswith("/") or key.startswith("\\") or _SCHEME.match(key):
        return f"key {key!r} is absolute; keys must be relative to the dataset root"
    if any(p in ("", ".", "..") for p in key.replace("\\", "/").split("/")):
        return f"key {key!r} has an empty, '.' or '..' part; refusing to leave the dataset root"
    if posixpath.normpath(key) != key:
        return f"key {key!r} is not in normal form"
    return None


Key = Annotated[str, Check(key_problem)]  # a record field holding a key, checked as it is decoded


def check_key(key: Any, where: str) -> str:
    """`key`, refused with a ManifestError naming `where` if it is unsafe (key_problem)."""
    if problem := key_problem(key):
        raise ManifestError(f"{where}: {problem}")
    return typing.cast(str, key)


def versioned_key(version: str) -> str:
    """Where the immutable copy of a manifest version is published."""
    return check_key(f"{VERSIONS_DIR}/{version}.json", "dataset.version")


def live_mixture_key(name: str) -> str:
    """The live mixture under a store root: a byte copy of the latest version whose audits passed."""
    return check_key(f"{MIXTURES_DIR}/{name}.json", "mixture name")


def mixture_version_key(name: str, version: str) -> str:
    """A mixture version under a store root, written once and never rewritten."""
    return check_key(f"{MIXTURES_DIR}/{name}/{version}.json", "mixture version")


def tokenizer_key(fingerprint: str) -> str:
    """The exact tokenizer.json a dataset was tokenized with; its fingerprint is a hash of its bytes."""
    return check_key(f"tokenizers/{fingerprint}/tokenizer.json", "tokenizer key")


def shard_base_key(fingerprint: str, split: str, partition: str, content_hash: str) -> str:
    """The stem that a shard's `.npy` and `.bin` share: `tokenized/<tokenizer>/<split>/<partition>-<content hash>`."""
    return check_key(f"tokenized/{fingerprint}/{split}/{partition}-{content_hash}", "shard key")


def shard_content_hash(npy_sha256: str, bin_sha256: str) -> str:
    """A shard's `<content hash>`: 16 hex digits of a hash over its `.npy` and `.bin` sha256s."""
    return hashlib.sha256(f"{npy_sha256}{bin_sha256}".encode()).hexdigest()[:16]
