"""The deployment configurations load: local, Kubernetes and ECS instance files validate against
Dagster's instance schema and each configured class's own config schema; the definitions validate."""

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

ROOT = Path(__file__).resolve().parents[1]
ENV = {"DAGSTER_PG_HOST": "db", "DAGSTER_PG_USER": "u", "DAGSTER_PG_PASSWORD": "p", "DAGSTER_PG_DB": "d",
       "R2_DATASET_BUCKET_NAME": "b", "S3_ENDPOINT_URL": "https://example.r2.cloudflarestorage.com"}


@pytest.mark.parametrize("path", ["dagster.yaml", "deploy/k8s/dagster.yaml", "deploy/ecs/dagster.yaml"])
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


def test_definitions_validate_from_workspace(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT, capture_output=True, text=True, timeout=HUNG, env={**os.environ, "DAGSTER_HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
