"""The loader and `verify` judge a manifest's shard tables alike (#34 case 4): a key listed in both the train and the
val table is refused by the loader for either split, as `verify` and the publish audit refuse it; and `verify` refuses a
shard whose table row says 0 tokens (or any count its files do not hold), as the loader does when it maps it."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from shard_loader import ManifestError, TokenDataset
from tests.support.http_server import FolderServer
from tests.support.patience import HUNG
from tests.support.synthetic import random_docs, tamper_json, write_dataset

pytestmark = pytest.mark.integration


def _published(root):
    rng = np.random.default_rng(11)
    return write_dataset(root, {"train": [random_docs(rng, 6) for _ in range(3)], "val": [random_docs(rng, 3)]})


def _verify(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shard_loader.cli", "verify", *args], capture_output=True, text=True, timeout=HUNG
    )


@pytest.mark.parametrize("split", ["val", "train"])
def test_a_key_in_both_splits_tables_is_refused_by_the_loader_as_by_verify(tmp_path, split):
    root = tmp_path / "pub"
    m = _published(root)
    shared = m.splits["train"].shards[0]

    def edit(doc):  # val's table also lists train's first shard: val would serve training data
        val = doc["splits"]["val"]
        val["shards"].append(doc["splits"]["train"]["shards"][0])
        val.update(tokens=val["tokens"] + shared.tokens, documents=val["documents"] + shared.documents)

    tamper_json(root, edit)
    both = rf"key {shared.npy.key.removesuffix('.npy')}\.(npy|bin) is listed in split 'train' and in split 'val'"
    said = _verify(str(root))
    assert said.returncode == 2 and re.search(both, said.stderr), said.stderr
    with pytest.raises(ManifestError, match=both):
        TokenDataset(str(root), split=split, seq_len=16, batch_size=2)
    with FolderServer(root) as server:  # remote: the other split's table is read (and cached) to check it
        with pytest.raises(ManifestError, match="is listed in split 'train' and in split 'val'"):
            TokenDataset(f"{server.url}/manifest.json", split=split, seq_len=16, batch_size=2, cache_dir=tmp_path / "c")


def test_verify_refuses_a_shard_whose_row_says_0_tokens_as_the_loader_does(tmp_path):
    root = tmp_path / "pub"
    m = _published(root)
    forged = m.splits["train"].shards[1]

    def edit(doc):  # the row says 0 tokens; its files (sizes, sha256) are untouched, the split's total agrees
        train = doc["splits"]["train"]
        train["shards"][1]["tokens"] = 0
        train["tokens"] -= forged.tokens

    tamper_json(root, edit)
    with pytest.raises(Exception, match=rf"{forged.npy.key}: holds {forged.tokens} tokens, manifest says 0"):
        list(TokenDataset(str(root), seq_len=16, batch_size=2, window_shards=2))  # the loader, mapping the shard
    said = _verify(str(root))
    assert said.returncode == 1, said.stdout
    assert f"BAD      {forged.npy.key}: holds {forged.tokens} tokens, manifest says 0" in said.stdout, said.stdout
    assert "1 bad of" in said.stdout
