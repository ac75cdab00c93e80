"""Run tags say what a run does (#33: ingest_job runs were tagged `dataset/step: tokenize`), and the project's
dagster.yaml still limits ingest and tokenize runs together, as `shard-assets build` reads it."""

import shutil

import dagster as dg

from shard_assets.defs.jobs import ingest_job, tokenize_job
from shard_assets.execution.local import worker_limit
from tests.support.clone import ROOT


def test_each_heavy_job_is_tagged_with_its_own_step_and_one_limit_covers_both(tmp_path):
    assert ingest_job.tags["dataset/step"] == "ingest" and tokenize_job.tags["dataset/step"] == "tokenize"
    shutil.copy(ROOT / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
        assert [(t["key"], t.get("value")) for t in limits] == [("dataset/step", None)]  # any value of the key
        assert worker_limit(instance) == 2
