"""The builder's S3 store against a loopback S3 server behind an R2-like proxy: versioned manifests stay
write-once whether the server honours If-None-Match, refuses it (501) or ignores it, and upload errors are
masked one-line ObjectStoreErrors naming the key and the variable to check."""

import pytest

from shard_assets.lib.errors import ObjectStoreError
from shard_assets.lib.store.s3 import S3ObjectStore
from shard_loader.storage.s3_client import make_s3_client
from tests.support.s3_proxy import ACCESS_KEY, loopback_s3_with_bucket

pytestmark = pytest.mark.integration

BUCKET = "store-tests"


@pytest.fixture(scope="module")
def s3():
    with loopback_s3_with_bucket(BUCKET) as server:
        yield server


@pytest.mark.parametrize("behaviour", ["honour", "refuse", "ignore"])
def test_a_versioned_manifest_is_written_once_whatever_the_server_does_with_if_none_match(s3, behaviour):
    s3.proxy.conditional = behaviour
    try:
        store = s3.write_store(BUCKET, f"cond-{behaviour}")
        assert store.put_bytes("manifests/v1.json", b"first", if_absent=True) is True
        assert store.put_bytes("manifests/v1.json", b"second", if_absent=True) is False
        assert store.get_bytes("manifests/v1.json") == b"first"
    finally:
        s3.proxy.conditional = "honour"


def test_upload_errors_are_masked_and_name_the_key_and_what_to_check(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("R2_DATASET_WRITE_SECRET_ACCESS_KEY", "a-wrong-secret-value-0000")
    client = make_s3_client(s3.url, ACCESS_KEY, "a-wrong-secret-value-0000", role="write", retries=1)
    store = S3ObjectStore(client, "no-such-bucket", "p", s3.url)
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 1024)
    with pytest.raises(ObjectStoreError) as caught:
        store.put_file("tokenized/f.bin", path)
    message = str(caught.value)
    assert "upload tokenized/f.bin failed" in message and "NoSuchBucket" in message and "\n" not in message
    assert "a-wrong-secret-value-0000" not in message
