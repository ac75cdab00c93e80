"""Secrets never leak: a build and a load run with recognisable fake keys in the environment; every log line,
Dagster event (text and metadata), run config, file of the Dagster instance (event log, captured logs),
stored object and error text is scanned. Each store kind is one parametrization of the same scan."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

import shard_loader
from shard_assets.runner import build_dataset
from shard_assets.defs.resources import DatasetResource, default_resources
from shard_assets.lib.store import ObjectStoreError
from shard_loader import ShardLoaderError, TokenDataset
from tests.support.dagster_helpers import tiny_dataset

pytestmark = pytest.mark.integration

WRITE_ID, WRITE_SECRET = "AKIAZEBRAWRITE000001", "zebra-write-secret-MustNeverLeak-000001"
READ_ID, READ_SECRET = "AKIAZEBRAREAD0000002", "zebra-read-secret-MustNeverLeak-0000002"
SECRETS = (WRITE_ID, WRITE_SECRET, READ_ID, READ_SECRET)
KEY_ENV = {
    "R2_DATASET_ACCOUNT_ID": "acct",
    "R2_DATASET_WRITE_ACCESS_KEY_ID": WRITE_ID,
    "R2_DATASET_WRITE_SECRET_ACCESS_KEY": WRITE_SECRET,
    "R2_DATASET_READ_ACCESS_KEY_ID": READ_ID,
    "R2_DATASET_READ_SECRET_ACCESS_KEY": READ_SECRET,
}


@dataclass
class Deployment:
    """Where a build writes and a load reads, with the failing calls whose error texts are scanned."""

    env: dict[str, str]
    loader_url: str
    loader_options: dict
    stored_texts: Callable[[], list[str]]
    failing_calls: list[Callable[[], object]]


def _local(tmp: Path) -> Iterator[Deployment]:
    store = tmp / "store"
    yield Deployment(
        env={"DATASET_STORE_ROOT": str(store)},
        loader_url=str(store),
        loader_options={},
        stored_texts=lambda: [p.read_bytes().decode("latin-1") for p in store.rglob("*") if p.is_file()],
        failing_calls=[
            lambda: shard_loader.open_manifest(str(tmp / "missing")),
            lambda: default_resources()["store"].store().get_bytes("missing/key.json"),
        ],
    )


def _s3(tmp: Path) -> Iterator[Deployment]:
    from tests.support.s3_proxy import LoopbackS3

    s3 = LoopbackS3()
    try:
        s3.create_bucket("secret-test")
        client = s3.client(via_proxy=False)

        def stored() -> list[str]:
            keys = [o["Key"] for o in client.list_objects_v2(Bucket="secret-test")["Contents"]]
            assert any(k.endswith("manifest.json") for k in keys) and len(keys) > 10
            return [client.get_object(Bucket="secret-test", Key=k)["Body"].read().decode("latin-1") for k in keys]

        def denied() -> None:  # the proxy refuses the request: botocore's AccessDenied must not carry the key
            s3.proxy.fail_after["/secret-test/ds/manifest.json"] = 0
            shard_loader.open_manifest("r2://secret-test/ds/manifest.json", endpoint_url=s3.url)

        yield Deployment(
            env={
                "DATASET_STORE": "r2",
                "S3_ENDPOINT_URL": s3.url,
                "R2_DATASET_BUCKET_NAME": "secret-test",
                "DATASET_BINS_PATH": "ds",
            },
            loader_url="r2://secret-test/ds/manifest.json",
            loader_options={"endpoint_url": s3.url},
            stored_texts=stored,
            failing_calls=[
                lambda: shard_loader.open_manifest("r2://secret-test/missing/manifest.json", endpoint_url=s3.url),
                lambda: shard_loader.open_manifest("r2://no-such-bucket/manifest.json", endpoint_url=s3.url),
                lambda: default_resources()["store"].store().get_bytes("missing/key.json"),
                denied,
            ],
        )
    finally:
        s3.close()


DEPLOYMENTS = {"local": _local, "s3": _s3}


@pytest.fixture(params=sorted(DEPLOYMENTS))
def deployment(request, tmp_path, monkeypatch) -> Iterator[Deployment]:
    for var in ("DATASET_STORE", "DATASET_STORE_ROOT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)
    for var, value in KEY_ENV.items():
        monkeypatch.setenv(var, value)
    for deployment in DEPLOYMENTS[request.param](tmp_path):
        for var, value in deployment.env.items():
            monkeypatch.setenv(var, value)
        yield deployment


def _hits(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def _dagster_texts(inst: dg.DagsterInstance, run_ids: tuple[str, ...]) -> list[str]:
    """Every event of every run as text, every materialisation's metadata values, and every run config."""
    texts = []
    for run_id in run_ids:
        for entry in inst.all_logs(run_id):
            texts.append(str(entry))
            if entry.asset_materialization is not None:
                texts += [f"{k}={v.value!r}" for k, v in entry.asset_materialization.metadata.items()]
        texts.append(str(inst.get_run_by_id(run_id).run_config))
    return texts


def test_no_key_appears_in_logs_events_metadata_objects_or_errors(deployment, tmp_path, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    spec, _, _ = tiny_dataset(tmp_path)
    home = tmp_path / "dagster_home"
    home.mkdir()
    inst = dg.DagsterInstance.local_temp(str(home))
    result = build_dataset(
        inst,
        DatasetResource(spec_path=str(spec)).spec(),
        {"dataset": DatasetResource(spec_path=str(spec)), "store": default_resources()["store"]},
    )
    ds = TokenDataset(
        deployment.loader_url,
        seq_len=16,
        batch_size=2,
        cache_dir=tmp_path / "cache",
        store_options=deployment.loader_options,
    )
    assert sum(1 for _ in ds) > 0

    errors = []
    for call in deployment.failing_calls:
        with pytest.raises((ShardLoaderError, ObjectStoreError)) as info:
            call()
        errors.append(f"{info.value!s} {info.value!r}")
    scanned = {
        "errors": "\n".join(errors),
        "logs": caplog.text + "".join(capfd.readouterr()),
        "dagster events, metadata and run configs": "\n".join(_dagster_texts(inst, result.run_ids)),
        "dagster instance files (event log, captured logs)": "\n".join(
            p.read_bytes().decode("latin-1") for p in home.rglob("*") if p.is_file()
        ),
        "stored objects": "\n".join(deployment.stored_texts()),
    }
    assert "missing" in scanned["errors"] and len(scanned["dagster events, metadata and run configs"]) > 10_000
    assert "manifest_url" in scanned["dagster events, metadata and run configs"]
    assert any(home.rglob("*.db")) and any(home.rglob("*.out")) or any(home.rglob("*.err"))
    leaks = {where: _hits(text) for where, text in scanned.items() if _hits(text)}
    assert leaks == {}
