"""Issue 21 without a browser: the CLI and the code location (as `shard-assets dev` loads it, from inside the Dagster
home) use one spec and one store; each partition of a multi-partition run reports its own figures; a wrong
`text_column` ends the build naming the field, file and line; one Dagster home holds one dataset's partitions."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

import shard_loader
from shard_assets.definitions import build_definitions
from shard_assets.defs.partitions import HOME_DATASET_KEY, HomeHoldsAnotherDataset, sync_partitions
from shard_assets.lib.errors import RecordError
from shard_assets.lib.layout import part_record_key, raw_record_key
from shard_assets.lib.records import PartRecord, RawRecord, get_record
from shard_assets.lib.spec import load_spec
from shard_assets.lib.state import current_tokenizer
from shard_assets.lib.store import LocalFolderStore
from shard_assets.runner import build_dataset
from shard_assets.execution.local import run_job
from tests.support.dagster_helpers import instance, tiny_dataset, tiny_resources, write_jsonl, write_spec

pytestmark = pytest.mark.integration


def _cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DAGSTER_HOME", "SHARD_DATASET_SPEC", "DATASET_STORE", "DATASET_STORE_ROOT", "SHARD_PROJECT_ROOT")
    }
    return subprocess.run(
        [sys.executable, "-m", "shard_assets.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**clean, **env},
    )


def test_the_cli_and_the_code_location_run_from_the_dagster_home_use_one_store(tmp_path, monkeypatch):
    project = tmp_path / "project"
    tiny_dataset(project, files=2, docs=60)
    write_spec(project / "spec.toml", "src/*.jsonl")  # relative to the spec's folder
    out = _cli("build", "--workers", "1", cwd=project, SHARD_DATASET_SPEC="spec.toml")  # relative, as a user exports it
    assert out.returncode == 0, out.stderr[-2000:]
    version = shard_loader.open_manifest(str(project / "data/store")).manifest.version
    home = project / ".dagster_home" / "tiny"  # the CLI chose the dataset's own home
    monkeypatch.chdir(
        home
    )  # where `shard-assets dev` runs Dagster: its runs and sensor ticks load the code location here
    monkeypatch.setenv("SHARD_PROJECT_ROOT", str(project))
    monkeypatch.setenv("SHARD_DATASET_SPEC", "spec.toml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    for var in ("DATASET_STORE", "DATASET_STORE_ROOT"):
        monkeypatch.delenv(var, raising=False)
    defs = build_definitions()
    with dg.DagsterInstance.get() as inst:
        run_job(defs, "publish_job", inst)
        gc = run_job(defs, "gc_job", inst)
        logs = [e.user_message for e in inst.all_logs(gc.run_id) if "versions" in e.user_message]
    assert shard_loader.open_manifest(str(project / "data/store")).manifest.version == version
    assert not (home / "data").exists() and not (home / "spec.toml").exists()
    assert any("kept 1 versions" in line for line in logs), logs
    gc_cli = _cli("gc", cwd=project, SHARD_DATASET_SPEC="spec.toml")
    assert re.search(r"^versions kept\s+1: " + version, gc_cli.stdout, re.M), gc_cli.stdout + gc_cli.stderr


def test_each_partition_of_a_multi_partition_run_reports_its_own_figures(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i, n in enumerate((40, 90, 150)):
        write_jsonl(src / f"part{i}.jsonl", n, seed=i)
    with open(src / "part1.jsonl", "a") as f:  # drops in one partition only: 7 duplicates and 3 too short
        f.write((src / "part1.jsonl").read_text().splitlines()[0] + "\n" * 1)
        f.write(
            "\n".join(
                [json.dumps({"text": "Document 1-0 duplicate?"})]
                + [(src / "part1.jsonl").read_text().splitlines()[j] for j in range(1, 7)]
                + [json.dumps({"text": "short"})] * 3
            )
            + "\n"
        )
    spec = write_spec(tmp_path / "spec.toml", f"{src}/*.jsonl")
    resources, inst = tiny_resources(spec, tmp_path / "store"), instance()
    build_dataset(inst, load_spec(spec), resources, workers=1)
    runs = {job: inst.get_runs(filters=dg.RunsFilter(job_name=job)) for job in ("ingest_job", "tokenize_job")}
    assert [len(r) for r in runs.values()] == [2, 1]  # raw documents, then dedup; all three partitions in each run
    for run in runs["ingest_job"] + runs["tokenize_job"]:
        assert (run.tags["dagster/asset_partition_range_start"], run.tags["dagster/asset_partition_range_end"]) == (
            "web.part0",
            "web.part2",
        )
    store = LocalFolderStore(tmp_path / "store")
    fingerprint = current_tokenizer(store).fingerprint
    seen = set()
    for i, partition in enumerate(("web.part0", "web.part1", "web.part2")):
        raw = _metadata(inst, "raw_documents", partition)
        record = get_record(store, raw_record_key(partition), RawRecord, "test")
        lines = len((src / f"part{i}.jsonl").read_text().splitlines())
        assert raw["dagster/row_count"] == record.documents and raw["documents_in"] == lines
        assert raw["dropped_duplicate"] + raw["dropped_too_short"] == (lines - record.documents)
        assert f"part{i}.jsonl" in raw["source_files"] and not any(
            f"part{j}.jsonl" in raw["source_files"] for j in range(3) if j != i
        )
        assert raw["ingest_seconds"] >= 0 and " bytes)" in raw["text_in"]
        tokenized = _metadata(inst, "tokenized_shards", partition)
        part = get_record(store, part_record_key(fingerprint, partition), PartRecord, "test")
        assert tokenized["dagster/row_count"] == sum(e.documents for e in part.shards.values()) == record.documents
        assert (tokenized["train_tokens"], tokenized["val_tokens"]) == (
            part.shards["train"].tokens,
            part.shards["val"].tokens,
        )
        seen.add((raw["dagster/row_count"], tokenized["train_tokens"]))
    assert len(seen) == 3  # three partitions, three different sets of figures: no run totals
    assert (
        _metadata(inst, "raw_documents", "web.part1")["dropped_duplicate"] == 7
        and _metadata(inst, "raw_documents", "web.part0")["dropped_duplicate"] == 0
    )


def _metadata(inst: dg.DagsterInstance, asset: str, partition: str) -> dict:
    (record,) = inst.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1
    ).records
    return {k: v.value for k, v in record.asset_materialization.metadata.items()}


def test_a_wrong_text_column_ends_the_build_naming_the_field_file_and_line(tmp_path):
    tiny_dataset(tmp_path, files=2, docs=20)
    spec = tmp_path / "spec.toml"
    spec.write_text(spec.read_text() + 'text_column = "body"\n')
    (tmp_path / "home").mkdir()
    out = _cli(
        "build",
        "--spec",
        str(spec),
        "--store",
        str(tmp_path / "store"),
        "--workers",
        "1",
        cwd=tmp_path,
        DAGSTER_HOME=str(tmp_path / "home"),
    )
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert re.match(
        r"error: every partition failed in ingest_job \(2 of 2\); "
        r"the first: ingest_job \[web.part0\] failed \(run [0-9a-f-]+\): "
        rf"SourceError: (file://)?{tmp_path}/src/part0.jsonl:1: field 'body' is missing",
        last,
    ), last
    assert "ingest_job (raw_documents): 2/2 partitions (2 failed)" in out.stderr
    assert "no raw_documents" not in out.stderr  # the tokenizer step, which could only say what is missing, never ran


def test_one_dagster_home_holds_one_datasets_partitions(tmp_path):
    spec, store, _ = tiny_dataset(tmp_path / "a", files=1, docs=10)
    other = tmp_path / "b" / "spec.toml"
    tiny_dataset(tmp_path / "b", files=1, docs=10)
    other.write_text(other.read_text().replace('name = "tiny"', 'name = "other"'))
    inst = instance()
    sync_partitions(inst, LocalFolderStore(store), load_spec(spec))
    sync_partitions(
        inst, LocalFolderStore(tmp_path / "another-store"), load_spec(spec)
    )  # the same dataset in another store: its keys
    with pytest.raises(
        HomeHoldsAnotherDataset,
        match=(
            rf"holds the partitions of dataset 'tiny' \(spec {spec}\), not 'other' \(spec {other}\): "
            r"give each dataset its own Dagster home"
        ),
    ):
        sync_partitions(inst, LocalFolderStore(tmp_path / "b" / "store"), load_spec(other))
    assert inst.get_dynamic_partitions("raw_files") == ["web.part0"]
    claim = json.dumps({"dataset": "tiny", "spec": str(spec)})  # as a home claimed before the claim was a record
    inst.run_storage.set_cursor_values({HOME_DATASET_KEY: claim})
    with pytest.raises(HomeHoldsAnotherDataset, match=r"holds the partitions of dataset 'tiny'"):
        sync_partitions(inst, LocalFolderStore(tmp_path / "b" / "store"), load_spec(other))
    inst.run_storage.set_cursor_values({HOME_DATASET_KEY: '{"dataset": 7}'})
    with pytest.raises(RecordError, match=r"cursor shard_assets/dataset.*dataset"):
        sync_partitions(inst, LocalFolderStore(store), load_spec(spec))
