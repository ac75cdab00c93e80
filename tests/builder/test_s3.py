"""Issue 3 against a real S3 HTTP server on loopback (moto behind an R2-like proxy): build to the
bucket with Dagster, load with a fresh cache, faults, tampering, resume, shared caches."""

import hashlib
import multiprocessing
import os

import dagster as dg
import pytest

from shard_assets.runner import build_dataset
from shard_assets.defs.resources import DatasetResource, default_resources
from shard_assets.lib.spec import load_spec
from shard_loader import IntegrityError, StoreError, TokenDataset
from shard_loader.cache.download import DownloadConfig, download_file
from shard_loader.format import FileRef
from shard_loader.storage.retry import RequestStats, RetryPolicy
from shard_loader.storage.s3 import S3Store
from shard_assets.lib.mixture.components import pin_component
from tests.support.http_server import Faults
from tests.support.mixture_files import Part, write_components, write_mixture
from tests.support.patience import HUNG
from tests.support.rank_download import rank_download
from tests.support.s3_proxy import ACCESS_KEY, SECRET_KEY, bucket_fixture

pytestmark = pytest.mark.integration

BUCKET = "datasets"


s3 = bucket_fixture(BUCKET)


@pytest.fixture
def r2_env(s3, monkeypatch):
    for var, value in {
        "DATASET_STORE": "r2",
        "S3_ENDPOINT_URL": s3.url,
        "R2_DATASET_ACCOUNT_ID": "0123456789abcdef",
        "R2_DATASET_BUCKET_NAME": BUCKET,
        "DATASET_BINS_PATH": "team/demo",
        "R2_DATASET_WRITE_ACCESS_KEY_ID": ACCESS_KEY,
        "R2_DATASET_WRITE_SECRET_ACCESS_KEY": SECRET_KEY,
        "R2_DATASET_READ_ACCESS_KEY_ID": ACCESS_KEY,
        "R2_DATASET_READ_SECRET_ACCESS_KEY": SECRET_KEY,
    }.items():
        monkeypatch.setenv(var, value)
    for var in ("AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION"):
        monkeypatch.delenv(var, raising=False)


def _upload(s3, key: str, data: bytes) -> FileRef:
    s3.client(via_proxy=False).put_object(Bucket=BUCKET, Key=key, Body=data)
    return FileRef(key=key, size=len(data), sha256=hashlib.sha256(data).hexdigest())


def _store(s3, **options) -> S3Store:
    return S3Store(
        f"s3://{BUCKET}", endpoint_url=s3.url, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY, **options
    )


def test_build_to_the_bucket_then_train_from_it_with_a_fresh_cache(s3, r2_env, tmp_path, demo_spec):
    resources = {"dataset": DatasetResource(spec_path=str(demo_spec)), "store": default_resources()["store"]}
    result = build_dataset(dg.DagsterInstance.ephemeral(), load_spec(demo_spec), resources)
    assert result.manifest_url == f"s3://{BUCKET}/team/demo/manifest.json"
    assert s3.proxy.rejected["PUT"] == 0  # R2-like endpoint accepted every upload
    ds = TokenDataset(
        f"r2://{BUCKET}/team/demo/manifest.json",
        seq_len=128,
        batch_size=4,
        cache_dir=tmp_path / "cache",
        window_shards=1,
        store_options={"endpoint_url": s3.url},
    )
    batches = list(ds)
    assert len(batches) == len(ds) > 0
    assert sum(b["input_ids"].size for b in batches) > 0.9 * result.tokens["train"] - 4 * 129 * len(ds.windows) * 4
    m = ds.opened.manifest
    assert m.splits["train"].tokens == result.tokens["train"]
    assert not list(
        (tmp_path / "cache").rglob("tokenized/**/*.npy")
    )  # rotated out: finished windows deleted (the shard table stays)


def test_the_default_botocore_checksums_are_refused_and_the_store_avoids_them(s3, r2_env, tmp_path):
    with pytest.raises(Exception, match="NotImplemented"):
        s3.client().put_object(Bucket=BUCKET, Key="probe", Body=b"x")  # what boto3 does by default against R2
    store = default_resources()["store"].store()
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(12 << 20))
    from shard_assets.lib.store import s3 as s3_module

    before = s3.proxy.multipart_uploads
    s3_module.MULTIPART_THRESHOLD, old = 5 << 20, s3_module.MULTIPART_THRESHOLD
    try:
        store.put_file("checks/big.bin", big)
    finally:
        s3_module.MULTIPART_THRESHOLD = old
    assert s3.proxy.multipart_uploads == before + 1
    assert store.get_bytes("checks/big.bin") == big.read_bytes()
    assert store.put_bytes("checks/once.json", b"1", if_absent=True) is True
    assert store.put_bytes("checks/once.json", b"2", if_absent=True) is False
    assert store.get_bytes("checks/once.json") == b"1"


def test_downloads_complete_and_verify_through_injected_faults(s3, tmp_path):
    data = os.urandom(6 << 20)
    ref = _upload(s3, "faulty/blob.bin", data)
    s3.proxy.faults = Faults(
        error_rate=0.15, reset_rate=0.1, truncate_rate=0.1, stall_rate=0.05, stall_seconds=2.0, seed=42
    )
    stats = RequestStats()
    try:
        config = DownloadConfig(
            part_size=256 << 10, concurrency=4, retry=RetryPolicy(attempts=12, base_delay=0.01, max_delay=0.2)
        )
        path = download_file(_store(s3, timeout=1.0), ref, tmp_path / ref.key, config, stats)
    finally:
        injected, s3.proxy.faults = dict(s3.proxy.faults.injected), Faults()
    assert path.read_bytes() == data
    assert sum(injected.values()) > 0 and stats.retries > 0 and stats.failures == 0
    assert stats.bytes == len(data) and stats.requests == 24 + stats.retries


def test_a_shard_that_differs_from_the_manifest_never_enters_the_cache(s3, tmp_path):
    ref = _upload(s3, "tampered/shard.npy", b"real bytes" * 1000)
    lie = FileRef(key=ref.key, size=ref.size, sha256=hashlib.sha256(b"other").hexdigest())
    with pytest.raises(IntegrityError, match="tampered/shard.npy"):
        download_file(_store(s3), lie, tmp_path / lie.key)
    assert list((tmp_path / "tampered").iterdir()) == []  # no part, no journal, and the lock went with the download


def test_an_interrupted_download_resumes_without_refetching_completed_parts(s3, tmp_path):
    ref = _upload(s3, "resume/blob.bin", os.urandom(40 * (64 << 10)))
    path = f"/{BUCKET}/{ref.key}"
    config = DownloadConfig(part_size=64 << 10, concurrency=1, retry=RetryPolicy(attempts=2, base_delay=0.01))
    s3.proxy.fail_after[path] = 15
    with pytest.raises(StoreError, match="AccessDenied"):
        download_file(_store(s3), ref, tmp_path / ref.key, config)
    done = len((tmp_path / "resume/blob.bin.journal").read_text().split())
    assert done == 15
    del s3.proxy.fail_after[path]
    s3.proxy.gets[path] = 0
    download_file(_store(s3), ref, tmp_path / ref.key, config)
    assert s3.proxy.gets[path] == 40 - done
    assert hashlib.sha256((tmp_path / ref.key).read_bytes()).hexdigest() == ref.sha256


def _shared_memory() -> set[str]:
    """Shared-memory segments, less those other programs on the machine make and remove meanwhile: any
    multiprocessing program's semaphores (another test run's too) and a PostgreSQL server's dynamic shared memory."""
    return {name for name in os.listdir("/dev/shm") if not name.startswith(("sem.mp-", "PostgreSQL."))}


def test_ranks_sharing_a_cache_fetch_each_object_once_and_jobs_do_not_interfere(s3, tmp_path):
    refs = [_upload(s3, f"shared/{i}.bin", os.urandom(1 << 20)) for i in range(3)]
    shm_before = _shared_memory()
    ctx = multiprocessing.get_context("spawn")
    jobs = [(str(tmp_path / "node-cache"),)] * 4 + [(str(tmp_path / "other-job"),)]
    procs = [
        ctx.Process(target=rank_download, args=(s3.url, BUCKET, [r.__dict__ for r in refs], cache)) for (cache,) in jobs
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(HUNG)
        if p.exitcode is None:
            p.kill()
        assert p.exitcode == 0, f"a rank exited with {p.exitcode} (None: still running after {HUNG} s, killed)"
    for ref in refs:
        assert s3.proxy.gets[f"/{BUCKET}/{ref.key}"] == 2 * 8  # 8 parts, once for the node, once for the other job
        for cache in ("node-cache", "other-job"):
            assert hashlib.sha256((tmp_path / cache / ref.key).read_bytes()).hexdigest() == ref.sha256
    assert _shared_memory() == shm_before
    leftovers = {p.name for p in tmp_path.rglob("*") if p.is_file() and not p.name.endswith((".bin", ".lock"))}
    assert leftovers == set()


def test_keys_given_as_store_options_never_reach_logs_or_errors(s3, monkeypatch, tmp_path, caplog):
    import logging

    key_id, secret = "AKIAOPTIONSONLY00077", "options-only-secret-MustNeverLeak-0077"
    for var in (
        "R2_DATASET_READ_ACCESS_KEY_ID",
        "R2_DATASET_READ_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ):
        monkeypatch.delenv(var, raising=False)
    caplog.set_level(logging.DEBUG)  # botocore logs whole requests, the Authorization header with the key id included
    ref = _upload(s3, "options/blob.bin", os.urandom(1000))
    options = {"endpoint_url": s3.url, "access_key_id": key_id, "secret_access_key": secret}
    store = S3Store(f"s3://{BUCKET}", **options)
    download_file(store, ref, tmp_path / ref.key)
    errors = []
    s3.proxy.fail_after[f"/{BUCKET}/options/denied.json"] = 0
    for key in ("options/missing.json", "options/denied.json"):
        with pytest.raises(StoreError) as info:
            store.read_bytes(key)
        errors.append(f"{info.value!s} {info.value!r}")
    text = caplog.text + "\n".join(errors)
    assert "Authorization" in caplog.text and "AccessDenied" in text
    assert key_id not in text and secret not in text


def test_manifests_tables_mixture_files_and_sizes_are_read_through_refused_requests(s3, tmp_path):
    """A 503 or a reset on a small whole-object read (a mixture file, a manifest, a shard table) or a HEAD is retried as
    a shard's download is: one refused request must not end a trainer's start or fail a mixture's publish."""
    parts = [Part("web", (3_000, 2_000, 2_500), 0.7, 0), Part("code", (1_500, 2_200), 0.3, 1)]
    local = write_components(tmp_path / "local", parts)
    write_mixture(local, "blend", parts, tokens_per_epoch=8_000)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        _upload(s3, f"retried/{path.relative_to(local).as_posix()}", path.read_bytes())
    options = {"seq_len": 64, "batch_size": 4}
    expected = [b["input_ids"] for b in TokenDataset(str(local / "mixtures/blend.json"), **options)]
    keys = {"endpoint_url": s3.url, "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY}
    s3.proxy.faults = Faults(error_rate=0.3, reset_rate=0.1, seed=7)
    try:
        ds = TokenDataset(
            f"s3://{BUCKET}/retried/mixtures/blend.json", cache_dir=tmp_path / "cache", store_options=keys, **options
        )
        served = [b["input_ids"] for b in ds]
        pinned = pin_component(f"s3://{BUCKET}/retried/web", S3Store(f"s3://{BUCKET}", **keys).client)
    finally:
        injected, s3.proxy.faults = dict(s3.proxy.faults.injected), Faults()
    assert len(served) == len(expected) and all((a == b).all() for a, b in zip(served, expected))
    assert pinned.manifest.dataset == "web" and injected["error"] + injected["reset"] > 0
    refused_first = [
        k for k in ("mixtures/blend.json", "web/manifest.json") if s3.proxy.gets[f"/{BUCKET}/retried/{k}"] > 1
    ]
    assert refused_first, dict(s3.proxy.gets)  # some whole-object read was refused and read again
