"""A cache directory others can write to: a symlink (to a file outside, or dangling) or a directory planted where the
cache keeps one of its files or folders is never followed or used. Nothing outside the cache is written or deleted,
and the loader stops with an UnsafeCacheFileError naming the planted path."""

import os

import numpy as np
import pytest

from shard_loader import TokenDataset
from shard_loader.errors import UnsafeCacheFileError
from tests.support.http_server import FolderServer
from tests.support.positional import write_positional

pytestmark = pytest.mark.integration

SIZES = [int(n) for n in np.random.default_rng(21).integers(300, 900, size=4)]
OPTS = dict(seq_len=16, batch_size=2, seed=1, window_shards=1)

# Where each kind of cache file lives, from the first shard's .npy key and the paced layout's name.
FILES = {
    "part": lambda key, layout: f"{key}.part",
    "journal": lambda key, layout: f"{key}.journal",
    "lock": lambda key, layout: f"{key}.lock",
    "check": lambda key, layout: f"{key}.check",
    "lease": lambda key, layout: f"{key}.lease",
    "marker": lambda key, layout: (
        f"{key}.ok-*"
    ),  # named by the sha256 and status it binds: found once the file is cached
    "destination": lambda key, layout: key,
    "consumer record": lambda key, layout: f".consumers/{layout}.0.99999.0",
    "room lock": lambda key, layout: ".room.lock",
}
FOLDERS = {
    "key folder": lambda key, layout: key.split("/")[0],
    "consumers folder": lambda key, layout: ".consumers",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("pub")
    write_positional(root, SIZES)
    with FolderServer(root) as server:
        yield server


def _dataset(server, cache):
    return TokenDataset(
        f"{server.url}/manifest.json", cache_dir=cache, disk_budget=10 * 4096, **OPTS
    )  # paced: every kind is used


def _plant(tmp_path, server, rel, make):
    """Run a pass when the planted file needs the cached file present, plant it with `make(path)`, and run a pass."""
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"precious")
    ds = _dataset(server, cache)
    key, layout = ds.shards[0].npy.key, ds.cache.files.layout
    path = cache / rel(key, layout)
    if "*" in path.name:
        list(ds)  # the file is cached and marked, so its marker is looked for
        [path] = path.parent.glob(path.name)
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    make(path, outside)
    with pytest.raises(UnsafeCacheFileError) as refused:
        try:
            list(_dataset(server, cache))
        finally:
            ds.close()
    assert str(path) in str(refused.value)
    assert (
        sorted(os.listdir(outside)) == ["victim"] and (outside / "victim").read_bytes() == b"precious"
    )  # nothing written or deleted outside
    return refused.value


@pytest.mark.parametrize("kind", FILES)
@pytest.mark.parametrize("target", ["a file outside", "nothing (dangling)"])
def test_a_symlink_planted_for_a_cache_file_is_never_followed(tmp_path, server, kind, target):
    name = "victim" if target == "a file outside" else "new"
    error = _plant(tmp_path, server, FILES[kind], lambda path, outside: path.symlink_to(outside / name))
    assert "is a symlink where the cache keeps a regular file" in str(error)


@pytest.mark.parametrize("kind", FOLDERS)
def test_a_symlink_planted_for_a_cache_folder_is_never_followed(tmp_path, server, kind):
    error = _plant(
        tmp_path, server, FOLDERS[kind], lambda path, outside: path.symlink_to(outside, target_is_directory=True)
    )
    assert "is a symlink where the cache keeps a folder" in str(error)


@pytest.mark.parametrize("kind", ["marker", "lease", "check", "lock", "part", "journal", "destination", "room lock"])
def test_a_directory_where_a_cache_file_belongs_is_refused_naming_it(tmp_path, server, kind):
    error = _plant(tmp_path, server, FILES[kind], lambda path, outside: path.mkdir())
    assert "is a directory where the cache keeps a regular file" in str(error)


@pytest.mark.parametrize("kind", ["part", "lease", "journal", "lock", "check", "room lock"])
def test_a_hard_link_planted_for_a_cache_file_is_never_written_through(tmp_path, server, kind):
    """O_NOFOLLOW does not see a hard link: a cache file with a second name (st_nlink > 1) may be another file's inode,
    so the cache refuses to write through it (#34 case 7)."""
    error = _plant(tmp_path, server, FILES[kind], lambda path, outside: os.link(outside / "victim", path))
    assert "is a file that has 2 names (a hard link" in str(error)
