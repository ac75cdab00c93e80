"""The dataset specification: sources, filters, tokenizer and split, read from a TOML file.

A source is configured data, not code. A relative local uri is read relative to the spec file's folder."""

from __future__ import annotations

import difflib
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .curation.filters import FilterSettings, parse_filters
from .encoders import ON_MISMATCH
from .presets import PRESETS
from .errors import SpecError
from .settings import DEFAULT_SPEC
from .user_files import read_user_file

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

SOURCE_FORMATS = ("parquet", "jsonl", "text")
FAILURE_POLICIES = ("skip", "block")
STALE_POLICIES = ("leave_out", "keep_last_good")
TOKENIZER_KINDS = ("train_bpe", "pretrained", "file")
DECONTAMINATE_MODES = ("drop",)
FINGERPRINT = re.compile("[0-9a-f]{16}")
LOCAL_SCHEMES = ("", "file")
R = TypeVar("R", bound="DataclassInstance")  # the record type spec_record builds
SPEC_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")  # a dataset, source, mixture or component name


@dataclass(frozen=True)
class SourceSpec:
    """One source of raw documents. `max_documents` caps each of its files (partitions)."""

    name: str
    uri: str = ""
    format: str = "parquet"
    text_column: str = "text"
    document_separator: str | None = None
    max_documents: int | None = None
    max_files: int | None = None
    allow_unbounded: bool = False
    storage_options: dict[str, Any] = field(default_factory=dict)

    @property
    def fs_options(self) -> dict[str, Any]:
        """fsspec options for reading the source: `storage_options` as given; for an `s3://` source without any,
        the store's own endpoint and write keys (S3_ENDPOINT_URL / R2_DATASET_*), so raw files in the same
        bucket or account are read as the store is."""
        if self.storage_options or uri_scheme(self.uri) != "s3":
            return self.storage_options
        from shard_loader.builder_api import fsspec_options, resolve_settings

        return fsspec_options(resolve_settings(role="write"))


@dataclass(frozen=True)
class TokenizerSpec:
    """A pretrained tokenizer (`name`: Hub id or local path), a BPE trained on the raw documents, or a
    `tokenizer.json` used as is (`path`), so datasets built from different sources share one fingerprint; with
    `fingerprint`, whatever the kind, the tokenizer the store already holds under it (kept as files arrive)."""

    kind: str = "train_bpe"
    name: str | None = None
    path: str | None = None  # kind = "file": a tokenizer.json; relative to the spec's folder
    vocab_size: int = 8192
    eod_token: str = "<|endoftext|>"
    train_max_bytes: int = 64 << 20
    fingerprint: str | None = None  # pins a tokenizer the store holds: no build trains or loads another


@dataclass(frozen=True)
class DedupSpec:
    """The [dedup] table: exact copies (same normalised text) published once by default; near copies (MinHash over
    word `ngram`s, LSH bands for Jaccard `threshold`) on request; the index split by hash into ranges, as many as keep
    each range small (or `ranges`, a power of two, where set)."""

    exact: bool = True
    near: bool = False
    threshold: float = 0.8
    ngram: int = 5
    num_perm: int = 128
    ranges: int | None = None

    @property
    def enabled(self) -> bool:
        return self.exact or self.near


@dataclass(frozen=True)
class DecontaminateSpec:
    """The [decontaminate] table: a document sharing a run of `ngram` words (lower-cased, punctuation removed) with a
    passage of the eval sets (`against`: globs of JSONL, parquet or text files, relative to the spec) is dropped."""

    against: tuple[str, ...] = ()
    ngram: int = 13
    mode: str = "drop"
    text_column: str = "text"


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    sources: tuple[SourceSpec, ...]
    tokenizer: TokenizerSpec = TokenizerSpec()
    dedup: DedupSpec = DedupSpec()
    filters: FilterSettings = FilterSettings()  # [filters]: off unless a preset or a rule's table turns it on
    decontaminate: DecontaminateSpec | None = None  # None: no eval set is checked
    val_fraction: float = 0.01
    min_chars: int = 32
    batch_documents: int = 1000
    on_partition_failure: str = "skip"
    # a partition whose file changed (or turned unreadable) and is not rebuilt: left out of the next version, or its
    # last good build kept and named in lineage as stale
    stale_partitions: str = "leave_out"
    # source bytes per partition ("2GB" in TOML); 0: one partition per file. SHARD_PARTITION_BYTES overrides it
    partition_bytes: int = 0
    # the exactness guard finds a fast engine differing: "fail" the partition or re-encode it with the "reference"
    on_mismatch: str = "fail"
    origin: str = "<spec>"

    def source(self, name: str) -> SourceSpec:
        for s in self.sources:
            if s.name == name:
                return s
        raise SpecError(f"{self.origin}: no source named {name!r}; sources are {[s.name for s in self.sources]}")


def uri_scheme(uri: str) -> str:
    """The scheme of a URI (`s3`, `file`), or "" for a plain path."""
    return uri.split("://", 1)[0] if "://" in uri else ""


# Allowed ranges of numeric fields, inclusive (None: unbounded); checked before any work starts.
RANGES: dict[str, tuple[float | None, float | None]] = {
    "max_documents": (1, None),
    "max_files": (1, None),
    "vocab_size": (257, 1 << 32),  # a byte-level BPE needs the 256 bytes and the end-of-document token
    "train_max_bytes": (1 << 10, None),
    "min_chars": (0, None),
    "batch_documents": (1, 1_000_000),
    "partition_bytes": (0, None),
    "threshold": (0.01, 1.0),
    "ngram": (1, 64),
    "num_perm": (16, 1024),
    "ranges": (1, 1 << 16),
}

_BYTES = re.compile(r"^(\d+)\s*(|B|KB|MB|GB|KIB|MIB|GIB)$")
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_byte_count(text: str, where: str) -> int:
    """A byte count such as `268435456`, `256MB` or `2GiB`; `where` names the field or variable in the error."""
    match = _BYTES.match(text.strip().upper())
    if not match:
        raise SpecError(
            f"{where}: {text!r} is not a byte count (e.g. 268435456, 256MB, 2GiB); 0 means one partition per file"
        )
    return int(match[1]) * _UNITS[match[2]]


def _check_value(name: str, kind: Any, value: Any, where: str) -> None:
    """One field's type and range; the message names the field and says what is allowed."""
    options = typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, types.UnionType) else (kind,)
    if value is None and type(None) in options:
        return
    base = next(o for o in options if o is not type(None))
    base = typing.get_origin(base) or base
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if base is not Any and (not isinstance(value, base) or (base is int and isinstance(value, bool))):
        raise SpecError(f"{where}.{name}: expected {getattr(base, '__name__', base)}, got {value!r}")
    low, high = RANGES.get(name, (None, None))
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"between {low} and {high}"
        raise SpecError(f"{where}.{name}: must be {bounds}, got {value!r}")


def check_choice(name: str, value: str, choices: tuple[str, ...], where: str) -> None:
    """A field whose value must be one of `choices`; the message suggests the closest one."""
    if value not in choices:
        close = difflib.get_close_matches(value, choices, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise SpecError(f"{where}.{name}: {value!r} is not one of {choices}{hint}")


def spec_record(cls: type[R], data: dict[str, Any], where: str) -> R:
    """`cls` built from a TOML table: unknown fields refused (with the closest known one), every value type-checked."""
    known = {f.name for f in fields(cls)}
    for name in sorted(set(data) - known):
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known fields are {sorted(known)}"
        raise SpecError(f"{where}: unknown field {name!r}; {hint}")
    hints = typing.get_type_hints(cls)
    for name, value in data.items():
        if name not in ("sources", "tokenizer", "dedup", "filters", "decontaminate", "origin"):
            _check_value(name, hints[name], value, where)
    try:
        return cls(**data)
    except TypeError as exc:
        raise SpecError(f"{where}: {exc}") from None


def anchored(path: str, base: Path | None) -> str:
    """A relative local path or uri resolved against `base` (the spec's folder); any other as it is."""
    relative = path and uri_scheme(path) == "" and not path.startswith(("/", "~"))
    return str(base / path) if base is not None and relative else path


def _source(data: dict[str, Any], where: str, base: Path | None) -> SourceSpec:
    data = dict(data)
    preset = data.pop("preset", None)
    if preset is not None:
        if preset not in PRESETS:
            raise SpecError(f"{where}.preset: unknown preset {preset!r}; presets are {sorted(PRESETS)}")
        defaults = {k: getattr(PRESETS[preset], k) for k in ("uri", "format", "text_column", "document_separator")}
        data = {**defaults, "name": preset, **data}
    if isinstance(data.get("uri"), str):
        data["uri"] = anchored(data["uri"], base)
    src = spec_record(SourceSpec, data, where)
    if not SPEC_NAME.match(src.name):
        raise SpecError(f"{where}.name: {src.name!r} must be lowercase letters, digits, '-' or '_'")
    if src.format not in SOURCE_FORMATS:
        raise SpecError(f"{where}.format: {src.format!r} is not one of {SOURCE_FORMATS}")
    if not src.uri:
        raise SpecError(f"{where}.uri: a {src.format} source needs a uri (a path, file://, s3:// or hf://datasets/...)")
    if uri_scheme(src.uri) not in LOCAL_SCHEMES and src.max_documents is None and not src.allow_unbounded:
        raise SpecError(
            f"{where}: remote source {src.name!r} ({src.uri}) has no max_documents cap; set max_documents "
            f"(per file) and max_files, or set allow_unbounded = true to read it all on purpose"
        )
    return src


def _tokenizer(data: dict[str, Any], origin: str, base: Path | None) -> TokenizerSpec:
    """The [tokenizer] table; a relative `path` is resolved against `base`, as a source's uri is."""
    if isinstance(data.get("path"), str):
        data = {**data, "path": anchored(data["path"], base)}
    tok = spec_record(TokenizerSpec, data, f"{origin}: [tokenizer]")
    check_choice("kind", tok.kind, TOKENIZER_KINDS, f"{origin}: [tokenizer]")
    if tok.kind == "pretrained" and not tok.name:
        raise SpecError(f"{origin}: [tokenizer].name is needed for a pretrained tokenizer (Hub id or local path)")
    if tok.kind == "file" and not tok.path:
        raise SpecError(
            f'{origin}: [tokenizer].path is needed for kind = "file" (a tokenizer.json, relative to the spec\'s folder)'
        )
    if tok.fingerprint is not None and not FINGERPRINT.fullmatch(tok.fingerprint):
        raise SpecError(
            f"{origin}: [tokenizer].fingerprint {tok.fingerprint!r}: not a tokenizer fingerprint (16 lowercase hex "
            "digits, as `shard-loader info` prints it)"
        )
    if tok.kind != "file" and tok.path:
        raise SpecError(
            f'{origin}: [tokenizer].path is read only with kind = "file", not {tok.kind!r}; remove it or set kind = '
            '"file"'
        )
    return tok


def _decontaminate(data: Any, origin: str, base: Path | None) -> DecontaminateSpec | None:
    """The [decontaminate] table, its eval set globs resolved against `base` as a source's uri is."""
    where = f"{origin}: [decontaminate]"
    if data is None:
        return None
    if not isinstance(data, dict):
        raise SpecError(f"{where}: expected a table (against, ngram, mode), got {data!r}")
    against = data.get("against")
    if not isinstance(against, list) or not against or not all(isinstance(a, str) and a for a in against):
        raise SpecError(f'{where}.against: expected a list of eval set globs, e.g. ["evals/*.jsonl"], got {against!r}')
    data = {**data, "against": tuple(anchored(a, base) for a in against)}
    ngram = data.get("ngram", DecontaminateSpec.ngram)
    if not isinstance(ngram, int) or isinstance(ngram, bool) or not 8 <= ngram <= 50:
        raise SpecError(f"{where}.ngram: must be a whole number of words between 8 and 50, got {ngram!r}")
    table = spec_record(DecontaminateSpec, {k: v for k, v in data.items() if k not in ("against", "ngram")}, where)
    check_choice("mode", table.mode, DECONTAMINATE_MODES, where)
    return DecontaminateSpec(data["against"], ngram, table.mode, table.text_column)


def parse_spec(data: dict[str, Any], origin: str, base: Path | None = None) -> DatasetSpec:
    """A validated spec from parsed TOML; relative local uris are resolved against `base` (the spec's folder)."""
    data = dict(data)
    sources = data.pop("sources", None)
    if not sources:
        raise SpecError(f"{origin}: at least one [[sources]] entry is needed")
    tok = _tokenizer(data.pop("tokenizer", {}), origin, base)
    table = data.pop("dedup", {})
    if not isinstance(table, dict):
        raise SpecError(f"{origin}: dedup must be a [dedup] table (exact, near, threshold, ...), got {table!r}")
    dedup = spec_record(DedupSpec, table, f"{origin}: [dedup]")
    if dedup.ranges is not None and dedup.ranges & (dedup.ranges - 1):
        raise SpecError(f"{origin}: [dedup].ranges must be a power of two, got {dedup.ranges}")
    filters = parse_filters(data.pop("filters", {}), f"{origin}: [filters]")
    decontaminate = _decontaminate(data.pop("decontaminate", None), origin, base)
    parsed = tuple(_source(s, f"{origin}: sources[{i}]", base) for i, s in enumerate(sources))
    names = [s.name for s in parsed]
    if len(set(names)) != len(names):
        raise SpecError(f"{origin}: source names must be unique, got {names}")
    if isinstance(data.get("partition_bytes"), str):
        data["partition_bytes"] = parse_byte_count(data["partition_bytes"], f"{origin}: partition_bytes")
    tables = {"sources": parsed, "tokenizer": tok, "dedup": dedup, "filters": filters, "decontaminate": decontaminate}
    spec = spec_record(DatasetSpec, {**data, **tables, "origin": origin}, origin)
    if not 0.0 <= spec.val_fraction < 1.0:
        raise SpecError(f"{origin}: val_fraction must be in [0, 1), got {spec.val_fraction}")
    if spec.on_partition_failure not in FAILURE_POLICIES:
        raise SpecError(
            f"{origin}: on_partition_failure must be one of {FAILURE_POLICIES}, got {spec.on_partition_failure!r}"
        )
    check_choice("on_mismatch", spec.on_mismatch, ON_MISMATCH, origin)
    check_choice("stale_partitions", spec.stale_partitions, STALE_POLICIES, origin)
    if not SPEC_NAME.match(spec.name):
        raise SpecError(f"{origin}: name {spec.name!r} must be lowercase letters, digits, '-' or '_'")
    return spec


def load_spec(path: str | Path) -> DatasetSpec:
    """Read and validate a spec file."""
    if not path:
        raise SpecError(
            "no dataset spec given: pass --spec FILE or set SHARD_DATASET_SPEC (`shard-assets demo` writes one)"
        )
    path = Path(path)
    hint = (
        "run `shard-assets demo` to write the demo spec there"
        if path.as_posix().endswith(DEFAULT_SPEC)
        else "check --spec or SHARD_DATASET_SPEC"
    )
    text = read_user_file(path, str(path), "a dataset spec file", f"dataset spec file not found; {hint}", SpecError)
    return spec_from_text(text, path)


def spec_from_text(text: str, path: str | Path) -> DatasetSpec:
    """A spec from its TOML text, as if read from `path` (named in errors; its folder anchors relative source uris):
    how a run on a cluster node, which may not see the file, reads the spec it was given."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML ({exc})") from None
    return parse_spec(data, str(path), Path(path).resolve().parent)
