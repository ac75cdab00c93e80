"""The published mixture file (`mixtures/<name>.json`, `mixtures/<name>/<version>.json`): parsing and validation of
every field, each error naming the file and the field. The fields are fixed by the mixture contract (docs/format.md)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ..errors import ManifestError
from ..format import TOKEN_DTYPES, FileRef, check_key, parse_json

MIXTURE_FORMAT = "shard-mixture"
MIXTURE_VERSIONS = (1,)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
WEIGHT_TOLERANCE = 1e-6  # the builder writes weights normalised to sum to 1


@dataclass(frozen=True)
class MixtureTokenizer:
    fingerprint: str
    vocab_size: int
    eod_id: int
    token_dtype: str


@dataclass(frozen=True)
class Component:
    """One component: its share of training tokens, and its dataset pinned by manifest URL, size and sha256."""

    name: str
    weight: float
    manifest: FileRef  # key: the pinned manifest's URL, relative to the mixture's store root or absolute
    dataset: str
    version: str
    tokens: dict[str, int]
    max_repeats: float | None

    @property
    def relative(self) -> bool:
        """Whether the manifest URL is relative to the mixture's store root (else a path or URL of its own)."""
        return not (self.manifest.key.startswith("/") or _SCHEME.match(self.manifest.key))


@dataclass(frozen=True)
class MixtureFile:
    name: str
    version: str
    created_at: str
    tokenizer: MixtureTokenizer
    tokens_per_epoch: dict[str, int]
    components: tuple[Component, ...]
    lineage: dict[str, Any]

    def epoch_tokens(self, split: str, origin: str) -> int:
        """Tokens one mixture epoch serves of `split`; refused naming the split when the file has none for it."""
        if split not in self.tokens_per_epoch:
            raise ManifestError(f"{origin}: tokens_per_epoch has no split {split!r} (has {sorted(self.tokens_per_epoch)}); the mixture cannot serve it")
        return self.tokens_per_epoch[split]


def _get(obj: Any, name: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict):
        raise ManifestError(f"{where}: expected an object, got {type(obj).__name__}")
    if name not in obj:
        raise ManifestError(f"{where}: missing field {name!r}")
    value = obj[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ManifestError(f"{where}.{name}: expected an integer, got {value!r}")
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ManifestError(f"{where}.{name}: expected {getattr(kind, '__name__', 'a number')}, got {value!r}")
    return value


def _text(obj: Any, name: str, where: str) -> str:
    value = _get(obj, name, str, where)
    if not value:
        raise ManifestError(f"{where}.{name}: must not be empty")
    return value


def _count(obj: Any, name: str, where: str) -> int:
    value = _get(obj, name, int, where)
    if value < 0:
        raise ManifestError(f"{where}.{name}: must not be negative, got {value}")
    return value


def _counts(obj: Any, name: str, where: str) -> dict[str, int]:
    table = _get(obj, name, dict, where)
    return {split: _count(table, split, f"{where}.{name}") for split in table}


def _component(obj: Any, where: str) -> Component:
    pinned = _get(obj, "manifest", dict, where)
    url = _text(pinned, "url", f"{where}.manifest")
    sha = _get(pinned, "sha256", str, f"{where}.manifest")
    if not _SHA256.match(sha):
        raise ManifestError(f"{where}.manifest.sha256: {sha!r} is not 64 lowercase hex digits ({url})")
    weight = _get(obj, "weight", (int, float), where)
    if not math.isfinite(weight) or weight <= 0:
        raise ManifestError(f"{where}.weight: must be a positive number, got {weight!r}")
    repeats = obj.get("max_repeats") if isinstance(obj, dict) else None
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, (int, float)) or repeats <= 0):
        raise ManifestError(f"{where}.max_repeats: must be a positive number or null, got {repeats!r}")
    component = Component(
        name=_text(obj, "name", where), weight=float(weight), manifest=FileRef(url, _count(pinned, "size", f"{where}.manifest"), sha),
        dataset=_text(obj, "dataset", where), version=_text(obj, "version", where), tokens=_counts(obj, "tokens", where),
        max_repeats=None if repeats is None else float(repeats),
    )
    if component.relative:
        check_key(url, f"{where}.manifest.url")
    return component


def parse_mixture(raw: bytes | str, origin: str = "mixture") -> MixtureFile:
    """Parse and validate a mixture file; `origin` (its URL) names it in every error."""
    doc = parse_json(raw, origin)  # nesting bounded, as a manifest's
    if _get(doc, "format", str, origin) != MIXTURE_FORMAT:
        raise ManifestError(f"{origin}: format is {doc['format']!r}, expected {MIXTURE_FORMAT!r}")
    version = _get(doc, "format_version", int, origin)
    if version not in MIXTURE_VERSIONS:
        raise ManifestError(f"{origin}: format_version {version} is not supported (this reader knows {list(MIXTURE_VERSIONS)}); upgrade shard_loader")
    mix = _get(doc, "mixture", dict, origin)
    tok = _get(doc, "tokenizer", dict, origin)
    tokenizer = MixtureTokenizer(
        fingerprint=_text(tok, "fingerprint", f"{origin}.tokenizer"), vocab_size=_count(tok, "vocab_size", f"{origin}.tokenizer"),
        eod_id=_count(tok, "eod_id", f"{origin}.tokenizer"), token_dtype=_text(tok, "token_dtype", f"{origin}.tokenizer"),
    )
    if tokenizer.token_dtype not in TOKEN_DTYPES:
        raise ManifestError(f"{origin}.tokenizer.token_dtype: {tokenizer.token_dtype!r} is not one of {sorted(TOKEN_DTYPES)}")
    entries = _get(doc, "components", list, origin)
    if not entries:
        raise ManifestError(f"{origin}.components: a mixture needs at least one component")
    components = tuple(_component(c, f"{origin}.components[{i}]") for i, c in enumerate(entries))
    seen: dict[str, int] = {}
    for i, c in enumerate(components):
        if c.name in seen:
            raise ManifestError(f"{origin}.components[{i}].name: {c.name!r} is also components[{seen[c.name]}]; names must be unique")
        seen[c.name] = i
    total = sum(c.weight for c in components)
    if abs(total - 1) > WEIGHT_TOLERANCE:
        raise ManifestError(f"{origin}.components: weights sum to {total:.6g}, not 1 (the builder writes them normalised)")
    lineage = doc.get("lineage", {})
    if not isinstance(lineage, dict):
        raise ManifestError(f"{origin}.lineage: expected an object")
    return MixtureFile(
        name=_text(mix, "name", f"{origin}.mixture"), version=_text(mix, "version", f"{origin}.mixture"),
        created_at=_get(doc, "created_at", str, origin), tokenizer=tokenizer,
        tokens_per_epoch=_counts(doc, "tokens_per_epoch", origin), components=components, lineage=lineage,
    )
