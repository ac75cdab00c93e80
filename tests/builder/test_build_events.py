"""Issues 35 and 48: the Dagster events a build writes per partition are bounded (each is a SQLite write in a local
build): each partitioned asset of the ingest and tokenize runs adds 2 per partition (planned, materialization: what a
partition did is its metadata, not a log line) whatever else the run writes once; ingest_job holds two (raw_documents,
dedup), tokenize_job one."""

import json
from collections import Counter

import dagster as dg
import pytest

from shard_assets.defs.resources import DatasetResource, StoreResource
from shard_assets.lib.spec import load_spec
from shard_assets.runner import build_dataset

pytestmark = pytest.mark.integration
EVENTS_PER_PARTITION = 2  # per partitioned asset of the job
ASSETS = {"ingest_job": 2, "tokenize_job": 1}


def _events_by_job(tmp_path, files: int) -> Counter[str]:
    src = tmp_path / f"src{files}"
    src.mkdir()
    for i in range(files):
        docs = (json.dumps({"text": f"document {i} {j} " + "word " * 50}) + "\n" for j in range(100))
        (src / f"f{i}.jsonl").write_text("".join(docs))
    spec = tmp_path / f"spec{files}.toml"
    spec.write_text(
        'name = "e"\nval_fraction = 0.1\n[tokenizer]\nkind = "train_bpe"\nvocab_size = 300\n'
        f'[[sources]]\nname = "s"\nuri = "{src}/*.jsonl"\nformat = "jsonl"\n'
    )
    instance = dg.DagsterInstance.ephemeral()
    resources = {
        "dataset": DatasetResource(spec_path=str(spec)),
        "store": StoreResource(root=str(tmp_path / f"s{files}")),
    }
    result = build_dataset(instance, load_spec(spec), resources)
    events: Counter[str] = Counter()
    for run_id in result.run_ids:
        events[instance.get_run_by_id(run_id).job_name] += len(instance.all_logs(run_id))
    return events


def test_each_partition_adds_a_bounded_number_of_events(tmp_path):
    two, six = _events_by_job(tmp_path, 2), _events_by_job(tmp_path, 6)
    for job, assets in ASSETS.items():
        assert six[job] - two[job] == 4 * EVENTS_PER_PARTITION * assets, (job, two[job], six[job])
    assert six["publish_job"] == two["publish_job"] and six["tokenizer_job"] == two["tokenizer_job"]
