"""Document identity and split: the normalisation rule, and a stable 64-bit hash of the normalised text that decides
both deduplication and the train/val split (re-tokenizing or adding raw files never moves a document between splits).

Both are the published format and run on Arrow columns, not per document in Python: the rule is NFC, CRLF and lone CR
become LF (line breaks survive), C0/C1 controls removed (tab kept), lone surrogates become U+FFFD, outer whitespace (as
Python's `str.strip` sees it) stripped. NFC is Python's `unicodedata` (the Unicode version the format was published
with, not Arrow's), applied only to documents holding a character that NFC could change: by UAX #15's quick check a text
whose every character has canonical combining class 0 and NFC_Quick_Check=Yes is already NFC.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from functools import cache
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

_SURROGATE = re.compile("[\ud800-\udfff]")
_LINE_BREAK = r"\r\n?"
_CONTROL = r"[\x{00}-\x{08}\x{0b}-\x{1f}\x{7f}-\x{9f}]"
_SPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace())  # str.strip's whitespace (none above U+3000)


@cache
def _nfc_sensitive() -> str:
    """The RE2 class ranges of the characters that can make Python's NFC change a text: a nonzero combining class, a
    canonical decomposition that NFC does not restore (NFC_Quick_Check=No), or the second half of a canonical pair
    (=Maybe)."""
    chars = set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))  # Hangul vowel and trailing jamo compose
    for i in range(0x110000):
        c = chr(i)
        if unicodedata.combining(c):
            chars.add(i)
        elif (d := unicodedata.decomposition(c)) and d[0] != "<":
            if unicodedata.normalize("NFC", c) != c:
                chars.add(i)
            if len(parts := d.split()) == 2:
                chars.add(int(parts[1], 16))
    ranges: list[list[int]] = []
    for i in sorted(chars):
        if ranges and ranges[-1][1] == i - 1:
            ranges[-1][1] = i
        else:
            ranges.append([i, i])
    return "".join(rf"\x{{{a:x}}}-\x{{{b:x}}}" for a, b in ranges)


@cache
def _nfc_or_control() -> str:
    """An RE2 class of the characters NFC could change or the rule removes."""
    return f"[{_nfc_sensitive()}{_CONTROL[1:-1]}]"


def to_arrow(texts: list[str]) -> pa.Array:
    """Python texts as a large_string column, lone surrogates (which UTF-8 cannot hold) replaced by U+FFFD."""
    import pyarrow as pa

    try:
        return pa.array(texts, pa.large_string())
    except (pa.ArrowException, UnicodeError):
        return pa.array([_SURROGATE.sub("\ufffd", t) for t in texts], pa.large_string())


def normalise_column(texts: pa.Array) -> pa.Array:
    """The normalisation rule over a string column (`to_arrow`'s, or a parquet file's), as large_string."""
    import pyarrow as pa
    import pyarrow.compute as pc

    texts = pc.replace_substring_regex(texts.cast(pa.large_string()), _LINE_BREAK, "\n")
    picked = pc.match_substring_regex(texts, _nfc_or_control())  # one scan; most documents need neither step
    if pc.any(picked).as_py():
        nfc = pa.array(
            [unicodedata.normalize("NFC", t) for t in pc.filter(texts, picked).to_pylist()], pa.large_string()
        )
        texts = pc.replace_with_mask(texts, picked, pc.replace_substring_regex(nfc, _CONTROL, ""))
    return pc.utf8_trim(texts, characters=_SPACE)


def text_buffers(texts: pa.Array) -> tuple[np.ndarray, memoryview]:
    """A large_string column's text offsets and the data buffer they index (empty where the column has none)."""
    _, offsets, data = texts.buffers()
    bounds = np.frombuffer(offsets, dtype=np.int64)[texts.offset : texts.offset + len(texts) + 1]
    return bounds, memoryview(data if data is not None else b"")


def column_hashes(texts: pa.Array) -> np.ndarray:
    """blake2b-64 (little-endian) of each text's UTF-8 bytes, read from the column's buffers (no Python strings)."""
    import pyarrow as pa

    texts = texts.cast(pa.large_string())
    offsets, view = text_buffers(texts)
    bounds = offsets.tolist()
    digests = b"".join(hashlib.blake2b(view[a:b], digest_size=8).digest() for a, b in zip(bounds, bounds[1:]))
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)


def is_val(hashes: np.ndarray, val_fraction: float) -> np.ndarray:
    """Boolean mask of documents in the val split: the top 53 bits of the hash as a uniform [0, 1)."""
    return (hashes >> np.uint64(11)).astype(np.float64) * (2.0**-53) < val_fraction
