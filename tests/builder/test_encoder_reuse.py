"""Issue 35: the encoders are built once per process for a tokenizer file (by its fingerprint) and reused by every
partition and run after it; another tokenizer gets its own, and the guard still compares every partition."""

from shard_assets.lib.encoders import ExactnessGuard, encoders_of
from shard_assets.lib.spec import TokenizerSpec
from shard_assets.lib.tokenizer import build_tokenizer, fingerprint_of

DOCS = [f"document {i}: the quick brown fox {i * 7} jumps over the lazy dog" for i in range(300)]


def test_encoders_are_built_once_per_tokenizer_and_reused():
    loads = []

    def loader(text):
        return lambda: loads.append(text) or text

    first, _ = build_tokenizer(TokenizerSpec(vocab_size=300), iter(DOCS))
    second, _ = build_tokenizer(TokenizerSpec(vocab_size=320), iter(DOCS))
    a = encoders_of(fingerprint_of(first), loader(first))
    assert encoders_of(fingerprint_of(first), loader(first)) is a  # a second run in the worker: not read again
    b = encoders_of(fingerprint_of(second), loader(second))
    assert b is not a and b[0] is not a[0] and loads == [first, second]
    assert encoders_of(fingerprint_of(first), loader(first)) is a and len(loads) == 2

    engine, reference = a
    for _ in range(2):  # each partition of each run gets its own guard over the shared encoders
        guard = ExactnessGuard(engine, reference, "p", len(DOCS))
        encoded = engine.encode(DOCS)
        guard.check(DOCS, encoded)
        assert guard.finish().sampled >= 64 and guard.differing == 0
