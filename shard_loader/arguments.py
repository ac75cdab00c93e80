"""Checks of the loader's constructor arguments: each failure names the argument and what it got."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .errors import ShardLoaderError

_UNITS = dict(TIB=1 << 40, GIB=1 << 30, MIB=1 << 20, KIB=1 << 10, TB=10**12, GB=10**9, MB=10**6, KB=10**3, B=1)


class ArgumentError(ShardLoaderError, ValueError):
    """A constructor argument has the wrong type or an impossible value."""


def integer(name: str, value: Any, minimum: int) -> int:
    """`value` if it is an int (not a bool) of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ArgumentError(f"{name} must be at least {minimum}, got {value}")
    return value


def optional_integer(name: str, value: Any, minimum: int) -> int | None:
    return None if value is None else integer(name, value, minimum)


def flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ArgumentError(f"{name} must be True or False, got {value!r}")
    return value


def text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ArgumentError(f"{name} must be a non-empty string, got {value!r}")
    return value


def optional_path(name: str, value: Any) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, (str, Path)) or not str(value):
        raise ArgumentError(f"{name} must be a path (str or Path), got {value!r}")
    return Path(value)


def optional_mapping(name: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ArgumentError(f"{name} must be a dict, got {value!r}")
    return value


def size_in_bytes(name: str, value: Any) -> int | None:
    """Bytes from a positive int or a string such as '200GB', '512MiB', '1.5TB'; None stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        number = value.strip().upper().replace(" ", "")
        factor = next((f for unit, f in _UNITS.items() if number.endswith(unit)), 1)
        number = number.rstrip("KMGTIB")
        try:
            value = int(float(number) * factor)
        except (ValueError, OverflowError):  # not a number, or infinite ('1e400GB')
            raise ArgumentError(
                f"{name} must be a byte count or a size such as '200GB' or '512MiB', got {value!r}"
            ) from None
    return integer(name, value, 1)


_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
MAX_DAYS = 36500  # the longest duration accepted anywhere (a lease, a pin, gc's ages): 100 years, a date clocks have
MAX_SECONDS = MAX_DAYS * _SECONDS["d"]


def duration(name: str, text: str) -> float:
    """Seconds from '90s', '15m', '12h', '30d' or bare seconds, from 0 to MAX_DAYS days; errors name the option."""
    value, unit = (text[:-1], text[-1]) if text and text[-1] in _SECONDS else (text, "s")
    try:
        seconds = float(value) * _SECONDS[unit]
    except ValueError:
        raise ArgumentError(f"{name}: {text!r} is not a duration; write e.g. 30d, 12h, 15m or 90s") from None
    if not 0 <= seconds <= MAX_SECONDS:  # NaN fails this too
        problem = "negative" if seconds < 0 else "not a number" if math.isnan(seconds) else "too long"
        raise ArgumentError(f"{name}: {text!r} is {problem}; durations are from 0 to {MAX_DAYS}d (100 years)")
    return seconds
