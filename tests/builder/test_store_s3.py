"""The builder's S3 store against S3 servers behind a proxy that plays each way a server treats a conditional put:
racing writers are never both told "written" (SeaweedFS, which honours If-None-Match atomically; moto behind a
proxy that ignores the header, which SigV4 signs, or answers 501 or 400: refused before any write); a record read
cut mid-body (moto) is retried and the build succeeds; a missing record and an unreadable one are different errors;
upload errors are masked one-line ObjectStoreErrors naming the key and the variable to check."""

import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import dagster as dg
import pytest

from shard_assets.defs.resources import DatasetResource, default_resources
from shard_assets.lib.errors import ConditionalWriteError, ObjectMissingError, ObjectStoreError, RecordMissingError
from shard_assets.lib.layout import raw_record_key
from shard_assets.lib.records import RawRecord, get_record
from shard_assets.lib.store.s3 import S3ObjectStore
from shard_assets.runner import build_dataset
from shard_loader.errors import NotFoundError, TransientStoreError
from shard_loader.storage.retry import RetryPolicy
from shard_loader.storage.s3_client import make_s3_client
from tests.support.dagster_helpers import tiny_dataset
from tests.support.s3_proxy import ACCESS_KEY, SECRET_KEY, S3Proxy, bucket_fixture
from tests.support.seaweedfs import WRITER

pytestmark = pytest.mark.integration

BUCKET = "store-tests"
RACERS = 6
FAST = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05)


s3 = bucket_fixture(BUCKET)


@pytest.fixture(scope="module")
def seaweed_proxy(seaweed):
    """The proxy in front of SeaweedFS (real SigV4, atomic If-None-Match), to play the other server behaviours."""
    seaweed.create_bucket(BUCKET)
    proxy = S3Proxy(urlparse(seaweed.url).port)
    try:
        yield proxy
    finally:
        proxy.close()


def _seaweed_store(proxy: S3Proxy, prefix: str) -> S3ObjectStore:
    client = make_s3_client(proxy.url, WRITER[0], WRITER[1], role="write", retries=1)
    return S3ObjectStore(client, BUCKET, prefix, proxy.url, retry=FAST)


@pytest.mark.parametrize("behaviour", ["honour", "ignore", "501", "400"])
def test_racing_conditional_puts_never_tell_two_writers_they_wrote_different_bytes(request, behaviour):
    if behaviour == "honour":
        proxy = request.getfixturevalue("seaweed_proxy")
        stores = [_seaweed_store(proxy, "race-honour") for _ in range(RACERS)]
    else:
        server = request.getfixturevalue("s3")
        proxy, stores = server.proxy, [server.write_store(BUCKET, f"race-{behaviour}") for _ in range(RACERS)]
    proxy.conditional = behaviour
    start = threading.Barrier(RACERS)

    def race(i: int) -> bool | ConditionalWriteError:
        start.wait(timeout=120)
        try:
            return stores[i].put_bytes("manifests/v1.json", f"writer {i}\n".encode(), if_absent=True)
        except ConditionalWriteError as exc:
            return exc

    try:
        with ThreadPoolExecutor(RACERS) as pool:
            told = list(pool.map(race, range(RACERS)))
    finally:
        proxy.conditional = "honour"
    written = [i for i, outcome in enumerate(told) if outcome is True]
    if behaviour == "honour":
        assert len(written) == 1 and told.count(False) == RACERS - 1
        assert stores[0].get_bytes("manifests/v1.json") == f"writer {written[0]}\n".encode()
    else:  # refused before anything is written, saying why, once per store (its preflight)
        assert written == [] and all(isinstance(o, ConditionalWriteError) for o in told)
        reason = (
            "ignores If-None-Match"
            if behaviour == "ignore"
            else f"answered {'NotImplemented' if behaviour == '501' else 'InvalidArgument'}"
        )
        assert all(reason in str(o) and "\n" not in str(o) for o in told), told[0]
        assert not stores[0].exists("manifests/v1.json") and stores[0].list("state/probes/") == []


def test_a_record_read_cut_mid_body_is_retried_and_the_build_succeeds(s3, tmp_path, monkeypatch):
    for var, value in {
        "DATASET_STORE": "r2",
        "S3_ENDPOINT_URL": s3.url,
        "R2_DATASET_BUCKET_NAME": BUCKET,
        "DATASET_BINS_PATH": "cut",
        "R2_DATASET_WRITE_ACCESS_KEY_ID": ACCESS_KEY,
        "R2_DATASET_WRITE_SECRET_ACCESS_KEY": SECRET_KEY,
    }.items():
        monkeypatch.setenv(var, value)
    spec, _, _ = tiny_dataset(tmp_path)
    resources = {"dataset": DatasetResource(spec_path=str(spec)), "store": default_resources()["store"]}
    s3.proxy.cut_gets, s3.proxy.cuts = (
        f"/{BUCKET}/cut/{raw_record_key('web.part0')}",
        0,
    )  # botocore does not retry a cut body
    try:
        result = build_dataset(dg.DagsterInstance.ephemeral(), DatasetResource(spec_path=str(spec)).spec(), resources)
    finally:
        s3.proxy.cut_gets = ""
    assert s3.proxy.cuts == 1 and result.partitions == 2 and result.left_out == 0 and all(result.checks.values())


def test_a_missing_record_and_an_unreadable_one_are_different_errors_keeping_their_cause(s3):
    store = s3.write_store(BUCKET, "kinds")
    with pytest.raises(
        RecordMissingError, match="raw/web/part9.json is missing .* materialise its asset first"
    ) as missing:
        get_record(store, "raw/web/part9.json", RawRecord, "tokenized_shards[web.part9]")
    assert isinstance(missing.value.__cause__, ObjectMissingError) and isinstance(
        missing.value.__cause__.__cause__, NotFoundError
    )
    store.put_bytes("raw/web/part8.json", b"{}")
    s3.proxy.fail_after[f"/{BUCKET}/kinds/raw/web/part8.json"] = 0  # AccessDenied for good: present, not readable
    try:
        with pytest.raises(ObjectStoreError) as unreadable:
            get_record(store, "raw/web/part8.json", RawRecord, "tokenized_shards[web.part8]")
    finally:
        s3.proxy.fail_after.clear()
    assert not isinstance(unreadable.value, ObjectMissingError) and "AccessDenied" in str(unreadable.value)
    s3.proxy.fail_puts = "/kinds/state/"  # 500 on every attempt: retried, then the last error is kept as the cause
    try:
        with pytest.raises(ObjectStoreError, match="failed after 3 attempts") as failed:
            store.put_bytes("state/x.json", b"{}")
    finally:
        s3.proxy.fail_puts = ""
    assert isinstance(failed.value.__cause__.__cause__, TransientStoreError) and store.stats.retries >= 2


def test_upload_errors_are_masked_and_name_the_key_and_what_to_check(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("R2_DATASET_WRITE_SECRET_ACCESS_KEY", "a-wrong-secret-value-0000")
    client = make_s3_client(s3.url, ACCESS_KEY, "a-wrong-secret-value-0000", role="write", retries=1)
    store = S3ObjectStore(client, "no-such-bucket", "p", s3.url, retry=FAST)
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 1024)
    with pytest.raises(ObjectStoreError) as caught:
        store.put_file("tokenized/f.bin", path)
    message = str(caught.value)
    assert "upload tokenized/f.bin failed" in message and "NoSuchBucket" in message and "\n" not in message
    assert "a-wrong-secret-value-0000" not in message
