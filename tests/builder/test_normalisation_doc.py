"""docs/format.md's normalisation and split hash say what shard_assets/lib/text.py does (#34 case 15): each stated
step and the hash's byte order, checked on examples against the code."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np

from shard_assets.lib.text import is_val

from tests.support.texts import doc_hash, normalise

DOC = (Path(__file__).resolve().parents[2] / "docs" / "format.md").read_text()
SECTION = " ".join(DOC[DOC.index("A document's split is decided") : DOC.index("## Manifest")].split())


def test_the_doc_states_each_step_in_the_codes_order():
    steps = [
        "each lone surrogate (U+D800 to U+DFFF, which UTF-8 cannot encode) becomes U+FFFD",
        "CRLF and a lone CR become LF",
        "Unicode NFC",
        "C0 and C1 control characters (U+0000 to U+0008, U+000B to U+001F, U+007F to U+009F) are removed: tab and "
        "newline stay",
        "outer whitespace (Python's `str.strip`) is stripped",
    ]
    places = [SECTION.index(step) for step in steps]
    assert places == sorted(places)
    assert "BLAKE2b with an 8-byte digest over the UTF-8 bytes" in SECTION
    assert 'read as a **little-endian** unsigned 64-bit integer (`int.from_bytes(digest, "little")`' in SECTION


def test_the_code_does_what_the_doc_states_on_examples():
    assert normalise("a\r\nb\rc\nd") == "a\nb\nc\nd"  # CRLF and lone CR to LF
    assert normalise("x\ud800y\udfffz") == "x\ufffdy\ufffdz"  # lone surrogates to U+FFFD
    assert normalise("e\u0301") == "\u00e9"  # NFC
    assert normalise("a\x00b\x08c\x0bd\x1fe\x7ff\x9fg\th\ni") == "abcdefg\th\ni"  # controls gone, tab and LF kept
    assert normalise(" \u3000 text \n\t") == "text"  # outer whitespace, Unicode's too
    assert normalise("\ud800\r") == "\ufffd"  # surrogates first: the replacement is not stripped; the CR's LF is
    text = normalise("Caf\u0065\u0301 \r\n\ud83d")
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    assert doc_hash(text) == int.from_bytes(digest, "little") != int.from_bytes(digest, "big")
    h = np.array([doc_hash(text)], dtype=np.uint64)
    assert bool(is_val(h, 0.5)[0]) == ((int(h[0]) >> 11) / 2**53 < 0.5)
    assert re.search(r"top 53 bits \(`hash >> 11`\), read as a fraction of 2\^53, are below `val_fraction`", SECTION)
