"""State read from the store is checked against what it claims (#26 item 5), through the paths a user runs: the
issue's case, a forged `state/tokenizer.json` (eod_id 5) met by the sensor and automation ticks under the default
skip policy, stops the tokenize step with one line instead of quarantining 5 of 6 partitions and publishing the sixth
with EOD id 5; a forged registration (another file) is refused before its file is read, and a forged part record
(other shards) stops the publish with manifest.json unchanged."""

from __future__ import annotations

import json

import dagster as dg
import pytest

import shard_loader
from shard_assets.definitions import ASSETS, build_definitions
from shard_assets.lib.layout import CURRENT_TOKENIZER_KEY, part_record_key, partition_record_key
from shard_assets.lib.spec import load_spec
from shard_assets.runner import RunFailed, build_dataset
from shard_assets.execution.local import failure_message, run_job
from tests.support.dagster_helpers import (
    AUTOMATED,
    forge_registration,
    instance,
    materialize_raw,
    run_sensor_tick,
    tiny_dataset,
    write_jsonl,
)

pytestmark = pytest.mark.integration


def _tick_and_run(defs, inst, resources, cursor, after=None) -> tuple[list[tuple[str, str, str]], object]:
    """Automation ticks, each requested materialisation run as the automation sensor would (a failure does not stop
    the ticks), until a tick requests nothing; `after(asset)` runs once an asset materialised. Returns
    [(asset, partition, failure or "")] and the cursor."""
    done = []
    for _ in range(6):
        result = dg.evaluate_automation_conditions(defs=defs, instance=inst, cursor=cursor)
        cursor = result.cursor
        requested = [(key, p) for key in AUTOMATED for p in result.get_requested_partitions(dg.AssetKey(key))]
        if not requested or any(failed for _, _, failed in done):
            return done, cursor
        for key, partition in requested:
            run = dg.materialize(
                ASSETS,
                selection=[key],
                partition_key=partition,
                instance=inst,
                resources=resources,
                raise_on_error=False,
            )
            done.append((key, partition or "", "" if run.success else failure_message(run)))
            if run.success and after is not None:
                after(key)
    return done, cursor


def test_a_forged_tokenizer_pointer_stops_the_sensor_and_automation_build_with_one_line(tmp_path):
    spec, store, resources = tiny_dataset(tmp_path, files=6, docs=80)
    inst, defs = instance(), build_definitions(resources)
    cursor = dg.evaluate_automation_conditions(defs=defs, instance=inst).cursor
    run_sensor_tick(inst, resources)

    def forge(asset: str) -> None:
        if asset == "tokenizer":
            pointer = store / CURRENT_TOKENIZER_KEY
            pointer.write_text(json.dumps({**json.loads(pointer.read_text()), "eod_id": 5}))

    done, _ = _tick_and_run(defs, inst, resources, cursor, after=forge)
    failures = [(asset, failed) for asset, _, failed in done if failed]
    assert failures and {asset for asset, _ in failures} == {"tokenized_shards"}, done
    message = failures[0][1]
    assert message.startswith("StateMismatchError: ") and "\n" not in message
    assert (
        f"{CURRENT_TOKENIZER_KEY}: says eod_id 5" in message
        and "not a special token" in message
        and "materialise the tokenizer asset again" in message
    )
    fp = json.loads((store / CURRENT_TOKENIZER_KEY).read_text())["fingerprint"]
    assert not list((store / "tokenized" / fp).rglob("*.json"))  # no partition quarantined, none recorded as tokenized
    assert not (store / "manifest.json").exists()  # nothing went live with EOD id 5
    assert dg.materialize(
        ASSETS, selection=["tokenizer"], instance=inst, resources=resources
    ).success  # what the message says to do
    assert json.loads((store / CURRENT_TOKENIZER_KEY).read_text())["eod_id"] == 0
    done, _ = _tick_and_run(defs, inst, resources, cursor)
    assert not [d for d in done if d[2]] and shard_loader.open_manifest(str(store)).manifest.tokenizer.eod_id == 0


@pytest.fixture
def built(tmp_path):
    spec, store, resources = tiny_dataset(tmp_path, files=2, docs=100)
    inst = instance()
    first = build_dataset(inst, load_spec(spec), resources)
    return tmp_path, store, resources, inst, first


def test_a_registration_naming_another_file_is_refused_before_that_file_is_read(built):
    tmp, store, resources, inst, _ = built
    (tmp / "elsewhere").mkdir()
    write_jsonl(tmp / "elsewhere" / "secret.jsonl", 50, seed=99)
    forge_registration(store, "web.part1", f"file://{tmp}/elsewhere/secret.jsonl")
    raw_before = sorted(p.name for p in (store / "raw" / "web").iterdir())
    _, message = materialize_raw(inst, resources, "web.part1")
    assert message.startswith("StateMismatchError: ") and "\n" not in message
    assert (
        f"{partition_record_key('web.part1')}: names file://{tmp}/elsewhere/secret.jsonl, "
        "which is not a file of source 'web'" in message
    )
    assert sorted(p.name for p in (store / "raw" / "web").iterdir()) == raw_before
    forge_registration(store, "web.part1", f"file://{tmp}/src/part0.jsonl")  # the source's, another partition's
    _, message = materialize_raw(inst, resources, "web.part1")
    assert "none of which is partition web.part1's file" in message


def test_a_part_record_naming_other_shards_stops_the_publish_and_keeps_the_live_version(built):
    _, store, resources, inst, first = built
    fp = shard_loader.open_manifest(str(store)).manifest.tokenizer.fingerprint
    own, other = (store / part_record_key(fp, p) for p in ("web.part0", "web.part1"))
    good = own.read_text()
    record = json.loads(good)
    record["shards"]["train"] = json.loads(other.read_text())["shards"][
        "train"
    ]  # web.part1's train shard under web.part0
    own.write_text(json.dumps(record))
    live = (store / "manifest.json").read_bytes()
    with pytest.raises(RunFailed) as failed:
        run_job(build_definitions(resources), "publish_job", inst)
    message = str(failed.value)
    assert "StateMismatchError: " in message and "\n" not in message
    assert f"{part_record_key(fp, 'web.part0')}: shards.train names tokenized/{fp}/train/web.part1-" in message
    assert (
        "materialise tokenized_shards for web.part0 again" in message and (store / "manifest.json").read_bytes() == live
    )
    record = json.loads(good)
    record["shards"]["train"]["npy"]["sha256"] = "0" * 64  # its own key, another content
    own.write_text(json.dumps(record))
    with pytest.raises(
        RunFailed,
        match=r"StateMismatchError: .*shards.train names tokenized/.*web.part0-.*but the sha256s it records give",
    ):
        run_job(build_definitions(resources), "publish_job", inst)
    assert (store / "manifest.json").read_bytes() == live and shard_loader.open_manifest(
        str(store)
    ).manifest.version == first.version
