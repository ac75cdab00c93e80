"""The local folder store: a writer killed mid-write leaves a temp file that a later store sweeps once it is
stale, and a store lists a folder for stale temps once, not on every write into it; it refuses symlinks as the
loader's store does, tells a missing key from a refused one, and does not rewrite what it holds already."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shard_assets.lib.store import LocalFolderStore, ObjectMissingError, ObjectStoreError
from shard_loader.storage.local import STALE_TEMP_SECONDS
from shard_loader.errors import NotFoundError, UnsafeFileError

ROOT = Path(__file__).resolve().parents[2]

STUCK_WRITER = """
import sys, time
from shard_assets.lib.store import LocalFolderStore
def write(f):
    f.write(b"half a record")
    f.flush()
    print("writing", flush=True)
    time.sleep(600)
LocalFolderStore(sys.argv[1])._atomic_write("state/partitions/ab/web.part0.json", write)
"""


def _temps(folder: Path) -> list[Path]:
    return sorted(folder.glob(".*.tmp"))


def _age(path: Path) -> None:
    os.utime(path, (time.time() - STALE_TEMP_SECONDS - 1,) * 2)


def _killed_writer_temp(root: Path) -> Path:
    """The temp file a writer SIGKILLed in the middle of a write leaves behind."""
    proc = subprocess.Popen([sys.executable, "-c", STUCK_WRITER, str(root)], cwd=ROOT, stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"writing\n"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (left,) = _temps(root / "state/partitions/ab")
    return left


def test_a_killed_writers_temp_is_swept_by_the_next_store_once_stale_and_a_live_one_is_kept(tmp_path):
    left = _killed_writer_temp(tmp_path)
    LocalFolderStore(tmp_path).put_bytes("state/partitions/ab/web.part1.json", b"{}")
    assert left.exists()  # not yet stale: its writer could still be at work
    _age(left)
    live = left.with_name(".web.part2.json.live-writer.tmp")
    live.write_bytes(b"a writer still at work")
    store = LocalFolderStore(tmp_path)
    store.put_bytes("state/partitions/ab/web.part3.json", b"{}")
    assert _temps(left.parent) == [live]
    assert store.get_bytes("state/partitions/ab/web.part3.json") == b"{}"


def test_a_store_sweeps_a_folder_on_its_first_write_there_not_on_every_write(tmp_path):
    store = LocalFolderStore(tmp_path)
    folder = tmp_path / "tokenized/fp/parts"
    store.put_bytes("tokenized/fp/parts/a.json", b"{}")
    stale = folder / ".b.json.killed.tmp"
    stale.write_bytes(b"half")
    _age(stale)
    for i in range(100):
        store.put_bytes(f"tokenized/fp/parts/p{i}.json", b"{}")
    assert stale.exists()  # swept at this store's first write only: a write does not list its folder
    store.put_bytes("tokenized/fp/other/x.json", b"{}")  # another folder gets its own first sweep
    LocalFolderStore(tmp_path).put_bytes("tokenized/fp/parts/c.json", b"{}")  # a new store (a new run) sweeps again
    assert not stale.exists()


def test_a_missing_key_and_a_refused_one_are_different_errors_and_a_symlink_is_never_written_through(tmp_path):
    store = LocalFolderStore(tmp_path / "store")
    with pytest.raises(ObjectMissingError) as missing:
        store.get_bytes("raw/web/part0.json")
    assert isinstance(missing.value.__cause__, NotFoundError) and not store.exists("raw/web/part0.json")
    outside = tmp_path / "outside.json"
    outside.write_bytes(b"{}")
    (tmp_path / "store/raw/web").mkdir(parents=True)
    os.symlink(outside, tmp_path / "store/raw/web/part0.json")
    for call in (lambda: store.get_bytes("raw/web/part0.json"), lambda: store.put_bytes("raw/web/part0.json", b"[]")):
        with pytest.raises(
            ObjectStoreError, match="key raw/web/part0.json resolves to .*outside the dataset root"
        ) as refused:
            call()
        assert not isinstance(refused.value, ObjectMissingError) and isinstance(
            refused.value.__cause__, UnsafeFileError
        )
    assert outside.read_bytes() == b"{}" and store.list("raw/") == []  # a listing names regular files only


def test_what_the_store_holds_already_is_not_written_again(tmp_path):
    store = LocalFolderStore(tmp_path)
    assert store.put_if_changed("state/tokenizer.json", b"one") is True
    inode = (tmp_path / "state/tokenizer.json").stat().st_ino
    assert store.put_if_changed("state/tokenizer.json", b"one") is False
    assert (tmp_path / "state/tokenizer.json").stat().st_ino == inode  # not replaced by an equal copy
    assert (
        store.put_if_changed("state/tokenizer.json", b"two") is True
        and store.get_bytes("state/tokenizer.json") == b"two"
    )


def test_the_preflight_proves_writes_and_write_once_puts_and_leaves_nothing(tmp_path):
    store = LocalFolderStore(tmp_path)
    store.preflight()
    assert store.list("") == []
    assert store.put_bytes("manifests/v.json", b"first", if_absent=True) is True
    assert store.put_bytes("manifests/v.json", b"second", if_absent=True) is False
    assert store.get_bytes("manifests/v.json") == b"first"
