"""The local folder store: a writer killed mid-write leaves a temp file that a later store sweeps once it is
stale, and a store lists a folder for stale temps once, not on every write into it."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from shard_assets.lib.store import LocalFolderStore
from shard_assets.lib.store.local import STALE_TEMP_SECONDS

ROOT = Path(__file__).resolve().parents[1]

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
