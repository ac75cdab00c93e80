"""The first read path: open a manifest, verify, memory-map, iterate sequences."""

import numpy as np
import pytest

import shard_loader
from tests.support.synthetic import random_docs, write_dataset


def test_sequences_are_consecutive_tokens_with_shifted_labels(tmp_path):
    docs = [np.arange(1 + 1000 * i, 1000 * (i + 1)) for i in range(40)]  # every token id unique, EOD is 0
    m = write_dataset(tmp_path, {"train": [docs[:25], docs[25:]]})
    tokens = [np.load(tmp_path / e.npy.key) for e in m.splits["train"].shards]
    batches = list(shard_loader.iter_sequences(str(tmp_path), "train", seq_len=64, batch_size=4))
    assert len(batches) == sum(((len(t) - 65) // 64 + 1) // 4 for t in tokens)  # one window per shard by default
    b = batches[0]
    assert b["input_ids"].dtype == np.int64 and b["input_ids"].shape == (4, 64) and b["labels"].shape == (4, 64)
    for row, labels in zip(b["input_ids"], b["labels"]):
        shard = next(t for t in tokens if row[0] in t[:-65])
        start = int(np.flatnonzero(shard == row[0])[0])
        assert start % 64 == 0
        np.testing.assert_array_equal(row, shard[start : start + 64])
        np.testing.assert_array_equal(labels, shard[start + 1 : start + 65])


def test_tampered_shard_is_refused_naming_the_key(tmp_path):
    rng = np.random.default_rng(1)
    m = write_dataset(tmp_path, {"train": [random_docs(rng, 20)]})
    key = m.splits["train"].shards[0].npy.key
    path = tmp_path / key
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(shard_loader.IntegrityError, match=key):
        next(shard_loader.iter_sequences(str(tmp_path), "train", seq_len=16, batch_size=1))
