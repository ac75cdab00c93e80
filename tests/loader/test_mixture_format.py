"""The mixture file has one definition (shard_loader/format/mixture.py): what the builder writes from the typed
records, the loader's parser reads back equal, and every field the parser checks is one the writer writes."""

import json

import pytest

from shard_assets.lib.mixture.components import mixture_version
from shard_loader.errors import ManifestError
from shard_loader.format import (
    Component,
    MixtureFile,
    MixtureTokenizer,
    PinnedManifest,
    live_mixture_key,
    mixture_version_key,
    parse_mixture,
)
from tests.support.mixture_files import MIXTURE_KEYS

OPTIONAL = {
    ("lineage",),
    ("components", 0, "max_repeats"),
    ("components", 1, "max_repeats"),
}  # the parser's defaults: {} and null


def _mixture() -> MixtureFile:
    web = PinnedManifest("web/manifests/web-0.json", 1834, "ab" * 32)
    code = PinnedManifest("s3://bucket/code/manifests/code-1.json", 99, "cd" * 32)
    components = (
        Component("web", 0.75, web, "web", "web-0", {"train": 3000, "val": 30}),
        Component("code", 0.25, code, "code", "code-1", {"train": 100, "val": 5}, 4.0),
    )
    tokens = {"train": 4000, "val": 20}
    tokenizer = MixtureTokenizer("f" * 16, 300, 0, "uint16")
    return MixtureFile(
        "blend",
        mixture_version("blend", tokens, components),
        "2026-11-23T12:00:00Z",
        tokenizer,
        tokens,
        components,
        {"run_id": "r"},
    )


def _leaves(doc, path=()):
    """Every path to a field of the written document; a table keyed by the file's own names (the lineage, tokens by
    split) counts as one field."""
    if isinstance(doc, dict) and (not path or path[-1] not in ("lineage", "tokens", "tokens_per_epoch")):
        for k, v in doc.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, (*path, i))
    else:
        yield path


def _without(doc, path):
    doc = json.loads(json.dumps(doc))
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    del parent[path[-1]]
    return json.dumps(doc)


def test_what_the_builder_writes_the_loader_reads_back_equal():
    m = _mixture()
    assert parse_mixture(m.dumps(), "test") == m
    doc = json.loads(m.dumps())
    assert list(doc) == MIXTURE_KEYS
    assert doc["components"][0]["manifest"] == {"url": "web/manifests/web-0.json", "size": 1834, "sha256": "ab" * 32}
    assert doc["components"][1]["max_repeats"] == 4.0 and doc["components"][0]["max_repeats"] is None


def test_every_field_the_parser_checks_is_one_the_writer_writes():
    doc = _mixture().to_json()
    leaves = set(_leaves(doc))
    assert len(leaves) == 29
    for path in sorted(leaves - OPTIONAL, key=str):
        name = str(path[-1])
        with pytest.raises(ManifestError, match=f"missing field '{name}'|expected an object"):
            parse_mixture(_without(doc, path), "test")
    assert parse_mixture(_without(doc, ("lineage",)), "test").lineage == {}
    assert [
        c.max_repeats for c in parse_mixture(_without(doc, ("components", 1, "max_repeats")), "test").components
    ] == [None, None]


def test_the_store_keys_of_a_mixture_are_built_in_one_place():
    m = _mixture()
    assert live_mixture_key(m.name) == "mixtures/blend.json"
    assert mixture_version_key(m.name, m.version) == f"mixtures/blend/{m.version}.json"
    with pytest.raises(ManifestError, match="mixture name"):
        live_mixture_key("../up")
