"""A tokenizer change is said where a data engineer looks (#33): a BPE re-trained because a file was added changes
every token id; the build says so on stderr before any run (from what the current BPE was trained on) and again once
the tokenizer is made, before it tokenizes with it; the tokenizer asset's `change` metadata (and a warning in its run's
log) names both fingerprints and how to keep the old one: pin it with `[tokenizer] fingerprint = "..."`, which later
builds then use whatever files arrive. In the UI, the tokenizer's `keeps_token_ids` check warns as soon as the sensor
registers a file that would retrain it (the sensor's own runs keep the current tokenizer)."""

import os
import subprocess

import dagster as dg
import pytest

import shard_loader
from shard_assets.defs.sensors import raw_files_sensor
from shard_assets.lib.spec import load_spec
from shard_assets.runner import build_dataset
from tests.support.build_helpers import build_command
from tests.support.dagster_helpers import instance, tiny_dataset, write_jsonl

pytestmark = pytest.mark.integration


def _build(project) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME" and not k.startswith(("SHARD_", "DATASET_"))}
    return subprocess.run(
        build_command("spec.toml", "store"),
        cwd=project,
        env={**env, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )


def _fingerprint(store) -> str:
    return shard_loader.open_manifest(str(store)).manifest.tokenizer.fingerprint


def test_a_retrained_tokenizer_is_named_by_the_build_and_the_asset(tmp_path):
    spec, store, _ = tiny_dataset(tmp_path, files=2, docs=80)
    first = _build(tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "tokenizer changed" not in first.stderr
    before = _fingerprint(store)
    write_jsonl(tmp_path / "src" / "part2.jsonl", 200, seed=9)  # new text: the BPE trained on it differs
    second = _build(tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    after = _fingerprint(store)
    assert before != after
    lines = second.stderr.splitlines()
    (forecast,) = [i for i, line in enumerate(lines) if line.startswith("warning: this build replaces the tokenizer")]
    assert f"replaces the tokenizer {before}: the BPE would be trained again (1 partitions new" in lines[forecast]
    assert forecast < next(i for i, line in enumerate(lines) if line.startswith("ingest_job"))  # before any run
    said = [i for i, line in enumerate(lines) if line.startswith("warning: the tokenizer changed")]
    assert len(said) == 1 and f"from {before} to {after}" in lines[said[0]], second.stderr
    assert f'set [tokenizer] fingerprint = "{before}"' in lines[said[0]]
    assert said[0] < next(i for i, line in enumerate(lines) if line.startswith("tokenize_job"))  # before tokenizing
    with dg.DagsterInstance.from_config(str(tmp_path / ".dagster_home" / "tiny")) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("tokenizer"))
        assert f"from {before} to {after}" in event.asset_materialization.metadata["change"].value
        check = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [dg.AssetCheckKey(dg.AssetKey("tokenizer"), "keeps_token_ids")]
        )
        (execution,) = check.values()
        assert execution.status.value == "SUCCEEDED"  # made now: the next build keeps it


def test_the_sensor_warns_on_the_tokenizer_when_a_new_file_would_retrain_it(tmp_path):
    spec, store, resources = tiny_dataset(tmp_path, files=2, docs=80)
    inst = instance()
    build_dataset(inst, load_spec(spec), resources)
    current = _fingerprint(store)
    tick = lambda: raw_files_sensor(dg.build_sensor_context(instance=inst, resources=resources))  # noqa: E731
    assert tick().asset_events == []  # nothing new: nothing said
    write_jsonl(tmp_path / "src" / "part2.jsonl", 200, seed=9)
    (said,) = tick().asset_events
    assert isinstance(said, dg.AssetCheckEvaluation) and said.check_name == "keeps_token_ids"
    assert not said.passed and said.severity == dg.AssetCheckSeverity.WARN
    assert said.description.startswith(f"this build replaces the tokenizer {current}: the BPE would be trained again")
    assert f'set [tokenizer] fingerprint = "{current}"' in said.description
    inst.report_runless_asset_event(said)  # what the sensor daemon does with it: the UI shows it on the tokenizer
    key = dg.AssetCheckKey(dg.AssetKey("tokenizer"), "keeps_token_ids")
    (shown,) = inst.event_log_storage.get_latest_asset_check_execution_by_key([key]).values()
    assert shown.status.value == "FAILED" and shown.event.dagster_event.event_specific_data.severity.value == "WARN"
    spec.write_text(spec.read_text().replace('kind = "train_bpe"', f'kind = "train_bpe"\nfingerprint = "{current}"'))
    write_jsonl(tmp_path / "src" / "part3.jsonl", 200, seed=10)
    (kept,) = tick().asset_events
    assert kept.passed and "keeps the current one" in kept.description


def test_a_pinned_fingerprint_keeps_the_tokenizer_as_files_arrive(tmp_path):
    spec, store, _ = tiny_dataset(tmp_path, files=2, docs=80)
    assert _build(tmp_path).returncode == 0
    kept = _fingerprint(store)
    spec.write_text(spec.read_text().replace('kind = "train_bpe"', f'kind = "train_bpe"\nfingerprint = "{kept}"'))
    write_jsonl(tmp_path / "src" / "part2.jsonl", 200, seed=9)  # what retrained the BPE above
    pinned = _build(tmp_path)
    assert pinned.returncode == 0, pinned.stderr[-2000:]
    assert _fingerprint(store) == kept and "tokenizer changed" not in pinned.stderr
    m = shard_loader.open_manifest(str(store)).manifest
    assert "web.part2" in {e.partition for s in m.splits.values() for e in s.shards}

    spec.write_text(spec.read_text().replace(kept, "0123456789abcdef"))
    missing = _build(tmp_path)
    assert missing.returncode != 0 and _fingerprint(store) == kept  # nothing published with another tokenizer
    assert "[tokenizer].fingerprint 0123456789abcdef: no tokenizer with this fingerprint in" in missing.stderr
    spec.write_text(spec.read_text().replace("0123456789abcdef", "abc"))
    bad = _build(tmp_path)
    (line,) = bad.stderr.strip().splitlines()
    assert bad.returncode == 2 and line.startswith("error: ") and "[tokenizer].fingerprint 'abc'" in line, bad.stderr
    assert "16 lowercase hex digits" in line
