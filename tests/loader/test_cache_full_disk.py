"""A full cache disk is a DiskBudgetError naming the cache directory, never a raw OSError (#34 case 7): the loader
fills a real, small tmpfs (mounted in a user and mount namespace of its own, so nothing outside sees it) until the
download journal's next line finds no space."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.support.http_server import FolderServer
from tests.support.patience import HUNG
from tests.support.synthetic import write_dataset

pytestmark = pytest.mark.integration

READER = textwrap.dedent(
    """
    import os, sys
    from shard_loader import TokenDataset
    from shard_loader.errors import DiskBudgetError

    url, disk = sys.argv[1], sys.argv[2]
    cache = os.path.join(disk, "cache")
    ds = TokenDataset(url, cache_dir=cache, seq_len=64, batch_size=2, window_shards=1)
    page = os.statvfs(disk).f_frsize
    first = ds.shards[0]
    need = sum(-(-ref.size // page) * page for ref in (first.npy, first.bin))  # the first window's files, exactly
    with open(os.path.join(disk, "filler"), "wb") as f:
        f.write(b"x" * (os.statvfs(disk).f_bavail * page - need))
    try:
        next(iter(ds))
    except DiskBudgetError as exc:
        print("DiskBudgetError:", exc)
        sys.exit(0)
    """
)


def _namespaces() -> bool:
    unshare = shutil.which("unshare")
    return bool(unshare) and subprocess.run([unshare, "-Urm", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _namespaces(), reason="needs unshare -Urm (user and mount namespaces) to mount a small tmpfs")
def test_a_full_cache_disk_is_a_disk_budget_error_naming_the_cache(tmp_path):
    rng = np.random.default_rng(2)
    shards = [[rng.integers(1, 50_000, size=200_000)] for _ in range(3)]  # 400 KB of uint16 tokens each
    write_dataset(tmp_path / "pub", {"train": shards, "val": [[rng.integers(1, 50_000, size=100)]]})
    disk = tmp_path / "disk"
    disk.mkdir()
    script = tmp_path / "reader.py"
    script.write_text(READER)
    with FolderServer(tmp_path / "pub") as server:
        out = subprocess.run(
            [
                "unshare",
                "-Urm",
                "sh",
                "-c",
                'mount -t tmpfs -o size=4m tmpfs "$1" && exec "$2" "$3" "$4" "$1"',
                "sh",
                str(disk),
                sys.executable,
                str(script),
                f"{server.url}/manifest.json",
            ],
            capture_output=True,
            text=True,
            timeout=HUNG,
        )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "No space left on device" in out.stdout, out
    assert f"the disk of the cache directory {disk}/cache is full" in out.stdout, out.stdout
