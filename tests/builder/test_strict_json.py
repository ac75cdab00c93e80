"""Duplicate JSON keys are refused, never read last-wins (#34 case 3): a mixture file with a second `components` key, a
manifest with a split object twice, a reader lease with `seconds` twice and a builder's state record with a field
twice are each refused in one line naming the document and the key, by the loader, `shard-loader verify` and `info`,
gc and the builder's record reader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shard_assets.lib.layout import CURRENT_TOKENIZER_KEY
from shard_assets.lib.records import RecordError, TokenizerRecord, find_record
from shard_assets.lib.store import LocalFolderStore
from shard_loader import ManifestError, TokenDataset
from shard_loader.format.leases import Lease, lease_key
from tests.support.mixture_files import Part, write_components, write_mixture
from tests.support.patience import HUNG
from tests.support.synthetic import random_docs, write_dataset

PARTS = [Part("web", (300,) * 2, 0.6, 0), Part("code", (200,) * 3, 0.3, 1), Part("math", (120,), 0.1, 2)]


def _with_twice(doc: dict, path: tuple[str, ...], key: str, first) -> str:
    """`doc` as JSON text with `key` written twice in the object at `path`: `first`, then the document's own value
    (the one a last-wins reader keeps)."""
    marker = "__SECOND_KEY__"
    target = doc
    for name in path:
        target = target[name]
    target = dict(target)
    own = target.pop(key)
    target[marker] = None
    text = json.dumps(target)
    inner = text.replace(f'"{marker}": null', f'"{key}": {json.dumps(first)}, "{key}": {json.dumps(own)}')
    if not path:
        return inner
    outer = json.loads(json.dumps(doc))
    holder = outer
    for name in path[:-1]:
        holder = holder[name]
    holder[path[-1]] = marker
    return json.dumps(outer).replace(f'"{marker}"', inner)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shard_loader.cli", *args], capture_output=True, text=True, timeout=HUNG
    )


def _one_line(out: subprocess.CompletedProcess, *parts: str) -> None:
    assert out.returncode == 2, (out.stdout, out.stderr)
    (line,) = out.stderr.strip().splitlines()
    assert all(p in line for p in parts), line


@pytest.mark.integration
def test_a_mixture_file_with_two_components_keys_is_refused_naming_it(tmp_path):
    write_components(tmp_path, PARTS)
    url = write_mixture(tmp_path, "blend", PARTS, tokens_per_epoch=4_000)
    doc = json.loads(Path(url).read_text())
    other = [dict(c, weight=w) for c, w in zip(doc["components"], (0.1, 0.1, 0.8))]  # what a last-wins reader served
    # the second `components` (other weights) is what a last-wins reader served
    Path(url).write_text(_with_twice({**doc, "components": other}, (), "components", doc["components"]))
    with pytest.raises(ManifestError, match=rf"^{url}: not valid JSON \(key 'components' appears twice in one object"):
        TokenDataset(url, seq_len=16, batch_size=2)
    _one_line(_cli("info", url), url, "'components' appears twice")


@pytest.mark.integration
def test_a_manifest_with_a_split_object_twice_is_refused_by_the_loader_and_verify(tmp_path):
    rng = np.random.default_rng(5)
    root = tmp_path / "pub"
    write_dataset(root, {"train": [random_docs(rng, 8)], "val": [random_docs(rng, 2)]})
    doc = json.loads((root / "manifest.json").read_text())
    forged = {**doc, "splits": {"train": doc["splits"]["train"], "val": doc["splits"]["train"]}}
    # val's own object first, then train's: a last-wins reader served train's table as val
    (root / "manifest.json").write_text(_with_twice(forged, ("splits",), "val", doc["splits"]["val"]))
    with pytest.raises(ManifestError, match=r"manifest.json: not valid JSON \(key 'val' appears twice in one object"):
        TokenDataset(str(root), split="val", seq_len=16, batch_size=2)
    _one_line(_cli("verify", str(root)), "manifest.json", "'val' appears twice")


def test_a_reader_lease_with_seconds_twice_is_refused_naming_its_key():
    key = lease_key("v1-0123456789abcdef", "pin-x")
    raw = _with_twice(
        {"format": "shard-reader-lease", "version": "v1-0123456789abcdef", "holder": "pin-x", "kind": "pin"}
        | {"seconds": 60},
        (),
        "seconds",
        1e6,
    )
    with pytest.raises(ManifestError, match=rf"^{key}: not a reader lease \(key 'seconds' appears twice"):
        Lease.parse(raw.encode(), key)


def test_a_builder_state_record_with_a_field_twice_is_refused_naming_it(tmp_path):
    store = LocalFolderStore(tmp_path)
    record = {"name": "t", "fingerprint": "b" * 16, "vocab_size": 300, "eod_id": 0, "token_dtype": "uint16"}
    (tmp_path / CURRENT_TOKENIZER_KEY).parent.mkdir(parents=True)
    (tmp_path / CURRENT_TOKENIZER_KEY).write_text(_with_twice(record, (), "fingerprint", "a" * 16))
    with pytest.raises(
        RecordError, match=rf"{CURRENT_TOKENIZER_KEY}: not valid JSON \(key 'fingerprint' appears twice"
    ):
        find_record(store, CURRENT_TOKENIZER_KEY, TokenizerRecord, "test")
