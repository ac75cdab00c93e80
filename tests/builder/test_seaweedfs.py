"""The loader against a real S3 server (SeaweedFS on loopback, real SigV4 identities): a dataset uploaded with
the writer keys is read with the read-only keys, objects uploaded in multipart are fetched by parallel ranges,
and wrong or read-only keys fail with a masked StoreError that says what to do; the builder given a wrong secret
or read-only keys says which variables to check, before it ingests anything."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from shard_loader import StoreError, TokenDataset
from shard_loader.errors import TransientStoreError
from shard_loader.cli import main
from shard_loader.cache.download import DownloadConfig, download_file
from shard_loader.format import FileRef
from shard_loader.storage.retry import RequestStats, RetryPolicy
from shard_loader.storage.s3_client import describe_s3_error
from shard_loader.storage.s3 import S3Store, classify
from tests.support.seaweedfs import READER, WRITER, cli_build
from tests.support.synthetic import random_docs, write_dataset

pytestmark = pytest.mark.integration

BUCKET = "datasets"
PREFIX = "team/demo"


@pytest.fixture(scope="session")
def uploaded(seaweed, tmp_path_factory):
    """A synthetic dataset published under s3://datasets/team/demo with the writer keys."""
    seaweed.create_bucket(BUCKET)
    root = tmp_path_factory.mktemp("published")
    rng = np.random.default_rng(21)
    manifest = write_dataset(root, {"train": [random_docs(rng, 40) for _ in range(3)], "val": [random_docs(rng, 5)]})
    writer = seaweed.client(WRITER)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        writer.upload_file(str(path), BUCKET, f"{PREFIX}/{path.relative_to(root).as_posix()}")
    return manifest


@pytest.fixture
def reader_env(seaweed, monkeypatch, tmp_path):
    """Only what a trainer sets: the endpoint and the read-only keys; a default cache under a fresh XDG_CACHE_HOME."""
    for var in (
        "R2_DATASET_WRITE_ACCESS_KEY_ID",
        "R2_DATASET_WRITE_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "R2_DATASET_ACCOUNT_ID",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("S3_ENDPOINT_URL", seaweed.url)
    monkeypatch.setenv("R2_DATASET_READ_ACCESS_KEY_ID", READER[0])
    monkeypatch.setenv("R2_DATASET_READ_SECRET_ACCESS_KEY", READER[1])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def test_a_dataset_uploaded_by_the_writer_trains_with_the_read_only_keys(uploaded, reader_env, tmp_path):
    ds = TokenDataset(
        f"r2://{BUCKET}/{PREFIX}/manifest.json", seq_len=32, batch_size=4, cache_dir=tmp_path / "cache", window_shards=1
    )
    batches = list(ds)
    assert len(batches) == len(ds) > 0 and ds.opened.manifest.version == uploaded.version


def test_the_cli_fetches_into_the_default_cache_and_verifies_with_the_read_only_keys(
    uploaded, reader_env, tmp_path, capsys
):
    url = f"s3://{BUCKET}/{PREFIX}"
    assert main(["fetch", url]) == 0
    assert main(["verify", url]) == 0
    assert "all files verified" in capsys.readouterr().out
    cached = list((tmp_path / "xdg" / "shard_loader").glob(f"*/{uploaded.tokenizer.file.key}"))
    assert len(cached) == 1


def test_the_read_only_keys_list_but_cannot_write_and_say_so(seaweed, uploaded, tmp_path):
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import ClientError

    reader = seaweed.client(READER)
    keys = [o["Key"] for o in reader.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX)["Contents"]]
    assert f"{PREFIX}/manifest.json" in keys
    where = f"s3://{BUCKET}/{PREFIX}/intruder.json"
    with pytest.raises(ClientError) as put:
        reader.put_object(Bucket=BUCKET, Key=f"{PREFIX}/intruder.json", Body=b"{}")
    (tmp_path / "intruder.json").write_bytes(b"{}")
    with pytest.raises(
        S3UploadFailedError
    ) as upload:  # what a builder's upload_file raises: not a botocore error at all
        reader.upload_file(str(tmp_path / "intruder.json"), BUCKET, f"{PREFIX}/intruder.json")
    error = classify(put.value, where)
    assert isinstance(error, StoreError) and not isinstance(error, TransientStoreError) and "AccessDenied" in str(error)
    failure = describe_s3_error(upload.value, where, role="write")
    assert (
        not failure.transient
        and "AccessDenied" in failure.message
        and "R2_DATASET_WRITE_ACCESS_KEY_ID" in failure.message
    )
    for text in (str(error), failure.message):
        assert "lack permission" in text and READER[0] not in text and READER[1] not in text


def test_a_wrong_secret_fails_once_with_a_masked_error_naming_what_to_check(seaweed, uploaded):
    store = S3Store(
        f"s3://{BUCKET}/{PREFIX}",
        endpoint_url=seaweed.url,
        access_key_id=READER[0],
        secret_access_key="wrong-secret-0000000000000000",
    )
    with pytest.raises(StoreError, match="SignatureDoesNotMatch.*R2_DATASET_READ_SECRET_ACCESS_KEY") as info:
        store.read_bytes("manifest.json")
    assert READER[0] not in str(info.value) and "wrong-secret" not in str(info.value)


def test_an_object_uploaded_in_multipart_is_fetched_by_parallel_ranges(seaweed, uploaded, tmp_path):
    from boto3.s3.transfer import TransferConfig

    data = os.urandom(12 << 20)  # three 5 MiB-minimum parts: the smallest multipart upload with an uneven last part
    source = tmp_path / "blob.bin"
    source.write_bytes(data)
    key = "multipart/blob.bin"
    seaweed.client(WRITER).upload_file(
        str(source),
        BUCKET,
        f"{PREFIX}/{key}",
        Config=TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20),
    )
    head = seaweed.client(READER).head_object(Bucket=BUCKET, Key=f"{PREFIX}/{key}")
    assert head["ETag"].strip('"').endswith("-3")  # really stored as a 3-part multipart object
    ref = FileRef(key=key, size=len(data), sha256=hashlib.sha256(data).hexdigest())
    stats = RequestStats()
    store = S3Store(
        f"s3://{BUCKET}/{PREFIX}", endpoint_url=seaweed.url, access_key_id=READER[0], secret_access_key=READER[1]
    )
    path = download_file(store, ref, tmp_path / "cache" / key, DownloadConfig(part_size=1 << 20, concurrency=4), stats)
    assert Path(path).read_bytes() == data
    assert stats.requests == 12 and stats.retries == 0 and stats.range_fallbacks == 0


def test_s3fs_from_the_s3_extra_lists_and_reads_with_the_factorys_settings(seaweed, uploaded, reader_env):
    import s3fs

    from shard_loader.storage.s3_client import fsspec_options, resolve_settings

    fs = s3fs.S3FileSystem(**fsspec_options(resolve_settings()))
    listed = fs.ls(f"{BUCKET}/{PREFIX}/tokenizers", detail=False)
    assert listed and all(p.startswith(f"{BUCKET}/{PREFIX}/tokenizers/") for p in listed)
    assert fs.cat(f"{BUCKET}/{PREFIX}/manifest.json") == uploaded.dumps()


def test_the_builder_with_a_wrong_secret_says_which_variables_to_check_even_for_a_head(seaweed, uploaded):
    from shard_assets.lib.errors import ObjectStoreError
    from shard_assets.lib.store.s3 import S3ObjectStore
    from shard_loader.storage.s3_client import make_s3_client

    client = make_s3_client(seaweed.url, WRITER[0], "wrong-secret-0000000000000000", role="write", retries=1)
    store = S3ObjectStore(client, BUCKET, PREFIX, seaweed.url, retry=RetryPolicy(attempts=2, base_delay=0.01))
    with pytest.raises(ObjectStoreError) as info:  # a HEAD's 403 has no body, so no S3 code to explain it
        store.exists("manifest.json")
    message = str(info.value)
    assert (
        "head manifest.json failed: 403" in message
        and "R2_DATASET_WRITE_ACCESS_KEY_ID/R2_DATASET_WRITE_SECRET_ACCESS_KEY" in message
    )
    assert "\n" not in message and "wrong-secret" not in message and WRITER[0] not in message


def test_the_builder_with_read_only_keys_stops_before_any_ingest_naming_the_write_variables(seaweed, tmp_path):
    from tests.support.dagster_helpers import tiny_dataset

    seaweed.create_bucket("readonly-build")
    spec, _, _ = tiny_dataset(tmp_path)
    settings = {
        "DATASET_STORE": "r2",
        "S3_ENDPOINT_URL": seaweed.url,
        "R2_DATASET_BUCKET_NAME": "readonly-build",
        "DATASET_BINS_PATH": "tiny",
        "R2_DATASET_WRITE_ACCESS_KEY_ID": READER[0],
        "R2_DATASET_WRITE_SECRET_ACCESS_KEY": READER[1],  # the read-only pair, by mistake
    }
    out = cli_build(spec, tmp_path, settings, timeout=600)
    assert out.returncode == 2, out.stderr[-3000:]
    (line,) = [s for s in out.stderr.splitlines() if s.startswith("error:")]
    assert "AccessDenied" in line and "check R2_DATASET_WRITE_ACCESS_KEY_ID/R2_DATASET_WRITE_SECRET_ACCESS_KEY" in line
    assert (
        "ingest_job" not in out.stderr + out.stdout and READER[1] not in out.stderr + out.stdout
    )  # nothing ingested first
    assert "Contents" not in seaweed.client(WRITER).list_objects_v2(Bucket="readonly-build")
