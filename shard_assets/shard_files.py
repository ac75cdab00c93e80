"""Write a shard's `.npy` token array and `.bin` offsets incrementally, without holding it in memory.

The `.npy` header is written last into space reserved up front: a 1-D header always fits
in 128 bytes, so tokens stream to their final place.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

HEADER_BYTES = 128


def npy_header(dtype: str, count: int) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": (count,)})
    header = buf.getvalue()
    if len(header) != HEADER_BYTES:
        raise AssertionError(f"npy header for {count} tokens is {len(header)} bytes, expected {HEADER_BYTES}")
    return header


class ShardWriter:
    """Appends documents (tokens already followed by the end-of-document id) to one shard's two files."""

    def __init__(self, npy_path: Path, bin_path: Path, dtype: str):
        self.npy_path, self.bin_path, self.dtype = npy_path, bin_path, dtype
        self._npy = open(npy_path, "wb")
        self._npy.write(b"\0" * HEADER_BYTES)
        self._bin = open(bin_path, "wb")
        self._bin.write(np.zeros(1, dtype="<i8").tobytes())
        self.tokens = 0
        self.documents = 0

    def append(self, tokens: np.ndarray, doc_lengths: np.ndarray) -> None:
        """`tokens` is the concatenation of documents whose lengths (EOD included) are `doc_lengths`."""
        self._npy.write(np.ascontiguousarray(tokens, dtype=self.dtype).tobytes())
        ends = self.tokens + np.cumsum(doc_lengths, dtype=np.int64)
        self._bin.write(ends.astype("<i8").tobytes())
        self.tokens += int(tokens.shape[0])
        self.documents += int(doc_lengths.shape[0])

    def close(self) -> None:
        self._npy.seek(0)
        self._npy.write(npy_header(self.dtype, self.tokens))
        self._npy.close()
        self._bin.close()

    def abort(self) -> None:
        self._npy.close()
        self._bin.close()
        self.npy_path.unlink(missing_ok=True)
        self.bin_path.unlink(missing_ok=True)
