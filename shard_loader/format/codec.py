"""The checked codec for stored records and saved states: frozen dataclasses written as JSON-able values and read back
with every field's type checked, a refusal naming where and the field (`.a.b[2]`). The builder's store records, the
loader's saved states, worker states and reader leases go through it, each naming the error it raises; the manifest
and the mixture file still use the checked getters of fields.py."""

from __future__ import annotations

import dataclasses
import functools
import json
import numbers
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import ManifestError
from .fields import loads

R = TypeVar("R")
Error = type[Exception]  # what a refusal raises: the caller's own error type


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
        raise _Invalid(f"expected {kind.__name__}, got {value!r}")

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


def _record(cls: type) -> Decoder:
    """A record from an object of its fields, or (written compact) a list of them in field order. Fields absent take
    their defaults (records written before the field existed); unknown ones are ignored (a newer builder's)."""
    hints = typing.get_type_hints(cls)
    fields = [
        (f.name, f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, _decoder(hints[f.name]))
        for f in dataclasses.fields(cls)
    ]

    def decode(value: Any) -> Any:
        if isinstance(value, list):
            if len(value) > len(fields):
                raise _Invalid(f"expected at most {len(fields)} fields, got {len(value)}")
            value = {name: v for (name, _, _), v in zip(fields, value)}
        data, values = _object(value), {}
        for name, required, field_decoder in fields:
            if name not in data:
                if required:
                    raise _Invalid(f"missing field {name!r}")
                continue
            try:
                values[name] = field_decoder(data[name])
            except _Invalid as exc:
                raise exc.within(f".{name}") from None
        return cls(**values)

    return decode


@functools.cache
def _decoder(kind: Any) -> Decoder:
    """The decoder of a record field's type: records, dict[str, T], tuple[T, ...], tuple[A, B], T | None, scalars."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
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
        fields = [(f.name, _encoder(hints[f.name], compact)) for f in dataclasses.fields(kind)]
        if compact:
            return lambda value: [encode(getattr(value, name)) for name, encode in fields]
        return lambda value: {name: encode(getattr(value, name)) for name, encode in fields}
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


def decode(cls: type[R], body: bytes | str, where: str, error: Error = ManifestError) -> R:
    """A record from its stored bytes; invalid JSON or a field of the wrong type is `error` naming `where`."""
    try:
        data = loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(f"{where}: not valid JSON ({exc})") from None
    return from_dict(cls, data, where, error)
