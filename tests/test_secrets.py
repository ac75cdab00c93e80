"""Secrets never leak: a build to the loopback bucket and a load from it run with recognisable fake keys;
logs, Dagster events and run configs, metadata, every stored object and every error text are scanned."""

import logging

import dagster as dg
import pytest

import shard_loader
from shard_assets.build import build_dataset
from shard_assets.resources import DatasetResource, store_resource_from_env
from shard_assets.store import ObjectStoreError
from shard_loader import ShardLoaderError, TokenDataset
from tests.dagster_helpers import tiny_dataset
from tests.s3_proxy import LoopbackS3

WRITE_ID, WRITE_SECRET = "AKIAZEBRAWRITE000001", "zebra-write-secret-MustNeverLeak-000001"
READ_ID, READ_SECRET = "AKIAZEBRAREAD0000002", "zebra-read-secret-MustNeverLeak-0000002"
SECRETS = (WRITE_ID, WRITE_SECRET, READ_ID, READ_SECRET)


def _hits(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def test_no_key_appears_in_logs_events_metadata_objects_or_errors(tmp_path, monkeypatch, caplog, capfd):
    s3 = LoopbackS3()
    try:
        s3.create_bucket("secret-test")
        for var, value in {
            "DATASET_STORE": "r2", "S3_ENDPOINT_URL": s3.url, "R2_DATASET_ACCOUNT_ID": "acct", "R2_DATASET_BUCKET_NAME": "secret-test",
            "DATASET_BINS_PATH": "ds", "R2_DATASET_WRITE_ACCESS_KEY_ID": WRITE_ID, "R2_DATASET_WRITE_SECRET_ACCESS_KEY": WRITE_SECRET,
            "R2_DATASET_READ_ACCESS_KEY_ID": READ_ID, "R2_DATASET_READ_SECRET_ACCESS_KEY": READ_SECRET,
        }.items():
            monkeypatch.setenv(var, value)
        caplog.set_level(logging.DEBUG)
        spec, _, _ = tiny_dataset(tmp_path)
        inst = dg.DagsterInstance.ephemeral()
        resources = {"dataset": DatasetResource(spec_path=str(spec)), "store": store_resource_from_env()}
        result = build_dataset(inst, shard_loader_spec(spec), resources)
        ds = TokenDataset("r2://secret-test/ds/manifest.json", seq_len=16, batch_size=2, cache_dir=tmp_path / "cache", store_options={"endpoint_url": s3.url})
        assert sum(1 for _ in ds) > 0

        errors = []
        for attempt in (
            lambda: shard_loader.open_manifest("r2://secret-test/missing/manifest.json", endpoint_url=s3.url),
            lambda: shard_loader.open_manifest("r2://no-such-bucket/manifest.json", endpoint_url=s3.url),
            lambda: store_resource_from_env().store().get_bytes("missing/key.json"),
        ):
            with pytest.raises((ShardLoaderError, ObjectStoreError)) as info:
                attempt()
            errors.append(f"{info.value!s} {info.value!r}")
        s3.proxy.fail_after["/secret-test/ds/manifest.json"] = 0
        with pytest.raises(ShardLoaderError) as info:
            shard_loader.open_manifest("r2://secret-test/ds/manifest.json", endpoint_url=s3.url)
        errors.append(str(info.value))

        scanned = {"errors": "\n".join(errors), "logs": caplog.text + "".join(capfd.readouterr())}
        events = []
        for run_id in result.run_ids:
            events += [str(e) for e in inst.all_logs(run_id)]
            events.append(str(inst.get_run_by_id(run_id).run_config))
        scanned["dagster events and run configs"] = "\n".join(events)
        client = s3.client(via_proxy=False)
        keys = [o["Key"] for o in client.list_objects_v2(Bucket="secret-test")["Contents"]]
        scanned["stored objects"] = "\n".join(client.get_object(Bucket="secret-test", Key=k)["Body"].read().decode("latin-1") for k in keys)
        assert any(k.endswith("manifest.json") for k in keys) and len(keys) > 10
        assert "AccessDenied" in scanned["errors"] and "secret-test" in scanned["errors"]
        leaks = {where: _hits(text) for where, text in scanned.items() if _hits(text)}
        assert leaks == {}
    finally:
        s3.close()


def shard_loader_spec(path):
    from shard_assets.spec import load_spec

    return load_spec(path)
