"""A tokenizer change is said where a data engineer looks (#33): a BPE re-trained because a file was added changes
every token id; the build says so on stderr and the tokenizer asset's `change` metadata (and a warning in its run's
log) names both fingerprints and how to keep one tokenizer (`kind = "file"`)."""

import os
import subprocess
import sys

import dagster as dg
import pytest

import shard_loader
from tests.support.dagster_helpers import tiny_dataset, write_jsonl

pytestmark = pytest.mark.integration


def _build(project) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME" and not k.startswith(("SHARD_", "DATASET_"))}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "shard_assets.cli",
            "build",
            "--spec",
            "spec.toml",
            "--store",
            "store",
            "--workers",
            "1",
        ],
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
    said = [line for line in second.stderr.splitlines() if line.startswith("warning: the tokenizer changed")]
    assert len(said) == 1 and f"from {before} to {after}" in said[0] and 'kind = "file"' in said[0], second.stderr
    with dg.DagsterInstance.from_config(str(tmp_path / ".dagster_home" / "tiny")) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("tokenizer"))
        assert f"from {before} to {after}" in event.asset_materialization.metadata["change"].value
