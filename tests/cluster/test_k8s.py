"""The same definitions on Kubernetes, without a cluster: an instance with deploy/k8s/dagster.yaml's run
launcher turns a tokenize run over a range of partitions into one Kubernetes Job (one pod) that executes the
run from the code location, sized and configured as the file says; the request to the cluster is captured."""

import os
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.instance.ref import InstanceRef
from dagster._core.launcher import LaunchRunContext

from shard_assets.definitions import build_definitions
from shard_assets.defs.jobs import TOKENIZE_TAGS
from shard_assets.defs.partitions import RANGE_TAGS
from tests.support.dagster_helpers import tiny_dataset

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: none, user: {token: not-a-token}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


class CapturedJobs:
    """Stands in for the Kubernetes API: keeps the Job bodies the launcher would create."""

    def __init__(self):
        self.jobs = []

    def create_namespaced_job_with_retries(self, body, namespace):
        self.jobs.append((namespace, body))


def _k8s_home(tmp_path: Path) -> Path:
    """A Dagster home with deploy/k8s/dagster.yaml's launcher and queue (SQLite instead of Postgres, a kubeconfig
    pointing nowhere instead of in-cluster credentials, no S3 compute logs)."""
    config = yaml.safe_load((ROOT / "deploy/k8s/dagster.yaml").read_text())
    launcher = config["run_launcher"]
    launcher["config"].update(load_incluster_config=False, kubeconfig_file=str(tmp_path / "kubeconfig"))
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    home = tmp_path / "home"
    home.mkdir()
    kept = {k: config[k] for k in ("run_launcher", "run_coordinator", "concurrency", "telemetry") if k in config}
    (home / "dagster.yaml").write_text(yaml.safe_dump(kept))
    return home


def test_a_range_run_becomes_one_kubernetes_job_running_the_code_location(tmp_path, monkeypatch):
    _, _, resources = tiny_dataset(tmp_path, files=3, docs=20)
    home = _k8s_home(tmp_path)
    monkeypatch.chdir(ROOT)
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as inst:
        launcher = inst.run_launcher
        limits = inst.get_concurrency_config()
        assert limits.pool_config.default_pool_limit == 480  # tokenize steps, however their run was launched
        assert limits.run_queue_config.max_concurrent_runs == 500
        assert [dict(t) for t in limits.run_queue_config.tag_concurrency_limits] == [
            {"key": "dataset/step", "value": "tokenize", "limit": 480}
        ]
        assert type(launcher).__name__ == "K8sRunLauncher"
        launcher._api_client = captured = CapturedJobs()
        inst.add_dynamic_partitions("raw_files", ["web.part0", "web.part1", "web.part2"])
        job = build_definitions(resources).resolve_job_def("tokenize_job")
        origin = (
            ReconstructableRepository.for_module(
                "shard_assets.definitions", "defs", str(ROOT), container_image="shard-datasets:test"
            )
            .get_reconstructable_job("tokenize_job")
            .get_python_origin()
        )
        run = inst.create_run_for_job(
            job, tags={**job.tags, **dict(zip(RANGE_TAGS, ("web.part0", "web.part2")))}, job_code_origin=origin
        )
        launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
    assert len(captured.jobs) == 1  # one pod for the three partitions
    namespace, body = captured.jobs[0]
    container = body.spec.template.spec.containers[0]
    assert (
        namespace == "shard-datasets"
        and body.spec.template.spec.service_account_name == "dagster"
        and container.image == "shard-datasets:test"
    )
    assert container.args[:3] == ["dagster", "api", "execute_run"] and run.run_id in container.args[3]
    assert container.resources.requests == {"cpu": "1", "memory": "4Gi"}
    assert {e.name: e.value for e in container.env}["DATASET_STORE"] == "r2"
    assert [s.secret_ref.name for s in container.env_from] == ["dagster-postgres-credentials", "r2-dataset-credentials"]
    assert {k: run.tags[k] for k in (*RANGE_TAGS, *TOKENIZE_TAGS)} == {
        RANGE_TAGS[0]: "web.part0",
        RANGE_TAGS[1]: "web.part2",
        **TOKENIZE_TAGS,
    }
    assert os.environ.get("KUBERNETES_SERVICE_HOST") is None  # nothing here talked to a cluster
