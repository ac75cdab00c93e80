"""A backfill of any subset of partitions from the CLI: `dagster job backfill` from workspace.yaml queues one
tokenize_job run per chosen partition, for the daemon's run queue (dagster.yaml's limits) to start."""

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
from dagster._core.instance.ref import InstanceRef

from shard_assets.defs.partitions import sync_partitions
from shard_assets.lib.store import LocalFolderStore
from shard_assets.lib.spec import load_spec
from tests.support.dagster_helpers import tiny_dataset
from tests.support.patience import HUNG
import pytest

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]


def _instance(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))


def test_cli_backfill_queues_one_run_per_chosen_partition(tmp_path):
    spec, store, _ = tiny_dataset(tmp_path, files=3, docs=20)
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").symlink_to(ROOT / "dagster.yaml")
    with _instance(home) as inst:
        assert sync_partitions(inst, LocalFolderStore(store), load_spec(spec))[2] == [
            "web.part0",
            "web.part1",
            "web.part2",
        ]
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "SHARD_DATASET_SPEC": str(spec),
        "DATASET_STORE_ROOT": str(store),
        "HF_HUB_OFFLINE": "1",
    }
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dagster",
            "job",
            "backfill",
            "-w",
            "workspace.yaml",
            "-j",
            "tokenize_job",
            "--partitions",
            "web.part0,web.part2",
            "--noprompt",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=HUNG,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    with _instance(home) as inst:
        runs = inst.get_runs()
    assert sorted(r.tags["dagster/partition"] for r in runs) == ["web.part0", "web.part2"]
    assert {(r.job_name, r.status, r.tags["dataset/step"]) for r in runs} == {
        ("tokenize_job", dg.DagsterRunStatus.QUEUED, "tokenize")
    }
    assert len({r.tags["dagster/backfill"] for r in runs}) == 1
