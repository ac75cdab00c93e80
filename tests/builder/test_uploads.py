"""Uploads overlap encoding, against a loopback S3 behind the R2-like proxy: a finished partition's shard files
go up while the next partition encodes, its record only after every file is up; an upload failure is kept for
its partition (no record, no object of it), and no work folder is left behind either way. A stored shard whose
bytes changed in place (same size) is replaced by the next upload of its key, in a bucket and in a folder."""

import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shard_assets.lib.encoders import encoders_for
from shard_assets.lib.errors import ObjectStoreError
from shard_assets.lib.layout import part_record_key
from shard_assets.lib.records import PartRecord, RawRecord, SourceFileRef, get_record
from shard_assets.lib.encoding import EncodeSettings
from shard_assets.lib.shard_build import PartitionUploads, TokenizeJob, build_partition_shards
from shard_assets.lib.spec import TokenizerSpec
from shard_assets.lib.store import LocalFolderStore
from shard_assets.lib.shard_build import upload_partition
from shard_assets.lib.tokenizer import build_tokenizer
from shard_loader.cache.checksum import sha256_file
from tests.support.s3_proxy import bucket_fixture
from tests.support.texts import doc_hashes

pytestmark = pytest.mark.integration

BUCKET = "uploads"


s3 = bucket_fixture(BUCKET)


def _setup(s3, tmp_path, prefix, store=None):
    store = store or s3.write_store(BUCKET, prefix)
    rng = np.random.default_rng(3)
    words = ["alpha", "beta", "gamma", "delta", "🙂", "мир"]
    docs = {
        p: [" ".join(rng.choice(words, size=int(n))) + f" {p}{i}" for i, n in enumerate(rng.integers(5, 200, size=300))]
        for p in ("a", "b")
    }
    text, record = build_tokenizer(TokenizerSpec(vocab_size=400), iter(docs["a"]))
    raws = []
    for p, texts in docs.items():
        pq.write_table(pa.table({"text": texts, "doc_hash": doc_hashes(texts)}), tmp_path / f"{p}.parquet")
        store.put_file(f"raw/{p}.parquet", tmp_path / f"{p}.parquet")
        raws.append(
            RawRecord(p, "src", SourceFileRef(f"/src/{p}", "f"), f"raw/{p}.parquet", "-", len(texts), "v", "run")
        )
    return store, text, record, raws


def _build(store, text, record, raw, workdir):
    engine, reference = encoders_for(text)
    job = TokenizeJob(
        store, record, engine, reference, EncodeSettings(record.eod_id, record.token_dtype, 0.2, 100), "run", "code"
    )
    return build_partition_shards(job, raw, workdir)


def test_a_partition_uploads_while_the_next_encodes_and_its_record_comes_last(s3, tmp_path):
    store, text, record, (raw_a, raw_b) = _setup(s3, tmp_path, "overlap")
    uploads, work_a, work_b = PartitionUploads(store), tmp_path / "work-a", tmp_path / "work-b"
    s3.proxy.puts.clear()
    s3.proxy.hold_puts = held = threading.Event()
    try:
        built_a = _build(store, text, record, raw_a, work_a)
        uploads.submit(built_a, work_a)
        built_b = _build(store, text, record, raw_b, work_b)  # encodes while a's first PUT is held at the server
        assert s3.proxy.puts == [] and work_a.exists() and not store.exists(part_record_key(record.fingerprint, "a"))
    finally:
        held.set()
        s3.proxy.hold_puts = None
    uploads.submit(built_b, work_b)
    assert uploads.wait() == {} and uploads.stored == ["a", "b"]
    assert not work_a.exists() and not work_b.exists()
    for built in (built_a, built_b):
        stored = get_record(store, part_record_key(record.fingerprint, built.record.partition), PartRecord, "test")
        keys = [f"/{BUCKET}/overlap/{ref.key}" for e in stored.shards.values() for ref in (e.npy, e.bin)]
        record_put = s3.proxy.puts.index(
            f"/{BUCKET}/overlap/{part_record_key(record.fingerprint, built.record.partition)}"
        )
        assert all(s3.proxy.puts.index(k) < record_put for k in keys)  # the record names only files already up
        for split, e in stored.shards.items():
            for ref in (e.npy, e.bin):
                got = tmp_path / "got"
                store.get_file(ref.key, got)
                assert sha256_file(got) == ref.sha256 and got.stat().st_size == ref.size


def test_an_upload_failure_is_kept_for_its_partition_which_gets_no_record_and_no_file(s3, tmp_path):
    store, text, record, (raw_a, raw_b) = _setup(s3, tmp_path, "failing")
    uploads, work_a, work_b = PartitionUploads(store), tmp_path / "work-a", tmp_path / "work-b"
    s3.proxy.fail_puts = "/train/a-"
    try:
        uploads.submit(_build(store, text, record, raw_a, work_a), work_a)
        uploads.submit(_build(store, text, record, raw_b, work_b), work_b)
        failed = uploads.wait()
    finally:
        s3.proxy.fail_puts = ""
    assert list(failed) == ["a"] and isinstance(failed["a"], ObjectStoreError) and "/train/a-" in str(failed["a"])
    assert uploads.stored == ["b"] and not work_a.exists() and not work_b.exists()
    keys = [k for k, _ in store.list("tokenized/")]
    assert keys and not [k for k in keys if "/a-" in k or k.endswith("/a.json")]
    assert store.exists(part_record_key(record.fingerprint, "b"))


@pytest.mark.parametrize("kind", ["bucket", "folder"])
def test_a_stored_shard_flipped_in_place_is_replaced_by_the_next_upload_of_its_key(s3, tmp_path, kind):
    folder = LocalFolderStore(tmp_path / "store") if kind == "folder" else None
    store, text, record, (raw_a, _) = _setup(s3, tmp_path, "flipped", folder)
    built = _build(store, text, record, raw_a, tmp_path / "work-1")
    upload_partition(store, built)
    ref = built.record.shards["train"].npy
    data = bytearray(store.get_bytes(ref.key))
    data[len(data) // 2] ^= 0xFF  # the same size: a size check cannot tell
    if folder is None:
        s3.client(via_proxy=False).put_object(Bucket=BUCKET, Key=f"flipped/{ref.key}", Body=bytes(data))
    else:
        (tmp_path / "store" / ref.key).write_bytes(bytes(data))
    assert store.get_bytes(ref.key) == bytes(data)
    unchanged = built.record.shards["val"].npy
    s3.proxy.puts.clear()
    rebuilt = _build(store, text, record, raw_a, tmp_path / "work-2")
    assert rebuilt.record.shards == built.record.shards  # the same content, so the same keys
    upload_partition(store, rebuilt)
    got = tmp_path / "got"
    store.get_file(ref.key, got)
    assert sha256_file(got) == ref.sha256 and got.stat().st_size == ref.size
    if folder is None:  # only the flipped shard (and the record) went up again: the others' ETags matched
        uploaded = {p.split("/flipped/", 1)[1] for p in s3.proxy.puts}
        assert ref.key in uploaded and unchanged.key not in uploaded
