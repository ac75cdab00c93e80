"""Issue 32: a document is published once per dataset. Two JSONL sources where the second repeats 150 of the first's
600 documents exactly and 100 more with one word changed in ~300, built with real Dagster runs: exact copies are
dropped by default, near copies too with `near = true`, none with `exact = false`; no unique document is lost, every
kept document stays in its split, the copy kept is the first source's, and lineage says what was dropped against
which partition."""

import json
import random
import shutil
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pytest

import shard_loader
from shard_assets.definitions import ASSETS, build_definitions
from shard_assets.defs.dedup import NO_COPIES
from shard_assets.lib.retention import DAY, Policy, collect, plan_collection
from shard_assets.lib.spec import load_spec
from shard_assets.lib.verification import verify_live_version
from shard_assets.lib.text import is_val
from shard_assets.execution.batches import RunBatch, RunOutcome
from shard_assets.defs.resources import Settings
from shard_assets.execution.local import LocalRuns
from shard_assets.runner import build_dataset
from tests.support.build_helpers import published
from tests.support.dagster_helpers import run_automation, run_sensor_tick, tiny_resources
from tests.support.texts import doc_hash

pytestmark = pytest.mark.integration

FIRST, EXACT, NEAR, UNIQUE = 600, 150, 100, 250  # the second source: EXACT + NEAR + UNIQUE documents
SYLLABLES = "ka lo mi ne su ta re vo ba di fu go hi ju po ze".split()


def _vocabulary(rng: random.Random, n: int = 4000) -> list[str]:
    words = {"".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(n * 2)}
    return sorted(words)[:n]


def _document(rng: random.Random, words: list[str]) -> str:
    return " ".join(rng.choice(words) for _ in range(rng.randint(280, 320))) + "."


def _near_copy(rng: random.Random, text: str, words: list[str]) -> str:
    """`text` with one word (not the first nor the last) replaced by another."""
    tokens = text.split(" ")
    i = rng.randint(1, len(tokens) - 2)
    tokens[i] = next(w for w in words if w != tokens[i])
    return " ".join(tokens)


class Corpus:
    """The planted corpus: source `a` (two files, FIRST documents) and source `b` (one file), the texts by role."""

    def __init__(self, root: Path):
        rng = random.Random(32)
        words = _vocabulary(rng)
        first = [_document(rng, words) for _ in range(FIRST)]
        picked = rng.sample(range(FIRST), EXACT + NEAR)
        self.first = first
        self.exact = [first[i] for i in picked[:EXACT]]
        self.near = [_near_copy(rng, first[i], words) for i in picked[EXACT:]]
        self.unique = [_document(rng, words) for _ in range(UNIQUE)]
        second = self.exact + self.near + self.unique
        rng.shuffle(second)
        self.files = {
            "a/part0.jsonl": first[: FIRST // 2],
            "a/part1.jsonl": first[FIRST // 2 :],
            "b/part0.jsonl": second,
        }
        for name, texts in self.files.items():
            path = root / "src" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))

    def in_file(self, name: str) -> set[str]:
        return set(self.files[name])


def _spec(root: Path, dedup: str) -> Path:
    path = root / "spec.toml"
    path.write_text(
        'name = "planted"\nval_fraction = 0.2\nmin_chars = 10\n\n[tokenizer]\nkind = "train_bpe"\nvocab_size = 300\n\n'
        f"{dedup}\n"
        f'[[sources]]\nname = "a"\nuri = "{root}/src/a/*.jsonl"\nformat = "jsonl"\n\n'
        f'[[sources]]\nname = "b"\nuri = "{root}/src/b/*.jsonl"\nformat = "jsonl"\n'
    )
    return path


def _build(root: Path, dedup: str, inst: dg.DagsterInstance | None = None, **build: Any):
    spec = _spec(root, dedup)
    resources = tiny_resources(spec, root / "store")
    return build_dataset(inst or dg.DagsterInstance.ephemeral(), load_spec(spec), resources, **build)


class LastFirst:
    """Runs in this process, each call's batches last first: the order in which a busy pool of workers may finish
    them."""

    def __init__(self, runs: LocalRuns):
        self.runs = runs

    def execute(self, batches: Sequence[RunBatch]) -> Iterator[RunOutcome]:
        return self.runs.execute(list(reversed(batches)))


def _publish(inst: dg.DagsterInstance, resources: dict) -> dg.AssetCheckEvaluation:
    """splits and manifest materialized (a failed blocking check is not raised); the dedup check's evaluation."""
    result = dg.materialize(
        ASSETS,
        selection=["splits", "manifest"],
        instance=inst,
        resources=resources,
        raise_on_error=False,
    )
    return next(e for e in result.get_asset_check_evaluations() if e.check_name == NO_COPIES)


def _all_texts(docs: dict[str, dict[str, list[str]]]) -> Counter[str]:
    return Counter(t for splits in docs.values() for texts in splits.values() for t in texts)


def _assert_splits_by_hash(docs: dict[str, dict[str, list[str]]], val_fraction: float = 0.2) -> None:
    """Every kept document is in the split its hash names, as without dedup."""
    for splits in docs.values():
        for split, texts in splits.items():
            hashes = [doc_hash(t) for t in texts]
            assert (is_val(np.array(hashes, dtype=np.uint64), val_fraction) == (split == "val")).all()


def _dedup_lineage(store: Path) -> dict[str, dict]:
    lineage = shard_loader.open_manifest(str(store)).lineage()
    return {f["partition"]: f["dedup"] for s in lineage["sources"] for f in s["files"]}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Corpus]:
    root = tmp_path_factory.mktemp("planted")
    return root, Corpus(root)


def _copy(corpus: tuple[Path, Corpus], tmp_path: Path) -> Path:
    shutil.copytree(corpus[0] / "src", tmp_path / "src")
    return tmp_path


def test_exact_copies_are_published_once_by_default(corpus, tmp_path):
    root, c = _copy(corpus, tmp_path), corpus[1]
    result = _build(root, "")
    docs = published(root / "store")
    texts = _all_texts(docs)
    assert sum(result.documents.values()) == FIRST + NEAR + UNIQUE == 950
    assert set(texts) == set(c.first) | set(c.near) | set(c.unique)  # no unique document dropped, by content
    assert max(texts.values()) == 1
    assert not set(c.exact) & set(t for ts in docs["b.part0"].values() for t in ts)  # the first source's copy stays
    _assert_splits_by_hash(docs)
    dedup = _dedup_lineage(root / "store")
    against = dedup["b.part0"]["dropped"]["exact"]
    assert sum(against.values()) == EXACT and set(against) == {"a.part0", "a.part1"}
    assert against["a.part0"] == len(set(c.exact) & c.in_file("a/part0.jsonl"))
    assert dedup["a.part0"]["dropped"] == {} and dedup["a.part1"]["dropped"] == {}
    lineage = shard_loader.open_manifest(str(root / "store")).manifest.lineage
    assert lineage["dedup"]["dropped"] == {"exact": EXACT}
    assert result.checks["no_duplicate_documents"] is True
    store = tiny_resources(root / "spec.toml", root / "store")["store"].store()
    assert verify_live_version(store).problems == ()  # the raw documents, less the copies, split again


def test_the_copy_kept_does_not_depend_on_which_run_finishes_first(corpus, tmp_path):
    """A build of three runs (one partition each) whose runs finish last first keeps the same copies as one run:
    the first source's, by partition key; the version is the same dataset."""
    root, c = _copy(corpus, tmp_path), corpus[1]
    with dg.instance_for_test() as inst:
        resources = tiny_resources(_spec(root, ""), root / "store")
        runs = LocalRuns(build_definitions(resources), Settings.of(resources), inst)
        result = _build(root, "", inst, workers=3, executor=LastFirst(runs))
    assert len({r for r in result.run_ids}) > 4  # ingest and tokenize ran in several runs each
    dedup = _dedup_lineage(root / "store")
    assert dedup["a.part0"]["dropped"] == {} and dedup["a.part1"]["dropped"] == {}
    assert sum(dedup["b.part0"]["dropped"]["exact"].values()) == EXACT
    docs = published(root / "store")
    assert not set(c.exact) & set(t for ts in docs["b.part0"].values() for t in ts)
    assert result.checks["no_duplicate_documents"] is True


def test_a_file_removed_on_the_sensor_path_lets_the_next_version_keep_the_other_copy(corpus, tmp_path):
    """Built, then a.part1 removed with only the sensors running: the discovery sensor's tick and automation's
    ticks re-tokenize b.part0, whose copies of a.part1's documents are the kept ones now; the next version (its
    blocking checks passed) publishes each of them once."""
    root, c = _copy(corpus, tmp_path), corpus[1]
    inst = dg.DagsterInstance.ephemeral()
    _build(root, "", inst)
    resources = tiny_resources(root / "spec.toml", root / "store")
    defs = build_definitions(resources)
    _, cursor = run_automation(defs, inst, resources, None)  # automation turned on over the built dataset
    before = _all_texts(published(root / "store"))
    (root / "src" / "a" / "part1.jsonl").unlink()
    run_sensor_tick(inst, resources)
    requested, _ = run_automation(defs, inst, resources, cursor)
    assert "b.part0" in dict(requested)["tokenized_shards"]  # with the partition the dedup run was launched for
    docs = published(root / "store")
    texts = _all_texts(docs)
    gone = c.in_file("a/part1.jsonl") - set(c.exact)
    assert set(texts) == set(before) - gone and max(texts.values()) == 1  # a.part1's copies in b are published
    assert _dedup_lineage(root / "store")["b.part0"]["reclaimed"] == {
        "a.part1": len(set(c.exact) & c.in_file("a/part1.jsonl"))
    }


def test_gc_collects_drop_lists_no_kept_version_or_current_decision_names(corpus, tmp_path):
    """A removal moves b.part0's decision to a new drop list; once gc drops the versions that named the old one it goes
    too, while every drop list a current decision, part record or kept version names stays (the kept versions'
    lineage and the blocking check still read them)."""
    root = _copy(corpus, tmp_path)
    inst = dg.DagsterInstance.ephemeral()
    _build(root, "", inst)
    drops = root / "store" / "state" / "dedup" / "drops"
    first = {p.name for p in drops.iterdir()}
    (root / "src" / "a" / "part1.jsonl").unlink()
    _build(root, "", inst)
    after = {p.name for p in drops.iterdir()}
    assert first - after == set() and after - first  # the old list stays beside the new one
    objects = tiny_resources(root / "spec.toml", root / "store")["store"].store()
    later = time.time() + 9 * DAY
    plan = plan_collection(objects, Policy(keep=1, max_age_s=0, grace_s=DAY), now=later)
    collect(objects, plan)
    named = {Path(k).name for d in _dedup_lineage(root / "store").values() if (k := d["drops"])}
    left = {p.name for p in drops.iterdir()}
    assert named <= left and left < after  # what the live version names stays; a list only the dropped one named went
    assert verify_live_version(objects).problems == ()


def test_the_check_fails_when_a_partition_publishes_its_copies(corpus, tmp_path):
    """A part record that does not name its drops (as if tokenized without them) fails the blocking check, and the
    live version stays."""
    root = _copy(corpus, tmp_path)
    inst = dg.DagsterInstance.ephemeral()
    _build(root, "", inst)
    store = root / "store"
    live = (store / "manifest.json").read_bytes()
    fingerprint = shard_loader.open_manifest(str(store)).manifest.tokenizer.fingerprint
    path = store / f"tokenized/{fingerprint}/parts/b.part0.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "dedup": None}))
    check = _publish(inst, tiny_resources(root / "spec.toml", store))
    assert not check.passed and check.metadata["copies"].value == EXACT
    assert (store / "manifest.json").read_bytes() == live


def test_the_check_fails_when_a_kept_copy_left_and_its_other_copy_was_not_tokenized_again(corpus, tmp_path):
    """a.part1 removed and the index updated, but b.part0 still tokenized under its old decision (which dropped
    the copies a.part1 kept): those documents would be published nowhere, so the blocking check fails naming
    b.part0, and the live version stays."""
    root, c = _copy(corpus, tmp_path), corpus[1]
    inst = dg.DagsterInstance.ephemeral()
    _build(root, "", inst)
    store = root / "store"
    live = (store / "manifest.json").read_bytes()
    (root / "src" / "a" / "part1.jsonl").unlink()
    resources = tiny_resources(root / "spec.toml", store)
    (request,) = run_sensor_tick(inst, resources)  # the dedup run that takes a.part1 out of the index
    assert request.asset_selection == [dg.AssetKey("dedup")]
    check = _publish(inst, resources)
    assert not check.passed and check.metadata["missing"].value == len(set(c.exact) & c.in_file("a/part1.jsonl"))
    assert "materialize tokenized_shards again for b.part0" in check.description
    assert (store / "manifest.json").read_bytes() == live


def test_near_copies_are_published_once_on_request(corpus, tmp_path):
    root, c = _copy(corpus, tmp_path), corpus[1]
    result = _build(root, "[dedup]\nnear = true\n")
    docs = published(root / "store")
    texts = _all_texts(docs)
    assert sum(result.documents.values()) == FIRST + UNIQUE == 850
    assert set(texts) == set(c.first) | set(c.unique) and max(texts.values()) == 1
    _assert_splits_by_hash(docs)
    dropped = _dedup_lineage(root / "store")["b.part0"]["dropped"]
    assert sum(dropped["exact"].values()) == EXACT and sum(dropped["near"].values()) == NEAR
    assert set(dropped["near"]) == {"a.part0", "a.part1"}


def test_exact_false_publishes_every_copy(corpus, tmp_path):
    root, c = _copy(corpus, tmp_path), corpus[1]
    result = _build(root, "[dedup]\nexact = false\n")
    texts = _all_texts(published(root / "store"))
    assert sum(result.documents.values()) == FIRST + EXACT + NEAR + UNIQUE == 1100
    assert texts == Counter(c.first) + Counter(c.exact + c.near + c.unique)


def test_adding_files_keeps_what_is_published_and_a_removed_copy_is_replaced(corpus, tmp_path):
    """A new file holding copies of published documents loses its copies, even one whose partition key sorts first;
    a removed file whose copies were kept lets the next version keep the other copy, named in lineage."""
    root, c = _copy(corpus, tmp_path), corpus[1]
    inst = dg.DagsterInstance.ephemeral()
    _build(root, "", inst)
    before = _all_texts(published(root / "store"))
    extra = c.first[:40] + c.unique[:10]
    (root / "src" / "a" / "part00.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in extra))
    _build(root, "", inst)
    docs = published(root / "store")
    assert _all_texts(docs) == before  # nothing published was removed, nothing repeated
    assert sum(_dedup_lineage(root / "store")["a.part00"]["dropped"]["exact"].values()) == 50

    (root / "src" / "a" / "part1.jsonl").unlink()
    result = _build(root, "", inst)
    docs = published(root / "store")
    texts = _all_texts(docs)
    gone = c.in_file("a/part1.jsonl") - set(c.exact)  # part1's documents with no copy elsewhere
    assert set(texts) == (set(before) - gone) and max(texts.values()) == 1
    kept_in_b = set(t for ts in docs["b.part0"].values() for t in ts)
    assert set(c.exact) & c.in_file("a/part1.jsonl") <= kept_in_b  # b's copies are published now
    reclaimed = _dedup_lineage(root / "store")["b.part0"]["reclaimed"]
    assert reclaimed == {"a.part1": len(set(c.exact) & c.in_file("a/part1.jsonl"))}
    _assert_splits_by_hash(docs)
    assert result.checks["no_duplicate_documents"] is True


def test_the_lineage_counts_the_copies_left_out_within_a_file(tmp_path):
    """Issue 47, item 7: a file's own copies were counted only in Dagster metadata (`dropped_duplicate`)."""
    from tests.support.dagster_helpers import tiny_dataset

    spec, store, resources = tiny_dataset(tmp_path, files=2, docs=60)
    part1 = tmp_path / "src" / "part1.jsonl"
    lines = part1.read_text().splitlines()
    part1.write_text("\n".join(lines + lines[:7]) + "\n")  # seven documents twice in one file
    build_dataset(dg.DagsterInstance.ephemeral(), load_spec(spec), resources)
    lineage = shard_loader.open_manifest(str(store)).lineage()
    files = {f["partition"]: f for s in lineage["sources"] for f in s["files"]}
    assert files["web.part1"]["raw_dropped"]["duplicate"] == 7 and files["web.part0"]["raw_dropped"]["duplicate"] == 0
    assert lineage["raw_dropped"] == {"duplicate": 7}
