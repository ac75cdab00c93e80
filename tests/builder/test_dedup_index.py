"""The dedup index without Dagster: its [dedup] settings, near-copy keys, and updates that stay whole when they crash,
wait for each other, do not depend on the number of hash ranges, and keep the joining order when settings change."""

import json
import random
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

from shard_assets.lib.curation import dedup as dedup_lib
from shard_assets.lib.curation.dedup import index_lock, load_range, update_index
from shard_assets.lib.curation import dedup_near
from shard_assets.lib.curation.dedup_near import DEFAULT_LAYOUT, band_keys
from shard_assets.lib.curation.dedup_records import DedupMembers
from shard_assets.lib.discovery import discover
from shard_assets.lib.errors import DedupError, SpecError
from shard_assets.lib.layout import DEDUP_LOCK_KEY, DEDUP_MEMBERS_KEY
from shard_assets.lib.partitioning import PartitionPolicy
from shard_assets.lib.raw_writer import build_raw
from shard_assets.lib.records import get_record
from shard_assets.lib.spec import DedupSpec, parse_spec
from shard_assets.lib.state import registered_partition
from shard_assets.lib.store import LocalFolderStore

RNG_WORDS = [f"w{i}x" for i in range(3000)]


def _text(rng: random.Random, n: int = 120) -> str:
    return " ".join(rng.choice(RNG_WORDS) for _ in range(n))


def _spec(src, dedup: dict | None = None):
    data = {"name": "t", "min_chars": 1, "sources": [{"name": "web", "uri": f"{src}/*.jsonl", "format": "jsonl"}]}
    return parse_spec({**data, **({} if dedup is None else {"dedup": dedup})}, "spec.toml")


def _corpus(tmp_path) -> dict[str, list[str]]:
    """Three files: `b` repeats 20 of `a`'s documents, `c` 10 of `a`'s and 10 of `b`'s own."""
    rng = random.Random(7)
    a = [_text(rng) for _ in range(60)]
    b = a[:20] + [_text(rng) for _ in range(30)]
    c = a[40:50] + b[30:40] + [_text(rng) for _ in range(5)]
    files = {"a": a, "b": b, "c": c}
    (tmp_path / "src").mkdir(exist_ok=True)
    for name, texts in files.items():
        (tmp_path / "src" / f"{name}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return files


def _ingest(tmp_path, spec, store):
    """Register the source's files and build each partition's raw documents, as ingest_job does."""
    discover(store, spec, PartitionPolicy())
    for p in ("web.a", "web.b", "web.c"):
        build_raw(store, spec, p, registered_partition(store, p), tmp_path, "run-1")


def _dropped(decisions) -> dict[str, dict[str, dict[str, int]]]:
    return {p: d.dropped for p, d in decisions.items()}


def test_the_dedup_table_is_checked_like_the_rest_of_the_spec(tmp_path):
    assert _spec(tmp_path).dedup == DedupSpec()  # exact on, near off by default
    with pytest.raises(SpecError, match=r"spec.toml: \[dedup\]: unknown field 'treshold'; did you mean 'threshold'"):
        _spec(tmp_path, {"treshold": 0.9})
    with pytest.raises(SpecError, match=r"\[dedup\].threshold: must be between 0.01 and 1.0, got 1.5"):
        _spec(tmp_path, {"threshold": 1.5})
    with pytest.raises(SpecError, match=r"\[dedup\].ranges must be a power of two, got 100"):
        _spec(tmp_path, {"ranges": 100})
    with pytest.raises(SpecError, match=r"\[dedup\].near: expected bool, got 'yes'"):
        _spec(tmp_path, {"near": "yes"})
    with pytest.raises(SpecError, match=r"spec.toml: dedup must be a \[dedup\] table .*got True"):
        _spec(tmp_path, True)


def test_band_keys_are_shared_by_near_copies_and_not_by_other_documents():
    rng = random.Random(1)
    text = _text(rng, 300)
    words = text.split()
    words[150] = "changed"
    other = _text(rng, 300)
    keys = band_keys(pa.array([text, " ".join(words), other]), ngram=5, threshold=0.8, num_perm=128)
    assert keys.dtype == np.uint64 and keys.shape[0] == 3
    assert (keys[0] == keys[1]).any() and not np.isin(keys[2], keys[:2]).any()
    assert (band_keys(pa.array([text]), 5, 0.8, 128) == keys[:1]).all()  # the same in every run


def test_the_default_band_layout_is_the_one_datasketch_chooses():
    from datasketch import MinHashLSH

    for (threshold, num_perm), layout in DEFAULT_LAYOUT.items():
        lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
        assert (lsh.b, lsh.r) == layout


def test_near_keys_read_the_words_str_split_reads_wherever_the_document_lies_in_a_batch(monkeypatch):
    """Words are str.split's (Unicode spaces included, case kept), hashed from the column's bytes: a document's keys
    do not depend on its spacing, its neighbours or the chunk it falls in; n-grams are case-sensitive."""
    monkeypatch.setattr(dedup_near, "CHUNK", 4096)  # chunks of a few documents, and documents longer than one
    rng = random.Random(5)
    spaces = [" ", "  ", "\t", "\n", "\u00a0", "\u2003", "\u3000", "\u2028", "\u205f"]
    texts = [_text(rng, rng.choice([0, 1, 3, 4, 5, 6, 40, 900])) for _ in range(60)]
    spaced = ["".join(w + rng.choice(spaces) for w in t.split()) for t in texts]
    single = band_keys(pa.array(texts), 5, 0.8, 128)
    assert (band_keys(pa.array(["  "] + spaced), 5, 0.8, 128)[1:] == single).all()
    assert (band_keys(pa.array(texts[30:]), 5, 0.8, 128) == single[30:]).all()
    longest = max(range(len(texts)), key=lambda i: len(texts[i]))
    assert not (band_keys(pa.array([texts[longest].upper()]), 5, 0.8, 128) == single[longest]).any()


def test_exact_copies_are_dropped_against_the_partition_that_joined_first(tmp_path):
    files = _corpus(tmp_path)
    spec, store = _spec(tmp_path / "src"), LocalFolderStore(tmp_path / "store")
    _ingest(tmp_path, spec, store)
    decisions = update_index(store, spec, ["web.c", "web.a", "web.b"], "run-1")
    assert _dropped(decisions) == {
        "web.a": {},
        "web.b": {"exact": {"web.a": 20}},
        "web.c": {"exact": {"web.a": 10, "web.b": 10}},
    }
    assert [d.documents for d in decisions.values()] == [len(files[p[4:]]) for p in decisions]


def test_an_update_that_crashes_before_its_commit_leaves_the_index_as_it_was(tmp_path, monkeypatch):
    _corpus(tmp_path)
    spec, store = _spec(tmp_path / "src"), LocalFolderStore(tmp_path / "store")
    _ingest(tmp_path, spec, store)
    update_index(store, spec, ["web.a"], "run-1")
    real = dedup_lib.put_record

    def crash_at_commit(s, key, record, compact=False):
        if key == DEDUP_MEMBERS_KEY:
            raise OSError("killed")
        real(s, key, record, compact)

    monkeypatch.setattr(dedup_lib, "put_record", crash_at_commit)
    with pytest.raises(OSError, match="killed"):
        update_index(store, spec, ["web.b", "web.c"], "run-2")
    assert not store.exists(DEDUP_LOCK_KEY)  # the lock is given back
    monkeypatch.setattr(dedup_lib, "put_record", real)
    decisions = update_index(store, spec, ["web.b", "web.c"], "run-3")
    assert _dropped(decisions) == {"web.b": {"exact": {"web.a": 20}}, "web.c": {"exact": {"web.a": 10, "web.b": 10}}}
    members = get_record(store, DEDUP_MEMBERS_KEY, DedupMembers, "test")
    rows = sum(len(load_range(store, "exact", r, g)) for r, g in enumerate(members.generations["exact"]))
    assert rows == 60 + 50 + 25  # one row per document: the crashed update's rows are not there twice


def test_the_number_of_ranges_changes_memory_not_decisions(tmp_path):
    _corpus(tmp_path)
    decided = []
    for ranges in (1, 4, 256):
        spec = _spec(tmp_path / "src", {"ranges": ranges, "near": True})
        store = LocalFolderStore(tmp_path / f"store{ranges}")
        _ingest(tmp_path, spec, store)
        decided.append(_dropped(update_index(store, spec, ["web.a", "web.b", "web.c"], "run")))
    assert decided[0] == decided[1] == decided[2]


def test_the_ranges_follow_the_number_of_documents_and_decide_nothing(tmp_path, monkeypatch):
    """Issue 47: a small dataset keeps one range per kind, not 256; as documents join, each kind's ranges double to
    keep RANGE_ROWS rows each (near has a row per band), the ranges they replace leave the store, and the decisions
    are those of a fixed number of ranges."""
    _corpus(tmp_path)
    spec = _spec(tmp_path / "src", {"near": True})
    store = LocalFolderStore(tmp_path / "store")
    _ingest(tmp_path, spec, store)
    update_index(store, spec, ["web.a", "web.b", "web.c"], "run")
    assert sorted(p.parent.name for p in (tmp_path / "store" / "state" / "dedup").rglob("*.npy")) == ["exact", "near"]

    monkeypatch.setattr(dedup_lib, "RANGE_ROWS", 16)
    grown = LocalFolderStore(tmp_path / "grown")
    _ingest(tmp_path, spec, grown)
    decided = {}
    for p in ("web.a", "web.b", "web.c"):
        decided |= update_index(grown, spec, [p], f"run-{p}")
        held = get_record(grown, DEDUP_MEMBERS_KEY, DedupMembers, "test").generations
        files = {kind: len(list((tmp_path / "grown" / "state" / "dedup" / kind).glob("*.npy"))) for kind in held}
        assert files == {kind: sum(1 for g in gens if g) for kind, gens in held.items()}  # replaced ranges deleted
    assert {kind: len(gens) for kind, gens in held.items()} == {"exact": 16, "near": 128}  # 135 documents, 9 bands
    fixed, other = _spec(tmp_path / "src", {"near": True, "ranges": 4}), LocalFolderStore(tmp_path / "fixed")
    _ingest(tmp_path, fixed, other)
    assert _dropped(decided) == _dropped(update_index(other, fixed, ["web.a", "web.b", "web.c"], "run-fixed"))
    assert any(decided["web.b"].dropped.values()) and any(decided["web.c"].dropped.values())


def test_a_settings_change_rebuilds_the_index_in_the_same_joining_order(tmp_path):
    _corpus(tmp_path)
    spec, store = _spec(tmp_path / "src"), LocalFolderStore(tmp_path / "store")
    _ingest(tmp_path, spec, store)
    update_index(store, spec, ["web.b"], "run-1")  # b joined first: it keeps the 20 documents it shares with a
    first = update_index(store, spec, ["web.a", "web.c"], "run-2")
    assert first["web.a"].dropped == {"exact": {"web.b": 20}}
    near = replace(spec, dedup=replace(spec.dedup, near=True))
    again = update_index(store, near, ["web.a", "web.b", "web.c"], "run-3")
    assert again["web.a"].dropped["exact"] == {"web.b": 20} and again["web.b"].dropped == {}


def test_an_update_waits_for_another_and_names_the_lock_when_it_waits_too_long(tmp_path):
    store = LocalFolderStore(tmp_path / "store")
    with index_lock(store, "run-1"):
        with pytest.raises(DedupError, match=r"state/dedup/update.lock: another dedup update has held the index"):
            with index_lock(store, "run-2", wait=0.5):
                pass
    with index_lock(store, "run-3"):
        assert store.get_bytes(DEDUP_LOCK_KEY) == b"run-3"
