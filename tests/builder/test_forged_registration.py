"""A forged partition registration (issue 34, case 14), with `shard-assets build` as a user runs it: the record is
refused with StateMismatchError, and the partition is then quarantined with a record, counted as left out, and its
old build is no longer published as if it were valid; under `on_partition_failure = "block"` the build exits 2."""

from __future__ import annotations

import json
import re

import shard_loader
from shard_assets.lib.layout import quarantine_key
from tests.support.dagster_helpers import forge_registration, tiny_dataset, write_jsonl
from tests.support.mixtures import dagster_home, shard_assets, write_tokenizer


def _build(tmp, spec, store):
    return shard_assets(["build", "--spec", str(spec), "--store", str(store), "--workers", "1"], tmp, dagster_home(tmp))


def _partitions(store) -> set[str]:
    manifest = shard_loader.open_manifest(str(store)).manifest
    return {e.partition for split in manifest.splits.values() for e in split.shards}


def test_a_forged_registration_quarantines_its_partition_instead_of_keeping_its_old_build(tmp_path):
    spec, store, _ = tiny_dataset(tmp_path, files=3, docs=60)
    first = _build(tmp_path, spec, store)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "web.part1" in _partitions(store)
    (tmp_path / "elsewhere").mkdir()
    write_jsonl(tmp_path / "elsewhere" / "secret.jsonl", 50, seed=99)
    forge_registration(store, "web.part1", f"file://{tmp_path}/elsewhere/secret.jsonl")

    again = _build(tmp_path, spec, store)
    assert re.search(r"^warning: .*web\.part1.*StateMismatchError: ", again.stderr, re.M), again.stderr[-2000:]
    assert re.search(r"^partitions\s+3 \(1 left out;", again.stdout, re.M), again.stdout
    assert "web.part1" not in _partitions(store) and {"web.part0", "web.part2"} <= _partitions(store)
    fp = shard_loader.open_manifest(str(store)).manifest.tokenizer.fingerprint
    quarantine = json.loads((store / quarantine_key(fp, "web.part1")).read_text())
    assert "StateMismatchError" in json.dumps(quarantine), quarantine

    spec.write_text(spec.read_text().replace("min_chars = 10\n", 'min_chars = 10\non_partition_failure = "block"\n'))
    blocked = _build(tmp_path, spec, store)
    errors = [line for line in blocked.stderr.splitlines() if line.startswith("error: ")]
    assert blocked.returncode == 2 and len(errors) == 1 and "web.part1" in errors[0], blocked.stderr[-2000:]
    assert "StateMismatchError" in errors[0] and "on_partition_failure" in errors[0], errors[0]


def test_a_version_whose_files_equal_an_older_ones_still_says_what_it_left_out(tmp_path):
    """Issue 47, item 12: web.part1 added, then its registration forged: the version left without it had the files of
    the version before web.part1 existed, reused that version and its lineage (0 left out) while the build said 1."""
    spec, store, _ = tiny_dataset(tmp_path, files=1, docs=60)
    tokenizer = write_tokenizer(tmp_path / "tokenizer.json")  # one tokenizer throughout: a new file retrains none
    spec.write_text(
        re.sub(r"\[tokenizer\][^\[]*", f'[tokenizer]\nkind = "file"\npath = "{tokenizer}"\n\n', spec.read_text())
    )
    assert _build(tmp_path, spec, store).returncode == 0
    before = shard_loader.open_manifest(str(store)).manifest
    write_jsonl(tmp_path / "src" / "part1.jsonl", 60, seed=1)
    assert _build(tmp_path, spec, store).returncode == 0
    (tmp_path / "elsewhere").mkdir()
    write_jsonl(tmp_path / "elsewhere" / "secret.jsonl", 50, seed=99)
    forge_registration(store, "web.part1", f"file://{tmp_path}/elsewhere/secret.jsonl")
    again = _build(tmp_path, spec, store)
    assert re.search(r"^partitions\s+2 \(1 left out;", again.stdout, re.M), again.stdout
    live = shard_loader.open_manifest(str(store))
    assert _partitions(store) == {"web.part0"} and live.manifest.version != before.version
    lineage = live.lineage()
    assert lineage["partitions_left_out"] == 1 and [e["partition"] for e in lineage["left_out"]] == ["web.part1"]
