"""From nothing to a requested dataset: the sensor asks for raw documents only while no tokenizer exists;
once they are in, automation ticks request the tokenizer, then every tokenized partition, then splits, then the
manifest."""

import dagster as dg

import shard_loader

from shard_assets.definitions import ASSETS, build_definitions
from shard_assets.defs.sensors import raw_files_sensor
from tests.support.dagster_helpers import instance, run_automation, tiny_dataset
import pytest

pytestmark = pytest.mark.integration


def test_sensor_runs_then_automation_build_the_whole_dataset(tmp_path):
    spec, store, resources = tiny_dataset(tmp_path)
    inst = instance()
    defs = build_definitions(resources)
    baseline = dg.evaluate_automation_conditions(defs=defs, instance=inst)
    assert baseline.total_requested == 0
    tick = raw_files_sensor(dg.build_sensor_context(instance=inst, resources=resources))
    assert sorted(inst.get_dynamic_partitions("raw_files")) == ["web.part0", "web.part1"]
    assert {tuple(r.asset_selection) for r in tick.run_requests} == {(dg.AssetKey("raw_documents"),)}
    for request in tick.run_requests:
        dg.materialize(
            ASSETS,
            selection=request.asset_selection,
            partition_key=request.partition_key,
            tags=request.tags,
            instance=inst,
            resources=resources,
        )
    requested, _ = run_automation(defs, inst, resources, baseline.cursor)
    assert requested == [
        ("tokenizer", [""]),
        ("tokenized_shards", ["web.part0", "web.part1"]),
        ("splits", [""]),
        ("manifest", [""]),
    ]
    assert shard_loader.open_manifest(str(store)).manifest.splits["train"].documents > 0
