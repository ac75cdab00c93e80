"""Document identity and split: a stable 64-bit hash of the normalised text decides both.

Deduplication and the train/val split use the same hash, so re-tokenizing or adding raw
files never moves a document between splits.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable

import numpy as np

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_LINE_BREAK = re.compile(r"\r\n?")
_SURROGATE = re.compile("[\ud800-\udfff]")


def normalise(text: str) -> str:
    """NFC, CRLF and lone CR become LF (line breaks survive), C0/C1 controls removed (tab kept), lone surrogates become
    U+FFFD, outer whitespace stripped."""
    text = _LINE_BREAK.sub("\n", _SURROGATE.sub("\ufffd", text))
    return _CONTROL.sub("", unicodedata.normalize("NFC", text)).strip()


def doc_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def doc_hashes(texts: Iterable[str]) -> np.ndarray:
    return np.fromiter((doc_hash(t) for t in texts), dtype=np.uint64)


def is_val(hashes: np.ndarray, val_fraction: float) -> np.ndarray:
    """Boolean mask of documents in the val split: the top 53 bits of the hash as a uniform [0, 1)."""
    return (hashes >> np.uint64(11)).astype(np.float64) * (2.0**-53) < val_fraction
