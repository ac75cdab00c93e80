"""The loader reads `.npy` headers without `ast` (issue 34's cache work met it in CI): numpy parses a header with
`ast.literal_eval`, and CPython before 3.11.8 / 3.12.1 can fail an `ast.parse` that runs while another thread's does
("SystemError: AST constructor recursion depth mismatch", gh-106905). A DataLoader worker's prefetch thread opened
shards while something else in the process parsed (Python 3.11's tracebacks parse source lines for their carets),
and the worker died. The header is read by a strict parser instead: the same result as numpy's for every header
numpy writes, and a clear error for any other."""

import ast
import io

import numpy as np
import pytest

from shard_loader.format.shard import read_npy_header
from shard_loader.format.table import FIELDS

DTYPES = ["<u2", "<u4", "<i8", ">f4", "|u1", "|S96", "|O", np.dtype([(name, "<i8") for name in FIELDS])]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(0,), (1,), (12_345,), (3, 4), ()])
@pytest.mark.parametrize("version", [(1, 0), (2, 0)])
def test_every_header_numpy_writes_reads_as_numpy_reads_it(dtype, shape, version):
    buf = io.BytesIO()
    array = np.empty(shape, dtype=dtype)
    np.lib.format.write_array(buf, array, version=version, allow_pickle=True)
    raw = buf.getvalue()
    mine = io.BytesIO(raw)
    theirs = io.BytesIO(raw)
    np.lib.format.read_magic(theirs)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    assert read_npy_header(mine) == read(theirs)
    assert mine.tell() == theirs.tell()  # positioned at the data


def test_no_header_is_parsed_with_ast(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("ast.literal_eval called")

    monkeypatch.setattr(ast, "literal_eval", refuse)
    buf = io.BytesIO()
    np.save(buf, np.zeros(7, dtype=np.uint16))
    assert read_npy_header(io.BytesIO(buf.getvalue()))[0] == (7,)


@pytest.mark.parametrize(
    "header",
    [
        "{'descr': '<u2', 'fortran_order': False, 'shape': (7,), 'extra': 1, }",
        "{'descr': '<u2', 'fortran_order': False, 'shape': (__import__('os'),), }",
        "{'descr': '<u2', 'fortran_order': Maybe, 'shape': (7,), }",
        "{'shape': (7,), 'descr': '<u2', 'fortran_order': False}",
    ],
)
def test_any_other_header_is_a_value_error_naming_it(header):
    text = (header + " " * (64 - (10 + len(header) + 1) % 64) + "\n").encode("latin1")
    raw = np.lib.format.magic(1, 0) + len(text).to_bytes(2, "little") + text
    with pytest.raises(ValueError, match="not a header numpy writes"):
        read_npy_header(io.BytesIO(raw))
