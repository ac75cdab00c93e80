"""One prefix, one dataset (#26 item 1): the first build records its dataset in the store; a build of another
dataset into that prefix is refused before it writes anything, with one line naming both and what to do, whether
it comes after the first (discovery, or an asset launched from the UI without discovery) or at the same time;
two builds of one spec at once both succeed with one version."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg
import pytest

import shard_loader
from shard_assets.definitions import ASSETS
from shard_assets.lib import ownership
from shard_assets.lib.errors import PrefixOwnedError
from shard_assets.lib.layout import OWNER_KEY
from shard_assets.lib.ownership import claim
from shard_assets.lib.spec import load_spec
from shard_assets.lib.store.s3 import S3ObjectStore
from shard_assets.runner import build_dataset
from shard_assets.execution.local import failure_message
from tests.support.build_helpers import assert_every_manifest_whole
from tests.support.dagster_helpers import instance, tiny_dataset, tiny_resources, write_jsonl
from tests.support.seaweedfs import WRITER

ROOT = Path(__file__).resolve().parents[2]


def other_spec(tmp: Path, vocab: int = 2048) -> Path:
    """A second dataset, `other`: its own two files and vocabulary."""
    (tmp / "other").mkdir(exist_ok=True)
    for i in range(2):
        write_jsonl(tmp / "other" / f"o{i}.jsonl", 90, seed=40 + i)
    path = tmp / "other.toml"
    path.write_text(
        f'name = "other"\nval_fraction = 0.2\nmin_chars = 10\n[tokenizer]\nvocab_size = {vocab}\n'
        f'[[sources]]\nname = "web"\nuri = "{tmp}/other/*.jsonl"\nformat = "jsonl"\n'
    )
    return path


def snapshot(store: Path) -> dict[str, bytes]:
    return {p.relative_to(store).as_posix(): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def assert_refusal(message: str, owner: str, intruder: str) -> None:
    assert "\n" not in message
    assert f"holds dataset {owner!r}" in message and f"refusing to build {intruder!r}" in message
    assert "its own prefix (--store, DATASET_STORE_ROOT or DATASET_BINS_PATH)" in message


@pytest.mark.integration
def test_another_dataset_is_refused_before_it_writes_anything_by_discovery_and_by_an_asset_launched_alone(tmp_path):
    spec, store, resources = tiny_dataset(tmp_path, files=2, docs=100)
    inst = instance()
    first = build_dataset(inst, load_spec(spec), resources)
    assert json.loads((store / OWNER_KEY).read_text())["dataset"] == "tiny"
    before = snapshot(store)
    other = other_spec(tmp_path)
    with pytest.raises(PrefixOwnedError) as refused:
        build_dataset(instance(), load_spec(other), tiny_resources(other, store))
    assert_refusal(str(refused.value), "tiny", "other")
    assert snapshot(store) == before  # not a probe, not a registration, not a record
    # "Materialize all" in the UI runs assets without discovery: the same instance's partitions, the other spec
    for selection, partition in (
        (["raw_documents"], "web.part0"),
        (["tokenizer"], None),
        (["tokenized_shards"], "web.part1"),
        (["splits"], None),
    ):
        result = dg.materialize(
            ASSETS,
            selection=selection,
            partition_key=partition,
            instance=inst,
            resources=tiny_resources(other, store),
            raise_on_error=False,
        )
        assert not result.success and failure_message(result).startswith("PrefixOwnedError: "), (
            selection,
            failure_message(result),
        )
    assert snapshot(store) == before
    assert shard_loader.open_manifest(str(store)).manifest.version == first.version


@pytest.mark.integration
def test_a_prefix_published_before_owner_records_belongs_to_its_live_dataset(tmp_path):
    spec, store, resources = tiny_dataset(tmp_path, files=1, docs=80)
    build_dataset(instance(), load_spec(spec), resources)
    (store / OWNER_KEY).unlink()  # as a store built by an older version holds none
    ownership._CLAIMED.clear()
    other = other_spec(tmp_path)
    with pytest.raises(PrefixOwnedError, match=r"holds dataset 'tiny' \(its manifest.json\)"):
        build_dataset(instance(), load_spec(other), tiny_resources(other, store))
    assert not (store / OWNER_KEY).exists()
    again = build_dataset(instance(), load_spec(spec), resources)  # its own dataset claims it again
    assert again.left_out == 0 and json.loads((store / OWNER_KEY).read_text())["dataset"] == "tiny"


@pytest.mark.integration
def test_racing_claims_on_a_real_s3_server_leave_one_owner_and_refuse_the_other(seaweed, monkeypatch):
    seaweed.create_bucket("owners")
    found = ownership.find_record
    both_read = threading.Barrier(2, timeout=60)

    def read_then_wait(*args, **kwargs):  # both claimants see no owner before either writes one
        record = found(*args, **kwargs)
        both_read.wait()
        return record

    monkeypatch.setattr(ownership, "find_record", read_then_wait)
    for prefix, names in (("different", ("alpha", "beta")), ("same", ("alpha", "alpha"))):
        ownership._CLAIMED.clear()
        stores = [S3ObjectStore(seaweed.client(WRITER), "owners", prefix, seaweed.url) for _ in names]
        with ThreadPoolExecutor(2) as pool:
            outcomes = list(pool.map(lambda args: _outcome(lambda: claim(*args)), zip(stores, names)))
        owner = json.loads(
            seaweed.client(WRITER).get_object(Bucket="owners", Key=f"{prefix}/{OWNER_KEY}")["Body"].read()
        )["dataset"]
        if names[0] == names[1]:
            assert outcomes == [None, None] and owner == "alpha"
        else:
            loser = next(n for n in names if n != owner)
            (refusal,) = [o for o in outcomes if o is not None]
            assert_refusal(refusal, owner, loser)


def _outcome(call) -> str | None:
    try:
        call()
    except PrefixOwnedError as exc:
        return str(exc)
    return None


def _cli_build(seaweed, tmp: Path, spec: Path, name: str, prefix: str) -> subprocess.Popen:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("R2_", "AWS_", "DATASET_", "S3_"))}
    home = tmp / f"home-{name}"
    home.mkdir()
    env = {
        **clean,
        "HF_HUB_OFFLINE": "1",
        "DAGSTER_HOME": str(home),
        "DATASET_STORE": "s3",
        "S3_ENDPOINT_URL": seaweed.url,
        "DATASET_STORE_ROOT": f"s3://concurrent/{prefix}",
        "AWS_ACCESS_KEY_ID": WRITER[0],
        "AWS_SECRET_ACCESS_KEY": WRITER[1],
        "XDG_CACHE_HOME": str(tmp / f"xdg-{name}"),
    }
    return subprocess.Popen(
        [str(ROOT / ".venv/bin/shard-assets"), "build", "--spec", str(spec), "--workers", "1"],
        cwd=home,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.system
def test_two_builds_into_one_s3_prefix_at_once_one_spec_publishes_once_two_specs_leave_one_dataset(seaweed, tmp_path):
    seaweed.create_bucket("concurrent")
    spec, _, _ = tiny_dataset(tmp_path, files=2, docs=90)
    other = other_spec(tmp_path, vocab=300)
    runs = {
        "same-a": _cli_build(seaweed, tmp_path, spec, "same-a", "same"),
        "same-b": _cli_build(seaweed, tmp_path, spec, "same-b", "same"),
        "tiny": _cli_build(seaweed, tmp_path, spec, "tiny", "mixed"),
        "other": _cli_build(seaweed, tmp_path, other, "other", "mixed"),
    }
    outputs = {
        name: p.communicate(timeout=900) for name, p in runs.items()
    }  # read as they run: a full pipe would block a build
    done = {name: (runs[name].returncode, *out) for name, out in outputs.items()}
    for name in ("same-a", "same-b"):
        assert done[name][0] == 0, done[name][2][-3000:]
    versions = {
        next(line.split()[1] for line in done[n][1].splitlines() if line.startswith("version"))
        for n in ("same-a", "same-b")
    }
    assert len(versions) == 1  # one spec, one content, one version, whoever wrote it first
    codes = {name: done[name][0] for name in ("tiny", "other")}
    assert sorted(codes.values()) == [0, 2], {n: done[n][2][-2000:] for n in codes}
    winner, loser = sorted(codes, key=codes.get)
    (line,) = [s for s in done[loser][2].splitlines() if s.startswith("error:")]
    assert_refusal(line, winner, loser)
    client = seaweed.client(WRITER)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="concurrent", Prefix="mixed/").get("Contents", [])]
    assert (
        json.loads(client.get_object(Bucket="concurrent", Key=f"mixed/{OWNER_KEY}")["Body"].read())["dataset"] == winner
    )
    assert not [k for k in keys if f"manifests/{loser}-" in k]
    live = json.loads(client.get_object(Bucket="concurrent", Key="mixed/manifest.json")["Body"].read())
    assert live["dataset"]["name"] == winner
    for prefix in ("same", "mixed"):
        local = tmp_path / f"copy-{prefix}"
        for key in [
            o["Key"] for o in client.list_objects_v2(Bucket="concurrent", Prefix=f"{prefix}/").get("Contents", [])
        ]:
            path = local / key[len(prefix) + 1 :]
            path.parent.mkdir(parents=True, exist_ok=True)
            client.download_file("concurrent", key, str(path))
        assert assert_every_manifest_whole(local) >= 2
