"""The one checked codec for every stored record, published document and saved state: frozen dataclasses written as
JSON-able values and read back with every field's type (and any `Check` a field is annotated with) checked, a refusal
naming where and the field (`.a.b[2]`). The manifest, the mixture file, the builder's store records, the loader's
saved states, worker states and reader leases go through it, each naming the error it raises."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import numbers
import re
import types
import typing
from collections import Counter
from collections.abc import Callable, Collection
from typing import Annotated, Any, TypeVar

from ..errors import ManifestError

R = TypeVar("R")
Error = type[Exception]  # what a refusal raises: the caller's own error type
MAX_DEPTH = 64  # levels of JSON nesting a published document may use
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
_STORED_AS = "stored_as"  # a field's metadata key: see stored_as


@dataclasses.dataclass(frozen=True)
class Check:
    """A condition on a field's decoded value, declared as `Annotated[T, Check(...)]`: `problem` says what is wrong
    with a value (None when it holds)."""

    problem: Callable[[Any], str | None]


Count = Annotated[int, Check(lambda v: None if v >= 0 else f"must not be negative, got {v}")]
NonEmpty = Annotated[str, Check(lambda v: None if v else "must not be empty")]
Sha256 = Annotated[str, Check(lambda v: None if SHA256_HEX.match(v) else f"{v!r} is not 64 lowercase hex digits")]
Positive = Annotated[
    float, Check(lambda v: None if math.isfinite(v) and v > 0 else f"must be a positive number, got {v!r}")
]


class _Invalid(Exception):
    """A value of the wrong shape; `path` grows from the field outwards as the error passes up."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message, self.path = message, ""

    def within(self, step: str) -> _Invalid:
        self.path = step + self.path
        return self


Decoder = Callable[[Any], Any]
Encoder = Callable[[Any], Any]


_NUMBERS = {int: numbers.Integral, float: numbers.Real}  # a state may hold numpy's (it was never JSON)


def _scalar(kind: type) -> Decoder:
    def decode(value: Any) -> Any:
        if type(value) is kind:
            return value
        if kind in _NUMBERS and isinstance(value, _NUMBERS[kind]) and not isinstance(value, bool):
            return kind(value)
        raise _Invalid(f"expected {'a number' if kind is float else kind.__name__}, got {value!r}")

    return decode


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Invalid(f"expected an object, got {type(value).__name__}")
    return value


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _Invalid(f"expected a list, got {type(value).__name__}")
    return value


def _mapping(values: Decoder) -> Decoder:
    def decode(value: Any) -> dict[str, Any]:
        out = {}
        for k, v in _object(value).items():
            try:
                out[k] = values(v)
            except _Invalid as exc:
                raise exc.within(f".{k}") from None
        return out

    return decode


def _sequence(items: tuple[Decoder, ...], variadic: bool) -> Decoder:
    def decode(value: Any) -> tuple[Any, ...]:
        found = _list(value)
        if not variadic and len(found) != len(items):
            raise _Invalid(f"expected {len(items)} items, got {len(found)}")
        out = []
        for i, v in enumerate(found):
            try:
                out.append((items[0] if variadic else items[i])(v))
            except _Invalid as exc:
                raise exc.within(f"[{i}]") from None
        return tuple(out)

    return decode


def _optional(inner: Decoder) -> Decoder:
    return lambda value: None if value is None else inner(value)


def stored_as(name: str | None) -> dict[str, str | None]:
    """A field's metadata: the name the field is stored under (`a.b`: `b` in the object `a`), or None for a field never
    stored (what a reader loads beside the record)."""
    return {_STORED_AS: name}


def _lookup(data: dict[str, Any], stored: str) -> tuple[Any, _Invalid | None]:
    """A field's value under its stored (dotted: nested) name, or, absent, the refusal to raise if it is required."""
    *outer, leaf = stored.split(".")
    where = ""
    for step in outer:
        if step not in data:
            return None, _Invalid(f"missing field {step!r}").within(where)
        where += f".{step}"
        try:
            data = _object(data[step])
        except _Invalid as exc:
            raise exc.within(where) from None
    if leaf not in data:
        return None, _Invalid(f"missing field {leaf!r}").within(where)
    return data[leaf], None


def _placed(values: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of stored names and values, a dotted name nested (the mirror of `_lookup`)."""
    out: dict[str, Any] = {}
    for stored, value in values:
        *outer, leaf = stored.split(".")
        holder = out
        for step in outer:
            holder = holder.setdefault(step, {})
        holder[leaf] = value
    return out


def _stored(cls: Any) -> list[tuple[str, dataclasses.Field[Any]]]:
    """A record's stored fields, in order, each with the name it is stored under."""
    fields = [(f.metadata.get(_STORED_AS, f.name), f) for f in dataclasses.fields(cls)]
    return [(name, f) for name, f in fields if name is not None]


def _record(cls: type) -> Decoder:
    """A record from an object of its fields, or (written compact) a list of them in field order. Fields absent take
    their defaults (records written before the field existed); unknown ones are ignored (a newer builder's)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = [
        (
            stored,
            "." in stored,
            f.name,
            dataclasses.MISSING is f.default and dataclasses.MISSING is f.default_factory,
            _decoder(hints[f.name]),
        )
        for stored, f in _stored(cls)
    ]
    any_nested = any(nested for _, nested, *_ in fields)

    def decode(value: Any) -> Any:
        if isinstance(value, list):  # compact: fields by position, a dotted one placed where its name says
            if len(value) > len(fields):
                raise _Invalid(f"expected at most {len(fields)} fields, got {len(value)}")
            pairs = [(stored, v) for (stored, *_), v in zip(fields, value)]
            value = _placed(pairs) if any_nested else dict(pairs)
        data, values = _object(value), {}
        for stored, nested, name, required, field_decoder in fields:
            if not nested and stored in data:  # a plain name, present: most fields of most records
                found = data[stored]
            else:  # absent, or under a dotted name (never read as a flat key of that name)
                found, absent = _lookup(data, stored)
                if absent is not None:
                    if required:
                        raise absent
                    continue
            try:
                values[name] = field_decoder(found)
            except _Invalid as exc:
                raise exc.within(f".{stored}") from None
        return cls(**values)

    return decode


def _checked(inner: Decoder, checks: tuple[Check, ...]) -> Decoder:
    def decode(value: Any) -> Any:
        value = inner(value)
        for check in checks:
            if (problem := check.problem(value)) is not None:
                raise _Invalid(problem)
        return value

    return decode


@functools.cache
def _decoder(kind: Any) -> Decoder:
    """The decoder of a record field's type: records, dict[str, T], tuple[T, ...], tuple[A, B], T | None, scalars."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Annotated:
        return _checked(_decoder(args[0]), args[1:])
    if dataclasses.is_dataclass(kind):
        return _record(typing.cast(type, kind))
    if origin is dict:
        return _mapping(_decoder(args[1]))
    if origin is tuple:
        variadic = len(args) == 2 and args[1] is Ellipsis
        return _sequence(tuple(_decoder(a) for a in (args[:1] if variadic else args)), variadic)
    if origin in (typing.Union, types.UnionType) and type(None) in args and len(args) == 2:
        return _optional(_decoder(next(a for a in args if a is not type(None))))
    if kind in (int, str, float, bool):
        return _scalar(kind)
    if kind is Any:  # free-form JSON a record carries as is (a mixture's lineage)
        return _same
    raise TypeError(f"records cannot hold a {kind!r}")


def from_dict(cls: type[R], data: Any, where: str, error: Error = ManifestError) -> R:
    """`cls` built from a JSON value with every field's type checked; a refusal is `error` naming `where` and the
    field."""
    try:
        return typing.cast(R, _decoder(typing.cast(Any, cls))(data))
    except _Invalid as exc:
        raise error(f"{where}{exc.path}: {exc.message}") from None


def _same(value: Any) -> Any:
    return value


@functools.cache
def _encoder(kind: Any, compact: bool) -> Encoder:
    """The encoder of a record field's type into JSON-able values (tuples as lists), the mirror of `_decoder`;
    `compact` writes records as lists of their fields in order (so a compact record gains fields only at its end)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(typing.cast(type, kind))
        fields = [(stored, f.name, _encoder(hints[f.name], compact)) for stored, f in _stored(kind)]
        if compact:
            return lambda value: [encode(getattr(value, name)) for _, name, encode in fields]
        if any("." in stored for stored, _, _ in fields):
            return lambda value: _placed([(stored, encode(getattr(value, name))) for stored, name, encode in fields])
        return lambda value: {stored: encode(getattr(value, name)) for stored, name, encode in fields}
    if origin is dict:
        values = _encoder(args[1], compact)
        return dict if values is _same else lambda value: {k: values(v) for k, v in value.items()}
    if origin is tuple:
        variadic = len(args) == 2 and args[1] is Ellipsis
        items = _encoder(args[0], compact) if variadic or len(set(args)) == 1 else None
        if items is _same:
            return list
        if items is not None:
            return lambda value: [items(v) for v in value]
        each = [_encoder(a, compact) for a in args]
        return lambda value: [encode(v) for encode, v in zip(each, value)]
    if origin in (typing.Union, types.UnionType) and type(None) in args and len(args) == 2:
        inner = _encoder(next(a for a in args if a is not type(None)), compact)
        return _same if inner is _same else lambda value: None if value is None else inner(value)
    if kind in (int, str, float, bool) or kind is Any:
        return _same
    raise TypeError(f"records cannot hold a {kind!r}")


def to_plain(record: Any, compact: bool = False) -> Any:
    """A record as JSON-able values: an object of named fields (tuples as lists), or `compact`, each record a list of
    its fields in order."""
    return _encoder(typing.cast(Any, type(record)), compact)(record)


def to_json(record: Any, compact: bool = False) -> bytes:
    """A record's JSON: objects of named fields, indented, for reading in a bucket browser; or `compact`, for large
    ones (the discovery index: 30,000 partitions in a few MB)."""
    if compact:
        return json.dumps(to_plain(record, compact), separators=(",", ":")).encode()
    return (json.dumps(to_plain(record), indent=2, sort_keys=True) + "\n").encode()


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        twice = next(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
        raise ValueError(f"key {twice!r} appears twice in one object; a reader would see only one of its values")
    return obj


def loads(raw: bytes | str) -> Any:
    """`json.loads` that refuses a key written twice in one object (read last-wins, a forged second `components` or
    split would be served unseen): a ValueError naming the key, as for any other invalid JSON."""
    return json.loads(raw, object_pairs_hook=_unique)


def parse_json(raw: bytes | str, where: str, error: Error = ManifestError) -> Any:
    """The JSON value of a stored document, each key once per object and no deeper than MAX_DEPTH (deeper nesting
    exhausts Python's recursion when it is printed); anything else is `error` naming `where`."""
    try:
        doc = loads(raw)
    except RecursionError:
        raise error(
            f"{where}: nests deeper than Python can parse; a document nests at most {MAX_DEPTH} levels"
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(f"{where}: not valid JSON ({exc})") from None
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise error(f"{where}: nests deeper than {MAX_DEPTH} levels; a manifest or lineage file nests far less")
        children = value.values() if isinstance(value, dict) else value
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return doc


def decode(cls: type[R], body: bytes | str, where: str, error: Error = ManifestError) -> R:
    """A record from its stored bytes; invalid JSON or a field of the wrong type is `error` naming `where`."""
    return from_dict(cls, parse_json(body, where, error), where, error)


@dataclasses.dataclass(frozen=True)
class _Header:
    format: str
    format_version: int


def document_version(doc: Any, where: str, name: str, readable: Collection[int]) -> int:
    """A published document's `format_version`, once its `format` is `name` and this reader knows the version (read
    before the rest, so a newer format is named as such rather than as a missing field)."""
    header = from_dict(_Header, doc, where)
    if header.format != name:
        raise ManifestError(f"{where}: format is {header.format!r}, expected {name!r}")
    if header.format_version not in readable:
        raise ManifestError(
            f"{where}: format_version {header.format_version} is not supported (this reader knows {list(readable)}); "
            "upgrade shard_loader"
        )
    return header.format_version
