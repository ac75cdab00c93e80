"""The deployment configurations load: local, Slurm, Kubernetes and ECS instance files validate against
Dagster's instance schema and each configured class's own config schema; the cluster files carry
deploy/shared.yaml word for word; the definitions validate."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dagster._config import validate_config
from dagster._core.instance.config import dagster_instance_config
from tests.support.patience import HUNG

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
ENV = {
    "DAGSTER_PG_HOST": "db",
    "DAGSTER_PG_PORT": "5432",
    "DAGSTER_PG_USER": "u",
    "DAGSTER_PG_PASSWORD": "p",
    "DAGSTER_PG_DB": "d",
    "R2_DATASET_BUCKET_NAME": "b",
    "S3_ENDPOINT_URL": "https://example.r2.cloudflarestorage.com",
    "SHARD_SLURM_PARTITION": "cpu",
}
CLUSTER_FILES = ["deploy/slurm/dagster.yaml", "deploy/k8s/dagster.yaml", "deploy/ecs/dagster.yaml"]


@pytest.mark.parametrize("path", ["dagster.yaml", *CLUSTER_FILES])
def test_instance_configs_validate(path, monkeypatch):
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    config_file = ROOT / path
    config, _ = dagster_instance_config(str(config_file.parent), config_filename=config_file.name)
    raw = yaml.safe_load(config_file.read_text())
    for section in ("run_launcher", "run_coordinator", "compute_logs"):
        if section not in raw:
            continue
        spec = raw[section]
        cls = getattr(importlib.import_module(spec["module"]), spec["class"])
        result = validate_config(cls.config_type(), spec.get("config", {}))
        assert result.success, f"{path} {section}: {[e.message for e in result.errors]}"
    if "postgres" in raw.get("storage", {}):
        from dagster_postgres import DagsterPostgresStorage

        assert validate_config(DagsterPostgresStorage.config_type(), raw["storage"]["postgres"]).success
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"


@pytest.mark.parametrize("path", CLUSTER_FILES)
def test_cluster_instance_files_carry_the_shared_sections_word_for_word(path):
    shared = (ROOT / "deploy/shared.yaml").read_text()
    text = (ROOT / path).read_text()
    body = shared[shared.index("storage:") :]  # the sections, without the header comment
    assert body in text, f"{path} differs from deploy/shared.yaml in its shared sections"
    assert set(yaml.safe_load(shared)) == {"storage", "run_coordinator", "run_retries", "run_monitoring", "telemetry"}


def test_the_slurm_instance_reads_postgres_and_the_partition_from_the_documented_variables(monkeypatch, tmp_path):
    for k, v in {**ENV, "DAGSTER_PG_PORT": "6543", "SHARD_SLURM_PARTITION": "gpu-a100"}.items():
        monkeypatch.setenv(k, v)
    (tmp_path / "dagster.yaml").write_text((ROOT / "deploy/slurm/dagster.yaml").read_text())
    config, _ = dagster_instance_config(str(tmp_path))
    assert config["storage"]["postgres"]["postgres_db"] == {
        "hostname": {"env": "DAGSTER_PG_HOST"},
        "port": {"env": "DAGSTER_PG_PORT"},
        "username": {"env": "DAGSTER_PG_USER"},
        "password": {"env": "DAGSTER_PG_PASSWORD"},
        "db_name": {"env": "DAGSTER_PG_DB"},
        "scheme": "postgresql+psycopg2",
    }
    from shard_assets.execution.slurm import SlurmRunLauncher

    launcher_config = config["run_launcher"]["config"]
    result = validate_config(SlurmRunLauncher.config_type(), launcher_config)
    assert result.success
    from dagster._config import process_config

    assert process_config(SlurmRunLauncher.config_type(), launcher_config).value["partition"] == "gpu-a100"


def test_definitions_validate_from_workspace(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HUNG,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
