"""From nothing to a requested dataset: the sensor asks for raw documents only while no tokenizer exists;
once they are in, automation ticks request the tokenizer, then every tokenized partition, then splits, then the
manifest. Also when the automation sensor is turned on only after the discovery sensor's runs finished (Dagster
sees no update before a condition's first evaluation, so without a catch-up nothing would ever be built)."""

import dagster as dg

import shard_loader

from shard_assets.definitions import ASSETS, build_definitions
from shard_assets.lib.spec import load_spec
from shard_assets.runner import build_dataset
from tests.support.dagster_helpers import instance, run_automation, run_sensor_tick, tiny_dataset, write_jsonl
import pytest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("automation_first", [True, False], ids=["automation-on-first", "automation-on-after"])
def test_sensor_runs_then_automation_build_the_whole_dataset(tmp_path, automation_first):
    spec, store, resources = tiny_dataset(tmp_path)
    inst = instance()
    defs = build_definitions(resources)
    cursor = None
    if automation_first:
        baseline = dg.evaluate_automation_conditions(defs=defs, instance=inst)
        assert baseline.total_requested == 0
        cursor = baseline.cursor
    requests = run_sensor_tick(inst, resources)
    assert sorted(inst.get_dynamic_partitions("raw_files")) == ["web.part0", "web.part1"]
    assert {tuple(r.asset_selection) for r in requests} == {(dg.AssetKey("raw_documents"), dg.AssetKey("dedup"))}
    requested, _ = run_automation(defs, inst, resources, cursor)
    assert requested == [
        ("tokenizer", [""]),
        ("tokenized_shards", ["web.part0", "web.part1"]),
        ("splits", [""]),
        ("manifest", [""]),
    ]
    assert shard_loader.open_manifest(str(store)).manifest.splits["train"].documents > 0


def test_a_file_tokenized_before_automation_is_turned_on_is_published_on_its_first_tick(tmp_path):
    spec, store, resources = tiny_dataset(tmp_path)
    inst = instance()
    first = build_dataset(inst, load_spec(spec), resources)
    write_jsonl(tmp_path / "src" / "part2.jsonl", 80, seed=2)
    requests = run_sensor_tick(inst, resources)  # tokenized while automation is off
    assert [(r.partition_key, r.asset_selection) for r in requests] == [("web.part2", None)]
    requested, cursor = run_automation(build_definitions(resources), inst, resources, None)
    assert requested == [("splits", [""]), ("manifest", [""])]
    m = shard_loader.open_manifest(str(store)).manifest
    assert m.version != first.version and "web.part2" in {e.partition for s in m.splits.values() for e in s.shards}
    assert run_automation(build_definitions(resources), inst, resources, cursor)[0] == []  # caught up once


def _published(store) -> dict:
    """Every published file's bytes and modification time; the live pointer's bytes only."""
    versions = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (store / "manifests").rglob("*") if p.is_file()}
    return versions | {"live": (store / "manifest.json").read_bytes()}


def test_turning_automation_on_over_an_up_to_date_dataset_republishes_nothing_new(tmp_path):
    spec, store, resources = tiny_dataset(tmp_path)
    inst = instance()
    first = build_dataset(inst, load_spec(spec), resources)
    published = _published(store)
    requested, _ = run_automation(build_definitions(resources), inst, resources, None)
    assert requested in ([], [("splits", [""]), ("manifest", [""])])  # a catch-up may re-derive the same version
    assert shard_loader.open_manifest(str(store)).manifest.version == first.version
    assert _published(store) == published  # not one published file rewritten


def test_a_partition_a_concurrent_publish_missed_is_published_by_the_next_tick(tmp_path):
    """The race the browser test met: automation's catch-up publish started before the sensor's tokenize run ended and
    ended after it, so Dagster counts the new partition as handled (an input updated on the tick its consumer did,
    dagster-io/dagster#24650) while the version lacks it. The discovery sensor's next tick requests the publish once;
    with nothing left out, it requests none."""
    spec, store, resources = tiny_dataset(tmp_path)
    inst = instance()
    build_dataset(inst, load_spec(spec), resources)
    write_jsonl(tmp_path / "src" / "part2.jsonl", 80, seed=2)
    run_sensor_tick(inst, resources)  # web.part2 tokenized
    inst.report_runless_asset_event(dg.AssetMaterialization("splits"))  # the publish that read the parts before it
    requests = run_sensor_tick(inst, resources)
    assert [(sorted(k.to_user_string() for k in r.asset_selection), r.partition_key) for r in requests] == [
        (["manifest", "splits"], None)
    ]
    m = shard_loader.open_manifest(str(store)).manifest
    assert "web.part2" in {e.partition for s in m.splits.values() for e in s.shards}
    assert run_sensor_tick(inst, resources) == []  # published: nothing more to ask


def test_a_partition_automation_let_pass_after_a_publish_is_published_once_its_grace_is_over(tmp_path, monkeypatch):
    """The race the browser test met in CI: the sensor's tokenize run ended just after automation's publish ended, on
    one automation tick, and automation never published it. Within AUTOMATION_GRACE_SECONDS the sensor leaves it to
    automation; past it, the sensor's tick requests the publish."""
    spec, store, resources = tiny_dataset(tmp_path)
    inst = instance()
    build_dataset(inst, load_spec(spec), resources)
    inst.report_runless_asset_event(dg.AssetMaterialization("splits"))  # the publish that ended just before
    write_jsonl(tmp_path / "src" / "part2.jsonl", 80, seed=2)
    run_sensor_tick(inst, resources)  # web.part2 tokenized after it
    monkeypatch.setattr("shard_assets.defs.sensors.AUTOMATION_GRACE_SECONDS", 1e9)  # its ticks have not passed
    assert run_sensor_tick(inst, resources) == []  # automation's turn
    monkeypatch.setattr("shard_assets.defs.sensors.AUTOMATION_GRACE_SECONDS", 0.0)  # its ticks have passed
    requests = run_sensor_tick(inst, resources)
    assert [sorted(k.to_user_string() for k in r.asset_selection) for r in requests] == [["manifest", "splits"]]
    m = shard_loader.open_manifest(str(store)).manifest
    assert "web.part2" in {e.partition for s in m.splits.values() for e in s.shards}
    assert run_sensor_tick(inst, resources) == []


def test_a_partition_a_publish_left_out_as_not_tokenized_is_published_once_its_grace_is_over(tmp_path, monkeypatch):
    """The race the browser test met in CI twice: automation's catch-up publish ran on the tick the sensor registered
    a new file, so the version left it out as not yet tokenized; its tokenize run ended just after the publish, on one
    automation tick, and automation never published it. Past AUTOMATION_GRACE_SECONDS the sensor requests it, and
    again when the same file races a later publish (Dagster starts a run key once per sensor)."""
    from shard_assets.defs.sensors import raw_files_sensor

    spec, store, resources = tiny_dataset(tmp_path)
    inst = instance()
    build_dataset(inst, load_spec(spec), resources)
    keys = []
    for seed in (2, 3):  # a new file, then the same file changed
        write_jsonl(tmp_path / "src" / "part2.jsonl", 80, seed=seed)
        registered = raw_files_sensor(dg.build_sensor_context(instance=inst, resources=resources))  # run not started
        assert [r.partition_key for r in registered.run_requests] == ["web.part2"]
        dg.materialize(ASSETS, selection=["splits", "manifest"], instance=inst, resources=resources)  # racing publish
        left_out = shard_loader.open_manifest(str(store)).manifest
        dg.materialize(  # the sensor's tokenize run, ending after the publish
            ASSETS,
            selection=["raw_documents", "dedup", "tokenized_shards"],
            partition_key="web.part2",
            instance=inst,
            resources=resources,
        )
        monkeypatch.setattr("shard_assets.defs.sensors.AUTOMATION_GRACE_SECONDS", 1e9)  # its ticks have not passed
        assert run_sensor_tick(inst, resources) == []  # automation's turn
        monkeypatch.setattr("shard_assets.defs.sensors.AUTOMATION_GRACE_SECONDS", 0.0)  # its ticks have passed
        requests = run_sensor_tick(inst, resources)
        assert [sorted(k.to_user_string() for k in r.asset_selection) for r in requests] == [["manifest", "splits"]]
        keys.append(requests[0].run_key)
        m = shard_loader.open_manifest(str(store)).manifest
        assert "web.part2" not in {e.partition for s in left_out.splits.values() for e in s.shards}
        assert (
            "web.part2" in {e.partition for s in m.splits.values() for e in s.shards} and m.version != left_out.version
        )
        assert run_sensor_tick(inst, resources) == []
    assert keys[0] != keys[1]


def test_a_partition_tokenized_while_a_publish_ran_is_published(tmp_path, monkeypatch):
    """The other order of the same race: the new file's tokenize run ended inside automation's publish, after it read
    the parts and before splits was materialized, so the publish is newer than the tokenize and still left it out.
    What counts is when the publish began."""
    from shard_assets.defs import splits as splits_asset
    from shard_assets.defs.sensors import raw_files_sensor

    spec, store, resources = tiny_dataset(tmp_path)
    inst = instance()
    build_dataset(inst, load_spec(spec), resources)
    write_jsonl(tmp_path / "src" / "part2.jsonl", 80, seed=2)
    raw_files_sensor(dg.build_sensor_context(instance=inst, resources=resources))  # registered, its run not started
    read_parts = splits_asset.overlap_count

    def tokenize_ends_now(*args):
        monkeypatch.setattr(splits_asset, "overlap_count", read_parts)
        tokenize = ["raw_documents", "dedup", "tokenized_shards"]
        dg.materialize(ASSETS, selection=tokenize, partition_key="web.part2", instance=inst, resources=resources)
        return read_parts(*args)

    monkeypatch.setattr(splits_asset, "overlap_count", tokenize_ends_now)
    dg.materialize(ASSETS, selection=["splits", "manifest"], instance=inst, resources=resources)  # the racing publish
    assert "web.part2" in inst.get_materialized_partitions(dg.AssetKey("tokenized_shards"))
    left_out = shard_loader.open_manifest(str(store)).manifest
    assert "web.part2" not in {e.partition for s in left_out.splits.values() for e in s.shards}
    requests = run_sensor_tick(inst, resources)  # nothing was tokenized after the publish ended: no grace to wait
    assert [sorted(k.to_user_string() for k in r.asset_selection) for r in requests] == [["manifest", "splits"]]
    m = shard_loader.open_manifest(str(store)).manifest
    assert "web.part2" in {e.partition for s in m.splits.values() for e in s.shards}
    assert run_sensor_tick(inst, resources) == []
