"""Issue 5 with real runs: the discovery sensor, asset checks that fail on broken input, staleness and
automation after a tokenizer change, and re-tokenization that leaves the old manifest readable."""

import json

import dagster as dg
import numpy as np
import pytest
from dagster._core.definitions.data_version import StaleStatus
from dagster._utils.test.data_versions import get_stale_status_resolver

import shard_loader
from shard_assets.runner import build_dataset
from shard_assets.definitions import ASSETS, build_definitions
from shard_assets.defs.resources import DatasetResource, StoreResource
from shard_assets.defs.partitions import RANGE_TAGS
from shard_assets.defs.sensors import raw_files_sensor
from shard_assets.lib.spec import load_spec
from shard_loader.cache.checksum import verify_file
from tests.support.dagster_helpers import (
    instance,
    run_automation,
    tiny_dataset,
    tiny_resources,
    write_jsonl,
    write_spec,
)

pytestmark = pytest.mark.integration


def _tick(inst, spec, store):
    resources = {"dataset": DatasetResource(spec_path=str(spec)), "store": StoreResource(root=str(store))}
    return raw_files_sensor(dg.build_sensor_context(instance=inst, resources=resources))


def test_the_sensor_registers_new_files_and_requests_runs_for_them_only(tmp_path):
    spec, store, _ = tiny_dataset(tmp_path)
    inst = instance()
    first = _tick(inst, spec, store)
    assert [r.tags for r in first.run_requests] == [
        dict(zip(RANGE_TAGS, ["web.part0", "web.part1"]))
    ]  # one run for both
    assert sorted(inst.get_dynamic_partitions("raw_files")) == ["web.part0", "web.part1"]
    assert _tick(inst, spec, store).run_requests == []
    write_jsonl(tmp_path / "src" / "part2.jsonl", 50, seed=2)
    third = _tick(inst, spec, store)
    assert [r.partition_key for r in third.run_requests] == ["web.part2"]
    write_jsonl(tmp_path / "src" / "part0.jsonl", 60, seed=9)  # a raw file whose content changed
    fourth = _tick(inst, spec, store)
    assert [r.partition_key for r in fourth.run_requests] == ["web.part0"]
    (tmp_path / "src" / "part1.jsonl").unlink()  # a vanished file leaves the partition set
    _tick(inst, spec, store)
    assert sorted(inst.get_dynamic_partitions("raw_files")) == ["web.part0", "web.part2"]


def _run_checks(inst, resources):
    """Run the publish step again: splits and the manifest with their blocking checks, as publish_job does."""
    result = dg.materialize(
        ASSETS, selection=["splits", "manifest"], instance=inst, resources=resources, raise_on_error=False
    )
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


@pytest.fixture
def built(tmp_path):
    spec, store, resources = tiny_dataset(tmp_path)
    inst = instance()
    result = build_dataset(inst, load_spec(spec), resources)
    assert all(result.checks.values()) and len(result.checks) == 7
    return inst, spec, store, resources, result


def _edit_part_record(store, m, partition, edit):
    path = store / f"tokenized/{m.tokenizer.fingerprint}/parts/{partition}.json"
    record = json.loads(path.read_text())
    edit(record)
    path.write_text(json.dumps(record))


def _break_counts(store, m):
    _edit_part_record(store, m, "web.part0", lambda r: r["raw"].update(documents=r["raw"]["documents"] + 1))


def _break_recorded_max_id(store, m):
    _edit_part_record(store, m, "web.part1", lambda r: r.update(max_token_id=m.tokenizer.vocab_size))


def _break_token_ids(store, m):
    entry = m.splits["train"].shards[0]
    tokens = np.load(store / entry.npy.key, mmap_mode="r+")
    tokens[3] = m.tokenizer.vocab_size + 5
    tokens.flush()


def _break_a_file(store, m):
    path = store / m.splits["val"].shards[0].bin.key
    path.write_bytes(path.read_bytes()[:-8])


def _break_offsets(store, m):
    entry = m.splits["train"].shards[0]
    offsets = np.fromfile(store / entry.bin.key, dtype="<i8")
    offsets[2], offsets[3] = offsets[3], offsets[2]
    offsets.tofile(store / entry.bin.key)


@pytest.mark.parametrize(
    "breaker, failing",
    [
        (_break_counts, {"counts_agree"}),
        (_break_recorded_max_id, {"token_ids_below_vocab"}),
        (_break_token_ids, {"reads_with_shard_loader"}),
        (_break_a_file, {"files_present", "reads_with_shard_loader"}),
        (_break_offsets, {"reads_with_shard_loader"}),
    ],
)
def test_each_check_fails_on_broken_input_and_passes_on_good(built, breaker, failing):
    inst, _, store, resources, _ = built
    assert all(e.passed for e in _run_checks(inst, resources).values())
    breaker(store, shard_loader.open_manifest(str(store)).manifest)
    live = (store / "manifest.json").read_bytes()
    results = _run_checks(inst, resources)
    assert {name for name, e in results.items() if not e.passed} == failing
    for name in failing:  # the summary a glance reads says what failed, not what a pass would say
        summary = results[name].description
        assert summary.startswith("FAILED: ") and summary == results[name].metadata["summary"].value
        assert "verified and opened" not in summary and (
            "tokenized/" in summary or "manifests/" in summary or "web.part" in summary
        ), summary
    assert (store / "manifest.json").read_bytes() == live


def test_the_schedule_launches_the_tokenizer_job_on_a_configurable_cron(monkeypatch):
    from shard_assets.defs.jobs import DEFAULT_CRON, retokenize_schedule

    schedule = retokenize_schedule()
    request = schedule.evaluate_tick(dg.build_schedule_context(instance=instance())).run_requests
    assert len(request) == 1 and schedule.job_name == "tokenizer_job" and schedule.cron_schedule == DEFAULT_CRON
    monkeypatch.setenv("SHARD_RETOKENIZE_CRON", "15 1 * * *")
    assert retokenize_schedule().cron_schedule == "15 1 * * *"


def test_a_new_tokenizer_makes_tokenized_assets_stale_and_republishes_a_new_version(built, tmp_path):
    inst, spec, store, _, first = built
    old = shard_loader.open_manifest(str(store / f"manifests/{first.version}.json")).manifest
    write_spec(spec, f"{tmp_path}/src/*.jsonl", vocab_size=360)  # the re-tokenization: a new vocabulary
    resources = tiny_resources(spec, store)
    defs = build_definitions(resources)
    baseline = dg.evaluate_automation_conditions(defs=defs, instance=inst)
    assert defs.resolve_job_def("tokenizer_job").execute_in_process(instance=inst).success  # what the schedule launches
    resolver = get_stale_status_resolver(inst, ASSETS)
    key = dg.AssetKey("tokenized_shards")
    assert {resolver.get_status(key, p) for p in ("web.part0", "web.part1")} == {StaleStatus.STALE}
    requested, _ = run_automation(defs, inst, resources, baseline.cursor)
    assert requested == [("tokenized_shards", ["web.part0", "web.part1"]), ("splits", [""]), ("manifest", [""])]
    latest = shard_loader.open_manifest(str(store)).manifest
    assert latest.version != first.version and latest.tokenizer.vocab_size > old.tokenizer.vocab_size
    assert latest.lineage["manifest_run_id"] != old.lineage["manifest_run_id"]
    for ref in old.files():
        verify_file(store / ref.key, ref)  # the previous version is still whole for running trainers
    assert (
        sum(
            1
            for _ in shard_loader.TokenDataset(str(store / f"manifests/{first.version}.json"), seq_len=16, batch_size=2)
        )
        > 0
    )
