"""One rank's downloads into a node cache, the target of the processes test_s3 spawns: a module of its own, so
each child imports shard_loader and boto3, not the test module's Dagster (five such children took minutes to
start on a loaded machine)."""

from pathlib import Path

from shard_loader.cache.download import DownloadConfig, download_file
from shard_loader.format import FileRef
from shard_loader.storage.s3 import S3Store
from tests.support.s3_proxy import ACCESS_KEY, SECRET_KEY


def rank_download(url: str, bucket: str, refs: list[dict], cache: str) -> None:
    store = S3Store(f"s3://{bucket}", endpoint_url=url, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY)
    for ref in refs:
        download_file(
            store, FileRef(**ref), Path(cache) / ref["key"], DownloadConfig(part_size=128 << 10, concurrency=4)
        )
